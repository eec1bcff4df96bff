#include "oip/oip_adapter.h"

#include <algorithm>
#include <map>

namespace attn::server::oip {
namespace {

using inference::InferParameter;
using inference::InferTensorContents;
using inference::ModelInferRequest;
using inference::ModelInferResponse;

constexpr const char* kInputs[] = {"query",     "key",          "value",      "key_padding_mask",
                                   "attn_bias", "alibi_slopes", "sink_logits"};
constexpr const char* kInputList =
    "query, key, value, key_padding_mask, attn_bias, alibi_slopes, sink_logits, cu_seqlens_q, "
    "cu_seqlens_k";
constexpr const char* kParameters =
    "causal, scale, per_head_weights, return_weights, causal_alignment, window_left, "
    "window_right, softcap, return_lse, compute_precision";

std::string ModelList(const ModelRegistry& models) { return models.Names() + ", " + kSdpaModel; }

const char* ParameterKind(const InferParameter& p) {
  switch (p.parameter_choice_case()) {
    case InferParameter::kBoolParam:
      return "bool_param";
    case InferParameter::kInt64Param:
      return "int64_param";
    case InferParameter::kStringParam:
      return "string_param";
    case InferParameter::kDoubleParam:
      return "double_param";
    case InferParameter::kUint64Param:
      return "uint64_param";
    default:
      return "no value";
  }
}

Status BadParameter(const std::string& where, const std::string& want, const InferParameter& p) {
  return Status::InvalidArgument(where + ": expected " + want + ", got " + ParameterKind(p));
}

// The request's parameters into `c`; unknown ones are refused by name.
Status ReadParameters(const ModelInferRequest& req, bool has_weights, CallRequest* c) {
  // Sorted, so that the first bad one is the same on every run.
  std::map<std::string, const InferParameter*> sorted;
  for (const auto& [name, p] : req.parameters()) sorted[name] = &p;
  for (const auto& [name, p] : sorted) {
    const std::string where = "parameters." + name;
    if (name == "causal" || name == "per_head_weights" || name == "return_weights") {
      if (p->parameter_choice_case() != InferParameter::kBoolParam) {
        return BadParameter(where, "a bool_param", *p);
      }
      if (name == "causal") c->causal = p->bool_param();
      if (name == "return_weights") c->return_weights = c->return_weights || p->bool_param();
      if (name == "per_head_weights") {
        if (!has_weights) {
          return Status::InvalidArgument(where + ": only for models with weights (multi-head); '" +
                                         std::string(kSdpaModel) + "' returns per-head weights");
        }
        c->per_head_weights = p->bool_param();
      }
    } else if (name == "scale" || name == "softcap") {
      float x = 0;
      if (p->parameter_choice_case() == InferParameter::kDoubleParam) {
        x = static_cast<float>(p->double_param());
      } else if (p->parameter_choice_case() == InferParameter::kInt64Param) {
        x = static_cast<float>(p->int64_param());
      } else {
        return BadParameter(where, "a double_param", *p);
      }
      (name == "scale" ? c->scale : c->softcap) = x;
    } else if (name == "window_left" || name == "window_right") {
      if (p->parameter_choice_case() != InferParameter::kInt64Param) {
        return BadParameter(where, "an int64_param", *p);
      }
      (name == "window_left" ? c->window_left : c->window_right) = p->int64_param();
    } else if (name == "return_lse") {
      if (p->parameter_choice_case() != InferParameter::kBoolParam) {
        return BadParameter(where, "a bool_param", *p);
      }
      c->return_lse = p->bool_param();
    } else if (name == "causal_alignment" || name == "compute_precision") {
      const bool align = name == "causal_alignment";
      const char* want = align ? "'top_left' or 'bottom_right'" : "'fp32' or 'bf16'";
      if (p->parameter_choice_case() != InferParameter::kStringParam) {
        return BadParameter(where, std::string("a string_param, ") + want, *p);
      }
      const std::string& v = p->string_param();
      if (align && (v == "top_left" || v == "bottom_right")) {
        c->causal_alignment =
            v == "top_left" ? CausalAlignment::kTopLeft : CausalAlignment::kBottomRight;
      } else if (!align && v != "fp32" && v != "bf16") {
        return Status::InvalidArgument(where + ": expected " + want + ", got '" + v + "'");
      } else if (align) {
        return Status::InvalidArgument(where + ": expected " + want + ", got '" + v + "'");
      } else {
        c->precision = v == "bf16" ? RequestedPrecision::kBFloat16 : RequestedPrecision::kFloat32;
      }
    } else {
      return Status::InvalidArgument(where + ": unknown parameter (known: " + kParameters + ")");
    }
  }
  return Status::Ok();
}

// The populated fields of `c` other than `allowed`, for messages.
std::string OtherContents(const InferTensorContents& c, const std::string& allowed) {
  std::string s;
  auto note = [&](const char* name, int n) {
    if (n > 0 && allowed != name) s += (s.empty() ? "" : ", ") + std::string(name);
  };
  note("bool_contents", c.bool_contents_size());
  note("int_contents", c.int_contents_size());
  note("int64_contents", c.int64_contents_size());
  note("uint_contents", c.uint_contents_size());
  note("uint64_contents", c.uint64_contents_size());
  note("fp32_contents", c.fp32_contents_size());
  note("fp64_contents", c.fp64_contents_size());
  note("bytes_contents", c.bytes_contents_size());
  return s;
}

bool HasContents(const InferTensorContents& c) { return !OtherContents(c, "").empty(); }

// One input as a WireTensor, named the OIP way in messages.
StatusOr<wire::WireTensor> InputTensor(const ModelInferRequest& req, int i,
                                       std::vector<std::string>* names) {
  const auto& in = req.inputs(i);
  const std::string at = "inputs[" + std::to_string(i) + "] (" + in.name() + ")";
  wire::WireTensor t;
  t.type = wire::FromOipDatatype(in.datatype());
  t.type_name = in.datatype().empty() ? "no datatype" : in.datatype();
  t.shape.assign(in.shape().begin(), in.shape().end());
  t.type_field = "datatype";
  t.float_types = "FP32, FP16 or BF16";
  t.bool_type = "BOOL";
  if (!in.parameters().empty()) {
    return Status::InvalidArgument(at + ".parameters: none are taken, got '" +
                                   in.parameters().begin()->first + "'");
  }
  const bool raw = req.raw_input_contents_size() > 0;
  if (raw) {
    if (HasContents(in.contents())) {
      return Status::InvalidArgument(at +
                                     ".contents: set together with raw_input_contents; "
                                     "send every input one way");
    }
    names->push_back("raw_input_contents[" + std::to_string(i) + "]");
    t.has_raw = true;
    t.raw = req.raw_input_contents(i);
    t.raw_name = names->back().c_str();
    return t;
  }
  const bool is_bool = t.type == wire::WireType::kBool;
  const std::string field = is_bool ? "bool_contents" : "fp32_contents";
  const std::string other = OtherContents(in.contents(), field);
  if (!other.empty() && (t.type == wire::WireType::kFloat32 || is_bool)) {
    return Status::InvalidArgument(at + ".contents: " + t.type_name + " takes " + field + ", got " +
                                   other);
  }
  t.typed_name = is_bool ? "contents.bool_contents" : "contents.fp32_contents";
  t.raw_name = "raw_input_contents";
  if (is_bool) {
    t.bools = in.contents().bool_contents().data();
    t.typed_count = in.contents().bool_contents_size();
  } else {
    t.floats = in.contents().fp32_contents().data();
    t.typed_count = in.contents().fp32_contents_size();
  }
  return t;
}

// An INT64 [B + 1] offsets input (cu_seqlens_q/k) into `dst`, from
// int64_contents or its raw_input_contents entry (little-endian).
Status ReadOffsets(const ModelInferRequest& req, int i, std::vector<int64_t>* dst) {
  const auto& in = req.inputs(i);
  const std::string at = "inputs[" + std::to_string(i) + "] (" + in.name() + ")";
  if (!dst->empty()) return Status::InvalidArgument(at + ".name: given twice");
  if (in.datatype() != "INT64") {
    return Status::InvalidArgument(at + ".datatype: expected INT64, got '" + in.datatype() + "'");
  }
  if (in.shape_size() != 1 || in.shape(0) < 1) {
    std::string got;
    for (int64_t d : in.shape()) got += (got.empty() ? "" : ", ") + std::to_string(d);
    return Status::InvalidArgument(at + ".shape: expected [B + 1] (rank 1, at least 1), got [" +
                                   got + "]");
  }
  const int64_t n = in.shape(0);
  if (req.raw_input_contents_size() > 0) {
    const std::string& raw = req.raw_input_contents(i);
    if (static_cast<int64_t>(raw.size()) != n * 8) {
      return Status::InvalidArgument("raw_input_contents[" + std::to_string(i) + "]: expected " +
                                     std::to_string(n * 8) + " bytes (" + std::to_string(n) +
                                     " INT64), got " + std::to_string(raw.size()));
    }
    *dst = wire::Int64FromRaw(raw);
    return Status::Ok();
  }
  const std::string other = OtherContents(in.contents(), "int64_contents");
  if (!other.empty()) {
    return Status::InvalidArgument(at + ".contents: INT64 takes int64_contents, got " + other);
  }
  if (in.contents().int64_contents_size() != n) {
    return Status::InvalidArgument(at + ".contents.int64_contents: shape [" + std::to_string(n) +
                                   "] needs " + std::to_string(n) + " values, got " +
                                   std::to_string(in.contents().int64_contents_size()));
  }
  dst->assign(in.contents().int64_contents().begin(), in.contents().int64_contents().end());
  return Status::Ok();
}

enum class Out { kOutput, kWeights, kLse };
const char* OutName(Out o) {
  return o == Out::kWeights ? "weights" : o == Out::kLse ? "lse" : "output";
}

struct OutputPlan {
  std::vector<Out> kinds;  // per response output, in order
  std::vector<wire::WireType> types;
  bool raw = false;
};

Status ReadOutputs(const ModelInferRequest& req, wire::WireType query_type, CallRequest* c,
                   OutputPlan* plan) {
  for (int i = 0; i < req.outputs_size(); ++i) {
    const auto& o = req.outputs(i);
    const std::string at = "outputs[" + std::to_string(i) + "]";
    if (o.name() != "output" && o.name() != "weights" && o.name() != "lse") {
      return Status::InvalidArgument(at + ".name: unknown output '" + o.name() +
                                     "' (the outputs are output, weights and lse)");
    }
    const Out kind = o.name() == "weights" ? Out::kWeights
                     : o.name() == "lse"   ? Out::kLse
                                           : Out::kOutput;
    if (std::find(plan->kinds.begin(), plan->kinds.end(), kind) != plan->kinds.end()) {
      return Status::InvalidArgument(at + ".name: '" + o.name() + "' requested twice");
    }
    // The lse is FP32 whatever the query's type: a log, not a value.
    wire::WireType type = kind == Out::kLse ? wire::WireType::kFloat32 : query_type;
    for (const auto& [name, p] : o.parameters()) {
      if (name == "binary_data") continue;  // the HTTP front end's; raw here anyway
      if (name != "datatype") {
        return Status::InvalidArgument(at + ".parameters." + name +
                                       ": unknown parameter (known: datatype, binary_data)");
      }
      type = wire::FromOipDatatype(p.string_param());
      if (p.parameter_choice_case() != InferParameter::kStringParam ||
          type == wire::WireType::kBool || type == wire::WireType::kOther) {
        return Status::InvalidArgument(at +
                                       ".parameters.datatype: expected FP32, FP16 or BF16 "
                                       "as a string_param, got " +
                                       (p.parameter_choice_case() == InferParameter::kStringParam
                                            ? "'" + p.string_param() + "'"
                                            : std::string(ParameterKind(p))));
      }
    }
    plan->kinds.push_back(kind);
    plan->types.push_back(type);
    if (kind == Out::kWeights) c->return_weights = true;
    if (kind == Out::kLse) c->return_lse = true;
  }
  if (plan->kinds.empty()) {
    plan->kinds.push_back(Out::kOutput);
    plan->types.push_back(query_type);
    if (c->return_weights) plan->kinds.push_back(Out::kWeights), plan->types.push_back(query_type);
    if (c->return_lse) {
      plan->kinds.push_back(Out::kLse), plan->types.push_back(wire::WireType::kFloat32);
    }
  }
  return Status::Ok();
}

}  // namespace

Status CheckModel(const ModelRegistry& models, const std::string& name,
                  const std::string& version) {
  if (name.empty()) return Status::InvalidArgument("model_name: required");
  if (name != kSdpaModel && models.Find(name) == nullptr) {
    return Status::NotFound("model_name: no model named '" + name +
                            "' (available: " + ModelList(models) + ")");
  }
  if (!version.empty() && version != kVersion) {
    return Status::NotFound("model_version: model '" + name + "' has version " + kVersion +
                            " only, got '" + version + "'");
  }
  return Status::Ok();
}

void ServerMetadata(inference::ServerMetadataResponse* resp) {
  resp->set_name("attention-server");
  resp->set_version(ATTN_VERSION);
  resp->add_extensions("binary_tensor_data");
  resp->add_extensions("parameters");
}

Status ModelMetadata(const ModelRegistry& models, const inference::ModelMetadataRequest& req,
                     inference::ModelMetadataResponse* resp) {
  ATTN_RETURN_IF_ERROR(CheckModel(models, req.name(), req.version()));
  resp->set_name(req.name());
  resp->add_versions(kVersion);
  resp->set_platform(kPlatform);
  auto add = [](auto* list, const char* name, const char* dtype, std::vector<int64_t> shape) {
    auto* t = list->Add();
    t->set_name(name);
    t->set_datatype(dtype);
    t->mutable_shape()->Add(shape.begin(), shape.end());
  };
  const AttentionModel* m = models.Find(req.name());
  if (m == nullptr) {  // SDPA: [B, H, L, D], ranks 2 to 4
    for (const char* n : {"query", "key", "value"})
      add(resp->mutable_inputs(), n, "FP32", {-1, -1, -1, -1});
    add(resp->mutable_inputs(), "key_padding_mask", "BOOL", {-1, -1});
    add(resp->mutable_inputs(), "attn_bias", "FP32", {-1, -1, -1, -1});
    add(resp->mutable_inputs(), "alibi_slopes", "FP32", {-1});  // [H] or [B, H]
    add(resp->mutable_inputs(), "sink_logits", "FP32", {-1});
    // A packed batch: query [total_q, H, D], key/value [total_k, Hkv, *].
    add(resp->mutable_inputs(), "cu_seqlens_q", "INT64", {-1});
    add(resp->mutable_inputs(), "cu_seqlens_k", "INT64", {-1});
    add(resp->mutable_outputs(), "output", "FP32", {-1, -1, -1, -1});
    add(resp->mutable_outputs(), "weights", "FP32", {-1, -1, -1, -1});
    add(resp->mutable_outputs(), "lse", "FP32", {-1, -1, -1});
    return Status::Ok();
  }
  const ModelInfo& i = m->info();
  add(resp->mutable_inputs(), "query", "FP32", {-1, -1, i.embed_dim});
  add(resp->mutable_inputs(), "key", "FP32", {-1, -1, i.kdim});
  add(resp->mutable_inputs(), "value", "FP32", {-1, -1, i.vdim});
  add(resp->mutable_inputs(), "key_padding_mask", "BOOL", {-1, -1});
  add(resp->mutable_inputs(), "attn_bias", "FP32", {-1, -1, -1});
  add(resp->mutable_inputs(), "alibi_slopes", "FP32", {i.num_heads});
  add(resp->mutable_inputs(), "sink_logits", "FP32", {i.num_heads});
  add(resp->mutable_outputs(), "output", "FP32", {-1, -1, i.embed_dim});
  add(resp->mutable_outputs(), "weights", "FP32", {-1, -1, -1});
  add(resp->mutable_outputs(), "lse", "FP32", {-1, i.num_heads, -1});
  return Status::Ok();
}

Status PrepareInfer(const ModelInferRequest& req, const ModelRegistry& models,
                    const RequestLimits& limits, PreparedCall* call, ModelInferResponse* resp) {
  ATTN_RETURN_IF_ERROR(CheckModel(models, req.model_name(), req.model_version()));
  const bool has_weights = req.model_name() != kSdpaModel;
  CallRequest c;
  c.op = has_weights ? CallOp::kMultiHeadAttention : CallOp::kAttention;
  if (has_weights) c.model = req.model_name();
  ATTN_RETURN_IF_ERROR(ReadParameters(req, has_weights, &c));
  const bool raw = req.raw_input_contents_size() > 0;
  if (raw && req.raw_input_contents_size() != req.inputs_size()) {
    return Status::InvalidArgument(
        "raw_input_contents: " + std::to_string(req.raw_input_contents_size()) + " entries for " +
        std::to_string(req.inputs_size()) + " inputs; send one per input, in order");
  }
  // The raw entries' names, for the messages PrepareCall writes; reserved,
  // so that the tensors' pointers into it stay valid.
  std::vector<std::string> names;
  names.reserve(static_cast<size_t>(req.inputs_size()));
  std::optional<wire::WireTensor>* slots[] = {
      &c.query,     &c.key,          &c.value,      &c.key_padding_mask,
      &c.attn_bias, &c.alibi_slopes, &c.sink_logits};
  for (int i = 0; i < req.inputs_size(); ++i) {
    const std::string& name = req.inputs(i).name();
    if (name == "cu_seqlens_q" || name == "cu_seqlens_k") {
      ATTN_RETURN_IF_ERROR(
          ReadOffsets(req, i, name == "cu_seqlens_q" ? &c.cu_seqlens_q : &c.cu_seqlens_k));
      continue;
    }
    const auto* it = std::find_if(std::begin(kInputs), std::end(kInputs),
                                  [&](const char* n) { return name == n; });
    if (it == std::end(kInputs)) {
      return Status::InvalidArgument("inputs[" + std::to_string(i) + "].name: unknown input '" +
                                     name + "' (the inputs are " + kInputList + ")");
    }
    auto* slot = slots[it - std::begin(kInputs)];
    if (slot->has_value()) {
      return Status::InvalidArgument("inputs[" + std::to_string(i) + "].name: '" + name +
                                     "' given twice");
    }
    auto t = InputTensor(req, i, &names);
    if (!t.ok()) return t.status();
    *slot = std::move(*t);
  }
  const wire::WireType query_type = c.query ? c.query->type : wire::WireType::kFloat32;
  OutputPlan plan;
  ATTN_RETURN_IF_ERROR(ReadOutputs(req, query_type, &c, &plan));
  ATTN_RETURN_IF_ERROR(PrepareCall(c, models, limits, call));
  // Raw out when raw came in, or when an output is a half type (raw only).
  plan.raw = raw || std::any_of(plan.types.begin(), plan.types.end(),
                                [](wire::WireType t) { return t != wire::WireType::kFloat32; });
  resp->set_model_name(req.model_name());
  resp->set_model_version(kVersion);
  resp->set_id(req.id());
  // The arithmetic used, in the request parameter's words.
  (*resp->mutable_parameters())["compute_precision"].set_string_param(
      call->precision == UsedPrecision::kBFloat16 ? "bf16" : "fp32");
  for (size_t i = 0; i < plan.kinds.size(); ++i) {
    auto* o = resp->add_outputs();
    o->set_name(OutName(plan.kinds[i]));
    o->set_datatype(wire::OipDatatype(plan.types[i]));
    if (plan.raw) resp->add_raw_output_contents();
  }
  // FP32 raw output: core writes it straight into the response's bytes.
  const auto out_at = std::find(plan.kinds.begin(), plan.kinds.end(), Out::kOutput);
  const int out_index = static_cast<int>(out_at - plan.kinds.begin());
  const bool in_place =
      plan.raw && out_at != plan.kinds.end() && plan.types[out_index] == wire::WireType::kFloat32;
  if (in_place) {
    call->output = [resp, out_index](const Shape& shape) {
      std::string* bytes = resp->mutable_raw_output_contents(out_index);
      bytes->resize(static_cast<size_t>(NumElements(shape)) * sizeof(float));
      return reinterpret_cast<float*>(bytes->data());
    };
  }
  const RequestLimits* l = &limits;
  call->respond = [plan, in_place, resp, l](const AttentionResult& r) {
    auto tensor_of = [&r](Out k) -> const Tensor& {
      return k == Out::kWeights ? *r.weights : k == Out::kLse ? *r.lse : r.output;
    };
    double bytes = 0;
    for (size_t i = 0; i < plan.kinds.size(); ++i) {
      const Shape& s = tensor_of(plan.kinds[i]).shape;
      bytes += static_cast<double>(NumElements(s)) *
               static_cast<double>(plan.raw ? wire::WireTypeBytes(plan.types[i]) : 4);
    }
    ATTN_RETURN_IF_ERROR(CheckResponseBytes(bytes, *l));
    for (size_t i = 0; i < plan.kinds.size(); ++i) {
      const Tensor& t = tensor_of(plan.kinds[i]);
      auto* o = resp->mutable_outputs(static_cast<int>(i));
      o->mutable_shape()->Add(t.shape.begin(), t.shape.end());
      if (plan.kinds[i] == Out::kOutput && in_place) continue;  // already in place
      const int64_t n = NumElements(t.shape);
      if (plan.raw) {
        std::string* raw = resp->mutable_raw_output_contents(static_cast<int>(i));
        raw->resize(static_cast<size_t>(n * wire::WireTypeBytes(plan.types[i])));
        wire::NarrowInto(t.data.data(), n, plan.types[i], raw->data());
      } else {
        o->mutable_contents()->mutable_fp32_contents()->Add(t.data.begin(), t.data.end());
      }
    }
    return Status::Ok();
  };
  return Status::Ok();
}

}  // namespace attn::server::oip
