// The safetensors reader and model construction: round trips, truncated and
// corrupted files, inconsistent weight sets. Every refusal names the file and
// the tensor.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include "attn/cpu_info.h"
#include "attn/model.h"
#include "attn/safetensors.h"
#include "status_matchers.h"

namespace attn {
namespace {

Tensor Filled(Shape shape, float start) {
  Tensor t(std::move(shape));
  for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = start + 0.01f * static_cast<float>(i);
  return t;
}

// A valid nn.MultiheadAttention state dict, E = 8.
SafetensorsFile MhaFile(int64_t e = 8, int heads = 2) {
  SafetensorsFile f;
  f.metadata = {{"kind", "multi_head_attention"}, {"num_heads", std::to_string(heads)}};
  f.tensors.emplace("in_proj_weight", Filled({3 * e, e}, 0.1f));
  f.tensors.emplace("in_proj_bias", Filled({3 * e}, -0.2f));
  f.tensors.emplace("out_proj.weight", Filled({e, e}, 0.3f));
  f.tensors.emplace("out_proj.bias", Filled({e}, 0.0f));
  return f;
}

// Raw bytes: an 8-byte length, the header text, then `data`.
std::string RawFile(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return out + header + data;
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/attn_model_test_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf " + path_).c_str()); }
  std::string Write(const std::string& name, const std::string& bytes) const {
    const std::string p = path_ + "/" + name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }

 private:
  std::string path_;
};

TEST(Safetensors, SerializeParseRoundTrip) {
  const SafetensorsFile f = MhaFile();
  const std::string bytes = SerializeSafetensors(f);
  auto back = ParseSafetensors(bytes, "mem");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->metadata, f.metadata);
  ASSERT_EQ(back->tensors.size(), f.tensors.size());
  for (const auto& [name, t] : f.tensors) {
    EXPECT_EQ(back->tensors.at(name).shape, t.shape) << name;
    EXPECT_EQ(back->tensors.at(name).data, t.data) << name;
  }
}

TEST(Safetensors, EveryTruncationIsRefused) {
  const std::string bytes = SerializeSafetensors(MhaFile());
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto r = ParseSafetensors(bytes.substr(0, n), "cut.safetensors");
    ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes was accepted";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message().rfind("cut.safetensors: ", 0), 0u) << r.status().message();
  }
}

TEST(Safetensors, CorruptionsNameTheProblem) {
  const std::string data(64, '\0');
  struct Case {
    std::string bytes, want;
  } cases[] = {
      {"abc", "truncated: 3 bytes, the 8-byte header length is missing"},
      {RawFile("{}", "").substr(0, 9), "truncated: header length 2 exceeds the 1 bytes"},
      {std::string("\xff\xff\xff\xff\xff\xff\x00\x00", 8) + "{}",
       "header length 281474976710655 exceeds the limit of 104857600 bytes"},
      {RawFile("{\"a\":", data), "malformed header: JSON unexpected end"},
      {RawFile("[1,2]", data), "malformed header: not a JSON object"},
      {RawFile(R"({"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", data),
       "tensor 'w': dtype must be F32, got F16"},
      {RawFile(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}})", data),
       "tensor 'w': 8 bytes for shape [4], expected 16"},
      {RawFile(R"({"w":{"dtype":"F32","shape":[32],"data_offsets":[0,128]}})", data),
       "tensor 'w': data_offsets [0, 128] outside the 64-byte data buffer"},
      {RawFile(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data),
       "tensor 'w': shape must hold non-negative integers"},
      {RawFile(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8]}})", data),
       "tensor 'w': data_offsets must be [begin, end]"},
      {RawFile(R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})",
               data),
       "tensor 'w': shape [4611686018427387904, 4] is too large"},
      {RawFile(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
               R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
               data),
       "tensor data ranges overlap"},
      {RawFile(R"({"__metadata__":{"kind":3}})", data), "__metadata__ 'kind' must be a string"},
      {RawFile(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", data), "tensor 'w': missing dtype"},
  };
  for (const auto& c : cases) {
    auto r = ParseSafetensors(c.bytes, "bad.safetensors");
    ASSERT_FALSE(r.ok()) << c.want;
    attn_test::ExpectStatus(r.status(), StatusCode::kInvalidArgument, "bad.safetensors: " + c.want);
  }
}

