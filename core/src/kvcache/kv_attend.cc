// An Extend's writes and attention over the pages: decode-sized steps on
// the decode kernel (kernels/decode_attention.h), reading the pages in
// place; prefill chunks on the blocked kernel over the layer's keys and
// values gathered (widened) once, bottom-right aligned.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "attn/half.h"
#include "kvcache/decode_attention.h"
#include "kvcache/extend_plan.h"

namespace attn::internal {
namespace {

HalfType HalfOf(CacheType t) {
  return t == CacheType::kBFloat16 ? HalfType::kBFloat16 : HalfType::kFloat16;
}

PageElem ElemOf(CacheType t) {
  switch (t) {
    case CacheType::kFloat32:
      return PageElem::kFloat32;
    case CacheType::kBFloat16:
      return PageElem::kBFloat16;
    case CacheType::kFloat16:
      return PageElem::kFloat16;
  }
  return PageElem::kFloat32;
}

// dst (n elements of `type`) = row of a float32 view, n long, stride `stride`.
void StoreRow(CacheType type, const float* src, int64_t stride, int64_t n, uint8_t* dst,
              std::vector<float>* tmp) {
  if (stride != 1) {
    tmp->resize(static_cast<size_t>(n));
    for (int64_t x = 0; x < n; ++x) (*tmp)[static_cast<size_t>(x)] = src[x * stride];
    src = tmp->data();
  }
  if (type == CacheType::kFloat32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
  } else {
    FloatToHalf(HalfOf(type), src, reinterpret_cast<uint16_t*>(dst), n);
  }
}

// Widens n elements of `type` at src into dst.
void LoadRow(CacheType type, const uint8_t* src, int64_t n, float* dst) {
  if (type == CacheType::kFloat32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
  } else {
    HalfToFloat(HalfOf(type), reinterpret_cast<const uint16_t*>(src), dst, n);
  }
}

void AllocateResult(const StepPlan& p, bool lse, AttentionResult* r) {
  const KvSessionSpec& s = p.session->spec;
  r->output = Tensor::Uninitialized({p.hq, p.n, s.value_dim});
  if (lse) r->lse = Tensor::Uninitialized({p.hq, p.n});
}

// A prefill-sized step: the layer's keys and values widened into dense
// [1, Hkv, L, *] buffers, then ScaledDotProductAttention, bottom-right.
Status AttendGathered(const StepPlan& p, const KvExtendOptions& o, PagePool* pool,
                      AttentionResult* r) {
  const KvSession& s = *p.session;
  const int64_t hkv = s.spec.num_kv_heads, d = s.spec.head_dim, dv = s.spec.value_dim;
  const int64_t tpp = s.tokens_per_page, L = p.after;
  const int64_t es = CacheTypeBytes(s.spec.cache_type);
  Tensor k = Tensor::Uninitialized({1, hkv, L, d}), v = Tensor::Uninitialized({1, hkv, L, dv});
  for (int64_t g = 0; g < hkv; ++g) {
    for (int64_t j0 = 0; j0 < L; j0 += tpp) {
      const int64_t c = std::min(tpp, L - j0);
      const uint8_t* page = pool->Data(p.table[static_cast<size_t>(j0 / tpp * hkv + g)]);
      LoadRow(s.spec.cache_type, page, c * d, k.data.data() + (g * L + j0) * d);
      LoadRow(s.spec.cache_type, page + tpp * d * es, c * dv, v.data.data() + (g * L + j0) * dv);
    }
  }
  const TensorView& q = p.step->query;
  TensorView q4{
      DataType::kFloat32, q.data, {1, p.hq, p.n, d}, {0, q.stride(0), q.stride(1), q.stride(2)}};
  ScaledDotProductAttentionOptions so;
  so.masks.causal = o.causal;
  so.masks.causal_alignment = CausalAlignment::kBottomRight;
  so.masks.window_left = o.window_left;
  so.masks.window_right = o.window_right;
  so.score.softcap = o.score.softcap;
  so.score.return_lse = o.score.return_lse;
  if (!p.slopes.empty()) so.score.alibi_slopes = TensorView::Dense(p.slopes.data(), {p.hq});
  if (!p.sinks.empty()) so.score.sink_logits = TensorView::Dense(p.sinks.data(), {p.hq});
  so.scale = o.scale;
  so.cancelled = o.cancelled;
  so.num_threads = o.num_threads;
  so.output_allocator = [r](const Shape&) { return r->output.data.data(); };
  ATTN_ASSIGN_OR_RETURN(AttentionResult res, ScaledDotProductAttention(q4, k.view(), v.view(), so));
  if (r->lse && res.lse) r->lse->data = std::move(res.lse->data);
  return Status::Ok();
}

}  // namespace

void WriteSteps(const std::vector<StepPlan>& plans, PagePool* pool) {
  std::vector<float> tmp;
  for (const StepPlan& p : plans) {
    if (p.nkv == 0) continue;
    const KvSession& s = *p.session;
    const int64_t hkv = s.spec.num_kv_heads, d = s.spec.head_dim, dv = s.spec.value_dim;
    const int64_t tpp = s.tokens_per_page, es = CacheTypeBytes(s.spec.cache_type);
    const TensorView& k = *p.step->key;
    const TensorView& v = *p.step->value;
    for (int64_t g = 0; g < hkv; ++g) {
      for (int64_t i = 0; i < p.nkv; ++i) {
        const int64_t pos = p.before + i, slot = pos % tpp;
        uint8_t* page = pool->Data(p.table[static_cast<size_t>(pos / tpp * hkv + g)]);
        StoreRow(s.spec.cache_type, k.f32() + g * k.stride(0) + i * k.stride(1), k.stride(2), d,
                 page + slot * d * es, &tmp);
        StoreRow(s.spec.cache_type, v.f32() + g * v.stride(0) + i * v.stride(1), v.stride(2), dv,
                 page + (tpp * d + slot * dv) * es, &tmp);
      }
    }
  }
}

Status AttendSteps(const std::vector<StepPlan>& plans, const KvExtendOptions& o, PagePool* pool,
                   std::vector<AttentionResult>* results) {
  results->assign(plans.size(), AttentionResult{});
  std::vector<DecodeProblem> problems(plans.size());
  std::vector<std::vector<const uint8_t*>> page_ptrs(plans.size());
  std::vector<const DecodeProblem*> decode;
  for (size_t i = 0; i < plans.size(); ++i) {
    const StepPlan& p = plans[i];
    const KvSession& s = *p.session;
    AttentionResult& r = (*results)[i];
    AllocateResult(p, o.score.return_lse, &r);
    if (p.n == 0) continue;
    const int64_t hkv = s.spec.num_kv_heads;
    if (p.hq / hkv * p.n > kDecodeMaxGroupRows) {
      ATTN_RETURN_IF_ERROR(AttendGathered(p, o, pool, &r));
      continue;
    }
    DecodeProblem& dp = problems[i];
    const int64_t npages = static_cast<int64_t>(p.table.size()) / hkv;
    auto& ptrs = page_ptrs[i];
    ptrs.resize(p.table.size());
    for (int64_t g = 0; g < hkv; ++g) {
      for (int64_t pg = 0; pg < npages; ++pg) {
        ptrs[static_cast<size_t>(g * npages + pg)] =
            pool->Data(p.table[static_cast<size_t>(pg * hkv + g)]);
      }
    }
    dp.hq = p.hq;
    dp.hkv = hkv;
    dp.n = p.n;
    dp.d = s.spec.head_dim;
    dp.dv = s.spec.value_dim;
    dp.tokens = p.after;
    dp.tokens_per_page = s.tokens_per_page;
    dp.elem = ElemOf(s.spec.cache_type);
    dp.pages = ptrs.data();
    dp.pages_per_head = npages;
    const TensorView& q = p.step->query;
    dp.q = q.f32();
    dp.q_stride[0] = q.stride(0);
    dp.q_stride[1] = q.stride(1);
    dp.q_stride[2] = q.stride(2);
    dp.out = r.output.data.data();
    dp.lse = r.lse ? r.lse->data.data() : nullptr;
    dp.scale = o.scale ? *o.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(dp.d)));
    dp.causal = o.causal;
    dp.window_left = o.window_left.value_or(-1);
    dp.window_right = o.window_right.value_or(-1);
    dp.softcap = o.score.softcap.value_or(0.0f);
    dp.alibi = p.slopes.empty() ? nullptr : p.slopes.data();
    dp.sink = p.sinks.empty() ? nullptr : p.sinks.data();
    decode.push_back(&dp);
  }
  if (decode.empty()) return Status::Ok();
  return RunDecodeAttention(decode, o.num_threads, o.cancelled);
}

}  // namespace attn::internal
