#include "attn/model.h"

#include <cmath>
#include <set>
#include <vector>

#include "attn/cpu_info.h"
#include "attn/safetensors.h"
#include "kernels/blocked_attention.h"
#include "kernels/simd/small_matmul.h"
#include "support/half_kernels.h"

namespace attn {
namespace {

// A row range [row0, row0 + rows) of a 2-D weight, or a slice of a 1-D bias.
TensorView Rows(const Tensor& t, int64_t row0, int64_t rows) {
  TensorView v = t.view();
  const int64_t inner = t.shape.size() == 2 ? t.shape[1] : 1;
  v.data = t.data.data() + row0 * inner;
  v.shape[0] = rows;
  return v;
}

class Builder {
 public:
  Builder(std::string name, std::map<std::string, Tensor>* tensors)
      : name_(std::move(name)), tensors_(tensors) {}

  const Tensor* Find(const std::string& key) {
    auto it = tensors_->find(key);
    if (it == tensors_->end()) return nullptr;
    used_.insert(key);
    return &it->second;
  }

  StatusOr<const Tensor*> Require(const std::string& key) {
    const Tensor* t = Find(key);
    if (t == nullptr) return Status::InvalidArgument(Prefix() + "missing tensor '" + key + "'");
    return t;
  }

  Status CheckRank(const std::string& key, const Tensor& t, size_t rank) {
    if (t.shape.size() != rank) {
      return Status::InvalidArgument(Prefix() + "tensor '" + key + "' must have rank " +
                                     std::to_string(rank) + ", got shape " +
                                     ShapeToString(t.shape));
    }
    return Status::Ok();
  }

  // A linear layer stored as "<prefix>weight" and an optional "<prefix>bias".
  StatusOr<LinearView> Linear(const std::string& prefix, bool required = true) {
    const std::string wkey = prefix + "weight", bkey = prefix + "bias";
    const Tensor* w = Find(wkey);
    if (w == nullptr) {
      if (!required && Find(bkey) == nullptr) return Status::NotFound("");
      return Status::InvalidArgument(Prefix() + "missing tensor '" + wkey + "'");
    }
    ATTN_RETURN_IF_ERROR(CheckRank(wkey, *w, 2));
    LinearView lin{w->view(), std::nullopt};
    if (const Tensor* b = Find(bkey)) {
      ATTN_RETURN_IF_ERROR(CheckRank(bkey, *b, 1));
      if (b->shape[0] != w->shape[0]) {
        return Status::InvalidArgument(Prefix() + "tensor '" + bkey + "' must have shape [" +
                                       std::to_string(w->shape[0]) + "], got " +
                                       ShapeToString(b->shape));
      }
      lin.bias = b->view();
    }
    return lin;
  }

  Status CheckAllUsed(const char* kind) {
    for (const auto& [key, t] : *tensors_) {
      if (used_.count(key)) continue;
      if (key == "bias_k" || key == "bias_v") {
        return Status::Unimplemented(Prefix() + "tensor '" + key +
                                     "': add_bias_kv is not supported");
      }
      return Status::InvalidArgument(Prefix() + "unexpected tensor '" + key + "' for kind " + kind);
    }
    return Status::Ok();
  }

  std::string Prefix() const { return "model '" + name_ + "': "; }

