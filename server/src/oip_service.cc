#include "oip_service.h"

#include "oip_adapter.h"

namespace attn::server {

OipServiceImpl::OipServiceImpl(AttentionServiceImpl* calls, const std::atomic<bool>* ready)
    : calls_(calls), ready_(ready) {}

grpc::ServerUnaryReactor* OipServiceImpl::ServerLive(grpc::CallbackServerContext* ctx,
                                                     const inference::ServerLiveRequest* /*req*/,
                                                     inference::ServerLiveResponse* resp) {
  return calls_->ServeSimple(
      Rpc::kOipMetadata, ctx, resp,
      [resp] {
        resp->set_live(true);  // answering is being live
        return Status::Ok();
      },
      /*open=*/true);
}

grpc::ServerUnaryReactor* OipServiceImpl::ServerReady(grpc::CallbackServerContext* ctx,
                                                      const inference::ServerReadyRequest* /*req*/,
                                                      inference::ServerReadyResponse* resp) {
  return calls_->ServeSimple(
      Rpc::kOipMetadata, ctx, resp,
      [this, resp] {
        resp->set_ready(ready_->load());
        return Status::Ok();
      },
      /*open=*/true);
}

grpc::ServerUnaryReactor* OipServiceImpl::ModelReady(grpc::CallbackServerContext* ctx,
                                                     const inference::ModelReadyRequest* req,
                                                     inference::ModelReadyResponse* resp) {
  return calls_->ServeSimple(Rpc::kOipMetadata, ctx, resp, [this, req, resp] {
    ATTN_RETURN_IF_ERROR(oip::CheckModel(*calls_->options().models, req->name(), req->version()));
    resp->set_ready(ready_->load());
    return Status::Ok();
  });
}

grpc::ServerUnaryReactor* OipServiceImpl::ServerMetadata(
    grpc::CallbackServerContext* ctx, const inference::ServerMetadataRequest* /*req*/,
    inference::ServerMetadataResponse* resp) {
  return calls_->ServeSimple(Rpc::kOipMetadata, ctx, resp, [resp] {
    oip::ServerMetadata(resp);
    return Status::Ok();
  });
}

grpc::ServerUnaryReactor* OipServiceImpl::ModelMetadata(grpc::CallbackServerContext* ctx,
                                                        const inference::ModelMetadataRequest* req,
                                                        inference::ModelMetadataResponse* resp) {
  return calls_->ServeSimple(Rpc::kOipMetadata, ctx, resp, [this, req, resp] {
    return oip::ModelMetadata(*calls_->options().models, *req, resp);
  });
}

grpc::ServerUnaryReactor* OipServiceImpl::ModelInfer(grpc::CallbackServerContext* ctx,
                                                     const inference::ModelInferRequest* req,
                                                     inference::ModelInferResponse* resp) {
  const ServiceOptions& o = calls_->options();
  const int64_t bytes_in = o.metrics != nullptr ? static_cast<int64_t>(req->ByteSizeLong()) : 0;
  return calls_->Serve(Rpc::kModelInfer, ctx, bytes_in, resp, [&o, req, resp](PreparedCall* call) {
    return oip::PrepareInfer(*req, *o.models, o.limits, call, resp);
  });
}

}  // namespace attn::server
