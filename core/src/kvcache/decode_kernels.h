// The decode kernel's dot products (decode_attention.cc): scores of a
// task's query rows against a page's keys, and the weighted sum of its
// values. AVX2 + FMA + F16C versions that widen the page's elements in
// registers (D and Dv multiples of 8), and on the AVX-512 tier the same
// sixteen lanes wide for D and Dv multiples of 16 (half the instructions
// per byte: on a CPU with fast memory the AVX2 loops ran out of
// instructions before bandwidth). Portable loops for the portable tier and
// for other widths. Internal to core.
#pragma once

#include <cstdint>

#include "kernels/simd/softmax_kernels.h"
#include "kvcache/decode_attention.h"
#include "support/half_kernels.h"
#include "support/simd.h"

namespace attn::internal {

// s[r * lds + j] = q_r . k_j for r < rows, j < c (q rows dense, d long).
using QkFn = void (*)(const float* q, int64_t rows, const float* k, int64_t c, int64_t d, float* s,
                      int64_t lds);
// o[r * dv + x] += sum_j p[r * ldp + j] * v[j * dv + x].
using PvFn = void (*)(const float* p, int64_t rows, int64_t ldp, const float* v, int64_t c,
                      int64_t dv, float* o);

struct DecodeKernels {
  QkFn qk;  // portable; float32 keys of any D (half pages widened first)
  PvFn pv;
  const SoftmaxKernels* softmax;
  const HalfKernels* half;
  // QkPage/PvPage below may run: keys and values read from the page in
  // its own type, for D and Dv multiples of 8.
  bool in_register;
};

const DecodeKernels& GetDecodeKernels();

// As QkFn and PvFn over a page's elements of type `e` widened in
// registers; `next` (or null) is the same place in the page read next,
// prefetched a token at a time. Only where in_register.
void QkPage(PageElem e, const float* q, int64_t rows, const uint8_t* k, int64_t c, int64_t d,
            float* s, int64_t lds, const uint8_t* next);
void PvPage(PageElem e, const float* p, int64_t rows, int64_t ldp, const uint8_t* v, int64_t c,
            int64_t dv, float* o, const uint8_t* next);

// ---- shared by the AVX2 loops (decode_kernels.cc) and the AVX-512 ones
// (decode_kernels_avx512.cc) ----

// Sums of four vectors' lanes: {sum a0, sum a1, sum a2, sum a3}.
ATTN_AVX2 inline __m128 Sum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

// Prefetches the bytes [j * bytes, (j + 1) * bytes) of `next` (null: none).
// (GCC deletes a loop whose body is only _mm_prefetch as one without
// effects; the asm statement keeps each prefetch.)
inline void PrefetchToken(const uint8_t* next, int64_t bytes, int64_t j) {
  if (next == nullptr) return;
  for (int64_t b = 0; b < bytes; b += 64) {
    asm volatile("prefetcht0 %0" : : "m"(*(next + j * bytes + b)));
  }
}

// The next page's values, prefetched a slice per chunk of columns.
inline void PrefetchSlice(const uint8_t* next, int64_t tb, int64_t c, int64_t x, int64_t dv,
                          int64_t step) {
  if (next == nullptr) return;
  const int64_t chunks = dv / step, k = x / step;
  for (int64_t j = c * k / chunks; j < c * (k + 1) / chunks; ++j) PrefetchToken(next, tb, j);
}

// The AVX-512 loops run for this width (D or Dv): a multiple of 16 on the
// AVX-512 tier.
bool UseAvx512(int64_t width);
// QkPage and PvPage sixteen lanes wide (decode_kernels.h), where UseAvx512.
void QkPage512(PageElem e, const float* q, int64_t rows, const uint8_t* k, int64_t c, int64_t d,
               float* s, int64_t lds, const uint8_t* next);
void PvPage512(PageElem e, const float* p, int64_t rows, int64_t ldp, const uint8_t* v, int64_t c,
               int64_t dv, float* o, const uint8_t* next);

}  // namespace attn::internal
