// Register-tiled float32 matmuls for the blocked kernel's edge blocks.
// Internal to core.
//
// A band's edge blocks (blocked_attention.cc) are at most kEdgeK = 64 keys
// wide and a varying number of rows tall: S = Q K^T is [rows, 64] over D,
// O += P V is [rows, Dv] over 64. oneDNN pays a fixed cost per execute
// (and brgemm builds a kernel per distinct row count), which at these sizes
// is a large share of the math: measured, its edge blocks ran at 45-65% of
// the middle blocks' rate. These kernels have no set-up: accumulators stay
// in registers over the whole k loop (6 rows by 64 columns on AVX-512, 6 by
// 16 on AVX2). K^T for the scores is made by in-register transposes.
#pragma once

#include <cstdint>

#include "attn/cpu_info.h"

namespace attn::internal {

struct TileKernels {
  // C[m, n] = A[m, k] B[k, n], or C += A B when `accumulate`; row-major with
  // leading dims lda, ldb, ldc. Reads and writes nothing outside those
  // ranges.
  void (*matmul)(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                 int64_t ldb, float* c, int64_t ldc, bool accumulate);
  // dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols.
  void (*transpose)(const float* src, int64_t rows, int64_t cols, int64_t lds, float* dst,
                    int64_t ldd);
  IsaTier tier;
};

// The kernels of `tier`, or null when the CPU cannot run it or the tier has
// none (the portable tier keeps oneDNN).
const TileKernels* TileKernelsFor(IsaTier tier);

// The kernels of KernelTier(), or null (as above).
const TileKernels* GetTileKernels();

}  // namespace attn::internal
