// Parity with PyTorch 1.13: nn.MultiheadAttention (kdim/vdim, no bias,
// averaged and per-head weights, padding and bias masks, causal, unbatched),
// the seed modules, and the seed's SDPA function. The golden files come from
// tests/golden/make_goldens.py; the model files were written by
// client/python/export_model.py, so loading them is the export round trip.
#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "attn/attention.h"
#include "attn/model.h"
#include "attn/safetensors.h"
#include "tensor_compare.h"

namespace attn {
namespace {

const std::string kGoldenDir = ATTN_GOLDEN_DIR;

std::vector<std::string> CaseNames() {
  std::vector<std::string> names;
  if (DIR* dir = opendir((kGoldenDir + "/cases").c_str())) {
    while (dirent* e = readdir(dir)) {
      std::string n = e->d_name;
      const std::string ext = ".safetensors";
      if (n.size() > ext.size() && n.compare(n.size() - ext.size(), ext.size(), ext) == 0) {
        names.push_back(n.substr(0, n.size() - ext.size()));
      }
    }
    closedir(dir);
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(GoldenFiles, AllCasesPresent) {
  // Guards against a silently empty parameter list.
  EXPECT_EQ(CaseNames().size(), 11u);
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, MatchesPyTorch) {
  auto file = ReadSafetensorsFile(kGoldenDir + "/cases/" + GetParam() + ".safetensors");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto& t = file->tensors;
  auto& meta = file->metadata;
  const bool need_weights = meta["need_weights"] == "1";

  const TensorView query = t.at("query").view();
  const TensorView key = t.count("key") ? t.at("key").view() : query;
  const TensorView value = t.count("value") ? t.at("value").view() : query;
  AttentionMasks masks;
  masks.causal = meta["causal"] == "1";
  std::vector<uint8_t> kpm;
  if (t.count("key_padding_mask")) {
    const Tensor& m = t.at("key_padding_mask");
    for (float x : m.data) kpm.push_back(x != 0.0f);
    masks.key_padding_mask = TensorView::DenseBool(kpm.data(), m.shape);
  }
  if (t.count("attn_bias")) masks.attn_bias = t.at("attn_bias").view();

  StatusOr<AttentionResult> r = Status::Internal("not run");
  if (meta["op"] == "sdpa") {
    ScaledDotProductAttentionOptions opt;
    opt.masks = masks;
    opt.need_weights = need_weights;
    r = ScaledDotProductAttention(query, key, value, opt);
  } else {
    auto model = AttentionModel::LoadSafetensors(kGoldenDir + "/models/" + meta["model"]);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    MultiHeadAttentionOptions opt;
    opt.num_heads = model->info().num_heads;
    opt.masks = masks;
    opt.need_weights = need_weights;
    opt.average_weights = meta["average_weights"] == "1";
    r = MultiHeadAttention(model->projections(), query, key, value, opt);
  }
  ASSERT_TRUE(r.ok()) << r.status().ToString();

  const Tensor& want_out = t.at("expected_output");
  EXPECT_EQ(r->output.shape, want_out.shape);
  std::vector<double> want(want_out.data.begin(), want_out.data.end());
  EXPECT_TRUE(attn_test::AllClose(r->output.data.data(), want, 1e-5, attn_test::MaxAbs(want)));
  if (need_weights) {
    const Tensor& want_w = t.at("expected_weights");
    ASSERT_TRUE(r->weights.has_value());
    EXPECT_EQ(r->weights->shape, want_w.shape);
    std::vector<double> ww(want_w.data.begin(), want_w.data.end());
    EXPECT_TRUE(attn_test::AllClose(r->weights->data.data(), ww, 1e-5, 1e-6));
  }
}

INSTANTIATE_TEST_SUITE_P(PyTorch, Golden, ::testing::ValuesIn(CaseNames()),
                         [](const auto& info) { return info.param; });

TEST(GoldenModels, ExportedMetadataIsRead) {
  auto m = AttentionModel::LoadSafetensors(kGoldenDir +
                                           "/models/mha_cross_kdim_vdim_bias4d.safetensors");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->info().name, "mha_cross_kdim_vdim_bias4d");
  EXPECT_EQ(m->info().kind, ModelKind::kMultiHeadAttention);
  EXPECT_EQ(m->info().embed_dim, 16);
  EXPECT_EQ(m->info().num_heads, 2);
  EXPECT_EQ(m->info().kdim, 12);
  EXPECT_EQ(m->info().vdim, 20);
  EXPECT_TRUE(m->info().has_bias);
  EXPECT_TRUE(m->info().has_out_proj);

  auto s = AttentionModel::LoadSafetensors(kGoldenDir + "/models/seed_cross_attention.safetensors");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->info().kind, ModelKind::kCrossAttention);
  EXPECT_EQ(s->info().num_heads, 1);
  EXPECT_FALSE(s->info().has_out_proj);
}

}  // namespace
}  // namespace attn
