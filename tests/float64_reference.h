// Float64 reference implementations of attention, written independently of
// core (plain loops, exact two-pass softmax) for the tests to compare against.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace attn_test {

// Dense [B, H, Lq, Lk] problem in double precision.
struct RefProblem {
  int64_t b = 1, h = 1, lq = 1, lk = 1, d = 1, dv = 1;
  std::vector<double> q, k, v;  // [B,H,Lq,D], [B,H,Lk,D], [B,H,Lk,Dv]
  double scale = 1.0;
  bool causal = false;
  std::vector<uint8_t> kpm;  // [B, Lk], true = ignore; empty = none
  std::vector<double> bias;  // materialised [B, H, Lq, Lk]; empty = none
};

struct RefResult {
  std::vector<double> out;      // [B, H, Lq, Dv]
  std::vector<double> weights;  // [B, H, Lq, Lk]
};

// softmax(Q K^T * scale + mask) V. Fully masked rows give zeros (the
// documented contract of the service, where PyTorch gives NaN).
inline RefResult ReferenceAttention(const RefProblem& p) {
  RefResult r;
  r.out.assign(p.b * p.h * p.lq * p.dv, 0.0);
  r.weights.assign(p.b * p.h * p.lq * p.lk, 0.0);
  std::vector<double> s(p.lk);
  std::vector<bool> masked(p.lk);
  for (int64_t b = 0; b < p.b; ++b) {
    for (int64_t h = 0; h < p.h; ++h) {
      const int64_t bh = b * p.h + h;
      for (int64_t i = 0; i < p.lq; ++i) {
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < p.lk; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < p.d; ++c) {
            dot += p.q[(bh * p.lq + i) * p.d + c] * p.k[(bh * p.lk + j) * p.d + c];
          }
          s[j] = dot * p.scale;
          if (!p.bias.empty()) s[j] += p.bias[(bh * p.lq + i) * p.lk + j];
          masked[j] = (p.causal && j > i) || (!p.kpm.empty() && p.kpm[b * p.lk + j]) ||
                      s[j] == -std::numeric_limits<double>::infinity();
          if (!masked[j]) mx = std::max(mx, s[j]);
        }
        if (mx == -std::numeric_limits<double>::infinity()) continue;  // all masked: zeros
        double sum = 0;
        for (int64_t j = 0; j < p.lk; ++j) {
          s[j] = masked[j] ? 0.0 : std::exp(s[j] - mx);
          sum += s[j];
        }
        for (int64_t j = 0; j < p.lk; ++j) {
          const double w = s[j] / sum;
          r.weights[(bh * p.lq + i) * p.lk + j] = w;
          for (int64_t c = 0; c < p.dv; ++c) {
            r.out[(bh * p.lq + i) * p.dv + c] += w * p.v[(bh * p.lk + j) * p.dv + c];
          }
        }
      }
    }
  }
  return r;
}

// y[m, out] = x[m, in] W^T + b with W in nn.Linear layout [out, in].
inline std::vector<double> ReferenceLinear(const std::vector<double>& x, int64_t m, int64_t in,
                                           const std::vector<double>& w, int64_t out,
                                           const std::vector<double>& bias) {
  std::vector<double> y(m * out);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = bias.empty() ? 0.0 : bias[o];
      for (int64_t c = 0; c < in; ++c) acc += x[r * in + c] * w[o * in + c];
      y[r * out + o] = acc;
    }
  }
  return y;
}

inline std::vector<float> RandomFloats(size_t n, std::mt19937& rng, float stddev = 1.0f) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<double> ToDouble(const float* p, size_t n) { return {p, p + n}; }

}  // namespace attn_test
