// FP8_E4M3: float8 e4m3 codes (OCP FP8 E4M3: bias 7, largest 448, no
// infinities) with a float32 factor per (token, kv head): x / (max|x| / 448)
// in float64 rounded to the nearest e4m3 value, ties to the even code,
// saturating at 448. A code widens in registers through float16: its sign,
// exponent and mantissa bits moved into a half's places give the code's
// value times 2^-8, so the stored factor is (max|x| / 448) * 256.
#include <cmath>
#include <cstring>

#include "kvformats/formats.h"
#include "kvformats/page_loops_avx512.h"

namespace attn::internal {
namespace {

// A code sign-extended to 16 bits and shifted left by 7 puts its exponent
// and mantissa where a half's are and its sign in bit 15, with a copy of
// the sign in bit 14 that the mask clears: three integer instructions and
// the F16C conversion.
struct LoadFp8 {
  using T = uint8_t;
  ATTN_DECODE static __m256 Load(const uint8_t* p) {
    const __m128i b = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return _mm256_cvtph_ps(
        _mm_and_si128(_mm_slli_epi16(b, 7), _mm_set1_epi16(static_cast<int16_t>(0xBF80))));
  }
};
// Load32 moves 32 codes straight into float32's places, the even codes'
// and the odd ones: a code sign-extended to 16 bits and shifted left by 20
// (4 for the odd ones, in the high halves) puts its mantissa in bits
// 20-22, its exponent in 23-26 and a copy of its sign in 31, and the mask
// clears the rest. That is the code's value times 2^-120 (subnormal codes
// become float32 subnormals, which needs MXCSR's DAZ clear: the default,
// and nothing here sets it); kUnit32 takes the sums back to Load's 2^-8.
struct Load512Fp8 {
  using T = uint8_t;
  static constexpr bool kEvenOdd = true;
  static constexpr float kUnit32 = 0x1p112f;
  ATTN_DECODE512 static __m512 Load(const uint8_t* p) {
    const __m256i b = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm512_cvtph_ps(
        _mm256_and_si256(_mm256_slli_epi16(b, 7), _mm256_set1_epi16(static_cast<int16_t>(0xBF80))));
  }
  ATTN_DECODE512 static void Load32(const uint8_t* p, __m512* even, __m512* odd) {
    const __m512i w = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    const __m512i m = _mm512_set1_epi32(static_cast<int>(0x87F00000u));
    *even = _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(w, 20), m));
    *odd = _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(w, 4), m));
  }
};

// The e4m3 code nearest to y (ties to the even code), saturating at 448,
// from y's bits: no library call per value.
uint8_t E4m3Code(double y) {
  uint64_t bits;
  std::memcpy(&bits, &y, 8);
  const uint8_t sign = (bits >> 63) ? 0x80 : 0x00;
  bits &= ~(uint64_t{1} << 63);
  double a;
  std::memcpy(&a, &bits, 8);
  if (a >= 448.0) return sign | 0x7E;
  if (a < 0x1p-6) {  // subnormal: steps of 2^-9 (8 steps reach 2^-6, code 0x08)
    constexpr double kRound = 6755399441055744.0;  // round half to even
    return static_cast<uint8_t>(sign | static_cast<int>((a * 512.0 + kRound) - kRound));
  }
  // a = 1.f * 2^e with e in [-6, 8]: keep 3 bits of f, rounding the other
  // 49 half to even.
  int e = static_cast<int>(bits >> 52) - 1023;
  const uint64_t frac = bits & ((uint64_t{1} << 52) - 1);
  uint64_t m = frac >> 49;
  const uint64_t rest = frac & ((uint64_t{1} << 49) - 1), half = uint64_t{1} << 48;
  if (rest > half || (rest == half && (m & 1))) ++m;
  if (m == 8) m = 0, ++e;
  const int code = std::min(((e + 7) << 3) | static_cast<int>(m), 0x7E);
  return static_cast<uint8_t>(sign | code);
}

float EncodeFp8(const float* src, int64_t dim, uint8_t* row) {
  float amax = 0.0f;
  for (int64_t x = 0; x < dim; ++x) amax = std::max(amax, std::fabs(src[x]));
  const float scale = amax / 448.0f;
  if (scale == 0.0f) {
    std::memset(row, 0, static_cast<size_t>(dim));
    return 0.0f;
  }
  for (int64_t x = 0; x < dim; ++x) {
    row[x] = E4m3Code(static_cast<double>(src[x]) / static_cast<double>(scale));
  }
  return scale * 256.0f;
}

// A code's value times 2^-8, as the registers widen it.
const float* Fp8Table() {
  static const auto* t = [] {
    auto* v = new float[256];
    for (int b = 0; b < 256; ++b) {
      const int e = (b >> 3) & 15, m = b & 7;
      const double mag = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
      v[b] = static_cast<float>(std::ldexp((b & 0x80) ? -mag : mag, -8));
    }
    return v;
  }();
  return t;
}

void WidenFp8(const uint8_t* codes, int64_t c, int64_t dim, float* dst) {
  const int64_t n = c * dim;
  const float* t = Fp8Table();
  for (int64_t i = 0; i < n; ++i) dst[i] = t[codes[i]];
}

int64_t Bytes1(int64_t dim) { return dim; }

}  // namespace

const PageCodec& Fp8E4M3Codec() {
  static const PageCodec c{"fp8_e4m3",
                           Bytes1,
                           true,
                           EncodeFp8,
                           WidenFp8,
                           QkPageOf<LoadFp8, Load512Fp8>,
                           PvPageOf<LoadFp8, Load512Fp8>};
  return c;
}

}  // namespace attn::internal
