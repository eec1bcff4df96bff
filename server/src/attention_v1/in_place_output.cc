#include "attention_v1/in_place_output.h"

#include <grpc/slice.h>

#include <string>

#include "wire/tensor_data.h"

namespace attn::server {

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
  const std::string prefix = wire::OutputPrefix(shape_, bytes_.size());
  grpc::Slice slices[3] = {grpc::Slice(prefix), bytes_, grpc::Slice()};
  size_t count = 2;
  if (rest.ByteSizeLong() > 0) slices[count++] = grpc::Slice(rest.SerializeAsString());
  *out = grpc::ByteBuffer(slices, count);
  return Status::Ok();
}

}  // namespace attn::server
