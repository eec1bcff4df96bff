// Weight sets ("models"): projection weights built from state_dict tensors,
// a .safetensors file (attn/safetensors.h) or the built-in demo set.
//
// A model holds the projection weights of one attention module, in PyTorch
// state_dict names and nn.Linear layout. Models are immutable after loading
// and safe to share between threads.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "attn/attention.h"
#include "attn/status.h"
#include "attn/tensor.h"

namespace attn {

enum class ModelKind { kAttention, kCrossAttention, kMultiHeadAttention };

// "attention", "cross_attention", "multi_head_attention".
const char* ModelKindName(ModelKind kind);
StatusOr<ModelKind> ParseModelKind(const std::string& name);

struct ModelInfo {
  std::string name;
  ModelKind kind = ModelKind::kAttention;
  int64_t embed_dim = 0;  // width of the query input
  int64_t num_heads = 1;
  int64_t num_kv_heads = 1;  // = num_heads unless the k/v projections are grouped (GQA)
  int64_t kdim = 0;  // width of the key input
  int64_t vdim = 0;  // width of the value input
  bool has_bias = false;
  bool has_out_proj = false;
};

class AttentionModel {
 public:
  // Builds a model from state_dict tensors. Recognised layouts:
  //  multi_head_attention: nn.MultiheadAttention (in_proj_weight or
  //    q/k/v_proj_weight, in_proj_bias, out_proj.weight/bias) or the seed's
  //    MultiHeadSelfAttention (q.*, k.*, v.*, out.*);
  //  attention / cross_attention: q_linear.*, k_linear.*, v_linear.*, and an
  //    optional out_linear.*.
  // Unknown or missing tensors and inconsistent shapes are refused; messages
  // name `name` and the tensor.
  // num_kv_heads (0: num_heads) groups the key and value projections:
  // q/k/v_proj_weight layouts only, k and v with num_kv_heads * head_dim rows.
  static StatusOr<AttentionModel> FromTensors(std::string name, ModelKind kind, int64_t num_heads,
                                              std::map<std::string, Tensor> tensors,
                                              int64_t num_kv_heads = 0);
  // Reads `path`; the model is named after the file stem. Metadata `kind`
  // is required; `num_heads` is required for multi_head_attention;
  // `num_kv_heads` is optional (grouped-query projections).
  static StatusOr<AttentionModel> LoadSafetensors(const std::string& path);

  AttentionModel(AttentionModel&&) = default;
  AttentionModel& operator=(AttentionModel&&) = default;
  AttentionModel(const AttentionModel&) = delete;
  AttentionModel& operator=(const AttentionModel&) = delete;

  const ModelInfo& info() const { return info_; }
  // Views into this model's storage; valid while the model lives.
  const ProjectionWeights& projections() const { return projections_; }

 private:
  AttentionModel() = default;
  ModelInfo info_;
  std::map<std::string, Tensor> tensors_;  // node-based: views stay valid on move
  ProjectionWeights projections_;
  std::vector<Tensor> packed_;  // weights kept as W^T as well (weight_t)
  std::vector<std::vector<uint16_t>> packed_bf16_;  // and in bf16 (weight_bf16)
};

// The built-in demo models, served when no model directory is given, one or
// more per kind, with deterministic weights (nn.Linear-style uniform
// initialisation from a fixed-seed generator, the same on every machine):
//   demo-attention        attention,            E = 64
//   demo-cross-attention  cross_attention,      E = 64
//   demo-mha              multi_head_attention, E = 512, 8 heads
//   demo-mha-small        multi_head_attention, E = 64,  4 heads
std::vector<AttentionModel> BuiltinDemoModels();

}  // namespace attn
