// Core's Status and gRPC's status, both ways. Core numbers its codes like
// gRPC, so the mapping keeps the code and the message.
#pragma once

#include <grpcpp/support/status.h>

#include "attn/status.h"

namespace attn::wire {

grpc::Status ToGrpcStatus(const Status& status);
Status FromGrpcStatus(const grpc::Status& status);

// "INVALID_ARGUMENT" for a gRPC status code.
const char* GrpcCodeName(grpc::StatusCode code);

}  // namespace attn::wire
