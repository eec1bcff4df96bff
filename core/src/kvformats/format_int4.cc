// INT4: 4-bit codes, asymmetric (a scale and a minimum), two a byte (the
// low nibble the even channel). Values are quantized per token in groups
// of kInt4Group channels, their scales and minimums in the token's row:
// each group's min and max, scale = (max - min) / 15 rounded to float32,
// code = (x - min) / scale in float64 rounded half to even, within [0, 15]
// (a group all one value: scale 0, codes 0). Keys are quantized per
// channel over a block of tokens (KIVI: keys have outlier channels, and a
// scale per channel keeps them from flattening the others), the same
// arithmetic down each channel of the block's staged values; the block
// being filled is kept in the cache's type until it is full (the store's
// staging page). A value widens to min + code * scale in float32, rounded
// once (a fused multiply-add).
//
// A key block's codes are laid out for the decode loops, not token by
// token: the block's tokens in groups of 16 (the last group m < 16 of
// them), a group's codes in units of 8 channels (an octet), and in a unit
// each token's 8 codes as two 16-bit words, word h holding channels
// 2k + h of the octet in its nibble k (bits 4k to 4k + 3). So the unit of
// a whole group is 64 bytes whose words, masked or shifted to nibble k,
// are sixteen tokens' channel pairs (2k, 2k + 1): one VPDPWSSD against a
// broadcast query pair scores sixteen keys, and no sum crosses lanes
// (with a row a token, a tile of 4 rows by 4 keys spent about 50 of its
// 223 instructions reducing its sums: docs/performance.md). A group of m tokens
// takes m * rb bytes (rb = (dim + 1) / 2, a token's share), its units 4 m
// apart; an octet cut short by dim (the last w < 8 channels) holds each
// token's codes in order, two a byte, low nibble first.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kvformats/formats.h"
#include "kvformats/page_loops.h"

namespace attn::internal {
namespace {

constexpr int64_t kInt4Group = 64;

int64_t Groups(int64_t dim) { return (dim + kInt4Group - 1) / kInt4Group; }

// The code of x against (lo, scale).
inline uint8_t Code(double x, float lo, float scale) {
  if (scale == 0.0f) return 0;
  constexpr double kRound = 6755399441055744.0;  // round half to even
  const double c = ((x - lo) / scale + kRound) - kRound;
  return static_cast<uint8_t>(std::min(15.0, std::max(0.0, c)));
}

// Codes pack in chunks of 32 channels (the last chunk: what is left, an
// even count w): byte i of a chunk holds channel i in its low nibble and
// channel i + w / 2 in its high one, so that a chunk widens in order as two
// runs of sixteen lanes.
inline void Where(int64_t dim, int64_t x, int64_t* byte, bool* high) {
  const int64_t chunk = x / 32 * 32, w = std::min<int64_t>(32, dim - chunk), i = x - chunk;
  *high = i >= w / 2;
  *byte = chunk / 2 + (*high ? i - w / 2 : i);
}

inline void Put(uint8_t* row, int64_t dim, int64_t x, uint8_t code) {
  int64_t at;
  bool high;
  Where(dim, x, &at, &high);
  row[at] = high ? static_cast<uint8_t>((row[at] & 0x0F) | (code << 4))
                 : static_cast<uint8_t>((row[at] & 0xF0) | code);
}

inline uint8_t Get(const uint8_t* row, int64_t dim, int64_t x) {
  int64_t at;
  bool high;
  Where(dim, x, &at, &high);
  return high ? (row[at] >> 4) : (row[at] & 0x0F);
}

// Where channel x of token j of a key block of g tokens sits (the layout
// above).
inline void KeyWhere(int64_t g, int64_t dim, int64_t j, int64_t x, int64_t* byte, bool* high) {
  const int64_t g0 = KeyGroupStart(j), m = KeyGroupTokens(g, g0), i = j - g0;
  const int64_t o = x / 8 * 8, w = std::min<int64_t>(8, dim - o), r = x - o;
  const int64_t at = g0 * ((dim + 1) / 2) + o / 2 * m;
  if (w == 8) {
    *byte = at + 4 * i + 2 * (r % 2) + r / 4;
    *high = (r / 2) % 2 == 1;
  } else {
    *byte = at + (w + 1) / 2 * i + r / 2;
    *high = r % 2 == 1;
  }
}

inline void PutKey(uint8_t* block, int64_t g, int64_t dim, int64_t j, int64_t x, uint8_t code) {
  int64_t at;
  bool high;
  KeyWhere(g, dim, j, x, &at, &high);
  block[at] = high ? static_cast<uint8_t>((block[at] & 0x0F) | (code << 4))
                   : static_cast<uint8_t>((block[at] & 0xF0) | code);
}

inline uint8_t GetKey(const uint8_t* block, int64_t g, int64_t dim, int64_t j, int64_t x) {
  int64_t at;
  bool high;
  KeyWhere(g, dim, j, x, &at, &high);
  return high ? (block[at] >> 4) : (block[at] & 0x0F);
}

#define ATTN_INT4_512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))

// dst[x] = min + code[x] * scale for the `full` whole chunks of 32
// channels of a value row (16 bytes each: the low nibbles are channels
// 0-15 of a chunk, the high ones 16-31), whose scale and minimum are one
// per group of kInt4Group channels (two chunks a group): broadcast.
ATTN_INT4_512 void WidenValueChunks512(const uint8_t* row, int64_t full, const float* meta,
                                       float* dst) {
  const __m512i mask = _mm512_set1_epi32(0x0F);
  for (int64_t k = 0; k < full; ++k) {
    const int64_t x = 32 * k, group = x / kInt4Group;
    const __m512 scale = _mm512_set1_ps(meta[2 * group]), lo = _mm512_set1_ps(meta[2 * group + 1]);
    const __m512i b =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 16 * k)));
    _mm512_storeu_ps(dst + x,
                     _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(b, mask)), scale, lo));
    _mm512_storeu_ps(dst + x + 16,
                     _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(b, 4)), scale, lo));
  }
}

