// Parity with PyTorch 1.13 on the attention variants (issue 23): GQA/MQA
// through repeat_interleave, bottom-right causal, windows, softcap, ALiBi
// and sinks through explicit tensor ops and masks, and the lse
// (tests/golden/make_variant_goldens.py writes the files; CI only reads
// them). Each case runs through core's SDPA options, on every kernel tier.
#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attn/attention.h"
#include "attn/safetensors.h"
#include "tensor_compare.h"

namespace attn {
namespace {

const std::string kDir = std::string(ATTN_GOLDEN_DIR) + "/variants";

std::vector<std::string> Cases() {
  std::vector<std::string> names;
  if (DIR* dir = opendir(kDir.c_str())) {
    while (dirent* e = readdir(dir)) {
      const std::string n = e->d_name, ext = ".safetensors";
      if (n.size() > ext.size() && n.compare(n.size() - ext.size(), ext.size(), ext) == 0) {
        names.push_back(n.substr(0, n.size() - ext.size()));
      }
    }
    closedir(dir);
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(VariantGoldens, AllCasesPresent) { EXPECT_EQ(Cases().size(), 4u); }

class VariantGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(VariantGolden, MatchesPyTorch) {
  auto file = ReadSafetensorsFile(kDir + "/" + GetParam() + ".safetensors");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto& t = file->tensors;
  auto& meta = file->metadata;
  ScaledDotProductAttentionOptions opt;
  opt.masks.causal = meta["causal"] == "1";
  opt.masks.causal_alignment =
      meta["bottom_right"] == "1" ? CausalAlignment::kBottomRight : CausalAlignment::kTopLeft;
  if (std::stoll(meta["window_left"]) >= 0) opt.masks.window_left = std::stoll(meta["window_left"]);
  if (std::stoll(meta["window_right"]) >= 0) {
    opt.masks.window_right = std::stoll(meta["window_right"]);
  }
  if (std::stod(meta["softcap"]) > 0) opt.score.softcap = std::stof(meta["softcap"]);
  if (t.count("alibi_slopes")) opt.score.alibi_slopes = t.at("alibi_slopes").view();
  if (t.count("sink_logits")) opt.score.sink_logits = t.at("sink_logits").view();
  opt.score.return_lse = true;
  auto r = ScaledDotProductAttention(t.at("query").view(), t.at("key").view(), t.at("value").view(),
                                     opt);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Tensor& want_out = t.at("expected_output");
  ASSERT_EQ(r->output.shape, want_out.shape);
  const std::vector<double> want(want_out.data.begin(), want_out.data.end());
  EXPECT_TRUE(attn_test::AllClose(r->output.data.data(), want, 1e-5, attn_test::MaxAbs(want)));
  const Tensor& want_lse = t.at("expected_lse");
  ASSERT_TRUE(r->lse.has_value());
  ASSERT_EQ(r->lse->shape, want_lse.shape);
  for (size_t i = 0; i < want_lse.data.size(); ++i) {
    const float w = want_lse.data[i];
    if (std::isinf(w)) {
      EXPECT_EQ(r->lse->data[i], w) << i;
    } else {
      EXPECT_NEAR(r->lse->data[i], w, 1e-5 * std::max(1.0f, std::abs(w))) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(PyTorch, VariantGolden, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace attn
