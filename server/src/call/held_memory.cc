#include "call/held_memory.h"

#include <fmt/format.h>

namespace attn::server {

namespace {

double MiB(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

Status HeldMemory::Admit(const std::string& peer, int64_t own) const {
  const int64_t total = total_.load(std::memory_order_relaxed);
  if (total <= quota_) return Status::Ok();
  int64_t mine = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = by_peer_.find(peer);
    if (it != by_peer_.end()) mine = it->second;
  }
  if (mine <= own) return Status::Ok();
  return Status::ResourceExhausted(fmt::format(
      "server: requests and unread answers hold {:.1f} MiB, over the memory quota "
      "(--memory-quota-mb {:.0f}), and this connection holds {:.1f} MiB of it in other calls; "
      "read their answers, or retry later",
      MiB(total), MiB(quota_), MiB(mine - own)));
}

void HeldMemory::Add(const std::string& peer, int64_t bytes) {
  if (bytes == 0) return;
  total_.fetch_add(bytes, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_peer_.try_emplace(peer, 0).first;
  it->second += bytes;
  if (it->second <= 0) by_peer_.erase(it);
}

int HeldMemory::connections() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(by_peer_.size());
}

}  // namespace attn::server
