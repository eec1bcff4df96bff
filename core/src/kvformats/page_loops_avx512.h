// The decode kernel's AVX-512 loops: page_loops.h's QK and PV sixteen
// lanes wide, with half the instructions per byte read (a CPU with fast
// memory ran the AVX2 loops out of instructions before bandwidth). `L::Load`
// gives sixteen widened codes as an __m512. Internal to core.
#pragma once

#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kvformats/page_loops.h"

namespace attn::internal {

#define ATTN_DECODE512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

// A 512-bit sum folded to 256 bits (for Sum4).
ATTN_DECODE512 inline __m256 Fold(__m512 a) {
  return _mm256_add_ps(_mm512_castps512_ps256(a),
                       _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
}

// Sixteen int32 vectors to one: lane i the sum of v[i]'s lanes (pairs
// interleaved and added, then 64-bit halves, then 128-bit blocks).
// (Its target is a subset of every caller's, so that it inlines.)
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) inline __m512i SumEach16(
    const __m512i* v) {
  __m512i t[8], u[4];
  for (int i = 0; i < 8; ++i) {
    t[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]),
                            _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
  }
  for (int i = 0; i < 4; ++i) {
    u[i] = _mm512_add_epi64(_mm512_unpacklo_epi64(t[2 * i], t[2 * i + 1]),
                            _mm512_unpackhi_epi64(t[2 * i], t[2 * i + 1]));
  }
  const __m512i w01 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], 0x88),
                                       _mm512_shuffle_i32x4(u[0], u[1], 0xDD));
  const __m512i w23 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[2], u[3], 0x88),
                                       _mm512_shuffle_i32x4(u[2], u[3], 0xDD));
  return _mm512_add_epi32(_mm512_shuffle_i32x4(w01, w23, 0x88),
                          _mm512_shuffle_i32x4(w01, w23, 0xDD));
}

// Four rows' factors against SumEach16's blocks: {v0 x4, v1 x4, v2 x4,
// v3 x4}. (Their target is a subset of every caller's, so that they inline.)
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) inline __m512 QuadOf(const float* v) {
  const __m512i four = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  return _mm512_permutexvar_ps(four, _mm512_castps128_ps512(_mm_loadu_ps(v)));
}

// Block r of v (row r's four keys, as SumEach16 leaves them) to s + r * lds,
// written out: an extract's block number must be a constant, which a loop
// gives only when the compiler unrolls it (not in the ASan build).
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) inline void StoreQuad(float* s,
                                                                                    int64_t lds,
                                                                                    __m512 v) {
  _mm_storeu_ps(s, _mm512_castps512_ps128(v));
  _mm_storeu_ps(s + lds, _mm512_extractf32x4_ps(v, 1));
  _mm_storeu_ps(s + 2 * lds, _mm512_extractf32x4_ps(v, 2));
  _mm_storeu_ps(s + 3 * lds, _mm512_extractf32x4_ps(v, 3));
}

// acc + the sums of pairs of int16 products a lane: VPDPWSSD with VNNI
// (as an asm statement: around _mm512_dpwssd_epi32 GCC 12 moves the sum
// through another register and a stack slot), VPMADDWD and an add
// without. (Its target is a subset of the VNNI callers'.)
template <bool kVnni>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma"))) inline __m512i DotWords(
    __m512i acc, __m512i a, __m512i b) {
  if constexpr (kVnni) {
    asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
  }
  return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
}

// o[x..x+32) += unit * (lo, hi) put back in column order, after sums over
// pairs of tokens interleaved by 16-bit unpacks (int8's and fp8's PV): lo
// holds columns 8k..8k+3 of each 128-bit lane k, hi columns 8k+4..8k+7.
// (Its target is a subset of every caller's, so that it inlines.)
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) inline void AddPairSums(__m512 lo,
                                                                                      __m512 hi,
                                                                                      float unit,
                                                                                      float* o) {
  const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i second =
      _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  const __m512 sc = _mm512_set1_ps(unit);
  _mm512_storeu_ps(o,
                   _mm512_fmadd_ps(_mm512_permutex2var_ps(lo, first, hi), sc, _mm512_loadu_ps(o)));
  _mm512_storeu_ps(
      o + 16, _mm512_fmadd_ps(_mm512_permutex2var_ps(lo, second, hi), sc, _mm512_loadu_ps(o + 16)));
}

