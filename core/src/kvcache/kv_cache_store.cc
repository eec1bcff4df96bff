// KvCacheStore's sessions: create, find, fork, truncate, delete, expire.
// Extend, the one call that writes pages, is kv_extend.cc.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <tuple>

#include "kvcache/session.h"

namespace attn {

using internal::KvLayer;
using internal::KvSession;
using internal::PageId;
using internal::SteadyClock;

namespace internal {

KvSession::KvSession(const KvSessionSpec& s, const PageLayout& l, PagePool* p, int32_t owner)
    : spec(s),
      layout(l),
      tokens_per_page(l.tokens_per_page),
      pool(p),
      owner_index(owner),
      layers(static_cast<size_t>(s.num_layers)),
      last_used(SteadyClock::now()) {}

KvSession::~KvSession() {
  for (KvLayer& l : layers) {
    pool->Release(l.pages.data(), static_cast<int64_t>(l.pages.size()));
    pool->Release(l.stage.data(), static_cast<int64_t>(l.stage.size()));
  }
  pool->AddMetadata(-metadata_counted);
}

int64_t KvSession::MetadataBytesLocked() const {
  // The object, its map entry and shared_ptr block (about 256 bytes with the
  // allocator's), its ids, its layers and every layer's page table.
  int64_t bytes = static_cast<int64_t>(sizeof(KvSession)) + 256 +
                  static_cast<int64_t>(spec.session_id.capacity() + spec.owner.capacity()) +
                  static_cast<int64_t>(layers.capacity() * sizeof(KvLayer));
  for (const KvLayer& l : layers)
    bytes += static_cast<int64_t>((l.pages.capacity() + l.stage.capacity()) * sizeof(PageId));
  return bytes;
}

void KvSession::RecountMetadataLocked() {
  const int64_t now = MetadataBytesLocked();
  pool->AddMetadata(now - metadata_counted);
  metadata_counted = now;
}

KvSessionInfo KvSession::InfoLocked() const {
  KvSessionInfo info;
  info.spec = spec;
  info.tokens_per_page = tokens_per_page;
  info.token_bytes = layout.token_bytes;
  info.key_block_tokens = layout.block_tokens;
  int64_t pages = 0;
  for (const KvLayer& l : layers) {
    info.layer_tokens.push_back(l.tokens);
    pages += static_cast<int64_t>(l.pages.size() + l.stage.size());
  }
  info.cache_bytes = pages * pool->page_bytes();
  return info;
}

std::string FamilyOf(const std::string& id) { return id.substr(0, id.find(':')); }

std::string NotFoundMessage(const std::string& id, const std::string& where) {
  return where + "session '" + id +
         "' not found: it may have expired (--session-idle-timeout), been deleted, or been lost "
         "in a server restart (sessions are not persisted); create it again";
}

}  // namespace internal

KvCacheStore::Impl::Impl(const KvStoreOptions& o)
    : options(o),
      pool(o.pool_bytes, o.page_bytes),
      metadata_limit(o.metadata_bytes_limit > 0
                         ? o.metadata_bytes_limit
                         : o.pool_bytes / kMetadataPoolShare + kMetadataBaseBytes),
      rng(std::random_device{}()) {}

Status KvCacheStore::Impl::CheckMetadata(int64_t more, const char* call) const {
  const int64_t used = pool.metadata_bytes();
  if (used + more <= metadata_limit) return Status::Ok();
  return Status::ResourceExhausted(
      std::string(call) + ": the sessions' metadata (state and page tables) takes " +
      std::to_string(used) + " bytes, and this session " + std::to_string(more) +
      " more, over the limit of " + std::to_string(metadata_limit) +
      " bytes (1/32 of --kv-cache-mb and 16 MiB); delete sessions or forks");
}

StatusOr<std::shared_ptr<internal::KvSession>> KvCacheStore::Impl::Find(const std::string& owner,
                                                                        const std::string& id,
                                                                        const std::string& where) {
  ATTN_RETURN_IF_ERROR(CheckSessionId(id, where + "session_id"));
  std::lock_guard<std::mutex> lock(map_mu);
  auto o = owners.find(owner);
  if (o != owners.end()) {
    auto it = o->second.sessions.find(id);
    if (it != o->second.sessions.end()) return it->second;
  }
  return Status::NotFound(internal::NotFoundMessage(id, where));
}

KvCacheStore::Impl::Owner& KvCacheStore::Impl::OwnerLocked(const std::string& owner) {
  auto it = owners.find(owner);
  if (it == owners.end()) {
    it = owners.emplace(owner, Owner{}).first;
    it->second.index = pool.NewOwner();
  }
  return it->second;
}

internal::PoolOwner KvCacheStore::Impl::PoolOwnerOf(const internal::KvSession& s) const {
  return internal::PoolOwner{s.owner_index, &s.spec.owner, options.pool_bytes_per_owner};
}

Status KvCacheStore::Impl::CheckNewIdLocked(const std::string& owner, Owner& o, std::string* id,
                                            const std::string& prefix) {
  if (num_sessions >= options.max_sessions) {
    return Status::ResourceExhausted(
        "sessions: " + std::to_string(num_sessions) + " live, the limit (--max-sessions " +
        std::to_string(options.max_sessions) + "); delete sessions or raise the limit");
  }
  const int64_t mine = static_cast<int64_t>(o.sessions.size());
  if (options.max_sessions_per_owner > 0 && mine >= options.max_sessions_per_owner) {
    return Status::ResourceExhausted("sessions of " + internal::OwnerLabel(owner) + ": " +
                                     std::to_string(mine) +
                                     " live, its quota (--max-sessions-per-principal " +
                                     std::to_string(options.max_sessions_per_owner) +
                                     "); delete its sessions or raise the quota");
  }
  if (id->empty()) {
    do {
      char buf[24];
      std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(rng()));
      *id = prefix + buf;
    } while (o.sessions.count(*id) != 0);
    return Status::Ok();
  }
  if (o.sessions.count(*id) != 0) {
    return Status::AlreadyExists("session '" + *id + "' already exists");
  }
  return Status::Ok();
}

