#include "attention_v1/attention_v1_adapter.h"

namespace attn::server {

namespace {

// The fields all three attention.v1 requests share.
template <typename Request>
CallRequest NativeShared(const Request& req, CallOp op, const PreparedCall& call) {
  CallRequest c;
  c.op = op;
  c.model = req.model();
  if (req.has_key_padding_mask())
    c.key_padding_mask = wire::FromNative(req.key_padding_mask(), call.tensor_data);
  if (req.has_attn_bias()) c.attn_bias = wire::FromNative(req.attn_bias(), call.tensor_data);
  if (req.has_projections()) c.projections = &req.projections();
  c.causal = req.causal();
  c.return_weights = req.return_weights();
  return c;
}

// AttentionOptions into the call; the numbers themselves are core's to check.
Status NativeOptions(const attention::v1::AttentionOptions& o, const PreparedCall& call,
                     CallRequest* c) {
  switch (o.causal_alignment()) {
    case attention::v1::CAUSAL_ALIGNMENT_TOP_LEFT:
      c->causal_alignment = CausalAlignment::kTopLeft;
      break;
    case attention::v1::CAUSAL_ALIGNMENT_BOTTOM_RIGHT:
      c->causal_alignment = CausalAlignment::kBottomRight;
      break;
    default:
      return Status::InvalidArgument(
          "options.causal_alignment: expected CAUSAL_ALIGNMENT_TOP_LEFT (0) or "
          "CAUSAL_ALIGNMENT_BOTTOM_RIGHT (1), got " +
          std::to_string(o.causal_alignment()));
  }
  if (!attention::v1::Precision_IsValid(o.compute_precision())) {
    return Status::InvalidArgument(
        "options.compute_precision: expected PRECISION_UNSPECIFIED (0), PRECISION_FLOAT32 (1) "
        "or PRECISION_BFLOAT16 (2), got " +
        std::to_string(o.compute_precision()));
  }
  c->precision = o.compute_precision() == attention::v1::PRECISION_FLOAT32
                     ? RequestedPrecision::kFloat32
                 : o.compute_precision() == attention::v1::PRECISION_BFLOAT16
                     ? RequestedPrecision::kBFloat16
                     : RequestedPrecision::kUnspecified;
  if (o.has_window_left()) c->window_left = o.window_left();
  if (o.has_window_right()) c->window_right = o.window_right();
  if (o.has_softcap()) c->softcap = o.softcap();
  if (o.has_alibi_slopes()) c->alibi_slopes = wire::FromNative(o.alibi_slopes(), call.tensor_data);
  if (o.has_sink_logits()) c->sink_logits = wire::FromNative(o.sink_logits(), call.tensor_data);
  c->return_lse = o.return_lse();
  return Status::Ok();
}

template <typename Request>
void NativeQueryKeyValue(const Request& req, const PreparedCall& call, CallRequest* c) {
  if (req.has_query()) c->query = wire::FromNative(req.query(), call.tensor_data);
  if (req.has_key()) c->key = wire::FromNative(req.key(), call.tensor_data);
  if (req.has_value()) c->value = wire::FromNative(req.value(), call.tensor_data);
}

}  // namespace

Status PrepareAttention(const attention::v1::AttentionRequest& req, const ModelRegistry& models,
                        const RequestLimits& limits, PreparedCall* call) {
  CallRequest c = NativeShared(req, CallOp::kAttention, *call);
  NativeQueryKeyValue(req, *call, &c);
  if (req.has_scale()) c.scale = req.scale();
  c.cu_seqlens_q.assign(req.cu_seqlens_q().begin(), req.cu_seqlens_q().end());
  c.cu_seqlens_k.assign(req.cu_seqlens_k().begin(), req.cu_seqlens_k().end());
  ATTN_RETURN_IF_ERROR(NativeOptions(req.options(), *call, &c));
  return PrepareCall(c, models, limits, call);
}

Status PrepareCrossAttention(const attention::v1::CrossAttentionRequest& req,
                             const ModelRegistry& models, const RequestLimits& limits,
                             PreparedCall* call) {
  CallRequest c = NativeShared(req, CallOp::kCrossAttention, *call);
  c.query_field = "decoder", c.key_field = "encoder";
  if (req.has_decoder()) c.query = wire::FromNative(req.decoder(), call->tensor_data);
  if (req.has_encoder()) c.key = wire::FromNative(req.encoder(), call->tensor_data);
  if (req.has_scale()) c.scale = req.scale();
  ATTN_RETURN_IF_ERROR(NativeOptions(req.options(), *call, &c));
  return PrepareCall(c, models, limits, call);
}

Status PrepareMultiHeadAttention(const attention::v1::MultiHeadAttentionRequest& req,
                                 const ModelRegistry& models, const RequestLimits& limits,
                                 PreparedCall* call) {
  CallRequest c = NativeShared(req, CallOp::kMultiHeadAttention, *call);
  NativeQueryKeyValue(req, *call, &c);
  c.num_heads = req.num_heads();
  c.per_head_weights = req.per_head_weights();
  c.num_kv_heads = req.num_kv_heads();
  ATTN_RETURN_IF_ERROR(NativeOptions(req.options(), *call, &c));
  return PrepareCall(c, models, limits, call);
}

OutputAllocator IntoResponse(const PreparedCall& call, InPlaceOutput* out) {
  if (call.encoding != wire::Encoding::kData || call.output_type != wire::WireType::kFloat32) {
    return {};
  }
  return [out](const Shape& shape) { return out->Allocate(shape); };
}

Status EncodeResponse(const AttentionResult& result, const PreparedCall& call,
                      const RequestLimits& limits, attention::v1::AttentionResponse* resp) {
  // From the shape: an output written in place has no data here.
  const int64_t output_elements = NumElements(result.output.shape);
  const int64_t elem =
      call.encoding == wire::Encoding::kData ? wire::WireTypeBytes(call.output_type) : 4;
  const double bytes =
      static_cast<double>(elem) *
          static_cast<double>(output_elements + (result.weights ? result.weights->numel() : 0)) +
      4.0 * static_cast<double>(result.lse ? result.lse->numel() : 0);
  ATTN_RETURN_IF_ERROR(CheckResponseBytes(bytes, limits));
  // An output written through IntoResponse is InPlaceOutput's to send.
  if (!(result.output.data.empty() && output_elements > 0)) {
    wire::EncodeTensor(result.output, call.output_type, call.encoding, resp->mutable_output());
  }
  if (result.weights) {
    wire::EncodeTensor(*result.weights, call.output_type, call.encoding, resp->mutable_weights());
  }
  if (result.lse) {  // float32 whatever the query's type: a log, not a value
    wire::EncodeTensor(*result.lse, wire::WireType::kFloat32, call.encoding, resp->mutable_lse());
  }
  return Status::Ok();
}

}  // namespace attn::server
