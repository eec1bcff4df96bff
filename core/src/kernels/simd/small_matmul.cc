#include "kernels/simd/small_matmul.h"

#include "support/isa_cap.h"
#include "support/simd.h"

namespace attn::internal {
namespace {

// Rows [0, R) by up to 16 columns of C: 2R accumulators stay in registers for
// the whole k loop, starting from the bias (or zero). Masked loads and
// stores cover column tails and never touch memory in masked lanes.
template <int R>
ATTN_AVX2 inline void Tile(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                           const float* bias, float* c, int64_t ldc, __m256i mask0, __m256i mask1) {
  const __m256 init0 = bias != nullptr ? _mm256_maskload_ps(bias, mask0) : _mm256_setzero_ps();
  const __m256 init1 = bias != nullptr ? _mm256_maskload_ps(bias + 8, mask1) : _mm256_setzero_ps();
  __m256 acc0[R], acc1[R];
  for (int r = 0; r < R; ++r) acc0[r] = init0, acc1[r] = init1;
  for (int64_t p = 0; p < k; ++p) {
    const __m256 b0 = _mm256_maskload_ps(b + p * ldb, mask0);
    const __m256 b1 = _mm256_maskload_ps(b + p * ldb + 8, mask1);
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r * lda + p);
      acc0[r] = _mm256_fmadd_ps(av, b0, acc0[r]);
      acc1[r] = _mm256_fmadd_ps(av, b1, acc1[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm256_maskstore_ps(c + r * ldc, mask0, acc0[r]);
    _mm256_maskstore_ps(c + r * ldc + 8, mask1, acc1[r]);
  }
}

ATTN_AVX2 void SmallMatmulAvx2(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                               const float* b, int64_t ldb, const float* bias, float* c,
                               int64_t ldc) {
  for (int64_t j = 0; j < n; j += 16) {
    const __m256i mask0 = LaneMask256(n - j), mask1 = LaneMask256(n - j - 8);
    const float* bias_j = bias != nullptr ? bias + j : nullptr;
    int64_t i = 0;
    for (; i + 4 <= m; i += 4)
      Tile<4>(k, a + i * lda, lda, b + j, ldb, bias_j, c + i * ldc + j, ldc, mask0, mask1);
    switch (m - i) {
      case 3:
        Tile<3>(k, a + i * lda, lda, b + j, ldb, bias_j, c + i * ldc + j, ldc, mask0, mask1);
        break;
      case 2:
        Tile<2>(k, a + i * lda, lda, b + j, ldb, bias_j, c + i * ldc + j, ldc, mask0, mask1);
        break;
      case 1:
        Tile<1>(k, a + i * lda, lda, b + j, ldb, bias_j, c + i * ldc + j, ldc, mask0, mask1);
        break;
      default:
        break;
    }
  }
}

}  // namespace

SmallMatmulFn SmallMatmulFor(IsaTier tier) {
  return tier == IsaTier::kAvx2 && CpuHasTier(tier) ? SmallMatmulAvx2 : nullptr;
}

}  // namespace attn::internal
