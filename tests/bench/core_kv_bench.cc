// attention-core-bench's KV-cache rows: the decode kernel over a resident
// cache (format 0: bf16, 1: int8 keys and values, 2: fp8 e4m3 keys and
// values, 3: int4) against BM_MemoryRead (a plain read of 1 GiB with the compute
// threads, the in-run bandwidth reference) and against the same read taken
// right around each row (probe_GBps), and a prefill chunk into a
// session (each format) against the stateless SDPA of the same shape.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "attn/attention.h"
#include "attn/kv_cache.h"
#include "attn/threading.h"

namespace {

std::vector<float> Normal(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// The probe's words in 2 MiB pages, as the KV cache's pool maps its pages
// (AlignedAllocator advises transparent huge pages past 4 MiB). In a
// std::vector's 4 KiB pages BM_MemoryRead read 48.0 GB/s against 57.2 on
// a Zen 5 (medians of 5 interleaved rounds), and the decode rows' ratios
// over it gained what the pool's page size gives their reads.
using Words = std::vector<uint64_t, attn::AlignedAllocator<uint64_t>>;

// Sums buf's words on ComputeThreads() threads, each a contiguous share
// (a plain read: the figure the decode rows are held against).
uint64_t ReadOnTeam(const Words& buf) {
  const size_t words = buf.size();
  const int threads = attn::ComputeThreads();
  std::vector<uint64_t> part(static_cast<size_t>(threads), 0);
  std::vector<std::thread> team;
  for (int t = 0; t < threads; ++t) {
    team.emplace_back([&, t] {
      const size_t lo = words * t / threads, hi = words * (t + 1) / threads;
      uint64_t a = 0, b = 0, c = 0, d = 0;
      for (size_t i = lo; i + 4 <= hi; i += 4) {
        a += buf[i];
        b += buf[i + 1];
        c += buf[i + 2];
        d += buf[i + 3];
      }
      part[static_cast<size_t>(t)] = a + b + c + d;
    });
  }
  for (auto& th : team) th.join();
  uint64_t sum = 0;
  for (uint64_t p : part) sum += p;
  return sum;
}

Words TouchedWords(size_t bytes) {
  Words buf(bytes / 8);
  std::memset(buf.data(), 1, bytes);  // every page mapped before a read is timed
  return buf;
}

// Sums 1 GiB on the compute threads: bytes/s of a plain read.
void BM_MemoryRead(benchmark::State& state) {
  const size_t bytes = size_t{1} << 30;
  const Words buf = TouchedWords(bytes);
  uint64_t sink = 0;
  for (auto _ : state) sink += ReadOnTeam(buf);
  benchmark::DoNotOptimize(sink);
  state.counters["GBps"] = benchmark::Counter(static_cast<double>(bytes) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::to_string(attn::ComputeThreads()) + " threads");
}

// The same read of 256 MiB (eight times the largest L3 here) right before
// and right after a decode row's timed loop: after one read to warm up
// (the first read after other work runs 10-30% slower), the rate of four
// more, the two sides averaged. Neighbours on a shared host move the
// memory's speed by tens of percent within a minute, so a row is held
// against the probe of its own seconds (its probe_GBps counter; the
// summary's "/ adjacent probe") as well as BM_MemoryRead's at the run's
// start.
double AdjacentProbeGBps() {
  static const Words buf = TouchedWords(size_t{256} << 20);
  uint64_t sink = ReadOnTeam(buf);
  constexpr int kReads = 4;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kReads; ++i) sink += ReadOnTeam(buf);
  const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
  benchmark::DoNotOptimize(sink);
  return static_cast<double>(kReads) * static_cast<double>(buf.size() * 8) / 1e9 / dt.count();
}

constexpr int64_t kHq = 32, kHkv = 8, kD = 128;

// A bf16 session, its keys and values in `format` (0: bf16, 1: int8, 2: fp8,
// 3: int4).
attn::KvSessionSpec Spec(const std::string& id, int64_t format = 0) {
  attn::KvSessionSpec s;
  s.session_id = id;
  s.num_kv_heads = kHkv;
  s.head_dim = kD;
  s.cache_type = attn::CacheType::kBFloat16;
  const attn::CacheFormat f[] = {attn::CacheFormat::kAsCacheType, attn::CacheFormat::kInt8,
                                 attn::CacheFormat::kFp8E4M3, attn::CacheFormat::kInt4};
  s.key_format = s.value_format = f[format];
  return s;
}

const char* FormatLabel(int64_t format) {
  return format == 0 ? "bf16" : format == 1 ? "int8" : format == 2 ? "fp8_e4m3" : "int4";
}

// Fills a session's `layer` to `tokens` in chunks of keys and values only.
void Fill(attn::KvCacheStore& store, const std::string& id, int64_t tokens,
          const std::vector<float>& kv, int64_t layer = 0) {
  const int64_t chunk = static_cast<int64_t>(kv.size()) / (kHkv * kD);
  std::vector<float> none;
  for (int64_t at = 0; at < tokens; at += chunk) {
    const int64_t n = std::min(chunk, tokens - at);
    attn::KvStep st;
    st.session_id = id;
    st.query = attn::TensorView::Dense(none.data(), {kHkv, 0, kD});
    // [Hkv, n, D] read through a token stride of `chunk` rows.
    attn::TensorView v{attn::DataType::kFloat32, kv.data(), {kHkv, n, kD}, {chunk * kD, kD, 1}};
    st.key = v;
    st.value = v;
    auto r = store.Extend(layer, {st}, {});
    if (!r.ok()) std::abort();
  }
}

// Decode steps of Hq32/Hkv8/D128 over a cache in `format`: `sessions`
// sessions of L tokens, one query and one new token each, in one Extend.
// Counts the bytes each step reads (codes and factors); the appended token
// is dropped again between iterations (untimed), so L stays put.
//
// A server's step finds its layer's cache cold: the model's other layers
// were read since. So the sessions have as many layers as it takes to pass
// the probe's 256 MiB together (at most 64), and iteration i steps layer
// i mod layers, as an engine calls layer after layer. (One layer read
// again and again partly stays in the L3: 1 x 32k rows 14-35% faster on
// a Zen 5, docs/performance.md.)
constexpr int64_t kColdBytes = int64_t{256} << 20;

int64_t ColdLayers(attn::KvCacheStore& store, int64_t sessions, int64_t L, int64_t format) {
  if (!store.Create(Spec("layer-bytes", format)).ok()) std::abort();
  const int64_t token_bytes = store.Get("", "layer-bytes")->token_bytes;
  (void)store.Delete("", "layer-bytes");
  const int64_t layer = sessions * L * kHkv * token_bytes;
  return std::clamp<int64_t>((kColdBytes + layer - 1) / layer, 1, 64);
}

void BM_KvDecode(benchmark::State& state) {
  const int64_t sessions = state.range(0), L = state.range(1), format = state.range(2);
  attn::KvStoreOptions o;
  o.pool_bytes = int64_t{1100} << 20;
  o.default_max_tokens = 65536;
  attn::KvCacheStore store(o);
  const int64_t layers = ColdLayers(store, sessions, L, format);
  const auto kv = Normal(static_cast<size_t>(kHkv * 4096 * kD), 1);
  std::vector<std::string> ids;
  for (int64_t s = 0; s < sessions; ++s) {
    ids.push_back("s" + std::to_string(s));
    attn::KvSessionSpec spec = Spec(ids.back(), format);
    spec.num_layers = layers;
    if (!store.Create(spec).ok()) std::abort();
    for (int64_t l = 0; l < layers; ++l) Fill(store, ids.back(), L, kv, l);
  }
  const auto q = Normal(static_cast<size_t>(kHq * kD), 2);
  const auto knew = Normal(static_cast<size_t>(kHkv * kD), 3);
  std::vector<attn::KvStep> steps;
  for (const auto& id : ids) {
    steps.push_back({id, attn::TensorView::Dense(q.data(), {kHq, 1, kD}),
                     attn::TensorView::Dense(knew.data(), {kHkv, 1, kD}),
                     attn::TensorView::Dense(knew.data(), {kHkv, 1, kD}), std::nullopt});
  }
  const double before = AdjacentProbeGBps();
  int64_t layer = 0;
  for (auto _ : state) {
    auto r = store.Extend(layer, steps, {});
    layer = (layer + 1) % layers;
    if (!r.ok()) state.SkipWithError(r.status().ToString().c_str());
    state.PauseTiming();
    for (const auto& id : ids) (void)store.Truncate("", id, L);
    state.ResumeTiming();
  }
  const double probe = (before + AdjacentProbeGBps()) / 2.0;
  const double bytes = static_cast<double>(sessions) * static_cast<double>(L + 1) * kHkv *
                       static_cast<double>(store.Get("", ids[0])->token_bytes);
  state.SetLabel(FormatLabel(format));
  state.counters["GBps"] =
      benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["probe_GBps"] = probe;  // a plain number, not a rate
  state.counters["layers"] = static_cast<double>(layers);
  state.counters["steps_per_s"] = benchmark::Counter(static_cast<double>(sessions),
                                                     benchmark::Counter::kIsIterationInvariantRate);
}

// A 2048-token chunk into an empty session (GQA 32/8, D128, causal, bf16
// cache, keys and values in `format`), or (stateless:1)
// ScaledDotProductAttention on the same shape.
void BM_KvPrefill(benchmark::State& state) {
  const bool stateless = state.range(0) != 0;
  const int64_t format = state.range(1);
  const int64_t n = 2048;
  const auto q = Normal(static_cast<size_t>(kHq * n * kD), 1);
  const auto k = Normal(static_cast<size_t>(kHkv * n * kD), 2);
  const auto v = Normal(static_cast<size_t>(kHkv * n * kD), 3);
  attn::KvStoreOptions o;
  o.pool_bytes = int64_t{256} << 20;
  attn::KvCacheStore store(o);
  if (!store.Create(Spec("p", format)).ok()) std::abort();
  state.SetLabel(stateless ? "stateless" : FormatLabel(format));
  for (auto _ : state) {
    if (stateless) {
      attn::ScaledDotProductAttentionOptions so;
      so.masks.causal = true;
      auto r =
          attn::ScaledDotProductAttention(attn::TensorView::Dense(q.data(), {1, kHq, n, kD}),
                                          attn::TensorView::Dense(k.data(), {1, kHkv, n, kD}),
                                          attn::TensorView::Dense(v.data(), {1, kHkv, n, kD}), so);
      benchmark::DoNotOptimize(r);
    } else {
      attn::KvStep st{"p", attn::TensorView::Dense(q.data(), {kHq, n, kD}),
                      attn::TensorView::Dense(k.data(), {kHkv, n, kD}),
                      attn::TensorView::Dense(v.data(), {kHkv, n, kD}), std::nullopt};
      auto r = store.Extend(0, {st}, {});
      if (!r.ok()) state.SkipWithError(r.status().ToString().c_str());
      state.PauseTiming();
      (void)store.Truncate("", "p", 0);
      state.ResumeTiming();
    }
  }
  // The unmasked pairs of a causal square: n (n + 1) / 2 per head.
  const double flops = 2.0 * kHq * (n * (n + 1) / 2.0) * (2 * kD);
  state.counters["GFLOPS"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK(BM_MemoryRead)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KvDecode)
    ->ArgsProduct({{1}, {4096, 32768}, {0, 1, 2, 3}})
    ->ArgsProduct({{32}, {4096}, {0, 1, 2, 3}})
    ->Args({1, 512, 0})
    ->Args({1, 2048, 0})
    ->ArgNames({"sessions", "L", "format"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KvPrefill)
    ->Args({0, 0})
    ->Args({0, 1})
    ->Args({0, 2})
    ->Args({0, 3})
    ->Args({1, 0})
    ->ArgNames({"stateless", "format"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
