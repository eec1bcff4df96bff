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
  if (format == CacheFormat::kInt4) {
    std::copy(x, x + n, out);
    return;
  }
  const internal::PageCodec& c = internal::CodecOf(internal::PageFormatOf(format, type));
  std::vector<uint8_t> codes(static_cast<size_t>(n * c.elem_bytes));
  const float factor = c.encode(x, n, codes.data());
  c.widen(codes.data(), n, out);
  if (!c.scaled) return;
  for (int64_t i = 0; i < n; ++i) out[i] *= factor;
}

int64_t StoredBytes(CacheFormat format, CacheType type, int64_t dim) {
  const internal::PageCodec& c = internal::CodecOf(internal::PageFormatOf(format, type));
  return dim * c.elem_bytes + (c.scaled ? 4 : 0);
}

namespace internal {

PageFormat PageFormatOf(CacheFormat format, CacheType type) {
  switch (format) {
    case CacheFormat::kInt8:
      return PageFormat::kInt8;
    case CacheFormat::kFp8E4M3:
      return PageFormat::kFp8E4M3;
    case CacheFormat::kAsCacheType:
    case CacheFormat::kInt4:  // refused at create
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
  }
  return Float32Codec();
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

// Lays out T tokens of a side from `at`; returns where the next region may start.
int64_t PlaceSide(const PageCodec& codec, int64_t dim, int64_t T, int64_t at, PageSide* side) {
  side->codec = &codec;
  side->offset = at;
  side->row_bytes = dim * codec.elem_bytes;
  int64_t end = at + T * side->row_bytes;
  if (codec.scaled) {
    side->factors = RoundUp(end);
    end = side->factors + T * 4;
  }
  return RoundUp(end);
}

}  // namespace

PageLayout MakePageLayout(PageFormat key, PageFormat value, int64_t d, int64_t dv,
                          int64_t page_bytes) {
  const PageCodec& kc = CodecOf(key);
  const PageCodec& vc = CodecOf(value);
  PageLayout l;
  l.token_bytes =
      d * kc.elem_bytes + dv * vc.elem_bytes + (kc.scaled ? 4 : 0) + (vc.scaled ? 4 : 0);
  // The most tokens whose aligned regions fit (alignment costs at most a
  // few cache lines, so a handful of steps down from the unaligned count).
  for (int64_t T = page_bytes / l.token_bytes; T >= 1; --T) {
    PageLayout t = l;
    const int64_t mid = PlaceSide(kc, d, T, 0, &t.key);
    if (PlaceSide(vc, dv, T, mid, &t.value) <= page_bytes) {
      t.tokens_per_page = T;
      return t;
    }
  }
  return l;
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
  side.codec->widen(side.Row(page, j), c * dim, dst);
  if (!side.codec->scaled) return;
  const float* f = side.Factors(page) + j;
  for (int64_t i = 0; i < c; ++i) {
    for (int64_t x = 0; x < dim; ++x) dst[i * dim + x] *= f[i];
  }
}

}  // namespace internal
}  // namespace attn
