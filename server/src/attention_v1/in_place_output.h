// An attention.v1 answer whose output core writes straight into the gRPC
// slice that goes out: no zero fill before compute and no serialize copy
// after it. The bytes on the wire are the ones protobuf would write.
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include "attention/v1/attention.pb.h"
#include "attn/status.h"
#include "attn/tensor.h"

namespace attn::server {

class InPlaceOutput {
 public:
  // Where core writes a FLOAT32 output of `shape` (the call's
  // OutputAllocator): a slice of its size, uninitialized.
  float* Allocate(const Shape& shape);
  // True once Allocate gave storage for at least one element.
  bool used() const { return used_; }
  // `out` = AttentionResponse{output: {shape, FLOAT32, the slice}} followed
  // by `rest` (the response's other fields; its `output` must be unset).
  Status Serialize(const attention::v1::AttentionResponse& rest, grpc::ByteBuffer* out) const;

 private:
  Shape shape_;
  grpc::Slice bytes_;
  bool used_ = false;
};

}  // namespace attn::server