KvCacheStore::KvCacheStore(const KvStoreOptions& options)
    : impl_(std::make_unique<Impl>(options)) {}

KvCacheStore::~KvCacheStore() = default;

namespace {

// int4 packs two channels a byte: an even width.
Status CheckFormat(CacheFormat f, int64_t dim, const char* field, const char* dim_name) {
  if (f != CacheFormat::kInt4 || dim % 2 == 0) return Status::Ok();
  return Status::InvalidArgument(std::string(field) + ": int4 needs an even " + dim_name +
                                 " (two channels a byte), got " + std::to_string(dim));
}

Status CheckSpec(KvSessionSpec* s, const KvStoreOptions& o, internal::PageLayout* layout) {
  auto positive = [](int64_t v, int64_t most, const char* name) {
    if (v >= 1 && v <= most) return Status::Ok();
    return Status::InvalidArgument(std::string(name) + ": must be in [1, " + std::to_string(most) +
                                   "], got " + std::to_string(v));
  };
  ATTN_RETURN_IF_ERROR(positive(s->num_layers, 4096, "num_layers"));
  ATTN_RETURN_IF_ERROR(positive(s->num_kv_heads, 4096, "num_kv_heads"));
  ATTN_RETURN_IF_ERROR(positive(s->head_dim, 65536, "head_dim"));
  if (s->value_dim < 0 || s->value_dim > 65536) {
    return Status::InvalidArgument("value_dim: must be in [0, 65536] (0: head_dim), got " +
                                   std::to_string(s->value_dim));
  }
  if (s->value_dim == 0) s->value_dim = s->head_dim;
  ATTN_RETURN_IF_ERROR(CheckFormat(s->key_format, s->head_dim, "key_format", "head_dim"));
  ATTN_RETURN_IF_ERROR(CheckFormat(s->value_format, s->value_dim, "value_format", "value_dim"));
  *layout = internal::MakePageLayout(
      internal::PageFormatOf(s->key_format, s->cache_type, true),
      internal::PageFormatOf(s->value_format, s->cache_type, false), s->head_dim, s->value_dim,
      o.page_bytes, internal::PageFormatOf(CacheFormat::kAsCacheType, s->cache_type, true));
  if (layout->tokens_per_page == 0) {
    return Status::InvalidArgument(
        "head_dim + value_dim: one token of one head takes " + std::to_string(layout->token_bytes) +
        " bytes as keys " + CacheFormatName(s->key_format, s->cache_type) + " and values " +
        CacheFormatName(s->value_format, s->cache_type) + ", more than a page (" +
        std::to_string(o.page_bytes) + " bytes)");
  }
  if (s->max_tokens < 0 || s->max_tokens > o.default_max_tokens) {
    return Status::InvalidArgument(
        "max_tokens: must be in [0, " + std::to_string(o.default_max_tokens) +
        "] (0: --max-session-tokens, also the most), got " + std::to_string(s->max_tokens));
  }
  if (s->max_tokens == 0) s->max_tokens = o.default_max_tokens;
  return Status::Ok();
}

}  // namespace