TEST(Safetensors, RandomMutationsNeverCrash) {
  const std::string good = SerializeSafetensors(MhaFile());
  std::mt19937 rng(42);
  int refused = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      // Mostly the length and the header, where parsing decisions are made.
      const size_t at = rng() % std::min<size_t>(bytes.size(), 400);
      bytes[at] = static_cast<char>(rng() & 0xFF);
    }
    auto r = ParseSafetensors(bytes, "m");
    refused += !r.ok();
  }
  EXPECT_GT(refused, 1000);  // most corruptions are caught; none crashed
}

TEST(Model, LoadsAndNamesItselfAfterTheFileStem) {
  TempDir dir;
  const std::string path = dir.Write("encoder.v2.safetensors", SerializeSafetensors(MhaFile()));
  auto m = AttentionModel::LoadSafetensors(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->info().name, "encoder.v2");
  EXPECT_EQ(m->info().embed_dim, 8);
  EXPECT_EQ(m->info().num_heads, 2);
  // The q/k/v views are the rows of in_proj_weight, without a copy.
  EXPECT_EQ(m->projections().k.weight.f32(), m->projections().q.weight.f32() + 8 * 8);
}

TEST(Model, MissingFileIsNotFound) {
  auto m = AttentionModel::LoadSafetensors("/nonexistent/dir/x.safetensors");
  attn_test::ExpectStatus(m.status(), StatusCode::kNotFound,
                          "/nonexistent/dir/x.safetensors: cannot open");
}

