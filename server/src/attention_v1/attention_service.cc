#include "attention_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>

#include "held_memory.h"
#include "raw_messages.h"
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

CallTransport::CallTransport() : start_(Clock::now()), call_(std::make_shared<PreparedCall>()) {}

const std::string* AuthorizationOf(grpc::CallbackServerContext* ctx, std::string* storage) {
  const auto& md = ctx->client_metadata();
  const auto it = md.find("authorization");
  if (it == md.end()) return nullptr;
  storage->assign(it->second.data(), it->second.size());
  return storage;
}

// One gRPC call's reactor: it finishes the call (timing trailer, access
// line, metrics), tells the call when gRPC cancels it (client cancel or
// deadline: queued work is dropped, running work stops between blocks), and
// holds the call's in-flight slot until its answer is handed to gRPC. (Not
// until OnDone: under load gRPC runs OnDone hundreds of calls late, long
// after the answer went out, and counting those would refuse calls the
// server has room for.) With a HeldMemory, the call's bytes count there from
// arrival until OnDone: the request and its parsed copy, then the request
// and the serialized answer, which gRPC keeps until its client reads it.
class CallReactor final : public grpc::ServerUnaryReactor, public CallTransport {
 public:
  CallReactor(AttentionServiceImpl* service, Rpc rpc, grpc::CallbackServerContext* ctx,
              int64_t bytes_in, const grpc::ByteBuffer* resp)
      : service_(service), rpc_(rpc), ctx_(ctx), bytes_in_(bytes_in), resp_(resp) {
    if (HeldMemory* h = service_->options().held) {
      peer_ = ctx->peer();
      Hold(h, 2 * bytes_in_);
    }
  }

  void OnCancel() override { call()->cancelled = true; }
  void OnDone() override {
    if (HeldMemory* h = service_->options().held) Hold(h, -held_);
    delete this;
  }
  // Both reactions above are trivial and never block, so gRPC may run them
  // inline on the thread that completed the call. By default it hands every
  // OnDone and OnCancel to its executor thread: a futex wake-up and a
  // context switch per call, and OnDone ran hundreds of calls late under load.
  // (gRPC marks this hook as internal; its own trivial reactors use it the
  // same way.)
  bool InternalInlineable() override { return true; }

  std::chrono::system_clock::time_point deadline() const override { return ctx_->deadline(); }
  const std::string& peer() const { return peer_; }
  int64_t held() const { return held_; }

  void Finish(const Status& st, Clock::time_point began) override {
    if (began != Clock::time_point{}) {
      // Where the time went, for load testers: waiting for a CPU, computing.
      ctx_->AddTrailingMetadata(wire::kTimingTrailer,
                                wire::TimingTrailerValue(began - start(), Clock::now() - began));
    }
    HeldMemory* held = service_->options().held;
    const int64_t bytes_out = st.ok() && (service_->options().metrics != nullptr || held != nullptr)
                                  ? static_cast<int64_t>(resp_->Length())
                                  : 0;
    grpc::CallbackServerContext* ctx = ctx_;
    service_->Completed(rpc_, call().get(), st, start(), began, bytes_in_, bytes_out,
                        [ctx] { return ctx->peer(); });
    // The parsed request and the typed answer are done with (the answer
    // went into gRPC's buffer): free them now, not when gRPC is done.
    call()->keep_alive.reset();
    if (held != nullptr) Hold(held, bytes_out - bytes_in_);
    // gRPC may run OnDone, and delete this, inside Finish.
    grpc::ServerUnaryReactor::Finish(wire::ToGrpcStatus(st));
  }

 private:
  void Hold(HeldMemory* h, int64_t bytes) {
    h->Add(peer_, bytes);
    held_ += bytes;
  }

  AttentionServiceImpl* const service_;
  const Rpc rpc_;
  grpc::CallbackServerContext* const ctx_;
  const int64_t bytes_in_;
  const grpc::ByteBuffer* const resp_;  // the serialized answer
  std::string peer_;                    // with a HeldMemory only
  int64_t held_ = 0;
};

AttentionServiceImpl::AttentionServiceImpl(const ServiceOptions& options) : options_(options) {}

void AttentionServiceImpl::Completed(Rpc rpc, const PreparedCall* call, const Status& st,
                                     Clock::time_point start, Clock::time_point began,
                                     int64_t bytes_in, int64_t bytes_out,
                                     const std::function<std::string()>& peer, bool dispatched) {
  const auto end = Clock::now();
  if (dispatched) in_flight_.fetch_sub(1, std::memory_order_relaxed);
  const bool computed = began != Clock::time_point{};
  const std::string& model = call != nullptr ? call->model : std::string();
  if (ServerMetrics* m = options_.metrics) {
    m->RecordCall(rpc, m->ModelIndex(model), static_cast<int>(st.code()),
                  SecondsBetween(start, end), computed ? SecondsBetween(start, began) : -1,
                  computed ? SecondsBetween(began, end) : -1, bytes_in, bytes_out);
  }
  // Check first: building the shapes and the peer costs more than a small
  // call's compute, and debug is usually off.
  if (!spdlog::should_log(st.ok() ? spdlog::level::debug : spdlog::level::warn)) return;
  AccessRecord r;
  r.rpc = RpcName(rpc);
  r.protocol = ProtocolName(rpc);
  r.model = model.empty() ? "-" : model;
  if (call != nullptr) r.shapes = call->Shapes();
  r.code = StatusCodeName(st.code());
  r.latency_ms = SecondsBetween(start, end) * 1e3;
  r.peer = peer();
  r.reason = st.message();
  LogAccess(r);
}

