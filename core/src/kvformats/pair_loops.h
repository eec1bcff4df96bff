// The decode kernel's loops over codes in pairs. PV over codes that widen
// to 16-bit numbers, two tokens a step (int8's loops in integer units,
// fp8's on bf16 dot products): one AVX-512 loop, each format's policy; and
// int8's on the AVX2 tier (PairPasses256). fp8's QK and PV on the AVX2
// tier over channel pairs, even and odd (QkEvenOddPage, PvEvenOddPage).
// Internal to core.
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
    if (r < rows) {  // the one to three rows left, together
      const auto tail = rows - r == 3 ? PairRows256<3> : rows - r == 2 ? PairRows256<2>
                                                                       : PairRows256<1>;
      tail(pairs + r * np, np, unit + r, v, c, dv, x, o + r * dv, r == 0 ? first : nullptr);
    }
  }
}

// ---- the AVX2 tier: channel pairs (fp8 codes) ------------------------------
// A Load policy with Load16(p, &even, &odd) gives the 16 codes at p as
// float32s, channels 0, 2, .., 14 then 1, 3, .., 15, each its Load value
// over kUnit16. fp8's puts a code's bits where float32's are: five integer
// instructions for 16 codes, where Load takes three and a conversion for 8.
// The loops below take 16 channels a step, over up to four rows (R); the
// rows that meet the codes are first scaled as ShiftOfMax says (the
// AVX-512 tier's loops do the same with Load32).

// Query rows for Load16: each row times its 2^e in Load16's channel order
// (d apart), and the factors that take their sums back to Load's units.
struct EvenOddQuery {
  std::vector<float> q, unit;
  RowsOrigin origin;  // the rows they were made from (PreparedRows)
};
ATTN_DECODE inline void PrepareEvenOdd(const float* q, int64_t rows, int64_t d, float k_unit,
                                       EvenOddQuery* out) {
  out->q.resize(static_cast<size_t>(rows * d));
  out->unit.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const float* qr = q + r * d;
    const int e = ShiftOfMax(AbsMax256(qr, d));
    out->unit[static_cast<size_t>(r)] = ScaledByPow2(k_unit, -e);
    const __m256 f1 = _mm256_set1_ps(Pow2(e / 2)), f2 = _mm256_set1_ps(Pow2(e - e / 2));
    float* dst = out->q.data() + r * d;
    for (int64_t x = 0; x < d; x += 16) {
      const __m256 a = _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(qr + x), f1), f2);
      const __m256 b = _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(qr + x + 8), f1), f2);
      // (a0 a2 b0 b2 | a4 a6 b4 b6), its 64-bit pairs put in order.
      const __m256d ev = _mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88));
      const __m256d od = _mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD));
      _mm256_storeu_ps(dst + x, _mm256_castpd_ps(_mm256_permute4x64_pd(ev, 0xD8)));
      _mm256_storeu_ps(dst + x + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(od, 0xD8)));
    }
  }
}

