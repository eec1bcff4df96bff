// Blocked (int4) keys: the block being filled, kept in the cache's type on
// a staging page per kv head, quantized per channel into its page when it
// fills; replays compared against what a layer holds; truncation into a
// complete block re-stages its kept tokens.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kvcache/extend_plan.h"
#include "kvformats/formats.h"

namespace attn::internal {

int64_t BlockedKeyScratch(const StepPlan& p) {
  const KvSession& s = *p.session;
  const int64_t d = s.spec.head_dim;
  // The block (G rows), a row, and a row's codes in the staging type
  // (float32 at most: d floats).
  return (s.layout.block_tokens + 2) * d;
}

void WriteBlockedKeys(const StepPlan& p, PagePool* pool, int64_t g, float* scratch) {
  const KvSession& s = *p.session;
  const PageLayout& l = s.layout;
  const int64_t hkv = s.spec.num_kv_heads, d = s.spec.head_dim, T = s.tokens_per_page;
  const int64_t G = l.block_tokens;
  const TensorView& k = *p.step->key;
  float* staged = scratch;
  float* row = staged + G * d;
  auto* code = reinterpret_cast<uint8_t*>(row + d);  // l.stage.row_bytes <= 4 * d
  // The block being filled before the step, from its staging page.
  const int64_t kept = p.before % G;
  if (kept > 0) {
    l.stage.codec->widen(pool->Data(p.stage_before[static_cast<size_t>(g)]), kept, d, staged);
  }
  for (int64_t i = 0; i < p.nkv; ++i) {
    const int64_t pos = p.before + i, slot = pos % G;
    const float* src = k.f32() + g * k.stride(0) + i * k.stride(1);
    for (int64_t x = 0; x < d; ++x) row[x] = src[x * k.stride(2)];
    // Kept in the cache's type: rounded as the staging page stores it.
    l.stage.codec->encode(row, d, code);
    l.stage.codec->widen(code, 1, d, staged + slot * d);
    if (slot != G - 1) continue;
    uint8_t* page = pool->Data(p.table[static_cast<size_t>(pos / T * hkv + g)]);
    const int64_t block = (pos % T) / G;
    l.key.codec->quantize_block(staged, G, d, l.key.Row(page, block * G),
                                l.BlockMeta(page, block, d));
  }
  const int64_t left = p.after % G;
  if (left == 0) return;
  uint8_t* stage = pool->Data(p.stage[static_cast<size_t>(g)]);
  for (int64_t j = 0; j < left; ++j) {
    l.stage.codec->encode(staged + j * d, d, stage + j * l.stage.row_bytes);
  }
}

bool SameBlockedKey(const KvSession& s, const KvLayer& layer, const PagePool& pool, int64_t g,
                    int64_t pos, const float* x, int64_t stride) {
  const PageLayout& l = s.layout;
  const int64_t hkv = s.spec.num_kv_heads, d = s.spec.head_dim, T = s.tokens_per_page;
  const int64_t G = l.block_tokens, fill = layer.tokens - layer.tokens % G;
  std::vector<float> row(static_cast<size_t>(d)), held(static_cast<size_t>(d));
  std::vector<uint8_t> code(static_cast<size_t>(l.stage.row_bytes));
  for (int64_t c = 0; c < d; ++c) row[static_cast<size_t>(c)] = x[c * stride];
  l.stage.codec->encode(row.data(), d, code.data());
  if (pos >= fill) {  // staged: bit for bit in the cache's type
    const uint8_t* stage = pool.Data(layer.stage[static_cast<size_t>(g)]);
    return std::memcmp(code.data(), stage + (pos - fill) * l.stage.row_bytes,
                       static_cast<size_t>(l.stage.row_bytes)) == 0;
  }
  // In a complete block: the codes its channels' meta gives the rounded value.
  l.stage.codec->widen(code.data(), 1, d, held.data());
  const uint8_t* page = pool.Data(layer.pages[static_cast<size_t>(pos / T * hkv + g)]);
  const int64_t slot = pos % T;
  const float* meta = l.BlockMeta(page, slot / G, d);
  const uint8_t* block = l.key.Row(page, slot / G * G);
  for (int64_t c = 0; c < d; ++c) {
    if (Int4Code(held[static_cast<size_t>(c)], meta[d + c], meta[c]) !=
        Int4KeyNibble(block, G, d, slot % G, c)) {
      return false;
    }
  }
  return true;
}

int64_t RestagePages(const KvSession& s, const KvLayer& l, int64_t tokens) {
  const int64_t G = s.layout.block_tokens;
  if (G == 0 || tokens >= l.tokens) return 0;
  const int64_t keep = tokens % G, start = tokens - keep;
  return keep > 0 && start + G <= l.tokens ? s.spec.num_kv_heads : 0;
}

void Restage(KvSession& s, KvLayer& l, int64_t tokens, const PageId* fresh) {
  const PageLayout& lay = s.layout;
  const int64_t hkv = s.spec.num_kv_heads, d = s.spec.head_dim, T = s.tokens_per_page;
  const int64_t G = lay.block_tokens, keep = tokens % G, start = tokens - keep;
  if (keep > 0 && fresh == nullptr) return;  // the staged block: kept as it is
  std::vector<PageId> next;
  if (keep > 0) {  // a complete block cut into: its kept tokens staged again
    std::vector<float> rows(static_cast<size_t>(keep * d));
    for (int64_t g = 0; g < hkv; ++g) {
      const uint8_t* page = s.pool->Data(l.pages[static_cast<size_t>(start / T * hkv + g)]);
      WidenBlockedKeys(lay, page, nullptr, start / T * T, start, keep, tokens, d, rows.data());
      uint8_t* stage = s.pool->Data(fresh[g]);
      for (int64_t j = 0; j < keep; ++j) {
        lay.stage.codec->encode(rows.data() + j * d, d, stage + j * lay.stage.row_bytes);
      }
      next.push_back(fresh[g]);
    }
  }
  s.pool->Release(l.stage.data(), static_cast<int64_t>(l.stage.size()));
  l.stage.swap(next);
}

}  // namespace attn::internal
