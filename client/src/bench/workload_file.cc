#include "bench/workload_file.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "request_builder.h"

namespace attn::client {
namespace {

// A YAML node as the JSON value it reads as: maps, sequences, and scalars
// that are numbers, booleans or strings.
JsonValue FromYaml(const YAML::Node& n) {
  JsonValue v;
  if (n.IsMap()) {
    v.type = JsonValue::Type::kObject;
    for (const auto& kv : n) v.object.emplace_back(kv.first.as<std::string>(), FromYaml(kv.second));
  } else if (n.IsSequence()) {
    v.type = JsonValue::Type::kArray;
    for (const auto& item : n) v.array.push_back(FromYaml(item));
  } else if (n.IsScalar()) {
    const std::string s = n.Scalar();
    char* end = nullptr;
    const double x = std::strtod(s.c_str(), &end);
    if (n.Tag() != "!" && !s.empty() && *end == '\0') {
      v.type = JsonValue::Type::kNumber, v.number = x;
      v.is_integer = x == std::floor(x) && std::abs(x) < 9e15;
      v.integer = static_cast<int64_t>(x);
    } else if (n.Tag() != "!" && (s == "true" || s == "false")) {
      v.type = JsonValue::Type::kBool, v.boolean = s == "true";
    } else {
      v.type = JsonValue::Type::kString, v.string = s;
    }
  }
  return v;
}

using Setter = std::function<Status(const JsonValue&, BenchConfig*)>;

Status Expect(bool ok, const std::string& what) {
  return ok ? Status::Ok() : Status::InvalidArgument("expected " + what);
}

Setter Int(int64_t lo, int64_t hi, int64_t BenchConfig::*field) {
  return [=](const JsonValue& v, BenchConfig* c) {
    ATTN_RETURN_IF_ERROR(Expect(
        v.type == JsonValue::Type::kNumber && v.is_integer && v.integer >= lo && v.integer <= hi,
        "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]"));
    c->*field = v.integer;
    return Status::Ok();
  };
}

Setter Text(const std::vector<std::string>& choices,
            const std::function<void(const std::string&, BenchConfig*)>& set) {
  return [=](const JsonValue& v, BenchConfig* c) {
    bool ok = v.type == JsonValue::Type::kString;
    std::string list;
    for (const auto& x : choices) list += (list.empty() ? "" : "|") + x;
    if (ok && !choices.empty())
      ok = std::find(choices.begin(), choices.end(), v.string) != choices.end();
    ATTN_RETURN_IF_ERROR(Expect(ok, choices.empty() ? "a string" : list));
    set(v.string, c);
    return Status::Ok();
  };
}

const std::map<std::string, Setter>& Keys() {
  constexpr int64_t kMax = int64_t{1} << 24;
  static const auto* keys = new std::map<std::string, Setter>{
      {"op", Text({"attention", "cross", "mha", "health"},
                  [](const std::string& s, BenchConfig* c) { c->op = s; })},
      {"model", Text({}, [](const std::string& s, BenchConfig* c) { c->model = s; })},
      {"data", Text({}, [](const std::string& s, BenchConfig* c) { c->data_path = s; })},
      {"batch", Int(1, kMax, &BenchConfig::batch)},
      {"seq_q", Int(1, kMax, &BenchConfig::seq_q)},
      {"seq_k", Int(1, kMax, &BenchConfig::seq_k)},
      {"dim", Int(1, kMax, &BenchConfig::dim)},
      {"num_heads", Int(1, kMax, &BenchConfig::heads)},
      {"padded_keys", Int(0, kMax, &BenchConfig::padded_keys)},
      {"causal",
       [](const JsonValue& v, BenchConfig* c) {
         ATTN_RETURN_IF_ERROR(Expect(v.type == JsonValue::Type::kBool, "true or false"));
         c->causal = v.boolean;
         return Status::Ok();
       }},
      {"encoding", Text({"raw", "values"},
                        [](const std::string& s, BenchConfig* c) {
                          c->encoding = s == "values" ? Encoding::kValues : Encoding::kData;
                        })},
      {"dtype",
       Text(kDtypeNames, [](const std::string& s, BenchConfig* c) { c->dtype = DtypeByName(s); })},
      {"protocol",
       Text({"native", "oip"}, [](const std::string& s, BenchConfig* c) { c->oip = s == "oip"; })},
  };
  return *keys;
}

StatusOr<MixEntry> ReadEntry(const JsonValue& e, const BenchConfig& base, const std::string& at) {
  if (e.type != JsonValue::Type::kObject) {
    return Status::InvalidArgument(at + ": expected an object of keys (op, model, weight, ...)");
  }
  auto call = std::make_shared<BenchConfig>(base);
  call->mix.clear();
  call->seq_k = 0;  // = seq_q unless given
  MixEntry entry;
  for (const auto& [key, v] : e.object) {
    const std::string where = at + "." + key;
    if (key == "name") {
      if (v.type != JsonValue::Type::kString || v.string.empty()) {
        return Status::InvalidArgument(where + ": expected a non-empty string");
      }
      entry.name = v.string;
    } else if (key == "weight") {
      if (v.type != JsonValue::Type::kNumber || !(v.number > 0) || !std::isfinite(v.number)) {
        return Status::InvalidArgument(where + ": expected a positive number");
      }
      entry.weight = v.number;
    } else if (auto it = Keys().find(key); it != Keys().end()) {
      Status st = it->second(v, call.get());
      if (!st.ok()) return Status::InvalidArgument(where + ": " + st.message());
    } else {
      return Status::InvalidArgument(where + ": unknown key (name, weight, op, model, batch, " +
                                     "seq_q, seq_k, dim, num_heads, causal, padded_keys, " +
                                     "encoding, dtype, protocol, data)");
    }
  }
  if (call->seq_k == 0) call->seq_k = call->seq_q;
  if (entry.name.empty()) entry.name = call->op + (call->model.empty() ? "" : " " + call->model);
  entry.call = std::move(call);
  return entry;
}

}  // namespace

StatusOr<std::vector<MixEntry>> WorkloadFromJson(const JsonValue& doc, const BenchConfig& base,
                                                 const std::string& where) {
  const JsonValue* list = &doc;
  if (doc.type == JsonValue::Type::kObject && doc.Find("workload") != nullptr) {
    list = doc.Find("workload");
  }
  if (list->type != JsonValue::Type::kArray || list->array.empty()) {
    return Status::InvalidArgument(where + ": expected a non-empty list of entries");
  }
  std::vector<MixEntry> mix;
  for (size_t i = 0; i < list->array.size(); ++i) {
    auto e = ReadEntry(list->array[i], base, where + ": entry " + std::to_string(i));
    if (!e.ok()) return e.status();
    for (const auto& other : mix) {
      if (other.name == e->name) {
        return Status::InvalidArgument(where + ": entry " + std::to_string(i) + ": the name '" +
                                       e->name + "' is taken; give each entry its own name");
      }
    }
    mix.push_back(std::move(*e));
  }
  return mix;
}

StatusOr<std::vector<MixEntry>> ReadWorkloadFile(const std::string& path, const BenchConfig& base) {
  const std::string where = "--workload " + path;
  std::ifstream in(path);
  if (!in) return Status::InvalidArgument(where + ": cannot read the file");
  std::stringstream text;
  text << in.rdbuf();
  const bool yaml = path.size() > 4 && (path.substr(path.size() - 5) == ".yaml" ||
                                        path.substr(path.size() - 4) == ".yml");
  if (!yaml) {
    auto doc = ParseJson(text.str());
    if (!doc.ok()) return Status::InvalidArgument(where + ": " + doc.status().message());
    return WorkloadFromJson(*doc, base, where);
  }
  try {
    return WorkloadFromJson(FromYaml(YAML::Load(text.str())), base, where);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(where + ": not valid YAML: " + e.what());
  }
}

}  // namespace attn::client
