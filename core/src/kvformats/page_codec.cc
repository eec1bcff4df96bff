#include "kvformats/page_codec.h"

#include <algorithm>
#include <vector>

#include "attn/kv_cache.h"
#include "kvformats/formats.h"
#include "support/isa_cap.h"

namespace attn {

const char* CacheTypeName(CacheType type) {
  switch (type) {
    case CacheType::kFloat32:
      return "float32";
    case CacheType::kBFloat16:
      return "bfloat16";
    case CacheType::kFloat16:
      return "float16";
  }
  return "float32";
}

int CacheTypeBytes(CacheType type) { return type == CacheType::kFloat32 ? 4 : 2; }

const char* CacheFormatName(CacheFormat format, CacheType type) {
  switch (format) {
    case CacheFormat::kAsCacheType:
      return CacheTypeName(type);
    case CacheFormat::kInt8:
      return "int8";
    case CacheFormat::kFp8E4M3:
      return "fp8_e4m3";
    case CacheFormat::kInt4:
      return "int4";
  }
  return CacheTypeName(type);
}

void StoredValues(CacheFormat format, CacheType type, const float* x, int64_t n, float* out) {
  const internal::PageCodec& c = internal::CodecOf(internal::PageFormatOf(format, type, false));
  std::vector<uint8_t> codes(static_cast<size_t>(c.row_bytes(n)));
  const float factor = c.encode(x, n, codes.data());
  c.widen(codes.data(), 1, n, out);
  if (!c.scaled) return;
  for (int64_t i = 0; i < n; ++i) out[i] *= factor;
}

int64_t StoredBytes(CacheFormat format, CacheType type, int64_t dim) {
  const internal::PageCodec& c = internal::CodecOf(internal::PageFormatOf(format, type, false));
  return c.row_bytes(dim) + (c.scaled ? 4 : 0);
}

namespace internal {

PageFormat PageFormatOf(CacheFormat format, CacheType type, bool keys) {
  switch (format) {
    case CacheFormat::kInt8:
      return PageFormat::kInt8;
    case CacheFormat::kFp8E4M3:
      return PageFormat::kFp8E4M3;
    case CacheFormat::kInt4:
      return keys ? PageFormat::kInt4Keys : PageFormat::kInt4Values;
    case CacheFormat::kAsCacheType:
      break;
  }
  return type == CacheType::kFloat32    ? PageFormat::kFloat32
         : type == CacheType::kBFloat16 ? PageFormat::kBFloat16
                                        : PageFormat::kFloat16;
}

const PageCodec& CodecOf(PageFormat format) {
  switch (format) {
    case PageFormat::kFloat32:
      return Float32Codec();
    case PageFormat::kBFloat16:
      return BFloat16Codec();
    case PageFormat::kFloat16:
      return Float16Codec();
    case PageFormat::kInt8:
      return Int8Codec();
    case PageFormat::kFp8E4M3:
      return Fp8E4M3Codec();
    case PageFormat::kInt4Values:
      return Int4ValuesCodec();
    case PageFormat::kInt4Keys:
      return Int4KeysCodec();
  }
  return Float32Codec();
}

namespace {
QueryPin& MutableQueryPin() {
  thread_local QueryPin pin;
  return pin;
}
}  // namespace

const QueryPin& ThreadQueryPin() { return MutableQueryPin(); }

void PinQueryRows(const float* q, int64_t n) {
  QueryPin& pin = MutableQueryPin();
  pin.lo = q;
  pin.hi = q + n;
  ++pin.epoch;
}

void UnpinQueryRows() {
  QueryPin& pin = MutableQueryPin();
  pin.lo = pin.hi = nullptr;
  ++pin.epoch;
}

bool InRegisterTier() {
  static const bool avx2 = KernelTier() >= IsaTier::kAvx2;
  return avx2;
}

bool UseAvx512(int64_t width) {
  static const bool avx512 = KernelTier() >= IsaTier::kAvx512;
  return avx512 && width % 16 == 0;
}

namespace {

constexpr int64_t kAlign = 64;

int64_t RoundUp(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// Lays out T tokens of a side from `at` (a blocked side: its meta for
// T / g blocks after the codes); returns where the next region may start.
int64_t PlaceSide(const PageCodec& codec, int64_t dim, int64_t T, int64_t g, int64_t at,
                  PageSide* side) {
  side->codec = &codec;
  side->offset = at;
  side->row_bytes = codec.row_bytes(dim);
  int64_t end = at + T * side->row_bytes;
  if (codec.scaled || codec.blocked) {
    side->factors = RoundUp(end);
    side->factor_bytes = codec.blocked ? T / g * 2 * dim * 4 : T * 4;
    end = side->factors + side->factor_bytes;
  }
  return RoundUp(end);
}

// The layout for T tokens in blocks of g (g = T: not blocked), or false
// when it passes the page.
bool Place(const PageCodec& kc, const PageCodec& vc, int64_t d, int64_t dv, int64_t T, int64_t g,
           int64_t page_bytes, PageLayout* l) {
  const int64_t mid = PlaceSide(kc, d, T, g, 0, &l->key);
  if (PlaceSide(vc, dv, T, g, mid, &l->value) > page_bytes) return false;
  l->tokens_per_page = T;
  l->block_tokens = kc.blocked ? g : 0;
  return true;
}

}  // namespace

PageLayout MakePageLayout(PageFormat key, PageFormat value, int64_t d, int64_t dv,
                          int64_t page_bytes, PageFormat stage) {
  const PageCodec& kc = CodecOf(key);
  const PageCodec& vc = CodecOf(value);
  PageLayout l;
  l.token_bytes = kc.row_bytes(d) + vc.row_bytes(dv) + (kc.scaled ? 4 : 0) + (vc.scaled ? 4 : 0);
  if (!kc.blocked) {
    // The most tokens whose aligned regions fit (alignment costs at most a
    // few cache lines, so a handful of steps down from the unaligned count).
    for (int64_t T = page_bytes / l.token_bytes; T >= 1; --T) {
      if (Place(kc, vc, d, dv, T, T, page_bytes, &l)) return l;
    }
    return l;
  }
  // Blocked keys: B blocks of g tokens a page (each block's meta takes room),
  // g at most what one staging page holds in the cache's type; the most
  // tokens a page over B, the fewest blocks among equals.
  const PageCodec& sc = CodecOf(stage);
  l.stage.codec = &sc;
  l.stage.row_bytes = sc.row_bytes(d);
  const int64_t most_staged = page_bytes / l.stage.row_bytes;
  PageLayout best = l;
  for (int64_t blocks = 1; blocks <= 64; ++blocks) {
    int64_t T = std::min(page_bytes / l.token_bytes, most_staged * blocks) / blocks * blocks;
    for (; T > best.tokens_per_page && T >= blocks; T -= blocks) {
      PageLayout t = l;
      if (Place(kc, vc, d, dv, T, T / blocks, page_bytes, &t)) {
        best = t;
        break;
      }
    }
  }
  return best;
}

namespace {

// Keys [a, a + c) of the page holding tokens [j0, j0 + T) of a layer with
// blocked keys, run by run: block(pos, n, slot, index) for each run inside
// one of the page's full blocks, then staged(pos, n) once for the keys at
// or past fill_start (the block being filled), if any.
template <typename Block, typename Staged>
void ForEachBlockRun(const PageLayout& l, int64_t j0, int64_t a, int64_t c, int64_t fill_start,
                     Block block, Staged staged) {
  const int64_t g = l.block_tokens;
  for (int64_t pos = a; pos < a + c;) {
    if (pos >= fill_start) {
      staged(pos, a + c - pos);
      return;
    }
    const int64_t slot = pos - j0, index = slot / g;
    const int64_t n = std::min({a + c - pos, (index + 1) * g - slot, fill_start - pos});
    block(pos, n, slot, index);
    pos += n;
  }
}

}  // namespace

void WidenBlockedKeys(const PageLayout& l, const uint8_t* page, const uint8_t* stage, int64_t j0,
                      int64_t a, int64_t c, int64_t fill_start, int64_t d, float* dst) {
  ForEachBlockRun(
      l, j0, a, c, fill_start,
      [&](int64_t pos, int64_t n, int64_t slot, int64_t block) {
        const int64_t first = block * l.block_tokens;
        l.key.codec->widen_block(l.key.Row(page, first), l.block_tokens,
                                 l.BlockMeta(page, block, d), slot - first, n, d,
                                 dst + (pos - a) * d);
      },
      [&](int64_t pos, int64_t n) {  // staged in the cache's type
        l.stage.codec->widen(stage + (pos - fill_start) * l.stage.row_bytes, n, d,
                             dst + (pos - a) * d);
      });
}

bool QkBlockedKeys(const PageLayout& l, const uint8_t* page, const uint8_t* stage, int64_t j0,
                   int64_t a, int64_t c, int64_t fill_start, int64_t d, const float* q,
                   int64_t rows, float* s, int64_t lds, const uint8_t* next) {
  const PageCodec& kc = *l.key.codec;
  if (kc.block_loops == nullptr || !kc.block_loops(d) || l.stage.codec->qk == nullptr) return false;
  ForEachBlockRun(
      l, j0, a, c, fill_start,
      [&](int64_t pos, int64_t n, int64_t slot, int64_t block) {
        // `next` is the next page's row a: its block at the same offset.
        const int64_t first = block * l.block_tokens;
        kc.qk_block(q, rows, l.key.Row(page, first), l.block_tokens, l.BlockMeta(page, block, d),
                    slot - first, n, d, s + (pos - a), lds,
                    next != nullptr ? next + (first - (a - j0)) * l.key.row_bytes : nullptr);
      },
      [&](int64_t pos, int64_t n) {
        l.stage.codec->qk(q, rows, stage + (pos - fill_start) * l.stage.row_bytes, n, d,
                          s + (pos - a), lds, nullptr);
      });
  return true;
}

void EncodeToken(const PageSide& side, const float* src, int64_t stride, int64_t dim, float* tmp,
                 uint8_t* page, int64_t j) {
  if (stride != 1) {
    for (int64_t x = 0; x < dim; ++x) tmp[x] = src[x * stride];
    src = tmp;
  }
  const float factor = side.codec->encode(src, dim, side.Row(page, j));
  if (side.codec->scaled) side.Factors(page)[j] = factor;
}

void DecodeTokens(const PageSide& side, const uint8_t* page, int64_t j, int64_t c, int64_t dim,
                  float* dst) {
  side.codec->widen(side.Row(page, j), c, dim, dst);
  if (!side.codec->scaled) return;
  const float* f = side.Factors(page) + j;
  for (int64_t i = 0; i < c; ++i) {
    for (int64_t x = 0; x < dim; ++x) dst[i * dim + x] *= f[i];
  }
}

}  // namespace internal
}  // namespace attn
