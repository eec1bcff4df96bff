// KV-cache sessions: the keys and values of each sequence kept in a paged
// pool, and Extend, which appends a step's keys and values to a layer and
// attends its queries over everything the layer then holds.
//
// Storage: one pool of fixed-size pages (KvStoreOptions::page_bytes), cut
// from one reservation so that memory never fragments. A page belongs to one
// (layer, kv head) and holds `tokens_per_page` tokens: their keys [T, D] then
// their values [T, Dv], contiguous D-vectors in the cache's type (float32,
// or bfloat16/float16 kept as stored) or quantized (CacheFormat: codes, and
// a factor per token). Pages are reference-counted: a fork
// shares every page and copies one only when a side writes into a shared
// page (copy-on-write). The pool never over-commits: bytes_used() <=
// bytes_limit() always.
//
// Owners: every session belongs to the owner that created it, an opaque
// string (the server's principal: a token's name, a certificate's subject,
// or "" for the anonymous one). Ids live in a namespace per owner: the same
// id under two owners is two sessions, and every call sees only its
// owner's sessions (another owner's answer NOT_FOUND with exactly the
// message of a missing id). A fork belongs to its parent's owner, so pages
// are shared only within an owner and each counts once for it. Quotas per
// owner (sessions, bytes) beside the store's own limits.
//
// Thread safety: every member of KvCacheStore may be called concurrently.
// Two Extends on the same (session, layer) at once: the second gets ABORTED
// ("busy"). An Extend that fails or is cancelled changes no session.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attn/attention.h"
#include "attn/status.h"
#include "attn/tensor.h"

