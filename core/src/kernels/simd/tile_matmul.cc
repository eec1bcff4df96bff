#include "kernels/simd/tile_matmul.h"

#include <algorithm>

#include "kernels/simd/vec_math.h"
#include "support/isa_cap.h"
#include "support/simd.h"

namespace attn::internal {
namespace {

// ---- AVX2 + FMA ---------------------------------------------------------------

// Rows [0, R) by 16 columns of C: 2R accumulators in registers over the
// whole k loop. `Full`: all 16 columns; else the masks cut the tail, and
// masked lanes are neither read nor written.
template <int R, bool Full>
ATTN_AVX2 inline void TileAvx2(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                               float* c, int64_t ldc, bool accumulate, __m256i mask0,
                               __m256i mask1) {
  __m256 acc0[R], acc1[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    if (accumulate) {
      acc0[r] = Full ? _mm256_loadu_ps(c + r * ldc) : _mm256_maskload_ps(c + r * ldc, mask0);
      acc1[r] =
          Full ? _mm256_loadu_ps(c + r * ldc + 8) : _mm256_maskload_ps(c + r * ldc + 8, mask1);
    } else {
      acc0[r] = _mm256_setzero_ps();
      acc1[r] = _mm256_setzero_ps();
    }
  }
  for (int64_t p = 0; p < k; ++p) {
    const float* bp = b + p * ldb;
    const __m256 b0 = Full ? _mm256_loadu_ps(bp) : _mm256_maskload_ps(bp, mask0);
    const __m256 b1 = Full ? _mm256_loadu_ps(bp + 8) : _mm256_maskload_ps(bp + 8, mask1);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r * lda + p);
      acc0[r] = _mm256_fmadd_ps(av, b0, acc0[r]);
      acc1[r] = _mm256_fmadd_ps(av, b1, acc1[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    if (Full) {
      _mm256_storeu_ps(c + r * ldc, acc0[r]);
      _mm256_storeu_ps(c + r * ldc + 8, acc1[r]);
    } else {
      _mm256_maskstore_ps(c + r * ldc, mask0, acc0[r]);
      _mm256_maskstore_ps(c + r * ldc + 8, mask1, acc1[r]);
    }
  }
}

template <bool Full>
ATTN_AVX2 void ColumnsAvx2(int64_t m, int64_t k, const float* a, int64_t lda, const float* b,
                           int64_t ldb, float* c, int64_t ldc, bool acc, __m256i mask0,
                           __m256i mask1) {
  int64_t i = 0;
  for (; i + 6 <= m; i += 6) {
    TileAvx2<6, Full>(k, a + i * lda, lda, b, ldb, c + i * ldc, ldc, acc, mask0, mask1);
  }
  const float* ai = a + i * lda;
  float* ci = c + i * ldc;
  switch (m - i) {
    case 5:
      TileAvx2<5, Full>(k, ai, lda, b, ldb, ci, ldc, acc, mask0, mask1);
      break;
    case 4:
      TileAvx2<4, Full>(k, ai, lda, b, ldb, ci, ldc, acc, mask0, mask1);
      break;
    case 3:
      TileAvx2<3, Full>(k, ai, lda, b, ldb, ci, ldc, acc, mask0, mask1);
      break;
    case 2:
      TileAvx2<2, Full>(k, ai, lda, b, ldb, ci, ldc, acc, mask0, mask1);
      break;
    case 1:
      TileAvx2<1, Full>(k, ai, lda, b, ldb, ci, ldc, acc, mask0, mask1);
      break;
    default:
      break;
  }
}

ATTN_AVX2 void MatmulAvx2(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                          const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  for (int64_t j = 0; j < n; j += 16) {
    if (n - j >= 16) {
      const __m256i all = _mm256_set1_epi32(-1);
      ColumnsAvx2<true>(m, k, a, lda, b + j, ldb, c + j, ldc, accumulate, all, all);
    } else {
      ColumnsAvx2<false>(m, k, a, lda, b + j, ldb, c + j, ldc, accumulate, LaneMask256(n - j),
                         LaneMask256(n - j - 8));
    }
  }
}

// dst[c * ldd + r] = src[r * lds + c] for one 8x8 block, in registers.
ATTN_AVX2 inline void Transpose8x8(const float* src, int64_t lds, float* dst, int64_t ldd) {
  __m256 r[8], t[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * lds);
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // r[4h + c]: column c (lane 0) and c + 4 (lane 1) of rows 4h .. 4h + 3.
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    r[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
    r[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
    r[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    r[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    _mm256_storeu_ps(dst + c * ldd, _mm256_permute2f128_ps(r[c], r[4 + c], 0x20));
    _mm256_storeu_ps(dst + (c + 4) * ldd, _mm256_permute2f128_ps(r[c], r[4 + c], 0x31));
  }
}

// ---- AVX-512 ------------------------------------------------------------------

// Rows [0, R) by V vectors of 16 columns of C (the last cut to `last`'s
// lanes): R * V accumulators in registers over the whole k loop.
template <int R, int V>
ATTN_AVX512 inline void Tile512(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                                float* c, int64_t ldc, bool accumulate, __mmask16 last) {
  __m512 acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      const __mmask16 lanes = v == V - 1 ? last : static_cast<__mmask16>(0xFFFF);
      acc[r][v] =
          accumulate ? _mm512_maskz_loadu_ps(lanes, c + r * ldc + 16 * v) : _mm512_setzero_ps();
    }
  }
  for (int64_t p = 0; p < k; ++p) {
    const float* bp = b + p * ldb;
    __m512 bv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      bv[v] = v == V - 1 ? _mm512_maskz_loadu_ps(last, bp + 16 * v) : _mm512_loadu_ps(bp + 16 * v);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * lda + p]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      if (v == V - 1) {
        _mm512_mask_storeu_ps(c + r * ldc + 16 * v, last, acc[r][v]);
      } else {
        _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
      }
    }
  }
}

template <int V>
ATTN_AVX512 void Columns512(int64_t m, int64_t k, const float* a, int64_t lda, const float* b,
                            int64_t ldb, float* c, int64_t ldc, bool acc, __mmask16 last) {
  int64_t i = 0;
  for (; i + 6 <= m; i += 6) {
    Tile512<6, V>(k, a + i * lda, lda, b, ldb, c + i * ldc, ldc, acc, last);
  }
  const float* ai = a + i * lda;
  float* ci = c + i * ldc;
  switch (m - i) {
    case 5:
      Tile512<5, V>(k, ai, lda, b, ldb, ci, ldc, acc, last);
      break;
    case 4:
      Tile512<4, V>(k, ai, lda, b, ldb, ci, ldc, acc, last);
      break;
    case 3:
      Tile512<3, V>(k, ai, lda, b, ldb, ci, ldc, acc, last);
      break;
    case 2:
      Tile512<2, V>(k, ai, lda, b, ldb, ci, ldc, acc, last);
      break;
    case 1:
      Tile512<1, V>(k, ai, lda, b, ldb, ci, ldc, acc, last);
      break;
    default:
      break;
  }
}

ATTN_AVX512 void Matmul512(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                           const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  for (int64_t j = 0; j < n; j += 64) {
    const int64_t cols = std::min<int64_t>(64, n - j);
    const int64_t vectors = (cols + 15) / 16;
    const __mmask16 last = Lanes16(cols - 16 * (vectors - 1));
    switch (vectors) {
      case 4:
        Columns512<4>(m, k, a, lda, b + j, ldb, c + j, ldc, accumulate, last);
        break;
      case 3:
        Columns512<3>(m, k, a, lda, b + j, ldb, c + j, ldc, accumulate, last);
        break;
      case 2:
        Columns512<2>(m, k, a, lda, b + j, ldb, c + j, ldc, accumulate, last);
        break;
      default:
        Columns512<1>(m, k, a, lda, b + j, ldb, c + j, ldc, accumulate, last);
        break;
    }
  }
}

// dst[c * ldd + r] = src[r * lds + c] for one 16x16 block, in registers.
ATTN_AVX512 inline void Transpose16x16(const float* src, int64_t lds, float* dst, int64_t ldd) {
  __m512 r[16], t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * lds);
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // r[4h + c]: in 128-bit lane L, column 4L + c of rows 4h .. 4h + 3.
#pragma GCC unroll 4
  for (int h = 0; h < 4; ++h) {
    r[4 * h + 0] = _mm512_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
    r[4 * h + 1] = _mm512_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
    r[4 * h + 2] = _mm512_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    r[4 * h + 3] = _mm512_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    // Lanes (0, 2) and (1, 3) of row groups 0, 1, then of groups 2, 3.
    const __m512 u0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);
    const __m512 u1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xDD);
    const __m512 u2 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
    const __m512 u3 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xDD);
    _mm512_storeu_ps(dst + (c + 0) * ldd, _mm512_shuffle_f32x4(u0, u2, 0x88));
    _mm512_storeu_ps(dst + (c + 4) * ldd, _mm512_shuffle_f32x4(u1, u3, 0x88));
    _mm512_storeu_ps(dst + (c + 8) * ldd, _mm512_shuffle_f32x4(u0, u2, 0xDD));
    _mm512_storeu_ps(dst + (c + 12) * ldd, _mm512_shuffle_f32x4(u1, u3, 0xDD));
  }
}

