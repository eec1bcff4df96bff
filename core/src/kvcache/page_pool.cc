#include "kvcache/page_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <string>

namespace attn::internal {

PagePool::PagePool(int64_t pool_bytes, int64_t page_bytes) : page_bytes_(page_bytes) {
  const int64_t pages = page_bytes > 0 ? std::max<int64_t>(0, pool_bytes) / page_bytes : 0;
  // Page ids are int32; a pool of more than 2^31 pages is clamped.
  num_pages_ = std::min<int64_t>(pages, INT32_MAX);
  mapped_bytes_ = num_pages_ * page_bytes_;
  if (mapped_bytes_ > 0) {
    // Address space only: the kernel backs a page when it is first written.
    // Aligned to 2 MiB and advised to use transparent huge pages: a kv
    // head's pages lie apart, and with 4 KiB pages every one of them would
    // cost TLB misses (decode over a 32k-token bf16 cache: 0.45 -> 0.6 of
    // the memory-read rate on Zen 3).
    constexpr int64_t kHuge = int64_t{2} << 20;
    void* p = mmap(nullptr, static_cast<size_t>(mapped_bytes_ + kHuge), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      map_errno_ = errno;
      num_pages_ = 0;
      mapped_bytes_ = 0;
    } else {
      map_ = p;
      const auto at = reinterpret_cast<uintptr_t>(p);
      base_ = reinterpret_cast<uint8_t*>((at + kHuge - 1) & ~static_cast<uintptr_t>(kHuge - 1));
      madvise(base_, static_cast<size_t>(mapped_bytes_), MADV_HUGEPAGE);
      mapped_bytes_ += kHuge;
    }
  }
  refcount_.assign(static_cast<size_t>(num_pages_), 0);
  owner_of_.assign(static_cast<size_t>(num_pages_), 0);
  free_.reserve(static_cast<size_t>(num_pages_));
  // Low ids on top of the stack: a small load touches the start of the pool.
  for (int64_t i = num_pages_ - 1; i >= 0; --i) free_.push_back(static_cast<PageId>(i));
}

PagePool::~PagePool() {
  if (map_ != nullptr) munmap(map_, static_cast<size_t>(mapped_bytes_));
}

std::string OwnerLabel(const std::string& owner) {
  return owner.empty() ? std::string("the anonymous principal") : "principal '" + owner + "'";
}

int32_t PagePool::NewOwner() {
  std::lock_guard<std::mutex> lock(mu_);
  owner_pages_.push_back(0);
  return static_cast<int32_t>(owner_pages_.size() - 1);
}

Status PagePool::Allocate(int64_t n, const PoolOwner& owner, std::vector<PageId>* out) {
  if (n <= 0) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  if (n > static_cast<int64_t>(free_.size())) {
    const int64_t used = (num_pages_ - static_cast<int64_t>(free_.size())) * page_bytes_;
    return Status::ResourceExhausted(
        "kv cache pool: " + std::to_string(n * page_bytes_) + " bytes more needed, " +
        std::to_string(used) + " of " + std::to_string(bytes_limit()) +
        " bytes used (the limit, --kv-cache-mb); delete or truncate sessions, or raise the limit");
  }
  int64_t& mine = owner_pages_[static_cast<size_t>(owner.index)];
  if (owner.limit_bytes > 0 && (mine + n) * page_bytes_ > owner.limit_bytes) {
    return Status::ResourceExhausted(
        "kv cache of " + OwnerLabel(owner.name != nullptr ? *owner.name : std::string()) + ": " +
        std::to_string(n * page_bytes_) + " bytes more needed, " +
        std::to_string(mine * page_bytes_) + " of its " + std::to_string(owner.limit_bytes) +
        " bytes used (its quota, --kv-cache-mb-per-principal); delete or truncate its sessions, "
        "or raise the quota");
  }
  mine += n;
  for (int64_t i = 0; i < n; ++i) {
    const PageId p = free_.back();
    free_.pop_back();
    refcount_[p] = 1;
    owner_of_[p] = owner.index;
    out->push_back(p);
  }
  return Status::Ok();
}

int64_t PagePool::owner_bytes(int32_t owner) const {
  std::lock_guard<std::mutex> lock(mu_);
  return owner_pages_[static_cast<size_t>(owner)] * page_bytes_;
}

void PagePool::Retain(const PageId* pages, int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int64_t i = 0; i < n; ++i) ++refcount_[pages[i]];
}

void PagePool::Release(const PageId* pages, int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int64_t i = 0; i < n; ++i) {
    if (--refcount_[pages[i]] == 0) {
      free_.push_back(pages[i]);
      --owner_pages_[static_cast<size_t>(owner_of_[pages[i]])];
    }
  }
}

int32_t PagePool::RefCount(PageId page) const {
  std::lock_guard<std::mutex> lock(mu_);
  return refcount_[page];
}

int64_t PagePool::bytes_used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return (num_pages_ - static_cast<int64_t>(free_.size())) * page_bytes_;
}

}  // namespace attn::internal
