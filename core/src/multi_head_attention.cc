// Multi-head attention with projections: nn.MultiheadAttention semantics.
//
// Q, K and V are projected with oneDNN matmuls (the nn.Linear weight [out, in]
// is read as [in, out] through a transposed format tag), the projected
// [B, L, H, Dh] tensors are handed to the blocked kernel as [B, H, L, Dh]
// strided views, and the kernel writes its output straight into [B, L, H, Dv]
// order, ready for the output projection. No tensor is transposed.
#include <cmath>
#include <dnnl.hpp>
#include <string>

#include "attn/attention.h"
#include "attn/cpu_info.h"
#include "attn/threading.h"
#include "input_checks.h"
#include "kernels/blocked_attention.h"
#include "kernels/primitive_cache.h"
#include "kernels/simd/small_matmul.h"
#include "support/half_kernels.h"

namespace attn {
namespace {

Status ValidateLinear(const LinearView& lin, const std::string& name) {
  ATTN_RETURN_IF_ERROR(internal::ValidateFloatView(lin.weight, name + "_weight", 2, 2));
  if (lin.weight.strides[1] != 1 || lin.weight.strides[0] < lin.weight.shape[1]) {
    return Status::InvalidArgument(name + "_weight: must be row-major [out, in]");
  }
  if (lin.weight.shape[0] == 0 || lin.weight.shape[1] == 0) {
    return Status::InvalidArgument(name + "_weight: dims must be positive, got " +
                                   ShapeToString(lin.weight.shape));
  }
  if (lin.weight_t.has_value()) {
    const TensorView& t = *lin.weight_t;
    ATTN_RETURN_IF_ERROR(internal::ValidateFloatView(t, name + "_weight_t", 2, 2));
    if (t.shape[0] != lin.weight.shape[1] || t.shape[1] != lin.weight.shape[0] ||
        t.strides[1] != 1 || t.strides[0] < t.shape[1]) {
      return Status::InvalidArgument(name + "_weight_t: must be row-major [in, out] = " +
                                     ShapeToString({lin.weight.shape[1], lin.weight.shape[0]}) +
                                     ", got shape " + ShapeToString(t.shape));
    }
  }
  if (lin.bias.has_value()) {
    ATTN_RETURN_IF_ERROR(internal::ValidateFloatView(*lin.bias, name + "_bias", 1, 1));
    if (lin.bias->shape[0] != lin.weight.shape[0]) {
      return Status::InvalidArgument(
          name + "_bias: expected shape [" + std::to_string(lin.weight.shape[0]) + "] (" + name +
          "_weight's out_features), got " + ShapeToString(lin.bias->shape));
    }
    if (lin.bias->strides[0] != 1) {
      return Status::InvalidArgument(name + "_bias: must be contiguous");
    }
  }
  return Status::Ok();
}

// W of y = x W^T + b: `out` rows of an [*, in] weight with row stride ldw,
// and optionally the same as W^T ([in, out], row stride ldwt).
struct LinearWeight {
  const float* weight;
  int64_t ldw;
  const float* weight_t;  // may be null
  int64_t ldwt;
  const uint16_t* weight_bf16;  // dense [out, in] in bf16, or null
};

LinearWeight WeightOf(const LinearView& lin) {
  return {lin.weight.f32(), lin.weight.strides[0], lin.weight_t ? lin.weight_t->f32() : nullptr,
          lin.weight_t ? lin.weight_t->strides[0] : 0, lin.weight_bf16};
}

// rows x cols of `src` (row stride ld) rounded to dense bf16 rows in `buf`.
const uint16_t* RowsToBf16(const float* src, int64_t rows, int64_t cols, int64_t ld,
                           internal::Bf16Buffer& buf) {
  buf.resize(static_cast<size_t>(rows * cols));
  internal::RowsToBf16(src, rows, cols, ld, buf.data());
  return buf.data();
}

// y[m, out] (row stride ldy) = x[m, in] (row stride ldx) W^T + b. A tiny
// product with a packed W^T runs on core's kernel (small_matmul.h), any
// other on oneDNN.
// With bf16, x and W are rounded to bf16 (W packed by its owner, or here)
// and the product accumulates in float32.
void RunLinear(const float* x, int64_t m, int64_t in, int64_t ldx, const LinearWeight& w,
               int64_t out, const float* bias, float* y, int64_t ldy, int max_threads,
               bool bf16 = false) {
  if (m == 0) return;
  const double flops =
      2.0 * static_cast<double>(m) * static_cast<double>(in) * static_cast<double>(out);
  const int threads = flops < internal::kSerialFlops ? 1 : max_threads;
  static const internal::SmallMatmulFn small = internal::SmallMatmulFor(KernelTier());
  if (!bf16 && w.weight_t != nullptr && small != nullptr && threads == 1 &&
      flops <= 2.0 * static_cast<double>(internal::kSmallLinearMaxMacs)) {
    small(m, out, in, x, ldx, w.weight_t, w.ldwt, bias, y, ldy);
    return;
  }
  internal::ScopedOmpThreads scope(threads);
  if (bf16) {
    internal::Bf16Buffer x16, w16;
    const uint16_t* wb =
        w.weight_bf16 != nullptr ? w.weight_bf16 : RowsToBf16(w.weight, out, in, w.ldw, w16);
    internal::MatmulBf16(
        {m, out, in, in, in, ldy, /*b_transposed=*/true, bias != nullptr, false, threads},
        RowsToBf16(x, m, in, ldx, x16), wb, y, bias);
    return;
  }
  internal::Matmul(
      {m, out, in, ldx, w.ldw, ldy, /*b_transposed=*/true, bias != nullptr, false, threads}, x,
      w.weight, y, bias);
}

// A [B, L, E] (or [L, E]) input as rows of a matrix: returns the row pointer
// and row stride, packing into `storage` when the rows are not evenly strided.
const float* AsRows(const TensorView& t, int64_t* ld, Tensor* storage) {
  const int r = t.rank();
  const int64_t rows_per_batch = t.dim(-2);
  const bool inner_dense = t.stride(-1) == 1;
  const bool uniform = r == 2 || t.shape[0] <= 1 || t.strides[0] == rows_per_batch * t.stride(-2);
  if (inner_dense && uniform && t.stride(-2) >= t.dim(-1)) {
    *ld = t.stride(-2);
    return t.f32();
  }
  const int64_t batch = r == 3 ? t.shape[0] : 1, e = t.dim(-1);
  *storage = Tensor::Uninitialized({batch * rows_per_batch, e});
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < rows_per_batch; ++i) {
      const float* src = t.f32() + (r == 3 ? b * t.strides[0] : 0) + i * t.stride(-2);
      float* dst = storage->data.data() + (b * rows_per_batch + i) * e;
      for (int64_t c = 0; c < e; ++c) dst[c] = src[c * t.stride(-1)];
    }
  }
  *ld = e;
  return storage->data.data();
}

