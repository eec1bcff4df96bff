// INT8: symmetric int8 codes with a float32 factor per (token, kv head):
// factor = max|x| / 127 (rounded to float32), code = x / factor in float64
// rounded to nearest even, within [-127, 127]. A token all zeros (or so
// small that the factor underflows) is stored as zeros with factor 0.
// The decode kernel multiplies them in integer units (int8_loops.cc).
#include <cmath>
#include <cstring>

#include "kvformats/formats.h"

namespace attn::internal {
namespace {

float EncodeInt8(const float* src, int64_t dim, uint8_t* row) {
  float amax = 0.0f;
  for (int64_t x = 0; x < dim; ++x) amax = std::max(amax, std::fabs(src[x]));
  const float factor = amax / 127.0f;
  auto* q = reinterpret_cast<int8_t*>(row);
  if (factor == 0.0f) {
    std::memset(row, 0, static_cast<size_t>(dim));
    return 0.0f;
  }
  // Round half to even by the 2^52 + 2^51 trick (exact for |y| < 2^51; here
  // |y| <= 127): plain arithmetic the compiler vectorises, where nearbyint
  // is a library call without SSE4.1.
  constexpr double kRound = 6755399441055744.0;
  const double f = factor;
  for (int64_t x = 0; x < dim; ++x) {
    const double shifted = static_cast<double>(src[x]) / f + kRound;
    const double v = shifted - kRound;
    q[x] = static_cast<int8_t>(std::min(127.0, std::max(-127.0, v)));
  }
  return factor;
}

void WidenInt8(const uint8_t* codes, int64_t c, int64_t dim, float* dst) {
  const int64_t n = c * dim;
  const auto* q = reinterpret_cast<const int8_t*>(codes);
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(q[i]);
}

int64_t Bytes1(int64_t dim) { return dim; }

}  // namespace

const PageCodec& Int8Codec() {
  static const PageCodec c{"int8", Bytes1, true, EncodeInt8, WidenInt8, QkInt8Codes, PvInt8Codes};
  return c;
}

}  // namespace attn::internal
