// KvCacheStore::Extend: check everything, reserve the pages, write the
// steps' keys and values, attend, then commit; any error (cancellation
// included) before the commit gives every page back and changes nothing.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <string_view>

#include "attn/half.h"
#include "kvcache/decode_attention.h"
#include "kvcache/extend_plan.h"
#include "kvcache/session.h"

namespace attn {

using internal::KvLayer;
using internal::KvSession;
using internal::PageId;
using internal::StepPlan;

namespace {

std::string At(size_t i, const std::string& id) {
  return "steps[" + std::to_string(i) + "] (session '" + id + "')";
}

Status CheckShape(const TensorView& t, const Shape& want, const std::string& what) {
  if (t.dtype == DataType::kFloat32 && t.shape == want) return Status::Ok();
  return Status::InvalidArgument(what + ": expected float32 " + ShapeToString(want) + ", got " +
                                 DataTypeName(t.dtype) + " " + ShapeToString(t.shape));
}

// A quantized side holds finite values only: the first other one of `t`
// [Hkv, n_kv, dim] is INVALID_ARGUMENT naming it.
Status CheckFinite(const TensorView& t, const internal::PageSide& side, const std::string& what) {
  if (!side.codec->scaled) return Status::Ok();
  for (int64_t g = 0; g < t.dim(0); ++g) {
    for (int64_t i = 0; i < t.dim(1); ++i) {
      const float* row = t.f32() + g * t.stride(0) + i * t.stride(1);
      for (int64_t x = 0; x < t.dim(2); ++x) {
        const float v = row[x * t.stride(2)];
        if (std::isfinite(v)) continue;
        return Status::InvalidArgument(
            what + ": the session stores it as " + side.codec->name +
            ", which holds finite values only; expected finite values, got " + std::to_string(v) +
            " at [" + std::to_string(g) + ", " + std::to_string(i) + ", " + std::to_string(x) +
            "]");
      }
    }
  }
  return Status::Ok();
}

// The step's shapes against its session; sets hq, n and nkv.
Status CheckStep(size_t i, int64_t layer, StepPlan* p) {
  const KvSessionSpec& s = p->session->spec;
  const KvStep& st = *p->step;
  const std::string at = At(i, s.session_id);
  if (layer >= s.num_layers) {
    return Status::InvalidArgument("layer: " + at + " has " + std::to_string(s.num_layers) +
                                   " layers (0.." + std::to_string(s.num_layers - 1) + "), got " +
                                   std::to_string(layer));
  }
  const TensorView& q = st.query;
  if (q.dtype != DataType::kFloat32 || q.rank() != 3 || q.dim(0) < s.num_kv_heads ||
      q.dim(0) % s.num_kv_heads != 0 || q.dim(2) != s.head_dim) {
    return Status::InvalidArgument(
        at + " query: expected float32 [Hq, n_q, " + std::to_string(s.head_dim) +
        "] with Hq a multiple of num_kv_heads (" + std::to_string(s.num_kv_heads) + "), got " +
        DataTypeName(q.dtype) + " " + ShapeToString(q.shape));
  }
  p->hq = q.dim(0);
  p->n = q.dim(1);
  if (st.key.has_value() != st.value.has_value()) {
    return Status::InvalidArgument(at + (st.key ? " value" : " key") +
                                   ": key and value come together (both or neither), got only " +
                                   (st.key ? "key" : "value"));
  }
  if (st.key) {
    const TensorView& k = *st.key;
    if (k.dtype != DataType::kFloat32 || k.rank() != 3 || k.dim(0) != s.num_kv_heads ||
        k.dim(2) != s.head_dim) {
      return Status::InvalidArgument(at + " key: expected float32 [num_kv_heads, n_kv, D] = [" +
                                     std::to_string(s.num_kv_heads) + ", n_kv, " +
                                     std::to_string(s.head_dim) + "], got " +
                                     DataTypeName(k.dtype) + " " + ShapeToString(k.shape));
    }
    p->nkv = k.dim(1);
    ATTN_RETURN_IF_ERROR(
        CheckShape(*st.value, {s.num_kv_heads, p->nkv, s.value_dim}, at + " value"));
    ATTN_RETURN_IF_ERROR(CheckFinite(k, p->session->layout.key, at + " key"));
    ATTN_RETURN_IF_ERROR(CheckFinite(*st.value, p->session->layout.value, at + " value"));
  }
  return Status::Ok();
}

Status CheckOptions(int64_t layer, size_t steps, const KvExtendOptions& o) {
  if (layer < 0) {
    return Status::InvalidArgument("layer: must be >= 0, got " + std::to_string(layer));
  }
  if (o.scale && !std::isfinite(*o.scale)) {
    return Status::InvalidArgument("scale: must be finite, got " + std::to_string(*o.scale));
  }
  for (const auto& [w, name] :
       {std::pair{o.window_left, "window_left"}, std::pair{o.window_right, "window_right"}}) {
    if (w && *w < 0) {
      return Status::InvalidArgument(std::string(name) + ": must be >= 0, got " +
                                     std::to_string(*w));
    }
  }
  if (o.score.softcap && !(*o.score.softcap > 0.0f && std::isfinite(*o.score.softcap))) {
    return Status::InvalidArgument("softcap: must be > 0 and finite, got " +
                                   std::to_string(*o.score.softcap));
  }
  if (o.score.alibi_slopes) {
    const TensorView& a = *o.score.alibi_slopes;
    if (a.dtype != DataType::kFloat32 || a.rank() < 1 || a.rank() > 2 ||
        (a.rank() == 2 && a.dim(0) != static_cast<int64_t>(steps))) {
      return Status::InvalidArgument("alibi_slopes: expected float32 [Hq] or [steps, Hq] = [" +
                                     std::to_string(steps) + ", Hq], got " + DataTypeName(a.dtype) +
                                     " " + ShapeToString(a.shape));
    }
  }
  if (o.score.sink_logits) {
    const TensorView& a = *o.score.sink_logits;
    if (a.dtype != DataType::kFloat32 || a.rank() != 1) {
      return Status::InvalidArgument(std::string("sink_logits: expected float32 [Hq], got ") +
                                     DataTypeName(a.dtype) + " " + ShapeToString(a.shape));
    }
  }
  return Status::Ok();
}

// Copies a per-head option row for step i, checking its length and values.
Status PerHead(const std::optional<TensorView>& t, size_t i, int64_t hq, const char* name,
               std::vector<float>* out) {
  if (!t) return Status::Ok();
  const int64_t len = t->dim(-1);
  if (len != hq) {
    return Status::InvalidArgument(std::string(name) + ": steps[" + std::to_string(i) + "] has " +
                                   std::to_string(hq) + " query heads, got " +
                                   ShapeToString(t->shape));
  }
  const float* base = t->f32() + (t->rank() == 2 ? static_cast<int64_t>(i) * t->stride(0) : 0);
  out->resize(static_cast<size_t>(hq));
  for (int64_t h = 0; h < hq; ++h) {
    const float v = base[h * t->stride(-1)];
    if (!std::isfinite(v)) {
      return Status::InvalidArgument(std::string(name) + ": must be finite, got " +
                                     std::to_string(v) + " for head " + std::to_string(h));
    }
    (*out)[static_cast<size_t>(h)] = v;
  }
  return Status::Ok();
}

}  // namespace

Status CheckStepSessionIds(const std::vector<std::string_view>& ids) {
  std::set<std::string_view> seen;
  for (size_t i = 0; i < ids.size(); ++i) {
    ATTN_RETURN_IF_ERROR(CheckSessionId(ids[i], "steps[" + std::to_string(i) + "].session_id"));
    if (!seen.insert(ids[i]).second) {
      return Status::InvalidArgument(At(i, std::string(ids[i])) +
                                     ": a session may appear once in an Extend (it is also an "
                                     "earlier step); send its tokens in one step");
    }
  }
  return Status::Ok();
}

// The sessions and shapes of an Extend, checked; nothing reserved.
static StatusOr<std::vector<StepPlan>> Plan(KvCacheStore::Impl& impl, int64_t layer,
                                            const std::vector<KvStep>& steps,
                                            const KvExtendOptions& o) {
  ATTN_RETURN_IF_ERROR(CheckOptions(layer, steps.size(), o));
  std::vector<std::string_view> ids;
  ids.reserve(steps.size());
  for (const KvStep& st : steps) ids.push_back(st.session_id);
  ATTN_RETURN_IF_ERROR(CheckStepSessionIds(ids));  // before any lookup
  std::vector<StepPlan> plans(steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    const std::string& id = steps[i].session_id;
    ATTN_ASSIGN_OR_RETURN(plans[i].session,
                          impl.Find(o.owner, id, "extend: steps[" + std::to_string(i) + "]: "));
    plans[i].step = &steps[i];
    ATTN_RETURN_IF_ERROR(CheckStep(i, layer, &plans[i]));
    // Per-head options concern the query heads; a step without queries
    // (keys only, in a batch with decode steps) has none to match.
    if (plans[i].n == 0) continue;
    ATTN_RETURN_IF_ERROR(
        PerHead(o.score.alibi_slopes, i, plans[i].hq, "alibi_slopes", &plans[i].slopes));
    ATTN_RETURN_IF_ERROR(
        PerHead(o.score.sink_logits, i, plans[i].hq, "sink_logits", &plans[i].sinks));
  }
  return plans;
}

StatusOr<AttentionCost> KvCacheStore::EstimateExtend(int64_t layer,
                                                     const std::vector<KvStep>& steps,
                                                     const KvExtendOptions& options) {
  ATTN_ASSIGN_OR_RETURN(std::vector<StepPlan> plans, Plan(*impl_, layer, steps, options));
  AttentionCost cost;
  for (StepPlan& p : plans) {
    int64_t tokens;
    {
      std::lock_guard<std::mutex> lock(p.session->mu);
      tokens = p.session->layers[static_cast<size_t>(layer)].tokens;
    }
    const KvSessionSpec& s = p.session->spec;
    const double lk = static_cast<double>(tokens + p.nkv), rows = static_cast<double>(p.hq * p.n);
    cost.flops += 2.0 * rows * lk * static_cast<double>(s.head_dim + s.value_dim);
    cost.work += rows * lk * static_cast<double>(s.head_dim);
    cost.result_bytes +=
        rows * static_cast<double>(s.value_dim + (options.score.return_lse ? 1 : 0)) * 4;
    // Reading the cache: count it as work too, so that a long decode is "large".
    cost.flops += lk * static_cast<double>(s.num_kv_heads * (s.head_dim + s.value_dim));
  }
  return cost;
}

namespace {

// Hands a step its pages from `pages` at *next: copies of shared last
// pages, then the new ones, then (blocked keys) fresh staging pages.
void HandOut(StepPlan& p, const std::vector<PageId>& pages, size_t* at, internal::PagePool* pool) {
  size_t& next = *at;
  KvSession& s = *p.session;
  const int64_t hkv = s.spec.num_kv_heads, tpp = s.tokens_per_page;
  const int64_t pages_before = (p.before + tpp - 1) / tpp;
  const int64_t pages_after = (p.after + tpp - 1) / tpp;
  if (!p.cow_heads.empty()) {
    const int64_t used = p.before % tpp;
    for (int64_t g : p.cow_heads) {
      PageId& slot = p.table[static_cast<size_t>((pages_before - 1) * hkv + g)];
      const PageId copy = pages[next++];
      p.fresh.push_back(copy);
      // The valid prefix of each side: its codes, then its factors.
      for (const internal::PageSide* side : {&s.layout.key, &s.layout.value}) {
        std::memcpy(side->Row(pool->Data(copy), 0), side->Row(pool->Data(slot), 0),
                    static_cast<size_t>(used * side->row_bytes));
        if (side->codec->scaled) {
          std::memcpy(side->Factors(pool->Data(copy)), side->Factors(pool->Data(slot)),
                      static_cast<size_t>(used) * 4);
        } else if (side->codec->blocked) {  // every block's meta (a full one's is read)
          std::memcpy(side->Factors(pool->Data(copy)), side->Factors(pool->Data(slot)),
                      static_cast<size_t>(tpp / s.layout.block_tokens * 2 * s.spec.head_dim) * 4);
        }
      }
      p.replaced.push_back(slot);
      slot = copy;
    }
  }
  for (int64_t k = 0; k < (pages_after - pages_before) * hkv; ++k) {
    p.fresh.push_back(pages[next]);
    p.table.push_back(pages[next++]);
  }
  // Blocked keys written: the old staging pages go at the commit, and a
  // block left being filled gets fresh ones (the old ones stay readable
  // until then, for this call and for a rollback).
  const int64_t g_tokens = s.layout.block_tokens;
  if (g_tokens > 0 && p.nkv > 0) {
    p.replaced.insert(p.replaced.end(), p.stage_before.begin(), p.stage_before.end());
    p.stage.clear();
    if (p.after % g_tokens != 0) {
      for (int64_t g = 0; g < hkv; ++g) {
        p.fresh.push_back(pages[next]);
        p.stage.push_back(pages[next++]);
      }
    }
  }
}

// Marks each step's layer busy and works out its pages: kept, copied
// (a shared last page about to be written), fresh. On error, nothing is
// marked (the caller's Rollback unmarks what was).
Status Reserve(int64_t layer, std::vector<StepPlan>& plans, KvCacheStore::Impl& impl) {
  internal::PagePool* pool = &impl.pool;
  int64_t needed = 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    StepPlan& p = plans[i];
    KvSession& s = *p.session;
    std::lock_guard<std::mutex> lock(s.mu);
    KvLayer& l = s.layers[static_cast<size_t>(layer)];
    if (s.gone) {  // deleted or expired since the plan found it
      return Status::NotFound(internal::NotFoundMessage(
          s.spec.session_id, "extend: steps[" + std::to_string(i) + "]: "));
    }
    if (l.busy) {
      return Status::Aborted(At(i, s.spec.session_id) + ": layer " + std::to_string(layer) +
                             " is busy with another Extend; a client sequences its own steps");
    }
    p.before = l.tokens;
    p.after = l.tokens + p.nkv;
    if (const auto& e = p.step->expected_tokens; e && *e != l.tokens) {
      // Exactly-once: a replay of a step already applied, or a refusal.
      const bool holds = *e >= 0 && l.tokens >= *e + p.nkv;
      if (!holds || !internal::StoredEquals(p, l, *e, *pool)) {
        return Status::FailedPrecondition(
            At(i, s.spec.session_id) + ": layer " + std::to_string(layer) + " holds " +
            std::to_string(l.tokens) + " tokens, expected_tokens " + std::to_string(*e) +
            (holds ? "; the tokens at [" + std::to_string(*e) + ", " + std::to_string(*e + p.nkv) +
                         ") differ from this step's keys and values, so it is not a replay"
                   : "") +
            "; read the session (GetSession) to learn where it stands");
      }
      p.replay = true;
      p.before = *e;
      p.after = *e + p.nkv;
      // Busy while it reads, so that no truncate drops the tokens it reads.
      l.busy = true;
      ++s.busy_layers;
      p.busy = true;
      s.last_used = internal::SteadyClock::now();
      p.table = l.pages;
      p.stage = l.stage;
      p.held = l.tokens;
      continue;
    }
    if (p.after > s.spec.max_tokens) {
      return Status::ResourceExhausted(
          At(i, s.spec.session_id) + ": layer " + std::to_string(layer) + " holds " +
          std::to_string(l.tokens) + " tokens; " + std::to_string(p.nkv) +
          " more would pass its max_tokens (" + std::to_string(s.spec.max_tokens) + ")");
    }
    l.busy = true;
    ++s.busy_layers;
    p.busy = true;
    s.last_used = internal::SteadyClock::now();
    p.table = l.pages;
    p.stage_before = l.stage;
    p.stage = l.stage;
    p.held = p.after;
    const int64_t hkv = s.spec.num_kv_heads, tpp = s.tokens_per_page;
    const int64_t g_tokens = s.layout.block_tokens;
    if (g_tokens > 0 && p.nkv > 0 && p.after % g_tokens != 0) needed += hkv;  // fresh staging
    const int64_t pages_after = (p.after + tpp - 1) / tpp;
    const int64_t pages_before = (p.before + tpp - 1) / tpp;
    needed += (pages_after - pages_before) * hkv;
    if (p.nkv > 0 && p.before % tpp != 0) {
      // Decided here, under the session's lock: a fork may share the page
      // later, but the tokens before `before` are never written in place.
      for (int64_t g = 0; g < hkv; ++g) {
        if (pool->RefCount(p.table[static_cast<size_t>((pages_before - 1) * hkv + g)]) > 1) {
          p.cow_heads.push_back(g);
        }
      }
      needed += static_cast<int64_t>(p.cow_heads.size());
    }
  }
  std::vector<PageId> pages;
  // Every step's session is the caller's: one owner pays for the pages.
  if (!plans.empty()) {
    ATTN_RETURN_IF_ERROR(pool->Allocate(needed, impl.PoolOwnerOf(*plans[0].session), &pages));
  }
  // Hand the pages out: copies of shared last pages, then the new ones.
  size_t next = 0;
  for (StepPlan& p : plans) {
    if (!p.replay) HandOut(p, pages, &next, pool);  // a replay reads what it holds
  }
  return Status::Ok();
}

// Gives back what this call took and unmarks its layers: no session changes.
void Rollback(int64_t layer, std::vector<StepPlan>& plans, internal::PagePool* pool) {
  for (StepPlan& p : plans) {
    pool->Release(p.fresh.data(), static_cast<int64_t>(p.fresh.size()));
    p.fresh.clear();
    if (!p.busy) continue;
    std::lock_guard<std::mutex> lock(p.session->mu);
    p.session->layers[static_cast<size_t>(layer)].busy = false;
    --p.session->busy_layers;
    p.busy = false;
  }
}

void Commit(int64_t layer, std::vector<StepPlan>& plans, internal::PagePool* pool) {
  for (StepPlan& p : plans) {
    {
      std::lock_guard<std::mutex> lock(p.session->mu);
      KvLayer& l = p.session->layers[static_cast<size_t>(layer)];
      if (!p.replay) {  // a replay leaves the layer as it is
        l.pages.swap(p.table);
        l.stage.swap(p.stage);
        l.tokens = p.after;
        p.session->RecountMetadataLocked();
      }
      l.busy = false;
      --p.session->busy_layers;
      p.session->last_used = internal::SteadyClock::now();
    }
    p.busy = false;
    p.fresh.clear();
    pool->Release(p.replaced.data(), static_cast<int64_t>(p.replaced.size()));
  }
}

}  // namespace

