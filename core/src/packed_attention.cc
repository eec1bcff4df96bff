#include "packed_attention.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "input_checks.h"
#include "kernels/blocked_attention.h"

namespace attn::internal {
namespace {

struct PackedPlan {
  std::vector<AttentionProblem> seqs;  // without the output pointers
  std::vector<int64_t> row0;           // each one's first query row
  int64_t total_q = 0, heads = 0, dv = 0;
  bool bf16 = false;  // every sequence computes in bf16
  AttentionCost cost;
};

// The most sequences one packed call may hold (each costs a problem record
// and a task list).
constexpr size_t kMaxPackedSequences = 65536;

std::string Num(int64_t x) { return std::to_string(x); }

// Checks one offset list: starts at 0, never falls, ends at `total`.
Status CheckOffsets(const std::vector<int64_t>& cu, const char* name, const char* total_name,
                    int64_t total) {
  if (cu[0] != 0) {
    return Status::InvalidArgument(std::string(name) + "[0]: must be 0, got " + Num(cu[0]));
  }
  for (size_t i = 1; i < cu.size(); ++i) {
    if (cu[i] < cu[i - 1]) {
      return Status::InvalidArgument(
          std::string(name) + ": offsets must not fall, got [" + Num(static_cast<int64_t>(i) - 1) +
          "] = " + Num(cu[i - 1]) + " then [" + Num(static_cast<int64_t>(i)) + "] = " + Num(cu[i]));
    }
  }
  if (cu.back() != total) {
    return Status::InvalidArgument(std::string(name) + ": the last offset must equal " +
                                   total_name + " (" + Num(total) + "), got " + Num(cu.back()));
  }
  return Status::Ok();
}

Status CheckPackedInputs(const TensorView& q, const TensorView& k, const TensorView& v,
                         const ScaledDotProductAttentionOptions& opt) {
  const auto& cq = opt.cu_seqlens_q;
  const auto& ck = opt.cu_seqlens_k;
  if (cq.empty() || ck.empty()) {
    return Status::InvalidArgument(std::string(cq.empty() ? "cu_seqlens_q" : "cu_seqlens_k") +
                                   ": required with " +
                                   (cq.empty() ? "cu_seqlens_k" : "cu_seqlens_q") +
                                   " (packed batches need both offset lists), got none");
  }
  if (cq.size() != ck.size()) {
    return Status::InvalidArgument(
        "cu_seqlens_k: expected " + Num(static_cast<int64_t>(cq.size())) +
        " offsets (as many as cu_seqlens_q), got " + Num(static_cast<int64_t>(ck.size())));
  }
  if (cq.size() - 1 > kMaxPackedSequences) {
    return Status::ResourceExhausted(
        "cu_seqlens_q: at most " + Num(static_cast<int64_t>(kMaxPackedSequences)) +
        " sequences in one call, got " + Num(static_cast<int64_t>(cq.size()) - 1));
  }
  for (const auto& [t, name, shape] :
       {std::tuple{&q, "query", "[total_q, H, D]"}, std::tuple{&k, "key", "[total_k, Hkv, D]"},
        std::tuple{&v, "value", "[total_k, Hkv, Dv]"}}) {
    if (t->rank() != 3) {
      return Status::InvalidArgument(std::string(name) + ": rank must be 3 " + shape +
                                     " with cu_seqlens, got " + Num(t->rank()) + " (shape " +
                                     ShapeToString(t->shape) + ")");
    }
    ATTN_RETURN_IF_ERROR(ValidateFloatView(*t, name, 3, 3, /*allow_bf16=*/true));
  }
  ATTN_RETURN_IF_ERROR(CheckSameDtype(q, k, v));
  ATTN_RETURN_IF_ERROR(CheckBf16Allowed(q, ComputesBf16(opt.compute_precision, false)));
  const int64_t hq = q.shape[1], hkv = k.shape[1];
  if (hkv == 0 ? hq != 0 : hq % hkv != 0) {
    return Status::InvalidArgument("key: dim 1 (kv heads) must divide query's heads (" + Num(hq) +
                                   "), got " + Num(hkv));
  }
  if (v.shape[1] != hkv) {
    return Status::InvalidArgument("value: dim 1 (kv heads) must equal key's (" + Num(hkv) +
                                   "), got " + Num(v.shape[1]));
  }
  if (v.shape[0] != k.shape[0]) {
    return Status::InvalidArgument("value: dim 0 (total_k) must equal key's (" + Num(k.shape[0]) +
                                   "), got " + Num(v.shape[0]));
  }
  if (q.shape[2] == 0)
    return Status::InvalidArgument("query: last dim (D) must be positive, got 0");
  if (k.shape[2] != q.shape[2]) {
    return Status::InvalidArgument("key: last dim must equal query's (" + Num(q.shape[2]) +
                                   "), got " + Num(k.shape[2]));
  }
  if (opt.need_weights) {
    return Status::InvalidArgument(
        "return_weights: not available with packed inputs (cu_seqlens_q/cu_seqlens_k), got true");
  }
  if (opt.masks.key_padding_mask.has_value() || opt.masks.attn_bias.has_value()) {
    return Status::InvalidArgument(
        std::string(opt.masks.attn_bias ? "attn_bias" : "key_padding_mask") +
        ": not available with packed inputs (each sequence is its own length), got one");
  }
  ATTN_RETURN_IF_ERROR(CheckOffsets(cq, "cu_seqlens_q", "query's dim 0 (total_q)", q.shape[0]));
  ATTN_RETURN_IF_ERROR(CheckOffsets(ck, "cu_seqlens_k", "key's dim 0 (total_k)", k.shape[0]));
  return Status::Ok();
}

StatusOr<PackedPlan> PlanPacked(const TensorView& q, const TensorView& k, const TensorView& v,
                                const ScaledDotProductAttentionOptions& opt) {
  ATTN_RETURN_IF_ERROR(CheckPackedInputs(q, k, v, opt));
  auto scale = ResolveScale(opt.scale, q.shape[2]);
  if (!scale.ok()) return scale.status();
  const int64_t nseq = static_cast<int64_t>(opt.cu_seqlens_q.size()) - 1;
  const int64_t hq = q.shape[1], hkv = k.shape[1];

  // What every sequence shares; ResolveMasks sees Lq = Lk = 0, so its
  // pos_offset is set per sequence below.
  AttentionProblem base;
  base.batch = nseq, base.heads = hq;
  base.kv_group = hkv > 0 ? hq / hkv : 1;
  base.d = q.shape[2], base.dv = v.shape[2];
  base.scale = *scale;
  base.threads = opt.num_threads;
  base.bf16 = ComputesBf16(opt.compute_precision, false);
  ATTN_RETURN_IF_ERROR(ResolveMasks(opt.masks, false, &base));
  ATTN_RETURN_IF_ERROR(ResolveScoreOptions(opt.score, &base));
  auto out_n = CheckedNumElements({q.shape[0], hq, base.dv}, "output");
  if (!out_n.ok()) return out_n.status();

  PackedPlan plan;
  plan.bf16 = base.bf16;
  plan.total_q = q.shape[0], plan.heads = hq, plan.dv = base.dv;
  plan.seqs.reserve(static_cast<size_t>(nseq));
  double pairs = 0;
  const bool bottom_right = opt.masks.causal_alignment == CausalAlignment::kBottomRight;
  for (int64_t s = 0; s < nseq; ++s) {
    const int64_t q0 = opt.cu_seqlens_q[s], k0 = opt.cu_seqlens_k[s];
    if (opt.cu_seqlens_q[s + 1] == q0) continue;  // no queries: nothing to write
    AttentionProblem p = base;
    p.batch = 1;
    p.lq = opt.cu_seqlens_q[s + 1] - q0, p.lk = opt.cu_seqlens_k[s + 1] - k0;
    p.pos_offset = bottom_right ? p.lk - p.lq : 0;
    // Row i of head h of the sequence: the packed [total, H, D] read as
    // [1, H, L, D] through strides.
    auto view = [](const TensorView& t, int64_t row0, Strided4D* dst) {
      dst->SetData(t, row0 * t.strides[0]);
      dst->stride[0] = 0, dst->stride[1] = t.strides[1];
      dst->stride[2] = t.strides[0], dst->stride[3] = t.strides[2];
    };
    view(q, q0, &p.q), view(k, k0, &p.k), view(v, k0, &p.v);
    if (p.alibi != nullptr) p.alibi += s * p.alibi_stride[0], p.alibi_stride[0] = 0;
    pairs += static_cast<double>(hq) * static_cast<double>(p.lq) * static_cast<double>(p.lk);
    plan.seqs.push_back(p);
    plan.row0.push_back(q0);
  }
  const double d = static_cast<double>(base.d), dv = static_cast<double>(base.dv);
  plan.cost.work = pairs * d;
  plan.cost.flops = 2.0 * pairs * (d + dv);
  plan.cost.result_bytes =
      4.0 * (static_cast<double>(*out_n) +
             (opt.score.return_lse ? static_cast<double>(hq * q.shape[0]) : 0));
  plan.cost.scratch_bytes = Bf16KeyValueBytes(base.bf16, k, v);
  return plan;
}

}  // namespace

StatusOr<AttentionResult> PackedAttention(const TensorView& q, const TensorView& k,
                                          const TensorView& v,
                                          const ScaledDotProductAttentionOptions& opt) {
  auto plan = PlanPacked(q, k, v, opt);
  if (!plan.ok()) return plan.status();
  AttentionResult result;
  const int64_t tq = plan->total_q, h = plan->heads, dv = plan->dv;
  float* out = OutputStorage(opt.output_allocator, {tq, h, dv}, &result.output);
  float* lse = nullptr;
  if (opt.score.return_lse) {
    result.lse = Tensor(Shape{h, tq});
    lse = result.lse->data.data();
  }
  for (size_t s = 0; s < plan->seqs.size(); ++s) {
    AttentionProblem& p = plan->seqs[s];
    const int64_t q0 = plan->row0[s];
    p.out = out + q0 * h * dv;
    p.out_stride[0] = 0, p.out_stride[1] = dv, p.out_stride[2] = h * dv;
    if (lse != nullptr) p.lse = lse + q0, p.lse_head_stride = tq;
  }
  ATTN_RETURN_IF_ERROR(RunBlockedAttentionBatch(plan->seqs, opt.cancelled));
  if (plan->bf16) result.compute_precision = ComputePrecision::kBFloat16;
  return result;
}

StatusOr<AttentionCost> EstimatePackedAttention(const TensorView& q, const TensorView& k,
                                                const TensorView& v,
                                                const ScaledDotProductAttentionOptions& opt) {
  auto plan = PlanPacked(q, k, v, opt);
  if (!plan.ok()) return plan.status();
  return plan->cost;
}

}  // namespace attn::internal
