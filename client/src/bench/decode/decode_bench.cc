#include "bench/decode/decode_bench.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "attn/attention.h"
#include "attn/half.h"
#include "session_client.h"

namespace attn::client {
namespace {

namespace v1 = attention::v1;
using Clock = std::chrono::steady_clock;

// A plain read of 512 MiB on every CPU this process may use, best of three:
// the bandwidth a decode step's cache reads are held against.
double MemoryReadGbps(int threads) {
  const size_t words = (size_t{512} << 20) / 8;
  std::vector<uint64_t> buf(words, 1);
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    std::vector<uint64_t> sums(static_cast<size_t>(threads));
    const auto t0 = Clock::now();
    std::vector<std::thread> team;
    for (int t = 0; t < threads; ++t) {
      team.emplace_back([&, t] {
        uint64_t a = 0, b = 0;
        for (size_t i = words * t / threads; i + 2 <= words * (t + 1) / threads; i += 2) {
          a += buf[i];
          b += buf[i + 1];
        }
        sums[static_cast<size_t>(t)] = a + b;
      });
    }
    for (auto& th : team) th.join();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (sums[0] == 0) return 0;  // keeps the sums alive
    best = std::max(best, static_cast<double>(words * 8) / s / 1e9);
  }
  return best;
}

float Round(float x, wire::WireType t) {
  if (t != wire::WireType::kFloat16 && t != wire::WireType::kBFloat16) return x;
  const HalfType h = t == wire::WireType::kBFloat16 ? HalfType::kBFloat16 : HalfType::kFloat16;
  uint16_t bits;
  FloatToHalf(h, &x, &bits, 1);
  HalfToFloat(h, &bits, &x, 1);
  return x;
}

wire::WireType CacheWire(v1::DataType t) {
  return t == v1::DATA_TYPE_BFLOAT16  ? wire::WireType::kBFloat16
         : t == v1::DATA_TYPE_FLOAT16 ? wire::WireType::kFloat16
                                      : wire::WireType::kFloat32;
}

// Each session's tokens of layer 0, as the server stores them, for --verify.
struct Replay {
  std::vector<std::vector<float>> k, v;  // [head] -> L * D
};

class DecodeRun {
 public:
  DecodeRun(const DecodeBenchConfig& c, SessionClient* client)
      : c_(c), client_(client), rng_(c.seed), replay_(static_cast<size_t>(c.sessions)) {
    for (auto& r : replay_)
      r.k.resize(static_cast<size_t>(c.hkv)), r.v.resize(static_cast<size_t>(c.hkv));
  }

  Status Create() {
    for (int64_t s = 0; s < c_.sessions; ++s) {
      v1::CreateSessionRequest req;
      req.set_session_id("bench-" + std::to_string(getpid()) + "-" + std::to_string(s));
      req.set_num_layers(static_cast<int32_t>(c_.layers));
      req.set_num_kv_heads(static_cast<int32_t>(c_.hkv));
      req.set_head_dim(static_cast<int32_t>(c_.d));
      req.set_cache_dtype(c_.cache_dtype);
      auto info = client_->Create(req, c_.timeout);
      if (!info.ok()) return info.status();
      ids_.push_back(info->session_id());
    }
    return Status::Ok();
  }

  void Delete() {
    for (const auto& id : ids_) (void)client_->Delete(id, c_.timeout);
  }

  // Fills every session with `prefill` tokens, keys and values only, a
  // session at a time in chunks of at most 2048 tokens (a message of 16 MiB
  // at Hkv 8, D 128 float32).
  Status Prefill() {
    for (size_t s = 0; s < ids_.size(); ++s) {
      for (int64_t at = 0; at < c_.prefill;) {
        const int64_t n = std::min<int64_t>(2048, c_.prefill - at);
        v1::ExtendRequest req = Request(0, n, static_cast<int64_t>(s));
        auto r = client_->Extend(req, c_.timeout);
        if (!r.ok()) return r.status();
        Record(req, n, s);
        at += n;
      }
    }
    tokens_ = c_.prefill;
    return Status::Ok();
  }

