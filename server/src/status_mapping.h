// The one mapping from core's Status to a gRPC status.
#pragma once

#include <grpcpp/support/status.h>

#include "attn/status.h"

namespace attn::server {

// Same code (core numbers its codes like gRPC), same message.
grpc::Status ToGrpcStatus(const Status& status);

}  // namespace attn::server
