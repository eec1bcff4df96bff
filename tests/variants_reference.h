// A float64 reference for the attention variants (issue 23), written from
// the one definition with plain loops, independently of core: GQA,
// causal alignment, windows, softcap, ALiBi, sinks, padding, bias and the
// log-sum-exp. Used by core's and the server's tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <utility>
#include <vector>

namespace attn_test {

inline constexpr double kRefInf = std::numeric_limits<double>::infinity();

struct Case {
  int64_t b = 1, hq = 4, hkv = 4, lq = 8, lk = 8, d = 8, dv = 8;
  bool causal = false, bottom_right = false;
  std::optional<int64_t> wl, wr;
  float softcap = 0;  // 0: none
  bool alibi = false, sink = false, kpm = false, bias = false, need_weights = false;
  uint32_t seed = 1;
};

struct Inputs {
  std::vector<float> q, k, v, alibi, sink, bias;
  std::vector<uint8_t> kpm;
};

inline Inputs MakeInputs(const Case& c) {
  std::mt19937 rng(c.seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  Inputs in;
  auto fill = [&](std::vector<float>& x, int64_t n) {
    x.resize(n);
    for (float& e : x) e = n01(rng);
  };
  fill(in.q, c.b * c.hq * c.lq * c.d);
  fill(in.k, c.b * c.hkv * c.lk * c.d);
  fill(in.v, c.b * c.hkv * c.lk * c.dv);
  if (c.alibi) {  // [B, H]: per batch row too
    in.alibi.resize(c.b * c.hq);
    for (int64_t i = 0; i < c.b * c.hq; ++i) in.alibi[i] = 0.5f / static_cast<float>(1 + i % 5);
  }
  if (c.sink) fill(in.sink, c.hq);
  if (c.bias) fill(in.bias, c.b * c.hq * c.lq * c.lk);
  if (c.kpm) {
    in.kpm.assign(c.b * c.lk, 0);
    for (int64_t j = 0; j < c.lk; j += 3) in.kpm[j] = 1;  // batch 0: every third key
    for (int64_t bb = 1; bb < c.b; ++bb) {                // the last batch row: every key masked
      for (int64_t j = 0; j < c.lk; ++j) in.kpm[bb * c.lk + j] = bb == c.b - 1 ? 1 : (j % 4 == 1);
    }
  }
  return in;
}

struct Ref {
  std::vector<double> out, weights, lse;
};

// The definition, in float64. With row_step > 1, only query rows i
// with i % row_step == 0 and the last row are computed (the others keep
// output 0 and lse -inf), and no weights: for long sequences.
inline Ref Reference(const Case& c, const Inputs& in, int64_t row_step = 1) {
  Ref r;
  r.out.assign(c.b * c.hq * c.lq * c.dv, 0.0);
  if (row_step == 1) r.weights.assign(c.b * c.hq * c.lq * c.lk, 0.0);
  r.lse.assign(c.b * c.hq * c.lq, -kRefInf);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  const int64_t group = c.hq / c.hkv;
  std::vector<double> s(c.lk);
  std::vector<bool> masked(c.lk);
  for (int64_t b = 0; b < c.b; ++b) {
    for (int64_t h = 0; h < c.hq; ++h) {
      const int64_t kvh = h / group;
      for (int64_t i = 0; i < c.lq; ++i) {
        if (i % row_step != 0 && i != c.lq - 1) continue;
        const int64_t pos = i + (c.bottom_right ? c.lk - c.lq : 0);
        double m = c.sink ? in.sink[h] : -kRefInf;
        for (int64_t j = 0; j < c.lk; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < c.d; ++e) {
            dot += double{in.q[((b * c.hq + h) * c.lq + i) * c.d + e]} *
                   in.k[((b * c.hkv + kvh) * c.lk + j) * c.d + e];
          }
          double x = dot * scale;
          if (c.softcap > 0) x = c.softcap * std::tanh(x / c.softcap);
          if (c.bias) x += in.bias[((b * c.hq + h) * c.lq + i) * c.lk + j];
          if (c.alibi) x -= in.alibi[b * c.hq + h] * std::abs(static_cast<double>(pos - j));
          s[j] = x;
          masked[j] = (c.kpm && in.kpm[b * c.lk + j]) || (c.causal && j > pos) ||
                      (c.wl && j < pos - *c.wl) || (c.wr && j > pos + *c.wr);
          if (!masked[j]) m = std::max(m, x);
        }
        if (m == -kRefInf) continue;  // nothing to attend, no sink: zeros, lse -inf
        double sum = c.sink ? std::exp(in.sink[h] - m) : 0.0;
        for (int64_t j = 0; j < c.lk; ++j) {
          s[j] = masked[j] ? 0.0 : std::exp(s[j] - m);
          sum += s[j];
        }
        const int64_t row = (b * c.hq + h) * c.lq + i;
        r.lse[row] = m + std::log(sum);
        for (int64_t j = 0; j < c.lk; ++j) {
          const double w = s[j] / sum;
          if (row_step == 1) r.weights[row * c.lk + j] = w;
          for (int64_t e = 0; e < c.dv; ++e) {
            r.out[row * c.dv + e] += w * in.v[((b * c.hkv + kvh) * c.lk + j) * c.dv + e];
          }
        }
      }
    }
  }
  return r;
}

struct Packed {
  std::vector<int64_t> cu_q{0}, cu_k{0};
  std::vector<float> q, k, v, alibi, sink;
  std::vector<Case> cases;
  std::vector<Inputs> inputs;
  int64_t hq = 0, hkv = 0, d = 0, dv = 0;
};

// A packed batch (cu_seqlens): the query [total_q, Hq, D], key and value
// [total_k, Hkv, *], with each sequence's own case and inputs, and ALiBi
// slopes [B, H] and sinks [H] for the whole batch.
// Packs the sequences (lq, lk) with the options of `shape` (whose b, lq and
// lk are ignored): sequence s is Case shape with b = 1 and its own inputs.
Packed Pack(const Case& shape, const std::vector<std::pair<int64_t, int64_t>>& lengths) {
  Packed p;
  p.hq = shape.hq, p.hkv = shape.hkv, p.d = shape.d, p.dv = shape.dv;
  for (size_t s = 0; s < lengths.size(); ++s) {
    Case c = shape;
    c.b = 1, c.lq = lengths[s].first, c.lk = lengths[s].second;
    c.seed = shape.seed + static_cast<uint32_t>(s) * 7;
    Inputs in = MakeInputs(c);
    if (c.alibi) {  // a slope per (sequence, head)
      for (int64_t h = 0; h < c.hq; ++h) in.alibi[h] = 0.25f / static_cast<float>(1 + (s + h) % 3);
      p.alibi.insert(p.alibi.end(), in.alibi.begin(), in.alibi.end());
    }
    if (c.sink) {  // one sink per head for the whole batch
      if (s == 0) p.sink = in.sink;
      in.sink = p.sink;
    }
    // [H, L, D] per sequence into the packed [L, H, D] rows.
    auto pack = [](const std::vector<float>& src, int64_t heads, int64_t len, int64_t dim,
                   std::vector<float>* dst) {
      const size_t base = dst->size();
      dst->resize(base + static_cast<size_t>(heads * len * dim));
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < len; ++i)
          for (int64_t e = 0; e < dim; ++e)
            (*dst)[base + (i * heads + h) * dim + e] = src[(h * len + i) * dim + e];
    };
    pack(in.q, c.hq, c.lq, c.d, &p.q);
    pack(in.k, c.hkv, c.lk, c.d, &p.k);
    pack(in.v, c.hkv, c.lk, c.dv, &p.v);
    p.cu_q.push_back(p.cu_q.back() + c.lq);
    p.cu_k.push_back(p.cu_k.back() + c.lk);
    p.cases.push_back(c);
    p.inputs.push_back(std::move(in));
  }
  return p;
}

}  // namespace attn_test
