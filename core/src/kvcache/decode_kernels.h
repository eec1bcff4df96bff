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

}  // namespace attn::internal
