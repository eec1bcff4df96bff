#include <algorithm>
#include <dnnl.hpp>
#include <string>

#include "attn/attention.h"
#include "input_checks.h"
#include "kernels/blocked_attention.h"
#include "packed_attention.h"

namespace attn {
namespace {

struct SdpaPlan {
  internal::AttentionProblem p;  // without the output pointers
  Shape out_shape, weights_shape, lse_shape;
  AttentionCost cost;
};

StatusOr<SdpaPlan> PlanSdpa(const TensorView& q, const TensorView& k, const TensorView& v,
                            const ScaledDotProductAttentionOptions& opt) {
  ATTN_RETURN_IF_ERROR(internal::CheckQueryKeyValue(q, k, v, 2, 4, /*grouped_heads=*/true,
                                                    /*allow_bf16=*/true));
  const bool bf16 = internal::ComputesBf16(opt.compute_precision, opt.need_weights);
  ATTN_RETURN_IF_ERROR(internal::CheckBf16Allowed(q, bf16));
  const int rank = q.rank();
  const int64_t d = q.dim(-1);
  if (d == 0) return Status::InvalidArgument("query: last dim (D) must be positive, got 0");
  if (k.dim(-1) != d) {
    return Status::InvalidArgument("key: last dim must equal query's (" + std::to_string(d) +
                                   "), got " + std::to_string(k.dim(-1)));
  }
  auto scale = internal::ResolveScale(opt.scale, d);
  if (!scale.ok()) return scale.status();

  internal::AttentionProblem p;
  p.batch = rank >= 3 ? q.shape[0] : 1;
  p.heads = rank == 4 ? q.shape[1] : 1;
  p.kv_group = rank == 4 && k.shape[1] > 0 ? std::max<int64_t>(1, q.shape[1] / k.shape[1]) : 1;
  p.lq = q.dim(-2), p.lk = k.dim(-2), p.d = d, p.dv = v.dim(-1);
  p.scale = *scale;
  p.threads = opt.num_threads;
  p.bf16 = bf16;
  auto set_strides = [rank](const TensorView& t, internal::Strided4D* s) {
    s->SetData(t, 0);
    s->stride[0] = rank >= 3 ? t.strides[0] : 0;
    s->stride[1] = rank == 4 ? t.strides[1] : 0;
    s->stride[2] = t.strides[rank - 2];
    s->stride[3] = t.strides[rank - 1];
  };
  set_strides(q, &p.q), set_strides(k, &p.k), set_strides(v, &p.v);
  ATTN_RETURN_IF_ERROR(internal::ResolveMasks(opt.masks, rank == 2, &p));
  ATTN_RETURN_IF_ERROR(internal::ResolveScoreOptions(opt.score, &p));

  Shape lead(q.shape.begin(), q.shape.end() - 2);
  Shape out_shape = lead, w_shape = lead, lse_shape = lead;
  out_shape.insert(out_shape.end(), {p.lq, p.dv});
  lse_shape.push_back(p.lq);
  w_shape.insert(w_shape.end(), {p.lq, p.lk});
  auto out_n = CheckedNumElements(out_shape, "output");
  if (!out_n.ok()) return out_n.status();
  if (opt.need_weights) {
    auto w_n = CheckedNumElements(w_shape, "weights");
    if (!w_n.ok()) return w_n.status();
  }

  SdpaPlan plan;
  plan.p = p;
  plan.out_shape = std::move(out_shape);
  plan.weights_shape = std::move(w_shape);
  plan.lse_shape = std::move(lse_shape);
  const double pairs = static_cast<double>(p.batch * p.heads) * static_cast<double>(p.lq) *
                       static_cast<double>(p.lk);
  plan.cost.work = pairs * static_cast<double>(p.d);
  plan.cost.flops = 2.0 * pairs * (static_cast<double>(p.d) + static_cast<double>(p.dv));
  plan.cost.result_bytes =
      4.0 * (static_cast<double>(*out_n) + (opt.need_weights ? pairs : 0.0) +
             (opt.score.return_lse ? static_cast<double>(p.batch * p.heads * p.lq) : 0.0));
  plan.cost.scratch_bytes = internal::Bf16KeyValueBytes(bf16, k, v);
  return plan;
}

StatusOr<AttentionResult> Sdpa(const TensorView& q, const TensorView& k, const TensorView& v,
                               const ScaledDotProductAttentionOptions& opt) {
  auto plan = PlanSdpa(q, k, v, opt);
  if (!plan.ok()) return plan.status();
  internal::AttentionProblem& p = plan->p;
  AttentionResult result;
  // The kernel writes every row.
  p.out = internal::OutputStorage(opt.output_allocator, plan->out_shape, &result.output);
  p.out_stride[0] = p.heads * p.lq * p.dv, p.out_stride[1] = p.lq * p.dv, p.out_stride[2] = p.dv;
  if (opt.need_weights) {
    result.weights = Tensor(plan->weights_shape);
    p.weights = result.weights->data.data();
  }
  if (opt.score.return_lse) {
    result.lse = Tensor(plan->lse_shape);
    p.lse = result.lse->data.data();
  }
  ATTN_RETURN_IF_ERROR(internal::RunBlockedAttention(p, opt.cancelled));
  if (p.bf16) result.compute_precision = ComputePrecision::kBFloat16;
  return result;
}

}  // namespace

StatusOr<AttentionResult> ScaledDotProductAttention(
    const TensorView& query, const TensorView& key, const TensorView& value,
    const ScaledDotProductAttentionOptions& options) {
  return GuardExceptions("attention", [&] {
    return internal::IsPacked(options) ? internal::PackedAttention(query, key, value, options)
                                       : Sdpa(query, key, value, options);
  });
}

StatusOr<AttentionCost> EstimateScaledDotProductAttention(
    const TensorView& query, const TensorView& key, const TensorView& value,
    const ScaledDotProductAttentionOptions& options) {
  if (internal::IsPacked(options)) {
    return internal::EstimatePackedAttention(query, key, value, options);
  }
  auto plan = PlanSdpa(query, key, value, options);
  if (!plan.ok()) return plan.status();
  return plan->cost;
}

}  // namespace attn