  // One step: every session's step_tokens queries and new tokens.
  v1::ExtendRequest Step() { return Request(c_.step_tokens, c_.step_tokens); }
  // The keys and values of `req` (every session's, or only session `only`'s)
  // into the replay.
  void Record(const v1::ExtendRequest& req, int64_t nkv, size_t only = SIZE_MAX) {
    if (!c_.verify) return;
    for (int i = 0; i < req.steps_size(); ++i) {
      const size_t s = only == SIZE_MAX ? static_cast<size_t>(i) : only;
      for (int64_t g = 0; g < c_.hkv; ++g) {
        const auto& k = keys_[static_cast<size_t>(i)];
        const auto& v = values_[static_cast<size_t>(i)];
        auto& rk = replay_[s].k[static_cast<size_t>(g)];
        auto& rv = replay_[s].v[static_cast<size_t>(g)];
        for (int64_t i = 0; i < nkv * c_.d; ++i) {
          rk.push_back(
              Round(k[static_cast<size_t>(g * nkv * c_.d + i)], CacheWire(c_.cache_dtype)));
          rv.push_back(
              Round(v[static_cast<size_t>(g * nkv * c_.d + i)], CacheWire(c_.cache_dtype)));
        }
      }
    }
  }
  void Grew(int64_t n) { tokens_ += n; }
  int64_t tokens() const { return tokens_; }

  // The answer of step s of the last request against core over the replay.
  bool Matches(const v1::ExtendResponse& resp) {
    for (int s = 0; s < resp.results_size(); ++s) {
      const Replay& r = replay_[static_cast<size_t>(s)];
      const int64_t L = static_cast<int64_t>(r.k[0].size()) / c_.d;
      std::vector<float> k, v;
      for (int64_t g = 0; g < c_.hkv; ++g) {
        k.insert(k.end(), r.k[static_cast<size_t>(g)].begin(), r.k[static_cast<size_t>(g)].end());
        v.insert(v.end(), r.v[static_cast<size_t>(g)].begin(), r.v[static_cast<size_t>(g)].end());
      }
      ScaledDotProductAttentionOptions o;
      o.masks.causal = true;
      o.masks.causal_alignment = CausalAlignment::kBottomRight;
      const auto& q = queries_[static_cast<size_t>(s)];
      auto want =
          ScaledDotProductAttention(TensorView::Dense(q.data(), {1, c_.hq, c_.step_tokens, c_.d}),
                                    TensorView::Dense(k.data(), {1, c_.hkv, L, c_.d}),
                                    TensorView::Dense(v.data(), {1, c_.hkv, L, c_.d}), o);
      wire::DecodedTensor got;
      if (!want.ok() ||
          !wire::DecodeTensor(resp.results(s).output(), "output", DataType::kFloat32, 1 << 30, &got)
               .ok() ||
          NumElements(got.view.shape) != want->output.numel()) {
        return false;
      }
      const double tol = c_.wire == wire::WireType::kFloat32 ? 1e-4 : 2e-2;
      for (int64_t i = 0; i < want->output.numel(); ++i) {
        if (!(std::abs(got.view.f32()[i] - want->output.data[static_cast<size_t>(i)]) <= tol))
          return false;
      }
    }
    return true;
  }

  double StepBytes() const {
    const double elem = c_.cache_dtype == v1::DATA_TYPE_FLOAT32 ? 4 : 2;
    return static_cast<double>(c_.sessions) * static_cast<double>(tokens_) *
           static_cast<double>(c_.hkv * 2 * c_.d) * elem;
  }

