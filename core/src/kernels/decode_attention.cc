#include "kernels/decode_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "attn/threading.h"
#include "kernels/softmax_kernels.h"
#include "support/half_kernels.h"
#include "support/isa_cap.h"
#include "support/simd.h"

namespace attn::internal {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// s[r * lds + j] = q_r . k_j for r < rows, j < c (q rows dense, d long).
using QkFn = void (*)(const float* q, int64_t rows, const float* k, int64_t c, int64_t d, float* s,
                      int64_t lds);
// o[r * dv + x] += sum_j p[r * ldp + j] * v[j * dv + x].
using PvFn = void (*)(const float* p, int64_t rows, int64_t ldp, const float* v, int64_t c,
                      int64_t dv, float* o);

void QkPortable(const float* q, int64_t rows, const float* k, int64_t c, int64_t d, float* s,
                int64_t lds) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < c; ++j) {
      float acc = 0.0f;
      for (int64_t x = 0; x < d; ++x) acc += q[r * d + x] * k[j * d + x];
      s[r * lds + j] = acc;
    }
  }
}

void PvPortable(const float* p, int64_t rows, int64_t ldp, const float* v, int64_t c, int64_t dv,
                float* o) {
  for (int64_t r = 0; r < rows; ++r) {
    float* orow = o + r * dv;
    for (int64_t j = 0; j < c; ++j) {
      const float w = p[r * ldp + j];
      if (w == 0.0f) continue;
      for (int64_t x = 0; x < dv; ++x) orow[x] += w * v[j * dv + x];
    }
  }
}

ATTN_AVX2 inline __m256 Load8(const float* p, int64_t left, __m256i tail) {
  return left >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, tail);
}

// Sums of four vectors' lanes: {sum a0, sum a1, sum a2, sum a3}.
ATTN_AVX2 inline __m128 Sum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

ATTN_AVX2 void QkAvx2(const float* q, int64_t rows, const float* k, int64_t c, int64_t d, float* s,
                      int64_t lds) {
  const __m256i tail = LaneMask256(d % 8);
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* q0 = q + r * d;
    for (int64_t j = 0; j < c; ++j) {
      const float* kj = k + j * d;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t x = 0; x < d; x += 8) {
        const __m256 kv = Load8(kj + x, d - x, tail);
        a0 = _mm256_fmadd_ps(Load8(q0 + x, d - x, tail), kv, a0);
        a1 = _mm256_fmadd_ps(Load8(q0 + d + x, d - x, tail), kv, a1);
        a2 = _mm256_fmadd_ps(Load8(q0 + 2 * d + x, d - x, tail), kv, a2);
        a3 = _mm256_fmadd_ps(Load8(q0 + 3 * d + x, d - x, tail), kv, a3);
      }
      alignas(16) float out[4];
      _mm_store_ps(out, Sum4(a0, a1, a2, a3));
      for (int i = 0; i < 4; ++i) s[(r + i) * lds + j] = out[i];
    }
  }
  for (; r < rows; ++r) {
    const float* qr = q + r * d;
    int64_t j = 0;
    for (; j + 4 <= c; j += 4) {  // one row against four keys
      const float* kj = k + j * d;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t x = 0; x < d; x += 8) {
        const __m256 qv = Load8(qr + x, d - x, tail);
        a0 = _mm256_fmadd_ps(Load8(kj + x, d - x, tail), qv, a0);
        a1 = _mm256_fmadd_ps(Load8(kj + d + x, d - x, tail), qv, a1);
        a2 = _mm256_fmadd_ps(Load8(kj + 2 * d + x, d - x, tail), qv, a2);
        a3 = _mm256_fmadd_ps(Load8(kj + 3 * d + x, d - x, tail), qv, a3);
      }
      _mm_storeu_ps(s + r * lds + j, Sum4(a0, a1, a2, a3));
    }
    for (; j < c; ++j) {
      __m256 a = _mm256_setzero_ps();
      for (int64_t x = 0; x < d; x += 8) {
        a = _mm256_fmadd_ps(Load8(qr + x, d - x, tail), Load8(k + j * d + x, d - x, tail), a);
      }
      const __m256 z = _mm256_setzero_ps();
      s[r * lds + j] = _mm_cvtss_f32(Sum4(a, z, z, z));
    }
  }
}

