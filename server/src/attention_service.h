// attention.v1.AttentionService on gRPC's callback API.
//
// A handler only adapts: it checks and views the request (request_adapter),
// queues the core call on the ComputeScheduler and returns; a compute worker
// runs the call, encodes the response and finishes the RPC. One log line per
// call (debug), errors at warn, each naming the RPC.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "attention/v1/attention.grpc.pb.h"
#include "compute_scheduler.h"
#include "model_registry.h"
#include "request_limits.h"

namespace attn::server {

class AttentionServiceImpl final : public attention::v1::AttentionService::CallbackService {
 public:
  // All three must outlive the service.
  AttentionServiceImpl(const ModelRegistry* models, ComputeScheduler* scheduler,
                       RequestLimits limits);

  grpc::ServerUnaryReactor* Attention(grpc::CallbackServerContext* ctx,
                                      const attention::v1::AttentionRequest* req,
                                      attention::v1::AttentionResponse* resp) override;
  grpc::ServerUnaryReactor* CrossAttention(grpc::CallbackServerContext* ctx,
                                           const attention::v1::CrossAttentionRequest* req,
                                           attention::v1::AttentionResponse* resp) override;
  grpc::ServerUnaryReactor* MultiHeadAttention(grpc::CallbackServerContext* ctx,
                                               const attention::v1::MultiHeadAttentionRequest* req,
                                               attention::v1::AttentionResponse* resp) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* ctx,
                                       const attention::v1::ListModelsRequest* req,
                                       attention::v1::ListModelsResponse* resp) override;

  // Requests below this many FLOPs run on one thread, the rest on all CPUs.
  static constexpr double kParallelFlops = 16e6;

  // Calls dropped before computing because their deadline passed or the
  // client cancelled while they waited for a CPU.
  int64_t calls_skipped() const { return skipped_.load(); }

 private:
  template <typename Request, typename Prepare>
  grpc::ServerUnaryReactor* Handle(const char* rpc, grpc::CallbackServerContext* ctx,
                                   const Request* req, attention::v1::AttentionResponse* resp,
                                   Prepare prepare);

  const ModelRegistry* models_;
  ComputeScheduler* scheduler_;
  const RequestLimits limits_;
  std::atomic<int64_t> skipped_{0};
};

}  // namespace attn::server