bool SameView(const TensorView& a, const TensorView& b) {
  return a.data == b.data && a.shape == b.shape && a.strides == b.strides;
}

// True when q, k and v are consecutive row ranges of one [3E, in] weight (and
// bias), as nn.MultiheadAttention's in_proj_weight is: one matmul then
// projects all three.
bool PackedInProjection(const ProjectionWeights& w) {
  const int64_t e = w.q.weight.shape[0];
  auto bias_follows = [e](const LinearView& a, const LinearView& b) {
    return a.bias.has_value() == b.bias.has_value() &&
           (!a.bias.has_value() || b.bias->f32() == a.bias->f32() + e);
  };
  return internal::QkvWeightRowsFollow(w) && bias_follows(w.q, w.k) && bias_follows(w.k, w.v);
}

// Everything MultiHeadAttention decides before touching data: validation,
// dims, the blocked kernel's problem (without pointers) and the cost.
struct MhaPlan {
  internal::AttentionProblem p;
  bool unbatched = false;
  int64_t e = 0, ev = 0, eo = 0;  // q's width, the attended rows' width, the output's
  int64_t ek = 0, evp = 0;        // k's and v's projected widths (GQA: Hkv heads)
  AttentionCost cost;
};

StatusOr<MhaPlan> PlanMha(const ProjectionWeights& w, const TensorView& query,
                          const TensorView& key, const TensorView& value,
                          const MultiHeadAttentionOptions& opt) {
  ATTN_RETURN_IF_ERROR(internal::CheckQueryKeyValue(query, key, value, 2, 3));
  ATTN_RETURN_IF_ERROR(ValidateLinear(w.q, "q"));
  ATTN_RETURN_IF_ERROR(ValidateLinear(w.k, "k"));
  ATTN_RETURN_IF_ERROR(ValidateLinear(w.v, "v"));
  if (w.out.has_value()) ATTN_RETURN_IF_ERROR(ValidateLinear(*w.out, "out"));

  const bool unbatched = query.rank() == 2;
  auto check_in = [](const TensorView& x, const char* name, const LinearView& lin,
                     const char* wname) -> Status {
    if (x.dim(-1) != lin.weight.shape[1]) {
      return Status::InvalidArgument(
          std::string(name) + ": last dim must equal " + wname + "_weight's in_features (" +
          std::to_string(lin.weight.shape[1]) + "), got " + std::to_string(x.dim(-1)));
    }
    return Status::Ok();
  };
  ATTN_RETURN_IF_ERROR(check_in(query, "query", w.q, "q"));
  ATTN_RETURN_IF_ERROR(check_in(key, "key", w.k, "k"));
  ATTN_RETURN_IF_ERROR(check_in(value, "value", w.v, "v"));
  const int64_t h = opt.num_heads;
  if (h < 1) {
    return Status::InvalidArgument("num_heads: must be positive, got " + std::to_string(h));
  }
  const int64_t hkv = opt.num_kv_heads == 0 ? h : opt.num_kv_heads;
  if (hkv < 1 || h % hkv != 0) {
    return Status::InvalidArgument("num_kv_heads: must be positive and divide num_heads (" +
                                   std::to_string(h) + "), got " + std::to_string(hkv));
  }
  // Grouped-query projections: k and v have Hkv heads of the q and v head
  // widths; the attended rows (out's input) have H of them.
  const int64_t e = w.q.weight.shape[0], ek = w.k.weight.shape[0], evp = w.v.weight.shape[0];
  if (hkv == h && (e % h != 0 || evp % h != 0)) {
    return Status::InvalidArgument("num_heads: must divide the projection widths (q " +
                                   std::to_string(e) + ", v " + std::to_string(evp) + "), got " +
                                   std::to_string(h));
  }
  if (e % h != 0 || evp % hkv != 0) {
    return Status::InvalidArgument(
        std::string(e % h != 0 ? "num_heads" : "num_kv_heads") +
        ": must divide the projection widths (q " + std::to_string(e) + " by num_heads, v " +
        std::to_string(evp) + " by num_kv_heads), got " + std::to_string(e % h != 0 ? h : hkv));
  }
  const int64_t dh = e / h, dvh = evp / hkv, ev = h * dvh;
  if (ek != hkv * dh) {
    return Status::InvalidArgument(
        hkv == h ? "k_weight: out_features must equal q_weight's (" + std::to_string(e) +
                       "), got " + std::to_string(ek)
                 : "k_weight: out_features must be num_kv_heads * head_dim (" +
                       std::to_string(hkv) + " * " + std::to_string(dh) + " = " +
                       std::to_string(hkv * dh) + "), got " + std::to_string(ek));
  }
  if (w.out.has_value() && w.out->weight.shape[1] != ev) {
    return Status::InvalidArgument(
        std::string("out_weight: in_features must equal ") +
        (hkv == h ? "v_weight's out_features (" : "num_heads * value head width (") +
        std::to_string(ev) + "), got " + std::to_string(w.out->weight.shape[1]));
  }
  auto scale = internal::ResolveScale(opt.scale, dh);
  if (!scale.ok()) return scale.status();

  const int64_t batch = unbatched ? 1 : query.shape[0];
  const int64_t lq = query.dim(-2), lk = key.dim(-2);
  internal::AttentionProblem p;
  p.batch = batch, p.heads = h, p.lq = lq, p.lk = lk, p.d = dh, p.dv = dvh;
  p.kv_group = h / hkv;
  p.scale = *scale;
  p.threads = opt.num_threads > 0 ? opt.num_threads : ComputeThreads();
  p.bf16 = internal::ComputesBf16(opt.compute_precision, opt.need_weights);
  ATTN_RETURN_IF_ERROR(internal::ResolveMasks(opt.masks, unbatched, &p));
  ATTN_RETURN_IF_ERROR(internal::ResolveScoreOptions(opt.score, &p));
  // Every buffer is at most a product of these checked shapes.
  const int64_t eo = w.out.has_value() ? w.out->weight.shape[0] : ev;
  // (One Shape and one name for the four checks: a small call plans twice,
  // and these allocations were a visible share of its cost.)
  static const std::string kBuffers = "attention buffers";
  const int64_t buffers[4][4] = {{batch, lq, 3 * std::max(e, ev), 1},
                                 {batch, lk, ek + evp, 1},
                                 {batch, lq, eo, 1},
                                 {batch, h, lq, lk}};
  Shape s;
  s.reserve(4);
  for (const auto& dims : buffers) {
    s.assign(dims, dims + 4);
    auto n = CheckedNumElements(s, kBuffers);
    if (!n.ok()) return n.status();
  }

  MhaPlan plan;
  plan.p = p;
  plan.unbatched = unbatched;
  plan.e = e, plan.ev = ev, plan.eo = eo, plan.ek = ek, plan.evp = evp;
  const double b = static_cast<double>(batch), hq = static_cast<double>(h),
               dq = static_cast<double>(lq), dk = static_cast<double>(lk),
               de = static_cast<double>(e), dev = static_cast<double>(ev);
  const double weights_elems = opt.need_weights ? b * hq * dq * dk : 0.0;
  plan.cost.work = b * hq * dq * dk * static_cast<double>(dh);
  plan.cost.flops = 2.0 * b *
                        (dq * static_cast<double>(query.dim(-1)) * de +
                         dk * (static_cast<double>(key.dim(-1)) * static_cast<double>(ek) +
                               static_cast<double>(value.dim(-1)) * static_cast<double>(evp)) +
                         (w.out ? dq * dev * static_cast<double>(eo) : 0.0)) +
                    2.0 * plan.cost.work + 2.0 * b * hq * dq * dk * static_cast<double>(dvh);
  plan.cost.result_bytes = 4.0 * (b * dq * static_cast<double>(eo) +
                                  (opt.average_weights ? weights_elems / hq : weights_elems) +
                                  (opt.score.return_lse ? b * hq * dq : 0.0));
  // The projections (float32), and in bf16 the keys' and values' bf16
  // copies (KeyValuesInBf16, kernels/block_operands.h).
  plan.cost.scratch_bytes =
      4.0 * (b * dq * (de + dev) + b * dk * static_cast<double>(ek + evp) + weights_elems) +
      (p.bf16 ? 2.0 * b * dk * static_cast<double>(ek + evp) : 0.0);
  return plan;
}

