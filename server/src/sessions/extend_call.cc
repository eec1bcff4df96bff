#include "sessions/extend_call.h"

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "call/raw_messages.h"
#include "wire/tensor_codec.h"

namespace attn::server {
namespace {

namespace v1 = attention::v1;

// What a call keeps between prepare, compute and respond.
struct ExtendState {
  std::vector<KvStep> steps;
  std::vector<wire::WireType> types;  // each step's query type: its answer's
  KvExtendOptions options;
  int64_t layer = 0;
  KvExtendResult result;
  v1::ExtendResponse response;
};

// Decodes `t` (a float tensor) into the call's storage and returns its view.
StatusOr<TensorView> Decode(const v1::Tensor& t, const std::string& field,
                            const RequestLimits& limits, PreparedCall* call) {
  call->tensors.emplace_back();
  wire::DecodedTensor& d = call->tensors.back();
  ATTN_RETURN_IF_ERROR(
      wire::DecodeTensor(t, field, DataType::kFloat32, limits.max_tensor_elements, &d));
  call->fields.push_back(field);
  return d.view;
}

Status Options(const v1::ExtendRequest& req, const RequestLimits& limits, PreparedCall* call,
               KvExtendOptions* o) {
  const v1::AttentionOptions& opt = req.options();
  if (opt.causal_alignment() != v1::CAUSAL_ALIGNMENT_TOP_LEFT &&
      opt.causal_alignment() != v1::CAUSAL_ALIGNMENT_BOTTOM_RIGHT) {
    return Status::InvalidArgument(
        "options.causal_alignment: expected CAUSAL_ALIGNMENT_TOP_LEFT (0) or "
        "CAUSAL_ALIGNMENT_BOTTOM_RIGHT (1; Extend is always aligned bottom-right), got " +
        std::to_string(opt.causal_alignment()));
  }
  if (!v1::Precision_IsValid(opt.compute_precision())) {
    return Status::InvalidArgument(
        "options.compute_precision: expected PRECISION_UNSPECIFIED (0), PRECISION_FLOAT32 (1) "
        "or PRECISION_BFLOAT16 (2), got " +
        std::to_string(opt.compute_precision()));
  }
  o->causal = req.causal();
  if (req.has_scale()) o->scale = req.scale();
  if (opt.has_window_left()) o->window_left = opt.window_left();
  if (opt.has_window_right()) o->window_right = opt.window_right();
  if (opt.has_softcap()) o->score.softcap = opt.softcap();
  o->score.return_lse = opt.return_lse();
  if (opt.has_alibi_slopes()) {
    ATTN_ASSIGN_OR_RETURN(o->score.alibi_slopes,
                          Decode(opt.alibi_slopes(), "options.alibi_slopes", limits, call));
  }
  if (opt.has_sink_logits()) {
    ATTN_ASSIGN_OR_RETURN(o->score.sink_logits,
                          Decode(opt.sink_logits(), "options.sink_logits", limits, call));
  }
  // The decode kernel and the cache compute in float32 on every CPU: a
  // bfloat16 request is permitted float32, and the answer says so.
  call->precision = UsedPrecision::kFloat32;
  return Status::Ok();
}

Status Steps(const v1::ExtendRequest& req, KvCacheStore* store, const RequestLimits& limits,
             PreparedCall* call, ExtendState* s) {
  if (req.steps_size() == 0) {
    return Status::InvalidArgument("steps: expected at least one step, got none");
  }
  // Every id checked, and duplicates found, before any lookup or decode
  // (core checks them again, the same way, for its other callers).
  std::vector<std::string_view> ids;
  ids.reserve(static_cast<size_t>(req.steps_size()));
  for (const v1::SessionStep& st : req.steps()) ids.push_back(st.session_id());
  ATTN_RETURN_IF_ERROR(CheckStepSessionIds(ids));
  for (int i = 0; i < req.steps_size(); ++i) {
    const v1::SessionStep& st = req.steps(i);
    const std::string at = "steps[" + std::to_string(i) + "].";
    KvStep step;
    step.session_id = st.session_id();
    if (st.has_query()) {
      ATTN_ASSIGN_OR_RETURN(step.query, Decode(st.query(), at + "query", limits, call));
      s->types.push_back(call->tensors.back().type);
      if (i == 0) call->encoding = call->tensors.back().encoding;
    } else {
      // No queries: a fill-only step, [Hkv, 0, D] once its session is known.
      auto found = store->Get(call->principal.name, st.session_id());
      if (!found.ok()) {  // worded as for a step that names it with keys
        return Status(found.status().code(),
                      "extend: steps[" + std::to_string(i) + "]: " + found.status().message());
      }
      const KvSessionInfo& info = *found;
      step.query = TensorView::Dense(nullptr, {info.spec.num_kv_heads, 0, info.spec.head_dim});
      s->types.push_back(wire::WireType::kFloat32);
    }
    if (st.has_key()) {
      ATTN_ASSIGN_OR_RETURN(step.key, Decode(st.key(), at + "key", limits, call));
    }
    if (st.has_value()) {
      ATTN_ASSIGN_OR_RETURN(step.value, Decode(st.value(), at + "value", limits, call));
    }
    if (st.has_expected_tokens()) step.expected_tokens = st.expected_tokens();
    s->steps.push_back(std::move(step));
  }
  return Status::Ok();
}

Status Respond(const ExtendState& s, const PreparedCall& call, const RequestLimits& limits,
               grpc::ByteBuffer* resp, v1::ExtendResponse* out) {
  double bytes = 0;
  for (size_t i = 0; i < s.result.results.size(); ++i) {
    const AttentionResult& r = s.result.results[i];
    const int64_t elem =
        call.encoding == wire::Encoding::kData ? wire::WireTypeBytes(s.types[i]) : 4;
    bytes += static_cast<double>(elem * r.output.numel()) +
             4.0 * static_cast<double>(r.lse ? r.lse->numel() : 0);
  }
  ATTN_RETURN_IF_ERROR(CheckResponseBytes(bytes, limits));
  for (size_t i = 0; i < s.result.results.size(); ++i) {
    const AttentionResult& r = s.result.results[i];
    v1::AttentionResponse* a = out->add_results();
    wire::EncodeTensor(r.output, s.types[i], call.encoding, a->mutable_output());
    if (r.lse)
      wire::EncodeTensor(*r.lse, wire::WireType::kFloat32, call.encoding, a->mutable_lse());
  }
  for (const bool replayed : s.result.replayed) out->add_replayed(replayed);
  return SerializeInto(*out, resp);
}

}  // namespace

Status PrepareExtend(const v1::ExtendRequest& req, KvCacheStore* store, const RequestLimits& limits,
                     SessionMetrics* metrics, grpc::ByteBuffer* resp, PreparedCall* call) {
  auto s = std::make_shared<ExtendState>();
  s->layer = req.layer();
  s->options.owner = call->principal.name;  // only the caller's sessions exist for it
  ATTN_RETURN_IF_ERROR(Options(req, limits, call, &s->options));
  ATTN_RETURN_IF_ERROR(Steps(req, store, limits, call, s.get()));
  ATTN_ASSIGN_OR_RETURN(call->cost, store->EstimateExtend(s->layer, s->steps, s->options));
  if (call->cost.work > limits.max_attention_work) {
    return Status::ResourceExhausted("extend: attention work " + std::to_string(call->cost.work) +
                                     " (Hq * n_q * L * D summed over the steps) is over the "
                                     "limit (--max-attention-work " +
                                     std::to_string(limits.max_attention_work) + ")");
  }
  ATTN_RETURN_IF_ERROR(CheckResponseBytes(call->cost.result_bytes, limits));
  call->output_type = s->types.empty() ? wire::WireType::kFloat32 : s->types[0];
  const int64_t gather = limits.max_request_memory_bytes;
  call->compute = [s, store, metrics, call, gather](int threads,
                                                    OutputAllocator) -> StatusOr<AttentionResult> {
    s->options.num_threads = threads;
    s->options.cancelled = &call->cancelled;
    if (call->deadline != std::chrono::system_clock::time_point::max()) {
      s->options.deadline = call->deadline;
    }
    // A prefill over a long cache reads the pages in place past this.
    s->options.max_gather_bytes = gather;
    const auto t0 = std::chrono::steady_clock::now();
    ATTN_ASSIGN_OR_RETURN(s->result, store->Extend(s->layer, s->steps, s->options));
    if (metrics != nullptr) {
      metrics->RecordExtend(
          static_cast<int64_t>(s->steps.size()),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      int64_t replays = 0;
      for (size_t i = 0; i < s->steps.size(); ++i) {
        const KvStep& st = s->steps[i];
        const bool replayed = i < s->result.replayed.size() && s->result.replayed[i];
        replays += replayed ? 1 : 0;
        metrics->RecordStep(st.query.dim(1), st.key && !replayed ? st.key->dim(1) : 0);
      }
      metrics->RecordReplays(replays);
    }
    return AttentionResult{};  // the answers are the state's, for respond
  };
  call->respond = [s, call, limits, resp](const AttentionResult&) {
    return Respond(*s, *call, limits, resp, &s->response);
  };
  return Status::Ok();
}

}  // namespace attn::server