ATTN_AVX2 void PvAvx2(const float* p, int64_t rows, int64_t ldp, const float* v, int64_t c,
                      int64_t dv, float* o) {
  const __m256i tail = LaneMask256(dv % 8);
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* p0 = p + r * ldp;
    for (int64_t x = 0; x < dv; x += 8) {
      const int64_t left = dv - x;
      float* o0 = o + r * dv + x;
      __m256 a0 = Load8(o0, left, tail), a1 = Load8(o0 + dv, left, tail);
      __m256 a2 = Load8(o0 + 2 * dv, left, tail), a3 = Load8(o0 + 3 * dv, left, tail);
      for (int64_t j = 0; j < c; ++j) {
        const __m256 vv = Load8(v + j * dv + x, left, tail);
        a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + j), vv, a0);
        a1 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + ldp + j), vv, a1);
        a2 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + 2 * ldp + j), vv, a2);
        a3 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + 3 * ldp + j), vv, a3);
      }
      if (left >= 8) {
        _mm256_storeu_ps(o0, a0);
        _mm256_storeu_ps(o0 + dv, a1);
        _mm256_storeu_ps(o0 + 2 * dv, a2);
        _mm256_storeu_ps(o0 + 3 * dv, a3);
      } else {
        _mm256_maskstore_ps(o0, tail, a0);
        _mm256_maskstore_ps(o0 + dv, tail, a1);
        _mm256_maskstore_ps(o0 + 2 * dv, tail, a2);
        _mm256_maskstore_ps(o0 + 3 * dv, tail, a3);
      }
    }
  }
  for (; r < rows; ++r) {
    const float* pr = p + r * ldp;
    for (int64_t x = 0; x < dv; x += 32) {  // four vectors of the row at once
      float* orow = o + r * dv + x;
      const int64_t left = dv - x;
      const __m256i m0 = LaneMask256(left), m1 = LaneMask256(left - 8);
      const __m256i m2 = LaneMask256(left - 16), m3 = LaneMask256(left - 24);
      __m256 a0 = _mm256_maskload_ps(orow, m0), a1 = _mm256_maskload_ps(orow + 8, m1);
      __m256 a2 = _mm256_maskload_ps(orow + 16, m2), a3 = _mm256_maskload_ps(orow + 24, m3);
      for (int64_t j = 0; j < c; ++j) {
        const __m256 w = _mm256_broadcast_ss(pr + j);
        const float* vj = v + j * dv + x;
        a0 = _mm256_fmadd_ps(w, _mm256_maskload_ps(vj, m0), a0);
        a1 = _mm256_fmadd_ps(w, _mm256_maskload_ps(vj + 8, m1), a1);
        a2 = _mm256_fmadd_ps(w, _mm256_maskload_ps(vj + 16, m2), a2);
        a3 = _mm256_fmadd_ps(w, _mm256_maskload_ps(vj + 24, m3), a3);
      }
      _mm256_maskstore_ps(orow, m0, a0);
      _mm256_maskstore_ps(orow + 8, m1, a1);
      _mm256_maskstore_ps(orow + 16, m2, a2);
      _mm256_maskstore_ps(orow + 24, m3, a3);
    }
  }
}

// ---- In-register widening (D and Dv multiples of 8) ------------------------
// The page's elements are widened as they are loaded, never staged, and
// the next page is prefetched a token at a time while this one is used:
// a kv head's pages lie apart in the pool, where the hardware's stream
// prefetcher would stop at each page's edge.

#define ATTN_DECODE __attribute__((target("avx2,fma,f16c")))

