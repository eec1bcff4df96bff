// An Extend's writes and attention over the pages: decode-sized steps on
// the decode kernel (kernels/decode_attention.h), reading the pages in
// place; prefill chunks on the blocked kernel over the layer's keys and
// values gathered (widened) once, bottom-right aligned.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <utility>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "attn/threading.h"
#include "kvcache/decode_attention.h"
#include "kvcache/extend_plan.h"

namespace attn::internal {
namespace {

// Token rows (of every kv head) from which a step's writes and a prefill's
// gather of its layer run on the compute team, a kv head at a time: below,
// the team's start costs about what it saves.
constexpr int64_t kParallelTokens = 1024;

int ThreadsOf(int num_threads) { return num_threads > 0 ? num_threads : ComputeThreads(); }

// The calling thread's place in its team (0 in a build without OpenMP,
// -DATTN_OPENMP=OFF: the fuzzing build).
int TeamMember() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
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
  Tensor k = Tensor::Uninitialized({1, hkv, L, d}), v = Tensor::Uninitialized({1, hkv, L, dv});
  const int64_t fill = s.layout.block_tokens > 0 ? p.held - p.held % s.layout.block_tokens : L;
  // As stored (quantized sides' values dequantized), a kv head a thread.
  const int team = static_cast<int>(
      std::min<int64_t>(hkv, L * hkv >= kParallelTokens ? ThreadsOf(o.num_threads) : 1));
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
  for (int64_t g = 0; g < hkv; ++g) {
    for (int64_t j0 = 0; j0 < L; j0 += tpp) {
      const int64_t c = std::min(tpp, L - j0);
      const uint8_t* page = pool->Data(p.table[static_cast<size_t>(j0 / tpp * hkv + g)]);
      if (s.layout.block_tokens > 0) {
        const uint8_t* stage = p.stage.empty() ? nullptr : pool->Data(p.stage[g]);
        WidenBlockedKeys(s.layout, page, stage, j0, j0, c, fill, d,
                         k.data.data() + (g * L + j0) * d);
      } else {
        DecodeTokens(s.layout.key, page, 0, c, d, k.data.data() + (g * L + j0) * d);
      }
      DecodeTokens(s.layout.value, page, 0, c, dv, v.data.data() + (g * L + j0) * dv);
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

namespace {

// Whether token `slot` of a side of `page` holds src (dim values, stride
// `stride`) as the side stores it: its codes and its factor, bit for bit (a
// NaN equals its own NaN).
bool SameToken(const PageSide& side, const float* src, int64_t stride, int64_t dim,
               const uint8_t* page, int64_t slot, std::vector<float>* tmp,
               std::vector<uint8_t>* row) {
  tmp->resize(static_cast<size_t>(dim));
  row->resize(static_cast<size_t>(side.row_bytes + 4));
  for (int64_t x = 0; x < dim; ++x) (*tmp)[static_cast<size_t>(x)] = src[x * stride];
  const float factor = side.codec->encode(tmp->data(), dim, row->data());
  if (std::memcmp(row->data(), side.Row(page, slot), static_cast<size_t>(side.row_bytes)) != 0) {
    return false;
  }
  return !side.codec->scaled || std::memcmp(&factor, side.Factors(page) + slot, 4) == 0;
}

}  // namespace

bool StoredEquals(const StepPlan& p, const KvLayer& layer, int64_t at, const PagePool& pool) {
  const std::vector<PageId>& pages = layer.pages;
  if (p.nkv == 0) return true;
  const KvSession& s = *p.session;
  const int64_t hkv = s.spec.num_kv_heads, d = s.spec.head_dim, dv = s.spec.value_dim;
  const int64_t tpp = s.tokens_per_page;
  const TensorView& k = *p.step->key;
  const TensorView& v = *p.step->value;
  std::vector<float> tmp;
  std::vector<uint8_t> row;
  for (int64_t g = 0; g < hkv; ++g) {
    for (int64_t i = 0; i < p.nkv; ++i) {
      const int64_t pos = at + i, slot = pos % tpp;
      const uint8_t* page = pool.Data(pages[static_cast<size_t>(pos / tpp * hkv + g)]);
      const float* kx = k.f32() + g * k.stride(0) + i * k.stride(1);
      const bool key_same =
          s.layout.block_tokens > 0
              ? SameBlockedKey(s, layer, pool, g, pos, kx, k.stride(2))
              : SameToken(s.layout.key, kx, k.stride(2), d, page, slot, &tmp, &row);
      if (!key_same || !SameToken(s.layout.value, v.f32() + g * v.stride(0) + i * v.stride(1),
                                  v.stride(2), dv, page, slot, &tmp, &row)) {
        return false;
      }
    }
  }
  return true;
}

void WriteSteps(const std::vector<StepPlan>& plans, PagePool* pool, int num_threads) {
  // Every (step, kv head)'s rows, each into its own page slots (blocked
  // keys: its blocks and its staging page).
  std::vector<std::pair<const StepPlan*, int64_t>> heads;
  int64_t rows = 0, width = 0;
  for (const StepPlan& p : plans) {
    if (p.nkv == 0 || p.replay) continue;
    const KvSession& s = *p.session;
    for (int64_t g = 0; g < s.spec.num_kv_heads; ++g) heads.emplace_back(&p, g);
    rows += p.nkv * s.spec.num_kv_heads;
    width = std::max({width, s.spec.head_dim, s.spec.value_dim});
    if (s.layout.block_tokens > 0) width = std::max(width, BlockedKeyScratch(p));
  }
  const int64_t n = static_cast<int64_t>(heads.size());
  if (n == 0) return;  // only replays, or no new tokens
  const int team =
      static_cast<int>(std::min<int64_t>(n, rows >= kParallelTokens ? ThreadsOf(num_threads) : 1));
  std::vector<float> scratch(static_cast<size_t>(team * width));  // a row a thread
#pragma omp parallel for num_threads(team) schedule(dynamic, 1) if (team > 1)
  for (int64_t h = 0; h < n; ++h) {
    const StepPlan& p = *heads[static_cast<size_t>(h)].first;
    const int64_t g = heads[static_cast<size_t>(h)].second;
    const KvSession& s = *p.session;
    const int64_t hkv = s.spec.num_kv_heads, d = s.spec.head_dim, dv = s.spec.value_dim;
    const int64_t tpp = s.tokens_per_page;
    float* tmp = scratch.data() + (team > 1 ? TeamMember() : 0) * width;
    const TensorView& k = *p.step->key;
    const TensorView& v = *p.step->value;
    const bool blocked = s.layout.block_tokens > 0;
    if (blocked) WriteBlockedKeys(p, pool, g, tmp);
    for (int64_t i = 0; i < p.nkv; ++i) {
      const int64_t pos = p.before + i, slot = pos % tpp;
      uint8_t* page = pool->Data(p.table[static_cast<size_t>(pos / tpp * hkv + g)]);
      if (!blocked) {
        EncodeToken(s.layout.key, k.f32() + g * k.stride(0) + i * k.stride(1), k.stride(2), d, tmp,
                    page, slot);
      }
      EncodeToken(s.layout.value, v.f32() + g * v.stride(0) + i * v.stride(1), v.stride(2), dv, tmp,
                  page, slot);
    }
  }
}

namespace {

// Step p's problem over its pages (`ptrs`, by kv head), all its query rows.
DecodeProblem MakeProblem(const StepPlan& p, const KvExtendOptions& o,
                          const std::vector<const uint8_t*>& ptrs,
                          const std::vector<const uint8_t*>& stage_ptrs, AttentionResult* r) {
  const KvSession& s = *p.session;
  DecodeProblem dp;
  const int64_t hkv = s.spec.num_kv_heads;
  dp.hq = p.hq;
  dp.hkv = hkv;
  dp.n = p.n;
  dp.d = s.spec.head_dim;
  dp.dv = s.spec.value_dim;
  dp.tokens = p.after;
  dp.tokens_per_page = s.tokens_per_page;
  dp.key = s.layout.key;
  dp.value = s.layout.value;
  dp.layout = &s.layout;
  if (s.layout.block_tokens > 0) {
    dp.fill_start = p.held - p.held % s.layout.block_tokens;
    dp.stage = stage_ptrs.empty() ? nullptr : stage_ptrs.data();
  }
  dp.pages = ptrs.data();
  dp.pages_per_head = static_cast<int64_t>(ptrs.size()) / hkv;
  const TensorView& q = p.step->query;
  dp.q = q.f32();
  dp.q_stride[0] = q.stride(0);
  dp.q_stride[1] = q.stride(1);
  dp.q_stride[2] = q.stride(2);
  dp.out = r->output.data.data();
  dp.lse = r->lse ? r->lse->data.data() : nullptr;
  dp.scale = o.scale ? *o.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(dp.d)));
  dp.causal = o.causal;
  dp.window_left = o.window_left.value_or(-1);
  dp.window_right = o.window_right.value_or(-1);
  dp.softcap = o.score.softcap.value_or(0.0f);
  dp.alibi = p.slopes.empty() ? nullptr : p.slopes.data();
  dp.sink = p.sinks.empty() ? nullptr : p.sinks.data();
  return dp;
}

// Rows [t0, t0 + m) of a step's problem, answered into their own buffers.
struct RowSlice {
  size_t step;
  int64_t t0, m;
  std::vector<float> out, lse;
};

}  // namespace

Status AttendSteps(const std::vector<StepPlan>& plans, const KvExtendOptions& o, PagePool* pool,
                   std::vector<AttentionResult>* results) {
  results->assign(plans.size(), AttentionResult{});
  std::deque<DecodeProblem> problems;
  std::vector<std::vector<const uint8_t*>> page_ptrs(plans.size()), stage_ptrs(plans.size());
  std::deque<RowSlice> slices;
  std::vector<const DecodeProblem*> decode;
  for (size_t i = 0; i < plans.size(); ++i) {
    const StepPlan& p = plans[i];
    const KvSession& s = *p.session;
    AttentionResult& r = (*results)[i];
    AllocateResult(p, o.score.return_lse, &r);
    if (p.n == 0) continue;
    const int64_t hkv = s.spec.num_kv_heads, group = p.hq / hkv;
    const double gather = 4.0 * static_cast<double>(hkv * p.after) *
                          static_cast<double>(s.spec.head_dim + s.spec.value_dim);
    const bool wide = group * p.n > kDecodeMaxGroupRows;
    if (wide && (o.max_gather_bytes <= 0 || gather <= static_cast<double>(o.max_gather_bytes))) {
      ATTN_RETURN_IF_ERROR(AttendGathered(p, o, pool, &r));
      continue;
    }
    // The layer's pages in place: decode-sized problems, in row slices
    // when there are more rows than the kernel takes at once.
    const int64_t npages = static_cast<int64_t>(p.table.size()) / hkv;
    auto& ptrs = page_ptrs[i];
    ptrs.resize(p.table.size());
    for (int64_t g = 0; g < hkv; ++g) {
      for (int64_t pg = 0; pg < npages; ++pg) {
        ptrs[static_cast<size_t>(g * npages + pg)] =
            pool->Data(p.table[static_cast<size_t>(pg * hkv + g)]);
      }
    }
    for (PageId st : p.stage) stage_ptrs[i].push_back(pool->Data(st));
    const DecodeProblem whole = MakeProblem(p, o, ptrs, stage_ptrs[i], &r);
    if (!wide) {
      problems.push_back(whole);
      decode.push_back(&problems.back());
      continue;
    }
    const int64_t m = std::max<int64_t>(1, kDecodeMaxGroupRows / group);
    for (int64_t t0 = 0; t0 < p.n; t0 += m) {
      RowSlice& sl = slices.emplace_back();
      sl.step = i, sl.t0 = t0, sl.m = std::min(m, p.n - t0);
      sl.out.resize(static_cast<size_t>(p.hq * sl.m * whole.dv));
      if (whole.lse != nullptr) sl.lse.resize(static_cast<size_t>(p.hq * sl.m));
      DecodeProblem dp = whole;
      dp.n = sl.m;
      dp.first_pos = p.after - p.n + t0;
      dp.q = whole.q + t0 * whole.q_stride[1];
      dp.out = sl.out.data();
      dp.lse = whole.lse != nullptr ? sl.lse.data() : nullptr;
      problems.push_back(dp);
      decode.push_back(&problems.back());
    }
  }
  if (decode.empty()) return Status::Ok();
  ATTN_RETURN_IF_ERROR(RunDecodeAttention(decode, o.num_threads, o.cancelled));
  for (const RowSlice& sl : slices) {  // into [Hq, n, Dv] (and [Hq, n])
    AttentionResult& r = (*results)[sl.step];
    const int64_t hq = r.output.shape[0], n = r.output.shape[1], dv = r.output.shape[2];
    for (int64_t h = 0; h < hq; ++h) {
      std::memcpy(r.output.data.data() + (h * n + sl.t0) * dv, sl.out.data() + h * sl.m * dv,
                  static_cast<size_t>(sl.m * dv) * 4);
      if (r.lse) {
        std::memcpy(r.lse->data.data() + h * n + sl.t0, sl.lse.data() + h * sl.m,
                    static_cast<size_t>(sl.m) * 4);
      }
    }
  }
  return Status::Ok();
}

}  // namespace attn::internal