TEST(Model, InconsistentWeightSetsAreRefused) {
  TempDir dir;
  auto load = [&](const SafetensorsFile& f) {
    return AttentionModel::LoadSafetensors(dir.Write("m.safetensors", SerializeSafetensors(f)));
  };
  SafetensorsFile f = MhaFile();
  f.metadata.erase("kind");
  attn_test::ExpectStatus(load(f).status(), StatusCode::kInvalidArgument,
                          "m.safetensors: __metadata__ has no 'kind'");
  f = MhaFile();
  f.metadata["kind"] = "transformer";
  attn_test::ExpectStatus(
      load(f).status(), StatusCode::kInvalidArgument,
      "kind: expected attention, cross_attention or multi_head_attention, got 'transformer'");
  f = MhaFile();
  f.metadata.erase("num_heads");
  attn_test::ExpectStatus(load(f).status(), StatusCode::kInvalidArgument, "has no 'num_heads'");
  f = MhaFile();
  f.metadata["num_heads"] = "2x";
  attn_test::ExpectStatus(load(f).status(), StatusCode::kInvalidArgument,
                          "num_heads must be a positive integer, got '2x'");
  f = MhaFile(8, 3);
  attn_test::ExpectStatus(
      load(f).status(), StatusCode::kInvalidArgument,
      "model 'm': num_heads 3 must be positive and divide the projection widths (8, 8)");
  f = MhaFile();
  f.tensors.erase("out_proj.weight");
  attn_test::ExpectStatus(load(f).status(), StatusCode::kInvalidArgument,
                          "m.safetensors: model 'm': missing tensor 'out_proj.weight'");
  f = MhaFile();
  f.tensors.emplace("extra", Filled({2}, 0));
  attn_test::ExpectStatus(load(f).status(), StatusCode::kInvalidArgument,
                          "model 'm': unexpected tensor 'extra' for kind multi_head_attention");
  f = MhaFile();
  f.tensors.emplace("bias_k", Filled({1, 1, 8}, 0));
  attn_test::ExpectStatus(load(f).status(), StatusCode::kUnimplemented,
                          "tensor 'bias_k': add_bias_kv is not supported");
  f = MhaFile();
  f.tensors.erase("in_proj_weight");
  f.tensors.emplace("in_proj_weight", Filled({24, 6}, 0));
  attn_test::ExpectStatus(load(f).status(), StatusCode::kInvalidArgument,
                          "tensor 'in_proj_weight' must have shape [3E, E], got [24, 6]");
  f = MhaFile();
  f.tensors.erase("in_proj_bias");
  f.tensors.emplace("in_proj_bias", Filled({8}, 0));
  attn_test::ExpectStatus(load(f).status(), StatusCode::kInvalidArgument,
                          "tensor 'in_proj_bias' must have shape [24], got [8]");
  f = MhaFile();
  f.tensors.erase("out_proj.bias");
  f.tensors.emplace("out_proj.bias", Filled({7}, 0));
  attn_test::ExpectStatus(load(f).status(), StatusCode::kInvalidArgument,
                          "tensor 'out_proj.bias' must have shape [8], got [7]");

  // kdim/vdim layout: separate q/k/v_proj_weight; rows must equal embed_dim.
  f = MhaFile();
  f.tensors.erase("in_proj_weight");
  f.tensors.emplace("q_proj_weight", Filled({8, 8}, 0));
  f.tensors.emplace("k_proj_weight", Filled({6, 5}, 0));
  f.tensors.emplace("v_proj_weight", Filled({8, 3}, 0));
  attn_test::ExpectStatus(load(f).status(), StatusCode::kInvalidArgument,
                          "tensor 'k_proj_weight' must have 8 rows (embed_dim), got shape [6, 5]");

  // Seed modules: q_linear.* etc.; a missing one is named.
  SafetensorsFile s;
  s.metadata = {{"kind", "attention"}};
  s.tensors.emplace("q_linear.weight", Filled({4, 4}, 0));
  s.tensors.emplace("k_linear.weight", Filled({4, 4}, 0));
  attn_test::ExpectStatus(load(s).status(), StatusCode::kInvalidArgument,
                          "missing tensor 'v_linear.weight'");
  s.tensors.emplace("v_linear.weight", Filled({4, 4}, 0));
  s.tensors.emplace("v_linear.bias", Filled({4}, 0));
  auto ok = load(s);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(ok->info().has_bias);
  EXPECT_FALSE(ok->info().has_out_proj);
}

TEST(Model, BuiltinDemoModelsAreDeterministicAndValid) {
  auto a = BuiltinDemoModels(), b = BuiltinDemoModels();
  ASSERT_EQ(a.size(), 5u);
  const char* names[] = {"demo-attention", "demo-cross-attention", "demo-mha", "demo-mha-small",
                         "demo-gqa"};
  const ModelKind kinds[] = {ModelKind::kAttention, ModelKind::kCrossAttention,
                             ModelKind::kMultiHeadAttention, ModelKind::kMultiHeadAttention,
                             ModelKind::kMultiHeadAttention};
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].info().name, names[i]);
    EXPECT_EQ(a[i].info().kind, kinds[i]);
    const TensorView& wa = a[i].projections().q.weight;
    const TensorView& wb = b[i].projections().q.weight;
    ASSERT_EQ(wa.shape, wb.shape);
    EXPECT_EQ(0, std::memcmp(wa.data, wb.data, wa.shape[0] * wa.shape[1] * sizeof(float)));
  }
  EXPECT_EQ(a[2].info().embed_dim, 512);
  EXPECT_EQ(a[2].info().num_heads, 8);
  EXPECT_EQ(a[2].info().num_kv_heads, 8);
  EXPECT_EQ(a[4].info().num_heads, 8);  // demo-gqa: 8 query heads over 2 kv heads
  EXPECT_EQ(a[4].info().num_kv_heads, 2);
  EXPECT_EQ(a[4].projections().k.weight.shape, (Shape{64, 256}));
  // The first weight of demo-attention, pinned: SplitMix64(seed 1)'s first
  // output mapped to [-1/8, 1/8), computed independently in Python. A change
  // to the generator would silently change every demo model.
  EXPECT_FLOAT_EQ(a[0].projections().q.weight.f32()[0], 0.016640393f);
}

