// attention-client bench: the load. Each level issues calls on gRPC's
// callback API over generic stubs (the request is serialized once), and
// each completion records its sample and, in closed loop, issues the next.
#include <grpcpp/generic/generic_stub.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "bench/bench.h"
#include "bench/client_cpu.h"
#include "bench/metrics_scrape.h"
#include "bench/prepared_calls.h"
#include "oip_call.h"
#include "wire/precision_header.h"
#include "wire/status_mapping.h"
#include "wire/timing_trailer.h"

namespace attn::client {
namespace {

using Clock = std::chrono::steady_clock;

// One level of load: calls issued on gRPC's callback API, each completion
// recording its sample and (closed loop) issuing the next call.
class LevelRun {
 public:
  // `ws[i]` is made from `calls[i]`, picked with probability weights[i].
  LevelRun(const BenchConfig& c, const std::vector<Workload>& ws,
           const std::vector<const BenchConfig*>& calls, const std::vector<double>& weights,
           std::vector<std::unique_ptr<grpc::GenericStub>>& stubs,
           std::vector<std::unique_ptr<grpc::health::v1::Health::Stub>>& health, int concurrency,
           double rate)
      : c_(c),
        ws_(ws),
        calls_(calls),
        pick_(weights.begin(), weights.end()),
        rng_(static_cast<unsigned>(c.seed) + static_cast<unsigned>(concurrency + rate)),
        stubs_(stubs),
        health_(health),
        concurrency_(concurrency),
        rate_(rate) {}

  LevelReport Run(const std::atomic<bool>* interrupt) {
    const auto start = Clock::now();
    if (rate_ > 0) {
      pacer_ = std::thread([this] { Pace(); });
    } else {
      for (int i = 0; i < concurrency_; ++i) Issue(Clock::now());
    }
    // Warm-up, then measure, for a time, a count or until stable; stop
    // early on Ctrl-C.
    auto interrupted = [&] { return interrupt != nullptr && interrupt->load(); };
    while (!interrupted() && Seconds(start) < c_.warmup_s) Sleep();
    MetricsPage before;
    const bool scrape = !c_.metrics_url.empty();
    StatusOr<MetricsPage> scraped = scrape ? ScrapeMetrics(c_.metrics_url) : MetricsPage();
    const CpuSnapshot cpu_before = TakeCpuSnapshot();
    {
      std::lock_guard<std::mutex> lock(mu_);
      measure_start_ = Clock::now();
      measuring_ = true;
    }
    const auto [from_s, to_s] = Measure(interrupted);
    stopping_ = true;
    if (pacer_.joinable()) pacer_.join();
    const CpuSnapshot cpu_after = TakeCpuSnapshot();
    std::unique_lock<std::mutex> lock(mu_);
    dropped_ += static_cast<int64_t>(backlog_.size());  // scheduled, never sent
    backlog_.clear();
    const double measured = std::chrono::duration<double>(Clock::now() - measure_start_).count();
    if (interrupted()) {  // Ctrl-C: do not wait for slow calls; they are not counted
      cancelled_ = true;
      for (Call* call : live_) call->ctx.TryCancel();
    }
    // Every call has a deadline, so this ends; callbacks must not outlive us.
    drained_.wait(lock, [this] { return in_flight_ == 0; });
    if (c_.progress) std::fprintf(stderr, "\r%80s\r", "");
    LevelReport r = Summarise(from_s, std::min(to_s, 1e300),
                              c_.requests > 0 ? LastDoneSeconds()
                              : to_s < 1e300  ? to_s - from_s
                                              : measured);
    r.client = CompareCpu(cpu_before, cpu_after);
    if (scrape) {
      StatusOr<MetricsPage> after = ScrapeMetrics(c_.metrics_url);
      if (scraped.ok() && after.ok()) {
        r.server = CompareMetrics(*scraped, *after);
      } else {
        r.server.error = (scraped.ok() ? after.status() : scraped.status()).message();
      }
    }
    return r;
  }

