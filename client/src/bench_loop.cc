// attention-client bench: the load. Each level issues calls on gRPC's
// callback API over generic stubs (the request is serialized once), and
// each completion records its sample and, in closed loop, issues the next.
#include <grpcpp/generic/generic_stub.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "bench.h"
#include "bench_workload.h"
#include "oip_call.h"
#include "wire/status_mapping.h"
#include "wire/timing_trailer.h"

namespace attn::client {
namespace {

using Clock = std::chrono::steady_clock;

// One level of load: calls issued on gRPC's callback API, each completion
// recording its sample and (closed loop) issuing the next call.
class LevelRun {
 public:
  LevelRun(const BenchConfig& c, const Workload& w,
           std::vector<std::unique_ptr<grpc::GenericStub>>& stubs,
           std::vector<std::unique_ptr<grpc::health::v1::Health::Stub>>& health, int concurrency)
      : c_(c), w_(w), stubs_(stubs), health_(health), concurrency_(concurrency) {}

  LevelReport Run(const std::atomic<bool>* interrupt) {
    const auto start = Clock::now();
    if (c_.rps > 0) {
      pacer_ = std::thread([this] { Pace(); });
    } else {
      for (int i = 0; i < concurrency_; ++i) Issue();
    }
    // Warm-up, then measure, for a time or a count; stop early on Ctrl-C.
    auto interrupted = [&] { return interrupt != nullptr && interrupt->load(); };
    while (!interrupted() && Seconds(start) < c_.warmup_s) Sleep();
    {
      std::lock_guard<std::mutex> lock(mu_);
      measure_start_ = Clock::now();
      measuring_ = true;
    }
    int64_t last_printed = -1;
    auto last_print = Clock::now();
    while (!interrupted()) {
      if (c_.requests > 0 ? measured_issued_.load() >= c_.requests
                          : Seconds(measure_start_) >= c_.duration_s) {
        break;
      }
      if (c_.progress && Seconds(last_print) >= 0.5) {
        PrintProgress(&last_printed);
        last_print = Clock::now();
      }
      Sleep();
    }
    stopping_ = true;
    if (pacer_.joinable()) pacer_.join();
    std::unique_lock<std::mutex> lock(mu_);
    const double measured = std::chrono::duration<double>(Clock::now() - measure_start_).count();
    if (interrupted()) {  // Ctrl-C: do not wait for slow calls; they are not counted
      cancelled_ = true;
      for (Call* call : live_) call->ctx.TryCancel();
    }
    // Every call has a deadline, so this ends; callbacks must not outlive us.
    drained_.wait(lock, [this] { return in_flight_ == 0; });
    if (c_.progress) std::fprintf(stderr, "\r%80s\r", "");
    return Summarise(c_.requests > 0
                         ? std::chrono::duration<double>(last_done_ - measure_start_).count()
                         : measured);
  }

 private:
  struct Call {
    grpc::ClientContext ctx;
    grpc::ByteBuffer request, response;  // serialized; parsed only to verify
    grpc::health::v1::HealthCheckResponse health;
    Clock::time_point start;
    bool measured = false;
    int64_t index = 0;
  };

  static double Seconds(Clock::time_point since) {
    return std::chrono::duration<double>(Clock::now() - since).count();
  }
  static void Sleep() { std::this_thread::sleep_for(std::chrono::milliseconds(5)); }

  // Creates the next call under mu_, unless stopping or past --requests.
  // The caller has a slot for it in in_flight_.
  std::shared_ptr<Call> NextCallLocked() {
    if (stopping_) return nullptr;
    auto call = std::make_shared<Call>();
    call->measured = measuring_;
    if (call->measured) {
      if (c_.requests > 0 && measured_issued_ >= c_.requests) return nullptr;
      call->index = measured_issued_++;
    }
    live_.insert(call.get());
    return call;
  }

  // Starts a call in a new slot (the first calls, and open loop).
  void Issue() {
    std::shared_ptr<Call> call;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (in_flight_ >= concurrency_) return;  // only reachable in open loop
      call = NextCallLocked();
      if (!call) return;
      ++in_flight_;
    }
    Start(call);
  }

  void Start(const std::shared_ptr<Call>& call) {
    call->ctx.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::microseconds(static_cast<int64_t>(c_.timeout_s * 1e6)));
    const size_t conn = next_conn_++ % stubs_.size();
    call->start = Clock::now();
    auto done = [this, call](grpc::Status st) { Finished(call, st); };
    if (c_.op == "health") {
      health_[conn]->async()->Check(&call->ctx, &health_req_, &call->health, done);
    } else {
      call->request = w_.request;  // shares the slices: no copy
      stubs_[conn]->UnaryCall(&call->ctx, w_.method, grpc::StubOptions(), &call->request,
                              &call->response, done);
    }
  }