// R prepared rows (qp, d apart; d a multiple of 16) against keys [0, c) K
// at a time: R K sums (eight for four rows by two keys or two by four;
// three rows take two keys). Returns the keys done (c rounded down to K).
template <typename L, int R, int K>
ATTN_DECODE int64_t QkEvenOdd256(const float* qp, const float* unit, const typename L::T* k,
                                 int64_t c, int64_t d, float* s, int64_t lds,
                                 const uint8_t* next) {
  static_assert(R >= 1 && R <= 4 && R * K <= 8, "at most eight sums in registers");
  const int64_t tb = d * static_cast<int64_t>(sizeof(typename L::T));
  alignas(16) float per_sum[8] = {};  // each sum's row's unit, in the sums' order
  for (int i = 0; i < R * K; ++i) per_sum[i] = unit[i / K];
  const __m128 u0 = _mm_load_ps(per_sum), u1 = _mm_load_ps(per_sum + 4);
  int64_t j = 0;
  for (; j + K <= c; j += K) {
    for (int t = 0; t < K; ++t) PrefetchToken(next, tb, j + t);
    const typename L::T* kj = k + j * d;
    __m256 acc[8];  // acc[i * K + t]: row i, key j + t
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
    for (int64_t x = 0; x < d; x += 16) {
      if constexpr (K == 2) {  // both keys' vectors, then each row's pair of the query's
        __m256 ke[2], ko[2];
        L::Load16(kj + x, &ke[0], &ko[0]);
        L::Load16(kj + d + x, &ke[1], &ko[1]);
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i) {
          const __m256 qe = _mm256_loadu_ps(qp + i * d + x);
          const __m256 qo = _mm256_loadu_ps(qp + i * d + x + 8);
          for (int t = 0; t < 2; ++t) {
            acc[i * 2 + t] = _mm256_fmadd_ps(qe, ke[t], acc[i * 2 + t]);
            acc[i * 2 + t] = _mm256_fmadd_ps(qo, ko[t], acc[i * 2 + t]);
          }
        }
      } else {  // one key's vectors at a time (four keys' would not fit the registers)
#pragma GCC unroll 4
        for (int t = 0; t < K; ++t) {
          __m256 ke, ko;
          L::Load16(kj + t * d + x, &ke, &ko);
          for (int i = 0; i < R; ++i) {
            acc[i * K + t] = _mm256_fmadd_ps(_mm256_loadu_ps(qp + i * d + x), ke, acc[i * K + t]);
            acc[i * K + t] =
                _mm256_fmadd_ps(_mm256_loadu_ps(qp + i * d + x + 8), ko, acc[i * K + t]);
          }
        }
      }
    }
    alignas(16) float out[8];
    _mm_store_ps(out, _mm_mul_ps(Sum4(acc[0], acc[1], acc[2], acc[3]), u0));
    if constexpr (R * K > 4) {
      _mm_store_ps(out + 4, _mm_mul_ps(Sum4(acc[4], acc[5], acc[6], acc[7]), u1));
    }
    for (int i = 0; i < R; ++i) {
      for (int t = 0; t < K; ++t) s[i * lds + j + t] = out[i * K + t];
    }
  }
  return j;
}

// R rows of weights (w, ldw apart, scaled: units take their sums back) by
// columns [x, x + 16) over tokens [0, c): even and odd columns' sums from
// 0, put back in column order and added to o0's rows (dv apart).
template <typename L, int R>
ATTN_DECODE void PvEvenOdd256(const float* w, int64_t ldw, const float* units,
                              const typename L::T* v, int64_t c, int64_t dv, int64_t x, float* o0,
                              const SpreadPrefetch& pf) {
  static_assert(R >= 2 && R <= 4, "one row's two sums would wait on their latency");
  // Named sums: as an array, GCC kept them in memory beside the prefetch's loop.
  __m256 e0 = _mm256_setzero_ps(), e1 = e0, e2 = e0, e3 = e0, d0 = e0, d1 = e0, d2 = e0, d3 = e0;
  for (int64_t j = 0; j < c; ++j) {
    pf(x / 16, j);
    __m256 ve, vo;
    L::Load16(v + j * dv + x, &ve, &vo);
    const __m256 w0 = _mm256_broadcast_ss(w + j), w1 = _mm256_broadcast_ss(w + ldw + j);
    e0 = _mm256_fmadd_ps(w0, ve, e0);
    d0 = _mm256_fmadd_ps(w0, vo, d0);
    e1 = _mm256_fmadd_ps(w1, ve, e1);
    d1 = _mm256_fmadd_ps(w1, vo, d1);
    if constexpr (R > 2) {
      const __m256 w2 = _mm256_broadcast_ss(w + 2 * ldw + j);
      e2 = _mm256_fmadd_ps(w2, ve, e2);
      d2 = _mm256_fmadd_ps(w2, vo, d2);
    }
    if constexpr (R > 3) {
      const __m256 w3 = _mm256_broadcast_ss(w + 3 * ldw + j);
      e3 = _mm256_fmadd_ps(w3, ve, e3);
      d3 = _mm256_fmadd_ps(w3, vo, d3);
    }
  }
  const __m256 ev[4] = {e0, e1, e2, e3}, od[4] = {d0, d1, d2, d3};
  for (int i = 0; i < R; ++i) {
    // (0 1 2 3 | 8 9 10 11) and (4 5 6 7 | 12 13 14 15)
    const __m256 lo = _mm256_unpacklo_ps(ev[i], od[i]), hi = _mm256_unpackhi_ps(ev[i], od[i]);
    const __m256 unit = _mm256_set1_ps(units[i]);
    float* oi = o0 + i * dv;
    _mm256_storeu_ps(oi, _mm256_fmadd_ps(_mm256_permute2f128_ps(lo, hi, 0x20), unit,
                                         _mm256_loadu_ps(oi)));
    _mm256_storeu_ps(oi + 8, _mm256_fmadd_ps(_mm256_permute2f128_ps(lo, hi, 0x31), unit,
                                             _mm256_loadu_ps(oi + 8)));
  }
}