 private:
  struct Call {
    grpc::ClientContext ctx;
    grpc::ByteBuffer request, response;  // serialized; parsed only to verify
    grpc::health::v1::HealthCheckResponse health;
    Clock::time_point scheduled;  // latency counts from here (open loop: the schedule)
    bool measured = false;
    int entry = 0;
    int64_t index = 0;
  };

  static double Seconds(Clock::time_point since) {
    return std::chrono::duration<double>(Clock::now() - since).count();
  }
  static void Sleep() { std::this_thread::sleep_for(std::chrono::milliseconds(5)); }

  // Measures until the duration, the count, Ctrl-C or (--stability) three
  // agreeing windows; the time span [from, to) of the samples that count
  // (to = infinity: all).
  template <typename Interrupted>
  std::pair<double, double> Measure(const Interrupted& interrupted) {
    auto last_print = Clock::now();
    int64_t last_printed = -1;
    const double stop_at = c_.stability_pct > 0 ? c_.window_s * c_.max_windows : c_.duration_s;
    size_t windows_done = 0;
    while (!interrupted()) {
      const double elapsed = Seconds(measure_start_);
      if (c_.requests > 0 ? measured_issued_.load() >= c_.requests : elapsed >= stop_at) break;
      if (c_.stability_pct > 0 && elapsed >= c_.window_s * (windows_done + 1)) {
        std::lock_guard<std::mutex> lock(mu_);
        const double from = c_.window_s * windows_done, to = from + c_.window_s;
        windows_.push_back(attn::client::Summarise(samples_, from, to, -1, c_.window_s));
        ++windows_done;
        if (Stable(windows_, c_.stability_pct)) return {to - 3 * c_.window_s, to};
      }
      if (c_.progress && Seconds(last_print) >= 0.5) {
        PrintProgress(&last_printed);
        last_print = Clock::now();
      }
      Sleep();
    }
    if (c_.stability_pct > 0 && windows_done > 0) return {0, c_.window_s * windows_done};
    return {0, 1e301};
  }

  double LastDoneSeconds() const {
    return std::chrono::duration<double>(last_done_ - measure_start_).count();
  }

  // Creates the next call under mu_, unless stopping or past --requests.
  // The caller has a slot for it in in_flight_.
  std::shared_ptr<Call> NextCallLocked(Clock::time_point scheduled) {
    if (stopping_) return nullptr;
    auto call = std::make_shared<Call>();
    call->measured = measuring_;
    if (call->measured) {
      if (c_.requests > 0 && measured_issued_ >= c_.requests) return nullptr;
      call->index = measured_issued_++;
    }
    call->entry = ws_.size() > 1 ? pick_(rng_) : 0;
    call->scheduled = scheduled;
    live_.insert(call.get());
    return call;
  }

  // Starts a call in a new slot (the first calls, and open loop). In open
  // loop a call that finds --concurrency calls in flight waits in the
  // backlog and goes out late, when a slot frees; past kOpenLoopCap waiting
  // calls, it is dropped.
  void Issue(Clock::time_point scheduled) {
    std::shared_ptr<Call> call;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (in_flight_ >= concurrency_ || !backlog_.empty()) {  // only in open loop
        if (backlog_.size() < static_cast<size_t>(kOpenLoopCap)) {
          backlog_.push_back(scheduled);
        } else if (measuring_) {
          ++dropped_;
        }
        return;
      }
      call = NextCallLocked(scheduled);
      if (!call) return;
      ++in_flight_;
      CountLagLocked(*call);
    }
    Start(call);
  }

  void CountLagLocked(const Call& call) {
    if (!call.measured || rate_ <= 0) return;
    const double lag_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - call.scheduled).count();
    late_ += lag_ms > 1.0;
    max_lag_ms_ = std::max(max_lag_ms_, lag_ms);
  }

