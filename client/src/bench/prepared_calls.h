// attention-client bench: the workload, built once before the load: the
// request (serialized once: every call sends the same bytes), its FLOP
// count, and for --verify the expected output, computed locally with core.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <optional>
#include <string>

#include "attention_client.h"
#include "attn/status.h"
#include "bench/bench_config.h"
#include "host_array.h"

namespace attn::client {

struct Workload {
  std::string description;            // e.g. "mha demo-mha-small query[1, 16, 64] heads=4"
  double flops = 0;                   // of the attention math, per call
  std::optional<HostArray> expected;  // for --verify
  std::string method;                 // "/attention.v1.AttentionService/..."
  grpc::ByteBuffer request;           // a copy shares its slices: no per-call serialization
  int64_t request_bytes = 0;          // serialized
};

// The FLOPs per call of a server-side model that is not known locally, from
// its shapes (weights q [E, E], k [E, kdim], v [E, vdim], out [E, E]): what
// core's EstimateMultiHeadAttention counts, with no weights allocated.
double RemoteModelFlops(const BenchConfig& config, int64_t e, int64_t kdim, int64_t vdim,
                        bool out_projection);

// Builds the workload of `config` (ListModels through `client` for --model).
StatusOr<Workload> BuildWorkload(const BenchConfig& config, AttentionClient& client);

}  // namespace attn::client