 private:
  std::string name_;
  std::map<std::string, Tensor>* tensors_;
  std::set<std::string> used_;
};

// nn.MultiheadAttention: in_proj_weight [3E, E] or q/k/v_proj_weight,
// in_proj_bias [3E], out_proj.weight/bias.
StatusOr<ProjectionWeights> TorchMultiheadAttention(Builder& b, bool grouped) {
  ProjectionWeights w;
  int64_t e = 0;
  if (const Tensor* in_proj = b.Find("in_proj_weight")) {
    ATTN_RETURN_IF_ERROR(b.CheckRank("in_proj_weight", *in_proj, 2));
    if (in_proj->shape[0] % 3 != 0 || in_proj->shape[0] / 3 != in_proj->shape[1]) {
      return Status::InvalidArgument(b.Prefix() +
                                     "tensor 'in_proj_weight' must have shape [3E, E], got " +
                                     ShapeToString(in_proj->shape));
    }
    e = in_proj->shape[1];
    w.q.weight = Rows(*in_proj, 0, e);
    w.k.weight = Rows(*in_proj, e, e);
    w.v.weight = Rows(*in_proj, 2 * e, e);
  } else {
    ATTN_ASSIGN_OR_RETURN(auto q, b.Require("q_proj_weight"));
    ATTN_ASSIGN_OR_RETURN(auto k, b.Require("k_proj_weight"));
    ATTN_ASSIGN_OR_RETURN(auto v, b.Require("v_proj_weight"));
    ATTN_RETURN_IF_ERROR(b.CheckRank("q_proj_weight", *q, 2));
    ATTN_RETURN_IF_ERROR(b.CheckRank("k_proj_weight", *k, 2));
    ATTN_RETURN_IF_ERROR(b.CheckRank("v_proj_weight", *v, 2));
    // Grouped-query heads: k and v may have fewer rows than q (FromTensors
    // checks them against num_kv_heads).
    e = q->shape[0];
    for (const auto& [key, t] : {std::pair{"k_proj_weight", k}, std::pair{"v_proj_weight", v}}) {
      if (!grouped && t->shape[0] != e) {
        return Status::InvalidArgument(b.Prefix() + "tensor '" + key + "' must have " +
                                       std::to_string(e) + " rows (embed_dim), got shape " +
                                       ShapeToString(t->shape) +
                                       " (fewer kv heads: set num_kv_heads)");
      }
    }
    w.q.weight = q->view(), w.k.weight = k->view(), w.v.weight = v->view();
  }
  if (const Tensor* bias = b.Find("in_proj_bias")) {
    ATTN_RETURN_IF_ERROR(b.CheckRank("in_proj_bias", *bias, 1));
    // q's, k's and v's biases in a row; k and v may be narrower (GQA).
    const int64_t ek = w.k.weight.shape[0], ev = w.v.weight.shape[0];
    if (bias->shape[0] != e + ek + ev) {
      return Status::InvalidArgument(b.Prefix() + "tensor 'in_proj_bias' must have shape [" +
                                     std::to_string(e + ek + ev) + "], got " +
                                     ShapeToString(bias->shape));
    }
    w.q.bias = Rows(*bias, 0, e), w.k.bias = Rows(*bias, e, ek);
    w.v.bias = Rows(*bias, e + ek, ev);
  }
  ATTN_ASSIGN_OR_RETURN(auto out, b.Linear("out_proj."));
  w.out = out;
  return w;
}

// Seed modules: SelfAttention/CrossAttention (q_linear.*, k_linear.*,
// v_linear.*, optional out_linear.*) or MultiHeadSelfAttention (q.*, k.*, v.*, out.*).
StatusOr<ProjectionWeights> SeedModule(Builder& b, const std::string& q, const std::string& k,
                                       const std::string& v, const std::string& out,
                                       bool out_required) {
  ProjectionWeights w;
  ATTN_ASSIGN_OR_RETURN(auto ql, b.Linear(q));
  ATTN_ASSIGN_OR_RETURN(auto kl, b.Linear(k));
  ATTN_ASSIGN_OR_RETURN(auto vl, b.Linear(v));
  w.q = ql, w.k = kl, w.v = vl;
  auto ol = b.Linear(out, out_required);
  if (ol.ok()) {
    w.out = *ol;
  } else if (ol.status().code() != StatusCode::kNotFound) {
    return ol.status();
  }
  return w;
}

// On a tier with core's small kernel, keeps each small projection weight
// also as W^T (LinearView::weight_t) in `storage`, once: tiny calls then
// project without oneDNN's fixed cost per call (small_matmul.h).
void PackSmallWeights(ProjectionWeights* p, std::vector<Tensor>* storage) {
  if (internal::SmallMatmulFor(KernelTier()) == nullptr) return;
  // W^T of `rows` consecutive rows of the weight that `first` starts.
  auto pack = [storage](const TensorView& first, int64_t rows) -> const float* {
    const int64_t in = first.shape[1], ld = first.strides[0];
    if (rows * in > internal::kPackedWeightMaxElements) return nullptr;
    Tensor t = Tensor::Uninitialized({in, rows});
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < in; ++c) t.data[c * rows + r] = first.f32()[r * ld + c];
    }
    storage->push_back(std::move(t));  // moving a Tensor keeps its buffer
    return storage->back().data.data();
  };
  auto view = [](const float* base, int64_t in, int64_t out, int64_t ld) {
    TensorView v = TensorView::Dense(base, {in, out});
    v.strides = {ld, 1};
    return v;
  };
  auto pack_one = [&](LinearView* lin) {
    const int64_t out = lin->weight.shape[0], in = lin->weight.shape[1];
    if (const float* t = pack(lin->weight, out)) lin->weight_t = view(t, in, out, out);
  };
  // nn.MultiheadAttention's in_proj_weight: q, k and v are consecutive rows
  // of one [3E, E] weight, projected by one matmul: one [E, 3E] W^T.
  const int64_t e = p->q.weight.shape[0];
  const bool fused = internal::QkvWeightRowsFollow(*p);
  if (fused) {
    const int64_t in = p->q.weight.shape[1];
    if (const float* t = pack(p->q.weight, 3 * e)) {
      p->q.weight_t = view(t, in, e, 3 * e);
      p->k.weight_t = view(t + e, in, e, 3 * e);
      p->v.weight_t = view(t + 2 * e, in, e, 3 * e);
    }
  } else {
    pack_one(&p->q), pack_one(&p->k), pack_one(&p->v);
  }
  if (p->out.has_value()) pack_one(&*p->out);
}