namespace attn {

// How a cache stores its keys and values.
enum class CacheType { kFloat32, kBFloat16, kFloat16 };
// "float32", "bfloat16" or "float16".
const char* CacheTypeName(CacheType type);
// Bytes per element: 4 or 2.
int CacheTypeBytes(CacheType type);

// How a session stores its keys, or its values: as its cache_type says
// (kAsCacheType), or quantized:
//   kInt8     symmetric int8 codes and one float32 factor per (token, kv
//             head), max|x| / 127;
//   kFp8E4M3  float8 e4m3 codes (largest 448) and a factor max|x| / 448;
//   kInt4     4-bit codes, asymmetric (scale (max - min) / 15 and min):
//             values per token in groups of 64 channels; keys per channel
//             over a block of tokens (KvSessionInfo::key_block_tokens), the
//             block being filled kept in cache_type until it is full (then
//             quantized once; a truncate into a full block stages its kept
//             tokens again). head_dim / value_dim even.
// A quantized side holds finite values only.
enum class CacheFormat { kAsCacheType, kInt8, kFp8E4M3, kInt4 };
// "int8", "fp8_e4m3", "int4", or for kAsCacheType the type's name.
const char* CacheFormatName(CacheFormat format, CacheType type);
// What a side stored as `format` in a cache of `type` holds of one token's
// n values (one kv head's values, or keys of a per-token format): rounded
// to the type, or quantized and widened back. x finite for a quantized
// format. int4 keys depend on their block, which this does not model.
void StoredValues(CacheFormat format, CacheType type, const float* x, int64_t n, float* out);
// Bytes one token of one kv head takes in a side of `dim` values (codes and
// factor; for int4, the values' codes and group scales, which int4 keys'
// codes and block meta come close to).
int64_t StoredBytes(CacheFormat format, CacheType type, int64_t dim);

// A session id is [A-Za-z0-9._:-]{1,128}; its family, by which balancers
// route it, is the part before its first ':' (all of it without one), and
// a fork stays in its parent's family. Anything else: INVALID_ARGUMENT
// naming `field`, the id shown with control and non-ASCII bytes as \xNN.
Status CheckSessionId(std::string_view id, std::string_view field);
// The session ids of an Extend's steps: each checked as
// "steps[i].session_id", and a session named by two steps INVALID_ARGUMENT
// (send its tokens in one step). Nothing is looked up.
Status CheckStepSessionIds(const std::vector<std::string_view>& ids);

// The default limit of the sessions' metadata: 1/32 of the pool and 16 MiB
// (a server sizing a pool from a memory budget leaves room for it).
inline constexpr int64_t kMetadataPoolShare = 32;
inline constexpr int64_t kMetadataBaseBytes = int64_t{16} << 20;

struct KvSessionSpec {
  std::string owner;         // who creates it (opaque; "" the anonymous owner)
  std::string session_id;    // [A-Za-z0-9._-]{1,128}; empty: the store makes one
  int64_t num_layers = 1;    // >= 1
  int64_t num_kv_heads = 1;  // >= 1
  int64_t head_dim = 0;      // D >= 1
  int64_t value_dim = 0;     // Dv; 0 means head_dim
  CacheType cache_type = CacheType::kFloat32;
  int64_t max_tokens = 0;  // per layer; 0: the store's default
  // Keys and values choose their formats separately.
  CacheFormat key_format = CacheFormat::kAsCacheType;
  CacheFormat value_format = CacheFormat::kAsCacheType;
};

struct KvSessionInfo {
  KvSessionSpec spec;                 // as created, value_dim and max_tokens resolved
  std::vector<int64_t> layer_tokens;  // tokens each layer holds
  int64_t cache_bytes = 0;            // its pages (a page shared with a fork counts in both)
  int64_t tokens_per_page = 0;
  // One token of one kv head in its pages: keys and values, with their
  // factors (the page's alignment aside).
  int64_t token_bytes = 0;
  // int4 keys: the tokens of a block quantized together per channel (the
  // block being filled kept in cache_type); 0 otherwise.
  int64_t key_block_tokens = 0;
};

struct KvStoreOptions {
  int64_t pool_bytes = int64_t{1024} << 20;  // --kv-cache-mb
  // Every page's size. 32 KiB holds 64 tokens of a bf16 D = 128 head.
  int64_t page_bytes = 32 << 10;
  int64_t max_sessions = 4096;
  int64_t default_max_tokens = 131072;  // --max-session-tokens
  // Per owner (0: none beyond the store's): sessions alive, and bytes of
  // the pool (pages, each counted once however many of the owner's
  // sessions share it).
  int64_t max_sessions_per_owner = 0;  // --max-sessions-per-principal
  int64_t pool_bytes_per_owner = 0;    // --kv-cache-mb-per-principal
  // Bytes the sessions' own memory (state, ids, page tables: outside the
  // pool's pages) may take together; 0: pool_bytes / kMetadataPoolShare +
  // kMetadataBaseBytes. Create and Fork (whose page tables are copies) past
  // it: RESOURCE_EXHAUSTED.
  int64_t metadata_bytes_limit = 0;
};

// One owner's use of the store.
struct KvOwnerUsage {
  std::string owner;
  int64_t sessions = 0, bytes_used = 0;
  int64_t bytes_limit = 0;  // its quota, or the pool's limit when it has none
};

// One step of an Extend: a session, its queries and the keys and values to
// append. query [Hq, n_q, D] with Hq a multiple of num_kv_heads, n_q >= 0;
// key [num_kv_heads, n_kv, D] and value [num_kv_heads, n_kv, Dv], both or
// neither (none: n_kv = 0). Views may be strided.
//
// expected_tokens (exactly-once steps): the layer's token count before this
// step, as the caller last saw it. Equal to what the layer holds: the step
// runs. The layer already holds at least expected + n_kv tokens and those at
// [expected, expected + n_kv) are this step's keys and values as the cache
// stores them (rounded to its type): a replay of a step that was applied;
// nothing is appended, and the answer is computed over the first
// expected + n_kv tokens, as the first time. Anything else:
// FAILED_PRECONDITION, and the Extend changes nothing. Unset: appended
// wherever the layer stands.
struct KvStep {
  std::string session_id;
  TensorView query;
  std::optional<TensorView> key, value;
  std::optional<int64_t> expected_tokens;
};

struct KvExtendOptions {
  std::string owner;  // whose sessions the steps name
  // Query t of a step sits at position L_after - n_q + t (bottom-right);
  // with causal it sees keys at positions <= its own, without it every key.
  bool causal = true;
  std::optional<float> scale;                        // default 1/sqrt(D); finite
  std::optional<int64_t> window_left, window_right;  // >= 0; unset: unbounded
  // softcap; alibi_slopes float32 [Hq] or [steps, Hq]; sink_logits [Hq]
  // (checked against the steps that have queries); return_lse gives each
  // result an lse [Hq, n_q].
  AttentionScoreOptions score;
  // Polled while computing, and checked once more right before the commit
  // (with `deadline`): CANCELLED or DEADLINE_EXCEEDED, nothing changed. A
  // caller can still lose an answer after the commit; expected_tokens makes
  // its retry safe.
  const std::atomic<bool>* cancelled = nullptr;
  std::optional<std::chrono::system_clock::time_point> deadline;
  int num_threads = 0;  // 0 means ComputeThreads()
  // A prefill step (more query rows than the decode kernel takes at once)
  // may widen its layer's keys and values into one float32 copy when that
  // copy takes at most this many bytes (0: no limit); past it, the rows are
  // attended in slices over the pages in place, and nothing grows with the
  // cache (--max-request-memory-mb).
  int64_t max_gather_bytes = 0;
  // Tests only: called after the answers are computed, right before the
  // last cancellation and deadline check and the commit.
  std::function<void()> before_commit;
};

// Per step: output [Hq, n_q, Dv] (+ lse [Hq, n_q]), and whether the step
// was a replay (nothing appended; see KvStep::expected_tokens).
struct KvExtendResult {
  std::vector<AttentionResult> results;
  std::vector<bool> replayed;
};

class KvCacheStore {
 public:
  // Reserves address space for the pool (pages are touched only when used).
  // pool_bytes is rounded down to whole pages.
  explicit KvCacheStore(const KvStoreOptions& options);
  ~KvCacheStore();
  // OK, or RESOURCE_EXHAUSTED giving the pool's size and the errno when its
  // address space could not be reserved (ulimit -v, strict overcommit):
  // such a store has no page, and a server must not start with it.
  Status reserve_status() const;
  // The sessions' metadata bytes (outside the pool's pages), and its limit.
  int64_t metadata_bytes() const;
  int64_t metadata_bytes_limit() const;
  KvCacheStore(const KvCacheStore&) = delete;
  KvCacheStore& operator=(const KvCacheStore&) = delete;