#define ATTN_INT4_256 __attribute__((target("avx2,fma")))

// The AVX2 twin, eight lanes at a time: bytes [8 h, 8 h + 8) of a chunk
// hold channels 8 h.. (low nibbles) and 16 + 8 h.. (high ones).
ATTN_INT4_256 void WidenValueChunks256(const uint8_t* row, int64_t full, const float* meta,
                                       float* dst) {
  const __m256i mask = _mm256_set1_epi32(0x0F);
  for (int64_t k = 0; k < full; ++k) {
    const int64_t group = 32 * k / kInt4Group;
    const __m256 scale = _mm256_set1_ps(meta[2 * group]), lo = _mm256_set1_ps(meta[2 * group + 1]);
    for (int64_t h = 0; h < 2; ++h) {
      const __m256i b = _mm256_cvtepu8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + 16 * k + 8 * h)));
      const int64_t x0 = 32 * k + 8 * h;
      _mm256_storeu_ps(dst + x0,
                       _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(b, mask)), scale, lo));
      _mm256_storeu_ps(dst + x0 + 16,
                       _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4)), scale, lo));
    }
  }
}

int64_t ValueRowBytes(int64_t dim) { return (dim + 1) / 2 + Groups(dim) * 8; }

float EncodeValues(const float* src, int64_t dim, uint8_t* row) {
  const int64_t codes = (dim + 1) / 2;
  std::memset(row, 0, static_cast<size_t>(codes));
  auto* meta = reinterpret_cast<float*>(row + codes);  // (scale, min) per group
  for (int64_t g0 = 0, k = 0; g0 < dim; g0 += kInt4Group, ++k) {
    const int64_t g1 = std::min(dim, g0 + kInt4Group);
    float lo = src[g0], hi = src[g0];
    for (int64_t x = g0; x < g1; ++x) lo = std::min(lo, src[x]), hi = std::max(hi, src[x]);
    const float scale = static_cast<float>((static_cast<double>(hi) - lo) / 15.0);
    std::memcpy(meta + 2 * k, &scale, 4);
    std::memcpy(meta + 2 * k + 1, &lo, 4);
    for (int64_t x = g0; x < g1; ++x) Put(row, dim, x, Code(src[x], lo, scale));
  }
  return 1.0f;
}

