// INT8: symmetric int8 codes with a float32 factor per (token, kv head):
// factor = max|x| / 127 (rounded to float32), code = x / factor in float64
// rounded to nearest even, within [-127, 127]. A token all zeros (or so
// small that the factor underflows) is stored as zeros with factor 0.
// Codes widen in registers by sign extension and an integer conversion.
#include <cmath>
#include <cstring>

#include "kvformats/formats.h"
#include "kvformats/page_loops_avx512.h"

namespace attn::internal {
namespace {

struct LoadI8 {
  using T = int8_t;
  ATTN_DECODE static __m256 Load(const int8_t* p) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  }
};
struct Load512I8 {
  using T = int8_t;
  ATTN_DECODE512 static __m512 Load(const int8_t* p) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
  }
};

float EncodeInt8(const float* src, int64_t dim, uint8_t* row) {
  float amax = 0.0f;
  for (int64_t x = 0; x < dim; ++x) amax = std::max(amax, std::fabs(src[x]));
  const float factor = amax / 127.0f;
  auto* q = reinterpret_cast<int8_t*>(row);
  if (factor == 0.0f) {
    std::memset(row, 0, static_cast<size_t>(dim));
    return 0.0f;
  }
  for (int64_t x = 0; x < dim; ++x) {
    const double v = std::nearbyint(static_cast<double>(src[x]) / static_cast<double>(factor));
    q[x] = static_cast<int8_t>(std::min(127.0, std::max(-127.0, v)));
  }
  return factor;
}

void WidenInt8(const uint8_t* codes, int64_t n, float* dst) {
  const auto* q = reinterpret_cast<const int8_t*>(codes);
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(q[i]);
}

}  // namespace

const PageCodec& Int8Codec() {
  static const PageCodec c{"int8",
                           1,
                           true,
                           EncodeInt8,
                           WidenInt8,
                           QkPageOf<LoadI8, Load512I8>,
                           PvPageOf<LoadI8, Load512I8>};
  return c;
}

}  // namespace attn::internal
