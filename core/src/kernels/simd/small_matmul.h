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

// C[m, n] = A[m, k] B[k, n] (+ bias[n] on every row, when not null);
// row-major, with leading dims lda, ldb, ldc. Reads no element outside
// those ranges.
using SmallMatmulFn = void (*)(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                               const float* b, int64_t ldb, const float* bias, float* c,
                               int64_t ldc);

// The kernel of `tier`, or null when that tier has none (see above).
SmallMatmulFn SmallMatmulFor(IsaTier tier);

// Per-head products up to this many multiply-adds (m * n * k) go to the
// kernel; past it oneDNN's packing pays for itself.
constexpr int64_t kSmallMatmulMaxMacs = 32 * 1024;

// Projections (x W^T + b) with a weight its owner packed as W^T (a model, at
// load time; see LinearView::weight_t) go to the kernel up to this many
// multiply-adds on one thread: there oneDNN's fixed cost per call (about 2
// µs for gemm:jit) is a large share of the math.
constexpr int64_t kSmallLinearMaxMacs = 256 * 1024;

// Weights up to this many elements are packed as W^T by models on tiers
// with a kernel (memory: at most 1 MiB more per projection).
constexpr int64_t kPackedWeightMaxElements = 256 * 1024;

}  // namespace attn::internal