struct LoadF32 {
  using T = float;
  ATTN_DECODE static __m256 Load(const float* p) { return _mm256_loadu_ps(p); }
};
struct LoadBf16 {
  using T = uint16_t;
  ATTN_DECODE static __m256 Load(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
};
struct LoadF16 {
  using T = uint16_t;
  ATTN_DECODE static __m256 Load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
};

// Prefetches the bytes [j * bytes, (j + 1) * bytes) of `next` (null: none).
// (GCC deletes a loop whose body is only _mm_prefetch as one without
// effects; the asm statement keeps each prefetch.)
inline void PrefetchToken(const uint8_t* next, int64_t bytes, int64_t j) {
  if (next == nullptr) return;
  for (int64_t b = 0; b < bytes; b += 64) {
    asm volatile("prefetcht0 %0" : : "m"(*(next + j * bytes + b)));
  }
}

template <typename L>
ATTN_DECODE void QkFast(const float* q, int64_t rows, const typename L::T* k, int64_t c, int64_t d,
                        float* s, int64_t lds, const uint8_t* next) {
  const int64_t tb = d * static_cast<int64_t>(sizeof(typename L::T));
  int64_t r = 0;
  // Four rows against two keys: eight independent sums, so the loop runs
  // at the FMA units' rate rather than one FMA's latency.
  for (; r + 4 <= rows; r += 4) {
    const float* q0 = q + r * d;
    int64_t j = 0;
    for (; j + 2 <= c; j += 2) {
      if (r == 0) {
        PrefetchToken(next, tb, j);
        PrefetchToken(next, tb, j + 1);
      }
      const typename L::T* kj = k + j * d;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
      for (int64_t x = 0; x < d; x += 8) {
        const __m256 k0 = L::Load(kj + x), k1 = L::Load(kj + d + x);
        const __m256 q0v = _mm256_loadu_ps(q0 + x), q1v = _mm256_loadu_ps(q0 + d + x);
        const __m256 q2v = _mm256_loadu_ps(q0 + 2 * d + x), q3v = _mm256_loadu_ps(q0 + 3 * d + x);
        a0 = _mm256_fmadd_ps(q0v, k0, a0);
        a1 = _mm256_fmadd_ps(q1v, k0, a1);
        a2 = _mm256_fmadd_ps(q2v, k0, a2);
        a3 = _mm256_fmadd_ps(q3v, k0, a3);
        b0 = _mm256_fmadd_ps(q0v, k1, b0);
        b1 = _mm256_fmadd_ps(q1v, k1, b1);
        b2 = _mm256_fmadd_ps(q2v, k1, b2);
        b3 = _mm256_fmadd_ps(q3v, k1, b3);
      }
      alignas(16) float out[8];
      _mm_store_ps(out, Sum4(a0, a1, a2, a3));
      _mm_store_ps(out + 4, Sum4(b0, b1, b2, b3));
      for (int i = 0; i < 4; ++i) {
        s[(r + i) * lds + j] = out[i];
        s[(r + i) * lds + j + 1] = out[4 + i];
      }
    }
    for (; j < c; ++j) {
      if (r == 0) PrefetchToken(next, tb, j);
      const typename L::T* kj = k + j * d;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t x = 0; x < d; x += 8) {
        const __m256 kv = L::Load(kj + x);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + x), kv, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d + x), kv, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + 2 * d + x), kv, a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + 3 * d + x), kv, a3);
      }
      alignas(16) float out[4];
      _mm_store_ps(out, Sum4(a0, a1, a2, a3));
      for (int i = 0; i < 4; ++i) s[(r + i) * lds + j] = out[i];
    }
  }
  for (; r < rows; ++r) {
    const float* qr = q + r * d;
    int64_t j = 0;
    for (; j + 4 <= c; j += 4) {  // one row against four keys
      if (r == 0) {
        for (int64_t jj = j; jj < j + 4; ++jj) PrefetchToken(next, tb, jj);
      }
      const typename L::T* kj = k + j * d;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t x = 0; x < d; x += 8) {
        const __m256 qv = _mm256_loadu_ps(qr + x);
        a0 = _mm256_fmadd_ps(L::Load(kj + x), qv, a0);
        a1 = _mm256_fmadd_ps(L::Load(kj + d + x), qv, a1);
        a2 = _mm256_fmadd_ps(L::Load(kj + 2 * d + x), qv, a2);
        a3 = _mm256_fmadd_ps(L::Load(kj + 3 * d + x), qv, a3);
      }
      _mm_storeu_ps(s + r * lds + j, Sum4(a0, a1, a2, a3));
    }
    for (; j < c; ++j) {
      if (r == 0) PrefetchToken(next, tb, j);
      __m256 a = _mm256_setzero_ps();
      for (int64_t x = 0; x < d; x += 8) {
        a = _mm256_fmadd_ps(_mm256_loadu_ps(qr + x), L::Load(k + j * d + x), a);
      }
      const __m256 z = _mm256_setzero_ps();
      s[r * lds + j] = _mm_cvtss_f32(Sum4(a, z, z, z));
    }
  }
}

