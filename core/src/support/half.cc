// Half-precision conversions (attn/half.h): portable bit arithmetic, F16C +
// AVX2, and AVX-512. bfloat16 narrowing uses integer round-to-nearest-even
// on every tier rather than AVX512_BF16's VCVTNEPS2BF16, which treats
// subnormal inputs as zero and so breaks the exactly-rounded contract.
#include "attn/half.h"

#include <cpuid.h>

#include <cstring>

#include "support/half_kernels.h"
#include "support/isa_cap.h"
#include "support/simd.h"

namespace attn {
namespace internal {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- Portable ---------------------------------------------------------------

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F, man = h & 0x3FF;
  if (exp == 0x1F) return FromBits(sign | 0x7F800000 | (man << 13));  // Inf, NaN
  if (exp != 0) return FromBits(sign | ((exp + 112) << 23) | (man << 13));
  // Zero or subnormal: man * 2^-24, exact in float32.
  const float v = static_cast<float>(man) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

uint16_t F32ToF16(float f) {
  const uint32_t u = Bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t a = u & 0x7FFFFFFF;
  if (a > 0x7F800000) return static_cast<uint16_t>(sign | 0x7E00 | ((a >> 13) & 0x3FF));  // NaN
  if (a >= 0x477FF000) return sign | 0x7C00;  // >= 65520 (and Inf): Inf
  if (a >= 0x38800000) {                      // normal in float16 (>= 2^-14)
    const uint32_t r = a - 0x38000000;        // rebias 127 -> 15
    const uint32_t rounded = r + 0xFFF + ((r >> 13) & 1);
    return static_cast<uint16_t>(sign | (rounded >> 13));
  }
  // Subnormal or zero in float16: a value of m * 2^-24, m rounded to even.
  const uint32_t exp = a >> 23;
  if (exp < 102) return sign;  // below 2^-25: rounds to 0
  const uint32_t man = (a & 0x7FFFFF) | 0x800000;
  const uint32_t shift = 126 - exp;  // 14 .. 24
  const uint32_t half_ulp = 1u << (shift - 1), rest = man & ((1u << shift) - 1);
  uint32_t m = man >> shift;
  if (rest > half_ulp || (rest == half_ulp && (m & 1))) ++m;
  return static_cast<uint16_t>(sign | m);
}

uint16_t F32ToBf16(float f) {
  const uint32_t u = Bits(f);
  if ((u & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

void F16ToF32Portable(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(src[i]);
}
void F32ToF16Portable(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = F32ToF16(src[i]);
}
void Bf16ToF32Portable(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = FromBits(static_cast<uint32_t>(src[i]) << 16);
}
void F32ToBf16Portable(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = F32ToBf16(src[i]);
}

// ---- F16C + AVX2 --------------------------------------------------------------

#define ATTN_F16C __attribute__((target("avx2,fma,f16c")))

ATTN_F16C void F16ToF32Avx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = F16ToF32(src[i]);
}

ATTN_F16C void F32ToF16Avx2(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = F32ToF16(src[i]);
}

ATTN_AVX2 void Bf16ToF32Avx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_slli_epi32(w, 16));
  }
  for (; i < n; ++i) dst[i] = FromBits(static_cast<uint32_t>(src[i]) << 16);
}

// Eight floats to bfloat16 bits (in the low halves of 32-bit lanes).
ATTN_AVX2 inline __m256i Bf16Round256(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  return _mm256_blendv_epi8(rounded, quiet, _mm256_castps_si256(nan));
}

ATTN_AVX2 void F32ToBf16Avx2(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = Bf16Round256(_mm256_loadu_ps(src + i));
    const __m256i b = Bf16Round256(_mm256_loadu_ps(src + i + 8));
    // packus works per 128-bit lane: fix the order afterwards.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
  for (; i < n; ++i) dst[i] = F32ToBf16(src[i]);
}

// ---- AVX-512 ------------------------------------------------------------------

ATTN_AVX512 void F16ToF32Avx512(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = F16ToF32(src[i]);
}

ATTN_AVX512 void F32ToF16Avx512(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = F32ToF16(src[i]);
}

ATTN_AVX512 void Bf16ToF32Avx512(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i w =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(w, 16));
  }
  for (; i < n; ++i) dst[i] = FromBits(static_cast<uint32_t>(src[i]) << 16);
}

ATTN_AVX512 void F32ToBf16Avx512(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(src + i);
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb), 16);
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const __m512i bits = _mm512_mask_mov_epi32(rounded, nan, quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(bits));
  }
  for (; i < n; ++i) dst[i] = F32ToBf16(src[i]);
}

constexpr HalfKernels kPortable{F16ToF32Portable, F32ToF16Portable, Bf16ToF32Portable,
                                F32ToBf16Portable, IsaTier::kPortable};
constexpr HalfKernels kAvx2{F16ToF32Avx2, F32ToF16Avx2, Bf16ToF32Avx2, F32ToBf16Avx2,
                            IsaTier::kAvx2};
constexpr HalfKernels kAvx512{F16ToF32Avx512, F32ToF16Avx512, Bf16ToF32Avx512, F32ToBf16Avx512,
                              IsaTier::kAvx512};

bool HasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

}  // namespace

const HalfKernels* HalfKernelsFor(IsaTier tier) {
  if (!CpuHasTier(tier)) return nullptr;
  switch (tier) {
    case IsaTier::kAvx512:
      return &kAvx512;
    case IsaTier::kAvx2:
      return HasF16c() ? &kAvx2 : nullptr;
    case IsaTier::kPortable:
      break;
  }
  return &kPortable;
}

const HalfKernels& GetHalfKernels() {
  static const HalfKernels* kernels = [] {
    for (IsaTier t = KernelTier();; t = static_cast<IsaTier>(static_cast<int>(t) - 1)) {
      if (const HalfKernels* k = HalfKernelsFor(t)) return k;
    }
  }();
  return *kernels;
}

void RowsToBf16(const float* src, int64_t rows, int64_t cols, int64_t ld, uint16_t* dst) {
  const auto f32_to_bf16 = GetHalfKernels().f32_to_bf16;
  for (int64_t r = 0; r < rows; ++r) f32_to_bf16(src + r * ld, dst + r * cols, cols);
}

}  // namespace internal

const char* HalfTypeName(HalfType type) {
  return type == HalfType::kFloat16 ? "float16" : "bfloat16";
}

void HalfToFloat(HalfType type, const uint16_t* src, float* dst, int64_t n) {
  const auto& k = internal::GetHalfKernels();
  (type == HalfType::kFloat16 ? k.f16_to_f32 : k.bf16_to_f32)(src, dst, n);
}

void FloatToHalf(HalfType type, const float* src, uint16_t* dst, int64_t n) {
  const auto& k = internal::GetHalfKernels();
  (type == HalfType::kFloat16 ? k.f32_to_f16 : k.f32_to_bf16)(src, dst, n);
}

}  // namespace attn