StatusOr<AttentionResult> Mha(const ProjectionWeights& w, const TensorView& query,
                              const TensorView& key, const TensorView& value,
                              const MultiHeadAttentionOptions& opt) {
  auto planned = PlanMha(w, query, key, value, opt);
  if (!planned.ok()) return planned.status();
  internal::AttentionProblem p = planned->p;
  const bool unbatched = planned->unbatched;
  const int64_t e = planned->e, ev = planned->ev, eo = planned->eo;
  const int64_t ek = planned->ek, evp = planned->evp;
  const int64_t batch = p.batch, h = p.heads, lq = p.lq, lk = p.lk, dh = p.d, dvh = p.dv;

  // Projections.
  Tensor q_storage, k_storage, v_storage, projected_qkv, projected_q, projected_k, projected_v;
  int64_t ldq_in = 0, ldk_in = 0, ldv_in = 0;
  const float* xq = AsRows(query, &ldq_in, &q_storage);
  if (SameView(query, key) && SameView(query, value) && ev == e && ek == e && evp == e &&
      PackedInProjection(w)) {
    // Self-attention with a packed in_proj_weight: one [B*L, 3E] matmul.
    projected_qkv = Tensor::Uninitialized({batch * lq, 3 * e});
    LinearWeight fused = WeightOf(w.q);
    const bool fused_t = w.q.weight_t && w.k.weight_t && w.v.weight_t && fused.ldwt == 3 * e &&
                         w.k.weight_t->f32() == fused.weight_t + e &&
                         w.v.weight_t->f32() == fused.weight_t + 2 * e;
    if (!fused_t) fused.weight_t = nullptr;  // W^T of q alone: not all three
    const int64_t in = query.dim(-1);
    const bool fused_bf16 = w.q.weight_bf16 != nullptr &&
                            w.k.weight_bf16 == w.q.weight_bf16 + e * in &&
                            w.v.weight_bf16 == w.q.weight_bf16 + 2 * e * in;
    if (!fused_bf16) fused.weight_bf16 = nullptr;
    RunLinear(xq, batch * lq, in, ldq_in, fused, 3 * e, w.q.bias ? w.q.bias->f32() : nullptr,
              projected_qkv.data.data(), 3 * e, p.threads, p.bf16);
    const float* base = projected_qkv.data.data();
    p.q = {base, {lq * 3 * e, dh, 3 * e, 1}};
    p.k = {base + e, {lk * 3 * e, dh, 3 * e, 1}};
    p.v = {base + 2 * e, {lk * 3 * e, dvh, 3 * e, 1}};
  } else {
    const float* xk = AsRows(key, &ldk_in, &k_storage);
    const float* xv = AsRows(value, &ldv_in, &v_storage);
    projected_q = Tensor::Uninitialized({batch * lq, e});
    projected_k = Tensor::Uninitialized({batch * lk, ek});
    projected_v = Tensor::Uninitialized({batch * lk, evp});
    auto project = [&p](const float* x, int64_t m, int64_t in, int64_t ldx, const LinearView& lin,
                        Tensor* y) {
      RunLinear(x, m, in, ldx, WeightOf(lin), lin.weight.shape[0],
                lin.bias ? lin.bias->f32() : nullptr, y->data.data(), lin.weight.shape[0],
                p.threads, p.bf16);
    };
    project(xq, batch * lq, query.dim(-1), ldq_in, w.q, &projected_q);
    project(xk, batch * lk, key.dim(-1), ldk_in, w.k, &projected_k);
    project(xv, batch * lk, value.dim(-1), ldv_in, w.v, &projected_v);
    p.q = {projected_q.data.data(), {lq * e, dh, e, 1}};
    p.k = {projected_k.data.data(), {lk * ek, dh, ek, 1}};
    p.v = {projected_v.data.data(), {lk * evp, dvh, evp, 1}};
  }

  // Attention, written as [B, Lq, H, Dvh] = [B * Lq, Ev]: without an output
  // projection, that is the output.
  AttentionResult result;
  const Shape out_shape = unbatched ? Shape{lq, eo} : Shape{batch, lq, eo};
  Tensor attended;
  if (w.out.has_value()) {
    attended = Tensor::Uninitialized({batch * lq, ev});
    p.out = attended.data.data();
  } else {
    p.out = internal::OutputStorage(opt.output_allocator, out_shape, &result.output);
  }
  p.out_stride[0] = lq * ev, p.out_stride[1] = dvh, p.out_stride[2] = ev;
  Tensor per_head;
  if (opt.need_weights) {
    per_head = Tensor({batch, h, lq, lk});
    p.weights = per_head.data.data();
  }
  if (opt.score.return_lse) {
    result.lse = Tensor(unbatched ? Shape{h, lq} : Shape{batch, h, lq});
    p.lse = result.lse->data.data();
  }
  ATTN_RETURN_IF_ERROR(internal::RunBlockedAttention(p, opt.cancelled));

  if (w.out.has_value()) {
    float* out = internal::OutputStorage(opt.output_allocator, out_shape, &result.output);
    RunLinear(attended.data.data(), batch * lq, ev, ev, WeightOf(*w.out), eo,
              w.out->bias ? w.out->bias->f32() : nullptr, out, eo, p.threads, p.bf16);
  }

  if (opt.need_weights) {
    if (opt.average_weights) {
      Tensor avg(unbatched ? Shape{lq, lk} : Shape{batch, lq, lk});
      const float inv_h = 1.0f / static_cast<float>(h);
      const int64_t plane = lq * lk;
      for (int64_t b = 0; b < batch; ++b) {
        float* dst = avg.data.data() + b * plane;
        for (int64_t hh = 0; hh < h; ++hh) {
          const float* src = per_head.data.data() + (b * h + hh) * plane;
          for (int64_t i = 0; i < plane; ++i) dst[i] += src[i];
        }
        for (int64_t i = 0; i < plane; ++i) dst[i] *= inv_h;
      }
      result.weights = std::move(avg);
    } else {
      if (unbatched) per_head.shape = {h, lq, lk};
      result.weights = std::move(per_head);
    }
  }
  if (p.bf16) result.compute_precision = ComputePrecision::kBFloat16;
  return result;
}

}  // namespace

bool internal::QkvWeightRowsFollow(const ProjectionWeights& w) {
  const int64_t e = w.q.weight.shape[0], ld = w.q.weight.strides[0];
  auto rows_follow = [&](const LinearView& a, const LinearView& b) {
    return b.weight.shape[0] == e && b.weight.shape[1] == a.weight.shape[1] &&
           b.weight.strides[0] == ld && b.weight.f32() == a.weight.f32() + e * ld;
  };
  return rows_follow(w.q, w.k) && rows_follow(w.k, w.v);
}

StatusOr<AttentionResult> MultiHeadAttention(const ProjectionWeights& weights,
                                             const TensorView& query, const TensorView& key,
                                             const TensorView& value,
                                             const MultiHeadAttentionOptions& options) {
  return GuardExceptions("multi-head attention",
                         [&] { return Mha(weights, query, key, value, options); });
}

StatusOr<AttentionCost> EstimateMultiHeadAttention(const ProjectionWeights& weights,
                                                   const TensorView& query, const TensorView& key,
                                                   const TensorView& value,
                                                   const MultiHeadAttentionOptions& options) {
  auto plan = PlanMha(weights, query, key, value, options);
  if (!plan.ok()) return plan.status();
  return plan->cost;
}

}  // namespace attn