// Where calls may compute in bf16, keeps each projection weight rounded to
// bf16 (LinearView::weight_bf16) in `storage`, once, instead of rounding it
// in every call. The fused in_proj_weight stays one [3E, in] block, so that
// one matmul still projects q, k and v.
void PackBf16Weights(ProjectionWeights* p, std::vector<std::vector<uint16_t>>* storage) {
  if (!Bf16ComputeAvailable()) return;
  auto pack = [storage](const TensorView& first, int64_t rows) {
    const int64_t in = first.shape[1], ld = first.strides[0];
    std::vector<uint16_t> w(static_cast<size_t>(rows * in));
    internal::RowsToBf16(first.f32(), rows, in, ld, w.data());
    storage->push_back(std::move(w));  // moving a vector keeps its buffer
    return storage->back().data();
  };
  const int64_t e = p->q.weight.shape[0], in = p->q.weight.shape[1];
  if (internal::QkvWeightRowsFollow(*p)) {
    const uint16_t* w = pack(p->q.weight, 3 * e);
    p->q.weight_bf16 = w, p->k.weight_bf16 = w + e * in, p->v.weight_bf16 = w + 2 * e * in;
  } else {
    for (LinearView* lin : {&p->q, &p->k, &p->v}) {
      lin->weight_bf16 = pack(lin->weight, lin->weight.shape[0]);
    }
  }
  if (p->out.has_value()) p->out->weight_bf16 = pack(p->out->weight, p->out->weight.shape[0]);
}

}  // namespace

const char* ModelKindName(ModelKind kind) {
  switch (kind) {
    case ModelKind::kAttention:
      return "attention";
    case ModelKind::kCrossAttention:
      return "cross_attention";
    case ModelKind::kMultiHeadAttention:
      return "multi_head_attention";
  }
  return "unknown";
}

StatusOr<ModelKind> ParseModelKind(const std::string& name) {
  for (ModelKind k :
       {ModelKind::kAttention, ModelKind::kCrossAttention, ModelKind::kMultiHeadAttention}) {
    if (name == ModelKindName(k)) return k;
  }
  return Status::InvalidArgument(
      "kind: expected attention, cross_attention or multi_head_attention, got '" + name + "'");
}

