#include "attention_service.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <exception>
#include <memory>

#include "request_adapter.h"
#include "server_log.h"
#include "wire/status_mapping.h"
#include "wire/timing_trailer.h"

namespace attn::server {

namespace {

double SecondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

// One call's reactor: it finishes the call (access line, metrics), tells
// the call when gRPC cancels it (client cancel or deadline: queued work is
// dropped, running work stops between blocks), and holds the call's
// in-flight slot until its answer is handed to gRPC. (Not until OnDone: under
// load gRPC runs OnDone hundreds of calls late, long after the answer went
// out, and counting those would refuse calls the server has room for.)
class CallReactor final : public grpc::ServerUnaryReactor {
 public:
  CallReactor(AttentionServiceImpl* service, Rpc rpc, grpc::CallbackServerContext* ctx,
              int64_t bytes_in)
      : service_(service),
        rpc_(rpc),
        ctx_(ctx),
        bytes_in_(bytes_in),
        start_(Clock::now()),
        call_(std::make_shared<PreparedCall>()) {}

  void OnCancel() override { call_->cancelled = true; }
  void OnDone() override { delete this; }
  // Both reactions above are trivial and never block, so gRPC may run them
  // inline on the thread that completed the call. By default it hands every
  // OnDone and OnCancel to its executor thread: a futex wake-up and a
  // context switch per call, and OnDone ran hundreds of calls late under load.
  // (gRPC marks this hook as internal; its own trivial reactors use it the
  // same way.)
  bool InternalInlineable() override { return true; }

  const std::shared_ptr<PreparedCall>& call() const { return call_; }
  Clock::time_point start() const { return start_; }

  // Finishes the call. `began`: when it reached a CPU (default: it never did).
  void Done(const Status& st, const google::protobuf::MessageLite* resp,
            Clock::time_point began = {}) {
    const auto now = Clock::now();
    const bool computed = began != Clock::time_point{};
    if (computed) {
      // Where the time went, for load testers: waiting for a CPU, computing.
      ctx_->AddTrailingMetadata(wire::kTimingTrailer,
                                wire::TimingTrailerValue(began - start_, now - began));
    }
    service_->Account(rpc_, call_.get(), st, start_, began, now, bytes_in_,
                      st.ok() ? resp : nullptr, ctx_);
    service_->in_flight_.fetch_sub(1, std::memory_order_relaxed);
    Finish(wire::ToGrpcStatus(st));
  }

