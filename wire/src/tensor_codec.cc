#include "wire/tensor_codec.h"

#include <cstring>

#include "attn/half.h"
#include "wire/tensor_data.h"

namespace attn::wire {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the wire format is little-endian; this build assumes a little-endian host");

constexpr int kMaxRank = 8;

bool IsHalf(WireType type) { return type == WireType::kFloat16 || type == WireType::kBFloat16; }

HalfType AsHalf(WireType type) {
  return type == WireType::kFloat16 ? HalfType::kFloat16 : HalfType::kBFloat16;
}

// The raw bytes of `t` as `view`'s data, widened or converted when needed.
Status ViewRaw(const WireTensor& t, const std::string& field, int64_t numel, DecodedTensor* out) {
  const int64_t elem = WireTypeBytes(t.type);
  const auto want = static_cast<uint64_t>(numel) * static_cast<uint64_t>(elem);
  if (t.raw.size() != want) {
    return Status::InvalidArgument(
        field + ": " + t.raw_name + " has " + std::to_string(t.raw.size()) + " bytes, expected " +
        std::to_string(want) + " (shape " + ShapeToString(out->view.shape) + " x " +
        std::to_string(elem) + " bytes " + t.type_name + ")");
  }
  out->encoding = Encoding::kData;
  const bool aligned =
      reinterpret_cast<uintptr_t>(t.raw.data()) % static_cast<uintptr_t>(elem) == 0;
  if (IsHalf(t.type)) {
    const auto* src = reinterpret_cast<const uint16_t*>(t.raw.data());
    if (!aligned) {  // e.g. inside an HTTP body
      out->half_storage.resize(static_cast<size_t>(numel));
      std::memcpy(out->half_storage.data(), t.raw.data(), t.raw.size());
      src = out->half_storage.data();
    }
    if (out->view.dtype == DataType::kBFloat16) {  // kept as bf16: viewed in place
      out->view.data = src;
      return Status::Ok();
    }
    out->float_storage.resize(static_cast<size_t>(numel));
    HalfToFloat(AsHalf(t.type), src, out->float_storage.data(), numel);
    out->view.data = out->float_storage.data();
    std::vector<uint16_t>().swap(out->half_storage);  // widened: at most 4 bytes per element
  } else if (!aligned) {
    out->float_storage.resize(static_cast<size_t>(numel));
    std::memcpy(out->float_storage.data(), t.raw.data(), t.raw.size());
    out->view.data = out->float_storage.data();
  } else {
    out->view.data = t.raw.data();
  }
  return Status::Ok();
}

}  // namespace

int64_t WireTypeBytes(WireType type) {
  switch (type) {
    case WireType::kFloat32:
      return 4;
    case WireType::kFloat16:
    case WireType::kBFloat16:
      return 2;
    case WireType::kBool:
      return 1;
    case WireType::kOther:
      break;
  }
  return 0;
}

std::string WireDataTypeName(int dtype) {
  if (attention::v1::DataType_IsValid(dtype)) {
    return attention::v1::DataType_Name(static_cast<attention::v1::DataType>(dtype));
  }
  return "unknown data type " + std::to_string(dtype);
}

int NativeDataType(WireType type) {
  switch (type) {
    case WireType::kFloat32:
      return attention::v1::DATA_TYPE_FLOAT32;
    case WireType::kFloat16:
      return attention::v1::DATA_TYPE_FLOAT16;
    case WireType::kBFloat16:
      return attention::v1::DATA_TYPE_BFLOAT16;
    case WireType::kBool:
      return attention::v1::DATA_TYPE_BOOL;
    case WireType::kOther:
      break;
  }
  return attention::v1::DATA_TYPE_UNSPECIFIED;
}

WireType FromNativeDataType(int dtype) {
  switch (dtype) {
    case attention::v1::DATA_TYPE_UNSPECIFIED:
    case attention::v1::DATA_TYPE_FLOAT32:
      return WireType::kFloat32;
    case attention::v1::DATA_TYPE_FLOAT16:
      return WireType::kFloat16;
    case attention::v1::DATA_TYPE_BFLOAT16:
      return WireType::kBFloat16;
    case attention::v1::DATA_TYPE_BOOL:
      return WireType::kBool;
    default:
      return WireType::kOther;
  }
}

const char* OipDatatype(WireType type) {
  switch (type) {
    case WireType::kFloat32:
      return "FP32";
    case WireType::kFloat16:
      return "FP16";
    case WireType::kBFloat16:
      return "BF16";
    case WireType::kBool:
      return "BOOL";
    case WireType::kOther:
      break;
  }
  return "";
}

WireType FromOipDatatype(const std::string& datatype) {
  for (WireType t :
       {WireType::kFloat32, WireType::kFloat16, WireType::kBFloat16, WireType::kBool}) {
    if (datatype == OipDatatype(t)) return t;
  }
  return WireType::kOther;
}

WireTensor FromNative(const attention::v1::Tensor& t, const TensorData* data) {
  WireTensor w;
  w.type = FromNativeDataType(t.dtype());
  w.type_name = WireDataTypeName(t.dtype());
  w.shape.assign(t.shape().begin(), t.shape().end());
  const std::string_view* recorded = data != nullptr ? data->Find(&t) : nullptr;
  w.raw = recorded != nullptr ? *recorded : std::string_view(t.data());
  w.has_raw = !w.raw.empty();
  w.floats = t.values().data();
  w.typed_count = t.values_size();
  return w;
}

Status DecodeTensor(const attention::v1::Tensor& t, const std::string& field, DataType expected,
                    int64_t max_elements, DecodedTensor* out) {
  if (t.shape_size() > kMaxRank) {  // before FromNative copies the dims
    return Status::InvalidArgument(field + ": rank must be at most " + std::to_string(kMaxRank) +
                                   ", got " + std::to_string(t.shape_size()));
  }
  return DecodeTensor(FromNative(t), field, expected, max_elements, out);
}

