// Internal to core: what the SIMD kernels (softmax_kernels.cc,
// small_matmul.cc, tile_matmul.cc, online_block.cc, half.cc) share: the
// target attributes and the tail masks. Functions are compiled for their ISA
// with a target attribute, not -march, and run only after CpuHasTier says so.
#pragma once

// GCC 12 warns about _mm512_undefined_ps inside its own intrinsic headers
// (GCC bug 105593); the warnings are false positives.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>

#define ATTN_AVX2 __attribute__((target("avx2,fma")))
#define ATTN_AVX512 __attribute__((target("avx512f")))

namespace attn::internal {

// Lanes [0, lanes) set; `lanes` may be <= 0 (none) or >= 8 (all). For the
// masked loads and stores of a row's tail.
ATTN_AVX2 inline __m256i LaneMask256(int64_t lanes) {
  const int n = lanes <= 0 ? 0 : lanes >= 8 ? 8 : static_cast<int>(lanes);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The AVX-512 twin: lanes [0, n) of a 16-lane mask, n clamped to [0, 16].
ATTN_AVX512 inline __mmask16 Lanes16(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF)
                 : static_cast<__mmask16>(n <= 0 ? 0u : (1u << n) - 1u);
}

}  // namespace attn::internal
