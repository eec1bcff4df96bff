#include "host_array.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "attn/half.h"
#include "attn/json.h"

namespace attn::client {
namespace {

Status FlattenJson(const JsonValue& v, size_t depth, const std::string& pos, Shape* shape,
                   HostArray* out, const std::string& what) {
  if (v.type == JsonValue::Type::kArray) {
    if (depth == shape->size()) {
      if (!out->values.empty() || depth > 8) {
        return Status::InvalidArgument(what + ": ragged array at " + pos);
      }
      shape->push_back(static_cast<int64_t>(v.array.size()));
    } else if ((*shape)[depth] != static_cast<int64_t>(v.array.size())) {
      return Status::InvalidArgument(what + ": ragged array at " + pos + " (" +
                                     std::to_string(v.array.size()) + " items, expected " +
                                     std::to_string((*shape)[depth]) + ")");
    }
    for (size_t i = 0; i < v.array.size(); ++i) {
      ATTN_RETURN_IF_ERROR(FlattenJson(v.array[i], depth + 1, pos + "[" + std::to_string(i) + "]",
                                       shape, out, what));
    }
    return Status::Ok();
  }
  if (depth != shape->size()) return Status::InvalidArgument(what + ": ragged array at " + pos);
  if (v.type == JsonValue::Type::kNumber) {
    out->values.push_back(static_cast<float>(v.number));
  } else if (v.type == JsonValue::Type::kBool) {
    out->values.push_back(v.boolean ? 1.0f : 0.0f);
    out->is_bool = true;
  } else {
    return Status::InvalidArgument(what + ": expected a number at " + pos);
  }
  return Status::Ok();
}

void FormatRec(const HostArray& a, size_t dim, int64_t offset, int precision, std::string* s) {
  if (dim == a.shape.size()) {
    char buf[48];
    if (a.is_bool) {
      std::snprintf(buf, sizeof(buf), "%s", a.values[offset] != 0 ? "true" : "false");
    } else {
      std::snprintf(buf, sizeof(buf), "%.*f", precision, a.values[offset]);
    }
    *s += buf;
    return;
  }
  int64_t stride = 1;
  for (size_t i = dim + 1; i < a.shape.size(); ++i) stride *= a.shape[i];
  *s += '[';
  for (int64_t i = 0; i < a.shape[dim]; ++i) {
    if (i) *s += dim + 1 == a.shape.size() ? ", " : ",\n" + std::string(dim + 1, ' ');
    FormatRec(a, dim + 1, offset + i * stride, precision, s);
  }
  *s += ']';
}

}  // namespace

int64_t HostArray::numel() const { return static_cast<int64_t>(values.size()); }

HostArray RandomArray(Shape shape, std::mt19937& rng, float stddev) {
  HostArray a;
  a.shape = std::move(shape);
  std::normal_distribution<float> dist(0.0f, stddev);
  a.values.resize(static_cast<size_t>(NumElements(a.shape)));
  for (auto& v : a.values) v = dist(rng);
  return a;
}

void RoundToWireType(HostArray* a, wire::WireType type) {
  if (a->is_bool || type == wire::WireType::kFloat32) return;
  std::vector<char> half(a->values.size() * 2);
  const auto n = static_cast<int64_t>(a->values.size());
  wire::NarrowInto(a->values.data(), n, type, half.data());
  HalfToFloat(type == wire::WireType::kFloat16 ? HalfType::kFloat16 : HalfType::kBFloat16,
              reinterpret_cast<const uint16_t*>(half.data()), a->values.data(), n);
}

attention::v1::Tensor ToWire(const HostArray& a, Encoding encoding, wire::WireType float_type) {
  attention::v1::Tensor t;
  wire::EncodeDense(a.shape, a.values.data(), a.values.size(),
                    a.is_bool ? wire::WireType::kBool : float_type, encoding, &t);
  return t;
}

StatusOr<HostArray> FromWire(const attention::v1::Tensor& t, const std::string& what) {
  const bool is_bool = t.dtype() == attention::v1::DATA_TYPE_BOOL;
  wire::DecodedTensor d;
  ATTN_RETURN_IF_ERROR(wire::DecodeTensor(t, what, is_bool ? DataType::kBool : DataType::kFloat32,
                                          std::numeric_limits<int64_t>::max(), &d));
  HostArray a;
  a.shape = d.view.shape;
  a.is_bool = is_bool;
  const size_t n = static_cast<size_t>(NumElements(a.shape));
  a.values.resize(n);
  for (size_t i = 0; i < n; ++i) {
    a.values[i] = is_bool ? (d.view.u8()[i] != 0 ? 1.0f : 0.0f) : d.view.f32()[i];
  }
  return a;
}

StatusOr<HostArray> ParseJsonArray(const std::string& text, const std::string& what) {
  auto json = ParseJson(text);
  if (!json.ok()) return Status::InvalidArgument(what + ": " + json.status().message());
  return FromJsonArray(*json, what);
}

StatusOr<HostArray> FromJsonArray(const JsonValue& json, const std::string& what) {
  if (json.type != JsonValue::Type::kArray) {
    return Status::InvalidArgument(what + ": expected a JSON array like [[1, 0], [0, 1]]");
  }
  HostArray a;
  ATTN_RETURN_IF_ERROR(FlattenJson(json, 0, "top level", &a.shape, &a, what));
  return a;
}

StatusOr<HostArray> ReadNpy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open");
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string bytes = buf.str();
  auto bad = [&](const std::string& why) { return Status::InvalidArgument(path + ": " + why); };
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) return bad("not a .npy file");
  const int major = static_cast<uint8_t>(bytes[6]);
  size_t header_len = 0, pos = 0;
  if (major == 1) {
    header_len = static_cast<uint8_t>(bytes[8]) | (static_cast<uint8_t>(bytes[9]) << 8);
    pos = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return bad("truncated header");
    for (int i = 3; i >= 0; --i)
      header_len = (header_len << 8) | static_cast<uint8_t>(bytes[8 + i]);
    pos = 12;
  } else {
    return bad("unsupported .npy version " + std::to_string(major));
  }
  if (pos + header_len > bytes.size()) return bad("truncated header");
  const std::string header = bytes.substr(pos, header_len);
  pos += header_len;
  auto field = [&](const std::string& key) -> std::string {
    const auto k = header.find("'" + key + "'");
    if (k == std::string::npos) return "";
    auto start = header.find(':', k) + 1;
    while (start < header.size() && header[start] == ' ') ++start;
    if (header[start] == '(') return header.substr(start, header.find(')', start) - start + 1);
    if (header[start] == '\'')
      return header.substr(start + 1, header.find('\'', start + 1) - start - 1);
    return header.substr(start, header.find_first_of(",}", start) - start);
  };
  const std::string descr = field("descr"), order = field("fortran_order"),
                    shape_s = field("shape");
  if (order != "False") return bad("only C-order arrays are supported");
  HostArray a;
  for (size_t i = 1; i + 1 < shape_s.size();) {
    const auto comma = shape_s.find(',', i);
    const std::string num =
        shape_s.substr(i, (comma == std::string::npos ? shape_s.size() - 1 : comma) - i);
    if (num.find_first_not_of(' ') != std::string::npos) {
      char* end = nullptr;
      const long long dim = std::strtoll(num.c_str(), &end, 10);
      if (end == num.c_str() ||
          num.find_first_not_of(' ', end - num.c_str()) != std::string::npos) {
        return bad("malformed .npy header");
      }
      a.shape.push_back(dim);
    }
    if (comma == std::string::npos) break;
    i = comma + 1;
  }
  auto n = CheckedNumElements(a.shape, path);
  if (!n.ok()) return n.status();
  const size_t elem = descr == "<f4" ? 4 : descr == "<f8" ? 8 : descr == "|b1" ? 1 : 0;
  if (elem == 0) return bad("dtype " + descr + " not supported (use float32, float64 or bool)");
  if (bytes.size() - pos != static_cast<size_t>(*n) * elem) {
    return bad("data has " + std::to_string(bytes.size() - pos) + " bytes for shape " +
               ShapeToString(a.shape) + " of " + descr);
  }
  a.values.resize(static_cast<size_t>(*n));
  const char* p = bytes.data() + pos;
  for (int64_t i = 0; i < *n; ++i) {
    if (elem == 4) {
      std::memcpy(&a.values[i], p + 4 * i, 4);
    } else if (elem == 8) {
      double d;
      std::memcpy(&d, p + 8 * i, 8);
      a.values[i] = static_cast<float>(d);
    } else {
      a.values[i] = p[i] != 0 ? 1.0f : 0.0f;
    }
  }
  a.is_bool = elem == 1;
  return a;
}

