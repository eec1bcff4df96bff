#include "call/dispatch.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>

#include "call/prepared_call.h"
#include "ops/server_log.h"

namespace attn::server {

namespace {

double SecondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

CallTransport::CallTransport() : start_(Clock::now()), call_(std::make_shared<PreparedCall>()) {}

CallDispatcher::CallDispatcher(const ServiceOptions& options) : options_(options) {}

void CallDispatcher::Completed(Rpc rpc, const PreparedCall* call, const Principal* who,
                               const Status& st, Clock::time_point start, Clock::time_point began,
                               int64_t bytes_in, int64_t bytes_out,
                               const std::function<std::string()>& peer, bool dispatched) {
  const auto end = Clock::now();
  if (dispatched) in_flight_.fetch_sub(1, std::memory_order_relaxed);
  const bool computed = began != Clock::time_point{};
  const std::string& model = call != nullptr ? call->model : std::string();
  if (ServerMetrics* m = options_.metrics) {
    m->RecordCall(rpc, m->ModelIndex(model), static_cast<int>(st.code()),
                  SecondsBetween(start, end), computed ? SecondsBetween(start, began) : -1,
                  computed ? SecondsBetween(began, end) : -1, bytes_in, bytes_out,
                  call != nullptr && call->precision == UsedPrecision::kBFloat16);
    m->RecordPrincipalCall(who != nullptr ? PrincipalLabel(who->name) : "unauthenticated", rpc,
                           static_cast<int>(st.code()));
  }
  // Check first: building the shapes and the peer costs more than a small
  // call's compute, and debug is usually off.
  if (!spdlog::should_log(st.ok() ? spdlog::level::debug : spdlog::level::warn)) return;
  AccessRecord r;
  r.rpc = RpcName(rpc);
  r.protocol = ProtocolName(rpc);
  r.model = model.empty() ? "-" : model;
  r.principal = who == nullptr ? "?" : who->name.empty() ? "-" : who->name;
  if (call != nullptr) r.shapes = call->Shapes();
  if (call != nullptr && computed) r.precision = PrecisionName(call->precision);
  r.code = StatusCodeName(st.code());
  r.latency_ms = SecondsBetween(start, end) * 1e3;
  r.peer = peer();
  r.reason = st.message();
  LogAccess(r);
}

StatusOr<Principal> CallDispatcher::Authenticate(const CallerCredentials& who) const {
  Principal p;
  if (options_.auth != nullptr) {
    const std::string* a = who.authorization;
    ATTN_ASSIGN_OR_RETURN(p.name, options_.auth->Check(a != nullptr ? a->data() : nullptr,
                                                       a != nullptr ? a->size() : 0));
    p.kind = Principal::Kind::kToken;
  } else if (options_.certificate_principals && !who.certificate_subject.empty()) {
    p.name = who.certificate_subject;
    p.kind = Principal::Kind::kCertificate;
  }
  return p;
}

int CallDispatcher::LargeCallThreads(int cpus) {
  const int in_flight = in_flight_.load(std::memory_order_relaxed);
  const int64_t now = Clock::now().time_since_epoch().count();
  if (in_flight > 1) last_overlap_.store(now, std::memory_order_relaxed);
  return ThreadsForLargeCall(cpus, in_flight, Clock::duration(now - last_overlap_.load()));
}

int CallDispatcher::ThreadsForLargeCall(int cpus, int in_flight, Clock::duration since_overlap) {
  if (since_overlap >= kOverlapMemory) return cpus;
  return std::max(1, cpus / std::max(2, in_flight));
}

void CallDispatcher::Dispatch(CallTransport* t, const CallerCredentials& who,
                              const std::function<Status(PreparedCall*)>& prepare) {
  // Counted from here until Finish(), rejected calls included.
  const int in_flight = in_flight_.fetch_add(1, std::memory_order_relaxed) + 1;
  arrived_.fetch_add(1, std::memory_order_relaxed);
  auto principal = Authenticate(who);
  if (!principal.ok()) return t->Finish(principal.status(), {});
  t->call()->principal = std::move(*principal);
  t->call()->deadline = t->deadline();
  t->call()->authenticated = true;
  if (in_flight > options_.max_inflight) {
    t->set_admission_refused();
    return t->Finish(Status::ResourceExhausted(
                         "server: " + std::to_string(options_.max_inflight) +
                         " calls in flight already, the limit (--max-inflight); retry later"),
                     {});
  }
  const std::shared_ptr<PreparedCall>& call = t->call();
  Status st = prepare(call.get());
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
        if (!out.ok()) return out.status();
        // What core computed in (a call permitted bf16 may still be float32).
        call->precision = out->compute_precision == ComputePrecision::kBFloat16
                              ? UsedPrecision::kBFloat16
                              : UsedPrecision::kFloat32;
        return call->respond(*out);
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

}  // namespace attn::server
