#include "wire/status_mapping.h"

namespace attn::wire {

grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return {static_cast<grpc::StatusCode>(status.code()), status.message()};
}

Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return Status::Ok();
  return {static_cast<StatusCode>(status.error_code()), status.error_message()};
}

const char* GrpcCodeName(grpc::StatusCode code) {
  return StatusCodeName(static_cast<StatusCode>(code));
}

}  // namespace attn::wire
