// attention-client bench --workload FILE: a JSON or YAML list of weighted
// entries, each a call of its own:
//
//   - {name: small, weight: 70, op: mha, model: demo-mha-small, seq_q: 16}
//   - {name: cross, weight: 20, op: cross, model: demo-cross-attention, seq_q: 128}
//   - {name: sdpa, weight: 10, op: attention, seq_q: 2048, dim: 64, num_heads: 8,
//      causal: true, dtype: float16}
//
// Keys: name, weight (> 0; default 1), op, model, batch, seq_q, seq_k, dim,
// num_heads, causal, padded_keys, encoding, dtype, protocol, data. An entry
// starts from the command line's call flags and overrides what it gives.
#pragma once

#include <string>
#include <vector>

#include "attn/json.h"
#include "attn/status.h"
#include "bench/bench_config.h"

namespace attn::client {

// The entries of the file at `path` (.json, or .yaml/.yml), over `base`.
// INVALID_ARGUMENT naming the file, the entry and the key for a bad one.
StatusOr<std::vector<MixEntry>> ReadWorkloadFile(const std::string& path, const BenchConfig& base);

// The same from a parsed document (a list, or {"workload": list}); `where`
// names it in errors.
StatusOr<std::vector<MixEntry>> WorkloadFromJson(const JsonValue& doc, const BenchConfig& base,
                                                 const std::string& where);

}  // namespace attn::client
