// The decode kernel's PV over codes that widen to 16-bit numbers, two
// tokens a step (int8's loops in integer units, fp8's on bf16 dot
// products): one AVX-512 loop, each format's policy; and int8's on the
// AVX2 tier (PairPasses256). Internal to core.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

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

// ---- the AVX2 tier: int8 codes ----------------------------------------------

// Weights of `rows` rows over c tokens (c <= 256, so that a sum of 128
// VPMADDWD pairs stays in int32) as int16 against each row's largest, 2 *
// ceil(c / 2) a row (an odd last token paired with 0), and each row's
// scale: as the AVX-512 tier's RoundWeights, 8 at a time.
ATTN_DECODE inline void RoundWeights256(const float* p, int64_t rows, int64_t ldp, int64_t c,
                                        LineVector<int16_t>* w16, std::vector<float>* scale) {
  const int64_t np = (c + 1) / 2;
  w16->resize(static_cast<size_t>(rows * 2 * np));
  scale->resize(static_cast<size_t>(rows));
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* pr = p + r * ldp;
    __m256 m = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 8 <= c; j += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(pr + j)));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, m);
    float amax = 0.0f;
    for (float v : lanes) amax = std::max(amax, v);
    for (; j < c; ++j) amax = std::max(amax, std::fabs(pr[j]));
    const float inv = amax > 0.0f ? 32767.0f / amax : 0.0f;
    (*scale)[static_cast<size_t>(r)] = amax / 32767.0f;
    int16_t* dst = w16->data() + r * 2 * np;  // read as int32 pairs: j low, j + 1 high
    for (j = 0; j + 8 <= c; j += 8) {
      const __m256i w = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(pr + j), _mm256_set1_ps(inv)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + j),
                       _mm_packs_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1)));
    }
    for (; j < c; ++j) {  // (a NaN weight as 0: its row is answered NaN whatever its sums)
      const float w = pr[j] * inv;
      dst[j] = w == w ? static_cast<int16_t>(std::nearbyint(std::clamp(w, -32767.0f, 32767.0f))) : 0;
    }
    if (c % 2 != 0) dst[c] = 0;
  }
}

// 16 int8 codes at p as 16-bit numbers; acc + the sums of pairs of
// products a lane (VPMADDWD). (Functions, not lambdas: a lambda's
// function-pointer thunk has no target attribute, and GCC warned of its
// AVX return.)
ATTN_DECODE inline __m256i Int8Words256(const int8_t* p) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
ATTN_DECODE inline __m256i DotWords256(__m256i acc, __m256i a, __m256i b) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
}

// R rows (1 or 4) by 16 columns at x of o (dv apart), over tokens [0, c) of
// int8 codes v, added times unit[i]: tokens 2t and 2t + 1 widened,
// interleaved by unpacks and met with the pair of a row's weights, 2 R
// chains of VPMADDWD and adds, two tokens a step as PairSchedule runs them;
// `ahead` (or null): this 16-column chunk's lines of the page read next.
template <int R>
ATTN_DECODE void PairRows256(const int32_t* pairs, int64_t np, const float* unit, const int8_t* v,
                             int64_t c, int64_t dv, int64_t x, float* o, const PairAhead* ahead) {
  __m256i lo[R], hi[R];
  for (int i = 0; i < R; ++i) lo[i] = hi[i] = _mm256_setzero_si256();
  const auto step = [&](int64_t t, int64_t j, bool second) ATTN_DECODE {
    const __m256i a = Int8Words256(v + j * dv + x);
    const __m256i b = second ? Int8Words256(v + (j + 1) * dv + x) : _mm256_setzero_si256();
    const __m256i il = _mm256_unpacklo_epi16(a, b), ih = _mm256_unpackhi_epi16(a, b);
    for (int i = 0; i < R; ++i) {
      const __m256i w = _mm256_set1_epi32(pairs[i * np + t]);
      lo[i] = DotWords256(lo[i], il, w);
      hi[i] = DotWords256(hi[i], ih, w);
    }
  };
  PairSchedule<1>(c, ahead, step);
  // lo holds columns 0-3 and 8-11 of the 16, hi 4-7 and 12-15.
  for (int i = 0; i < R; ++i) {
    const __m256 u = _mm256_set1_ps(unit[i]);
    float* oi = o + i * dv + x;
    const __m256 first = _mm256_cvtepi32_ps(_mm256_permute2x128_si256(lo[i], hi[i], 0x20));
    const __m256 second = _mm256_cvtepi32_ps(_mm256_permute2x128_si256(lo[i], hi[i], 0x31));
    _mm256_storeu_ps(oi, _mm256_fmadd_ps(first, u, _mm256_loadu_ps(oi)));
    _mm256_storeu_ps(oi + 8, _mm256_fmadd_ps(second, u, _mm256_loadu_ps(oi + 8)));
  }
}

// Every row of o [rows, dv] (dv a multiple of 16) += its weights' pairs (np
// a row) times the codes of tokens [0, c), times unit[row]: 16 columns a
// pass, four rows at a time; the first rows' passes prefetch `next` (or
// null), each its chunk's share (PairAheadOf).
ATTN_DECODE inline void PairPasses256(const int32_t* pairs, int64_t np, const float* unit,
                                      int64_t rows, const int8_t* v, int64_t c, int64_t dv,
                                      float* o, const uint8_t* next) {
  for (int64_t x = 0; x < dv; x += 16) {
    const PairAhead ahead = PairAheadOf(next, c, dv, x, 16);
    const PairAhead* first = next != nullptr ? &ahead : nullptr;
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) {
      PairRows256<4>(pairs + r * np, np, unit + r, v, c, dv, x, o + r * dv,
                     r == 0 ? first : nullptr);
    }
    for (; r < rows; ++r) {
      PairRows256<1>(pairs + r * np, np, unit + r, v, c, dv, x, o + r * dv,
                     r == 0 ? first : nullptr);
    }
  }
}

}  // namespace attn::internal