StatusOr<KvSessionInfo> KvCacheStore::Create(const KvSessionSpec& spec) {
  KvSessionSpec s = spec;
  if (!s.session_id.empty()) ATTN_RETURN_IF_ERROR(CheckSessionId(s.session_id, "session_id"));
  internal::PageLayout layout;
  ATTN_RETURN_IF_ERROR(CheckSpec(&s, impl_->options, &layout));
  std::lock_guard<std::mutex> lock(impl_->map_mu);
  Impl::Owner& owner = impl_->OwnerLocked(s.owner);
  ATTN_RETURN_IF_ERROR(impl_->CheckNewIdLocked(s.owner, owner, &s.session_id));
  auto session = std::make_shared<KvSession>(s, layout, &impl_->pool, owner.index);
  ATTN_RETURN_IF_ERROR(impl_->CheckMetadata(session->MetadataBytesLocked(), "create"));
  session->RecountMetadataLocked();
  owner.sessions.emplace(s.session_id, session);
  ++impl_->num_sessions;
  return session->InfoLocked();
}

StatusOr<KvSessionInfo> KvCacheStore::Get(const std::string& owner, const std::string& id) {
  ATTN_ASSIGN_OR_RETURN(auto session, impl_->Find(owner, id, ""));
  std::lock_guard<std::mutex> lock(session->mu);
  session->last_used = SteadyClock::now();
  return session->InfoLocked();
}

StatusOr<KvSessionInfo> KvCacheStore::Fork(const std::string& owner_name, const std::string& id,
                                           const std::string& new_id) {
  ATTN_RETURN_IF_ERROR(CheckSessionId(id, "fork: session_id"));
  std::string child_id = new_id;
  const std::string family = internal::FamilyOf(id);
  if (!child_id.empty()) {
    ATTN_RETURN_IF_ERROR(CheckSessionId(child_id, "new_session_id"));
    // A balancer routes by family: a fork lives where its parent does.
    if (internal::FamilyOf(child_id) != family) {
      return Status::InvalidArgument(
          "new_session_id: a fork is in its parent's family ('" + family +
          "', the id before its "
          "first ':'), so that a balancer routes it to the same replica; expected '" +
          family + ":...', got '" + child_id + "'");
    }
  } else if (family.size() + 19 > 128) {
    return Status::InvalidArgument("new_session_id: the family '" + family.substr(0, 64) +
                                   "...' is too long to name a fork; give new_session_id");
  }
  std::lock_guard<std::mutex> lock(impl_->map_mu);
  auto o = impl_->owners.find(owner_name);
  if (o == impl_->owners.end() || o->second.sessions.count(id) == 0) {
    return Status::NotFound(internal::NotFoundMessage(id, "fork: "));
  }
  auto it = o->second.sessions.find(id);
  Impl::Owner& owner = o->second;
  ATTN_RETURN_IF_ERROR(impl_->CheckNewIdLocked(owner_name, owner, &child_id, family + ":f-"));
  KvSession& parent = *it->second;
  KvSessionSpec spec = parent.spec;  // the parent's owner: pages are shared within it only
  spec.session_id = child_id;
  auto child = std::make_shared<KvSession>(spec, parent.layout, &impl_->pool, owner.index);
  {
    // The committed pages only: an Extend in flight on the parent commits
    // to the parent alone.
    std::lock_guard<std::mutex> plock(parent.mu);
    for (size_t i = 0; i < parent.layers.size(); ++i) {
      child->layers[i].tokens = parent.layers[i].tokens;
      child->layers[i].pages = parent.layers[i].pages;
      child->layers[i].stage = parent.layers[i].stage;
      impl_->pool.Retain(child->layers[i].pages.data(),
                         static_cast<int64_t>(child->layers[i].pages.size()));
      impl_->pool.Retain(child->layers[i].stage.data(),
                         static_cast<int64_t>(child->layers[i].stage.size()));
    }
    parent.last_used = SteadyClock::now();
  }
  // Its page tables are copies: a fork of a long session is counted here
  // (the child, refused, gives its pages back as it goes).
  ATTN_RETURN_IF_ERROR(impl_->CheckMetadata(child->MetadataBytesLocked(), "fork"));
  child->RecountMetadataLocked();
  owner.sessions.emplace(child_id, child);
  ++impl_->num_sessions;
  return child->InfoLocked();
}