 private:
  // A step of every session, or of session `only` alone; its tensors are
  // kept in queries_/keys_/values_ by step.
  v1::ExtendRequest Request(int64_t nq, int64_t nkv, int64_t only = -1) {
    v1::ExtendRequest req;
    req.set_causal(true);
    std::normal_distribution<float> n01(0.0f, 1.0f);
    const size_t count = only < 0 ? ids_.size() : 1;
    queries_.assign(count, {});
    keys_.assign(count, {});
    values_.assign(count, {});
    for (size_t s = 0; s < count; ++s) {
      const std::string& id = ids_[only < 0 ? s : static_cast<size_t>(only)];
      auto fill = [&](std::vector<float>& x, int64_t n) {
        x.resize(static_cast<size_t>(n));
        for (float& e : x) e = Round(n01(rng_), c_.wire);
      };
      fill(queries_[s], c_.hq * nq * c_.d);
      fill(keys_[s], c_.hkv * nkv * c_.d);
      fill(values_[s], c_.hkv * nkv * c_.d);
      v1::SessionStep* st = req.add_steps();
      st->set_session_id(id);
      if (nq > 0) {
        wire::EncodeDense({c_.hq, nq, c_.d}, queries_[s].data(), queries_[s].size(), c_.wire,
                          wire::Encoding::kData, st->mutable_query());
      }
      wire::EncodeDense({c_.hkv, nkv, c_.d}, keys_[s].data(), keys_[s].size(), c_.wire,
                        wire::Encoding::kData, st->mutable_key());
      wire::EncodeDense({c_.hkv, nkv, c_.d}, values_[s].data(), values_[s].size(), c_.wire,
                        wire::Encoding::kData, st->mutable_value());
    }
    return req;
  }

  const DecodeBenchConfig& c_;
  SessionClient* client_;
  std::mt19937 rng_;
  std::vector<std::string> ids_;
  std::vector<std::vector<float>> queries_, keys_, values_;
  std::vector<Replay> replay_;
  int64_t tokens_ = 0;
};

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

}  // namespace

StatusOr<DecodeReport> RunDecodeBench(const DecodeBenchConfig& c,
                                      const std::atomic<bool>* interrupt) {
  DecodeReport rep;
  rep.config = c;
  rep.machine = DescribeMachine();
  rep.memory_read_gbps = MemoryReadGbps(rep.machine.cpus);
  auto channel = OpenChannel(c.target, c.channel);
  if (!channel.ok()) return channel.status();
  SessionClient client(*channel);
  DecodeRun run(c, &client);
  Status st = run.Create();
  if (st.ok()) st = run.Prefill();
  if (!st.ok()) {
    run.Delete();
    return st;
  }
  std::vector<double> latencies;
  const auto start = Clock::now();
  const auto measure_from = start + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(c.warmup_s));
  Clock::time_point measured_start{};
  for (int64_t i = 0;; ++i) {
    const auto now = Clock::now();
    const bool measuring = now >= measure_from;
    if (measuring && measured_start == Clock::time_point{}) measured_start = now;
    if (interrupt != nullptr && interrupt->load()) break;
    if (c.requests > 0
            ? rep.steps >= c.requests
            : measuring && now - measured_start >= std::chrono::duration<double>(c.duration_s)) {
      break;
    }
    v1::ExtendRequest req = run.Step();
    const auto t0 = Clock::now();
    auto resp = client.Extend(req, c.timeout);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!resp.ok()) {
      if (rep.errors++ == 0) rep.first_error = resp.status().ToString();
      if (rep.errors >= 10) break;
      continue;
    }
    run.Record(req, c.step_tokens);
    run.Grew(c.step_tokens);
    if (c.verify && i % 16 == 0) {
      ++rep.verified;
      if (!run.Matches(*resp)) ++rep.mismatches;
    }
    if (!measuring) continue;
    ++rep.steps;
    rep.tokens += c.sessions * c.step_tokens;
    rep.cache_bytes += run.StepBytes();
    rep.call_seconds += s;
    latencies.push_back(s * 1e3);
  }
  if (measured_start != Clock::time_point{}) {
    rep.seconds = std::chrono::duration<double>(Clock::now() - measured_start).count();
  }
  run.Delete();
  rep.p50_ms = Quantile(latencies, 0.5);
  rep.p90_ms = Quantile(latencies, 0.9);
  rep.p99_ms = Quantile(latencies, 0.99);
  return rep;
}

