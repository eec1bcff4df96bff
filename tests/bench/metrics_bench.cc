// What a call pays for metrics: ServerMetrics::RecordCall from 1 and 2
// threads (each thread on its own shard), and a scrape's Render.
//   build/bin/attention-metrics-bench
#include <benchmark/benchmark.h>

#include "ops/server_metrics.h"

namespace {

attn::server::ServerMetrics& Metrics() {
  static auto* m = new attn::server::ServerMetrics(
      {{"demo-attention", attn::ModelKind::kAttention, 64, 1, 64, 64},
       {"demo-mha-small", attn::ModelKind::kMultiHeadAttention, 64, 4, 64, 64}});
  return *m;
}

void BM_RecordCall(benchmark::State& state) {
  auto& m = Metrics();
  const int model = m.ModelIndex("demo-mha-small");
  double t = 1e-5;
  for (auto _ : state) {
    m.RecordCall(attn::server::Rpc::kMultiHeadAttention, model, 0, t, t * 0.1, t * 0.8, 8300, 4200);
    t = t < 1 ? t * 1.01 : 1e-5;  // walk over the buckets
  }
}
BENCHMARK(BM_RecordCall)->Threads(1)->Threads(2)->UseRealTime();

void BM_Render(benchmark::State& state) {
  auto& m = Metrics();
  attn::server::MetricsGauges g;
  for (auto _ : state) benchmark::DoNotOptimize(m.Render(g));
}
BENCHMARK(BM_Render);

}  // namespace

BENCHMARK_MAIN();
