// How a KV-cache page stores its keys and its values: one codec per format
// (format_*.cc), and the page's layout. Adding a format is one new file
// here: its codec (bytes per token, write a token, widen codes, the decode
// kernel's QK and PV over its codes) and its line in CodecOf. Internal to
// core.
//
// A page of one (layer, kv head) holds T tokens: the keys' region, then the
// values' region. A region is T rows of codes, then (a scaled format) T
// float32 factors, one per token: a token's value is its codes widened
// times its factor. The decode kernel folds the factors into the scores
// (keys) and into the weights (values), so its loops read codes only.
#pragma once

#include <cstdint>
#include <vector>

#include "attn/tensor.h"

namespace attn {
enum class CacheFormat;  // attn/kv_cache.h
enum class CacheType;
}  // namespace attn

namespace attn::internal {

// The stored formats. The floating ones keep a value as it is given,
// rounded to the type; Int8 and Fp8E4M3 keep codes and a factor per (token,
// kv head); Int4Values keeps 4-bit codes with a scale and a minimum per
// group of channels of each token (in the row); Int4Keys keeps 4-bit codes
// with a scale and a minimum per channel of each block of tokens (blocked:
// the block being filled is kept in the cache's type on a staging page).
enum class PageFormat { kFloat32, kBFloat16, kFloat16, kInt8, kFp8E4M3, kInt4Values, kInt4Keys };

// s[r * lds + j] = q_r . codes_j widened, for r < rows, j < c.
using QkCodesFn = void (*)(const float* q, int64_t rows, const uint8_t* k, int64_t c, int64_t d,
                           float* s, int64_t lds, const uint8_t* next);
// o[r * dv + x] += sum_j p[r * ldp + j] * codes_j[x] widened.
using PvCodesFn = void (*)(const float* p, int64_t rows, int64_t ldp, const uint8_t* v, int64_t c,
                           int64_t dv, float* o, const uint8_t* next);

struct PageCodec {
  const char* name;
  int64_t (*row_bytes)(int64_t dim);  // one token's row of `dim` values
  bool scaled;                        // a float32 factor per token after the region's rows
  // Writes one token's `dim` values as codes into `row` and returns its
  // factor (1 for an unscaled format). Values are finite for a scaled
  // format (the caller checks).
  float (*encode)(const float* src, int64_t dim, uint8_t* row);
  // Widens c rows of `dim` (without the factor) into dst [c, dim].
  void (*widen)(const uint8_t* rows, int64_t c, int64_t dim, float* dst);
  // The in-register loops, for dims that are multiples of 8 on the AVX2
  // tier and above (InRegister); `next` (or null) the same place in the
  // page read next, prefetched a token at a time.
  QkCodesFn qk;
  PvCodesFn pv;
  // A blocked format (Int4Keys): rows are written a block at a time, and
  // encode and widen are null. quantize_block writes the codes of g staged
  // tokens (floats [g, dim]) into the block's g rows' bytes at `block` (laid
  // out as the codec says, not row by row) and their meta (2 * dim floats);
  // widen_block widens tokens [j, j + c) of a block of g with its meta into
  // dst [c, dim].
  bool blocked = false;
  void (*quantize_block)(const float* staged, int64_t g, int64_t dim, uint8_t* block,
                         float* meta) = nullptr;
  void (*widen_block)(const uint8_t* block, int64_t g, const float* meta, int64_t j, int64_t c,
                      int64_t dim, float* dst) = nullptr;
  // A blocked format's QK over tokens [j, j + c) of a block of g with its
  // meta (s[r * lds + t] for token j + t, as QkCodesFn; `next` or null: the
  // same block's place in the page read next), for dims where block_loops
  // says so (or null).
  bool (*block_loops)(int64_t dim) = nullptr;
  void (*qk_block)(const float* q, int64_t rows, const uint8_t* block, int64_t g,
                   const float* meta, int64_t j, int64_t c, int64_t d, float* s, int64_t lds,
                   const uint8_t* next) = nullptr;
};

const PageCodec& CodecOf(PageFormat format);

// The decode loops' prepared rows (queries, weights, scratch) on 64-byte
// boundaries: a row of a vector's width read across two cache lines took
// the AVX2 QK loop from 44 to 62-66 cycles a key (rows 16 bytes off a
// line, as std::vector's allocations are).
template <typename T>
using LineVector = std::vector<T, AlignedAllocator<T>>;

// The page format of a side (keys or values) stored as `format` in a cache
// of `type`.
PageFormat PageFormatOf(CacheFormat format, CacheType type, bool keys);
// The AVX2 tier or above: the codecs' qk and pv may run for dims that are
// multiples of 8.
bool InRegisterTier();

// The query rows a decode task reads, pinned on this thread: the caller
// promises that [q, q + n) keeps its content until it pins again or unpins,
// so a codec that prepared rows from inside it (RowsOrigin) need not
// compare their content page after page.
struct QueryPin {
  const float *lo = nullptr, *hi = nullptr;
  uint64_t epoch = 0;  // which pin; 0 before the first
};
const QueryPin& ThreadQueryPin();
void PinQueryRows(const float* q, int64_t n);
void UnpinQueryRows();

// Prefetches the line at p (the loops' next pages, the decode's factors).
// (GCC deletes a loop whose body is only _mm_prefetch as one without
// effects; the asm statement keeps each prefetch. Its operand is the
// address in a register, not memory: with a memory operand GCC kept the
// loops' sums in memory around it.)
inline void PrefetchLine(const void* p) { asm volatile("prefetcht0 (%0)" : : "r"(p)); }

// Where a page keeps a side's (keys' or values') tokens.
struct PageSide {
  const PageCodec* codec = nullptr;
  int64_t offset = 0;     // of the region in the page
  int64_t row_bytes = 0;  // one token's codes
  int64_t factors = 0;    // offset of the factors (scaled) or block meta (blocked)
  int64_t factor_bytes = 0;  // their size in a page (0: an unscaled, unblocked side)
  uint8_t* Row(uint8_t* page, int64_t j) const { return page + offset + j * row_bytes; }
  const uint8_t* Row(const uint8_t* page, int64_t j) const { return page + offset + j * row_bytes; }
  float* Factors(uint8_t* page) const { return reinterpret_cast<float*>(page + factors); }
  const float* Factors(const uint8_t* page) const {
    return reinterpret_cast<const float*>(page + factors);
  }
};

struct PageLayout {
  int64_t tokens_per_page = 0;  // 0: one token does not fit a page
  PageSide key, value;
  int64_t token_bytes = 0;  // one token of one kv head, keys and values, factors included
  // Blocked keys: tokens a block (tokens_per_page is a multiple), and the
  // staging page's rows (the block being filled, in the cache's type).
  int64_t block_tokens = 0;
  PageSide stage;
  const float* BlockMeta(const uint8_t* page, int64_t block, int64_t d) const {
    return reinterpret_cast<const float*>(page + key.factors) + block * 2 * d;
  }
  float* BlockMeta(uint8_t* page, int64_t block, int64_t d) const {
    return reinterpret_cast<float*>(page + key.factors) + block * 2 * d;
  }
};

// The layout of `page_bytes` pages for D = d keys and Dv = dv values; each
// region starts on a 64-byte boundary. `stage` is the cache type's format
// (for blocked keys' staging page).
PageLayout MakePageLayout(PageFormat key, PageFormat value, int64_t d, int64_t dv,
                          int64_t page_bytes, PageFormat stage = PageFormat::kFloat32);

// Keys [a, a + c) of the page holding tokens [j0, j0 + T) of a layer with
// blocked keys, widened into dst [c, d]: from the page's blocks, or for
// tokens at or past `fill_start` (the block being filled) from `stage`.
void WidenBlockedKeys(const PageLayout& l, const uint8_t* page, const uint8_t* stage, int64_t j0,
                      int64_t a, int64_t c, int64_t fill_start, int64_t d, float* dst);

// The same keys scored against q's rows into s[r * lds + (pos - a)], with
// the codec's in-register loops (the block being filled: the cache type's
// loops over the staging page). False, with nothing written, where the
// codec or the tier has no such loops for d (then widen, and score that).
bool QkBlockedKeys(const PageLayout& l, const uint8_t* page, const uint8_t* stage, int64_t j0,
                   int64_t a, int64_t c, int64_t fill_start, int64_t d, const float* q,
                   int64_t rows, float* s, int64_t lds, const uint8_t* next);

// Writes a token's keys or values at slot j of the page (codes and factor).
void EncodeToken(const PageSide& side, const float* src, int64_t stride, int64_t dim, float* tmp,
                 uint8_t* page, int64_t j);
// Widens tokens [j, j + c) of a side into dst [c, dim], factors applied.
void DecodeTokens(const PageSide& side, const uint8_t* page, int64_t j, int64_t c, int64_t dim,
                  float* dst);

}  // namespace attn::internal
