// An Extend's steps as planned and reserved (kv_extend.cc), and their
// attention over the pages (kv_attend.cc). Internal to core (kvcache/).
#pragma once

#include <memory>
#include <vector>

#include "attn/kv_cache.h"
#include "kvcache/session.h"

namespace attn::internal {

// One step: its session, sizes, and the layer's pages after the append.
struct StepPlan {
  std::shared_ptr<KvSession> session;
  const KvStep* step = nullptr;
  int64_t hq = 0, n = 0, nkv = 0, before = 0, after = 0;
  std::vector<PageId> table;         // the layer's pages after the append
  std::vector<PageId> fresh;         // taken from the pool by this call
  std::vector<PageId> replaced;      // shared pages copied before writing: released on commit
  std::vector<int64_t> cow_heads;    // kv heads whose shared last page is copied
  bool busy = false;                 // this call marked the layer busy
  bool replay = false;               // a replay: nothing written or committed
  std::vector<float> slopes, sinks;  // per query head, when given
  // Blocked keys: the staging pages before the step (read) and after it
  // (fresh when the step writes keys and leaves a block being filled).
  std::vector<PageId> stage_before, stage;
  int64_t held = 0;  // tokens the layer holds after this call (a replay: as it is)
};

// Whether a step's keys and values equal the layer's tokens at
// [at, at + n_kv) as the cache stores them (rounded to its type, or their
// codes); the layer holds `tokens` in `pages` (and `stage`).
bool StoredEquals(const StepPlan& p, const KvLayer& layer, int64_t at, const PagePool& pool);

// Blocked keys (kv_stage.cc): kv head g's keys of a step written through
// the block being filled, each block quantized into its page when it
// fills, the block left being filled staged on p.stage. `scratch` holds
// at least BlockedKeyScratch(p) floats.
int64_t BlockedKeyScratch(const StepPlan& p);
void WriteBlockedKeys(const StepPlan& p, PagePool* pool, int64_t g, float* scratch);
// Whether key token `pos` of kv head g (a row of `dim`, stride `stride`)
// is what a layer of `tokens` holds there (staged, or its block's codes).
bool SameBlockedKey(const KvSession& s, const KvLayer& layer, const PagePool& pool, int64_t g,
                    int64_t pos, const float* x, int64_t stride);

// Writes each step's keys and values into its pages (plan.table), rounded
// to the cache's type (a replay's are already there); a large write on
// `num_threads` threads (0: ComputeThreads()), a kv head at a time.
void WriteSteps(const std::vector<StepPlan>& plans, PagePool* pool, int num_threads);

// Attends each step's queries over its layer's pages (plan.table, `after`
// tokens). results[i] gets output [Hq, n, Dv] (+ lse [Hq, n]).
Status AttendSteps(const std::vector<StepPlan>& plans, const KvExtendOptions& o, PagePool* pool,
                   std::vector<AttentionResult>* results);

}  // namespace attn::internal
