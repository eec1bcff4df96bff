// INT4: 4-bit codes, asymmetric (a scale and a minimum), two a byte (the
// low nibble the even channel). Values are quantized per token in groups
// of kInt4Group channels, their scales and minimums in the token's row:
// each group's min and max, scale = (max - min) / 15 rounded to float32,
// code = (x - min) / scale in float64 rounded half to even, within [0, 15]
// (a group all one value: scale 0, codes 0). Keys are quantized per
// channel over a block of tokens (KIVI: keys have outlier channels, and a
// scale per channel keeps them from flattening the others), the same
// arithmetic down each channel of the block's staged values; the block
// being filled is kept in the cache's type until it is full (the store's
// staging page). A value widens to min + code * scale in float32.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kvformats/formats.h"

namespace attn::internal {
namespace {

constexpr int64_t kInt4Group = 64;

int64_t Groups(int64_t dim) { return (dim + kInt4Group - 1) / kInt4Group; }

// The code of x against (lo, scale).
inline uint8_t Code(double x, float lo, float scale) {
  if (scale == 0.0f) return 0;
  constexpr double kRound = 6755399441055744.0;  // round half to even
  const double c = ((x - lo) / scale + kRound) - kRound;
  return static_cast<uint8_t>(std::min(15.0, std::max(0.0, c)));
}

inline void Put(uint8_t* row, int64_t x, uint8_t code) {
  uint8_t& b = row[x / 2];
  b = (x % 2 == 0) ? static_cast<uint8_t>((b & 0xF0) | code)
                   : static_cast<uint8_t>((b & 0x0F) | (code << 4));
}

inline uint8_t Get(const uint8_t* row, int64_t x) {
  return (x % 2 == 0) ? (row[x / 2] & 0x0F) : (row[x / 2] >> 4);
}

int64_t ValueRowBytes(int64_t dim) { return (dim + 1) / 2 + Groups(dim) * 8; }

float EncodeValues(const float* src, int64_t dim, uint8_t* row) {
  const int64_t codes = (dim + 1) / 2;
  std::memset(row, 0, static_cast<size_t>(codes));
  auto* meta = reinterpret_cast<float*>(row + codes);  // (scale, min) per group
  for (int64_t g0 = 0, k = 0; g0 < dim; g0 += kInt4Group, ++k) {
    const int64_t g1 = std::min(dim, g0 + kInt4Group);
    float lo = src[g0], hi = src[g0];
    for (int64_t x = g0; x < g1; ++x) lo = std::min(lo, src[x]), hi = std::max(hi, src[x]);
    const float scale = static_cast<float>((static_cast<double>(hi) - lo) / 15.0);
    std::memcpy(meta + 2 * k, &scale, 4);
    std::memcpy(meta + 2 * k + 1, &lo, 4);
    for (int64_t x = g0; x < g1; ++x) Put(row, x, Code(src[x], lo, scale));
  }
  return 1.0f;
}

void WidenValues(const uint8_t* rows, int64_t c, int64_t dim, float* dst) {
  const int64_t rb = ValueRowBytes(dim), codes = (dim + 1) / 2;
  for (int64_t j = 0; j < c; ++j) {
    const uint8_t* row = rows + j * rb;
    float meta[2];
    for (int64_t g0 = 0, k = 0; g0 < dim; g0 += kInt4Group, ++k) {
      std::memcpy(meta, row + codes + 8 * k, 8);
      const int64_t g1 = std::min(dim, g0 + kInt4Group);
      for (int64_t x = g0; x < g1; ++x) dst[j * dim + x] = meta[1] + Get(row, x) * meta[0];
    }
  }
}

int64_t KeyRowBytes(int64_t dim) { return (dim + 1) / 2; }

// meta: scale[dim] then min[dim].
void QuantizeBlock(const float* staged, int64_t g, int64_t dim, uint8_t* rows, float* meta) {
  const int64_t rb = KeyRowBytes(dim);
  std::memset(rows, 0, static_cast<size_t>(g * rb));
  for (int64_t x = 0; x < dim; ++x) {
    float lo = staged[x], hi = staged[x];
    for (int64_t j = 1; j < g; ++j) {
      lo = std::min(lo, staged[j * dim + x]);
      hi = std::max(hi, staged[j * dim + x]);
    }
    const float scale = static_cast<float>((static_cast<double>(hi) - lo) / 15.0);
    meta[x] = scale;
    meta[dim + x] = lo;
    for (int64_t j = 0; j < g; ++j) Put(rows + j * rb, x, Code(staged[j * dim + x], lo, scale));
  }
}

void WidenBlock(const uint8_t* rows, const float* meta, int64_t c, int64_t dim, float* dst) {
  const int64_t rb = KeyRowBytes(dim);
  for (int64_t j = 0; j < c; ++j) {
    for (int64_t x = 0; x < dim; ++x) {
      dst[j * dim + x] = meta[dim + x] + Get(rows + j * rb, x) * meta[x];
    }
  }
}

}  // namespace

uint8_t Int4Code(double x, float lo, float scale) { return Code(x, lo, scale); }
uint8_t Int4Nibble(const uint8_t* row, int64_t x) { return Get(row, x); }

const PageCodec& Int4ValuesCodec() {
  static const PageCodec c{"int4",      ValueRowBytes, false,  EncodeValues,
                           WidenValues, nullptr,       nullptr};
  return c;
}

const PageCodec& Int4KeysCodec() {
  static const PageCodec c{"int4",  KeyRowBytes, false, nullptr,       nullptr,
                           nullptr, nullptr,     true,  QuantizeBlock, WidenBlock};
  return c;
}

}  // namespace attn::internal