// The next page's values, prefetched a slice per chunk of columns.
inline void PrefetchSlice(const uint8_t* next, int64_t tb, int64_t c, int64_t x, int64_t dv,
                          int64_t step) {
  if (next == nullptr) return;
  const int64_t chunks = dv / step, k = x / step;
  for (int64_t j = c * k / chunks; j < c * (k + 1) / chunks; ++j) PrefetchToken(next, tb, j);
}

template <typename L>
ATTN_DECODE void PvFast(const float* p, int64_t rows, int64_t ldp, const typename L::T* v,
                        int64_t c, int64_t dv, float* o, const uint8_t* next) {
  const int64_t tb = dv * static_cast<int64_t>(sizeof(typename L::T));
  int64_t r = 0;
  // Four rows by sixteen columns: eight independent sums per key.
  for (; r + 4 <= rows; r += 4) {
    const float* p0 = p + r * ldp;
    int64_t x = 0;
    for (; x + 16 <= dv; x += 16) {
      float* o0 = o + r * dv + x;
      __m256 a0 = _mm256_loadu_ps(o0), a1 = _mm256_loadu_ps(o0 + dv);
      __m256 a2 = _mm256_loadu_ps(o0 + 2 * dv), a3 = _mm256_loadu_ps(o0 + 3 * dv);
      __m256 b0 = _mm256_loadu_ps(o0 + 8), b1 = _mm256_loadu_ps(o0 + dv + 8);
      __m256 b2 = _mm256_loadu_ps(o0 + 2 * dv + 8), b3 = _mm256_loadu_ps(o0 + 3 * dv + 8);
      for (int64_t j = 0; j < c; ++j) {
        const __m256 v0 = L::Load(v + j * dv + x), v1 = L::Load(v + j * dv + x + 8);
        const __m256 w0 = _mm256_broadcast_ss(p0 + j), w1 = _mm256_broadcast_ss(p0 + ldp + j);
        const __m256 w2 = _mm256_broadcast_ss(p0 + 2 * ldp + j);
        const __m256 w3 = _mm256_broadcast_ss(p0 + 3 * ldp + j);
        a0 = _mm256_fmadd_ps(w0, v0, a0);
        a1 = _mm256_fmadd_ps(w1, v0, a1);
        a2 = _mm256_fmadd_ps(w2, v0, a2);
        a3 = _mm256_fmadd_ps(w3, v0, a3);
        b0 = _mm256_fmadd_ps(w0, v1, b0);
        b1 = _mm256_fmadd_ps(w1, v1, b1);
        b2 = _mm256_fmadd_ps(w2, v1, b2);
        b3 = _mm256_fmadd_ps(w3, v1, b3);
      }
      _mm256_storeu_ps(o0, a0);
      _mm256_storeu_ps(o0 + dv, a1);
      _mm256_storeu_ps(o0 + 2 * dv, a2);
      _mm256_storeu_ps(o0 + 3 * dv, a3);
      _mm256_storeu_ps(o0 + 8, b0);
      _mm256_storeu_ps(o0 + dv + 8, b1);
      _mm256_storeu_ps(o0 + 2 * dv + 8, b2);
      _mm256_storeu_ps(o0 + 3 * dv + 8, b3);
      if (r == 0) PrefetchSlice(next, tb, c, x, dv, 16);
    }
    for (; x < dv; x += 8) {
      float* o0 = o + r * dv + x;
      __m256 a0 = _mm256_loadu_ps(o0), a1 = _mm256_loadu_ps(o0 + dv);
      __m256 a2 = _mm256_loadu_ps(o0 + 2 * dv), a3 = _mm256_loadu_ps(o0 + 3 * dv);
      for (int64_t j = 0; j < c; ++j) {
        const __m256 vv = L::Load(v + j * dv + x);
        a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + j), vv, a0);
        a1 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + ldp + j), vv, a1);
        a2 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + 2 * ldp + j), vv, a2);
        a3 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + 3 * ldp + j), vv, a3);
      }
      _mm256_storeu_ps(o0, a0);
      _mm256_storeu_ps(o0 + dv, a1);
      _mm256_storeu_ps(o0 + 2 * dv, a2);
      _mm256_storeu_ps(o0 + 3 * dv, a3);
    }
  }
  // One row by 32 columns: four sums per key.
  for (; r < rows; ++r) {
    const float* pr = p + r * ldp;
    int64_t x = 0;
    for (; x + 32 <= dv; x += 32) {
      float* orow = o + r * dv + x;
      __m256 a0 = _mm256_loadu_ps(orow), a1 = _mm256_loadu_ps(orow + 8);
      __m256 a2 = _mm256_loadu_ps(orow + 16), a3 = _mm256_loadu_ps(orow + 24);
      for (int64_t j = 0; j < c; ++j) {
        const __m256 w = _mm256_broadcast_ss(pr + j);
        const typename L::T* vj = v + j * dv + x;
        a0 = _mm256_fmadd_ps(w, L::Load(vj), a0);
        a1 = _mm256_fmadd_ps(w, L::Load(vj + 8), a1);
        a2 = _mm256_fmadd_ps(w, L::Load(vj + 16), a2);
        a3 = _mm256_fmadd_ps(w, L::Load(vj + 24), a3);
      }
      _mm256_storeu_ps(orow, a0);
      _mm256_storeu_ps(orow + 8, a1);
      _mm256_storeu_ps(orow + 16, a2);
      _mm256_storeu_ps(orow + 24, a3);
      if (r == 0) PrefetchSlice(next, tb, c, x, dv, 32);
    }
    for (; x < dv; x += 8) {
      float* orow = o + r * dv + x;
      __m256 a0 = _mm256_loadu_ps(orow);
      for (int64_t j = 0; j < c; ++j) {
        a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(pr + j), L::Load(v + j * dv + x), a0);
      }
      _mm256_storeu_ps(orow, a0);
    }
  }
}

