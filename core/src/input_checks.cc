#include "input_checks.h"

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

namespace attn::internal {

Status ValidateFloatView(const TensorView& view, const std::string& name, int min_rank,
                         int max_rank, bool allow_bf16) {
  if (view.dtype != DataType::kFloat32 && !(allow_bf16 && view.dtype == DataType::kBFloat16)) {
    return Status::InvalidArgument(name + ": dtype must be float32" +
                                   (allow_bf16 ? " or bfloat16" : "") + ", got " +
                                   DataTypeName(view.dtype));
  }
  if (view.rank() < min_rank || view.rank() > max_rank) {
    const std::string want = min_rank == max_rank
                                 ? std::to_string(min_rank)
                                 : std::to_string(min_rank) + " to " + std::to_string(max_rank);
    return Status::InvalidArgument(name + ": rank must be " + want + ", got " +
                                   std::to_string(view.rank()) + " (shape " +
                                   ShapeToString(view.shape) + ")");
  }
  auto n = CheckedNumElements(view.shape, name);
  if (!n.ok()) return n.status();
  if (view.strides.size() != view.shape.size()) {
    return Status::InvalidArgument(name + ": " + std::to_string(view.strides.size()) +
                                   " strides for rank " + std::to_string(view.rank()));
  }
  for (int64_t s : view.strides) {
    if (s < 0) return Status::InvalidArgument(name + ": strides must be non-negative");
  }
  if (*n > 0 && view.data == nullptr) return Status::InvalidArgument(name + ": no data");
  return Status::Ok();
}

namespace {

// The name of leading dim i of a rank-`rank` input, for messages.
const char* LeadingDimName(int rank, int i) { return rank == 4 && i == 1 ? "heads" : "batch"; }

}  // namespace

Status CheckSameDtype(const TensorView& q, const TensorView& k, const TensorView& v) {
  for (const auto* t : {&k, &v}) {
    if (t->dtype != q.dtype) {
      return Status::InvalidArgument(std::string(t == &k ? "key" : "value") +
                                     ": dtype must equal query's (" + DataTypeName(q.dtype) +
                                     "), got " + DataTypeName(t->dtype));
    }
  }
  return Status::Ok();
}

bool ComputesBf16(ComputePrecision precision, bool need_weights) {
  return precision == ComputePrecision::kBFloat16 && !need_weights && Bf16ComputeAvailable();
}

double Bf16KeyValueBytes(bool bf16_compute, const TensorView& k, const TensorView& v) {
  if (!bf16_compute || k.dtype == DataType::kBFloat16) return 0.0;
  return 2.0 *
         (static_cast<double>(NumElements(k.shape)) + static_cast<double>(NumElements(v.shape)));
}

Status CheckBf16Allowed(const TensorView& q, bool bf16_compute) {
  if (q.dtype == DataType::kBFloat16 && !bf16_compute) {
    return Status::InvalidArgument(
        "query: bfloat16 views need a call that computes in bfloat16 (compute_precision "
        "kBFloat16 without need_weights, where Bf16ComputeAvailable()); got one that computes "
        "float32: widen them (attn/half.h)");
  }
  return Status::Ok();
}

Status CheckQueryKeyValue(const TensorView& q, const TensorView& k, const TensorView& v,
                          int min_rank, int max_rank, bool grouped_heads, bool allow_bf16) {
  ATTN_RETURN_IF_ERROR(ValidateFloatView(q, "query", min_rank, max_rank, allow_bf16));
  ATTN_RETURN_IF_ERROR(ValidateFloatView(k, "key", min_rank, max_rank, allow_bf16));
  ATTN_RETURN_IF_ERROR(ValidateFloatView(v, "value", min_rank, max_rank, allow_bf16));
  ATTN_RETURN_IF_ERROR(CheckSameDtype(q, k, v));
  const int rank = q.rank();
  for (const auto* t : {&k, &v}) {
    const char* name = t == &k ? "key" : "value";
    if (t->rank() != rank) {
      return Status::InvalidArgument(std::string(name) + ": rank must equal query's (" +
                                     std::to_string(rank) + "), got " + std::to_string(t->rank()));
    }
    for (int i = 0; i < rank - 2; ++i) {
      if (grouped_heads && rank == 4 && i == 1) {
        // Grouped-query attention: kv heads divide the query heads; value's
        // kv heads are key's.
        const int64_t want = t == &k ? q.shape[1] : k.shape[1];
        const bool ok =
            t == &k ? t->shape[1] > 0 ? want % t->shape[1] == 0 : want == 0 : t->shape[1] == want;
        if (!ok) {
          return Status::InvalidArgument(
              t == &k ? "key: dim 1 (kv heads) must divide query's heads (" + std::to_string(want) +
                            "), got " + std::to_string(t->shape[1])
                      : "value: dim 1 (kv heads) must equal key's (" + std::to_string(want) +
                            "), got " + std::to_string(t->shape[1]));
        }
        continue;
      }
      if (t->shape[i] != q.shape[i]) {
        return Status::InvalidArgument(std::string(name) + ": dim " + std::to_string(i) + " (" +
                                       LeadingDimName(rank, i) + ") must equal query's (" +
                                       std::to_string(q.shape[i]) + "), got " +
                                       std::to_string(t->shape[i]));
      }
    }
  }
  if (v.dim(-2) != k.dim(-2)) {
    return Status::InvalidArgument("value: dim -2 (Lk) must equal key's (" +
                                   std::to_string(k.dim(-2)) + "), got " +
                                   std::to_string(v.dim(-2)));
  }
  return Status::Ok();
}

float* OutputStorage(const OutputAllocator& allocate, const Shape& shape, Tensor* output) {
  output->shape = shape;
  output->data.clear();
  if (allocate) {
    if (float* storage = allocate(shape)) return storage;
  }
  *output = Tensor::Uninitialized(shape);
  return output->data.data();
}

StatusOr<float> ResolveScale(const std::optional<float>& scale, int64_t dim) {
  if (scale.has_value()) {
    if (!std::isfinite(*scale)) {
      return Status::InvalidArgument("scale: must be finite, got " + std::to_string(*scale));
    }
    return *scale;
  }
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)));
}

