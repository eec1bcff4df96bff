#include "attention_service.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <exception>
#include <memory>

#include "request_adapter.h"
#include "server_log.h"
#include "status_mapping.h"

namespace attn::server {
namespace {

using Clock = std::chrono::steady_clock;

double MillisSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

void LogCall(const char* rpc, grpc::CallbackServerContext* ctx, const PreparedCall& call,
             const Status& st, Clock::time_point start) {
  // Check first: building the shapes and the peer costs more than a small
  // call's compute, and debug is usually off.
  if (!spdlog::should_log(st.ok() ? spdlog::level::debug : spdlog::level::warn)) return;
  AccessRecord r;
  r.rpc = rpc;
  r.model = call.model.empty() ? "-" : call.model;
  r.shapes = call.Shapes();
  r.code = StatusCodeName(st.code());
  r.latency_ms = MillisSince(start);
  r.peer = ctx->peer();
  r.reason = st.message();
  LogAccess(r);
}

// A reactor that tells the call when gRPC cancels it (client cancel or
// deadline), so queued work is dropped and running work stops between blocks.
class CallReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit CallReactor(std::shared_ptr<PreparedCall> call) : call_(std::move(call)) {}
  void OnCancel() override { call_->cancelled = true; }
  void OnDone() override { delete this; }

 private:
  std::shared_ptr<PreparedCall> call_;
};

}  // namespace

AttentionServiceImpl::AttentionServiceImpl(const ModelRegistry* models, ComputeScheduler* scheduler,
                                           RequestLimits limits)
    : models_(models), scheduler_(scheduler), limits_(limits) {}

template <typename Request, typename Prepare>
grpc::ServerUnaryReactor* AttentionServiceImpl::Handle(const char* rpc,
                                                       grpc::CallbackServerContext* ctx,
                                                       const Request* req,
                                                       attention::v1::AttentionResponse* resp,
                                                       Prepare prepare) {
  const auto start = Clock::now();
  auto call = std::make_shared<PreparedCall>();
  grpc::ServerUnaryReactor* reactor = new CallReactor(call);
  Status st = prepare(*req, *models_, limits_, call.get());
  if (!st.ok()) {
    LogCall(rpc, ctx, *call, st, start);
    reactor->Finish(ToGrpcStatus(st));
    return reactor;
  }
  const int threads = call->cost.flops < kParallelFlops ? 1 : scheduler_->cpus();
  const RequestLimits limits = limits_;
  auto run = [this, rpc, ctx, reactor, resp, call, limits, start](int granted) {
    const auto began = Clock::now();
    Status result;
    if (call->cancelled || std::chrono::system_clock::now() > ctx->deadline()) {
      // Nobody is waiting for this answer any more: do not compute it.
      ++skipped_;
      result = call->cancelled
                   ? Status::Cancelled("cancelled while waiting for a CPU; not computed")
                   : Status(StatusCode::kDeadlineExceeded,
                            "deadline passed after " +
                                std::to_string(static_cast<int>(MillisSince(start))) +
                                " ms waiting for a CPU; not computed");
    } else {
      try {
        auto out = call->compute(granted);
        result = out.ok() ? EncodeResponse(*out, call->encoding, limits, resp) : out.status();
      } catch (const std::exception& e) {  // core throws nothing; this is a last guard
        result = Status::Internal(std::string("unexpected error: ") + e.what());
      }
    }
    // Where the time went, for load testers: waiting for a CPU, computing.
    const auto us = [](Clock::duration d) {
      return std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
    };
    ctx->AddTrailingMetadata("attn-queue-us", us(began - start));
    ctx->AddTrailingMetadata("attn-compute-us", us(Clock::now() - began));
    LogCall(rpc, ctx, *call, result, start);
    reactor->Finish(ToGrpcStatus(result));
  };
  // A small call with a free CPU runs right here, on gRPC's thread; anything
  // else waits its turn on a compute worker.
  if (threads == 1 && scheduler_->TryAcquire(1)) {
    run(1);
    scheduler_->Release(1);
  } else if (!scheduler_->Submit(threads, std::move(run))) {
    st = Status::ResourceExhausted("server: the compute queue is full; retry later");
    LogCall(rpc, ctx, *call, st, start);
    reactor->Finish(ToGrpcStatus(st));
  }
  return reactor;
}

grpc::ServerUnaryReactor* AttentionServiceImpl::Attention(
    grpc::CallbackServerContext* ctx, const attention::v1::AttentionRequest* req,
    attention::v1::AttentionResponse* resp) {
  return Handle("Attention", ctx, req, resp, PrepareAttention);
}

grpc::ServerUnaryReactor* AttentionServiceImpl::CrossAttention(
    grpc::CallbackServerContext* ctx, const attention::v1::CrossAttentionRequest* req,
    attention::v1::AttentionResponse* resp) {
  return Handle("CrossAttention", ctx, req, resp, PrepareCrossAttention);
}

grpc::ServerUnaryReactor* AttentionServiceImpl::MultiHeadAttention(
    grpc::CallbackServerContext* ctx, const attention::v1::MultiHeadAttentionRequest* req,
    attention::v1::AttentionResponse* resp) {
  return Handle("MultiHeadAttention", ctx, req, resp, PrepareMultiHeadAttention);
}

grpc::ServerUnaryReactor* AttentionServiceImpl::ListModels(
    grpc::CallbackServerContext* ctx, const attention::v1::ListModelsRequest* /*req*/,
    attention::v1::ListModelsResponse* resp) {
  for (const AttentionModel* m : models_->All()) {
    const ModelInfo& info = m->info();
    auto* out = resp->add_models();
    out->set_name(info.name);
    out->set_kind(ModelKindName(info.kind));
    out->set_embed_dim(info.embed_dim);
    out->set_num_heads(info.num_heads);
    out->set_kdim(info.kdim);
    out->set_vdim(info.vdim);
  }
  if (spdlog::should_log(spdlog::level::debug)) {
    AccessRecord r;
    r.rpc = "ListModels";
    r.model = "-";
    r.peer = ctx->peer();
    LogAccess(r);
  }
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace attn::server