Status AttentionServiceImpl::Authenticate(const std::string* authorization) const {
  if (options_.auth == nullptr) return Status::Ok();
  if (authorization == nullptr) return options_.auth->Check(nullptr, 0);
  return options_.auth->Check(authorization->data(), authorization->size());
}

int AttentionServiceImpl::LargeCallThreads(int cpus) {
  const int in_flight = in_flight_.load(std::memory_order_relaxed);
  const int64_t now = Clock::now().time_since_epoch().count();
  if (in_flight > 1) last_overlap_.store(now, std::memory_order_relaxed);
  return ThreadsForLargeCall(cpus, in_flight, Clock::duration(now - last_overlap_.load()));
}

int AttentionServiceImpl::ThreadsForLargeCall(int cpus, int in_flight,
                                              Clock::duration since_overlap) {
  if (since_overlap >= kOverlapMemory) return cpus;
  return std::max(1, cpus / std::max(2, in_flight));
}

void AttentionServiceImpl::Dispatch(CallTransport* t, const std::string* authorization,
                                    const std::function<Status(PreparedCall*)>& prepare) {
  // Counted from here until Finish(), rejected calls included.
  const int in_flight = in_flight_.fetch_add(1, std::memory_order_relaxed) + 1;
  arrived_.fetch_add(1, std::memory_order_relaxed);
  Status st = Authenticate(authorization);
  if (!st.ok()) return t->Finish(st, {});
  if (in_flight > options_.max_inflight) {
    t->set_admission_refused();
    return t->Finish(Status::ResourceExhausted(
                         "server: " + std::to_string(options_.max_inflight) +
                         " calls in flight already, the limit (--max-inflight); retry later"),
                     {});
  }
  const std::shared_ptr<PreparedCall>& call = t->call();
  st = prepare(call.get());
  if (!st.ok()) return t->Finish(st, {});
  ComputeScheduler* scheduler = options_.scheduler;
  const bool small = call->cost.flops < kParallelFlops;
  const int threads = small ? 1 : LargeCallThreads(scheduler->cpus());
  auto run = [this, t, call](int granted) {
    const auto began = Clock::now();
    Status result;
    if (call->cancelled || std::chrono::system_clock::now() > t->deadline()) {
      // Nobody is waiting for this answer any more: do not compute it.
      ++skipped_;
      const auto waited_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(began - t->start()).count();
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
    t->Finish(result, began);
  };
  // A small call with a free CPU runs right here, on the transport's thread;
  // anything else waits its turn on a compute worker.
  if (small && scheduler->TryAcquire(1)) {
    run(1);
    scheduler->Release(1);
  } else if (!scheduler->Submit(threads, std::move(run))) {
    t->set_admission_refused();
    t->Finish(Status::ResourceExhausted("server: the compute queue is full (--max-queue " +
                                        std::to_string(scheduler->max_queue()) + "); retry later"),
              {});
  }
}

grpc::ServerUnaryReactor* AttentionServiceImpl::Serve(
    Rpc rpc, grpc::CallbackServerContext* ctx, int64_t bytes_in, const grpc::ByteBuffer* resp,
    const std::function<Status(PreparedCall*)>& prepare) {
  auto* reactor = new CallReactor(this, rpc, ctx, bytes_in, resp);
  std::string storage;
  if (options_.held == nullptr) {
    Dispatch(reactor, AuthorizationOf(ctx, &storage), prepare);
    return reactor;
  }
  Dispatch(reactor, AuthorizationOf(ctx, &storage), [&](PreparedCall* call) {
    Status st = options_.held->Admit(reactor->peer(), reactor->held());
    if (!st.ok()) {
      reactor->set_admission_refused();
      return st;
    }
    return prepare(call);
  });
  return reactor;
}

grpc::ServerUnaryReactor* AttentionServiceImpl::ServeSimple(
    Rpc rpc, grpc::CallbackServerContext* ctx, const google::protobuf::MessageLite* resp,
    const std::function<Status()>& answer, bool open) {
  const auto start = Clock::now();
  std::string storage;
  Status st = open ? Status::Ok() : Authenticate(AuthorizationOf(ctx, &storage));
  if (st.ok()) st = answer();
  const int64_t bytes_out =
      st.ok() && options_.metrics != nullptr ? static_cast<int64_t>(resp->ByteSizeLong()) : 0;
  Completed(
      rpc, nullptr, st, start, {}, 0, bytes_out, [ctx] { return ctx->peer(); }, false);
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(wire::ToGrpcStatus(st));
  return reactor;
}

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
  const RequestLimits* limits = &options_.limits;
  const ModelRegistry* models = options_.models;
  return Serve(rpc, ctx, static_cast<int64_t>(req->Length()), resp, [&](PreparedCall* call) {
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
  return ServeSimple(Rpc::kListModels, ctx, &answer, [&] {
    ATTN_RETURN_IF_ERROR(parsed);
    for (const AttentionModel* m : options_.models->All()) {
      const ModelInfo& info = m->info();
      auto* out = answer.add_models();
      out->set_name(info.name);
      out->set_kind(ModelKindName(info.kind));
      out->set_embed_dim(info.embed_dim);
      out->set_num_heads(info.num_heads);
      out->set_kdim(info.kdim);
      out->set_vdim(info.vdim);
    }
    return SerializeInto(answer, resp);
  });
}

}  // namespace attn::server