void WidenValues(const uint8_t* rows, int64_t c, int64_t dim, float* dst) {
  const int64_t rb = ValueRowBytes(dim), codes = (dim + 1) / 2;
  static const bool wide = UseAvx512(16), avx2 = InRegisterTier();
  std::vector<float> meta(static_cast<size_t>(2 * Groups(dim)));
  for (int64_t j = 0; j < c; ++j) {
    const uint8_t* row = rows + j * rb;
    std::memcpy(meta.data(), row + codes, meta.size() * 4);  // (scale, min) a group
    int64_t done = 0;
    if (wide) {
      done = dim / 32 * 32;
      WidenValueChunks512(row, dim / 32, meta.data(), dst + j * dim);
    } else if (avx2) {
      done = dim / 32 * 32;
      WidenValueChunks256(row, dim / 32, meta.data(), dst + j * dim);
    }
    for (int64_t x = done; x < dim; ++x) {
      const int64_t g = x / kInt4Group;
      dst[j * dim + x] =
          std::fmaf(static_cast<float>(Get(row, dim, x)), meta[2 * g], meta[2 * g + 1]);
    }
  }
}

int64_t KeyRowBytes(int64_t dim) { return (dim + 1) / 2; }

// meta: scale[dim] then min[dim].
void QuantizeBlock(const float* staged, int64_t g, int64_t dim, uint8_t* rows, float* meta) {
  const int64_t rb = KeyRowBytes(dim);
  std::memset(rows, 0, static_cast<size_t>(g * rb));
  for (int64_t x = 0; x < dim; ++x) {
    float lo = staged[x], hi = staged[x];
    for (int64_t j = 1; j < g; ++j) {
      lo = std::min(lo, staged[j * dim + x]);
      hi = std::max(hi, staged[j * dim + x]);
    }
    const float scale = static_cast<float>((static_cast<double>(hi) - lo) / 15.0);
    meta[x] = scale;
    meta[dim + x] = lo;
    for (int64_t j = 0; j < g; ++j) PutKey(rows, g, dim, j, x, Code(staged[j * dim + x], lo, scale));
  }
}

// Tokens [j, j + c) of a block of g: a whole octet's 8 codes are one
// 32-bit read (channel 2k + h at bit 16 h + 4 k); the rest one by one.
void WidenBlock(const uint8_t* block, int64_t g, const float* meta, int64_t j, int64_t c,
                int64_t dim, float* dst) {
  const int64_t rb = KeyRowBytes(dim), full = dim / 8 * 8;
  const float *scale = meta, *lo = meta + dim;
  for (int64_t t = j; t < j + c; ++t) {
    const int64_t g0 = KeyGroupStart(t), m = KeyGroupTokens(g, g0), i = t - g0;
    const uint8_t* unit = block + g0 * rb + 4 * i;
    float* out = dst + (t - j) * dim;
    for (int64_t o = 0; o < full; o += 8) {
      uint32_t w;
      std::memcpy(&w, unit + o / 2 * m, 4);
      for (int64_t r = 0; r < 8; ++r) {
        const uint32_t code = (w >> (16 * (r % 2) + 4 * (r / 2))) & 0x0F;
        out[o + r] = std::fmaf(static_cast<float>(code), scale[o + r], lo[o + r]);
      }
    }
    for (int64_t x = full; x < dim; ++x) {
      out[x] = std::fmaf(static_cast<float>(GetKey(block, g, dim, t, x)), scale[x], lo[x]);
    }
  }
}

// The tokens' group scales (f, not yet over the page's largest) and
// minimums plus 8 scales (mg), [group][token], and each group's largest
// scale (smax), from the (scale, min) pairs at meta + j * rb of token j:
// sixteen tokens of a group at a time, gathered.
ATTN_INT4_512 void GatheredMeta(const uint8_t* meta0, int64_t rb, int64_t c, int64_t groups,
                                int64_t ld, float* f0, float* mg0, float* smax) {
  const __m512i at =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int>(rb / 4)));
  for (int64_t g = 0; g < groups; ++g) {
    const float* meta = reinterpret_cast<const float*>(meta0 + 8 * g);
    float *f = f0 + g * ld, *mg = mg0 + g * ld;
    __m512 sm = _mm512_setzero_ps();
    for (int64_t j = 0; j < c; j += 16) {
      const __mmask16 k = Lanes16(c - j);
      const float* base = meta + j * (rb / 4);
      const __m512 sv = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, at, base, 4);
      const __m512 mv = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, at, base + 1, 4);
      _mm512_mask_storeu_ps(f + j, k, sv);
      _mm512_mask_storeu_ps(mg + j, k, _mm512_fmadd_ps(sv, _mm512_set1_ps(8.0f), mv));
      sm = _mm512_max_ps(sm, sv);
    }
    smax[g] = _mm512_reduce_max_ps(sm);
  }
}