struct Kernels {
  QkFn qk;
  PvFn pv;
  const SoftmaxKernels* softmax;
  const HalfKernels* half;
  bool fast;  // QkFast/PvFast (AVX2 + FMA + F16C)
};

const Kernels& GetKernels() {
  static const Kernels k = [] {
    // The AVX-512 tier runs the AVX2 dot kernels: the task is bound by the
    // memory it reads, not by the vector width.
    const bool avx2 = KernelTier() >= IsaTier::kAvx2;
    return Kernels{avx2 ? QkAvx2 : QkPortable, avx2 ? PvAvx2 : PvPortable, &GetSoftmaxKernels(),
                   &GetHalfKernels(), avx2};
  }();
  return k;
}

void QkPage(PageElem e, const float* q, int64_t rows, const uint8_t* k, int64_t c, int64_t d,
            float* s, int64_t lds, const uint8_t* next) {
  switch (e) {
    case PageElem::kFloat32:
      return QkFast<LoadF32>(q, rows, reinterpret_cast<const float*>(k), c, d, s, lds, next);
    case PageElem::kBFloat16:
      return QkFast<LoadBf16>(q, rows, reinterpret_cast<const uint16_t*>(k), c, d, s, lds, next);
    case PageElem::kFloat16:
      return QkFast<LoadF16>(q, rows, reinterpret_cast<const uint16_t*>(k), c, d, s, lds, next);
  }
}

void PvPage(PageElem e, const float* p, int64_t rows, int64_t ldp, const uint8_t* v, int64_t c,
            int64_t dv, float* o, const uint8_t* next) {
  switch (e) {
    case PageElem::kFloat32:
      return PvFast<LoadF32>(p, rows, ldp, reinterpret_cast<const float*>(v), c, dv, o, next);
    case PageElem::kBFloat16:
      return PvFast<LoadBf16>(p, rows, ldp, reinterpret_cast<const uint16_t*>(v), c, dv, o, next);
    case PageElem::kFloat16:
      return PvFast<LoadF16>(p, rows, ldp, reinterpret_cast<const uint16_t*>(v), c, dv, o, next);
  }
}

int ElemBytes(PageElem e) { return e == PageElem::kFloat32 ? 4 : 2; }