std::string DecodeReportText(const DecodeReport& r) {
  const DecodeBenchConfig& c = r.config;
  std::ostringstream o;
  char line[512];
  std::snprintf(
      line, sizeof(line),
      "decode: %lld sessions x %lld prefill, steps of %lld token(s), Hq %lld / Hkv %lld, D %lld, "
      "%s cache, %lld layer(s)\nCPU %s (%d CPUs; engine tier here %s)\n",
      static_cast<long long>(c.sessions), static_cast<long long>(c.prefill),
      static_cast<long long>(c.step_tokens), static_cast<long long>(c.hq),
      static_cast<long long>(c.hkv), static_cast<long long>(c.d),
      c.cache_dtype == v1::DATA_TYPE_FLOAT32   ? "float32"
      : c.cache_dtype == v1::DATA_TYPE_FLOAT16 ? "float16"
                                               : "bfloat16",
      static_cast<long long>(c.layers), r.machine.cpu_model.c_str(), r.machine.cpus,
      r.machine.kernel_tier.c_str());
  o << line;
  std::snprintf(
      line, sizeof(line),
      "steps %lld in %.2f s: %.1f steps/s (Extend calls), %.1f tokens/s; step latency p50 "
      "%.3f ms, p90 %.3f ms, p99 %.3f ms\n"
      "cache read %.2f GB/s (bytes / the calls' time); memory read here %.2f GB/s; ratio %.2f\n",
      static_cast<long long>(r.steps), r.seconds, r.steps_per_s(), r.tokens_per_s(), r.p50_ms,
      r.p90_ms, r.p99_ms, r.cache_gbps(), r.memory_read_gbps,
      r.memory_read_gbps > 0 ? r.cache_gbps() / r.memory_read_gbps : 0.0);
  o << line;
  if (c.verify) {
    o << "verified " << r.verified << " steps against core: " << r.mismatches << " mismatches\n";
  }
  if (r.errors > 0) o << "errors: " << r.errors << " (first: " << r.first_error << ")\n";
  return o.str();
}

std::string DecodeReportJson(const DecodeReport& r) {
  const DecodeBenchConfig& c = r.config;
  std::ostringstream o;
  o.precision(6);
  o << "{\"op\":\"decode\",\"sessions\":" << c.sessions << ",\"prefill\":" << c.prefill
    << ",\"step_tokens\":" << c.step_tokens << ",\"num_heads\":" << c.hq
    << ",\"num_kv_heads\":" << c.hkv << ",\"dim\":" << c.d << ",\"layers\":" << c.layers
    << ",\"cache_dtype\":" << static_cast<int>(c.cache_dtype) << ",\"cpu_model\":\""
    << r.machine.cpu_model << "\",\"cpus\":" << r.machine.cpus << ",\"engine_tier\":\""
    << r.machine.kernel_tier << "\",\"steps\":" << r.steps << ",\"seconds\":" << r.seconds
    << ",\"call_seconds\":" << r.call_seconds << ",\"steps_per_s\":" << r.steps_per_s()
    << ",\"tokens_per_s\":" << r.tokens_per_s() << ",\"p50_ms\":" << r.p50_ms
    << ",\"p90_ms\":" << r.p90_ms << ",\"p99_ms\":" << r.p99_ms
    << ",\"cache_gbps\":" << r.cache_gbps() << ",\"memory_read_gbps\":" << r.memory_read_gbps
    << ",\"verified\":" << r.verified << ",\"mismatches\":" << r.mismatches
    << ",\"errors\":" << r.errors << "}\n";
  return o.str();
}

}  // namespace attn::client
