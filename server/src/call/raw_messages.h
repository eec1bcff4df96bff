// Parsing and serializing the messages of raw (ByteBuffer) gRPC methods,
// which the services use so that bytes that are not a valid message get
// INVALID_ARGUMENT naming the message type (gRPC's typed callback layer
// answers UNIMPLEMENTED with no message).
#pragma once

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <climits>
#include <cstdint>
#include <string>
#include <string_view>

#include "attn/status.h"
#include "wire/tensor_data.h"

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

// `in` parsed as a T, as ParseRequest, except that when `in` is one slice
// the tensors' `data` bytes are not copied: `data` records where they lie
// in `flat`, which keeps that slice (wire/tensor_data.h). gRPC hands over a
// large message in many slices (a frame each); joining them would be the
// same copy that protobuf makes, so those are parsed by protobuf.
template <typename T>
Status ParseRequestInPlace(const grpc::ByteBuffer& in, T* msg, grpc::Slice* flat,
                           wire::TensorData* data) {
  if (in.TrySingleSlice(flat).ok() &&
      wire::ParseWithoutTensorData(
          std::string_view(reinterpret_cast<const char*>(flat->begin()), flat->size()), msg,
          data)) {
    return Status::Ok();
  }
  data->Clear();
  *flat = grpc::Slice();
  return ParseRequest(in, msg);
}

// How many times top-level field `field` occurs in the message `in`,
// counted from its tags without parsing anything (nothing is allocated per
// occurrence), stopping once past `stop_after`; -1 when `in` is not a
// well-formed message (then the parse reports it).
inline int64_t CountTopLevelField(const grpc::ByteBuffer& in, uint32_t field, int64_t stop_after) {
  grpc::ByteBuffer bytes(in);  // shares the slices
  grpc::ProtoBufferReader reader(&bytes);
  google::protobuf::io::CodedInputStream s(&reader);
  s.SetTotalBytesLimit(INT32_MAX);
  int64_t n = 0;
  while (const uint32_t tag = s.ReadTag()) {
    const auto number =
        static_cast<uint32_t>(google::protobuf::internal::WireFormatLite::GetTagFieldNumber(tag));
    if (number == field && ++n > stop_after) return n;
    if (!google::protobuf::internal::WireFormatLite::SkipField(&s, tag)) return -1;
  }
  return s.ConsumedEntireMessage() ? n : -1;
}

template <typename T>
Status SerializeInto(const T& msg, grpc::ByteBuffer* out) {
  bool own_buffer = false;
  const grpc::Status st = grpc::GenericSerialize<grpc::ProtoBufferWriter, T>(msg, out, &own_buffer);
  return st.ok() ? Status::Ok() : Status::Internal("response: " + st.error_message());
}

}  // namespace attn::server