// ---- Transposes of any size: square blocks in registers, scalar edges ----------

using BlockTransposeFn = void (*)(const float*, int64_t, float*, int64_t);

template <int N>
void TransposeBlocks(BlockTransposeFn block, const float* src, int64_t rows, int64_t cols,
                     int64_t lds, float* dst, int64_t ldd) {
  const int64_t rows_n = rows / N * N, cols_n = cols / N * N;
  for (int64_t r = 0; r < rows_n; r += N) {
    for (int64_t c = 0; c < cols_n; c += N) block(src + r * lds + c, lds, dst + c * ldd + r, ldd);
  }
  for (int64_t r = 0; r < rows; ++r) {
    // The columns past the last full block, and every column of the last rows.
    for (int64_t c = r < rows_n ? cols_n : 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
  }
}

ATTN_AVX2 void TransposeAvx2(const float* src, int64_t rows, int64_t cols, int64_t lds, float* dst,
                             int64_t ldd) {
  TransposeBlocks<8>(Transpose8x8, src, rows, cols, lds, dst, ldd);
}

ATTN_AVX512 void Transpose512(const float* src, int64_t rows, int64_t cols, int64_t lds, float* dst,
                              int64_t ldd) {
  TransposeBlocks<16>(Transpose16x16, src, rows, cols, lds, dst, ldd);
}

}  // namespace

const TileKernels* TileKernelsFor(IsaTier tier) {
  static const TileKernels kAvx2{MatmulAvx2, TransposeAvx2, IsaTier::kAvx2};
  static const TileKernels kAvx512{Matmul512, Transpose512, IsaTier::kAvx512};
  if (tier == IsaTier::kPortable || !CpuHasTier(tier)) return nullptr;
  return tier == IsaTier::kAvx512 ? &kAvx512 : &kAvx2;
}

const TileKernels* GetTileKernels() {
  static const TileKernels* kernels = TileKernelsFor(KernelTier());
  return kernels;
}

}  // namespace attn::internal
