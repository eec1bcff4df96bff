#include "bench/decode/decode_bench.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "attn/attention.h"
#include "attn/half.h"
#include "attn/kv_cache.h"
#include "session_client.h"
#include "wire/cache_formats.h"

namespace attn::client {
namespace {

namespace v1 = attention::v1;
using Clock = std::chrono::steady_clock;

// A plain read of 512 MiB on every CPU this process may use, best of three:
// the bandwidth a decode step's cache reads are held against. In 2 MiB
// pages, as the server's KV pool maps its pages (AlignedAllocator advises
// transparent huge pages): attention-core-bench's probe read 16% slower
// in 4 KiB pages on a Zen 5 (docs/performance.md).
double MemoryReadGbps(int threads) {
  const size_t words = (size_t{512} << 20) / 8;
  std::vector<uint64_t, AlignedAllocator<uint64_t>> buf(words, 1);
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

// The config's storage in core's terms (its flags take only valid values).
CacheType CacheTypeOf(v1::DataType t) { return *wire::CacheTypeFromWire(t); }
CacheFormat CacheFormatOf(v1::CacheFormat f) { return *wire::CacheFormatFromWire(f, "format"); }

// Bytes one token of every kv head takes in the sessions' caches, keys and
// values (with a quantized side's factors).
double TokenBytes(const DecodeBenchConfig& c) {
  const CacheType t = CacheTypeOf(c.cache_dtype);
  return static_cast<double>(c.hkv * (StoredBytes(CacheFormatOf(c.key_format), t, c.d) +
                                      StoredBytes(CacheFormatOf(c.value_format), t, c.d)));
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

// What one client measured.
struct ClientStats {
  int64_t steps = 0, session_steps = 0, tokens = 0, token_rounds = 0;
  double call_seconds = 0, cache_bytes = 0, attended = 0;  // attended: lengths summed per step
  std::vector<double> step_ms, token_ms;
  std::vector<std::vector<int64_t>> final_tokens;
  int64_t errors = 0, mismatches = 0, verified = 0;
  std::string first_error;
};

// One client: its channel, its sessions, and a replay of layer 0's tokens
// for --verify (each session's K and V as the server stores them).
class DecodeClient {
 public:
  DecodeClient(const DecodeBenchConfig& c, int64_t index, std::shared_ptr<grpc::Channel> channel)
      : c_(c),
        index_(index),
        client_(std::move(channel)),
        rng_(c.seed + static_cast<uint32_t>(index) * 7919u),
        replay_k_(static_cast<size_t>(c.sessions * c.hkv)),
        replay_v_(static_cast<size_t>(c.sessions * c.hkv)) {}

  Status Create() {
    for (int64_t s = 0; s < c_.sessions; ++s) {
      v1::CreateSessionRequest req;
      req.set_session_id("bench-" + std::to_string(getpid()) + "-" + std::to_string(index_) + "-" +
                         std::to_string(s));
      req.set_num_layers(static_cast<int32_t>(c_.layers));
      req.set_num_kv_heads(static_cast<int32_t>(c_.hkv));
      req.set_head_dim(static_cast<int32_t>(c_.d));
      req.set_cache_dtype(c_.cache_dtype);
      req.set_key_format(c_.key_format);
      req.set_value_format(c_.value_format);
      auto info = client_.Create(req, c_.timeout);
      if (!info.ok()) return info.status();
      ids_.push_back(info->session_id());
    }
    return Status::Ok();
  }

  // Every layer of every session filled with `prefill` tokens, keys and
  // values only, a session at a time in chunks of at most 2048 tokens (a
  // message of 16 MiB at Hkv 8, D 128 float32).
  Status Prefill() {
    for (size_t s = 0; s < ids_.size(); ++s) {
      for (int64_t layer = 0; layer < c_.layers; ++layer) {
        for (int64_t at = 0; at < c_.prefill;) {
          const int64_t n = std::min<int64_t>(2048, c_.prefill - at);
          v1::ExtendRequest req = Request(layer, 0, n, static_cast<int64_t>(s), true);
          auto r = client_.Extend(req, c_.timeout);
          if (!r.ok()) return r.status();
          if (layer == 0) Record(n, s);
          at += n;
        }
      }
    }
    tokens_ = c_.prefill;
    return Status::Ok();
  }

  // One token: a step of every session on each layer, in order. Measured
  // tokens count in `st`; an error ends the token.
  void Token(bool measured, ClientStats* st) {
    const int64_t nst = c_.step_tokens;
    const double length = static_cast<double>(tokens_ + nst);  // what each step attends over
    const double step_bytes = static_cast<double>(c_.sessions) * length * TokenBytes(c_);
    double token_s = 0;
    for (int64_t layer = 0; layer < c_.layers; ++layer) {
      const bool fresh = c_.verify && layer == 0;
      v1::ExtendRequest req = Request(layer, nst, nst, -1, fresh);
      const auto t0 = Clock::now();
      auto resp = client_.Extend(req, c_.timeout);
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (!resp.ok()) {
        if (st->errors++ == 0) st->first_error = resp.status().ToString();
        return;
      }
      token_s += s;
      if (layer == 0 && c_.verify) {
        Record(nst, SIZE_MAX);
        if (step_count_++ % 16 == 0) {
          ++st->verified;
          if (!Matches(*resp)) ++st->mismatches;
        }
      }
      if (!measured) continue;
      ++st->steps;
      st->session_steps += c_.sessions;
      st->call_seconds += s;
      st->cache_bytes += step_bytes;
      st->attended += length;
      st->step_ms.push_back(s * 1e3);
    }
    tokens_ += nst;
    if (!measured) return;
    ++st->token_rounds;
    st->tokens += c_.sessions * nst;
    st->token_ms.push_back(token_s * 1e3);
  }

  // Every session back to `prefill` tokens (--hold-length).
  Status Hold() {
    if (tokens_ == c_.prefill) return Status::Ok();
    for (const auto& id : ids_) {
      auto info = client_.Truncate(id, c_.prefill, c_.timeout);
      if (!info.ok()) return info.status();
    }
    for (auto* replay : {&replay_k_, &replay_v_}) {
      for (auto& head : *replay) head.resize(std::min(head.size(), size_t(c_.prefill * c_.d)));
    }
    tokens_ = c_.prefill;
    return Status::Ok();
  }

  // What the server holds of each session, per layer.
  void ReadBack(ClientStats* st) {
    for (const auto& id : ids_) {
      auto info = client_.Get(id, c_.timeout);
      std::vector<int64_t> layers;
      if (info.ok()) layers.assign(info->layer_tokens().begin(), info->layer_tokens().end());
      st->final_tokens.push_back(std::move(layers));
    }
  }

  void Delete() {
    for (const auto& id : ids_) (void)client_.Delete(id, c_.timeout);
  }

 private:
  // A step on `layer` of every session (or of session `only`), with nq
  // queries and nkv new tokens each. `fresh`: new random tensors, kept in
  // queries_/keys_/values_ for the replay; otherwise one of a few tensors
  // made once per layer is sent again (the server's work is the same).
  v1::ExtendRequest Request(int64_t layer, int64_t nq, int64_t nkv, int64_t only, bool fresh) {
    if (!fresh && only < 0) {
      auto& bank = bank_[{layer, nq}];
      if (bank.size() < 4) bank.push_back(Request(layer, nq, nkv, -1, true));
      return bank[static_cast<size_t>(rotation_++ % bank.size())];
    }
    v1::ExtendRequest req;
    req.set_layer(static_cast<int32_t>(layer));
    req.set_causal(true);
    std::normal_distribution<float> n01(0.0f, 1.0f);
    const size_t count = only < 0 ? ids_.size() : 1;
    queries_.assign(count, {});
    keys_.assign(count, {});
    values_.assign(count, {});
    for (size_t s = 0; s < count; ++s) {
      auto fill = [&](std::vector<float>& x, int64_t n) {
        x.resize(static_cast<size_t>(n));
        for (float& e : x) e = Round(n01(rng_), c_.wire);
      };
      fill(queries_[s], c_.hq * nq * c_.d);
      fill(keys_[s], c_.hkv * nkv * c_.d);
      fill(values_[s], c_.hkv * nkv * c_.d);
      v1::SessionStep* st = req.add_steps();
      st->set_session_id(ids_[only < 0 ? s : static_cast<size_t>(only)]);
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

  // The keys and values of the last request (every session's, or session
  // `only`'s) into the layer-0 replay, rounded as the cache stores them.
  void Record(int64_t nkv, size_t only) {
    if (!c_.verify) return;
    for (size_t i = 0; i < keys_.size(); ++i) {
      const size_t s = only == SIZE_MAX ? i : only;
      for (int64_t g = 0; g < c_.hkv; ++g) {
        auto& rk = replay_k_[s * static_cast<size_t>(c_.hkv) + static_cast<size_t>(g)];
        auto& rv = replay_v_[s * static_cast<size_t>(c_.hkv) + static_cast<size_t>(g)];
        const CacheType type = CacheTypeOf(c_.cache_dtype);
        std::vector<float> held(static_cast<size_t>(c_.d));
        for (int64_t t = 0; t < nkv; ++t) {  // as the cache stores each token
          const size_t at = static_cast<size_t>((g * nkv + t) * c_.d);
          StoredValues(CacheFormatOf(c_.key_format), type, &keys_[i][at], c_.d, held.data());
          rk.insert(rk.end(), held.begin(), held.end());
          StoredValues(CacheFormatOf(c_.value_format), type, &values_[i][at], c_.d, held.data());
          rv.insert(rv.end(), held.begin(), held.end());
        }
      }
    }
  }

  // Each step's answer of the last request against core over the replay.
  bool Matches(const v1::ExtendResponse& resp) {
    for (int s = 0; s < resp.results_size(); ++s) {
      const size_t base = static_cast<size_t>(s) * static_cast<size_t>(c_.hkv);
      const int64_t L = static_cast<int64_t>(replay_k_[base].size()) / c_.d;
      std::vector<float> k, v;
      for (int64_t g = 0; g < c_.hkv; ++g) {
        const auto& rk = replay_k_[base + static_cast<size_t>(g)];
        const auto& rv = replay_v_[base + static_cast<size_t>(g)];
        k.insert(k.end(), rk.begin(), rk.end());
        v.insert(v.end(), rv.begin(), rv.end());
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
      // int8 keys meet the query rounded to int16, int8 values the weights
      // (2^-16 of the largest).
      const bool int8 =
          c_.key_format == v1::CACHE_FORMAT_INT8 || c_.value_format == v1::CACHE_FORMAT_INT8;
      const double tol = c_.wire != wire::WireType::kFloat32 ? 2e-2 : int8 ? 5e-4 : 1e-4;
      for (int64_t i = 0; i < want->output.numel(); ++i) {
        if (!(std::abs(got.view.f32()[i] - want->output.data[static_cast<size_t>(i)]) <= tol))
          return false;
      }
    }
    return true;
  }

  const DecodeBenchConfig& c_;
  const int64_t index_;
  SessionClient client_;
  std::mt19937 rng_;
  std::vector<std::string> ids_;
  std::vector<std::vector<float>> queries_, keys_, values_;
  std::vector<std::vector<float>> replay_k_, replay_v_;  // [session * Hkv + head] -> L * D
  std::map<std::pair<int64_t, int64_t>, std::vector<v1::ExtendRequest>> bank_;
  uint64_t rotation_ = 0, step_count_ = 0;
  int64_t tokens_ = 0;  // every layer of every session holds this many
};

// What the clients share: a barrier after their set-up, so that they
// start stepping together, and the time they did.
struct Team {
  std::mutex mu;
  std::condition_variable ready;
  int64_t waiting = 0;
  bool failed = false;  // a client's set-up failed: nobody steps
  Clock::time_point start;
};

// A client's life: create, prefill, wait for every client, step tokens
// until the run ends, read back, delete.
void RunClient(const DecodeBenchConfig& c, DecodeClient* client, Team* team,
               const std::atomic<bool>* interrupt, Status* setup, ClientStats* st) {
  *setup = client->Create();
  if (setup->ok()) *setup = client->Prefill();
  {
    std::unique_lock<std::mutex> lock(team->mu);
    team->failed = team->failed || !setup->ok();
    if (--team->waiting == 0) {
      team->start = Clock::now();
      team->ready.notify_all();
    }
    team->ready.wait(lock, [&] { return team->waiting == 0; });
  }
  if (!team->failed) {
    const auto measure_from = team->start + std::chrono::duration_cast<Clock::duration>(
                                                std::chrono::duration<double>(c.warmup_s));
    const auto measure_to = measure_from + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(c.duration_s));
    while (st->errors < 10 && (interrupt == nullptr || !interrupt->load())) {
      const auto now = Clock::now();
      if (c.requests > 0 ? st->steps >= c.requests : now >= measure_to) break;
      client->Token(now >= measure_from, st);
      if (c.hold_length) {
        const Status held = client->Hold();
        if (!held.ok() && st->errors++ == 0) st->first_error = held.ToString();
      }
    }
    client->ReadBack(st);
  }
  client->Delete();
}

}  // namespace

double DecodeReport::bytes_per_token() const {
  const DecodeBenchConfig& c = config;
  return static_cast<double>(c.layers * c.sessions) * mean_cache_tokens * TokenBytes(c);
}

double DecodeReport::limit_ms_per_token() const {
  return memory_read_gbps > 0 ? bytes_per_token() / (memory_read_gbps * 1e9) * 1e3 : 0;
}

double DecodeReport::limit_tokens_per_s() const {
  const double per_session = bytes_per_token() / static_cast<double>(config.sessions);
  return per_session > 0
             ? memory_read_gbps * 1e9 / per_session * static_cast<double>(config.step_tokens)
             : 0;
}

StatusOr<DecodeReport> RunDecodeBench(const DecodeBenchConfig& c,
                                      const std::atomic<bool>* interrupt) {
  DecodeReport rep;
  rep.config = c;
  rep.machine = DescribeMachine();
  rep.memory_read_gbps = MemoryReadGbps(rep.machine.cpus);
  std::vector<std::unique_ptr<DecodeClient>> clients;
  for (int64_t i = 0; i < c.concurrency; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("attn.decode_client", static_cast<int>(i));  // distinct: a connection each
    // Each connection up before the first call, within the call timeout
    // (one of three clients' CreateSession met UNAVAILABLE on a loaded CI
    // machine, the server up, before the benches waited).
    auto channel = OpenConnectedChannel(c.target, c.channel, c.timeout, args);
    if (!channel.ok()) {
      return Status(channel.status().code(), "bench --op decode: " + channel.status().message() +
                                                 " (client " + std::to_string(i) + ")");
    }
    clients.push_back(std::make_unique<DecodeClient>(c, i, std::move(*channel)));
  }
  const size_t n = clients.size();
  std::vector<ClientStats> stats(n);
  std::vector<Status> setup(n);
  Team team;
  team.waiting = c.concurrency;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back(RunClient, std::cref(c), clients[i].get(), &team, interrupt, &setup[i],
                         &stats[i]);
  }
  for (auto& t : threads) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - team.start).count();
  for (const Status& st : setup) {
    if (!st.ok()) return st;
  }
  std::vector<double> step_ms;
  double attended = 0;
  for (ClientStats& s : stats) {
    rep.steps += s.steps;
    rep.session_steps += s.session_steps;
    rep.tokens += s.tokens;
    rep.token_rounds += s.token_rounds;
    rep.call_seconds += s.call_seconds;
    rep.cache_bytes += s.cache_bytes;
    attended += s.attended;
    if (s.call_seconds > 0) {
      rep.session_steps_per_s += static_cast<double>(s.session_steps) / s.call_seconds;
      rep.tokens_per_s += static_cast<double>(s.tokens) / s.call_seconds;
      rep.cache_gbps += s.cache_bytes / s.call_seconds / 1e9;
    }
    step_ms.insert(step_ms.end(), s.step_ms.begin(), s.step_ms.end());
    rep.token_ms.insert(rep.token_ms.end(), s.token_ms.begin(), s.token_ms.end());
    for (auto& f : s.final_tokens) rep.final_layer_tokens.push_back(std::move(f));
    rep.errors += s.errors;
    rep.mismatches += s.mismatches;
    rep.verified += s.verified;
    if (rep.first_error.empty()) rep.first_error = s.first_error;
  }
  rep.seconds = std::max(0.0, wall - c.warmup_s);
  rep.mean_cache_tokens = rep.steps > 0 ? attended / static_cast<double>(rep.steps) : 0;
  rep.step_p50_ms = Quantile(step_ms, 0.5);
  rep.step_p90_ms = Quantile(step_ms, 0.9);
  rep.step_p99_ms = Quantile(step_ms, 0.99);
  rep.token_p50_ms = Quantile(rep.token_ms, 0.5);
  rep.token_p90_ms = Quantile(rep.token_ms, 0.9);
  rep.token_p99_ms = Quantile(rep.token_ms, 0.99);
  return rep;
}

}  // namespace attn::client