// On the AVX2 tier, models keep small weights as W^T too (LinearView::
// weight_t: the small projections then skip oneDNN's fixed cost per call);
// on the other tiers they keep none. W^T holds exactly W's values, and
// attention through it matches attention through oneDNN on W.
TEST(Model, SmallWeightsAreAlsoKeptTransposedOnTheAvx2TierOnly) {
  const bool packs = KernelTier() == IsaTier::kAvx2;
  SafetensorsFile seed;  // separate q, k, v weights (the seed's module)
  seed.metadata = {{"kind", "multi_head_attention"}, {"num_heads", "2"}};
  for (const char* p : {"q.", "k.", "v.", "out."}) {
    seed.tensors.emplace(std::string(p) + "weight", Filled({8, 8}, 0.05f * (p[0] - 'a')));
    seed.tensors.emplace(std::string(p) + "bias", Filled({8}, -0.1f));
  }
  std::vector<AttentionModel> models = BuiltinDemoModels();
  for (SafetensorsFile* f : {&seed}) {
    TempDir dir;
    auto m =
        AttentionModel::LoadSafetensors(dir.Write("seed.safetensors", SerializeSafetensors(*f)));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    models.push_back(std::move(*m));
  }
  for (const AttentionModel& m : models) {
    SCOPED_TRACE(m.info().name);
    const ProjectionWeights& p = m.projections();
    std::vector<const LinearView*> linears = {&p.q, &p.k, &p.v};
    if (p.out) linears.push_back(&*p.out);
    for (const LinearView* lin : linears) {
      const int64_t out = lin->weight.shape[0], in = lin->weight.shape[1];
      // Up to 256K elements are packed (demo-mha's [1536, 512] in_proj is
      // not), the three rows of an in_proj_weight as one block.
      const bool fused =
          (!p.out || lin != &*p.out) &&
          p.k.weight.f32() == p.q.weight.f32() + p.q.weight.shape[0] * p.q.weight.strides[0];
      const bool small = (fused ? 3 : 1) * out * in <= 256 * 1024;
      ASSERT_EQ(lin->weight_t.has_value(), packs && small);
      if (!lin->weight_t) continue;
      ASSERT_EQ(lin->weight_t->shape, (Shape{in, out}));
      ASSERT_EQ(lin->weight_t->strides[1], 1);
      for (int64_t r = 0; r < out; ++r) {
        for (int64_t c = 0; c < in; ++c) {
          ASSERT_EQ(lin->weight_t->f32()[c * lin->weight_t->strides[0] + r],
                    lin->weight.f32()[r * lin->weight.strides[0] + c])
              << r << "," << c;
        }
      }
    }
    if (m.info().kind != ModelKind::kMultiHeadAttention) continue;
    const int64_t e = m.info().embed_dim;
    Tensor x = Filled({2, 5, e}, -0.3f);
    for (float& v : x.data) v = std::sin(7.0f * v);
    ProjectionWeights plain = p;
    for (LinearView* lin : {&plain.q, &plain.k, &plain.v}) lin->weight_t.reset();
    if (plain.out) plain.out->weight_t.reset();
    MultiHeadAttentionOptions opt;
    opt.num_heads = m.info().num_heads;
    opt.num_kv_heads = m.info().num_kv_heads;
    opt.num_threads = 1;
    auto got = MultiHeadAttention(p, x.view(), x.view(), x.view(), opt);
    auto want = MultiHeadAttention(plain, x.view(), x.view(), x.view(), opt);
    ASSERT_TRUE(got.ok() && want.ok());
    ASSERT_EQ(got->output.shape, want->output.shape);
    for (size_t i = 0; i < want->output.data.size(); ++i) {
      ASSERT_NEAR(got->output.data[i], want->output.data[i],
                  1e-5f * (1.0f + std::fabs(want->output.data[i])))
          << i;
    }
  }
}

}  // namespace
}  // namespace attn
