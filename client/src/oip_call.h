// attention-client --protocol oip: a call spec as an Open Inference Protocol
// ModelInferRequest, and its answer back as the native response the rest of
// the client prints and checks.
//
// OIP models: a server-side model (--model) computes multi-head attention
// with its own heads; without --model, `attention` calls the built-in
// scaled_dot_product_attention. Inline weights are attention.v1's only.
#pragma once

#include "attention/v1/attention.pb.h"
#include "attn/status.h"
#include "call_spec.h"
#include "inference/open_inference_grpc.pb.h"

namespace attn::client {

inline constexpr char kOipMethod[] = "/inference.GRPCInferenceService/ModelInfer";

// INVALID_ARGUMENT, naming the flag, for what OIP cannot carry.
StatusOr<inference::ModelInferRequest> BuildOipRequest(const CallSpec& spec);

// The outputs `output` and `weights` of `resp` as an AttentionResponse
// (raw bytes or fp32_contents; FP16/BF16 stay half, as data).
Status FromOipResponse(const inference::ModelInferResponse& resp,
                       attention::v1::AttentionResponse* out);

}  // namespace attn::client