  // Records a finished call. In closed loop its slot passes straight to the
  // next call; only when no call follows does in_flight_ drop, and that is
  // the last use of `this` (Run() may return right after).
  void Finished(const std::shared_ptr<Call>& call, const grpc::Status& st) {
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - call->start).count();
    double queue_ms = -1, compute_ms = -1;
    if (st.ok()) {
      double queue_us, compute_us;
      if (wire::ServerTiming(call->ctx.GetServerTrailingMetadata(), &queue_us, &compute_us)) {
        queue_ms = queue_us / 1e3, compute_ms = compute_us / 1e3;
      }
    }
    bool mismatch = false, checked = false;
    if (st.ok() && call->measured && w_.expected && call->index % 16 == 0) {
      checked = true;
      attention::v1::AttentionResponse resp;
      mismatch = !Parse(call->response, &resp);
      if (!mismatch) {
        auto got = FromWire(resp.output(), "output");
        mismatch =
            !got.ok() || got->shape != w_.expected->shape || !Close(*got, *w_.expected, c_.dtype);
      }
    }
    std::shared_ptr<Call> next;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (call->measured && !(cancelled_ && st.error_code() == grpc::StatusCode::CANCELLED)) {
        ++count_;
        if (st.ok()) {
          latencies_.push_back(ms);
          if (response_bytes_ == 0) response_bytes_ = static_cast<int64_t>(call->response.Length());
          if (queue_ms >= 0) queue_sum_ += queue_ms, compute_sum_ += compute_ms, ++timed_;
        } else {
          ++errors_[wire::GrpcCodeName(st.error_code())];
          if (first_error_.empty()) {
            first_error_ = wire::FromGrpcStatus(st).ToString();
          }
        }
        verified_ += checked;
        mismatches_ += mismatch;
        last_done_ = Clock::now();
      }
      live_.erase(call.get());
      if (c_.rps <= 0) next = NextCallLocked();  // closed loop: reuse the slot
      if (!next) {
        --in_flight_;
        if (in_flight_ == 0) drained_.notify_all();
        return;
      }
    }
    Start(next);  // our slot is still counted, so Run() is still waiting
  }

  // The response, native or OIP's (converted).
  bool Parse(const grpc::ByteBuffer& buffer, attention::v1::AttentionResponse* resp) const {
    std::vector<grpc::Slice> slices;
    if (!buffer.Dump(&slices).ok()) return false;
    std::string bytes;
    for (const auto& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
    if (!c_.oip) return resp->ParseFromString(bytes);
    inference::ModelInferResponse infer;
    return infer.ParseFromString(bytes) && FromOipResponse(infer, resp).ok();
  }

  // Within float32's error; for a half type, plus the one rounding of the
  // output (the inputs were rounded before the local computation).
  static bool Close(const HostArray& got, const HostArray& want, wire::WireType dtype) {
    const double rounding = dtype == wire::WireType::kFloat16    ? std::ldexp(1.0, -11)
                            : dtype == wire::WireType::kBFloat16 ? std::ldexp(1.0, -8)
                                                                 : 0.0;
    double scale = 0;
    for (float x : want.values) scale = std::max(scale, static_cast<double>(std::abs(x)));
    for (size_t i = 0; i < want.values.size(); ++i) {
      const double tol =
          1e-5 * (std::abs(want.values[i]) + scale) + rounding * std::abs(want.values[i]) + 1e-7;
      if (!(std::abs(got.values[i] - want.values[i]) <= tol)) return false;
    }
    return true;
  }

  // Open loop: calls start on a fixed schedule, whatever the latency.
  void Pace() {
    const auto period = std::chrono::duration<double>(1.0 / c_.rps);
    auto next = Clock::now();
    while (!stopping_) {
      Issue();
      next += std::chrono::duration_cast<Clock::duration>(period);
      std::this_thread::sleep_until(next);
    }
  }

  void PrintProgress(int64_t* last) {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t errors = 0;
    for (const auto& [code, n] : errors_) errors += n;
    const double s =
        std::max(1e-9, std::chrono::duration<double>(Clock::now() - measure_start_).count());
    std::fprintf(stderr, "\r  concurrency %d: %lld requests, %.1f req/s, %lld errors   ",
                 concurrency_, static_cast<long long>(count_), static_cast<double>(count_) / s,
                 static_cast<long long>(errors));
    *last = count_;
  }

  LevelReport Summarise(double seconds) {
    LevelReport r;
    r.concurrency = concurrency_;
    r.seconds = std::max(seconds, 1e-9);
    r.count = count_;
    r.ok = static_cast<int64_t>(latencies_.size());
    r.errors = errors_;
    r.first_error = first_error_;
    r.rps = static_cast<double>(r.ok) / r.seconds;
    r.gflops = r.rps * w_.flops / 1e9;
    r.verified = verified_;
    r.response_bytes = response_bytes_;
    r.mismatches = mismatches_;
    if (timed_ > 0)
      r.server_queue_ms = queue_sum_ / timed_, r.server_compute_ms = compute_sum_ / timed_;
    if (latencies_.empty()) return r;
    std::sort(latencies_.begin(), latencies_.end());
    auto pct = [&](double p) {
      const size_t i = static_cast<size_t>(std::ceil(p / 100.0 * latencies_.size())) - 1;
      return latencies_[std::min(i, latencies_.size() - 1)];
    };
    r.min_ms = latencies_.front();
    r.max_ms = latencies_.back();
    double sum = 0;
    for (double x : latencies_) sum += x;
    r.mean_ms = sum / latencies_.size();
    r.p50_ms = pct(50), r.p90_ms = pct(90), r.p95_ms = pct(95), r.p99_ms = pct(99);
    // Ten log-spaced buckets from min to max.
    const double lo = std::max(r.min_ms, 1e-3), hi = std::max(r.max_ms, lo * 1.0001);
    const double ratio = std::pow(hi / lo, 1.0 / 10);
    size_t j = 0;
    for (int b = 1; b <= 10; ++b) {
      const double upper = b == 10 ? hi : lo * std::pow(ratio, b);
      int64_t n = 0;
      while (j < latencies_.size() && latencies_[j] <= upper) ++n, ++j;
      r.histogram.emplace_back(upper, n);
    }
    r.histogram.back().second += static_cast<int64_t>(latencies_.size() - j);
    return r;
  }

  const BenchConfig& c_;
  const Workload& w_;
  std::vector<std::unique_ptr<grpc::GenericStub>>& stubs_;
  std::vector<std::unique_ptr<grpc::health::v1::Health::Stub>>& health_;
  const int concurrency_;
  const grpc::health::v1::HealthCheckRequest health_req_;
  std::thread pacer_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> measured_issued_{0};  // written under mu_
  std::set<Call*> live_;                     // calls in flight, to cancel on Ctrl-C
  bool cancelled_ = false;
  std::atomic<uint64_t> next_conn_{0};
  std::mutex mu_;
  std::condition_variable drained_;
  int in_flight_ = 0;
  bool measuring_ = false;
  Clock::time_point measure_start_ = Clock::now(), last_done_ = Clock::now();
  int64_t count_ = 0, verified_ = 0, mismatches_ = 0, timed_ = 0, response_bytes_ = 0;
  double queue_sum_ = 0, compute_sum_ = 0;
  std::vector<double> latencies_;
  std::map<std::string, int64_t> errors_;
  std::string first_error_;
};

}  // namespace