  void Start(const std::shared_ptr<Call>& call) {
    call->ctx.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::microseconds(static_cast<int64_t>(c_.timeout_s * 1e6)));
    const size_t conn = next_conn_++ % stubs_.size();
    auto done = [this, call](grpc::Status st) { Finished(call, st); };
    const Workload& w = ws_[call->entry];
    if (calls_[call->entry]->op == "health") {
      health_[conn]->async()->Check(&call->ctx, &health_req_, &call->health, done);
    } else {
      call->request = w.request;  // shares the slices: no copy
      stubs_[conn]->UnaryCall(&call->ctx, w.method, grpc::StubOptions(), &call->request,
                              &call->response, done);
    }
  }

  // Every 16th measured answer of an entry with an expected output.
  bool Mismatch(const Call& call, bool* checked) const {
    const Workload& w = ws_[call.entry];
    *checked = call.measured && w.expected && call.index % 16 == 0;
    if (!*checked) return false;
    attention::v1::AttentionResponse resp;
    if (!Parse(call.response, calls_[call.entry]->oip, &resp)) return true;
    auto got = FromWire(resp.output(), "output");
    // The server says what arithmetic it used (attn-compute-precision): its
    // auto policy computes BFLOAT16 queries in bf16 on a bf16 matrix tier.
    const auto& meta = call.ctx.GetServerInitialMetadata();
    const auto it = meta.find(wire::kPrecisionHeader);
    const bool bf16 = it != meta.end() && it->second == wire::kPrecisionBfloat16;
    return !got.ok() || got->shape != w.expected->shape ||
           !Close(*got, *w.expected, calls_[call.entry]->dtype, bf16);
  }

  // Records a finished call. In closed loop its slot passes straight to the
  // next call; only when no call follows does in_flight_ drop, and that is
  // the last use of `this` (Run() may return right after).
  void Finished(const std::shared_ptr<Call>& call, const grpc::Status& st) {
    const auto now = Clock::now();
    Sample sample;
    sample.ms = std::chrono::duration<double, std::milli>(now - call->scheduled).count();
    sample.entry = call->entry;
    sample.code = static_cast<int>(st.error_code());
    double queue_us, compute_us;
    if (st.ok() &&
        wire::ServerTiming(call->ctx.GetServerTrailingMetadata(), &queue_us, &compute_us)) {
      sample.queue_ms = static_cast<float>(queue_us / 1e3);
      sample.compute_ms = static_cast<float>(compute_us / 1e3);
    }
    bool checked = false;
    const bool mismatch = st.ok() && Mismatch(*call, &checked);
    std::shared_ptr<Call> next;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (call->measured && !(cancelled_ && st.error_code() == grpc::StatusCode::CANCELLED)) {
        sample.done_s = std::chrono::duration<double>(now - measure_start_).count();
        samples_.push_back(sample);
        if (st.ok() && response_bytes_ == 0) {
          response_bytes_ = static_cast<int64_t>(call->response.Length());
        }
        if (!st.ok() && first_error_.empty()) first_error_ = wire::FromGrpcStatus(st).ToString();
        verified_ += checked;
        mismatches_ += mismatch;
        last_done_ = now;
      }
      live_.erase(call.get());
      if (rate_ <= 0) {
        next = NextCallLocked(Clock::now());  // closed loop: reuse the slot
      } else if (!backlog_.empty() && !stopping_) {
        next = NextCallLocked(backlog_.front());  // open loop: the oldest waiting call
        backlog_.pop_front();
        if (next) CountLagLocked(*next);
      }
      if (!next) {
        --in_flight_;
        if (in_flight_ == 0) drained_.notify_all();
        return;
      }
    }
    Start(next);  // our slot is still counted, so Run() is still waiting
  }

  // The response, native or OIP's (converted).
  static bool Parse(const grpc::ByteBuffer& buffer, bool oip,
                    attention::v1::AttentionResponse* resp) {
    std::vector<grpc::Slice> slices;
    if (!buffer.Dump(&slices).ok()) return false;
    std::string bytes;
    for (const auto& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
    if (!oip) return resp->ParseFromString(bytes);
    inference::ModelInferResponse infer;
    return infer.ParseFromString(bytes) && FromOipResponse(infer, resp).ok();
  }

  // Within float32's error; for a half type, plus the one rounding of the
  // output (the inputs were rounded before the local computation). Computed
  // in bf16 (operands and P rounded to 8 bits, float32 sums), within 2^-5 of
  // the output's largest magnitude: docs/precision.md measures at most
  // 1.04e-2 for N(0, 1) inputs, whose outputs reach about 1.
  static bool Close(const HostArray& got, const HostArray& want, wire::WireType dtype,
                    bool bf16_compute) {
    const double rounding = dtype == wire::WireType::kFloat16    ? std::ldexp(1.0, -11)
                            : dtype == wire::WireType::kBFloat16 ? std::ldexp(1.0, -8)
                                                                 : 0.0;
    double scale = 0;
    for (float x : want.values) scale = std::max(scale, static_cast<double>(std::abs(x)));
    for (size_t i = 0; i < want.values.size(); ++i) {
      const double tol = (bf16_compute ? std::ldexp(1.0, -5) * scale : 0.0) +
                         1e-5 * (std::abs(want.values[i]) + scale) +
                         rounding * std::abs(want.values[i]) + 1e-7;
      if (!(std::abs(got.values[i] - want.values[i]) <= tol)) return false;
    }
    return true;
  }

  // Open loop: calls start on a schedule, whatever the latency. Each call's
  // latency counts from its scheduled time, so a client (or server) that
  // falls behind shows it (the coordinated-omission correction).
  void Pace() {
    std::exponential_distribution<double> gap(rate_);
    auto next = Clock::now();
    while (!stopping_) {
      if (Clock::now() >= next) {
        Issue(next);
        const double seconds = c_.arrival == Arrival::kPoisson ? gap(pace_rng_) : 1.0 / rate_;
        next += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
        continue;
      }
      std::this_thread::sleep_until(std::min(next, Clock::now() + std::chrono::milliseconds(50)));
    }
  }

  void PrintProgress(int64_t* last) {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t errors = 0;
    for (const Sample& x : samples_) errors += x.code != 0;
    const double s =
        std::max(1e-9, std::chrono::duration<double>(Clock::now() - measure_start_).count());
    std::fprintf(stderr, "\r  %s %g: %zu requests, %.1f req/s, %lld errors   ",
                 rate_ > 0 ? "rate" : "concurrency", rate_ > 0 ? rate_ : concurrency_,
                 samples_.size(), static_cast<double>(samples_.size()) / s,
                 static_cast<long long>(errors));
    *last = static_cast<int64_t>(samples_.size());
  }

  LevelReport Summarise(double from_s, double to_s, double seconds) {
    LevelReport r;
    r.concurrency = concurrency_;
    r.target_rps = rate_;
    const LatencySummary all = attn::client::Summarise(samples_, from_s, to_s, -1, seconds);
    r.seconds = all.seconds, r.count = all.count, r.ok = all.ok, r.errors = all.errors;
    r.first_error = first_error_;
    r.rps = all.rps;
    r.min_ms = all.min_ms, r.mean_ms = all.mean_ms, r.p50_ms = all.p50_ms, r.p90_ms = all.p90_ms;
    r.p95_ms = all.p95_ms, r.p99_ms = all.p99_ms, r.max_ms = all.max_ms;
    r.histogram = all.histogram;
    r.server_queue_ms = all.server_queue_ms, r.server_compute_ms = all.server_compute_ms;
    r.first_tenth_ms = all.first_tenth_ms, r.last_tenth_ms = all.last_tenth_ms;
    r.verified = verified_, r.mismatches = mismatches_, r.response_bytes = response_bytes_;
    r.late = late_, r.dropped = dropped_, r.max_lag_ms = max_lag_ms_;
    r.windows = windows_;
    r.stable = Stable(windows_, c_.stability_pct);
    for (size_t i = 0; i < ws_.size(); ++i) {
      const LatencySummary e =
          attn::client::Summarise(samples_, from_s, to_s, static_cast<int>(i), seconds);
      r.gflops += e.rps * ws_[i].flops / 1e9;
      if (ws_.size() > 1) {
        r.entries.push_back(
            {c_.mix[i].name, ws_[i].description, c_.mix[i].weight, e.rps * ws_[i].flops / 1e9, e});
      }
    }
    return r;
  }

  const BenchConfig& c_;
  const std::vector<Workload>& ws_;
  const std::vector<const BenchConfig*>& calls_;
  std::discrete_distribution<int> pick_;  // under mu_
  std::mt19937 rng_, pace_rng_{12345};
  std::vector<std::unique_ptr<grpc::GenericStub>>& stubs_;
  std::vector<std::unique_ptr<grpc::health::v1::Health::Stub>>& health_;
  const int concurrency_;
  const double rate_;  // open loop; 0: closed loop
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
  std::vector<Sample> samples_;
  std::deque<Clock::time_point> backlog_;  // open loop: scheduled, not sent yet
  std::vector<LatencySummary> windows_;
  int64_t verified_ = 0, mismatches_ = 0, response_bytes_ = 0, late_ = 0, dropped_ = 0;
  double max_lag_ms_ = 0;
  std::string first_error_;
};

}  // namespace

