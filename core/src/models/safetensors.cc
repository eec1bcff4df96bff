// The safetensors format: an 8-byte little-endian header length N, N bytes of
// JSON ({"__metadata__": {str: str}, name: {"dtype", "shape", "data_offsets"}}),
// then the data buffer, which the offsets index relative to its start.
#include "attn/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "attn/json.h"

namespace attn {
namespace {

// The safetensors reference implementation refuses larger headers too.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

Status Bad(const std::string& source, const std::string& what) {
  return Status::InvalidArgument(source + ": " + what);
}

}  // namespace

StatusOr<SafetensorsFile> ParseSafetensors(std::string_view bytes, const std::string& source) {
  if (bytes.size() < 8) {
    return Bad(source, "truncated: " + std::to_string(bytes.size()) +
                           " bytes, the 8-byte header length is missing");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(bytes[i]);
  if (header_len > kMaxHeaderBytes) {
    return Bad(source, "header length " + std::to_string(header_len) + " exceeds the limit of " +
                           std::to_string(kMaxHeaderBytes) + " bytes");
  }
  if (header_len > bytes.size() - 8) {
    return Bad(source, "truncated: header length " + std::to_string(header_len) + " exceeds the " +
                           std::to_string(bytes.size() - 8) + " bytes after the length");
  }
  auto header = ParseJson(bytes.substr(8, header_len));
  if (!header.ok()) return Bad(source, "malformed header: " + header.status().message());
  if (header->type != JsonValue::Type::kObject) {
    return Bad(source, "malformed header: not a JSON object");
  }
  const std::string_view data = bytes.substr(8 + header_len);

  SafetensorsFile file;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, entry] : header->object) {
    if (name == "__metadata__") {
      if (entry.type != JsonValue::Type::kObject) {
        return Bad(source, "__metadata__ must be an object of strings");
      }
      for (const auto& [key, value] : entry.object) {
        if (value.type != JsonValue::Type::kString) {
          return Bad(source, "__metadata__ '" + key + "' must be a string");
        }
        file.metadata[key] = value.string;
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (entry.type != JsonValue::Type::kObject) {
      return Bad(source, where + ": entry must be an object");
    }
    if (file.tensors.count(name)) return Bad(source, where + ": appears twice");
    const auto* dtype = entry.Find("dtype");
    const auto* shape = entry.Find("shape");
    const auto* offsets = entry.Find("data_offsets");
    if (!dtype || dtype->type != JsonValue::Type::kString) {
      return Bad(source, where + ": missing dtype");
    }
    if (dtype->string != "F32") {
      return Bad(source, where + ": dtype must be F32, got " + dtype->string);
    }
    if (!shape || shape->type != JsonValue::Type::kArray) {
      return Bad(source, where + ": missing shape");
    }
    Shape dims;
    for (const auto& d : shape->array) {
      if (d.type != JsonValue::Type::kNumber || !d.is_integer || d.integer < 0) {
        return Bad(source, where + ": shape must hold non-negative integers");
      }
      dims.push_back(d.integer);
    }
    auto numel = CheckedNumElements(dims, where);
    if (!numel.ok() || *numel > std::numeric_limits<int64_t>::max() / 4) {
      return Bad(source, where + ": shape " + ShapeToString(dims) + " is too large");
    }
    if (!offsets || offsets->type != JsonValue::Type::kArray || offsets->array.size() != 2) {
      return Bad(source, where + ": data_offsets must be [begin, end]");
    }
    for (const auto& o : offsets->array) {
      if (o.type != JsonValue::Type::kNumber || !o.is_integer || o.integer < 0) {
        return Bad(source, where + ": data_offsets must be non-negative integers");
      }
    }
    const auto begin = static_cast<uint64_t>(offsets->array[0].integer);
    const auto end = static_cast<uint64_t>(offsets->array[1].integer);
    if (begin > end || end > data.size()) {
      return Bad(source, where + ": data_offsets [" + std::to_string(begin) + ", " +
                             std::to_string(end) + "] outside the " + std::to_string(data.size()) +
                             "-byte data buffer (truncated file?)");
    }
    const auto want = static_cast<uint64_t>(*numel) * 4;
    if (end - begin != want) {
      return Bad(source, where + ": " + std::to_string(end - begin) + " bytes for shape " +
                             ShapeToString(dims) + ", expected " + std::to_string(want));
    }
    Tensor t(dims);
    if (want > 0) std::memcpy(t.data.data(), data.data() + begin, want);
    file.tensors.emplace(name, std::move(t));
    if (begin != end) ranges.emplace_back(begin, end);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) {
      return Bad(source, "tensor data ranges overlap");
    }
  }
  return file;
}

StatusOr<SafetensorsFile> ReadSafetensorsFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open file");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return Status::InvalidArgument(path + ": read error");
  const std::string bytes = buf.str();
  return ParseSafetensors(bytes, path);
}

std::string SerializeSafetensors(const SafetensorsFile& file) {
  std::string header = "{";
  bool first = true;
  if (!file.metadata.empty()) {
    header += "\"__metadata__\":{";
    for (const auto& [k, v] : file.metadata) {
      if (!first) header += ",";
      first = false;
      header += JsonQuote(k);
      header += ":";
      header += JsonQuote(v);
    }
    header += "}";
    first = false;
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : file.tensors) {
    if (!first) header += ",";
    first = false;
    header += JsonQuote(name);
    header += R"(:{"dtype":"F32","shape":[)";
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (i) header += ",";
      header += std::to_string(t.shape[i]);
    }
    const uint64_t bytes = t.data.size() * sizeof(float);
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';  // keeps the data 8-byte aligned
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  out += header;
  for (const auto& [name, t] : file.tensors) {
    out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(float));
  }
  return out;
}

}  // namespace attn
