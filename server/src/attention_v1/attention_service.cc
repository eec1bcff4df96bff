#include "attention_v1/attention_service.h"

#include <memory>

#include "attention_v1/attention_v1_adapter.h"
#include "attention_v1/in_place_output.h"
#include "call/grpc_call.h"
#include "call/prepared_call.h"
#include "call/raw_messages.h"

namespace attn::server {

AttentionServiceImpl::AttentionServiceImpl(CallDispatcher* dispatcher) : dispatcher_(dispatcher) {}

template <typename Request, typename Prepare>
grpc::ServerUnaryReactor* AttentionServiceImpl::Handle(Rpc rpc, grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* req,
                                                       grpc::ByteBuffer* resp, Prepare prepare) {
  // The request (which the call's views point into, with its bytes when
  // its tensors' data were not copied) and the answer live as long as the
  // call.
  struct Messages {
    Request request;
    grpc::Slice request_bytes;
    wire::TensorData tensor_data;
    attention::v1::AttentionResponse response;
    InPlaceOutput output;
  };
  auto messages = std::make_shared<Messages>();
  const Status parsed = ParseRequestInPlace(*req, &messages->request, &messages->request_bytes,
                                            &messages->tensor_data);
  const RequestLimits* limits = &dispatcher_->options().limits;
  const ModelRegistry* models = dispatcher_->options().models;
  return ServeGrpc(dispatcher_, rpc, ctx, static_cast<int64_t>(req->Length()), resp,
                   [&](PreparedCall* call) {
                     ATTN_RETURN_IF_ERROR(parsed);  // after the token and admission
                     call->keep_alive = messages;
                     Messages* m = messages.get();
                     call->tensor_data = &m->tensor_data;
                     ATTN_RETURN_IF_ERROR(prepare(m->request, *models, *limits, call));
                     call->output = IntoResponse(*call, &m->output);
                     call->respond = [call, limits, m, resp](const AttentionResult& r) {
                       ATTN_RETURN_IF_ERROR(EncodeResponse(r, *call, *limits, &m->response));
                       return m->output.used() ? m->output.Serialize(m->response, resp)
                                               : SerializeInto(m->response, resp);
                     };
                     return Status::Ok();
                   });
}

grpc::ServerUnaryReactor* AttentionServiceImpl::Attention(grpc::CallbackServerContext* ctx,
                                                          const grpc::ByteBuffer* req,
                                                          grpc::ByteBuffer* resp) {
  return Handle<attention::v1::AttentionRequest>(Rpc::kAttention, ctx, req, resp, PrepareAttention);
}

grpc::ServerUnaryReactor* AttentionServiceImpl::CrossAttention(grpc::CallbackServerContext* ctx,
                                                               const grpc::ByteBuffer* req,
                                                               grpc::ByteBuffer* resp) {
  return Handle<attention::v1::CrossAttentionRequest>(Rpc::kCrossAttention, ctx, req, resp,
                                                      PrepareCrossAttention);
}

grpc::ServerUnaryReactor* AttentionServiceImpl::MultiHeadAttention(grpc::CallbackServerContext* ctx,
                                                                   const grpc::ByteBuffer* req,
                                                                   grpc::ByteBuffer* resp) {
  return Handle<attention::v1::MultiHeadAttentionRequest>(Rpc::kMultiHeadAttention, ctx, req, resp,
                                                          PrepareMultiHeadAttention);
}

grpc::ServerUnaryReactor* AttentionServiceImpl::ListModels(grpc::CallbackServerContext* ctx,
                                                           const grpc::ByteBuffer* req,
                                                           grpc::ByteBuffer* resp) {
  attention::v1::ListModelsRequest request;
  attention::v1::ListModelsResponse answer;
  const Status parsed = ParseRequest(*req, &request);
  return ServeGrpcSimple(dispatcher_, Rpc::kListModels, ctx, &answer, [&] {
    ATTN_RETURN_IF_ERROR(parsed);
    for (const AttentionModel* m : dispatcher_->options().models->All()) {
      const ModelInfo& info = m->info();
      auto* out = answer.add_models();
      out->set_name(info.name);
      out->set_kind(ModelKindName(info.kind));
      out->set_embed_dim(info.embed_dim);
      out->set_num_heads(info.num_heads);
      out->set_num_kv_heads(info.num_kv_heads);
      out->set_kdim(info.kdim);
      out->set_vdim(info.vdim);
    }
    return SerializeInto(answer, resp);
  });
}

}  // namespace attn::server