 private:
  AttentionServiceImpl* const service_;
  const Rpc rpc_;
  grpc::CallbackServerContext* const ctx_;
  const int64_t bytes_in_;
  const Clock::time_point start_;
  std::shared_ptr<PreparedCall> call_;
};

AttentionServiceImpl::AttentionServiceImpl(const ServiceOptions& options) : options_(options) {}

void AttentionServiceImpl::Account(Rpc rpc, const PreparedCall* call, const Status& st,
                                   Clock::time_point start, Clock::time_point began,
                                   Clock::time_point end, int64_t bytes_in,
                                   const google::protobuf::MessageLite* resp,
                                   grpc::CallbackServerContext* ctx) const {
  const bool computed = began != Clock::time_point{};
  const std::string& model = call != nullptr ? call->model : std::string();
  if (ServerMetrics* m = options_.metrics) {
    m->RecordCall(rpc, m->ModelIndex(model), static_cast<int>(st.code()),
                  SecondsBetween(start, end), computed ? SecondsBetween(start, began) : -1,
                  computed ? SecondsBetween(began, end) : -1, bytes_in,
                  resp != nullptr ? static_cast<int64_t>(resp->ByteSizeLong()) : 0);
  }
  // Check first: building the shapes and the peer costs more than a small
  // call's compute, and debug is usually off.
  if (!spdlog::should_log(st.ok() ? spdlog::level::debug : spdlog::level::warn)) return;
  AccessRecord r;
  r.rpc = RpcName(rpc);
  r.model = model.empty() ? "-" : model;
  if (call != nullptr) r.shapes = call->Shapes();
  r.code = StatusCodeName(st.code());
  r.latency_ms = SecondsBetween(start, end) * 1e3;
  r.peer = ctx->peer();
  r.reason = st.message();
  LogAccess(r);
}

Status AttentionServiceImpl::Authenticate(grpc::CallbackServerContext* ctx) const {
  if (options_.auth == nullptr) return Status::Ok();
  const auto& md = ctx->client_metadata();
  const auto it = md.find("authorization");
  if (it == md.end()) return options_.auth->Check(nullptr, 0);
  return options_.auth->Check(it->second.data(), it->second.size());
}

grpc::ServerUnaryReactor* AttentionServiceImpl::Serve(
    Rpc rpc, grpc::CallbackServerContext* ctx, int64_t bytes_in,
    const google::protobuf::MessageLite* resp,
    const std::function<Status(PreparedCall*)>& prepare) {
  // Counted from here until Done(), rejected calls included.
  const int in_flight = in_flight_.fetch_add(1, std::memory_order_relaxed) + 1;
  arrived_.fetch_add(1, std::memory_order_relaxed);
  auto* reactor = new CallReactor(this, rpc, ctx, options_.metrics != nullptr ? bytes_in : 0);
  Status st = Authenticate(ctx);
  if (!st.ok()) {
    reactor->Done(st, nullptr);
    return reactor;
  }
  if (in_flight > options_.max_inflight) {
    reactor->Done(Status::ResourceExhausted(
                      "server: " + std::to_string(options_.max_inflight) +
                      " calls in flight already, the limit (--max-inflight); retry later"),
                  nullptr);
    return reactor;
  }
  const std::shared_ptr<PreparedCall>& call = reactor->call();
  st = prepare(call.get());
  if (!st.ok()) {
    reactor->Done(st, nullptr);
    return reactor;
  }
  ComputeScheduler* scheduler = options_.scheduler;
  const int threads = call->cost.flops < kParallelFlops ? 1 : scheduler->cpus();
  auto run = [this, ctx, reactor, resp, call](int granted) {
    const auto began = Clock::now();
    Status result;
    if (call->cancelled || std::chrono::system_clock::now() > ctx->deadline()) {
      // Nobody is waiting for this answer any more: do not compute it.
      ++skipped_;
      const auto waited_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(began - reactor->start()).count();
      result = call->cancelled
                   ? Status::Cancelled("cancelled while waiting for a CPU; not computed")
                   : Status::DeadlineExceeded("deadline passed after " + std::to_string(waited_ms) +
                                              " ms waiting for a CPU; not computed");
    } else {
      // Core throws nothing; this is a last guard.
      result = GuardExceptions("unexpected error", [&] {
        auto out = call->compute(granted, call->output);
        return out.ok() ? call->respond(*out) : out.status();
      });
    }
    reactor->Done(result, resp, began);
  };
  // A small call with a free CPU runs right here, on gRPC's thread; anything
  // else waits its turn on a compute worker.
  if (threads == 1 && scheduler->TryAcquire(1)) {
    run(1);
    scheduler->Release(1);
  } else if (!scheduler->Submit(threads, std::move(run))) {
    reactor->Done(
        Status::ResourceExhausted("server: the compute queue is full (--max-queue " +
                                  std::to_string(scheduler->max_queue()) + "); retry later"),
        nullptr);
  }
  return reactor;
}

grpc::ServerUnaryReactor* AttentionServiceImpl::ServeSimple(
    Rpc rpc, grpc::CallbackServerContext* ctx, const google::protobuf::MessageLite* resp,
    const std::function<Status()>& answer) {
  const auto start = Clock::now();
  Status st = Authenticate(ctx);
  if (st.ok()) st = answer();
  Account(rpc, nullptr, st, start, {}, Clock::now(), 0, st.ok() ? resp : nullptr, ctx);
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(wire::ToGrpcStatus(st));
  return reactor;
}

template <typename Request, typename Prepare>
grpc::ServerUnaryReactor* AttentionServiceImpl::Handle(Rpc rpc, grpc::CallbackServerContext* ctx,
                                                       const Request* req,
                                                       attention::v1::AttentionResponse* resp,
                                                       Prepare prepare) {
  return Serve(rpc, ctx,
               options_.metrics != nullptr ? static_cast<int64_t>(req->ByteSizeLong()) : 0, resp,
               [&](PreparedCall* call) {
                 ATTN_RETURN_IF_ERROR(prepare(*req, *options_.models, options_.limits, call));
                 call->output = IntoResponse(*call, resp);
                 const RequestLimits* limits = &options_.limits;
                 call->respond = [call, limits, resp](const AttentionResult& r) {
                   return EncodeResponse(r, *call, *limits, resp);
                 };
                 return Status::Ok();
               });
}

grpc::ServerUnaryReactor* AttentionServiceImpl::Attention(
    grpc::CallbackServerContext* ctx, const attention::v1::AttentionRequest* req,
    attention::v1::AttentionResponse* resp) {
  return Handle(Rpc::kAttention, ctx, req, resp, PrepareAttention);
}

grpc::ServerUnaryReactor* AttentionServiceImpl::CrossAttention(
    grpc::CallbackServerContext* ctx, const attention::v1::CrossAttentionRequest* req,
    attention::v1::AttentionResponse* resp) {
  return Handle(Rpc::kCrossAttention, ctx, req, resp, PrepareCrossAttention);
}

grpc::ServerUnaryReactor* AttentionServiceImpl::MultiHeadAttention(
    grpc::CallbackServerContext* ctx, const attention::v1::MultiHeadAttentionRequest* req,
    attention::v1::AttentionResponse* resp) {
  return Handle(Rpc::kMultiHeadAttention, ctx, req, resp, PrepareMultiHeadAttention);
}

grpc::ServerUnaryReactor* AttentionServiceImpl::ListModels(
    grpc::CallbackServerContext* ctx, const attention::v1::ListModelsRequest* /*req*/,
    attention::v1::ListModelsResponse* resp) {
  return ServeSimple(Rpc::kListModels, ctx, resp, [this, resp] {
    for (const AttentionModel* m : options_.models->All()) {
      const ModelInfo& info = m->info();
      auto* out = resp->add_models();
      out->set_name(info.name);
      out->set_kind(ModelKindName(info.kind));
      out->set_embed_dim(info.embed_dim);
      out->set_num_heads(info.num_heads);
      out->set_kdim(info.kdim);
      out->set_vdim(info.vdim);
    }
    return Status::Ok();
  });
}

}  // namespace attn::server
