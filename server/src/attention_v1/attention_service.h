// attention.v1.AttentionService on gRPC's callback API: each method parses
// its request (in place: call/raw_messages.h), adapts it into a call
// (attention_v1_adapter.h) and hands it to the shared call path
// (call/dispatch.h) through a gRPC reactor (call/grpc_call.h).
#pragma once

#include "attention/v1/attention.grpc.pb.h"
#include "call/dispatch.h"

namespace attn::server {

// attention.v1's four methods as raw (ByteBuffer) callbacks: the service
// parses each request itself, so bytes that are not a valid message get
// INVALID_ARGUMENT naming the message type (gRPC's own typed layer answers
// UNIMPLEMENTED with no message). The wire format is unchanged: generated
// typed clients call it as before.
using RawAttentionService = attention::v1::AttentionService::WithRawCallbackMethod_Attention<
    attention::v1::AttentionService::WithRawCallbackMethod_CrossAttention<
        attention::v1::AttentionService::WithRawCallbackMethod_MultiHeadAttention<
            attention::v1::AttentionService::WithRawCallbackMethod_ListModels<
                attention::v1::AttentionService::Service>>>>;

class AttentionServiceImpl final : public RawAttentionService {
 public:
  // `dispatcher` must outlive the service.
  explicit AttentionServiceImpl(CallDispatcher* dispatcher);

  grpc::ServerUnaryReactor* Attention(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                      grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* CrossAttention(grpc::CallbackServerContext* ctx,
                                           const grpc::ByteBuffer* req,
                                           grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* MultiHeadAttention(grpc::CallbackServerContext* ctx,
                                               const grpc::ByteBuffer* req,
                                               grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* ctx,
                                       const grpc::ByteBuffer* req,
                                       grpc::ByteBuffer* resp) override;

 private:
  template <typename Request, typename Prepare>
  grpc::ServerUnaryReactor* Handle(Rpc rpc, grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* req, grpc::ByteBuffer* resp,
                                   Prepare prepare);

  CallDispatcher* const dispatcher_;
};

}  // namespace attn::server