Status ResolveMasks(const AttentionMasks& masks, bool unbatched, AttentionProblem* p) {
  p->causal = masks.causal;
  p->pos_offset = masks.causal_alignment == CausalAlignment::kBottomRight ? p->lk - p->lq : 0;
  for (const auto& [name, w, dst] :
       {std::tuple{"window_left", masks.window_left, &p->window_left},
        std::tuple{"window_right", masks.window_right, &p->window_right}}) {
    if (!w.has_value()) continue;
    if (*w < 0) {
      return Status::InvalidArgument(std::string(name) + ": must be >= 0 (unset: unbounded), got " +
                                     std::to_string(*w));
    }
    *dst = *w;
  }
  if (masks.key_padding_mask.has_value()) {
    const TensorView& m = *masks.key_padding_mask;
    const std::string want =
        unbatched ? "[" + std::to_string(p->lk) + "] or [1, " + std::to_string(p->lk) + "]"
                  : ShapeToString({p->batch, p->lk});
    if (m.dtype != DataType::kBool) {
      return Status::InvalidArgument(std::string("key_padding_mask: dtype must be bool, got ") +
                                     DataTypeName(m.dtype));
    }
    const bool ok2 = m.rank() == 2 && m.shape[0] == p->batch && m.shape[1] == p->lk;
    const bool ok1 = unbatched && m.rank() == 1 && m.shape[0] == p->lk;
    if (!ok1 && !ok2) {
      return Status::InvalidArgument("key_padding_mask: expected shape " + want + ", got " +
                                     ShapeToString(m.shape));
    }
    if (m.data == nullptr && p->lk > 0 && p->batch > 0) {
      return Status::InvalidArgument("key_padding_mask: no data");
    }
    p->kpm = m.u8();
    p->kpm_stride[0] = ok2 ? m.strides[0] : 0;
    p->kpm_stride[1] = ok2 ? m.strides[1] : m.strides[0];
  }
  if (masks.attn_bias.has_value()) {
    const TensorView& m = *masks.attn_bias;
    if (m.dtype != DataType::kFloat32) {
      return Status::InvalidArgument(std::string("attn_bias: dtype must be float32, got ") +
                                     DataTypeName(m.dtype));
    }
    // [Lq, Lk], [B, Lq, Lk] or [B, H, Lq, Lk]; B, H and Lq may also be 1.
    const int64_t full[4] = {p->batch, p->heads, p->lq, p->lk};
    int map[4] = {-1, -1, -1, -1};  // bias dim index for each of B, H, Lq, Lk
    if (m.rank() == 2) {
      map[2] = 0, map[3] = 1;
    } else if (m.rank() == 3) {
      map[0] = 0, map[2] = 1, map[3] = 2;
    } else if (m.rank() == 4) {
      map[0] = 0, map[1] = 1, map[2] = 2, map[3] = 3;
    }
    bool ok = m.rank() >= 2 && m.rank() <= 4;
    for (int a = 0; ok && a < 4; ++a) {
      if (map[a] < 0) continue;
      const int64_t d = m.shape[map[a]];
      ok = d == full[a] || (d == 1 && a != 3);
    }
    if (!ok) {
      return Status::InvalidArgument(
          "attn_bias: expected a shape that broadcasts to " +
          ShapeToString({p->batch, p->heads, p->lq, p->lk}) +
          " ([Lq, Lk], [B, Lq, Lk] or [B, H, Lq, Lk]; B, H, Lq may be 1), got " +
          ShapeToString(m.shape));
    }
    if (m.data == nullptr && p->lq > 0 && p->lk > 0) {
      return Status::InvalidArgument("attn_bias: no data");
    }
    for (int a = 0; a < 4; ++a) {
      p->bias_stride[a] = (map[a] < 0 || m.shape[map[a]] == 1) ? 0 : m.strides[map[a]];
    }
    p->bias = m.f32();
  }
  return Status::Ok();
}

