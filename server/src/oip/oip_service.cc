#include "oip/oip_service.h"

#include <memory>

#include "call/grpc_call.h"
#include "call/prepared_call.h"
#include "call/raw_messages.h"
#include "oip/oip_adapter.h"

namespace attn::server {

OipServiceImpl::OipServiceImpl(CallDispatcher* calls, const std::atomic<bool>* ready)
    : calls_(calls), ready_(ready) {}

grpc::ServerUnaryReactor* OipServiceImpl::ServerLive(grpc::CallbackServerContext* ctx,
                                                     const inference::ServerLiveRequest* /*req*/,
                                                     inference::ServerLiveResponse* resp) {
  return ServeGrpcSimple(
      calls_, Rpc::kOipMetadata, ctx, resp,
      [resp] {
        resp->set_live(true);  // answering is being live
        return Status::Ok();
      },
      /*open=*/true);
}

grpc::ServerUnaryReactor* OipServiceImpl::ServerReady(grpc::CallbackServerContext* ctx,
                                                      const inference::ServerReadyRequest* /*req*/,
                                                      inference::ServerReadyResponse* resp) {
  return ServeGrpcSimple(
      calls_, Rpc::kOipMetadata, ctx, resp,
      [this, resp] {
        resp->set_ready(ready_->load());
        return Status::Ok();
      },
      /*open=*/true);
}

grpc::ServerUnaryReactor* OipServiceImpl::ModelReady(grpc::CallbackServerContext* ctx,
                                                     const inference::ModelReadyRequest* req,
                                                     inference::ModelReadyResponse* resp) {
  return ServeGrpcSimple(calls_, Rpc::kOipMetadata, ctx, resp, [this, req, resp] {
    ATTN_RETURN_IF_ERROR(oip::CheckModel(*calls_->options().models, req->name(), req->version()));
    resp->set_ready(ready_->load());
    return Status::Ok();
  });
}

grpc::ServerUnaryReactor* OipServiceImpl::ServerMetadata(
    grpc::CallbackServerContext* ctx, const inference::ServerMetadataRequest* /*req*/,
    inference::ServerMetadataResponse* resp) {
  return ServeGrpcSimple(calls_, Rpc::kOipMetadata, ctx, resp, [resp] {
    oip::ServerMetadata(resp);
    return Status::Ok();
  });
}

grpc::ServerUnaryReactor* OipServiceImpl::ModelMetadata(grpc::CallbackServerContext* ctx,
                                                        const inference::ModelMetadataRequest* req,
                                                        inference::ModelMetadataResponse* resp) {
  return ServeGrpcSimple(calls_, Rpc::kOipMetadata, ctx, resp, [this, req, resp] {
    return oip::ModelMetadata(*calls_->options().models, *req, resp);
  });
}

grpc::ServerUnaryReactor* OipServiceImpl::ModelInfer(grpc::CallbackServerContext* ctx,
                                                     const grpc::ByteBuffer* req,
                                                     grpc::ByteBuffer* resp) {
  // The request (which the call's views point into) and the typed answer
  // live as long as the call.
  struct Messages {
    inference::ModelInferRequest request;
    inference::ModelInferResponse response;
  };
  auto messages = std::make_shared<Messages>();
  const Status parsed = ParseRequest(*req, &messages->request);
  const ServiceOptions& o = calls_->options();
  return ServeGrpc(calls_, Rpc::kModelInfer, ctx, static_cast<int64_t>(req->Length()), resp,
                   [&](PreparedCall* call) {
                     ATTN_RETURN_IF_ERROR(parsed);  // after the token and admission
                     call->keep_alive = messages;
                     Messages* m = messages.get();
                     ATTN_RETURN_IF_ERROR(
                         oip::PrepareInfer(m->request, *o.models, o.limits, call, &m->response));
                     auto respond = std::move(call->respond);
                     call->respond = [respond, m, resp](const AttentionResult& r) {
                       ATTN_RETURN_IF_ERROR(respond(r));
                       return SerializeInto(m->response, resp);
                     };
                     return Status::Ok();
                   });
}

}  // namespace attn::server
