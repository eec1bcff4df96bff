#include "wire/tensor_codec.h"

#include <cstring>

namespace attn::wire {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the wire format is little-endian; this build assumes a little-endian host");

constexpr int kMaxRank = 8;

}  // namespace

std::string WireDataTypeName(int dtype) {
  if (attention::v1::DataType_IsValid(dtype)) {
    return attention::v1::DataType_Name(static_cast<attention::v1::DataType>(dtype));
  }
  return "unknown data type " + std::to_string(dtype);
}

Status DecodeTensor(const attention::v1::Tensor& t, const std::string& field, DataType expected,
                    int64_t max_elements, DecodedTensor* out) {
  using attention::v1::DataType_Name;
  const int dtype = t.dtype();
  const bool is_float =
      dtype == attention::v1::DATA_TYPE_UNSPECIFIED || dtype == attention::v1::DATA_TYPE_FLOAT32;
  const bool is_bool = dtype == attention::v1::DATA_TYPE_BOOL;
  if (dtype == attention::v1::DATA_TYPE_BFLOAT16 || dtype == attention::v1::DATA_TYPE_FLOAT16) {
    return Status::InvalidArgument(field + ": dtype " + WireDataTypeName(dtype) +
                                   " is not implemented yet; send DATA_TYPE_FLOAT32");
  }
  if ((expected == DataType::kFloat32 && !is_float) || (expected == DataType::kBool && !is_bool)) {
    return Status::InvalidArgument(
        field + ": dtype must be " +
        (expected == DataType::kBool ? "DATA_TYPE_BOOL" : "DATA_TYPE_FLOAT32") + ", got " +
        WireDataTypeName(dtype));
  }
  if (t.shape_size() > kMaxRank) {
    return Status::InvalidArgument(field + ": rank must be at most " + std::to_string(kMaxRank) +
                                   ", got " + std::to_string(t.shape_size()));
  }
  Shape shape(t.shape().begin(), t.shape().end());
  auto numel = CheckedNumElements(shape, field);
  if (!numel.ok()) return numel.status();
  if (*numel > max_elements) {
    return Status::ResourceExhausted(field + ": " + std::to_string(*numel) +
                                     " elements exceed the limit of " +
                                     std::to_string(max_elements) + " (--max-tensor-elements)");
  }
  const bool has_data = !t.data().empty();
  const bool has_values = t.values_size() > 0;
  if (has_data && has_values) {
    return Status::InvalidArgument(field + ": set exactly one of data or values, got both");
  }
  const int64_t elem_bytes = is_bool ? 1 : 4;
  out->view.shape = shape;
  out->view.strides = DenseStrides(shape);
  out->view.dtype = expected;
  if (has_values || (*numel > 0 && !has_data)) {
    if (t.values_size() != *numel) {
      return Status::InvalidArgument(
          field + ": shape " + ShapeToString(shape) + " needs " + std::to_string(*numel) +
          " values, got " + std::to_string(t.values_size()) + (has_values ? "" : " (and no data)"));
    }
    out->encoding = Encoding::kValues;
    if (is_bool) {
      out->bool_storage.resize(static_cast<size_t>(*numel));
      for (int64_t i = 0; i < *numel; ++i) out->bool_storage[i] = t.values(i) != 0.0f;
      out->view.data = out->bool_storage.data();
    } else {
      out->view.data = t.values().data();
    }
    return Status::Ok();
  }
  const auto want = static_cast<uint64_t>(*numel) * static_cast<uint64_t>(elem_bytes);
  if (t.data().size() != want) {
    return Status::InvalidArgument(field + ": data has " + std::to_string(t.data().size()) +
                                   " bytes, expected " + std::to_string(want) + " (shape " +
                                   ShapeToString(shape) + " x " + std::to_string(elem_bytes) +
                                   (is_bool ? " byte bool)" : " bytes float32)"));
  }
  out->encoding = Encoding::kData;
  out->view.data = t.data().data();
  return Status::Ok();
}

float* OutputBytes(const Shape& shape, attention::v1::Tensor* dst) {
  dst->Clear();
  dst->mutable_shape()->Add(shape.begin(), shape.end());
  dst->set_dtype(attention::v1::DATA_TYPE_FLOAT32);
  std::string* bytes = dst->mutable_data();
  bytes->resize(static_cast<size_t>(NumElements(shape)) *
                sizeof(float));  // zero fill: half a copy's traffic
  return reinterpret_cast<float*>(bytes->data());
}

void EncodeTensor(const Tensor& src, Encoding encoding, attention::v1::Tensor* dst) {
  EncodeDense(src.shape, src.data.data(), src.data.size(), DataType::kFloat32, encoding, dst);
}

void EncodeDense(const Shape& shape, const float* values, size_t n, DataType dtype,
                 Encoding encoding, attention::v1::Tensor* dst) {
  const bool is_bool = dtype == DataType::kBool;
  dst->Clear();
  dst->mutable_shape()->Add(shape.begin(), shape.end());
  dst->set_dtype(is_bool ? attention::v1::DATA_TYPE_BOOL : attention::v1::DATA_TYPE_FLOAT32);
  if (encoding == Encoding::kValues && !is_bool) {
    dst->mutable_values()->Add(values, values + n);
  } else if (encoding == Encoding::kValues) {
    dst->mutable_values()->Reserve(static_cast<int>(n));
    for (size_t i = 0; i < n; ++i) dst->add_values(values[i] != 0 ? 1.0f : 0.0f);
  } else if (is_bool) {
    std::string* bytes = dst->mutable_data();
    bytes->resize(n);
    for (size_t i = 0; i < n; ++i) (*bytes)[i] = values[i] != 0 ? 1 : 0;
  } else {
    dst->mutable_data()->assign(reinterpret_cast<const char*>(values), n * sizeof(float));
  }
}

}  // namespace attn::wire