StatusOr<KvSessionInfo> KvCacheStore::Truncate(const std::string& owner, const std::string& id,
                                               int64_t tokens) {
  if (tokens < 0) {
    return Status::InvalidArgument("tokens: must be >= 0 (the tokens to keep), got " +
                                   std::to_string(tokens));
  }
  ATTN_ASSIGN_OR_RETURN(auto session, impl_->Find(owner, id, "truncate: "));
  std::lock_guard<std::mutex> lock(session->mu);
  if (session->gone) return Status::NotFound(internal::NotFoundMessage(id, "truncate: "));
  if (session->busy_layers > 0) {
    return Status::Aborted("session '" + id +
                           "' is busy: an Extend is in flight on it; truncate after it ends");
  }
  const int64_t hkv = session->spec.num_kv_heads, tpp = session->tokens_per_page;
  // Blocked keys: the staging pages every layer needs, taken at once (a
  // full pool refuses the truncate whole), then the re-staging.
  if (session->layout.block_tokens > 0) {
    int64_t needed = 0;
    for (const KvLayer& l : session->layers) needed += internal::RestagePages(*session, l, tokens);
    std::vector<PageId> fresh;
    if (needed > 0) {
      ATTN_RETURN_IF_ERROR(impl_->pool.Allocate(needed, impl_->PoolOwnerOf(*session), &fresh));
    }
    size_t at = 0;
    for (KvLayer& l : session->layers) {
      if (tokens >= l.tokens) continue;
      const bool takes = internal::RestagePages(*session, l, tokens) > 0;
      internal::Restage(*session, l, tokens, takes ? fresh.data() + at : nullptr);
      if (takes) at += static_cast<size_t>(hkv);
    }
  }
  for (KvLayer& l : session->layers) {
    if (tokens >= l.tokens) continue;
    const size_t keep = static_cast<size_t>((tokens + tpp - 1) / tpp * hkv);
    impl_->pool.Release(l.pages.data() + keep, static_cast<int64_t>(l.pages.size() - keep));
    l.pages.resize(keep);
    l.tokens = tokens;
  }
  session->RecountMetadataLocked();
  session->last_used = SteadyClock::now();
  return session->InfoLocked();
}

StatusOr<KvSessionInfo> KvCacheStore::Delete(const std::string& owner, const std::string& id) {
  ATTN_RETURN_IF_ERROR(CheckSessionId(id, "delete: session_id"));
  std::shared_ptr<KvSession> session;
  {
    std::lock_guard<std::mutex> lock(impl_->map_mu);
    auto o = impl_->owners.find(owner);
    if (o == impl_->owners.end() || o->second.sessions.count(id) == 0) {
      return Status::NotFound(internal::NotFoundMessage(id, "delete: "));
    }
    auto it = o->second.sessions.find(id);
    session = std::move(it->second);
    o->second.sessions.erase(it);
    --impl_->num_sessions;
  }
  std::lock_guard<std::mutex> lock(session->mu);
  session->gone = true;
  return session->InfoLocked();
}

namespace {

std::vector<KvSessionInfo> InfosOf(const std::vector<std::shared_ptr<KvSession>>& all) {
  std::vector<KvSessionInfo> out;
  for (auto& s : all) {
    std::lock_guard<std::mutex> lock(s->mu);
    out.push_back(s->InfoLocked());
  }
  std::sort(out.begin(), out.end(), [](const KvSessionInfo& a, const KvSessionInfo& b) {
    return std::tie(a.spec.owner, a.spec.session_id) < std::tie(b.spec.owner, b.spec.session_id);
  });
  return out;
}

}  // namespace

std::vector<KvSessionInfo> KvCacheStore::List(const std::string& owner) {
  std::vector<std::shared_ptr<KvSession>> all;
  {
    std::lock_guard<std::mutex> lock(impl_->map_mu);
    auto o = impl_->owners.find(owner);
    if (o != impl_->owners.end()) {
      for (auto& [id, s] : o->second.sessions) all.push_back(s);
    }
  }
  return InfosOf(all);
}

