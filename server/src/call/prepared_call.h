// Turns each request, whatever its protocol, into a ready-to-run core call:
// wire checks, model or inline projections, options, the cost estimate and
// the limits. A protocol front end describes its request as a CallRequest
// (attention_v1/attention_v1_adapter.h, oip/oip_adapter.h); from there every
// protocol takes the same path (call/dispatch.h). Semantic checks (shapes agree,
// masks broadcast, heads divide) are core's; this layer only adapts.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attention/v1/attention.pb.h"
#include "attn/attention.h"
#include "attn/status.h"
#include "call/request_limits.h"
#include "models/model_registry.h"
#include "ops/principal.h"
#include "wire/tensor_codec.h"
#include "wire/tensor_data.h"

namespace attn::server {

// Which computation: SDPA (projected single-head when a model or inline
// weights are given), cross-attention, or multi-head attention.
enum class CallOp { kAttention, kCrossAttention, kMultiHeadAttention };

enum class RequestedPrecision { kUnspecified, kFloat32, kBFloat16 };

// The arithmetic a call computes in: what it asked for, else the server's
// policy; bfloat16 only where `bf16_available` (the CPU's matrix
// instructions and core's kernels: Bf16ComputeAvailable()), float32
// otherwise, which every request permits.
enum class UsedPrecision { kFloat32, kBFloat16 };
UsedPrecision ResolvePrecision(RequestedPrecision requested, PrecisionPolicy policy,
                               bool bf16_query, bool bf16_available);
// "float32" or "bfloat16".
const char* PrecisionName(UsedPrecision p);
// The core option for a resolved precision (core may still compute a call
// in float32, e.g. one that returns the weights; AttentionResult says).
ComputePrecision CorePrecision(UsedPrecision p);

// One call as a protocol carries it, not yet checked. Tensors point into
// the protocol's message.
struct CallRequest {
  CallOp op = CallOp::kAttention;
  std::string model;  // "" for none
  // query alone is self-attention; for kCrossAttention, query is the
  // decoder and key the encoder (value unused).
  std::optional<wire::WireTensor> query, key, value, key_padding_mask, attn_bias;
  const char* query_field = "query";
  const char* key_field = "key";
  // Inline weights (attention.v1 only); null for none.
  const attention::v1::Projections* projections = nullptr;
  bool causal = false;
  std::optional<float> scale;
  bool return_weights = false, per_head_weights = false;
  int64_t num_heads = 0;     // kMultiHeadAttention: 0 takes the model's
  int64_t num_kv_heads = 0;  // kMultiHeadAttention: 0 takes the model's (or num_heads)
  // The attention variants (attention.v1's AttentionOptions, OIP's
  // parameters and inputs), as core takes them.
  CausalAlignment causal_alignment = CausalAlignment::kTopLeft;
  std::optional<int64_t> window_left, window_right;
  std::optional<float> softcap;
  std::optional<wire::WireTensor> alibi_slopes, sink_logits;
  bool return_lse = false;
  // AttentionOptions.compute_precision / OIP's compute_precision.
  RequestedPrecision precision = RequestedPrecision::kUnspecified;
  // A packed batch (kAttention without weights only): core checks them.
  std::vector<int64_t> cu_seqlens_q, cu_seqlens_k;
};

// A validated call. Views point into the request, which must outlive it.
struct PreparedCall {
  // Set when the client cancels or the deadline passes; core polls it
  // between blocks and stops.
  std::atomic<bool> cancelled{false};
  // The call's deadline (max: none); set before prepare runs.
  std::chrono::system_clock::time_point deadline = std::chrono::system_clock::time_point::max();
  // Who is calling; set (and `authenticated`) before prepare runs.
  Principal principal;
  bool authenticated = false;
  std::string model;                                // "" for none, for logs
  std::vector<std::string> fields;                  // the decoded fields, in order, for logs
  wire::Encoding encoding = wire::Encoding::kData;  // of the first input; the response uses it
  wire::WireType output_type = wire::WireType::kFloat32;  // the query's; the response's floats
  AttentionCost cost;
  UsedPrecision precision = UsedPrecision::kFloat32;  // what the call computes in
  // Runs the core call with `threads` compute threads; the output goes
  // where `output` says (see IntoResponse), or core allocates it.
  std::function<StatusOr<AttentionResult>(int threads, OutputAllocator output)> compute;
  // Set by the protocol's front end: where core writes the output (empty:
  // core allocates it), and how a finished result becomes the response.
  OutputAllocator output;
  std::function<Status(const AttentionResult&)> respond;
  // What the views point into when the front end owns it (the parsed
  // request of a raw gRPC method), held for the call's life.
  std::shared_ptr<void> keep_alive;
  // attention.v1 parsed without copying tensor data: where each Tensor's
  // bytes lie in the request (wire/tensor_data.h); null when copied.
  const wire::TensorData* tensor_data = nullptr;
  // Storage behind the views (deque: stable addresses).
  std::deque<wire::DecodedTensor> tensors;
  ProjectionWeights projections;  // inline weights (views into the request)
  // The projections the call applies: a model's (not copied) or
  // `projections` above; null for none.
  const ProjectionWeights* weights = nullptr;

  // "query[2, 5, 64] key[2, 7, 64]": built only when a log line needs it.
  std::string Shapes() const;
};

// Checks and plans `req`; on OK, `call` is ready to compute.
Status PrepareCall(const CallRequest& req, const ModelRegistry& models, const RequestLimits& limits,
                   PreparedCall* call);

// RESOURCE_EXHAUSTED when a response of `bytes` would exceed the message limit.
Status CheckResponseBytes(double bytes, const RequestLimits& limits);

}  // namespace attn::server