// Keys [lo, hi) that query row t of `p` may see.
void RowRange(const DecodeProblem& p, int64_t t, int64_t* lo, int64_t* hi) {
  const int64_t pos = p.tokens - p.n + t;
  int64_t begin = 0, end = p.causal ? std::min(p.tokens, pos + 1) : p.tokens;
  if (p.window_left >= 0) begin = std::max<int64_t>(0, pos - p.window_left);
  if (p.window_right >= 0 && p.window_right < p.tokens - pos) {
    end = std::min(end, pos + p.window_right + 1);
  }
  *lo = begin;
  *hi = std::max(begin, end);
}

// Partial results of a task: o [R, Dv] unnormalised, m and l [R].
struct Partial {
  float* o;
  float* m;
  float* l;
};

struct Task {
  const DecodeProblem* p;
  int64_t p0, p1;  // pages [p0, p1) of every kv head
  Partial part;    // [Hkv][rows] of them
};

struct Scratch {
  std::vector<float> q, s, k, v;
  std::vector<int64_t> lo, hi;
};

Scratch& ThreadScratch() {
  thread_local Scratch s;
  return s;
}

const float* Widen(const Kernels& kern, PageElem e, const uint8_t* src, int64_t n,
                   std::vector<float>* buf) {
  if (e == PageElem::kFloat32) return reinterpret_cast<const float*>(src);
  if (static_cast<int64_t>(buf->size()) < n) buf->resize(static_cast<size_t>(n));
  const auto* h = reinterpret_cast<const uint16_t*>(src);
  if (e == PageElem::kBFloat16) {
    kern.half->bf16_to_f32(h, buf->data(), n);
  } else {
    kern.half->f16_to_f32(h, buf->data(), n);
  }
  return buf->data();
}

// One row's scores of keys [a, a + c) (row entries [ra, rb) are live): the
// score terms, then the online softmax's update of m, l and the row of o.
void UpdateRow(const Kernels& kern, const DecodeProblem& p, int64_t h, int64_t pos, float* srow,
               int64_t a, int64_t c, int64_t ra, int64_t rb, float* orow, float* m, float* l) {
  const SoftmaxKernels& sk = *kern.softmax;
  if (rb <= ra) {
    std::fill(srow, srow + c, 0.0f);
    return;
  }
  float* x = srow + (ra - a);
  const int64_t nr = rb - ra;
  if (p.softcap > 0.0f) {
    sk.softcap(x, nr, p.scale, p.softcap);
  } else {
    sk.scale(x, nr, p.scale);
  }
  if (p.alibi != nullptr) sk.alibi(x, nr, p.alibi[h], pos, ra);
  const float mb = sk.scaled_max(x, nr, 1.0f);
  const float mnew = std::isnan(mb) ? mb : std::max(*m, mb);
  std::fill(srow, x, 0.0f);
  std::fill(x + nr, srow + c, 0.0f);
  if (mnew == kNegInf) {  // every live score is -inf: nothing seen yet
    std::fill(x, x + nr, 0.0f);
    return;
  }
  if (*m != mnew) {
    const float alpha = *m == kNegInf ? 0.0f : std::exp(*m - mnew);
    sk.scale(orow, p.dv, alpha);
    *l *= alpha;
    *m = mnew;
  }
  *l += sk.exp_sum(x, nr, 1.0f, mnew);
}