StatusOr<KvExtendResult> KvCacheStore::Extend(int64_t layer, const std::vector<KvStep>& steps,
                                              const KvExtendOptions& options) {
  ATTN_ASSIGN_OR_RETURN(std::vector<StepPlan> plans, Plan(*impl_, layer, steps, options));
  internal::PagePool* pool = &impl_->pool;
  KvExtendResult out;
  Status st = GuardExceptions("extend", [&]() -> Status {
    ATTN_RETURN_IF_ERROR(Reserve(layer, plans, *impl_));
    internal::WriteSteps(plans, pool, options.num_threads);
    ATTN_RETURN_IF_ERROR(internal::AttendSteps(plans, options, pool, &out.results));
    if (options.before_commit) options.before_commit();
    // The last moment a caller who gave up can be told "nothing happened":
    // once committed, only a replay (expected_tokens) makes a retry safe.
    if (options.cancelled != nullptr && options.cancelled->load()) {
      return Status::Cancelled("extend: cancelled before its commit; nothing was appended");
    }
    if (options.deadline && std::chrono::system_clock::now() > *options.deadline) {
      return Status::DeadlineExceeded(
          "extend: the deadline passed before its commit; nothing was appended");
    }
    return Status::Ok();
  });
  if (!st.ok()) {
    Rollback(layer, plans, pool);
    return st;
  }
  Commit(layer, plans, pool);
  out.replayed.reserve(plans.size());
  for (const StepPlan& p : plans) out.replayed.push_back(p.replay);
  return out;
}

}  // namespace attn
