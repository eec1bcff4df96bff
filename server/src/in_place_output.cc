#include "in_place_output.h"

#include <grpc/slice.h>

#include <string>

namespace attn::server {
namespace {

constexpr char kLengthDelimited = 2;

void AppendVarint(uint64_t v, std::string* out) {
  for (; v >= 0x80; v >>= 7) out->push_back(static_cast<char>(v | 0x80));
  out->push_back(static_cast<char>(v));
}

void AppendTag(int field, std::string* out) {
  AppendVarint((static_cast<uint64_t>(field) << 3) | kLengthDelimited, out);
}

int VarintSize(uint64_t v) {
  int n = 1;
  for (; v >= 0x80; v >>= 7) ++n;
  return n;
}

}  // namespace

float* InPlaceOutput::Allocate(const Shape& shape) {
  static float none;  // an empty output has no bytes to write
  shape_ = shape;
  const auto n = static_cast<size_t>(NumElements(shape)) * sizeof(float);
  used_ = n > 0;
  if (!used_) return &none;
  // Never inlined (a small slice's bytes would live in the Slice itself,
  // and move with it): always a heap block, so the pointer stays valid.
  bytes_ = grpc::Slice(grpc_slice_malloc_large(n), grpc::Slice::STEAL_REF);
  return reinterpret_cast<float*>(const_cast<uint8_t*>(bytes_.begin()));
}

Status InPlaceOutput::Serialize(const attention::v1::AttentionResponse& rest,
                                grpc::ByteBuffer* out) const {
  if (!used_ || rest.has_output()) return Status::Internal("response: no output written in place");
  // The output Tensor's fields before `data` (shape, dtype), as protobuf
  // writes them, then the headers that frame the slice.
  attention::v1::Tensor head;
  head.mutable_shape()->Add(shape_.begin(), shape_.end());
  head.set_dtype(attention::v1::DATA_TYPE_FLOAT32);
  const std::string head_bytes = head.SerializeAsString();
  const uint64_t n = bytes_.size();
  const uint64_t tensor_size = head_bytes.size() + 1 + VarintSize(n) + n;
  std::string prefix;
  prefix.reserve(2 * 10 + 2 + head_bytes.size());
  AppendTag(attention::v1::AttentionResponse::kOutputFieldNumber, &prefix);
  AppendVarint(tensor_size, &prefix);
  prefix += head_bytes;
  AppendTag(attention::v1::Tensor::kDataFieldNumber, &prefix);
  AppendVarint(n, &prefix);
  grpc::Slice slices[3] = {grpc::Slice(prefix), bytes_, grpc::Slice()};
  size_t count = 2;
  if (rest.ByteSizeLong() > 0) slices[count++] = grpc::Slice(rest.SerializeAsString());
  *out = grpc::ByteBuffer(slices, count);
  return Status::Ok();
}

}  // namespace attn::server