// Sixteen float vectors to one: lane i the sum of v[i]'s lanes (as
// SumEach16).
ATTN_DECODE512 inline __m512 SumEach16Ps(const __m512* v) {
  __m512 t[8], u[4];
  for (int i = 0; i < 8; ++i) {
    t[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                         _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  }
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[2 * i]), b = _mm512_castps_pd(t[2 * i + 1]);
    u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  const __m512 w01 =
      _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
  const __m512 w23 =
      _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(w01, w23, 0x88), _mm512_shuffle_f32x4(w01, w23, 0xDD));
}

// A Load policy's 32 codes at a time for the four-row loops: two Loads
// (channels x..x+15, x+16..x+31), or the policy's own Load32 where it
// declares kEvenOdd (true: the even channels, then the odd ones) and
// kUnit32 (its values are Load's over kUnit32).
template <typename L, typename = void>
struct Pairs {
  static constexpr bool kEvenOdd = false;
  static constexpr float kUnit = 1.0f;
  ATTN_DECODE512 static void Load(const typename L::T* p, __m512* a, __m512* b) {
    *a = L::Load(p);
    *b = L::Load(p + 16);
  }
};
template <typename L>
struct Pairs<L, std::void_t<decltype(L::kEvenOdd)>> {
  static constexpr bool kEvenOdd = L::kEvenOdd;
  static constexpr float kUnit = L::kUnit32;
  ATTN_DECODE512 static void Load(const typename L::T* p, __m512* a, __m512* b) {
    L::Load32(p, a, b);
  }
};

constexpr int64_t kQuadMaxD = 512;

// max |x[i]| over i < n (0 for n == 0), the tail masked. (Its target is a
// subset of every caller's, so that it inlines.)
ATTN_AVX512 inline float AbsMax512(const float* x, int64_t n) {
  __m512 m = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_maskz_loadu_ps(Lanes16(n - i), x + i)));
  }
  return _mm512_reduce_max_ps(m);
}

// The power of two that brings the largest magnitude of x[0, n) to
// [2^100, 2^101), as an exponent e (ShiftOfMax, page_loops.h).
ATTN_DECODE512 inline int ShiftFor(const float* x, int64_t n) { return ShiftOfMax(AbsMax512(x, n)); }

// The same sixteen lanes at a time.
struct TimesPow2 {
  __m512 a, b;
  ATTN_DECODE512 explicit TimesPow2(int e)
      : a(_mm512_set1_ps(Pow2(e / 2))), b(_mm512_set1_ps(Pow2(e - e / 2))) {}
  ATTN_DECODE512 __m512 operator()(__m512 x) const { return _mm512_mul_ps(_mm512_mul_ps(x, a), b); }
};

