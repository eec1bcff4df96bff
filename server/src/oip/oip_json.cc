#include "oip/oip_json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "attn/half.h"
#include "attn/json.h"
#include "attn/tensor.h"
#include "oip/oip_adapter.h"
#include "wire/tensor_codec.h"

namespace attn::server::oip {
namespace {

using inference::InferParameter;

Status Bad(const std::string& where, const std::string& what) {
  return Status::InvalidArgument(where + ": " + what);
}

const char* TypeName(JsonValue::Type t) {
  switch (t) {
    case JsonValue::Type::kNull:
      return "null";
    case JsonValue::Type::kBool:
      return "a bool";
    case JsonValue::Type::kNumber:
      return "a number";
    case JsonValue::Type::kString:
      return "a string";
    case JsonValue::Type::kArray:
      return "an array";
    case JsonValue::Type::kObject:
      return "an object";
  }
  return "?";
}

Status Expect(const JsonValue& v, JsonValue::Type t, const std::string& where) {
  if (v.type == t) return Status::Ok();
  return Bad(where, std::string("expected ") + TypeName(t) + ", got " + TypeName(v.type));
}

// Refuses members other than `known` (a typo must not be ignored silently).
Status OnlyKnown(const JsonValue& obj, const std::string& where,
                 std::initializer_list<const char*> known) {
  for (const auto& [key, value] : obj.object) {
    bool ok = false;
    for (const char* k : known) ok = ok || key == k;
    if (!ok) {
      std::string list;
      for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      return Bad(where + "." + key, "unknown field (known: " + list + ")");
    }
  }
  return Status::Ok();
}

Status ToParameter(const JsonValue& v, const std::string& where, InferParameter* p) {
  switch (v.type) {
    case JsonValue::Type::kBool:
      p->set_bool_param(v.boolean);
      return Status::Ok();
    case JsonValue::Type::kString:
      p->set_string_param(v.string);
      return Status::Ok();
    case JsonValue::Type::kNumber:
      if (v.is_integer) {
        p->set_int64_param(v.integer);
      } else {
        p->set_double_param(v.number);
      }
      return Status::Ok();
    default:
      return Bad(where, std::string("expected a bool, number or string, got ") + TypeName(v.type));
  }
}

// Every number of `v` (a number array, flat or nested), in order.
Status Flatten(const JsonValue& v, const std::string& where, std::vector<double>* out, int depth) {
  if (v.type != JsonValue::Type::kArray) {
    return Bad(where, std::string("expected numbers or bools in (nested) arrays, got ") +
                          TypeName(v.type));
  }
  if (v.packed) {
    out->insert(out->end(), v.numbers.begin(), v.numbers.end());
    return Status::Ok();
  }
  if (depth > 8) return Bad(where, "nested deeper than 8");
  for (const JsonValue& item : v.array) ATTN_RETURN_IF_ERROR(Flatten(item, where, out, depth + 1));
  return Status::Ok();
}

// JSON numbers as the datatype's raw bytes.
std::string ToRaw(const std::vector<double>& values, wire::WireType type) {
  const size_t n = values.size();
  if (type == wire::WireType::kBool) {
    std::string raw(n, '\0');
    for (size_t i = 0; i < n; ++i) raw[i] = values[i] != 0 ? 1 : 0;
    return raw;
  }
  std::vector<float> f(values.begin(), values.end());
  std::string raw(n * static_cast<size_t>(wire::WireTypeBytes(type)), '\0');
  wire::NarrowInto(f.data(), static_cast<int64_t>(n), type, raw.data());
  return raw;
}

Status ParseInput(const JsonValue& in, const std::string& where, std::string_view* binary,
                  inference::ModelInferRequest* req) {
  ATTN_RETURN_IF_ERROR(Expect(in, JsonValue::Type::kObject, where));
  ATTN_RETURN_IF_ERROR(OnlyKnown(in, where, {"name", "shape", "datatype", "parameters", "data"}));
  auto* t = req->add_inputs();
  const JsonValue* name = in.Find("name");
  if (name == nullptr) return Bad(where + ".name", "required");
  ATTN_RETURN_IF_ERROR(Expect(*name, JsonValue::Type::kString, where + ".name"));
  t->set_name(name->string);
  const std::string at = where + " (" + name->string + ")";
  const JsonValue* datatype = in.Find("datatype");
  if (datatype == nullptr) return Bad(at + ".datatype", "required");
  ATTN_RETURN_IF_ERROR(Expect(*datatype, JsonValue::Type::kString, at + ".datatype"));
  t->set_datatype(datatype->string);
  const JsonValue* shape = in.Find("shape");
  if (shape == nullptr) return Bad(at + ".shape", "required");
  std::vector<double> dims;
  ATTN_RETURN_IF_ERROR(Flatten(*shape, at + ".shape", &dims, 8));
  for (double d : dims) {
    if (d != std::floor(d) || std::abs(d) > 9.2e18) {
      return Bad(at + ".shape", "expected integers");
    }
    t->add_shape(static_cast<int64_t>(d));
  }
  int64_t binary_size = -1;
  if (const JsonValue* params = in.Find("parameters")) {
    ATTN_RETURN_IF_ERROR(Expect(*params, JsonValue::Type::kObject, at + ".parameters"));
    ATTN_RETURN_IF_ERROR(OnlyKnown(*params, at + ".parameters", {"binary_data_size"}));
    const JsonValue* size = params->Find("binary_data_size");
    if (size != nullptr) {
      if (size->type != JsonValue::Type::kNumber || !size->is_integer || size->integer < 0) {
        return Bad(at + ".parameters.binary_data_size", "expected a non-negative integer");
      }
      binary_size = size->integer;
    }
  }
  const JsonValue* data = in.Find("data");
  const auto type = wire::FromOipDatatype(t->datatype());
  std::string* raw = req->add_raw_input_contents();
  if (binary_size >= 0) {
    if (data != nullptr) return Bad(at, "set data or parameters.binary_data_size, not both");
    if (static_cast<uint64_t>(binary_size) > binary->size()) {
      return Bad(at + ".parameters.binary_data_size",
                 std::to_string(binary_size) + " bytes, but only " +
                     std::to_string(binary->size()) + " bytes of binary data remain");
    }
    raw->assign(binary->data(), static_cast<size_t>(binary_size));
    binary->remove_prefix(static_cast<size_t>(binary_size));
    return Status::Ok();
  }
  if (data == nullptr) return Bad(at + ".data", "required (or parameters.binary_data_size)");
  std::vector<double> values;
  ATTN_RETURN_IF_ERROR(Flatten(*data, at + ".data", &values, 0));
  Shape s(t->shape().begin(), t->shape().end());
  auto numel = CheckedNumElements(s, at + ".shape");
  if (!numel.ok()) return numel.status();
  if (static_cast<int64_t>(values.size()) != *numel) {
    return Bad(at + ".data", "shape " + ShapeToString(s) + " needs " + std::to_string(*numel) +
                                 " values, got " + std::to_string(values.size()));
  }
  if (t->datatype() == "INT64") {  // offsets (cu_seqlens_q/k): little-endian int64
    std::vector<int64_t> ints(values.size());
    for (size_t e = 0; e < values.size(); ++e) {
      if (values[e] != std::floor(values[e]) || std::abs(values[e]) > 9.0e15) {
        return Bad(at + ".data", "INT64 values must be integers, got " + std::to_string(values[e]));
      }
      ints[e] = static_cast<int64_t>(values[e]);
    }
    *raw = wire::Int64ToRaw(ints);
    return Status::Ok();
  }
  if (type != wire::WireType::kOther) *raw = ToRaw(values, type);  // else refused by datatype
  return Status::Ok();
}

void AppendNumber(double v, std::string* out) {
  if (std::isnan(v)) {
    *out += "NaN";
  } else if (std::isinf(v)) {
    *out += v > 0 ? "Infinity" : "-Infinity";
  } else {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.9g", v);
    *out += buf;
  }
}

void AppendShape(const google::protobuf::RepeatedField<int64_t>& shape, std::string* out) {
  *out += "[";
  for (int i = 0; i < shape.size(); ++i) {
    if (i) *out += ",";
    *out += std::to_string(shape[i]);
  }
  *out += "]";
}

// Raw output bytes as JSON numbers.
void AppendData(const std::string& raw, const std::string& datatype, std::string* out) {
  const auto type = wire::FromOipDatatype(datatype);
  const int64_t n =
      static_cast<int64_t>(raw.size()) / std::max<int64_t>(1, wire::WireTypeBytes(type));
  std::vector<float> f(static_cast<size_t>(n));
  if (type == wire::WireType::kFloat16 || type == wire::WireType::kBFloat16) {
    std::vector<uint16_t> h(static_cast<size_t>(n));
    std::memcpy(h.data(), raw.data(), raw.size());
    HalfToFloat(type == wire::WireType::kFloat16 ? HalfType::kFloat16 : HalfType::kBFloat16,
                h.data(), f.data(), n);
  } else {
    std::memcpy(f.data(), raw.data(), static_cast<size_t>(n) * sizeof(float));
  }
  out->reserve(out->size() + static_cast<size_t>(n) * 12);
  *out += "[";
  for (int64_t i = 0; i < n; ++i) {
    if (i) *out += ",";
    AppendNumber(f[static_cast<size_t>(i)], out);
  }
  *out += "]";
}

void AppendTensorMetadata(
    const google::protobuf::RepeatedPtrField<inference::ModelMetadataResponse::TensorMetadata>& ts,
    std::string* out) {
  *out += "[";
  for (int i = 0; i < ts.size(); ++i) {
    if (i) *out += ",";
    *out += "{\"name\":" + JsonQuote(ts[i].name()) +
            ",\"datatype\":" + JsonQuote(ts[i].datatype()) + ",\"shape\":";
    AppendShape(ts[i].shape(), out);
    *out += "}";
  }
  *out += "]";
}

}  // namespace

Status ParseInferRequest(std::string_view body, int64_t json_length, const std::string& model,
                         const std::string& version, inference::ModelInferRequest* req,
                         HttpOutputs* outputs) {
  if (json_length > static_cast<int64_t>(body.size())) {
    return Bad("Inference-Header-Content-Length", std::to_string(json_length) +
                                                      " is past the body's end (" +
                                                      std::to_string(body.size()) + " bytes)");
  }
  std::string_view json =
      json_length >= 0 ? body.substr(0, static_cast<size_t>(json_length)) : body;
  std::string_view binary = json_length >= 0 ? body.substr(static_cast<size_t>(json_length)) : "";
  JsonOptions options;
  options.pack_numbers = true;
  auto doc = ParseJson(json, options);
  if (!doc.ok()) return Bad("body", doc.status().message());
  ATTN_RETURN_IF_ERROR(Expect(*doc, JsonValue::Type::kObject, "body"));
  ATTN_RETURN_IF_ERROR(OnlyKnown(*doc, "body", {"id", "parameters", "inputs", "outputs"}));
  req->set_model_name(model);
  req->set_model_version(version);
  if (const JsonValue* id = doc->Find("id")) {
    ATTN_RETURN_IF_ERROR(Expect(*id, JsonValue::Type::kString, "id"));
    req->set_id(id->string);
  }
  if (const JsonValue* params = doc->Find("parameters")) {
    ATTN_RETURN_IF_ERROR(Expect(*params, JsonValue::Type::kObject, "parameters"));
    for (const auto& [key, value] : params->object) {
      if (key == "binary_data_output") {  // HTTP's own: how the outputs travel
        ATTN_RETURN_IF_ERROR(Expect(value, JsonValue::Type::kBool, "parameters." + key));
        outputs->all_binary = value.boolean;
        continue;
      }
      ATTN_RETURN_IF_ERROR(
          ToParameter(value, "parameters." + key, &(*req->mutable_parameters())[key]));
    }
  }
  const JsonValue* inputs = doc->Find("inputs");
  if (inputs == nullptr) return Bad("inputs", "required");
  ATTN_RETURN_IF_ERROR(Expect(*inputs, JsonValue::Type::kArray, "inputs"));
  for (size_t i = 0; i < inputs->array.size(); ++i) {
    ATTN_RETURN_IF_ERROR(
        ParseInput(inputs->array[i], "inputs[" + std::to_string(i) + "]", &binary, req));
  }
  if (!binary.empty()) {
    return Bad("body", std::to_string(binary.size()) +
                           " bytes of binary data left over after the inputs' binary_data_size");
  }
  if (const JsonValue* outs = doc->Find("outputs")) {
    ATTN_RETURN_IF_ERROR(Expect(*outs, JsonValue::Type::kArray, "outputs"));
    for (size_t i = 0; i < outs->array.size(); ++i) {
      const std::string where = "outputs[" + std::to_string(i) + "]";
      const JsonValue& o = outs->array[i];
      ATTN_RETURN_IF_ERROR(Expect(o, JsonValue::Type::kObject, where));
      ATTN_RETURN_IF_ERROR(OnlyKnown(o, where, {"name", "parameters"}));
      const JsonValue* name = o.Find("name");
      if (name == nullptr) return Bad(where + ".name", "required");
      ATTN_RETURN_IF_ERROR(Expect(*name, JsonValue::Type::kString, where + ".name"));
      auto* r = req->add_outputs();
      r->set_name(name->string);
      if (const JsonValue* params = o.Find("parameters")) {
        ATTN_RETURN_IF_ERROR(Expect(*params, JsonValue::Type::kObject, where + ".parameters"));
        for (const auto& [key, value] : params->object) {
          const std::string at = where + ".parameters." + key;
          if (key == "binary_data") {
            ATTN_RETURN_IF_ERROR(Expect(value, JsonValue::Type::kBool, at));
            if (value.boolean) outputs->binary.push_back(name->string);
            continue;
          }
          ATTN_RETURN_IF_ERROR(ToParameter(value, at, &(*r->mutable_parameters())[key]));
        }
      }
    }
  }
  return Status::Ok();
}

std::string InferResponseBody(const inference::ModelInferResponse& resp, const HttpOutputs& outputs,
                              int64_t* json_length) {
  std::string json = "{\"model_name\":" + JsonQuote(resp.model_name()) +
                     ",\"model_version\":" + JsonQuote(resp.model_version());
  if (!resp.id().empty()) json += ",\"id\":" + JsonQuote(resp.id());
  // String parameters only (compute_precision is the one the server sets).
  std::string params;
  for (const auto& [name, p] : resp.parameters()) {
    if (p.parameter_choice_case() != inference::InferParameter::kStringParam) continue;
    params += (params.empty() ? "" : ",") + JsonQuote(name) + ":" + JsonQuote(p.string_param());
  }
  if (!params.empty()) json += ",\"parameters\":{" + params + "}";
  json += ",\"outputs\":[";
  std::string binary;
  for (int i = 0; i < resp.outputs_size(); ++i) {
    const auto& o = resp.outputs(i);
    const std::string& raw = resp.raw_output_contents(i);
    if (i) json += ",";
    json += "{\"name\":" + JsonQuote(o.name()) + ",\"datatype\":" + JsonQuote(o.datatype()) +
            ",\"shape\":";
    AppendShape(o.shape(), &json);
    const bool as_binary =
        outputs.all_binary ||
        std::find(outputs.binary.begin(), outputs.binary.end(), o.name()) != outputs.binary.end();
    if (as_binary) {
      json += ",\"parameters\":{\"binary_data_size\":" + std::to_string(raw.size()) + "}}";
      binary += raw;
    } else {
      json += ",\"data\":";
      AppendData(raw, o.datatype(), &json);
      json += "}";
    }
  }
  json += "]}";
  *json_length = binary.empty() && !outputs.all_binary && outputs.binary.empty()
                     ? -1
                     : static_cast<int64_t>(json.size());
  return json + binary;
}

std::string ServerMetadataJson(const inference::ServerMetadataResponse& m) {
  std::string s = "{\"name\":" + JsonQuote(m.name()) + ",\"version\":" + JsonQuote(m.version()) +
                  ",\"extensions\":[";
  for (int i = 0; i < m.extensions_size(); ++i) {
    s += (i ? "," : "") + JsonQuote(m.extensions(i));
  }
  return s + "]}";
}

std::string ModelMetadataJson(const inference::ModelMetadataResponse& m) {
  std::string s = "{\"name\":" + JsonQuote(m.name()) + ",\"versions\":[";
  for (int i = 0; i < m.versions_size(); ++i) s += (i ? "," : "") + JsonQuote(m.versions(i));
  s += "],\"platform\":" + JsonQuote(m.platform()) + ",\"inputs\":";
  AppendTensorMetadata(m.inputs(), &s);
  s += ",\"outputs\":";
  AppendTensorMetadata(m.outputs(), &s);
  return s + "}";
}

std::string ErrorJson(const std::string& message) {
  return "{\"error\":" + JsonQuote(message) + "}";
}

}  // namespace attn::server::oip
