// Parsing and serializing the messages of raw (ByteBuffer) gRPC methods,
// which the services use so that bytes that are not a valid message get
// INVALID_ARGUMENT naming the message type (gRPC's typed callback layer
// answers UNIMPLEMENTED with no message).
#pragma once

#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <string>

#include "attn/status.h"

namespace attn::server {

// `in` parsed as a T (without flattening it first), or INVALID_ARGUMENT
// naming the message type.
template <typename T>
Status ParseRequest(const grpc::ByteBuffer& in, T* msg) {
  grpc::ByteBuffer bytes(in);  // shares the slices
  grpc::ProtoBufferReader reader(&bytes);
  if (msg->ParseFromZeroCopyStream(&reader)) return Status::Ok();
  return Status::InvalidArgument("request: " + std::to_string(in.Length()) +
                                 " bytes that are not a valid " + msg->GetTypeName() + " message");
}

template <typename T>
Status SerializeInto(const T& msg, grpc::ByteBuffer* out) {
  bool own_buffer = false;
  const grpc::Status st = grpc::GenericSerialize<grpc::ProtoBufferWriter, T>(msg, out, &own_buffer);
  return st.ok() ? Status::Ok() : Status::Internal("response: " + st.error_message());
}

}  // namespace attn::server
