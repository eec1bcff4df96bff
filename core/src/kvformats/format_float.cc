// The floating formats: float32 as given, bfloat16 and float16 rounded to
// nearest even; no factor. Their codes widen in registers: bf16 by a shift,
// f16 by F16C.
#include <cstring>

#include "attn/half.h"
#include "kvformats/formats.h"
#include "kvformats/page_loops_avx512.h"
#include "support/half_kernels.h"

namespace attn::internal {
namespace {

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
struct Load512F32 {
  using T = float;
  ATTN_DECODE512 static __m512 Load(const float* p) { return _mm512_loadu_ps(p); }
};
// Load32 takes 32 values as 16 pairs: a pair's even value is its low
// half shifted up, its odd value its high half masked (two instructions
// for 32 values, against four widening 16 at a time).
struct Load512Bf16 {
  using T = uint16_t;
  static constexpr bool kEvenOdd = true;
  static constexpr float kUnit32 = 1.0f;
  ATTN_DECODE512 static __m512 Load(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  ATTN_DECODE512 static void Load32(const uint16_t* p, __m512* even, __m512* odd) {
    const __m512i x = _mm512_loadu_si512(p);
    *even = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
    *odd =
        _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
};
struct Load512F16 {
  using T = uint16_t;
  ATTN_DECODE512 static __m512 Load(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
};

float EncodeF32(const float* src, int64_t dim, uint8_t* row) {
  std::memcpy(row, src, static_cast<size_t>(dim) * 4);
  return 1.0f;
}
void WidenF32(const uint8_t* codes, int64_t c, int64_t dim, float* dst) {
  std::memcpy(dst, codes, static_cast<size_t>(c * dim) * 4);
}

template <HalfType H>
float EncodeHalf(const float* src, int64_t dim, uint8_t* row) {
  FloatToHalf(H, src, reinterpret_cast<uint16_t*>(row), dim);
  return 1.0f;
}
void WidenBf16(const uint8_t* codes, int64_t c, int64_t dim, float* dst) {
  GetHalfKernels().bf16_to_f32(reinterpret_cast<const uint16_t*>(codes), dst, c * dim);
}
void WidenF16(const uint8_t* codes, int64_t c, int64_t dim, float* dst) {
  GetHalfKernels().f16_to_f32(reinterpret_cast<const uint16_t*>(codes), dst, c * dim);
}
int64_t Bytes4(int64_t dim) { return dim * 4; }
int64_t Bytes2(int64_t dim) { return dim * 2; }

}  // namespace

const PageCodec& Float32Codec() {
  static const PageCodec c{"float32",
                           Bytes4,
                           false,
                           EncodeF32,
                           WidenF32,
                           QkPageOf<LoadF32, Load512F32>,
                           PvPageOf<LoadF32, Load512F32>};
  return c;
}

const PageCodec& BFloat16Codec() {
  static const PageCodec c{"bfloat16",
                           Bytes2,
                           false,
                           EncodeHalf<HalfType::kBFloat16>,
                           WidenBf16,
                           QkPageOf<LoadBf16, Load512Bf16>,
                           PvPageOf<LoadBf16, Load512Bf16>};
  return c;
}

const PageCodec& Float16Codec() {
  static const PageCodec c{"float16",
                           Bytes2,
                           false,
                           EncodeHalf<HalfType::kFloat16>,
                           WidenF16,
                           QkPageOf<LoadF16, Load512F16>,
                           PvPageOf<LoadF16, Load512F16>};
  return c;
}

}  // namespace attn::internal