  // The session of spec.owner. ALREADY_EXISTS for an id the owner has,
  // INVALID_ARGUMENT for a bad spec, RESOURCE_EXHAUSTED past max_sessions
  // or the owner's max_sessions_per_owner. Allocates no page.
  StatusOr<KvSessionInfo> Create(const KvSessionSpec& spec);
  // NOT_FOUND for an unknown (or expired) session, or another owner's.
  StatusOr<KvSessionInfo> Get(const std::string& owner, const std::string& id);
  // The steps' sessions (options.owner's) must be distinct. All or nothing:
  // on any error, cancellation included, no session changes.
  StatusOr<KvExtendResult> Extend(int64_t layer, const std::vector<KvStep>& steps,
                                  const KvExtendOptions& options);
  // Validates an Extend as Extend would (sessions, shapes, limits: not the
  // pool or busy layers) and returns its cost, computing nothing.
  StatusOr<AttentionCost> EstimateExtend(int64_t layer, const std::vector<KvStep>& steps,
                                         const KvExtendOptions& options);
  // Copy-on-write: shares every page, copies none; the child is the
  // owner's too. new_id empty: made up.
  StatusOr<KvSessionInfo> Fork(const std::string& owner, const std::string& id,
                               const std::string& new_id);
  // Keeps the first `tokens` of every layer (>= 0). ABORTED while a layer is busy.
  StatusOr<KvSessionInfo> Truncate(const std::string& owner, const std::string& id, int64_t tokens);
  // Returns what it deleted. Pages are freed once no fork holds them.
  StatusOr<KvSessionInfo> Delete(const std::string& owner, const std::string& id);
  // The owner's sessions, by id.
  std::vector<KvSessionInfo> List(const std::string& owner);
  // Every owner's sessions, by owner and id (operators, tests).
  std::vector<KvSessionInfo> ListAll();

  // Deletes the sessions idle (no call touching them, none in flight) for
  // at least `idle`; returns what it deleted (their owners name them).
  std::vector<KvSessionInfo> ExpireIdle(std::chrono::steady_clock::duration idle);

  int64_t bytes_used() const;
  int64_t bytes_limit() const;
  int64_t num_sessions() const;
  // One owner's sessions and bytes (an owner never seen: zeros).
  KvOwnerUsage OwnerUsage(const std::string& owner) const;
  // Every owner with a session or a byte in use.
  std::vector<KvOwnerUsage> Owners() const;
  const KvStoreOptions& options() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace attn
