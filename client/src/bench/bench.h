// attention-client bench: a load generator for attention-server, in the
// spirit of ghz and Triton's perf_analyzer. Closed loop at a fixed number of
// calls in flight (or open loop at a fixed rate), over one or more
// connections, with warm-up, a concurrency sweep, latency percentiles and a
// histogram, the server's queue/compute split (from trailing metadata),
// GFLOP/s of attention math, and --verify against a local core computation.
#pragma once

#include <atomic>

#include "attn/status.h"
#include "bench/bench_config.h"
#include "bench/report/bench_report.h"

namespace attn::client {

// Runs the configured load. Stops early (with a partial report) when
// *interrupt becomes true. Fails only on set-up errors (unreachable target,
// unknown model, ...), never because calls failed: those are counted.
StatusOr<BenchReport> RunBench(const BenchConfig& config, const std::atomic<bool>* interrupt);

}  // namespace attn::client
