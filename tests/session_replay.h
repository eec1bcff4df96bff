// A float64 replay of KV-cache sessions: every token a layer holds, rounded
// to the cache's type (or quantized, kv_quant_model.h) as the server stores
// it, so that each Extend result can be checked against one-shot attention
// over the layer's tokens (variants_reference.h). Used by core's and the
// server's tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "attn/half.h"
#include "kv_quant_model.h"
#include "tensor_compare.h"
#include "variants_reference.h"

namespace attn_test {

enum class ReplayType { kFloat32, kBFloat16, kFloat16 };

// What one Extend's options are, for the reference.
struct ReplayOptions {
  bool causal = true;
  std::optional<int64_t> wl, wr;
  float softcap = 0;
  std::vector<float> alibi;  // [Hq] or empty
  std::vector<float> sink;   // [Hq] or empty
};

inline float RoundTo(ReplayType t, float x) {
  if (t == ReplayType::kFloat32) return x;
  const attn::HalfType h =
      t == ReplayType::kBFloat16 ? attn::HalfType::kBFloat16 : attn::HalfType::kFloat16;
  uint16_t bits;
  attn::FloatToHalf(h, &x, &bits, 1);
  float back;
  attn::HalfToFloat(h, &bits, &back, 1);
  return back;
}

// What a quantized side holds of a token's values (kv_quant_model.h), or
// null: the side is rounded to the session's type.
using ReplayQuantizer = Quantized (*)(const std::vector<float>&);

// One session's tokens: per layer, K [Hkv][L][D] and V [Hkv][L][Dv].
struct ReplaySession {
  int64_t layers = 1, hkv = 1, d = 1, dv = 1;
  ReplayType type = ReplayType::kFloat32;
  ReplayQuantizer key_q = nullptr, value_q = nullptr;
  // int4 keys: blocks of key_block tokens quantized per channel when full
  // (kv_quant_model.h), the block being filled rounded to the type.
  int64_t key_block = 0;
  std::vector<std::vector<std::vector<float>>> k, v;  // [layer][head] -> L * D

  ReplaySession() = default;
  ReplaySession(int64_t layers_, int64_t hkv_, int64_t d_, int64_t dv_, ReplayType t)
      : layers(layers_),
        hkv(hkv_),
        d(d_),
        dv(dv_),
        type(t),
        k(layers_, std::vector<std::vector<float>>(hkv_)),
        v(layers_, std::vector<std::vector<float>>(hkv_)) {}

  int64_t Tokens(int64_t layer) const { return static_cast<int64_t>(k[layer][0].size()) / d; }

  // key [Hkv, n, D], value [Hkv, n, Dv], dense.
  void Append(int64_t layer, const std::vector<float>& key, const std::vector<float>& value,
              int64_t n) {
    auto put = [this](ReplayQuantizer q, const float* row, int64_t dim, std::vector<float>* to) {
      if (q == nullptr) {
        for (int64_t x = 0; x < dim; ++x) to->push_back(RoundTo(type, row[x]));
        return;
      }
      for (double h : q(std::vector<float>(row, row + dim)).value) {
        to->push_back(static_cast<float>(h));
      }
    };
    for (int64_t g = 0; g < hkv; ++g) {
      for (int64_t i = 0; i < n; ++i) {
        put(key_q, key.data() + (g * n + i) * d, d, &k[layer][g]);
        put(value_q, value.data() + (g * n + i) * dv, dv, &v[layer][g]);
        const int64_t held = static_cast<int64_t>(k[layer][g].size()) / d;
        if (key_block > 0 && held % key_block == 0) QuantizeBlock(&k[layer][g], held - key_block);
      }
    }
  }
  // A full block of int4 keys from `first`: each channel quantized.
  void QuantizeBlock(std::vector<float>* rows, int64_t first) const {
    std::vector<uint8_t> codes(static_cast<size_t>(key_block));
    std::vector<float> held(static_cast<size_t>(key_block));
    for (int64_t x = 0; x < d; ++x) {
      float* col = rows->data() + first * d + x;
      float scale, lo;
      ModelInt4Group(col, key_block, d, &scale, &lo, codes.data(), held.data());
      for (int64_t j = 0; j < key_block; ++j) col[j * d] = held[static_cast<size_t>(j)];
    }
  }
  void Truncate(int64_t tokens) {
    for (int64_t l = 0; l < layers; ++l) {
      if (tokens >= Tokens(l)) continue;
      const int64_t keep = key_block > 0 ? tokens % key_block : 0;
      if (keep > 0 && tokens - keep + key_block <= Tokens(l)) {
        // Cut into a full block: its kept tokens staged again, in the type.
        for (int64_t g = 0; g < hkv; ++g) {
          for (int64_t i = (tokens - keep) * d; i < tokens * d; ++i) {
            k[l][g][static_cast<size_t>(i)] = RoundTo(type, k[l][g][static_cast<size_t>(i)]);
          }
        }
      }
      for (int64_t g = 0; g < hkv; ++g) {
        k[l][g].resize(tokens * d);
        v[l][g].resize(tokens * dv);
      }
    }
  }

  // The float64 reference of `query` [Hq, n, D] over layer `layer`'s tokens.
  Ref Expected(int64_t layer, const std::vector<float>& query, int64_t hq, int64_t n,
               const ReplayOptions& o) const {
    Case c;
    c.b = 1, c.hq = hq, c.hkv = hkv, c.lq = n, c.lk = Tokens(layer), c.d = d, c.dv = dv;
    c.causal = o.causal, c.bottom_right = true, c.wl = o.wl, c.wr = o.wr, c.softcap = o.softcap;
    c.alibi = !o.alibi.empty(), c.sink = !o.sink.empty();
    Inputs in;
    in.q = query;
    for (int64_t g = 0; g < hkv; ++g) {
      in.k.insert(in.k.end(), k[layer][g].begin(), k[layer][g].end());
      in.v.insert(in.v.end(), v[layer][g].begin(), v[layer][g].end());
    }
    in.alibi = o.alibi;
    in.sink = o.sink;
    return Reference(c, in);
  }
};

inline std::vector<float> Normal(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& e : x) e = d(rng);
  return x;
}

// Output [Hq, n, Dv] and lse [Hq, n] (either may be null) against `want`.
inline void ExpectMatches(const Ref& want, const float* out, const float* lse, double tol = 1e-5) {
  EXPECT_TRUE(AllClose(out, want.out, tol, std::max(1.0, MaxAbs(want.out))));
  if (lse != nullptr) {
    for (size_t i = 0; i < want.lse.size(); ++i) {
      if (std::isinf(want.lse[i])) {
        EXPECT_EQ(lse[i], want.lse[i]) << "lse row " << i;
      } else {
        EXPECT_NEAR(lse[i], want.lse[i], tol * std::max(1.0, std::abs(want.lse[i])))
            << "lse row " << i;
      }
    }
  }
}

}  // namespace attn_test
