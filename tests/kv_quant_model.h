// Float64 models of the KV cache's quantizers (core/src/kvformats/), written
// independently of them for the tests: int8 codes are round-half-to-even of
// x / (max|x| / 127); fp8 e4m3 codes are the nearest of 0 and the finite
// normal e4m3 values (the cache writes no subnormal codes) to
// x / (max|x| / 448), a tie going to the even code. Each factor is
// its division rounded once to float32, as the store keeps it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace attn_test {

inline double RoundHalfEven(double y) {
  const double f = std::floor(y), diff = y - f;
  if (diff > 0.5) return f + 1;
  if (diff < 0.5) return f;
  return std::fmod(f, 2.0) == 0.0 ? f : f + 1;
}

// The value of a finite e4m3 code (sign 0x80, exponent 4 bits with bias 7,
// mantissa 3 bits; subnormals at exponent 0).
inline double E4m3Value(int code) {
  const int e = (code >> 3) & 15, m = code & 7;
  const double mag = e == 0 ? m / 8.0 * std::pow(2.0, -6) : (1 + m / 8.0) * std::pow(2.0, e - 7);
  return (code & 0x80) ? -mag : mag;
}

struct Quantized {
  std::vector<uint8_t> codes;
  float factor = 0;           // as the store keeps it
  std::vector<double> raw;    // each code's value as the decode loops widen it
  std::vector<double> value;  // what the token holds: raw * factor
};

inline Quantized ModelInt8(const std::vector<float>& x) {
  double amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(double(v)));
  Quantized q;
  q.factor = static_cast<float>(amax / 127.0);
  for (float v : x) {
    const double c =
        q.factor == 0 ? 0 : std::min(127.0, std::max(-127.0, RoundHalfEven(v / double(q.factor))));
    q.codes.push_back(static_cast<uint8_t>(static_cast<int8_t>(c)));
    q.raw.push_back(c);
    q.value.push_back(c * q.factor);
  }
  return q;
}

// int4, asymmetric: over xs, lo and hi, scale = (hi - lo) / 15 rounded to
// float32, code = round-half-even((x - lo) / scale) in [0, 15] (scale 0:
// code 0), value = lo + code * scale in float32, rounded once (fmaf).
inline void ModelInt4Group(const float* x, int64_t n, int64_t stride, float* scale_out,
                           float* lo_out, uint8_t* codes, float* values) {
  float lo = x[0], hi = x[0];
  for (int64_t i = 0; i < n; ++i)
    lo = std::min(lo, x[i * stride]), hi = std::max(hi, x[i * stride]);
  const float scale = static_cast<float>((double(hi) - lo) / 15.0);
  *scale_out = scale;
  *lo_out = lo;
  for (int64_t i = 0; i < n; ++i) {
    const double c =
        scale == 0
            ? 0
            : std::min(15.0, std::max(0.0, RoundHalfEven((x[i * stride] - double(lo)) / scale)));
    codes[i] = static_cast<uint8_t>(c);
    values[i] = std::fmaf(static_cast<float>(c), scale, lo);  // rounded once
  }
}

// int4 values: per token, groups of 64 channels.
inline Quantized ModelInt4Values(const std::vector<float>& x) {
  Quantized q;
  q.factor = 1;
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> codes(x.size());
  std::vector<float> values(x.size());
  for (int64_t g0 = 0; g0 < n; g0 += 64) {
    float scale, lo;
    const int64_t m = std::min<int64_t>(64, n - g0);
    ModelInt4Group(x.data() + g0, m, 1, &scale, &lo, codes.data() + g0, values.data() + g0);
  }
  q.codes = codes;
  for (float v : values) q.value.push_back(v), q.raw.push_back(v);
  return q;
}

inline Quantized ModelFp8(const std::vector<float>& x) {
  double amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(double(v)));
  const float scale = static_cast<float>(amax / 448.0);
  Quantized q;
  q.factor = scale * 256.0f;  // the loops widen a code to its value times 2^-8
  for (float v : x) {
    int best = 0;
    if (scale != 0) {
      const double y = std::fabs(v / double(scale));
      for (int c = 8; c <= 0x7E; ++c) {  // no subnormal codes (0x01-0x07)
        const double dc = std::fabs(E4m3Value(c) - y), db = std::fabs(E4m3Value(best) - y);
        if (dc < db || (dc == db && c % 2 == 0)) best = c;
      }
      if (std::signbit(v)) best |= 0x80;
    }
    q.codes.push_back(static_cast<uint8_t>(best));
    q.raw.push_back(E4m3Value(best) / 256.0);
    q.value.push_back(E4m3Value(best) * scale);
  }
  return q;
}

}  // namespace attn_test