StatusOr<BenchReport> RunBench(const BenchConfig& config, const std::atomic<bool>* interrupt) {
  BenchReport report;
  report.config = config;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  std::vector<std::unique_ptr<grpc::health::v1::Health::Stub>> health;
  // Each connection up before the first call (OpenConnectedChannel), within
  // the call timeout or 5 s, whichever is shorter.
  const auto wait = std::chrono::milliseconds(
      static_cast<int64_t>(std::min(config.timeout_s, 5.0) * 1000));
  for (int i = 0; i < config.connections; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("attn.bench_connection", i);  // distinct args: a TCP connection each
    auto channel = OpenConnectedChannel(config.target, config.channel, wait, args);
    if (channel.status().code() == StatusCode::kUnavailable) {
      return Status::FailedPrecondition("cannot reach " + config.target + ": " +
                                        channel.status().message() + " (connection " +
                                        std::to_string(i) + ")");
    }
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
  // One workload per --workload entry, or the command line's own.
  std::vector<const BenchConfig*> calls;
  std::vector<double> weights;
  for (const MixEntry& e : config.mix) calls.push_back(e.call.get()), weights.push_back(e.weight);
  if (config.mix.empty()) calls.push_back(&config), weights.push_back(1);
  std::vector<Workload> workloads;
  double weight_sum = 0, flops = 0, bytes = 0;
  for (double w : weights) weight_sum += w;
  for (size_t i = 0; i < calls.size(); ++i) {
    auto workload = BuildWorkload(*calls[i], client);
    if (!workload.ok()) {
      if (config.mix.empty()) return workload.status();
      return Status(workload.status().code(), "--workload entry '" + config.mix[i].name +
                                                  "': " + workload.status().message());
    }
    flops += weights[i] / weight_sum * workload->flops;
    bytes += weights[i] / weight_sum * static_cast<double>(workload->request_bytes);
    workloads.push_back(std::move(*workload));
  }
  report.workload = config.mix.empty() ? workloads[0].description
                                       : "a mix of " + std::to_string(calls.size()) + " entries";
  report.flops_per_call = flops;
  report.request_bytes = static_cast<int64_t>(bytes);
  report.machine = DescribeMachine();
  // Closed loop: a level per concurrency; open loop: a level per rate.
  const size_t levels = config.rps.empty() ? config.concurrency.size() : config.rps.size();
  for (size_t i = 0; i < levels; ++i) {
    const int concurrency = config.rps.empty() ? config.concurrency[i] : config.concurrency[0];
    const double rate = config.rps.empty() ? 0 : config.rps[i];
    LevelRun run(config, workloads, calls, weights, stubs, health, concurrency, rate);
    report.levels.push_back(run.Run(interrupt));
    if (interrupt != nullptr && interrupt->load()) {
      report.interrupted = true;
      break;
    }
  }
  report.knee = FindKnee(report);
  return report;
}

}  // namespace attn::client
