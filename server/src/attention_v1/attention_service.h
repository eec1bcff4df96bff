// attention.v1.AttentionService on gRPC's callback API, and the call path
// every protocol shares (Dispatch): token, admission, checks, a CPU,
// compute, the response, then metrics and the access line.
//
// A handler only adapts: it checks and views the request (request_adapter,
// oip_adapter), queues the core call on the ComputeScheduler and returns; a
// compute worker runs the call, encodes the response and finishes it. One
// log line per call (debug), errors at warn, each naming the RPC.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>

#include "attention/v1/attention.grpc.pb.h"
#include "compute_scheduler.h"
#include "model_registry.h"
#include "request_limits.h"
#include "server_metrics.h"
#include "token_auth.h"

namespace attn::server {

class HeldMemory;
struct PreparedCall;
using Clock = std::chrono::steady_clock;

struct ServiceOptions {
  // Must outlive the service.
  const ModelRegistry* models = nullptr;
  ComputeScheduler* scheduler = nullptr;
  RequestLimits limits;
  // Calls held at once (arrival to answer), all protocols together; more
  // get RESOURCE_EXHAUSTED before their request is even looked at.
  int max_inflight = 256;
  // Optional; must outlive the service. With `auth`, every call needs a
  // valid bearer token. With `metrics`, every call is counted.
  const TokenAuth* auth = nullptr;
  ServerMetrics* metrics = nullptr;
  // Optional; must outlive the service. With it, gRPC calls count the bytes
  // they hold (requests, unsent answers) and are refused over its quota.
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
  explicit AttentionServiceImpl(const ServiceOptions& options);

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
  // about 0.80 to 0.87-0.92 of in-process (README, "row 3").
  static int ThreadsForLargeCall(int cpus, int in_flight, Clock::duration since_overlap);

  // The path every attention call takes, whatever its protocol: the token
  // (`authorization`: the header's value, null when none came), admission,
  // `prepare(call)` (which checks the request and sets the call's compute,
  // output and respond), a CPU, compute, respond; then t->Finish().
  void Dispatch(CallTransport* t, const std::string* authorization,
                const std::function<Status(PreparedCall*)>& prepare);

  // A gRPC attention call on Dispatch: the reactor finishes the RPC and adds
  // the timing trailer. `bytes_in` is the request's size and `resp` the
  // answer's bytes, which `prepare`'s respond fills, for metrics.
  grpc::ServerUnaryReactor* Serve(Rpc rpc, grpc::CallbackServerContext* ctx, int64_t bytes_in,
                                  const grpc::ByteBuffer* resp,
                                  const std::function<Status(PreparedCall*)>& prepare);

  // A gRPC call that never reaches a CPU (metadata, readiness): token check
  // (unless `open`, as for probes), then `answer()`, then the access line
  // and metrics.
  grpc::ServerUnaryReactor* ServeSimple(Rpc rpc, grpc::CallbackServerContext* ctx,
                                        const google::protobuf::MessageLite* resp,
                                        const std::function<Status()>& answer, bool open = false);

  // OK, or UNAUTHENTICATED; `authorization` as for Dispatch.
  Status Authenticate(const std::string* authorization) const;

  // A finished call, reported by its transport: metrics and the access
  // line, and, with `dispatched`, its in-flight slot given back. `call`
  // null: no model, no shapes; `began` default: it never reached a CPU;
  // `peer` is called only when a line is logged.
  void Completed(Rpc rpc, const PreparedCall* call, const Status& st, Clock::time_point start,
                 Clock::time_point began, int64_t bytes_in, int64_t bytes_out,
                 const std::function<std::string()>& peer, bool dispatched = true);

  const ServiceOptions& options() const { return options_; }

  // Calls dropped before computing because their deadline passed or the
  // client cancelled while they waited for a CPU.
  int64_t calls_skipped() const { return skipped_.load(); }
  // Calls from arrival until their answer is handed to the transport.
  int calls_in_flight() const { return in_flight_.load(std::memory_order_relaxed); }
  // Calls that ever arrived (metadata calls aside).
  int64_t calls_arrived() const { return arrived_.load(std::memory_order_relaxed); }

 private:
  template <typename Request, typename Prepare>
  grpc::ServerUnaryReactor* Handle(Rpc rpc, grpc::CallbackServerContext* ctx,
                                   const grpc::ByteBuffer* req, grpc::ByteBuffer* resp,
                                   Prepare prepare);

  int LargeCallThreads(int cpus);

  const ServiceOptions options_;
  std::atomic<int64_t> last_overlap_{std::numeric_limits<int64_t>::min() / 2};  // steady ticks
  std::atomic<int64_t> skipped_{0};
  std::atomic<int> in_flight_{0};
  std::atomic<int64_t> arrived_{0};
};

// The value of the "authorization" metadata of a gRPC call, or null.
const std::string* AuthorizationOf(grpc::CallbackServerContext* ctx, std::string* storage);

}  // namespace attn::server
