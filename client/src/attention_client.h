// A small client for attention.v1.AttentionService and grpc.health.v1.Health,
// shared by the attention-client tool and the tests.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "attention/v1/attention.grpc.pb.h"
#include "attn/status.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "inference/open_inference_grpc.grpc.pb.h"
#include "request_builder.h"

namespace attn::client {

struct ChannelOptions {
  int max_message_mb = 64;  // both directions; the server's default limit
  // Retry calls that fail with UNAVAILABLE (a replica going away behind a
  // load balancer), up to 4 attempts with backoff. Attention calls have no
  // side effects, so a retry is safe.
  bool retry_unavailable = false;
  // TLS when `tls` is set or any of the PEM paths is given: the server's
  // certificate must chain to `tls_ca` (default: the system's roots).
  // `tls_cert`/`tls_key`: a client certificate, for mutual TLS.
  bool tls = false;
  std::string tls_ca, tls_cert, tls_key;
  // Sent as `authorization: Bearer <token>` on every call (not logged).
  std::string token;

  bool UsesTls() const { return tls || !tls_ca.empty() || !tls_cert.empty() || !tls_key.empty(); }
};

// The channel arguments for `options`.
grpc::ChannelArguments ChannelArgs(const ChannelOptions& options);

// A channel to `target` ("host:port") with `options`: TLS, client
// certificate and token included. Fails when a PEM file cannot be read.
// `args` are extra channel arguments (options' own are added to them).
StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const std::string& target,
                                                     const ChannelOptions& options,
                                                     grpc::ChannelArguments args = {});

// OpenChannel, then up to `wait` for the channel's connection: a connect
// attempt that fails is retried meanwhile, where a first call would fail
// at once (the benches open their connections so, a loaded machine's
// first attempt having failed with the server up). UNAVAILABLE "no
// connection to TARGET within N ms" when it is not up by then.
StatusOr<std::shared_ptr<grpc::Channel>> OpenConnectedChannel(const std::string& target,
                                                              const ChannelOptions& options,
                                                              std::chrono::milliseconds wait,
                                                              grpc::ChannelArguments args = {});

// OpenChannel for options without files (plaintext, a token): cannot fail.
std::shared_ptr<grpc::Channel> Connect(const std::string& target,
                                       const ChannelOptions& options = {});

class AttentionClient {
 public:
  explicit AttentionClient(std::shared_ptr<grpc::Channel> channel);

  // Each call waits at most `timeout` (0: no deadline).
  grpc::Status Attention(const attention::v1::AttentionRequest& req,
                         attention::v1::AttentionResponse* resp,
                         std::chrono::milliseconds timeout = {});
  grpc::Status CrossAttention(const attention::v1::CrossAttentionRequest& req,
                              attention::v1::AttentionResponse* resp,
                              std::chrono::milliseconds timeout = {});
  grpc::Status MultiHeadAttention(const attention::v1::MultiHeadAttentionRequest& req,
                                  attention::v1::AttentionResponse* resp,
                                  std::chrono::milliseconds timeout = {});
  // The RPC of `call.op`, or OIP's ModelInfer (its answer converted).
  grpc::Status Call(const AttentionCall& call, attention::v1::AttentionResponse* resp,
                    std::chrono::milliseconds timeout = {});
  grpc::Status ListModels(attention::v1::ListModelsResponse* resp,
                          std::chrono::milliseconds timeout = {});
  // The model `name` from ListModels: NOT_FOUND "--model: the server has no
  // model '<name>'", or the call's own error.
  StatusOr<attention::v1::ModelInfo> FindModel(const std::string& name,
                                               std::chrono::milliseconds timeout = {});
  // grpc.health.v1.Health/Check for `service` ("" is the whole server);
  // *status is "SERVING", "NOT_SERVING", ...
  grpc::Status Health(const std::string& service, std::string* status,
                      std::chrono::milliseconds timeout = {});

  attention::v1::AttentionService::Stub& stub() { return *stub_; }

 private:
  std::unique_ptr<attention::v1::AttentionService::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> oip_;
};

}  // namespace attn::client