// The same for two groups (dv 128, the common case), without gathers:
// a token's four floats (scale and min of groups 0 and 1) are one 16-byte
// load, four tokens one vector, and two permutes and a shuffle of 128-bit
// lanes put sixteen tokens' scales (or minimums) of a group in order. The
// same values as GatheredMeta, whose gathers took half of this
// preparation (a tenth of an int4 step at 1 x 32k on a Zen 5).
ATTN_INT4_512 void TwoGroupsMeta(const uint8_t* meta0, int64_t rb, int64_t c, int64_t ld, float* f0,
                                 float* mg0, float* smax) {
  // Lanes 0-7: the scale of group 0 of tokens 0-7 (four in each operand,
  // four floats a token), 8-15: their minimum; `second`: group 1's.
  const __m512i first = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
  const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(2));
  alignas(16) static const float kNone[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  float *f1 = f0 + ld, *mg1 = mg0 + ld;
  __m512 sm0 = _mm512_setzero_ps(), sm1 = sm0;
  const __m512 eight = _mm512_set1_ps(8.0f);
  for (int64_t j = 0; j < c; j += 16) {
    __m512 z[4];  // tokens j + 4 q .. j + 4 q + 3; past c, zeros
    for (int q = 0; q < 4; ++q) {
      const int64_t t0 = j + 4 * q;
      const auto token = [&](int64_t t) {
        return _mm_loadu_ps(t < c ? reinterpret_cast<const float*>(meta0 + t * rb) : kNone);
      };
      __m512 v = _mm512_castps128_ps512(token(t0));
      v = _mm512_insertf32x4(v, token(t0 + 1), 1);
      v = _mm512_insertf32x4(v, token(t0 + 2), 2);
      z[q] = _mm512_insertf32x4(v, token(t0 + 3), 3);
    }
    const __m512 a01 = _mm512_permutex2var_ps(z[0], first, z[1]);   // s0 | m0, tokens 0-7
    const __m512 b01 = _mm512_permutex2var_ps(z[0], second, z[1]);  // s1 | m1
    const __m512 a23 = _mm512_permutex2var_ps(z[2], first, z[3]);
    const __m512 b23 = _mm512_permutex2var_ps(z[2], second, z[3]);
    const __m512 s0 = _mm512_shuffle_f32x4(a01, a23, 0x44),
                 m0 = _mm512_shuffle_f32x4(a01, a23, 0xEE);
    const __m512 s1 = _mm512_shuffle_f32x4(b01, b23, 0x44),
                 m1 = _mm512_shuffle_f32x4(b01, b23, 0xEE);
    const __mmask16 k = Lanes16(c - j);
    _mm512_mask_storeu_ps(f0 + j, k, s0);
    _mm512_mask_storeu_ps(f1 + j, k, s1);
    _mm512_mask_storeu_ps(mg0 + j, k, _mm512_fmadd_ps(s0, eight, m0));
    _mm512_mask_storeu_ps(mg1 + j, k, _mm512_fmadd_ps(s1, eight, m1));
    sm0 = _mm512_max_ps(sm0, s0);
    sm1 = _mm512_max_ps(sm1, s1);
  }
  smax[0] = _mm512_reduce_max_ps(sm0);
  smax[1] = _mm512_reduce_max_ps(sm1);
}

}  // namespace

uint8_t Int4Code(double x, float lo, float scale) { return Code(x, lo, scale); }
uint8_t Int4KeyNibble(const uint8_t* block, int64_t g, int64_t dim, int64_t j, int64_t x) {
  return GetKey(block, g, dim, j, x);
}

void Int4ValueMeta(const uint8_t* meta0, int64_t rb, int64_t c, int64_t groups, int64_t ld,
                   float* f, float* mg, float* smax) {
  if (groups == 2) return TwoGroupsMeta(meta0, rb, c, ld, f, mg, smax);
  GatheredMeta(meta0, rb, c, groups, ld, f, mg, smax);
}

const PageCodec& Int4ValuesCodec() {
  static const PageCodec c{"int4",      ValueRowBytes, false,       EncodeValues,
                           WidenValues, nullptr,       PvInt4Values};
  return c;
}

const PageCodec& Int4KeysCodec() {
  static const PageCodec c{"int4",  KeyRowBytes, false,         nullptr,    nullptr,   nullptr,
                           nullptr, true,        QuantizeBlock, WidenBlock, Int4Loops, QkInt4Block};
  return c;
}

}  // namespace attn::internal
