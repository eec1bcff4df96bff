// attention.v1's three attention RPCs as calls: each request becomes a
// CallRequest (call/prepared_call.h), and a finished call becomes an
// AttentionResponse, its output written in place where it can be
// (in_place_output.h).
#pragma once

#include "attention/v1/attention.pb.h"
#include "attention_v1/in_place_output.h"
#include "attn/attention.h"
#include "attn/status.h"
#include "call/prepared_call.h"
#include "call/request_limits.h"
#include "models/model_registry.h"

namespace attn::server {

// attention.v1's three RPCs, through PrepareCall.
Status PrepareAttention(const attention::v1::AttentionRequest& req, const ModelRegistry& models,
                        const RequestLimits& limits, PreparedCall* call);
Status PrepareCrossAttention(const attention::v1::CrossAttentionRequest& req,
                             const ModelRegistry& models, const RequestLimits& limits,
                             PreparedCall* call);
Status PrepareMultiHeadAttention(const attention::v1::MultiHeadAttentionRequest& req,
                                 const ModelRegistry& models, const RequestLimits& limits,
                                 PreparedCall* call);

// Where a call's output goes: with FLOAT32 `data`, core writes it straight
// into `out`'s slice, which is sent as is (no copy after compute);
// otherwise empty (core allocates, EncodeResponse converts).
OutputAllocator IntoResponse(const PreparedCall& call, InPlaceOutput* out);

// Fills `resp` from a finished call, floats as call.output_type (an output
// written through IntoResponse is left out: InPlaceOutput sends it); RESOURCE_EXHAUSTED
// if the encoded response would exceed the message limit.
Status EncodeResponse(const AttentionResult& result, const PreparedCall& call,
                      const RequestLimits& limits, attention::v1::AttentionResponse* resp);

}  // namespace attn::server