std::vector<KvSessionInfo> KvCacheStore::ListAll() {
  std::vector<std::shared_ptr<KvSession>> all;
  {
    std::lock_guard<std::mutex> lock(impl_->map_mu);
    for (auto& [name, o] : impl_->owners) {
      for (auto& [id, s] : o.sessions) all.push_back(s);
    }
  }
  return InfosOf(all);
}

std::vector<KvSessionInfo> KvCacheStore::ExpireIdle(std::chrono::steady_clock::duration idle) {
  const auto now = SteadyClock::now();
  std::vector<std::shared_ptr<KvSession>> expired;  // freed outside the lock
  std::vector<KvSessionInfo> out;
  {
    std::lock_guard<std::mutex> lock(impl_->map_mu);
    for (auto& [name, o] : impl_->owners) {
      for (auto it = o.sessions.begin(); it != o.sessions.end();) {
        KvSession& s = *it->second;
        std::lock_guard<std::mutex> slock(s.mu);
        if (s.busy_layers == 0 && now - s.last_used >= idle) {
          s.gone = true;
          out.push_back(s.InfoLocked());
          expired.push_back(std::move(it->second));
          it = o.sessions.erase(it);
          --impl_->num_sessions;
        } else {
          ++it;
        }
      }
    }
  }
  return out;
}

KvOwnerUsage KvCacheStore::OwnerUsage(const std::string& owner) const {
  KvOwnerUsage u;
  u.owner = owner;
  u.bytes_limit = impl_->options.pool_bytes_per_owner > 0
                      ? std::min(impl_->options.pool_bytes_per_owner, bytes_limit())
                      : bytes_limit();
  std::lock_guard<std::mutex> lock(impl_->map_mu);
  auto o = impl_->owners.find(owner);
  if (o == impl_->owners.end()) return u;
  u.sessions = static_cast<int64_t>(o->second.sessions.size());
  u.bytes_used = impl_->pool.owner_bytes(o->second.index);
  return u;
}

std::vector<KvOwnerUsage> KvCacheStore::Owners() const {
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> lock(impl_->map_mu);
    for (const auto& [name, o] : impl_->owners) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  std::vector<KvOwnerUsage> out;
  for (const auto& n : names) {
    KvOwnerUsage u = OwnerUsage(n);
    if (u.sessions > 0 || u.bytes_used > 0) out.push_back(std::move(u));
  }
  return out;
}

int64_t KvCacheStore::bytes_used() const { return impl_->pool.bytes_used(); }
int64_t KvCacheStore::bytes_limit() const { return impl_->pool.bytes_limit(); }
int64_t KvCacheStore::num_sessions() const {
  std::lock_guard<std::mutex> lock(impl_->map_mu);
  return impl_->num_sessions;
}
const KvStoreOptions& KvCacheStore::options() const { return impl_->options; }

int64_t KvCacheStore::metadata_bytes() const { return impl_->pool.metadata_bytes(); }
int64_t KvCacheStore::metadata_bytes_limit() const { return impl_->metadata_limit; }

Status KvCacheStore::reserve_status() const {
  const int err = impl_->pool.reserve_errno();
  if (err == 0) return Status::Ok();
  return Status::ResourceExhausted(
      "KV-cache pool: could not reserve " + std::to_string(impl_->options.pool_bytes >> 20) +
      " MiB (" + std::to_string(impl_->options.pool_bytes) +
      " bytes) of address space: " + std::strerror(err) + " (errno " + std::to_string(err) +
      "); lower --kv-cache-mb, or raise the process's address-space limit (ulimit -v) or the "
      "overcommit limit");
}

Status CheckSessionId(std::string_view id, std::string_view field) {
  const bool ok_len = !id.empty() && id.size() <= 128;
  const bool ok_chars = std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-' || c == ':';
  });
  if (ok_len && ok_chars) return Status::Ok();
  // Echo at most 64 characters, each control or non-ASCII byte as \xNN: a
  // message (and the log line that carries it) never holds a raw one.
  std::string shown;
  for (size_t i = 0; i < id.size() && i < 64; ++i) {
    const auto c = static_cast<unsigned char>(id[i]);
    if (c < 0x20 || c >= 0x7f || c == '\'' || c == '\\') {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      shown += hex;
    } else {
      shown += static_cast<char>(c);
    }
  }
  if (id.size() > 64) shown += "...";
  return Status::InvalidArgument(std::string(field) + ": must match [A-Za-z0-9._:-]{1,128}, got '" +
                                 shown + "' (" + std::to_string(id.size()) + " characters)");
}

}  // namespace attn