Status DecodeTensor(const WireTensor& t, const std::string& field, DataType expected,
                    int64_t max_elements, DecodedTensor* out) {
  const bool want_bool = expected == DataType::kBool;
  const bool type_ok = want_bool ? t.type == WireType::kBool
                       : expected == DataType::kBFloat16
                           ? t.type == WireType::kBFloat16
                           : (t.type == WireType::kFloat32 || IsHalf(t.type));
  if (!type_ok) {
    return Status::InvalidArgument(field + ": " + t.type_field + " must be " +
                                   (want_bool                         ? t.bool_type
                                    : expected == DataType::kBFloat16 ? "BFLOAT16"
                                                                      : t.float_types) +
                                   ", got " + t.type_name);
  }
  if (static_cast<int>(t.shape.size()) > kMaxRank) {
    return Status::InvalidArgument(field + ": rank must be at most " + std::to_string(kMaxRank) +
                                   ", got " + std::to_string(t.shape.size()));
  }
  auto numel = CheckedNumElements(t.shape, field);
  if (!numel.ok()) return numel.status();
  if (*numel > max_elements) {
    return Status::ResourceExhausted(field + ": " + std::to_string(*numel) +
                                     " elements exceed the limit of " +
                                     std::to_string(max_elements) + " (--max-tensor-elements)");
  }
  const bool has_typed = t.typed_count > 0;
  if (t.has_raw && has_typed) {
    return Status::InvalidArgument(field + ": set exactly one of " + t.raw_name + " or " +
                                   t.typed_name + ", got both");
  }
  out->type = t.type;
  out->view.shape = t.shape;
  out->view.strides = DenseStrides(t.shape);
  out->view.dtype = expected;
  if (t.has_raw || (*numel == 0 && IsHalf(t.type))) return ViewRaw(t, field, *numel, out);
  if (IsHalf(t.type)) {
    return Status::InvalidArgument(
        field + ": " + t.type_name + " travels as " + t.raw_name + " bytes only, " +
        (has_typed ? "got " + std::string(t.typed_name) : "and none came"));
  }
  if (t.typed_count != *numel) {
    return Status::InvalidArgument(field + ": shape " + ShapeToString(t.shape) + " needs " +
                                   std::to_string(*numel) + " " + t.typed_name + ", got " +
                                   std::to_string(t.typed_count) +
                                   (has_typed ? "" : std::string(" (and no ") + t.raw_name + ")"));
  }
  out->encoding = Encoding::kValues;
  if (want_bool && t.bools != nullptr) {
    out->view.data = t.bools;
  } else if (want_bool) {
    out->bool_storage.resize(static_cast<size_t>(*numel));
    for (int64_t i = 0; i < *numel; ++i) out->bool_storage[i] = t.floats[i] != 0.0f;
    out->view.data = out->bool_storage.data();
  } else {
    out->view.data = t.floats;
  }
  return Status::Ok();
}

std::string Int64ToRaw(const std::vector<int64_t>& values) {
  std::string raw(values.size() * 8, '\0');
  for (size_t e = 0; e < values.size(); ++e) {
    const auto u = static_cast<uint64_t>(values[e]);
    for (int b = 0; b < 8; ++b) raw[e * 8 + b] = static_cast<char>((u >> (8 * b)) & 0xff);
  }
  return raw;
}

std::vector<int64_t> Int64FromRaw(std::string_view raw) {
  std::vector<int64_t> values(raw.size() / 8);
  for (size_t e = 0; e < values.size(); ++e) {
    uint64_t u = 0;
    for (int b = 7; b >= 0; --b) u = (u << 8) | static_cast<uint8_t>(raw[e * 8 + b]);
    values[e] = static_cast<int64_t>(u);
  }
  return values;
}

void NarrowInto(const float* src, int64_t n, WireType type, char* dst) {
  if (n <= 0) return;  // an empty tensor's data may be null
  if (IsHalf(type)) {
    FloatToHalf(AsHalf(type), src, reinterpret_cast<uint16_t*>(dst), n);
  } else {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  }
}

void EncodeTensor(const Tensor& src, WireType type, Encoding encoding, attention::v1::Tensor* dst) {
  EncodeDense(src.shape, src.data.data(), src.data.size(), type, encoding, dst);
}

void EncodeDense(const Shape& shape, const float* values, size_t n, WireType type,
                 Encoding encoding, attention::v1::Tensor* dst) {
  const bool is_bool = type == WireType::kBool;
  dst->Clear();
  dst->mutable_shape()->Add(shape.begin(), shape.end());
  dst->set_dtype(static_cast<attention::v1::DataType>(NativeDataType(type)));
  if (IsHalf(type) || (encoding == Encoding::kData && !is_bool)) {
    std::string* bytes = dst->mutable_data();
    bytes->resize(n * static_cast<size_t>(WireTypeBytes(type)));
    NarrowInto(values, static_cast<int64_t>(n), type, bytes->data());
  } else if (encoding == Encoding::kValues && !is_bool) {
    dst->mutable_values()->Add(values, values + n);
  } else if (encoding == Encoding::kValues) {
    dst->mutable_values()->Reserve(static_cast<int>(n));
    for (size_t i = 0; i < n; ++i) dst->add_values(values[i] != 0 ? 1.0f : 0.0f);
  } else {
    std::string* bytes = dst->mutable_data();
    bytes->resize(n);
    for (size_t i = 0; i < n; ++i) (*bytes)[i] = values[i] != 0 ? 1 : 0;
  }
}

}  // namespace attn::wire