// A task: pages [p0, p1) of every kv head, page by page and head by head
// within a page, so that it sweeps the pool in the order the heads' pages
// were allocated (together, one per head, as the layer grew).
void RunTask(const Kernels& kern, const Task& task, Scratch& sc) {
  const DecodeProblem& p = *task.p;
  const int64_t group = p.hq / p.hkv, rows = group * p.n, d = p.d, dv = p.dv;
  const int64_t T = p.tokens_per_page, es = ElemBytes(p.elem);
  sc.q.resize(static_cast<size_t>(p.hkv * rows * d));
  sc.s.resize(static_cast<size_t>(rows * T));
  sc.lo.resize(static_cast<size_t>(p.n));
  sc.hi.resize(static_cast<size_t>(p.n));
  for (int64_t h = 0; h < p.hq; ++h) {  // head h's rows at (h * n + t) * d: group-major
    for (int64_t t = 0; t < p.n; ++t) {
      const float* src = p.q + h * p.q_stride[0] + t * p.q_stride[1];
      float* dst = sc.q.data() + (h * p.n + t) * d;
      for (int64_t x = 0; x < d; ++x) dst[x] = src[x * p.q_stride[2]];
    }
  }
  for (int64_t t = 0; t < p.n; ++t) RowRange(p, t, &sc.lo[t], &sc.hi[t]);
  std::fill(task.part.o, task.part.o + p.hkv * rows * dv, 0.0f);
  std::fill(task.part.m, task.part.m + p.hkv * rows, kNegInf);
  std::fill(task.part.l, task.part.l + p.hkv * rows, 0.0f);
  const int64_t lo_u = *std::min_element(sc.lo.begin(), sc.lo.end());
  const int64_t hi_u = *std::max_element(sc.hi.begin(), sc.hi.end());
  const bool fast = kern.fast && d % 8 == 0 && dv % 8 == 0;
  for (int64_t pg = task.p0; pg < task.p1; ++pg) {
    const int64_t j0 = pg * T;
    const int64_t a = std::max(j0, lo_u), b = std::min({j0 + T, p.tokens, hi_u});
    if (b <= a) continue;
    const int64_t c = b - a;
    for (int64_t g = 0; g < p.hkv; ++g) {
      const uint8_t* base = p.pages[g * p.pages_per_head + pg];
      const uint8_t* kpage = base + (a - j0) * d * es;
      const uint8_t* vpage = base + T * d * es + (a - j0) * dv * es;
      // The same offsets in the page read next, to prefetch: the next
      // head's, or the first head's of the next page.
      const uint8_t *knext = nullptr, *vnext = nullptr;
      int64_t ng = g + 1, npg = pg;
      if (ng == p.hkv) ng = 0, npg = pg + 1;
      if (npg < task.p1 && npg * T < std::min(p.tokens, hi_u)) {
        const uint8_t* nb = p.pages[ng * p.pages_per_head + npg];
        const int64_t off = std::max<int64_t>(0, lo_u - npg * T);
        knext = nb + off * d * es;
        vnext = nb + T * d * es + off * dv * es;
      }
      const float* qg = sc.q.data() + g * rows * d;
      float* og = task.part.o + g * rows * dv;
      if (fast) {
        QkPage(p.elem, qg, rows, kpage, c, d, sc.s.data(), T, knext);
      } else {
        const float* kf = Widen(kern, p.elem, kpage, c * d, &sc.k);
        kern.qk(qg, rows, kf, c, d, sc.s.data(), T);
      }
      for (int64_t hh = 0; hh < group; ++hh) {
        for (int64_t t = 0; t < p.n; ++t) {
          const int64_t r = hh * p.n + t;
          UpdateRow(kern, p, g * group + hh, p.tokens - p.n + t, sc.s.data() + r * T, a, c,
                    std::max(a, sc.lo[t]), std::min(b, sc.hi[t]), og + r * dv,
                    task.part.m + g * rows + r, task.part.l + g * rows + r);
        }
      }
      if (fast) {
        PvPage(p.elem, sc.s.data(), rows, T, vpage, c, dv, og, vnext);
      } else {
        const float* vf = Widen(kern, p.elem, vpage, c * dv, &sc.v);
        kern.pv(sc.s.data(), rows, T, vf, c, dv, og);
      }
    }
  }
}

// Merges kv head g's partials of a problem's slices and writes its rows.
void Finish(const DecodeProblem& p, int64_t g, const Task* slices, int64_t count) {
  const int64_t group = p.hq / p.hkv, dv = p.dv;
  for (int64_t hh = 0; hh < group; ++hh) {
    const int64_t h = g * group + hh;
    const float sink = p.sink != nullptr ? p.sink[h] : kNegInf;
    for (int64_t t = 0; t < p.n; ++t) {
      const int64_t r = hh * p.n + t;
      float m = sink;
      for (int64_t s = 0; s < count; ++s) m = std::max(m, slices[s].part.m[g * group * p.n + r]);
      float* out = p.out + (h * p.n + t) * dv;
      std::fill(out, out + dv, 0.0f);
      if (m == kNegInf || std::isnan(m)) {
        if (p.lse != nullptr) p.lse[h * p.n + t] = m;
        continue;
      }
      double total = sink == kNegInf ? 0.0 : std::exp(static_cast<double>(sink - m));
      for (int64_t s = 0; s < count; ++s) {
        const Partial& part = slices[s].part;
        const int64_t gr = g * group * p.n + r;  // the row among all kv heads' rows
        if (part.m[gr] == kNegInf) continue;
        const float w = std::exp(part.m[gr] - m);
        total += static_cast<double>(part.l[gr]) * w;
        const float* o = part.o + gr * dv;
        for (int64_t x = 0; x < dv; ++x) out[x] += w * o[x];
      }
      const float inv = static_cast<float>(1.0 / total);
      for (int64_t x = 0; x < dv; ++x) out[x] *= inv;
      if (p.lse != nullptr) p.lse[h * p.n + t] = m + static_cast<float>(std::log(total));
    }
  }
}

