// The page pool behind KvCacheStore: fixed-size pages cut from one
// reservation, handed out by index and reference-counted (a fork shares
// pages). Internal to core.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "attn/status.h"

namespace attn::internal {

using PageId = int32_t;

// Who takes pages: its index among the pool's owners (NewOwner), its name
// for the messages, and its quota in bytes (0: none beyond the pool's).
struct PoolOwner {
  int32_t index = 0;
  const std::string* name = nullptr;
  int64_t limit_bytes = 0;
};

// "principal 'x'", or "the anonymous principal" for "".
std::string OwnerLabel(const std::string& owner);

class PagePool {
 public:
  // Reserves floor(pool_bytes / page_bytes) pages of address space; nothing
  // is touched until a page is written.
  PagePool(int64_t pool_bytes, int64_t page_bytes);
  ~PagePool();
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  // The errno of a failed reservation (ulimit -v, strict overcommit), which
  // leaves the pool with no page; 0 when it was reserved.
  int reserve_errno() const { return map_errno_; }
  // The sessions' own memory outside the pages (their state and page
  // tables), counted here so that every session can keep its share current.
  void AddMetadata(int64_t delta) { metadata_bytes_.fetch_add(delta, std::memory_order_relaxed); }
  int64_t metadata_bytes() const { return metadata_bytes_.load(std::memory_order_relaxed); }
  // A new owner's index (its page count starts at 0).
  int32_t NewOwner();
  // `n` fresh pages (refcount 1) of `owner` appended to `out`, or
  // RESOURCE_EXHAUSTED naming the bytes used and the limit (the pool's, or
  // the owner's quota), with nothing taken.
  Status Allocate(int64_t n, const PoolOwner& owner, std::vector<PageId>* out);
  // One more holder of each page (only the pages' own owner shares them).
  void Retain(const PageId* pages, int64_t n);
  // One holder fewer; a page nobody holds goes back to the pool and off its
  // owner's count.
  void Release(const PageId* pages, int64_t n);
  // The bytes of the pages `owner` holds.
  int64_t owner_bytes(int32_t owner) const;
  // How many hold `page` (1: writable in place).
  int32_t RefCount(PageId page) const;

  uint8_t* Data(PageId page) const { return base_ + static_cast<int64_t>(page) * page_bytes_; }
  int64_t page_bytes() const { return page_bytes_; }
  int64_t bytes_used() const;
  int64_t bytes_limit() const { return num_pages_ * page_bytes_; }

 private:
  const int64_t page_bytes_;
  int64_t num_pages_ = 0;
  int map_errno_ = 0;  // why the mapping failed (0: it did not)
  std::atomic<int64_t> metadata_bytes_{0};
  void* map_ = nullptr;  // the mapping; base_ is its first 2 MiB boundary
  uint8_t* base_ = nullptr;
  int64_t mapped_bytes_ = 0;
  mutable std::mutex mu_;
  std::vector<PageId> free_;          // a stack of free pages
  std::vector<int32_t> refcount_;     // per page; 0 = free
  std::vector<int32_t> owner_of_;     // per page in use: its owner's index
  std::vector<int64_t> owner_pages_;  // per owner: the pages it holds
};

}  // namespace attn::internal
