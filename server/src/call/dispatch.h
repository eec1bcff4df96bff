// The call path every protocol shares (CallDispatcher::Dispatch): token,
// admission, checks, a CPU, compute, the response, then metrics and the
// access line. A protocol front end (attention_v1/, oip/) only adapts: it
// describes how its answer goes back as a CallTransport (a gRPC reactor,
// call/grpc_call.h; an HTTP handler, oip/oip_http.cc) and hands Dispatch a
// `prepare` that checks and views its request (call/prepared_call.h). One
// log line per call (debug), errors at warn, each naming the RPC.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>

#include "call/compute_scheduler.h"
#include "call/request_limits.h"
#include "models/model_registry.h"
#include "ops/principal.h"
#include "ops/server_metrics.h"
#include "ops/token_auth.h"

namespace attn::server {

class HeldMemory;
struct PreparedCall;
using Clock = std::chrono::steady_clock;

struct ServiceOptions {
  // Must outlive the dispatcher.
  const ModelRegistry* models = nullptr;
  ComputeScheduler* scheduler = nullptr;
  RequestLimits limits;
  // Calls held at once (arrival to answer), all protocols together; more
  // get RESOURCE_EXHAUSTED before their request is even looked at.
  int max_inflight = 256;
  // Optional; must outlive the dispatcher. With `auth`, every call needs a
  // valid bearer token, and the token's name is the call's principal. With
  // `metrics`, every call is counted.
  const TokenAuth* auth = nullptr;
  // Mutual TLS: without `auth`, a client certificate's subject is the
  // call's principal.
  bool certificate_principals = false;
  ServerMetrics* metrics = nullptr;
  // Optional; must outlive the dispatcher. With it, gRPC calls count the
  // bytes they hold (requests, unsent answers) and are refused over its quota.
  HeldMemory* held = nullptr;
};

// How one call's answer goes back (a gRPC reactor, an HTTP handler).
// Dispatch calls Finish() exactly once, then never touches it again.
class CallTransport {
 public:
  CallTransport();
  virtual ~CallTransport() = default;
  // `st` OK: the response is filled. `began`: when the call reached a CPU
  // (default: it never did). The transport reports the call (Completed).
  virtual void Finish(const Status& st, Clock::time_point began) = 0;
  // When the caller stops waiting.
  virtual std::chrono::system_clock::time_point deadline() const = 0;

  const std::shared_ptr<PreparedCall>& call() const { return call_; }
  Clock::time_point start() const { return start_; }
  // Set by Dispatch when admission (in flight, queue) refused the call.
  bool admission_refused() const { return admission_refused_; }
  void set_admission_refused() { admission_refused_ = true; }

 private:
  bool admission_refused_ = false;
  const Clock::time_point start_;
  std::shared_ptr<PreparedCall> call_;
};

class CallDispatcher {
 public:
  explicit CallDispatcher(const ServiceOptions& options);

  // Requests below this many FLOPs run on one thread (on the transport's
  // thread when a CPU is free); larger ones on compute workers, with
  // ThreadsForLargeCall's threads.
  static constexpr double kParallelFlops = 16e6;
  // How long an overlap of calls keeps large calls on a share of the CPUs.
  static constexpr std::chrono::milliseconds kOverlapMemory{500};
  // A large call gets every CPU while calls have not overlapped for
  // kOverlapMemory (a lone client, one call at a time: the lowest latency).
  // Under concurrent load it gets the CPUs split among the calls in flight
  // (at least 2 ways): each call's transport (reading, parsing, writing its
  // answer, one thread) then runs beside another call's computation instead
  // of leaving CPUs idle, which raised large-call throughput on 2 CPUs from
  // about 0.80 to 0.87-0.92 of in-process (docs/performance.md, "row 3").
  static int ThreadsForLargeCall(int cpus, int in_flight, Clock::duration since_overlap);

  // The path every attention call takes, whatever its protocol: the
  // principal (Authenticate), admission, `prepare(call)` (which checks the
  // request and sets the call's compute, output and respond; the call's
  // principal is set), a CPU, compute, respond; then t->Finish().
  void Dispatch(CallTransport* t, const CallerCredentials& who,
                const std::function<Status(PreparedCall*)>& prepare);

  // The caller's principal: with tokens, the name of the token it sent (or
  // UNAUTHENTICATED); else, with mutual TLS, its certificate's subject;
  // else the anonymous principal.
  StatusOr<Principal> Authenticate(const CallerCredentials& who) const;

  // A finished call, reported by its transport: metrics and the access
  // line, and, with `dispatched`, its in-flight slot given back. `call`
  // null: no model, no shapes; `who` null: no principal known (it failed
  // before); `began` default: it never reached a CPU; `peer` is called only
  // when a line is logged.
  void Completed(Rpc rpc, const PreparedCall* call, const Principal* who, const Status& st,
                 Clock::time_point start, Clock::time_point began, int64_t bytes_in,
                 int64_t bytes_out, const std::function<std::string()>& peer,
                 bool dispatched = true);

  const ServiceOptions& options() const { return options_; }

  // Calls dropped before computing because their deadline passed or the
  // client cancelled while they waited for a CPU.
  int64_t calls_skipped() const { return skipped_.load(); }
  // Calls from arrival until their answer is handed to the transport.
  int calls_in_flight() const { return in_flight_.load(std::memory_order_relaxed); }
  // Calls that ever arrived (metadata calls aside).
  int64_t calls_arrived() const { return arrived_.load(std::memory_order_relaxed); }

 private:
  int LargeCallThreads(int cpus);

  const ServiceOptions options_;
  std::atomic<int64_t> last_overlap_{std::numeric_limits<int64_t>::min() / 2};  // steady ticks
  std::atomic<int64_t> skipped_{0};
  std::atomic<int> in_flight_{0};
  std::atomic<int64_t> arrived_{0};
};

}  // namespace attn::server
