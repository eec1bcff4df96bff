// A gRPC call on the shared call path: the reactor that finishes it (the
// timing trailer, the access line, metrics, held memory, cancellation), for
// every protocol served over gRPC (attention.v1, OIP's GRPCInferenceService).
#pragma once

#include <google/protobuf/message_lite.h>
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <string>

#include "attn/status.h"
#include "call/dispatch.h"
#include "wire/precision_header.h"

namespace attn::server {

// A gRPC attention call on Dispatch: the reactor finishes the RPC and adds
// the timing trailer. `bytes_in` is the request's size and `resp` the
// answer's bytes, which `prepare`'s respond fills, for metrics.
grpc::ServerUnaryReactor* ServeGrpc(CallDispatcher* dispatcher, Rpc rpc,
                                    grpc::CallbackServerContext* ctx, int64_t bytes_in,
                                    const grpc::ByteBuffer* resp,
                                    const std::function<Status(PreparedCall*)>& prepare);

// A gRPC call that never reaches a CPU (metadata, readiness): the
// principal (unless `open`, as for probes), then `answer()`, then the
// access line and metrics.
grpc::ServerUnaryReactor* ServeGrpcSimple(CallDispatcher* dispatcher, Rpc rpc,
                                          grpc::CallbackServerContext* ctx,
                                          const google::protobuf::MessageLite* resp,
                                          const std::function<Status()>& answer, bool open = false);

// The same, for an answer that depends on who asks (sessions).
grpc::ServerUnaryReactor* ServeGrpcAs(CallDispatcher* dispatcher, Rpc rpc,
                                      grpc::CallbackServerContext* ctx,
                                      const google::protobuf::MessageLite* resp,
                                      const std::function<Status(const Principal&)>& answer);

// What a gRPC call tells of its caller: its "authorization" metadata (kept
// in `storage`) and, over mutual TLS, its verified certificate's subject.
CallerCredentials CredentialsOf(grpc::CallbackServerContext* ctx, std::string* storage);

}  // namespace attn::server