StatusOr<AttentionModel> AttentionModel::FromTensors(std::string name, ModelKind kind,
                                                     int64_t num_heads,
                                                     std::map<std::string, Tensor> tensors,
                                                     int64_t num_kv_heads) {
  AttentionModel model;
  model.tensors_ = std::move(tensors);
  Builder b(name, &model.tensors_);
  StatusOr<ProjectionWeights> w = Status::Internal("unset");
  const bool grouped = num_kv_heads != 0 && num_kv_heads != num_heads;
  if (kind == ModelKind::kMultiHeadAttention) {
    w = model.tensors_.count("q.weight") ? SeedModule(b, "q.", "k.", "v.", "out.", true)
                                         : TorchMultiheadAttention(b, grouped);
  } else {
    w = SeedModule(b, "q_linear.", "k_linear.", "v_linear.", "out_linear.", false);
  }
  if (!w.ok()) return w.status();
  ATTN_RETURN_IF_ERROR(b.CheckAllUsed(ModelKindName(kind)));
  const ProjectionWeights& p = *w;

  // The same shape rules the kernels apply, checked once at load time.
  // Grouped-query heads: k and v project to num_kv_heads heads.
  const int64_t e = p.q.weight.shape[0], ek = p.k.weight.shape[0], evp = p.v.weight.shape[0];
  auto fail = [&](const std::string& what) { return Status::InvalidArgument(b.Prefix() + what); };
  const int64_t hkv = num_kv_heads == 0 ? num_heads : num_kv_heads;
  if (num_heads < 1 || hkv < 1 || num_heads % hkv != 0) {
    return fail("num_heads " + std::to_string(num_heads) + " and num_kv_heads " +
                std::to_string(hkv) + " must be positive, num_kv_heads dividing num_heads");
  }
  if (e % num_heads != 0 || evp % hkv != 0) {
    return fail("num_heads " + std::to_string(num_heads) +
                (grouped ? " (num_kv_heads " + std::to_string(hkv) + ")" : std::string()) +
                " must be positive and divide the projection widths (" + std::to_string(e) + ", " +
                std::to_string(evp) + ")");
  }
  const int64_t dh = e / num_heads, ev = num_heads * (evp / hkv);
  if (ek != hkv * dh) {
    return fail("key projection has " + std::to_string(ek) + " outputs; expected " +
                std::to_string(hkv * dh) + " (num_kv_heads " + std::to_string(hkv) +
                " x head_dim " + std::to_string(dh) + " of the query projection's " +
                std::to_string(e) + ")");
  }
  if (p.out.has_value() && p.out->weight.shape[1] != ev) {
    return fail("output projection takes " + std::to_string(p.out->weight.shape[1]) +
                " inputs, the attended heads give " + std::to_string(ev));
  }
  model.projections_ = p;
  PackSmallWeights(&model.projections_, &model.packed_);
  PackBf16Weights(&model.projections_, &model.packed_bf16_);
  model.info_.name = std::move(name);
  model.info_.kind = kind;
  model.info_.num_heads = num_heads;
  model.info_.num_kv_heads = hkv;
  model.info_.embed_dim = p.q.weight.shape[1];
  model.info_.kdim = p.k.weight.shape[1];
  model.info_.vdim = p.v.weight.shape[1];
  model.info_.has_bias = p.q.bias.has_value() || p.k.bias.has_value() || p.v.bias.has_value();
  model.info_.has_out_proj = p.out.has_value();
  return model;
}

StatusOr<AttentionModel> AttentionModel::LoadSafetensors(const std::string& path) {
  auto file = ReadSafetensorsFile(path);
  if (!file.ok()) return file.status();
  std::string stem = path.substr(path.find_last_of('/') + 1);
  if (const auto dot = stem.rfind('.'); dot != std::string::npos && dot > 0) stem.resize(dot);

  auto kind_it = file->metadata.find("kind");
  if (kind_it == file->metadata.end()) {
    return Status::InvalidArgument(path + ": __metadata__ has no 'kind'");
  }
  auto kind = ParseModelKind(kind_it->second);
  if (!kind.ok())
    return Status::InvalidArgument(path + ": __metadata__ " + kind.status().message());
  int64_t heads = 1, kv_heads = 0;
  for (const auto& [key, dst] :
       {std::pair{"num_heads", &heads}, std::pair{"num_kv_heads", &kv_heads}}) {
    auto it = file->metadata.find(key);
    if (it == file->metadata.end()) continue;
    const std::string& s = it->second;
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || end != s.c_str() + s.size() || v < 1 || v > (1 << 20)) {
      return Status::InvalidArgument(path + ": __metadata__ " + key +
                                     " must be a positive integer, got '" + s + "'");
    }
    *dst = v;
  }
  if (*kind == ModelKind::kMultiHeadAttention && file->metadata.count("num_heads") == 0) {
    return Status::InvalidArgument(
        path + ": __metadata__ has no 'num_heads' (required for multi_head_attention)");
  }
  auto model = FromTensors(stem, *kind, heads, std::move(file->tensors), kv_heads);
  if (!model.ok()) {
    return Status(model.status().code(), path + ": " + model.status().message());
  }
  return model;
}