namespace {

// A float32 view of one of `shapes`, every value finite; `what` names it.
Status CheckSmallFloatTensor(const TensorView& t, const char* what,
                             const std::vector<Shape>& shapes) {
  std::string want;
  bool ok = false;
  for (const Shape& s : shapes) {
    want += (want.empty() ? "" : " or ") + ShapeToString(s);
    ok = ok || t.shape == s;
  }
  if (t.dtype != DataType::kFloat32) {
    return Status::InvalidArgument(std::string(what) + ": dtype must be float32, got " +
                                   DataTypeName(t.dtype));
  }
  if (!ok) {
    return Status::InvalidArgument(std::string(what) + ": expected shape " + want + ", got " +
                                   ShapeToString(t.shape));
  }
  if (t.strides.size() != t.shape.size()) {
    return Status::InvalidArgument(std::string(what) + ": strides do not match its rank");
  }
  const int64_t n = NumElements(t.shape);
  if (n > 0 && t.data == nullptr) return Status::InvalidArgument(std::string(what) + ": no data");
  const int64_t inner = t.rank() == 2 ? t.shape[1] : n;
  for (int64_t e = 0; e < n; ++e) {
    const int64_t off = t.rank() == 2 ? (e / inner) * t.strides[0] + (e % inner) * t.strides[1]
                                      : e * (t.rank() == 1 ? t.strides[0] : 0);
    const float x = t.f32()[off];
    if (!std::isfinite(x)) {
      return Status::InvalidArgument(std::string(what) + ": values must be finite, got " +
                                     std::to_string(x) + " at element " + std::to_string(e));
    }
  }
  return Status::Ok();
}

}  // namespace

Status ResolveScoreOptions(const AttentionScoreOptions& o, AttentionProblem* p) {
  if (o.softcap.has_value()) {
    if (!(*o.softcap > 0.0f) || !std::isfinite(*o.softcap)) {
      return Status::InvalidArgument("softcap: must be > 0 and finite, got " +
                                     std::to_string(*o.softcap));
    }
    p->softcap = *o.softcap;
  }
  if (o.alibi_slopes.has_value()) {
    const TensorView& t = *o.alibi_slopes;
    ATTN_RETURN_IF_ERROR(
        CheckSmallFloatTensor(t, "alibi_slopes", {{p->heads}, {p->batch, p->heads}}));
    p->alibi = t.f32();
    p->alibi_stride[0] = t.rank() == 2 ? t.strides[0] : 0;
    p->alibi_stride[1] = t.strides[t.rank() - 1];
  }
  if (o.sink_logits.has_value()) {
    const TensorView& t = *o.sink_logits;
    ATTN_RETURN_IF_ERROR(CheckSmallFloatTensor(t, "sink_logits", {{p->heads}}));
    if (p->heads > 0 && t.strides[0] != 1) {
      return Status::InvalidArgument("sink_logits: must be contiguous");
    }
    p->sink = t.f32();
  }
  return Status::Ok();
}

}  // namespace attn::internal