// R query rows (q0, [R, d]; 1 to 4) against keys [0, c) four at a time:
// four rows' sixteen sums reduced together (SumEach16Ps) instead of one by
// one, fewer rows' row by row. The rows are
// first put in the loader's channel order. Returns the keys done (a
// multiple of 4); d is a multiple of 32, at most kQuadMaxD.
template <typename L, int R = 4, typename P = Pairs<L>>
ATTN_DECODE512 int64_t QkQuad512(const float* q0, const typename L::T* k, int64_t c, int64_t d,
                                 float* s, int64_t lds, const uint8_t* next) {
  const int64_t tb = d * static_cast<int64_t>(sizeof(typename L::T));
  alignas(64) float qp[4 * kQuadMaxD];
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  float unit[4] = {P::kUnit, P::kUnit, P::kUnit, P::kUnit};
  static_assert(R >= 1 && R <= 4, "one to four rows");
  for (int64_t r = 0; r < R; ++r) {
    int e = 0;
    if constexpr (P::kUnit != 1.0f) {
      e = ShiftFor(q0 + r * d, d);
      unit[r] = ScaledByPow2(P::kUnit, -e);
    }
    const TimesPow2 times(e);
    for (int64_t i = r * d; i < (r + 1) * d; i += 32) {
      const __m512 a = times(_mm512_loadu_ps(q0 + i));
      const __m512 b = times(_mm512_loadu_ps(q0 + i + 16));
      _mm512_store_ps(qp + i, P::kEvenOdd ? _mm512_permutex2var_ps(a, even, b) : a);
      _mm512_store_ps(qp + i + 16, P::kEvenOdd ? _mm512_permutex2var_ps(a, odd, b) : b);
    }
  }
  const __m512 units = QuadOf(unit);
  int64_t j = 0;
  for (; j + 4 <= c; j += 4) {
    for (int64_t jj = j; jj < j + 4; ++jj) PrefetchToken(next, tb, jj);
    __m512 acc[4 * R];
    for (int i = 0; i < 4 * R; ++i) acc[i] = _mm512_setzero_ps();
    const typename L::T* kj = k + j * d;
    for (int64_t x = 0; x < d; x += 32) {
      __m512 qa[R], qb[R];
      for (int r = 0; r < R; ++r) {
        qa[r] = _mm512_load_ps(qp + r * d + x);
        qb[r] = _mm512_load_ps(qp + r * d + x + 16);
      }
      for (int t = 0; t < 4; ++t) {  // acc[r * 4 + t]: row r, key j + t
        __m512 ka, kb;
        P::Load(kj + t * d + x, &ka, &kb);
        for (int r = 0; r < R; ++r) {
          acc[r * 4 + t] = _mm512_fmadd_ps(qa[r], ka, acc[r * 4 + t]);
          acc[r * 4 + t] = _mm512_fmadd_ps(qb[r], kb, acc[r * 4 + t]);
        }
      }
    }
    if constexpr (R == 4) {
      __m512 sum = SumEach16Ps(acc);
      if constexpr (P::kUnit != 1.0f) sum = _mm512_mul_ps(sum, units);
      StoreQuad(s + j, lds, sum);
    } else {
      for (int r = 0; r < R; ++r) {
        const __m128 sum = Sum4(Fold(acc[r * 4]), Fold(acc[r * 4 + 1]), Fold(acc[r * 4 + 2]),
                                Fold(acc[r * 4 + 3]));
        _mm_storeu_ps(s + r * lds + j, _mm_mul_ps(sum, _mm_set1_ps(unit[r])));
      }
    }
  }
  return j;
}

// Two or three rows (q0, d apart; d a multiple of 32, at most kQuadMaxD)
// against keys four at a time (QkQuad512), then each against the last ones.
template <typename L>
ATTN_DECODE512 void QkRestRows512(const float* q0, int64_t rest, const typename L::T* k,
                                  int64_t c, int64_t d, float* s, int64_t lds,
                                  const uint8_t* next) {
  const int64_t tb = d * static_cast<int64_t>(sizeof(typename L::T));
  const int64_t done = rest == 3 ? QkQuad512<L, 3>(q0, k, c, d, s, lds, next)
                                 : QkQuad512<L, 2>(q0, k, c, d, s, lds, next);
  for (int64_t j = done; j < c; ++j) {
    PrefetchToken(next, tb, j);
    for (int64_t rr = 0; rr < rest; ++rr) {
      __m512 a = _mm512_setzero_ps();
      for (int64_t x = 0; x < d; x += 16) {
        a = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + rr * d + x), L::Load(k + j * d + x), a);
      }
      s[rr * lds + j] = _mm512_reduce_add_ps(a);
    }
  }
}

