#include "oip_call.h"

#include <algorithm>

namespace attn::client {
namespace {

// One input: raw bytes (the encoding's `data`) or typed contents (`values`),
// floats as `float_type`.
void AddInput(const std::string& name, const HostArray& a, Encoding encoding,
              wire::WireType float_type, inference::ModelInferRequest* req) {
  const wire::WireType type = a.is_bool ? wire::WireType::kBool : float_type;
  auto* in = req->add_inputs();
  in->set_name(name);
  in->set_datatype(wire::OipDatatype(type));
  in->mutable_shape()->Add(a.shape.begin(), a.shape.end());
  if (encoding == Encoding::kValues) {
    if (a.is_bool) {
      for (float v : a.values) in->mutable_contents()->add_bool_contents(v != 0);
    } else {
      in->mutable_contents()->mutable_fp32_contents()->Add(a.values.begin(), a.values.end());
    }
    return;
  }
  std::string* raw = req->add_raw_input_contents();
  raw->resize(a.values.size() * static_cast<size_t>(wire::WireTypeBytes(type)));
  if (a.is_bool) {
    for (size_t i = 0; i < a.values.size(); ++i) (*raw)[i] = a.values[i] != 0 ? 1 : 0;
  } else {
    wire::NarrowInto(a.values.data(), static_cast<int64_t>(a.values.size()), type, raw->data());
  }
}

void BoolParameter(const char* name, bool value, inference::ModelInferRequest* req) {
  if (value) (*req->mutable_parameters())[name].set_bool_param(true);
}

}  // namespace

StatusOr<inference::ModelInferRequest> BuildOipRequest(const CallSpec& s) {
  if (!s.projections.empty()) {
    return Status::InvalidArgument(
        "--protocol oip: inline projection weights are attention.v1's only; use --model");
  }
  if (s.op != "attention" && s.model.empty()) {
    return Status::InvalidArgument("--protocol oip: " + s.op +
                                   " needs --model (OIP models carry their weights)");
  }
  if (s.encoding == Encoding::kValues && s.dtype != wire::WireType::kFloat32) {
    return Status::InvalidArgument("--dtype " + std::string(DtypeName(s.dtype)) +
                                   ": half types travel as raw bytes only (--encoding raw)");
  }
  if (s.query.shape.empty()) {
    return Status::InvalidArgument(s.op == "cross" ? "cross: --decoder (or --random) is required"
                                                   : s.op + ": --query (or --random) is required");
  }
  if (s.op == "cross" && !s.key) {
    return Status::InvalidArgument("cross: --encoder (or --random) is required");
  }
  inference::ModelInferRequest req;
  req.set_model_name(s.model.empty() ? "scaled_dot_product_attention" : s.model);
  AddInput("query", s.query, s.encoding, s.dtype, &req);
  if (s.key) {
    AddInput("key", *s.key, s.encoding, s.dtype, &req);
    // Cross-attention: the encoder is both key and value.
    AddInput("value", s.op == "cross" || !s.value ? *s.key : *s.value, s.encoding, s.dtype, &req);
  }
  if (s.key_padding_mask) {
    HostArray m = *s.key_padding_mask;
    m.is_bool = true;
    AddInput("key_padding_mask", m, s.encoding, s.dtype, &req);
  }
  if (s.attn_bias) AddInput("attn_bias", *s.attn_bias, s.encoding, s.dtype, &req);
  BoolParameter("causal", s.causal, &req);
  BoolParameter("return_weights", s.return_weights, &req);
  BoolParameter("per_head_weights", s.per_head_weights, &req);
  if (s.scale) (*req.mutable_parameters())["scale"].set_double_param(*s.scale);
  const AttentionVariants& v = s.variants;
  auto& params = *req.mutable_parameters();
  if (v.bottom_right) params["causal_alignment"].set_string_param("bottom_right");
  if (v.window_left) params["window_left"].set_int64_param(*v.window_left);
  if (v.window_right) params["window_right"].set_int64_param(*v.window_right);
  if (v.softcap) params["softcap"].set_double_param(*v.softcap);
  BoolParameter("return_lse", v.return_lse, &req);
  if (!v.compute_precision.empty()) {
    params["compute_precision"].set_string_param(v.compute_precision == "bfloat16" ? "bf16"
                                                                                   : "fp32");
  }
  // Slopes and sinks are FP32 whatever --dtype says.
  const wire::WireType f32 = wire::WireType::kFloat32;
  if (v.alibi_slopes) AddInput("alibi_slopes", *v.alibi_slopes, s.encoding, f32, &req);
  if (v.sink_logits) AddInput("sink_logits", *v.sink_logits, s.encoding, f32, &req);
  for (const auto& [name, offsets] :
       {std::pair{"cu_seqlens_q", &v.cu_seqlens_q}, std::pair{"cu_seqlens_k", &v.cu_seqlens_k}}) {
    if (offsets->empty()) continue;
    auto* in = req.add_inputs();
    in->set_name(name);
    in->set_datatype("INT64");
    in->add_shape(static_cast<int64_t>(offsets->size()));
    if (s.encoding == Encoding::kValues) {
      in->mutable_contents()->mutable_int64_contents()->Add(offsets->begin(), offsets->end());
    } else {  // raw: little-endian int64, as every raw input
      *req.add_raw_input_contents() = wire::Int64ToRaw(*offsets);
    }
  }
  if (v.num_kv_heads != 0) {
    return Status::InvalidArgument(
        "--num-kv-heads: OIP models carry their heads; grouped-query SDPA reads them from the "
        "key's shape");
  }
  if (s.num_heads != 0 && s.model.empty()) {
    return Status::InvalidArgument(
        "--num-heads: OIP's scaled_dot_product_attention takes heads "
        "as a dim of [B, H, L, D]");
  }
  return req;
}

Status FromOipResponse(const inference::ModelInferResponse& resp,
                       attention::v1::AttentionResponse* out) {
  const bool raw = resp.raw_output_contents_size() > 0;
  if (raw && resp.raw_output_contents_size() != resp.outputs_size()) {
    return Status::InvalidArgument("response: " + std::to_string(resp.raw_output_contents_size()) +
                                   " raw_output_contents for " +
                                   std::to_string(resp.outputs_size()) + " outputs");
  }
  for (int i = 0; i < resp.outputs_size(); ++i) {
    const auto& o = resp.outputs(i);
    attention::v1::Tensor* t = o.name() == "weights"  ? out->mutable_weights()
                               : o.name() == "output" ? out->mutable_output()
                               : o.name() == "lse"    ? out->mutable_lse()
                                                      : nullptr;
    if (t == nullptr) continue;
    t->mutable_shape()->Add(o.shape().begin(), o.shape().end());
    const wire::WireType type = wire::FromOipDatatype(o.datatype());
    if (type != wire::WireType::kFloat32 && type != wire::WireType::kFloat16 &&
        type != wire::WireType::kBFloat16) {
      return Status::InvalidArgument("response: output '" + o.name() + "' has datatype " +
                                     o.datatype());
    }
    t->set_dtype(static_cast<attention::v1::DataType>(wire::NativeDataType(type)));
    if (raw) {
      t->set_data(resp.raw_output_contents(i));
    } else {
      t->mutable_values()->Add(o.contents().fp32_contents().begin(),
                               o.contents().fp32_contents().end());
    }
  }
  return Status::Ok();
}

}  // namespace attn::client
