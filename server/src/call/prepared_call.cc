#include "call/prepared_call.h"

#include <cstdio>
#include <tuple>
#include <utility>

#include "attn/cpu_info.h"
#include "wire/precision_header.h"

namespace attn::server {
namespace {

using attention::v1::Projections;

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

// Decodes `t` into the call's storage and returns its view, which lives as
// long as the call (a deque: stable addresses).
StatusOr<const TensorView*> Decode(const wire::WireTensor& t, const std::string& field,
                                   DataType dtype, const RequestLimits& limits,
                                   PreparedCall* call) {
  call->tensors.emplace_back();
  wire::DecodedTensor& d = call->tensors.back();
  ATTN_RETURN_IF_ERROR(wire::DecodeTensor(t, field, dtype, limits.max_tensor_elements, &d));
  call->fields.push_back(field);
  return &d.view;
}

StatusOr<const TensorView*> Decode(const attention::v1::Tensor& t, const std::string& field,
                                   DataType dtype, const RequestLimits& limits,
                                   PreparedCall* call) {
  return Decode(wire::FromNative(t, call->tensor_data), field, dtype, limits, call);
}

Status DecodeMasks(const CallRequest& req, const RequestLimits& limits, PreparedCall* call,
                   AttentionMasks* masks, AttentionScoreOptions* score) {
  masks->causal = req.causal;
  masks->causal_alignment = req.causal_alignment;
  masks->window_left = req.window_left;
  masks->window_right = req.window_right;
  score->softcap = req.softcap;
  score->return_lse = req.return_lse;
  for (const auto& [wire_tensor, field, dst] :
       {std::tuple{&req.alibi_slopes, "alibi_slopes", &score->alibi_slopes},
        std::tuple{&req.sink_logits, "sink_logits", &score->sink_logits}}) {
    if (!*wire_tensor) continue;
    auto m = Decode(**wire_tensor, field, DataType::kFloat32, limits, call);
    if (!m.ok()) return m.status();
    *dst = **m;
  }
  if (req.key_padding_mask) {
    auto m = Decode(*req.key_padding_mask, "key_padding_mask", DataType::kBool, limits, call);
    if (!m.ok()) return m.status();
    masks->key_padding_mask = **m;
  }
  if (req.attn_bias) {
    auto m = Decode(*req.attn_bias, "attn_bias", DataType::kFloat32, limits, call);
    if (!m.ok()) return m.status();
    masks->attn_bias = **m;
  }
  return Status::Ok();
}

// query, and key + value (both or neither: query alone is self-attention).
// The response takes the query's encoding and float type.
// True when a BFLOAT16 query, key and value will compute in bf16 as they
// are: SDPA through Attention (no projections) without the weights, whose
// precision resolves to bf16. Then they are viewed in place, never widened
// to float32 and rounded back (core's only bf16 inputs).
bool KeepBf16(const CallRequest& req, const RequestLimits& limits) {
  if (req.op != CallOp::kAttention || !req.model.empty() || req.projections != nullptr ||
      req.return_weights) {
    return false;
  }
  for (const auto* t : {&req.query, &req.key, &req.value}) {
    if (t->has_value() && (*t)->type != wire::WireType::kBFloat16) return false;
  }
  return ResolvePrecision(req.precision, limits.compute_precision, /*bf16_query=*/true,
                          Bf16ComputeAvailable()) == UsedPrecision::kBFloat16;
}

Status DecodeQueryKeyValue(const CallRequest& req, const RequestLimits& limits, PreparedCall* call,
                           const TensorView** query, const TensorView** key,
                           const TensorView** value) {
  const std::string qf = req.query_field, kf = req.key_field;
  if (!req.query) return Status::InvalidArgument(qf + ": required");
  const bool cross = req.op == CallOp::kCrossAttention;
  if (cross && !req.key) return Status::InvalidArgument(kf + ": required");
  if (!cross && req.key.has_value() != req.value.has_value()) {
    return Status::InvalidArgument(
        "key and value: set both or neither (query alone is self-attention), got only " +
        std::string(req.key ? "key" : "value"));
  }
  const DataType type = KeepBf16(req, limits) ? DataType::kBFloat16 : DataType::kFloat32;
  auto q = Decode(*req.query, qf, type, limits, call);
  if (!q.ok()) return q.status();
  call->encoding = call->tensors.back().encoding;
  call->output_type = call->tensors.back().type;
  *query = *key = *value = *q;
  if (req.key) {
    auto k = Decode(*req.key, kf, type, limits, call);
    if (!k.ok()) return k.status();
    *key = *value = *k;
  }
  if (!cross && req.value) {
    auto v = Decode(*req.value, "value", type, limits, call);
    if (!v.ok()) return v.status();
    *value = *v;
  }
  return Status::Ok();
}

// Projections from a named model or from the request (never both): points
// call->weights at them (null: none); `out` says what else the model fixes.
struct ResolvedProjections {
  int64_t num_heads = 0;     // the model's; 0 for inline weights
  int64_t num_kv_heads = 0;  // the model's; 0 for inline weights
};

Status ResolveProjections(const std::string& model, const Projections* inline_weights,
                          const ModelRegistry& models, const RequestLimits& limits,
                          PreparedCall* call, ResolvedProjections* out) {
  if (!model.empty() && inline_weights != nullptr) {
    return Status::InvalidArgument("model and projections: set one, not both");
  }
  if (!model.empty()) {
    const AttentionModel* m = models.Find(model);
    if (m == nullptr) {
      return Status::NotFound("model: no model named '" + model +
                              "' (available: " + models.Names() + ")");
    }
    call->model = model;
    call->weights = &m->projections();
    out->num_heads = m->info().num_heads;
    out->num_kv_heads = m->info().num_kv_heads;
    return Status::Ok();
  }
  if (inline_weights == nullptr) return Status::Ok();
  const Projections& p = *inline_weights;
  int64_t elements = 0;
  auto linear = [&](bool has_w, const attention::v1::Tensor& w, bool has_b,
                    const attention::v1::Tensor& b, const char* name, bool required,
                    std::optional<LinearView>* dst) -> Status {
    const std::string wf = std::string("projections.") + name + "_weight";
    const std::string bf = std::string("projections.") + name + "_bias";
    if (!has_w) {
      if (has_b) return Status::InvalidArgument(bf + ": set without " + wf);
      if (required) return Status::InvalidArgument(wf + ": required with inline projections");
      return Status::Ok();
    }
    auto wv = Decode(w, wf, DataType::kFloat32, limits, call);
    if (!wv.ok()) return wv.status();
    LinearView lin{**wv, std::nullopt};
    if ((*wv)->rank() == 2) elements += (*wv)->shape[0] * (*wv)->shape[1];
    if (has_b) {
      auto bv = Decode(b, bf, DataType::kFloat32, limits, call);
      if (!bv.ok()) return bv.status();
      lin.bias = **bv;
    }
    *dst = lin;
    return Status::Ok();
  };
  std::optional<LinearView> q, k, v, o;
  ATTN_RETURN_IF_ERROR(
      linear(p.has_q_weight(), p.q_weight(), p.has_q_bias(), p.q_bias(), "q", true, &q));
  ATTN_RETURN_IF_ERROR(
      linear(p.has_k_weight(), p.k_weight(), p.has_k_bias(), p.k_bias(), "k", true, &k));
  ATTN_RETURN_IF_ERROR(
      linear(p.has_v_weight(), p.v_weight(), p.has_v_bias(), p.v_bias(), "v", true, &v));
  ATTN_RETURN_IF_ERROR(
      linear(p.has_out_weight(), p.out_weight(), p.has_out_bias(), p.out_bias(), "out", false, &o));
  // The weights are already in the message; the limit keeps a request from
  // making the server multiply by an oversized weight set.
  if (elements > limits.max_projection_elements) {
    return Status::ResourceExhausted(
        "projections: " + std::to_string(elements) + " weight elements exceed the limit of " +
        std::to_string(limits.max_projection_elements) + " (--max-projection-elements)");
  }
  call->projections = {*q, *k, *v, o};
  call->weights = &call->projections;
  return Status::Ok();
}

}  // namespace

Status CheckResponseBytes(double bytes, const RequestLimits& l) {
  if (bytes > static_cast<double>(l.max_message_bytes)) {
    return Status::ResourceExhausted(
        "response: " + Num(bytes) + " bytes would exceed the message limit of " +
        std::to_string(l.max_message_bytes) + " bytes (--max-message-mb)");
  }
  return Status::Ok();
}

namespace {

Status CheckLimits(const AttentionCost& c, const RequestLimits& l) {
  if (c.work > l.max_attention_work) {
    return Status::ResourceExhausted("request: attention work B*H*Lq*Lk*D = " + Num(c.work) +
                                     " exceeds the limit of " + Num(l.max_attention_work) +
                                     " (--max-attention-work)");
  }
  ATTN_RETURN_IF_ERROR(CheckResponseBytes(c.result_bytes, l));
  if (c.result_bytes + c.scratch_bytes > static_cast<double>(l.max_request_memory_bytes)) {
    return Status::ResourceExhausted(
        "request: needs " + Num((c.result_bytes + c.scratch_bytes) / (1 << 20)) +
        " MiB of buffers, over the limit of " + std::to_string(l.max_request_memory_bytes >> 20) +
        " MiB (--max-request-memory-mb)");
  }
  return Status::Ok();
}

// Plans a multi-head (or single-head, projected) call and checks its cost.
// The views point into the call's storage, which outlives the compute.
Status PrepareMha(const TensorView* q, const TensorView* k, const TensorView* v,
                  MultiHeadAttentionOptions opt, const RequestLimits& limits, PreparedCall* call) {
  const ProjectionWeights* w = call->weights;
  auto cost = EstimateMultiHeadAttention(*w, *q, *k, *v, opt);
  if (!cost.ok()) return cost.status();
  ATTN_RETURN_IF_ERROR(CheckLimits(*cost, limits));
  call->cost = *cost;
  opt.cancelled = &call->cancelled;
  call->compute = [w, q, k, v, opt](int threads, OutputAllocator output) mutable {
    opt.num_threads = threads;
    opt.output_allocator = std::move(output);
    return MultiHeadAttention(*w, *q, *k, *v, opt);
  };
  return Status::Ok();
}

Status SingleHeadOnly(const ResolvedProjections& proj, const std::string& model, const char* rpc) {
  if (proj.num_heads > 1) {
    return Status::InvalidArgument("model: '" + model + "' has " + std::to_string(proj.num_heads) +
                                   " heads; " + rpc +
                                   " applies single-head weights, use MultiHeadAttention");
  }
  return Status::Ok();
}

}  // namespace

UsedPrecision ResolvePrecision(RequestedPrecision requested, PrecisionPolicy policy,
                               bool bf16_query, bool bf16_available) {
  bool bf16 = false;
  if (requested == RequestedPrecision::kBFloat16) {
    bf16 = true;
  } else if (requested == RequestedPrecision::kUnspecified) {
    bf16 = policy == PrecisionPolicy::kBFloat16 || (policy == PrecisionPolicy::kAuto && bf16_query);
  }
  return bf16 && bf16_available ? UsedPrecision::kBFloat16 : UsedPrecision::kFloat32;
}

ComputePrecision CorePrecision(UsedPrecision p) {
  return p == UsedPrecision::kBFloat16 ? ComputePrecision::kBFloat16 : ComputePrecision::kFloat32;
}

const char* PrecisionName(UsedPrecision p) {
  return p == UsedPrecision::kBFloat16 ? wire::kPrecisionBfloat16 : wire::kPrecisionFloat32;
}

std::string PreparedCall::Shapes() const {
  std::string s;
  size_t i = 0;
  for (const wire::DecodedTensor& t : tensors) {
    if (i >= fields.size()) break;
    if (!s.empty()) s += ' ';
    s += fields[i++] + ShapeToString(t.view.shape);
  }
  return s;
}

Status PrepareCall(const CallRequest& req, const ModelRegistry& models, const RequestLimits& limits,
                   PreparedCall* call) {
  const TensorView *q = nullptr, *k = nullptr, *v = nullptr;
  ATTN_RETURN_IF_ERROR(DecodeQueryKeyValue(req, limits, call, &q, &k, &v));
  call->precision =
      ResolvePrecision(req.precision, limits.compute_precision,
                       call->output_type == wire::WireType::kBFloat16, Bf16ComputeAvailable());
  AttentionMasks masks;
  AttentionScoreOptions score;
  ATTN_RETURN_IF_ERROR(DecodeMasks(req, limits, call, &masks, &score));
  ResolvedProjections proj;
  ATTN_RETURN_IF_ERROR(ResolveProjections(req.model, req.projections, models, limits, call, &proj));
  const char* rpc = req.op == CallOp::kCrossAttention ? "CrossAttention" : "Attention";
  if (req.op == CallOp::kMultiHeadAttention) {
    if (call->weights == nullptr) {
      return Status::InvalidArgument(
          "model or projections: MultiHeadAttention needs one (the in/out projection weights)");
    }
    MultiHeadAttentionOptions opt;
    if (!req.model.empty()) {
      if (req.num_heads != 0 && req.num_heads != proj.num_heads) {
        return Status::InvalidArgument("num_heads: model '" + req.model + "' has " +
                                       std::to_string(proj.num_heads) + " heads, got " +
                                       std::to_string(req.num_heads) + " (leave it 0)");
      }
      opt.num_heads = proj.num_heads;
      if (req.num_kv_heads != 0 && req.num_kv_heads != proj.num_kv_heads) {
        return Status::InvalidArgument("num_kv_heads: model '" + req.model + "' has " +
                                       std::to_string(proj.num_kv_heads) + " kv heads, got " +
                                       std::to_string(req.num_kv_heads) + " (leave it 0)");
      }
      opt.num_kv_heads = proj.num_kv_heads;
    } else if (req.num_heads <= 0) {
      return Status::InvalidArgument(
          "num_heads: required (positive) with inline projections, got " +
          std::to_string(req.num_heads));
    } else {
      opt.num_heads = req.num_heads;
      opt.num_kv_heads = req.num_kv_heads;  // core checks it divides num_heads
    }
    opt.masks = masks;
    opt.score = score;
    opt.scale = req.scale;
    opt.need_weights = req.return_weights;
    opt.average_weights = !req.per_head_weights;
    opt.compute_precision = CorePrecision(call->precision);
    return PrepareMha(q, k, v, opt, limits, call);
  }
  const bool packed = !req.cu_seqlens_q.empty() || !req.cu_seqlens_k.empty();
  if (packed && (req.op != CallOp::kAttention || call->weights != nullptr)) {
    return Status::InvalidArgument(
        std::string(req.cu_seqlens_q.empty() ? "cu_seqlens_k" : "cu_seqlens_q") +
        ": packed batches are for Attention without weights (SDPA), got " +
        (req.op == CallOp::kAttention ? "a model or projections" : "another operation"));
  }
  if (req.op == CallOp::kCrossAttention && call->weights == nullptr) {
    return Status::InvalidArgument(
        "model or projections: CrossAttention needs one (the query, key and value weights)");
  }
  if (call->weights != nullptr) {
    ATTN_RETURN_IF_ERROR(SingleHeadOnly(proj, req.model, rpc));
    MultiHeadAttentionOptions opt;
    opt.num_heads = 1;
    opt.masks = masks;
    opt.score = score;
    opt.scale = req.scale;
    opt.need_weights = req.return_weights;
    opt.compute_precision = CorePrecision(call->precision);
    return PrepareMha(q, k, v, opt, limits, call);
  }
  ScaledDotProductAttentionOptions opt;
  opt.masks = masks;
  opt.score = score;
  opt.scale = req.scale;
  opt.need_weights = req.return_weights;
  opt.cu_seqlens_q = req.cu_seqlens_q;
  opt.cu_seqlens_k = req.cu_seqlens_k;
  opt.compute_precision = CorePrecision(call->precision);
  auto cost = EstimateScaledDotProductAttention(*q, *k, *v, opt);
  if (!cost.ok()) return cost.status();
  ATTN_RETURN_IF_ERROR(CheckLimits(*cost, limits));
  call->cost = *cost;
  opt.cancelled = &call->cancelled;
  call->compute = [q, k, v, opt](int threads, OutputAllocator output) mutable {
    opt.num_threads = threads;
    opt.output_allocator = std::move(output);
    return ScaledDotProductAttention(*q, *k, *v, opt);
  };
  return Status::Ok();
}

}  // namespace attn::server