template <typename L>
ATTN_DECODE512 void QkFast512(const float* q, int64_t rows, const typename L::T* k, int64_t c,
                              int64_t d, float* s, int64_t lds, const uint8_t* next) {
  const int64_t tb = d * static_cast<int64_t>(sizeof(typename L::T));
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {  // four rows against two keys: eight sums
    const float* q0 = q + r * d;
    int64_t j = 0;
    if (d % 32 == 0 && d <= kQuadMaxD) {
      j = QkQuad512<L>(q0, k, c, d, s + r * lds, lds, r == 0 ? next : nullptr);
    }
    for (; j + 2 <= c; j += 2) {
      if (r == 0) {
        PrefetchToken(next, tb, j);
        PrefetchToken(next, tb, j + 1);
      }
      const typename L::T* kj = k + j * d;
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      __m512 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
      for (int64_t x = 0; x < d; x += 16) {
        const __m512 k0 = L::Load(kj + x), k1 = L::Load(kj + d + x);
        const __m512 q0v = _mm512_loadu_ps(q0 + x), q1v = _mm512_loadu_ps(q0 + d + x);
        const __m512 q2v = _mm512_loadu_ps(q0 + 2 * d + x), q3v = _mm512_loadu_ps(q0 + 3 * d + x);
        a0 = _mm512_fmadd_ps(q0v, k0, a0);
        a1 = _mm512_fmadd_ps(q1v, k0, a1);
        a2 = _mm512_fmadd_ps(q2v, k0, a2);
        a3 = _mm512_fmadd_ps(q3v, k0, a3);
        b0 = _mm512_fmadd_ps(q0v, k1, b0);
        b1 = _mm512_fmadd_ps(q1v, k1, b1);
        b2 = _mm512_fmadd_ps(q2v, k1, b2);
        b3 = _mm512_fmadd_ps(q3v, k1, b3);
      }
      alignas(16) float out[8];
      _mm_store_ps(out, Sum4(Fold(a0), Fold(a1), Fold(a2), Fold(a3)));
      _mm_store_ps(out + 4, Sum4(Fold(b0), Fold(b1), Fold(b2), Fold(b3)));
      for (int i = 0; i < 4; ++i) {
        s[(r + i) * lds + j] = out[i];
        s[(r + i) * lds + j + 1] = out[4 + i];
      }
    }
    for (; j < c; ++j) {
      if (r == 0) PrefetchToken(next, tb, j);
      const typename L::T* kj = k + j * d;
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t x = 0; x < d; x += 16) {
        const __m512 kv = L::Load(kj + x);
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + x), kv, a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + d + x), kv, a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + 2 * d + x), kv, a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + 3 * d + x), kv, a3);
      }
      alignas(16) float out[4];
      _mm_store_ps(out, Sum4(Fold(a0), Fold(a1), Fold(a2), Fold(a3)));
      for (int i = 0; i < 4; ++i) s[(r + i) * lds + j] = out[i];
    }
  }
  if (rows - r >= 2 && d % 32 == 0 && d <= kQuadMaxD) {  // two or three rows left, together
    QkRestRows512<L>(q + r * d, rows - r, k, c, d, s + r * lds, lds, r == 0 ? next : nullptr);
    return;
  }
  for (; r < rows; ++r) {  // one row against four keys
    const float* qr = q + r * d;
    int64_t j = 0;
    for (; j + 4 <= c; j += 4) {
      if (r == 0) {
        for (int64_t jj = j; jj < j + 4; ++jj) PrefetchToken(next, tb, jj);
      }
      const typename L::T* kj = k + j * d;
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t x = 0; x < d; x += 16) {
        const __m512 qv = _mm512_loadu_ps(qr + x);
        a0 = _mm512_fmadd_ps(L::Load(kj + x), qv, a0);
        a1 = _mm512_fmadd_ps(L::Load(kj + d + x), qv, a1);
        a2 = _mm512_fmadd_ps(L::Load(kj + 2 * d + x), qv, a2);
        a3 = _mm512_fmadd_ps(L::Load(kj + 3 * d + x), qv, a3);
      }
      _mm_storeu_ps(s + r * lds + j, Sum4(Fold(a0), Fold(a1), Fold(a2), Fold(a3)));
    }
    for (; j < c; ++j) {
      if (r == 0) PrefetchToken(next, tb, j);
      __m512 a = _mm512_setzero_ps();
      for (int64_t x = 0; x < d; x += 16) {
        a = _mm512_fmadd_ps(_mm512_loadu_ps(qr + x), L::Load(k + j * d + x), a);
      }
      s[r * lds + j] = _mm512_reduce_add_ps(a);
    }
  }
}

