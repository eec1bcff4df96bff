// The decode kernel: attention of a few query rows over a paged KV cache
// (this room), read in place. Internal to core: inputs are already validated.
//
// One task is one kv head of one problem (and, when the problems have too
// few kv heads for the thread team, one slice of its pages: split-K, the
// slices merged through their log-sum-exp, as flash-decoding does). A task
// takes every query row of the head's group at once, so each page of keys
// and values is read once for all of them, its codes widened in registers
// by the page format's loops (kvformats/), the factors of a quantized
// format folded into the scores and the weights. On the portable tier (or
// for dims that are not multiples of 8) a page's codes are widened into an
// L1-sized buffer first. Pages wholly outside every row's window are never
// touched.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "attn/status.h"
#include "kvformats/page_codec.h"

namespace attn::internal {

struct DecodeProblem {
  int64_t hq = 0, hkv = 0, n = 0, d = 0, dv = 0;
  int64_t tokens = 0;           // L: keys the layer holds (after the append)
  int64_t tokens_per_page = 0;  // T
  // Where a page keeps its keys and values (their codecs among them).
  PageSide key, value;
  // Blocked keys: the layout, and per kv head the staging page of tokens
  // [fill_start, tokens).
  const PageLayout* layout = nullptr;
  const uint8_t* const* stage = nullptr;
  int64_t fill_start = 0;
  // Page p of kv head g at pages[g * pages_per_head + p].
  const uint8_t* const* pages = nullptr;
  int64_t pages_per_head = 0;
  // Query [Hq, n, D] through element strides.
  const float* q = nullptr;
  int64_t q_stride[3] = {0, 0, 0};
  float* out = nullptr;  // dense [Hq, n, Dv]
  float* lse = nullptr;  // dense [Hq, n], or null
  float scale = 1.0f;
  // Query row t sits at position first_pos + t (-1: tokens - n, the last n
  // positions; a slice of a longer step's rows sits earlier).
  int64_t first_pos = -1;
  int64_t Pos(int64_t t) const { return (first_pos >= 0 ? first_pos : tokens - n) + t; }
  bool causal = true;
  int64_t window_left = -1, window_right = -1;  // -1: unbounded
  float softcap = 0.0f;                         // 0: none
  const float* alibi = nullptr;                 // slope of head h at alibi[h], or null
  const float* sink = nullptr;                  // sink[h], or null
};

// Rows of a problem (n * Hq / Hkv per kv head) up to which the decode
// kernel beats gathering the cache for the blocked kernel.
constexpr int64_t kDecodeMaxGroupRows = 64;

// Computes every problem on up to `threads` threads (0: ComputeThreads()).
// CANCELLED when `cancelled` becomes true.
Status RunDecodeAttention(const std::vector<const DecodeProblem*>& problems, int threads,
                          const std::atomic<bool>* cancelled);

}  // namespace attn::internal