Status WriteNpy(const std::string& path, const HostArray& a) {
  std::string shape = "(";
  for (size_t i = 0; i < a.shape.size(); ++i) shape += std::to_string(a.shape[i]) + ", ";
  if (a.shape.size() > 1) shape.resize(shape.size() - 2);
  shape += ")";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out) return Status::NotFound(path + ": cannot write");
  out.write("\x93NUMPY\x01\x00", 8);
  const char len[2] = {static_cast<char>(header.size() & 0xFF),
                       static_cast<char>(header.size() >> 8)};
  out.write(len, 2);
  out << header;
  out.write(reinterpret_cast<const char*>(a.values.data()),
            static_cast<std::streamsize>(a.values.size() * sizeof(float)));
  return out ? Status::Ok() : Status::Internal(path + ": write failed");
}

StatusOr<HostArray> LoadArrayArg(const std::string& arg, const std::string& what) {
  if (arg.size() > 4 && arg.compare(arg.size() - 4, 4, ".npy") == 0) return ReadNpy(arg);
  return ParseJsonArray(arg, what);
}

std::string FormatArray(const HostArray& a, int precision) {
  if (a.shape.empty()) {
    return a.values.empty() ? "[]" : std::to_string(a.values[0]);
  }
  std::string s;
  FormatRec(a, 0, 0, precision, &s);
  return s;
}

}  // namespace attn::client
