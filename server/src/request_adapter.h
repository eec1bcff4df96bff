// Turns each RPC's request into a ready-to-run core call: wire checks,
// model or inline projections, options, the cost estimate and the limits.
// Semantic checks (shapes agree, masks broadcast, heads divide) are core's;
// this layer only adapts.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "attention/v1/attention.pb.h"
#include "attn/attention.h"
#include "attn/status.h"
#include "model_registry.h"
#include "request_limits.h"
#include "wire/tensor_codec.h"

namespace attn::server {

// A validated call. Views point into the request, which must outlive it.
struct PreparedCall {
  // Set when the client cancels or the deadline passes; core polls it
  // between blocks and stops.
  std::atomic<bool> cancelled{false};
  std::string model;                                // "" for none, for logs
  std::vector<std::string> fields;                  // the decoded fields, in order, for logs
  wire::Encoding encoding = wire::Encoding::kData;  // of the first input; the response uses it
  AttentionCost cost;
  // Runs the core call with `threads` compute threads; the output goes
  // where `output` says (see IntoResponse), or core allocates it.
  std::function<StatusOr<AttentionResult>(int threads, OutputAllocator output)> compute;
  // Storage behind the views (deque: stable addresses).
  std::deque<wire::DecodedTensor> tensors;
  ProjectionWeights projections;

  // "query[2, 5, 64] key[2, 7, 64]": built only when a log line needs it.
  std::string Shapes() const;
};

Status PrepareAttention(const attention::v1::AttentionRequest& req, const ModelRegistry& models,
                        const RequestLimits& limits, PreparedCall* call);
Status PrepareCrossAttention(const attention::v1::CrossAttentionRequest& req,
                             const ModelRegistry& models, const RequestLimits& limits,
                             PreparedCall* call);
Status PrepareMultiHeadAttention(const attention::v1::MultiHeadAttentionRequest& req,
                                 const ModelRegistry& models, const RequestLimits& limits,
                                 PreparedCall* call);

// Where a call's output goes: with `data` encoding, core writes it straight
// into resp.output's bytes (no copy after compute); with `values`, empty
// (core allocates, EncodeResponse converts).
OutputAllocator IntoResponse(wire::Encoding encoding, attention::v1::AttentionResponse* resp);

// Fills `resp` from a finished call (an output already written through
// IntoResponse stays in place); RESOURCE_EXHAUSTED if the encoded response
// would exceed the message limit.
Status EncodeResponse(const AttentionResult& result, wire::Encoding encoding,
                      const RequestLimits& limits, attention::v1::AttentionResponse* resp);

}  // namespace attn::server
