// A session's pages and the store's state. Internal to core (kvcache/).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "attn/kv_cache.h"
#include "kvcache/page_pool.h"
#include "kvformats/page_codec.h"

namespace attn::internal {

using SteadyClock = std::chrono::steady_clock;

// One layer of a session: `tokens` keys and values in pages
// [ceil(tokens / T)][Hkv] (page p of kv head g at pages[p * Hkv + g]).
struct KvLayer {
  int64_t tokens = 0;
  std::vector<PageId> pages;
  // Blocked (int4) keys: a staging page per kv head holding the block
  // being filled in the cache's type, tokens [tokens - tokens % G, tokens);
  // empty when no block is being filled.
  std::vector<PageId> stage;
  bool busy = false;  // an Extend is writing it (guarded by KvSession::mu)
};

struct KvSession {
  KvSession(const KvSessionSpec& s, const PageLayout& layout, PagePool* p, int32_t owner_index);
  ~KvSession();  // gives back every page it holds

  const KvSessionSpec spec;  // value_dim and max_tokens resolved; spec.owner its owner
  const PageLayout layout;   // where a page keeps its keys and values
  const int64_t tokens_per_page;
  PagePool* const pool;
  const int32_t owner_index;  // spec.owner's index in the pool
  std::mutex mu;              // guards everything below
  std::vector<KvLayer> layers;
  int busy_layers = 0;
  // Set when the store lets it go (delete, expiry): a call that found it
  // just before then gets NOT_FOUND instead of writing to a lost session.
  bool gone = false;
  SteadyClock::time_point last_used;

  KvSessionInfo InfoLocked() const;
  // Its memory outside the pages: the state, ids and page tables.
  int64_t MetadataBytesLocked() const;
  // Brings the pool's metadata count up to date with this session's.
  void RecountMetadataLocked();
  int64_t metadata_counted = 0;  // its share of the pool's metadata count
};

// Blocked keys (kv_stage.cc), for a truncate to `tokens`: the staging pages
// a layer needs (num_kv_heads when the cut falls inside a complete block,
// whose kept tokens are staged again; else 0), and the re-staging: the kept
// tokens widened from their codes into `fresh` (the cache's type), the
// layer's old staging pages released (all of them when the cut is on a
// block's edge; none when it falls in the staged block).
int64_t RestagePages(const KvSession& s, const KvLayer& l, int64_t tokens);
void Restage(KvSession& s, KvLayer& l, int64_t tokens, const PageId* fresh);

// A session's family, by which balancers route it: the id before its first
// ':' (all of it without one). A fork stays in its parent's family.
std::string FamilyOf(const std::string& id);

// The message of a missing session.
std::string NotFoundMessage(const std::string& id, const std::string& where);

}  // namespace attn::internal

namespace attn {

class KvCacheStore::Impl {
 public:
  // One owner's namespace: its sessions by id, and its index in the pool.
  struct Owner {
    int32_t index = 0;
    std::unordered_map<std::string, std::shared_ptr<internal::KvSession>> sessions;
  };

  explicit Impl(const KvStoreOptions& options);

  // The owner's session, or NOT_FOUND saying what may have happened to it
  // (another owner's session gets exactly the message of a missing one).
  StatusOr<std::shared_ptr<internal::KvSession>> Find(const std::string& owner,
                                                      const std::string& id,
                                                      const std::string& where);
  // The owner's namespace, made on first use. Called with map_mu held.
  Owner& OwnerLocked(const std::string& owner);
  // A fresh id, or `id` checked, in the owner's namespace; ALREADY_EXISTS
  // and RESOURCE_EXHAUSTED as for Create. Called with map_mu held.
  // An empty *id becomes `prefix` and 16 random hex digits.
  Status CheckNewIdLocked(const std::string& owner, Owner& o, std::string* id,
                          const std::string& prefix = "s-");
  // OK, or RESOURCE_EXHAUSTED when `more` bytes of session metadata would
  // pass the limit.
  Status CheckMetadata(int64_t more, const char* call) const;
  // What the pool needs to charge pages to a session's owner.
  internal::PoolOwner PoolOwnerOf(const internal::KvSession& s) const;

  const KvStoreOptions options;
  internal::PagePool pool;
  const int64_t metadata_limit;  // bytes of session metadata (state, page tables)
  mutable std::mutex map_mu;
  std::unordered_map<std::string, Owner> owners;  // guarded by map_mu
  int64_t num_sessions = 0;                       // guarded by map_mu
  std::mt19937_64 rng;                            // guarded by map_mu
};

}  // namespace attn