namespace {

// SplitMix64: a tiny generator whose output is fixed by its definition, so the
// demo weights are the same with every compiler and standard library.
class DemoWeights {
 public:
  explicit DemoWeights(uint64_t seed) : state_(seed) {}

  // Uniform in [-bound, bound), like nn.Linear's default initialisation.
  Tensor Uniform(Shape shape, double bound) {
    Tensor t(std::move(shape));
    for (float& x : t.data) x = static_cast<float>((2.0 * Next() - 1.0) * bound);
    return t;
  }

 private:
  double Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1.0p-53;
  }
  uint64_t state_;
};

void AddLinear(DemoWeights& gen, std::map<std::string, Tensor>& tensors, const std::string& prefix,
               int64_t out, int64_t in) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  tensors.emplace(prefix + "weight", gen.Uniform({out, in}, bound));
  tensors.emplace(prefix + "bias", gen.Uniform({out}, bound));
}

AttentionModel DemoSingleHead(const std::string& name, ModelKind kind, int64_t e, uint64_t seed) {
  DemoWeights gen(seed);
  std::map<std::string, Tensor> t;
  for (const char* p : {"q_linear.", "k_linear.", "v_linear."}) AddLinear(gen, t, p, e, e);
  return std::move(*AttentionModel::FromTensors(name, kind, 1, std::move(t)));
}

AttentionModel DemoMultiHead(const std::string& name, int64_t e, int64_t heads, uint64_t seed) {
  DemoWeights gen(seed);
  std::map<std::string, Tensor> t;
  const double bound = 1.0 / std::sqrt(static_cast<double>(e));
  t.emplace("in_proj_weight", gen.Uniform({3 * e, e}, bound));
  t.emplace("in_proj_bias", gen.Uniform({3 * e}, bound));
  AddLinear(gen, t, "out_proj.", e, e);
  return std::move(
      *AttentionModel::FromTensors(name, ModelKind::kMultiHeadAttention, heads, std::move(t)));
}

// A grouped-query layer (Llama-style, without rotary embeddings): separate
// q/k/v_proj_weight, k and v with kv_heads heads of the query's head width.
AttentionModel DemoGroupedQuery(const std::string& name, int64_t e, int64_t heads, int64_t kv_heads,
                                uint64_t seed) {
  DemoWeights gen(seed);
  std::map<std::string, Tensor> t;
  const double bound = 1.0 / std::sqrt(static_cast<double>(e));
  const int64_t ekv = e / heads * kv_heads;
  t.emplace("q_proj_weight", gen.Uniform({e, e}, bound));
  t.emplace("k_proj_weight", gen.Uniform({ekv, e}, bound));
  t.emplace("v_proj_weight", gen.Uniform({ekv, e}, bound));
  t.emplace("in_proj_bias", gen.Uniform({e + 2 * ekv}, bound));
  AddLinear(gen, t, "out_proj.", e, e);
  return std::move(*AttentionModel::FromTensors(name, ModelKind::kMultiHeadAttention, heads,
                                                std::move(t), kv_heads));
}

}  // namespace

std::vector<AttentionModel> BuiltinDemoModels() {
  std::vector<AttentionModel> models;
  models.push_back(DemoSingleHead("demo-attention", ModelKind::kAttention, 64, 1));
  models.push_back(DemoSingleHead("demo-cross-attention", ModelKind::kCrossAttention, 64, 2));
  models.push_back(DemoMultiHead("demo-mha", 512, 8, 3));
  models.push_back(DemoMultiHead("demo-mha-small", 64, 4, 4));
  models.push_back(DemoGroupedQuery("demo-gqa", 256, 8, 2, 5));
  return models;
}

}  // namespace attn