// Four rows (p0, ldp apart) by columns [x, x + 32) over keys [0, c),
// from 32 codes at a time (Pairs): the sums start at 0 and are put back in
// column order (kEvenOdd) and added to o0's rows (dv apart) times kUnit.
template <typename L, typename P = Pairs<L>>
ATTN_DECODE512 void PvQuad512(const float* p0, int64_t ldp, const float* units,
                              const typename L::T* v, int64_t c, int64_t dv, int64_t x, float* o0,
                              const SpreadPrefetch& pf) {
  __m512 ev[4], od[4];
  for (int i = 0; i < 4; ++i) ev[i] = od[i] = _mm512_setzero_ps();
  for (int64_t j = 0; j < c; ++j) {
    pf(x / 32, j);
    __m512 ve, vo;
    P::Load(v + j * dv + x, &ve, &vo);
    for (int i = 0; i < 4; ++i) {
      const __m512 w = _mm512_set1_ps(p0[i * ldp + j]);
      ev[i] = _mm512_fmadd_ps(w, ve, ev[i]);
      od[i] = _mm512_fmadd_ps(w, vo, od[i]);
    }
  }
  const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(8));
  for (int i = 0; i < 4; ++i) {
    const __m512 unit = _mm512_set1_ps(units[i]);
    float* oi = o0 + i * dv;
    const __m512 a = P::kEvenOdd ? _mm512_permutex2var_ps(ev[i], first, od[i]) : ev[i];
    const __m512 b = P::kEvenOdd ? _mm512_permutex2var_ps(ev[i], second, od[i]) : od[i];
    _mm512_storeu_ps(oi, _mm512_fmadd_ps(a, unit, _mm512_loadu_ps(oi)));
    _mm512_storeu_ps(oi + 16, _mm512_fmadd_ps(b, unit, _mm512_loadu_ps(oi + 16)));
  }
}

