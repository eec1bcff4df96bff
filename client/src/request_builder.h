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
#include "host_array.h"
#include "inference/open_inference_grpc.pb.h"

namespace attn::client {

struct CallSpec {
  std::string op;  // attention | cross | mha
  std::string model;
  bool oip = false;  // --protocol oip: an Open Inference Protocol ModelInfer call
  Encoding encoding = Encoding::kData;
  // The float tensors' wire type (--dtype); half types travel as data.
  wire::WireType dtype = wire::WireType::kFloat32;
  HostArray query;                      // cross: the decoder
  std::optional<HostArray> key, value;  // cross: key is the encoder (value unused)
  std::optional<HostArray> key_padding_mask, attn_bias;
  std::optional<float> scale;  // attention and cross only
  int64_t num_heads = 0;       // mha; 0 takes the model's
  bool causal = false, return_weights = false, per_head_weights = false;
  // Inline projections: q, k, v, out weights then q, k, v, out biases
  // (nn.Linear layout); empty for none. out_* travel for mha only.
  std::vector<HostArray> projections;
};

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

// --dtype's choices, and the wire type of one ("float32" for anything else).
inline const std::vector<std::string> kDtypeNames = {"float32", "float16", "bfloat16"};
wire::WireType DtypeByName(const std::string& name);
const char* DtypeName(wire::WireType type);

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
