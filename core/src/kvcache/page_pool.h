// The page pool behind KvCacheStore: fixed-size pages cut from one
// reservation, handed out by index and reference-counted (a fork shares
// pages). Internal to core.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "attn/status.h"

namespace attn::internal {

using PageId = int32_t;

class PagePool {
 public:
  // Reserves floor(pool_bytes / page_bytes) pages of address space; nothing
  // is touched until a page is written.
  PagePool(int64_t pool_bytes, int64_t page_bytes);
  ~PagePool();
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  // `n` fresh pages (refcount 1) appended to `out`, or RESOURCE_EXHAUSTED
  // naming the bytes used and the limit, with nothing taken.
  Status Allocate(int64_t n, std::vector<PageId>* out);
  // One more holder of each page.
  void Retain(const PageId* pages, int64_t n);
  // One holder fewer; a page nobody holds goes back to the pool.
  void Release(const PageId* pages, int64_t n);
  // How many hold `page` (1: writable in place).
  int32_t RefCount(PageId page) const;

  uint8_t* Data(PageId page) const { return base_ + static_cast<int64_t>(page) * page_bytes_; }
  int64_t page_bytes() const { return page_bytes_; }
  int64_t bytes_used() const;
  int64_t bytes_limit() const { return num_pages_ * page_bytes_; }

 private:
  const int64_t page_bytes_;
  int64_t num_pages_ = 0;
  void* map_ = nullptr;  // the mapping; base_ is its first 2 MiB boundary
  uint8_t* base_ = nullptr;
  int64_t mapped_bytes_ = 0;
  mutable std::mutex mu_;
  std::vector<PageId> free_;       // a stack of free pages
  std::vector<int32_t> refcount_;  // per page; 0 = free
};

}  // namespace attn::internal
