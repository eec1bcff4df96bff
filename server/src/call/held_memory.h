// The memory that gRPC calls hold outside their computation: each request's
// bytes from arrival, and each answer from the moment it is handed to gRPC
// until gRPC is done with it. An answer that its client never reads stays in
// gRPC's buffers; --max-inflight no longer counts it. This tracks those bytes
// per connection and decides, over the quota, whose calls to refuse.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "attn/status.h"

namespace attn::server {

class HeldMemory {
 public:
  explicit HeldMemory(int64_t quota_bytes) : quota_(quota_bytes) {}

  // OK while the held total (this call's `own` bytes included) is within
  // the quota. Over it, OK only for a connection (`peer`) that holds nothing
  // but this call; RESOURCE_EXHAUSTED for the others. So clients that do not
  // read their answers are refused, a client with one call at a time is
  // always served, and the total stays within the quota plus one call per
  // connection.
  Status Admit(const std::string& peer, int64_t own) const;

  // `bytes` more (or, negative, fewer) held by `peer`.
  void Add(const std::string& peer, int64_t bytes);

  int64_t held() const { return total_.load(std::memory_order_relaxed); }
  int64_t quota() const { return quota_; }
  // Connections holding anything now.
  int connections() const;

 private:
  const int64_t quota_;
  std::atomic<int64_t> total_{0};
  mutable std::mutex mu_;
  std::unordered_map<std::string, int64_t> by_peer_;  // guarded by mu_; no zero entries
};

}  // namespace attn::server