// Pages of `p` that some row may read: [*first, *last).
void VisiblePages(const DecodeProblem& p, int64_t* first, int64_t* last) {
  int64_t lo = p.tokens, hi = 0;
  for (int64_t t = 0; t < p.n; ++t) {
    int64_t a, b;
    RowRange(p, t, &a, &b);
    if (b > a) {
      lo = std::min(lo, a);
      hi = std::max(hi, b);
    }
  }
  const int64_t T = p.tokens_per_page;
  *first = hi > lo ? lo / T : 0;
  *last = hi > lo ? (hi + T - 1) / T : 0;
}

}  // namespace

Status RunDecodeAttention(const std::vector<const DecodeProblem*>& problems, int threads,
                          const std::atomic<bool>* cancelled) {
  const Kernels& kern = GetKernels();
  if (threads <= 0) threads = ComputeThreads();
  int64_t live = 0;
  for (const DecodeProblem* p : problems) live += p->n > 0 ? 1 : 0;
  // Split-K when the problems cannot keep the team busy; a slice keeps at
  // least kMinSlicePages pages a head, so its merge costs little against
  // its reads.
  constexpr int64_t kMinSlicePages = 4;
  const int64_t want = live > 0 && live < 2 * threads ? (2 * threads + live - 1) / live : 1;
  std::vector<Task> tasks;
  std::vector<std::pair<size_t, size_t>> slices_at;  // (first task, count) per problem
  std::vector<float> storage;
  for (int pass = 0; pass < 2; ++pass) {  // sizes, then the tasks with their storage
    size_t at = 0;
    for (const DecodeProblem* p : problems) {
      if (p->n == 0) continue;
      int64_t first, last;
      VisiblePages(*p, &first, &last);
      const int64_t visible = last - first;
      const int64_t slices = std::max<int64_t>(1, std::min(want, visible / kMinSlicePages));
      const int64_t rows = p->hq * p->n;  // of every kv head
      if (pass == 1) slices_at.emplace_back(tasks.size(), static_cast<size_t>(slices));
      for (int64_t s = 0; s < slices; ++s) {
        if (pass == 1) {
          float* o = storage.data() + at;
          tasks.push_back(Task{p, first + visible * s / slices, first + visible * (s + 1) / slices,
                               Partial{o, o + rows * p->dv, o + rows * p->dv + rows}});
        }
        at += static_cast<size_t>(rows * (p->dv + 2));
      }
    }
    if (pass == 0) storage.resize(at);
  }
  std::atomic<bool> stop{false};
  auto run = [&](int64_t i) {
    if (stop.load(std::memory_order_relaxed)) return;
    if (cancelled != nullptr && cancelled->load(std::memory_order_relaxed)) {
      stop = true;
      return;
    }
    RunTask(kern, tasks[static_cast<size_t>(i)], ThreadScratch());
  };
  const int64_t n = static_cast<int64_t>(tasks.size());
  const int team = static_cast<int>(std::min<int64_t>(threads, n));
  if (team <= 1) {
    for (int64_t i = 0; i < n; ++i) run(i);
  } else {
#pragma omp parallel for num_threads(team) schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i) run(i);
  }
  if (stop.load() || (cancelled != nullptr && cancelled->load())) {
    return Status::Cancelled("extend: cancelled");
  }
  for (const auto& [first, count] : slices_at) {
    const Task& t = tasks[first];
    for (int64_t g = 0; g < t.p->hkv; ++g)
      Finish(*t.p, g, &tasks[first], static_cast<int64_t>(count));
  }
  // Problems with no query rows have nothing to write.
  return Status::Ok();
}

}  // namespace attn::internal
