// A register-blocked matmul for the per-head products of tiny problems.
// Internal to core.
//
// Below AVX-512, oneDNN 2.6 has no brgemm: each gemm:jit call costs about
// 2 µs of fixed work, several times the math of a 16x16x16 head product.
// This kernel has no set-up at all. It is offered on the AVX2 tier only: on
// AVX-512 the batched brgemm is faster, and the portable tier keeps oneDNN.
#pragma once

#include <cstdint>

#include "attn/cpu_info.h"

namespace attn::internal {

// C[m, n] = A[m, k] B[k, n]; row-major, with leading dims lda, ldb, ldc.
// Reads no element outside those ranges.
using SmallMatmulFn = void (*)(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                               const float* b, int64_t ldb, float* c, int64_t ldc);

// The kernel of `tier`, or null when that tier has none (see above).
SmallMatmulFn SmallMatmulFor(IsaTier tier);

// Products up to this many multiply-adds (m * n * k) go to the kernel; past
// it oneDNN's packing pays for itself.
constexpr int64_t kSmallMatmulMaxMacs = 32 * 1024;

}  // namespace attn::internal
