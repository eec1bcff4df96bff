// The decode kernel's PV over codes that widen to 16-bit numbers, two
// tokens a step (int8's loops in integer units, fp8's on bf16 dot
// products): one loop, each format's policy. Internal to core.
#pragma once

#include <algorithm>

#include "kvformats/page_loops_avx512.h"

namespace attn::internal {

// PV over codes that widen to 16-bit numbers (int8's and fp8's loops), two
// tokens a step: the rows of tokens 2t and 2t + 1 interleaved by 16-bit
// unpacks meet the pair of a row's weights (pairs[i * np + t], token 2t in
// the low half), one P::Dot a 16-lane pair. P gives Acc (the sums' type),
// Zero, Words (32 codes at p as 16-bit numbers), Dot (acc + the sums of
// pairs of products a lane) and Floats (the sums as floats); its functions
// carry their own targets, a subset of ATTN_PAIRS's.
#define ATTN_PAIRS \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512bf16,avx2,fma,f16c")))

// Runs step(t, j, second) over c tokens two at a time (token pair t: j =
// 2t, and second false for a last odd token), prefetching W chunks' lines
// of `ahead` (or null) one each a step (a burst of them at once stalled on
// the fill buffers); a later chunk may have fewer lines (the last one of
// an odd c), and each chunk's prefetches stop at its own. Inlined into its
// caller, so that `step` inlines there with the caller's target.
template <int W, typename Step>
__attribute__((always_inline)) inline void PairSchedule(int64_t c, const PairAhead* ahead,
                                                        const Step& step) {
  // Chunks' lines never grow with x, so the last chunk's are the fewest.
  const int64_t full = c / 2, with = ahead != nullptr ? std::min(ahead[W - 1].lines, full) : 0;
  int64_t t = 0;
  for (; t < with; ++t) {
    for (int u = 0; u < W; ++u) PrefetchLine(ahead[u].at + t * 64);
    step(t, 2 * t, true);
  }
  for (; t < full; ++t) step(t, 2 * t, true);
  for (int u = 0; u < W && ahead != nullptr; ++u) {
    for (int64_t l = t; l < ahead[u].lines; ++l) PrefetchLine(ahead[u].at + l * 64);
  }
  if (c % 2 != 0) step(full, c - 1, false);
}

// R rows (1 to 4) by 32 W columns at x of o (dv apart), over tokens [0, c)
// of v, added times unit[i]: with W = 2 a pair's weights meet twice the
// codes, and four rows' sums are sixteen chains (eight waited on the dot
// products' latency). `ahead` (or null): W chunks' lines of the page read
// next (PairAheadOf), as PairSchedule prefetches them.
template <typename P, int R, int W>
ATTN_PAIRS void PairRows512(const int32_t* pairs, int64_t np, const float* unit, const uint8_t* v,
                            int64_t c, int64_t dv, int64_t x, float* o, const PairAhead* ahead) {
  using Acc = typename P::Acc;
  Acc lo[R * W], hi[R * W];
  for (int i = 0; i < R * W; ++i) lo[i] = hi[i] = P::Zero();
  const auto step = [&](int64_t t, int64_t j, bool second) ATTN_PAIRS {
    for (int u = 0; u < W; ++u) {
      const __m512i a = P::Words(v + j * dv + x + 32 * u);
      const __m512i b = second ? P::Words(v + (j + 1) * dv + x + 32 * u) : _mm512_setzero_si512();
      const __m512i ilo = _mm512_unpacklo_epi16(a, b), ihi = _mm512_unpackhi_epi16(a, b);
      for (int i = 0; i < R; ++i) {
        const __m512i w = _mm512_set1_epi32(pairs[i * np + t]);
        lo[i * W + u] = P::Dot(lo[i * W + u], ilo, w);
        hi[i * W + u] = P::Dot(hi[i * W + u], ihi, w);
      }
    }
  };
  PairSchedule<W>(c, ahead, step);
  for (int i = 0; i < R; ++i) {
    for (int u = 0; u < W; ++u) {
      AddPairSums(P::Floats(lo[i * W + u]), P::Floats(hi[i * W + u]), unit[i],
                  o + i * dv + x + 32 * u);
    }
  }
}

// R rows by 64 columns at x (two) or 32: PairRows512, or the policy's own
// Rows64<R> where it sets kRows64.
template <typename P, int R>
ATTN_PAIRS void PairPass(bool two, const int32_t* pairs, int64_t np, const float* unit,
                         const uint8_t* v, int64_t c, int64_t dv, int64_t x, float* o,
                         const PairAhead* pf) {
  if (!two) return PairRows512<P, R, 1>(pairs, np, unit, v, c, dv, x, o, pf);
  if constexpr (P::kRows64) {
    P::template Rows64<R>(pairs, np, unit, v, c, dv, x, o, pf);
  } else {
    PairRows512<P, R, 2>(pairs, np, unit, v, c, dv, x, o, pf);
  }
}

// Every row of o [rows, dv] (dv a multiple of 32) += its weights' pairs
// (np a row) times the codes of tokens [0, c) of v, times unit[row]: 64
// columns a pass where they are left (PairPass), four rows at a time; `next` (or
// null) the page read next, prefetched by the first rows' passes.
template <typename P>
ATTN_PAIRS void PairPasses512(const int32_t* pairs, int64_t np, const float* unit, int64_t rows,
                              const uint8_t* v, int64_t c, int64_t dv, float* o,
                              const uint8_t* next) {
  for (int64_t x = 0; x < dv;) {
    const bool two = x + 64 <= dv;
    const PairAhead ahead[2] = {PairAheadOf(next, c, dv, x),
                                two ? PairAheadOf(next, c, dv, x + 32) : PairAhead{}};
    const PairAhead* first = next != nullptr ? ahead : nullptr;
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) {
      PairPass<P, 4>(two, pairs + r * np, np, unit + r, v, c, dv, x, o + r * dv,
                     r == 0 ? first : nullptr);
    }
    for (; r < rows; ++r) {
      PairPass<P, 1>(two, pairs + r * np, np, unit + r, v, c, dv, x, o + r * dv,
                     r == 0 ? first : nullptr);
    }
    x += two ? 64 : 32;
  }
}

}  // namespace attn::internal
