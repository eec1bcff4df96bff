// inference.GRPCInferenceService (the Open Inference Protocol over gRPC) on
// the attention server's port. ModelInfer takes the same path as every
// attention.v1 call (call/grpc_call.h, call/dispatch.h): token, admission,
// limits, CPU budget, deadlines, metrics and the access log.
#pragma once

#include <atomic>

#include "call/dispatch.h"
#include "inference/open_inference_grpc.grpc.pb.h"

namespace attn::server {

// ModelInfer is a raw (ByteBuffer) method that parses its request itself,
// as attention.v1's are (raw_messages.h); the rest are typed.
using OipService = inference::GRPCInferenceService::WithCallbackMethod_ServerLive<
    inference::GRPCInferenceService::WithCallbackMethod_ServerReady<
        inference::GRPCInferenceService::WithCallbackMethod_ModelReady<
            inference::GRPCInferenceService::WithCallbackMethod_ServerMetadata<
                inference::GRPCInferenceService::WithCallbackMethod_ModelMetadata<
                    inference::GRPCInferenceService::WithRawCallbackMethod_ModelInfer<
                        inference::GRPCInferenceService::Service>>>>>>;

class OipServiceImpl final : public OipService {
 public:
  // `calls` and `ready` must outlive the service. `ready`: every model is
  // loaded and warmed up.
  OipServiceImpl(CallDispatcher* calls, const std::atomic<bool>* ready);

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* ctx,
                                       const inference::ServerLiveRequest* req,
                                       inference::ServerLiveResponse* resp) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* ctx,
                                        const inference::ServerReadyRequest* req,
                                        inference::ServerReadyResponse* resp) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* ctx,
                                       const inference::ModelReadyRequest* req,
                                       inference::ModelReadyResponse* resp) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* ctx,
                                           const inference::ServerMetadataRequest* req,
                                           inference::ServerMetadataResponse* resp) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* ctx,
                                          const inference::ModelMetadataRequest* req,
                                          inference::ModelMetadataResponse* resp) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* ctx,
                                       const grpc::ByteBuffer* req,
                                       grpc::ByteBuffer* resp) override;

 private:
  CallDispatcher* const calls_;
  const std::atomic<bool>* const ready_;
};

}  // namespace attn::server