// R rows of weights (p0, ldp apart) over c tokens, each times its 2^e
// (ShiftOfMax), c apart in `out`, and their units (k_unit over 2^e).
ATTN_DECODE inline void ScaledWeights(const float* p0, int64_t ldp, int64_t rows, int64_t c,
                                      float k_unit, std::vector<float>* out, float* units) {
  out->resize(static_cast<size_t>(rows * c));
  for (int64_t i = 0; i < rows; ++i) {
    const float* pi = p0 + i * ldp;
    const int e = ShiftOfMax(AbsMax256(pi, c));
    units[i] = ScaledByPow2(k_unit, -e);
    const float f1 = Pow2(e / 2), f2 = Pow2(e - e / 2);
    for (int64_t j = 0; j < c; ++j) (*out)[static_cast<size_t>(i * c + j)] = pi[j] * f1 * f2;
  }
}

// QK over R rows from row r of a page (QkEvenOdd256: two keys a step for
// three or four rows, four for one or two), its last keys by QkFast.
template <typename L, int R>
void QkEvenOddRows(const float* q, const EvenOddQuery& eo, int64_t r, const typename L::T* k,
                   int64_t c, int64_t d, float* s, int64_t lds, const uint8_t* next) {
  constexpr int K = R > 2 ? 2 : 4;
  const int64_t j = QkEvenOdd256<L, R, K>(eo.q.data() + r * d, eo.unit.data() + r, k, c, d,
                                          s + r * lds, lds, next);
  if (j < c) QkFast<L>(q + r * d, R, k + j * d, c - j, d, s + r * lds + j, lds, nullptr);
}

// QK over a page (d a multiple of 16): four rows at a time, then the one
// to three left (the query prepared once per kv head).
template <typename L>
void QkEvenOddPage(const float* q, int64_t rows, const typename L::T* k, int64_t c, int64_t d,
                   float* s, int64_t lds, const uint8_t* next) {
  EvenOddQuery& eo = PreparedRows<EvenOddQuery>(q);
  if (!eo.origin.Same(q, rows, d)) PrepareEvenOdd(q, rows, d, L::kUnit16, &eo);
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) QkEvenOddRows<L, 4>(q, eo, r, k, c, d, s, lds, r == 0 ? next : nullptr);
  const uint8_t* ahead = r == 0 ? next : nullptr;
  if (rows - r == 3) QkEvenOddRows<L, 3>(q, eo, r, k, c, d, s, lds, ahead);
  if (rows - r == 2) QkEvenOddRows<L, 2>(q, eo, r, k, c, d, s, lds, ahead);
  if (rows - r == 1) QkEvenOddRows<L, 1>(q, eo, r, k, c, d, s, lds, ahead);
}

// PV over a page (dv a multiple of 16): four rows at a time, then three or
// two by PvEvenOdd256 over their scaled weights; a last single row by
// PvFast (32 columns a pass, four sums, where 16 would wait on two).
template <typename L>
void PvEvenOddPage(const float* p, int64_t rows, int64_t ldp, const typename L::T* v, int64_t c,
                   int64_t dv, float* o, const uint8_t* next) {
  const int64_t tb = dv * static_cast<int64_t>(sizeof(typename L::T));
  thread_local std::vector<float> scaled;
  int64_t r = 0;
  while (rows - r >= 2) {
    const int64_t n = std::min<int64_t>(4, rows - r);
    const SpreadPrefetch pf(r == 0 ? next : nullptr, tb, c, dv / 16);
    float units[4];
    ScaledWeights(p + r * ldp, ldp, n, c, L::kUnit16, &scaled, units);
    const auto pass = n == 4 ? PvEvenOdd256<L, 4> : n == 3 ? PvEvenOdd256<L, 3> : PvEvenOdd256<L, 2>;
    for (int64_t x = 0; x < dv; x += 16) pass(scaled.data(), c, units, v, c, dv, x, o + r * dv + x, pf);
    r += n;
  }
  if (r < rows) PvFast<L>(p + r * ldp, rows - r, ldp, v, c, dv, o + r * dv, r == 0 ? next : nullptr);
}

}  // namespace attn::internal