template <typename L>
ATTN_DECODE512 void PvFast512(const float* p, int64_t rows, int64_t ldp, const typename L::T* v,
                              int64_t c, int64_t dv, float* o, const uint8_t* next) {
  const int64_t tb = dv * static_cast<int64_t>(sizeof(typename L::T));
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {  // four rows by 32 columns: eight sums a key
    const float* p0 = p + r * ldp;
    const SpreadPrefetch pf(r == 0 ? next : nullptr, tb, c, dv / 32);
    constexpr float kUnit = Pairs<L>::kUnit;
    float units[4] = {kUnit, kUnit, kUnit, kUnit};
    const float* pq = p0;  // the quad loops' weights
    int64_t ldq = ldp;
    if constexpr (kUnit != 1.0f) {  // rows scaled as ShiftFor says, c apart
      thread_local std::vector<float> scaled;
      scaled.resize(static_cast<size_t>(4 * c));
      for (int64_t i = 0; i < 4; ++i) {
        const int e = ShiftFor(p0 + i * ldp, c);
        for (int64_t j = 0; j < c; ++j) scaled[i * c + j] = ScaledByPow2(p0[i * ldp + j], e);
        units[i] = ScaledByPow2(kUnit, -e);
      }
      pq = scaled.data();
      ldq = c;
    }
    int64_t x = 0;
    for (; x + 32 <= dv; x += 32) PvQuad512<L>(pq, ldq, units, v, c, dv, x, o + r * dv + x, pf);
    for (; x < dv; x += 16) {
      float* o0 = o + r * dv + x;
      __m512 a0 = _mm512_loadu_ps(o0), a1 = _mm512_loadu_ps(o0 + dv);
      __m512 a2 = _mm512_loadu_ps(o0 + 2 * dv), a3 = _mm512_loadu_ps(o0 + 3 * dv);
      for (int64_t j = 0; j < c; ++j) {
        const __m512 vv = L::Load(v + j * dv + x);
        a0 = _mm512_fmadd_ps(_mm512_set1_ps(p0[j]), vv, a0);
        a1 = _mm512_fmadd_ps(_mm512_set1_ps(p0[ldp + j]), vv, a1);
        a2 = _mm512_fmadd_ps(_mm512_set1_ps(p0[2 * ldp + j]), vv, a2);
        a3 = _mm512_fmadd_ps(_mm512_set1_ps(p0[3 * ldp + j]), vv, a3);
      }
      _mm512_storeu_ps(o0, a0);
      _mm512_storeu_ps(o0 + dv, a1);
      _mm512_storeu_ps(o0 + 2 * dv, a2);
      _mm512_storeu_ps(o0 + 3 * dv, a3);
    }
  }
  for (; r < rows; ++r) {  // one row by 64 columns: four sums a key
    const float* pr = p + r * ldp;
    const SpreadPrefetch pf(r == 0 ? next : nullptr, tb, c, dv / 64);
    int64_t x = 0;
    for (; x + 64 <= dv; x += 64) {
      float* orow = o + r * dv + x;
      __m512 a0 = _mm512_loadu_ps(orow), a1 = _mm512_loadu_ps(orow + 16);
      __m512 a2 = _mm512_loadu_ps(orow + 32), a3 = _mm512_loadu_ps(orow + 48);
      for (int64_t j = 0; j < c; ++j) {
        pf(x / 64, j);
        const __m512 w = _mm512_set1_ps(pr[j]);
        const typename L::T* vj = v + j * dv + x;
        a0 = _mm512_fmadd_ps(w, L::Load(vj), a0);
        a1 = _mm512_fmadd_ps(w, L::Load(vj + 16), a1);
        a2 = _mm512_fmadd_ps(w, L::Load(vj + 32), a2);
        a3 = _mm512_fmadd_ps(w, L::Load(vj + 48), a3);
      }
      _mm512_storeu_ps(orow, a0);
      _mm512_storeu_ps(orow + 16, a1);
      _mm512_storeu_ps(orow + 32, a2);
      _mm512_storeu_ps(orow + 48, a3);
    }
    for (; x < dv; x += 16) {
      float* orow = o + r * dv + x;
      __m512 a0 = _mm512_loadu_ps(orow);
      for (int64_t j = 0; j < c; ++j) {
        a0 = _mm512_fmadd_ps(_mm512_set1_ps(pr[j]), L::Load(v + j * dv + x), a0);
      }
      _mm512_storeu_ps(orow, a0);
    }
  }
}

}  // namespace attn::internal

namespace attn::internal {

// A format's QK and PV over a page's codes (the PageCodec's qk and pv):
// sixteen lanes wide where UseAvx512(width), eight otherwise. L2 and L512
// load the same element type.
template <typename L2, typename L512>
void QkPageOf(const float* q, int64_t rows, const uint8_t* k, int64_t c, int64_t d, float* s,
              int64_t lds, const uint8_t* next) {
  const auto* kt = reinterpret_cast<const typename L2::T*>(k);
  if (UseAvx512(d)) return QkFast512<L512>(q, rows, kt, c, d, s, lds, next);
  QkFast<L2>(q, rows, kt, c, d, s, lds, next);
}

template <typename L2, typename L512>
void PvPageOf(const float* p, int64_t rows, int64_t ldp, const uint8_t* v, int64_t c, int64_t dv,
              float* o, const uint8_t* next) {
  const auto* vt = reinterpret_cast<const typename L2::T*>(v);
  if (UseAvx512(dv)) return PvFast512<L512>(p, rows, ldp, vt, c, dv, o, next);
  PvFast<L2>(p, rows, ldp, vt, c, dv, o, next);
}

}  // namespace attn::internal
