#include "request_builder.h"

#include "oip_call.h"

namespace attn::client {
namespace {

// The fields every request type shares.
template <typename Request>
void SetShared(const CallSpec& s, Request* req) {
  req->set_model(s.model);
  req->set_causal(s.causal);
  req->set_return_weights(s.return_weights);
  if (s.key_padding_mask) {  // BOOL whatever the array was read as
    const HostArray& m = *s.key_padding_mask;
    wire::EncodeDense(m.shape, m.values.data(), m.values.size(), wire::WireType::kBool, s.encoding,
                      req->mutable_key_padding_mask());
  }
  if (s.attn_bias) *req->mutable_attn_bias() = ToWire(*s.attn_bias, s.encoding, s.dtype);
  if (s.projections.empty()) return;  // an empty field next to --model reads as both
  attention::v1::Projections* p = req->mutable_projections();
  const auto& w = s.projections;
  *p->mutable_q_weight() = ToWire(w[0], s.encoding, s.dtype);
  *p->mutable_k_weight() = ToWire(w[1], s.encoding, s.dtype);
  *p->mutable_v_weight() = ToWire(w[2], s.encoding, s.dtype);
  *p->mutable_q_bias() = ToWire(w[4], s.encoding, s.dtype);
  *p->mutable_k_bias() = ToWire(w[5], s.encoding, s.dtype);
  *p->mutable_v_bias() = ToWire(w[6], s.encoding, s.dtype);
  if (s.op == "mha") {
    *p->mutable_out_weight() = ToWire(w[3], s.encoding, s.dtype);
    *p->mutable_out_bias() = ToWire(w[7], s.encoding, s.dtype);
  }
}

// AttentionOptions, when any variant is asked for.
template <typename Request>
void SetOptions(const CallSpec& s, Request* req) {
  if (s.variants.any()) SetAttentionOptions(s.variants, s.encoding, req->mutable_options());
}

template <typename Request>
void SetQueryKeyValue(const CallSpec& s, Request* req) {
  *req->mutable_query() = ToWire(s.query, s.encoding, s.dtype);
  if (s.key) *req->mutable_key() = ToWire(*s.key, s.encoding, s.dtype);
  if (s.value) *req->mutable_value() = ToWire(*s.value, s.encoding, s.dtype);
}

}  // namespace

void SetAttentionOptions(const AttentionVariants& v, Encoding encoding,
                         attention::v1::AttentionOptions* o) {
  o->set_causal_alignment(v.bottom_right ? attention::v1::CAUSAL_ALIGNMENT_BOTTOM_RIGHT
                                         : attention::v1::CAUSAL_ALIGNMENT_TOP_LEFT);
  if (v.window_left) o->set_window_left(*v.window_left);
  if (v.window_right) o->set_window_right(*v.window_right);
  if (v.softcap) o->set_softcap(*v.softcap);
  // Slopes and sinks are float32 whatever --dtype says (the contract's FLOAT32).
  if (v.alibi_slopes) *o->mutable_alibi_slopes() = ToWire(*v.alibi_slopes, encoding);
  if (v.sink_logits) *o->mutable_sink_logits() = ToWire(*v.sink_logits, encoding);
  o->set_return_lse(v.return_lse);
  if (v.compute_precision == "float32") o->set_compute_precision(attention::v1::PRECISION_FLOAT32);
  if (v.compute_precision == "bfloat16") {
    o->set_compute_precision(attention::v1::PRECISION_BFLOAT16);
  }
}

const google::protobuf::Message& AttentionCall::message() const {
  if (oip) return infer;
  if (op == "cross") return cross;
  if (op == "mha") return mha;
  return attention;
}

std::string AttentionCall::method() const {
  if (oip) return kOipMethod;
  const char* rpc = op == "cross" ? "CrossAttention"
                    : op == "mha" ? "MultiHeadAttention"
                                  : "Attention";
  return std::string("/attention.v1.AttentionService/") + rpc;
}

StatusOr<AttentionCall> BuildCall(const CallSpec& s) {
  AttentionCall call;
  call.op = s.op;
  if (s.op != "attention" &&
      (!s.variants.cu_seqlens_q.empty() || !s.variants.cu_seqlens_k.empty())) {
    return Status::InvalidArgument(
        "--cu-seqlens-q/--cu-seqlens-k: packed batches are the attention command's (SDPA), not " +
        s.op + "'s");
  }
  if (s.oip) {
    auto req = BuildOipRequest(s);
    if (!req.ok()) return req.status();
    call.oip = true;
    call.infer = std::move(*req);
    return call;
  }
  if (s.op == "cross") {
    if (s.query.shape.empty() || !s.key) {
      return Status::InvalidArgument("cross: --decoder and --encoder (or --random) are required");
    }
    *call.cross.mutable_decoder() = ToWire(s.query, s.encoding, s.dtype);
    *call.cross.mutable_encoder() = ToWire(*s.key, s.encoding, s.dtype);
    SetShared(s, &call.cross);
    SetOptions(s, &call.cross);
    if (s.scale) call.cross.set_scale(*s.scale);
    return call;
  }
  if (s.query.shape.empty()) {
    return Status::InvalidArgument(s.op + ": --query (or --random) is required");
  }
  if (s.op == "attention") {
    SetQueryKeyValue(s, &call.attention);
    SetShared(s, &call.attention);
    SetOptions(s, &call.attention);
    if (s.scale) call.attention.set_scale(*s.scale);
    call.attention.mutable_cu_seqlens_q()->Add(s.variants.cu_seqlens_q.begin(),
                                               s.variants.cu_seqlens_q.end());
    call.attention.mutable_cu_seqlens_k()->Add(s.variants.cu_seqlens_k.begin(),
                                               s.variants.cu_seqlens_k.end());
    return call;
  }
  if (s.op != "mha") return Status::InvalidArgument("op: expected attention, cross or mha");
  if (s.scale) {
    return Status::InvalidArgument(
        "--scale: not a MultiHeadAttention field (scale is 1/sqrt(head_dim))");
  }
  SetQueryKeyValue(s, &call.mha);
  SetShared(s, &call.mha);
  call.mha.set_num_heads(static_cast<int32_t>(s.num_heads));
  call.mha.set_per_head_weights(s.per_head_weights);
  call.mha.set_num_kv_heads(static_cast<int32_t>(s.variants.num_kv_heads));
  SetOptions(s, &call.mha);
  return call;
}

void FillRandomInputs(const InputSizes& z, std::mt19937& rng, CallSpec* spec) {
  spec->query = RandomArray({z.batch, z.seq_q, z.embed_dim}, rng);
  if (spec->op == "cross") {
    spec->key = RandomArray({z.batch, z.seq_k, z.kdim}, rng);
    spec->value.reset();
    return;
  }
  spec->key.reset(), spec->value.reset();
  if (z.seq_k == z.seq_q) return;
  spec->key = RandomArray({z.batch, z.seq_k, z.kdim}, rng);
  spec->value = RandomArray({z.batch, z.seq_k, z.vdim}, rng);
}

}  // namespace attn::client
