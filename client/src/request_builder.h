// The one request builder of attention-client: every command and the bench
// describe a call as a CallSpec, and this turns it into the RPC's request.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "attention/v1/attention.pb.h"
#include "attn/status.h"
#include "call_spec.h"
#include "host_array.h"
#include "inference/open_inference_grpc.pb.h"

namespace attn::client {

// A built request: the message of `op` (or of OIP's ModelInfer), and its
// gRPC method path.
struct AttentionCall {
  std::string op;
  bool oip = false;
  attention::v1::AttentionRequest attention;
  attention::v1::CrossAttentionRequest cross;
  attention::v1::MultiHeadAttentionRequest mha;
  inference::ModelInferRequest infer;  // with oip

  const google::protobuf::Message& message() const;
  std::string method() const;  // "/attention.v1.AttentionService/MultiHeadAttention"
};

// The variants as attention.v1's AttentionOptions (slopes and sinks as
// float32 in `encoding`); ExtendRequest's options too.
void SetAttentionOptions(const AttentionVariants& v, Encoding encoding,
                         attention::v1::AttentionOptions* o);

// INVALID_ARGUMENT for a spec the RPC cannot carry (no query, a scale for
// mha, a cross call without an encoder), naming the flag.
StatusOr<AttentionCall> BuildCall(const CallSpec& spec);

// Random N(0, stddev) inputs for `spec.op`: query [B, Lq, E]; for cross the
// encoder [B, Lk, kdim]; for attention and mha key [B, Lk, kdim] and value
// [B, Lk, vdim] only when Lk != Lq (else self-attention). Drawn in that
// order from `rng`, so a seed gives the same inputs everywhere.
struct InputSizes {
  int64_t batch = 1, seq_q = 1, seq_k = 1, embed_dim = 1, kdim = 1, vdim = 1;
};
void FillRandomInputs(const InputSizes& sizes, std::mt19937& rng, CallSpec* spec);

}  // namespace attn::client