StatusOr<BenchReport> RunBench(const BenchConfig& config, const std::atomic<bool>* interrupt) {
  BenchReport report;
  report.config = config;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  std::vector<std::unique_ptr<grpc::health::v1::Health::Stub>> health;
  for (int i = 0; i < config.connections; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("attn.bench_connection", i);  // distinct args: a TCP connection each
    auto channel = OpenChannel(config.target, config.channel, args);
    if (!channel.ok()) return channel.status();
    channels.push_back(std::move(*channel));
    stubs.push_back(std::make_unique<grpc::GenericStub>(channels.back()));
    health.push_back(grpc::health::v1::Health::NewStub(channels.back()));
  }
  // Never released: gRPC 1.51 shares one callback completion queue among the
  // channels that use the callback API and tears it down when the last of
  // them goes, even while one of its threads is still finishing a completion
  // (ASan: double free in grpc_cq_internal_unref, right after a run). Keeping
  // the bench's channels for the life of the process avoids the race.
  {
    static auto* kept = new std::vector<std::shared_ptr<grpc::Channel>>();
    static std::mutex kept_mu;
    std::lock_guard<std::mutex> lock(kept_mu);
    kept->insert(kept->end(), channels.begin(), channels.end());
  }
  AttentionClient client(channels.front());
  std::string status;
  auto st = client.Health("", &status, std::chrono::seconds(5));
  if (!st.ok()) {
    return Status::FailedPrecondition("cannot reach " + config.target + ": " + st.error_message());
  }
  auto workload = BuildWorkload(config, client);
  if (!workload.ok()) return workload.status();
  report.workload = workload->description;
  report.flops_per_call = workload->flops;
  report.request_bytes = workload->request_bytes;
  for (int level : config.concurrency) {
    LevelRun run(config, *workload, stubs, health, level);
    report.levels.push_back(run.Run(interrupt));
    if (interrupt != nullptr && interrupt->load()) {
      report.interrupted = true;
      break;
    }
  }
  return report;
}

}  // namespace attn::client
