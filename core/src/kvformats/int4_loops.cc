// The decode kernel's loops over int4 codes in integer units, on the
// AVX-512 tier for widths that are multiples of 32 (formats.h).
//
// QK: a key block stores channel x as min_x + code * scale_x, so
//   q . k = sum_x (q_x scale_x) code_x + sum_x q_x min_x.
// The first sum takes the query times the block's scales, rounded to int16
// against its largest (at most 2^-16 of it off an element, as the int8
// loops' query), a channel pair broadcast against a 64-byte unit of the
// block's codes (sixteen tokens' pairs of an octet, format_int4.cc):
// VPDPWSSD (AVX512-VNNI; VPMADDWD otherwise) sums sixteen keys' products
// in their own lanes; the second sum is a float per row and block. (An
// int8 query, twice the products an instruction, cost int4 keys most of
// their gain on keys with outlier channels: docs/precision.md.)
// PV: a value row stores channel x of group g as min_g + code * scale_g, so
//   sum_j p_j v_jx = sum_j (p_j scale_jg) (code_jx - 8)
//                  + sum_j p_j (min_jg + 8 scale_jg).
// The first sum takes each row's weights times the tokens' scales as
// unsigned bytes against the row's largest weight times the group's
// largest scale on the page (at most 2^-9 of that off a token), four
// tokens to a 32-bit lane of signed codes less 8, VPDPBUSD (VPMADDUBSW and
// VPMADDWD otherwise); the second is a float per row and group.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kvformats/formats.h"
#include "kvformats/page_loops_avx512.h"
#include "support/isa_cap.h"
#include "support/simd.h"

namespace attn::internal {
namespace {

#define ATTN_I4 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))
#define ATTN_I4_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))

constexpr int64_t kGroup = 64;  // value channels a (scale, min), as format_int4.cc
static_assert(kKeyGroup == 16, "a key group's tokens are a 512-bit vector's 32-bit lanes");

// acc + the sums of four products u8 x s8 a lane.
template <bool kVnni>
ATTN_I4_VNNI inline __m512i Dot(__m512i acc, __m512i u, __m512i s) {
  if constexpr (kVnni) {  // (as DotWords: the instruction itself)
    asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
    return acc;
  }
  return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
}

// The bytes of segment m (64 bytes) of a row of `bytes` codes, and the
// segment with zeros past the row's end: a masked load, not a branch (one
// in the loops made GCC keep their sums in memory).
inline __mmask64 SegmentMask(int64_t m, int64_t bytes) {
  const int64_t left = bytes - 64 * m;
  return left >= 64 ? ~__mmask64{0} : static_cast<__mmask64>((uint64_t{1} << left) - 1);
}
ATTN_I4 inline __m512i Segment(const uint8_t* row, int64_t m, __mmask64 mask) {
  return _mm512_maskz_loadu_epi8(mask, row + 64 * m);
}

// ---- QK -------------------------------------------------------------------

// A block's query rows: [rows][d] int16 in channel order, their scales and
// the rows' sums against the block's minimums.
struct BlockQuery {
  LineVector<int16_t> q;
  std::vector<float> scale, bias, tmp;
};

// Nibble k of each 16-bit word: a unit's sixteen tokens' channel pairs
// (2k, 2k + 1) of its octet (format_int4.cc's layout).
template <int kV>
ATTN_I4 inline __m512i Nibbles16(__m512i v) {
  if constexpr (kV == 3) return _mm512_srli_epi16(v, 12);
  const __m512i m = _mm512_set1_epi16(0x000F);
  if constexpr (kV == 0) return _mm512_and_si512(v, m);
  return _mm512_and_si512(_mm512_srli_epi16(v, 4 * kV), m);
}

// The query times the block's scales rounded to int16 against each row's
// largest; false: a row not finite.
ATTN_I4 bool PrepareQuery(const float* q, int64_t rows, int64_t d, const float* meta,
                          BlockQuery* out) {
  out->q.resize(static_cast<size_t>(rows * d));
  out->scale.resize(static_cast<size_t>(rows));
  out->bias.resize(static_cast<size_t>(rows));
  out->tmp.resize(static_cast<size_t>(d));
  float* t = out->tmp.data();
  for (int64_t r = 0; r < rows; ++r) {
    const float* qr = q + r * d;
    __m512 amax = _mm512_setzero_ps(), bias = amax;
    for (int64_t x = 0; x < d; x += 16) {
      const __m512 qv = _mm512_loadu_ps(qr + x);
      const __m512 v = _mm512_mul_ps(qv, _mm512_loadu_ps(meta + x));
      _mm512_storeu_ps(t + x, v);
      amax = _mm512_max_ps(amax, _mm512_abs_ps(v));
      bias = _mm512_fmadd_ps(qv, _mm512_loadu_ps(meta + d + x), bias);
    }
    const float m = _mm512_reduce_max_ps(amax), b = _mm512_reduce_add_ps(bias);
    if (!std::isfinite(m) || !std::isfinite(b)) return false;
    out->scale[static_cast<size_t>(r)] = m / 32767.0f;
    out->bias[static_cast<size_t>(r)] = b;
    const __m512 inv = _mm512_set1_ps(m > 0.0f ? 32767.0f / m : 0.0f);
    int16_t* dst = out->q.data() + r * d;
    for (int64_t x = 0; x < d; x += 16) {
      const __m512i c = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(t + x), inv));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + x), _mm512_cvtsepi32_epi16(c));
    }
  }
  return true;
}

// Where a tile's groups are: the first's codes, the bytes from a group to
// the next (whole groups), a unit's stride in them (64, or 4 m for a group
// of m < 16 tokens) and the bytes a unit loads; their first token's score
// column (from the run's, may be before it) and the lanes each stores.
struct TileGroups {
  const uint8_t* codes;
  int64_t group_bytes, unit_stride;
  __mmask64 load;
  int64_t column;
  __mmask16 store[4];
  const uint8_t* next;  // the same bytes of the page read next, or null
};

// acc[rr][kB + b] += row rr's query pair (2k, 2k + 1) of octet o times
// unit b's nibbles k.
template <bool kVnni, int R, int U, int kV, int kB>
ATTN_I4_VNNI inline void OctetDots(const __m512i* u, const int16_t* q0, int64_t d, int64_t o,
                                   __m512i (*acc)[4]) {
  __m512i n[U];
#pragma GCC unroll 4
  for (int b = 0; b < U; ++b) n[b] = Nibbles16<kV>(u[b]);
#pragma GCC unroll 4
  for (int rr = 0; rr < R; ++rr) {
    int32_t pair;
    std::memcpy(&pair, q0 + rr * d + 8 * o + 2 * kV, 4);
    const __m512i qv = _mm512_set1_epi32(pair);
#pragma GCC unroll 4
    for (int b = 0; b < U; ++b) {
      acc[rr][kB + b] = DotWords<kVnni>(acc[rr][kB + b], n[b], qv);
      // Without VNNI, each sum a chain in a register: GCC reassociated the
      // VPMADDWD adds into trees of products (a block's QK 665 -> 470 ns on
      // the Zen 5 under ATTN_MAX_ISA=avx512; the int8 tiles lost 6% so and
      // keep theirs).
      if constexpr (!kVnni) asm("" : "+v"(acc[rr][kB + b]));
    }
  }
}

template <bool kVnni, int R, int U, int kB>
ATTN_I4_VNNI inline void UnitDots(const __m512i* u, const int16_t* q0, int64_t d, int64_t o,
                                  __m512i (*acc)[4]) {
  OctetDots<kVnni, R, U, 0, kB>(u, q0, d, o, acc);
  OctetDots<kVnni, R, U, 1, kB>(u, q0, d, o, acc);
  OctetDots<kVnni, R, U, 2, kB>(u, q0, d, o, acc);
  OctetDots<kVnni, R, U, 3, kB>(u, q0, d, o, acc);
}

// Rows [r0, r0 + R) against NG groups of a block (NG <= 4): sixteen keys a
// vector, R * NG sums. One group alone takes its octets two at a time into
// two sets of sums (one chain of d / 2 VPDPWSSD a row would wait on their
// latency).
template <bool kVnni, int R, int NG>
ATTN_I4_VNNI void Tile(const BlockQuery& bq, int64_t r0, int64_t d, const TileGroups& tg,
                       float* s, int64_t lds) {
  constexpr int U = NG == 1 ? 2 : NG;  // units a step
  __m512i acc[R][4];
#pragma GCC unroll 4
  for (int rr = 0; rr < R; ++rr) {
#pragma GCC unroll 4
    for (int b = 0; b < 4; ++b) acc[rr][b] = _mm512_setzero_si512();
  }
  const int16_t* q0 = bq.q.data() + r0 * d;
  for (int64_t o = 0; o < d / 8; o += (NG == 1 ? 2 : 1)) {
    __m512i u[U];
#pragma GCC unroll 4
    for (int b = 0; b < U; ++b) {  // group b's unit o; one group: its units o and o + 1
      const int64_t at = NG == 1 ? (o + b) * tg.unit_stride : b * tg.group_bytes + o * tg.unit_stride;
      u[b] = _mm512_maskz_loadu_epi8(tg.load, tg.codes + at);
      if (tg.next != nullptr) PrefetchLine(tg.next + at);
    }
    if constexpr (NG == 1) {
      UnitDots<kVnni, R, 1, 0>(u, q0, d, o, acc);
      UnitDots<kVnni, R, 1, 1>(u + 1, q0, d, o + 1, acc);
    } else {
      UnitDots<kVnni, R, NG, 0>(u, q0, d, o, acc);
    }
  }
#pragma GCC unroll 4
  for (int rr = 0; rr < R; ++rr) {
    const __m512 sc = _mm512_set1_ps(bq.scale[static_cast<size_t>(r0 + rr)]);
    const __m512 bias = _mm512_set1_ps(bq.bias[static_cast<size_t>(r0 + rr)]);
    float* row = s + (r0 + rr) * lds + tg.column;
#pragma GCC unroll 4
    for (int g = 0; g < NG; ++g) {
      const __m512i sum = NG == 1 ? _mm512_add_epi32(acc[rr][0], acc[rr][1]) : acc[rr][g];
      _mm512_mask_storeu_ps(row + 16 * g, tg.store[g],
                            _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), sc, bias));
    }
  }
}

template <bool kVnni, int NG>
void TileRows(const BlockQuery& bq, int64_t rows, int64_t d, const TileGroups& tg, float* s,
              int64_t lds) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) Tile<kVnni, 4, NG>(bq, r, d, tg, s, lds);
  switch (rows - r) {
    case 3: return Tile<kVnni, 3, NG>(bq, r, d, tg, s, lds);
    case 2: return Tile<kVnni, 2, NG>(bq, r, d, tg, s, lds);
    case 1: return Tile<kVnni, 1, NG>(bq, r, d, tg, s, lds);
    default: return;
  }
}

// Tokens [j, j + c) of a block of g: whole groups four at a time (fewer
// at the run's end), a group of fewer than 16 tokens alone; each group's
// lanes outside the run left unwritten.
template <bool kVnni>
void QkBlock(const BlockQuery& bq, int64_t rows, const uint8_t* block, int64_t g, int64_t j,
             int64_t c, int64_t d, float* s, int64_t lds, const uint8_t* next) {
  const int64_t rb = d / 2, gb = kKeyGroup * rb;
  const auto lanes = [&](int64_t g0, int64_t m) {  // run tokens among g0's m
    const int64_t lo = std::max<int64_t>(0, j - g0), hi = std::min(m, j + c - g0);
    return static_cast<__mmask16>(((1u << hi) - 1) & ~((1u << lo) - 1));
  };
  for (int64_t g0 = KeyGroupStart(j); g0 < j + c;) {
    TileGroups tg{block + g0 * rb, gb, 64, ~__mmask64{0}, g0 - j, {0, 0, 0, 0},
                  next != nullptr ? next + g0 * rb : nullptr};
    const int64_t m = KeyGroupTokens(g, g0);
    if (m < kKeyGroup) {  // the block's last group, units 4 m apart
      tg.unit_stride = 4 * m;
      tg.load = (uint64_t{1} << (4 * m)) - 1;
      tg.store[0] = lanes(g0, m);
      TileRows<kVnni, 1>(bq, rows, d, tg, s, lds);
      return;
    }
    int ng = 0;
    while (ng < 4 && g0 + kKeyGroup * ng < j + c && g0 + kKeyGroup * (ng + 1) <= g) {
      tg.store[ng] = lanes(g0 + kKeyGroup * ng, kKeyGroup);
      ++ng;
    }
    switch (ng) {
      case 4: TileRows<kVnni, 4>(bq, rows, d, tg, s, lds); break;
      case 3: TileRows<kVnni, 3>(bq, rows, d, tg, s, lds); break;
      case 2: TileRows<kVnni, 2>(bq, rows, d, tg, s, lds); break;
      default: TileRows<kVnni, 1>(bq, rows, d, tg, s, lds); break;
    }
    g0 += kKeyGroup * ng;
  }
}

// ---- PV -------------------------------------------------------------------

// Each row's weights times the tokens' scales per group, as unsigned bytes
// over the tokens padded to a multiple of 16: w [rows][groups][cp]; and
// each (row, group)'s scale and its sum of weights times minimums. A byte
// is p_j scale_jg against the row's largest weight times the group's
// largest scale on the page (f_jg = scale_jg / that, once a page), so
// that a row takes one pass a group. The pad (weights 0) lets every loop
// but the first over a row's weights run unmasked (their masks and tail
// tests took half of this preparation's instructions).
struct RowWeights {
  LineVector<uint8_t> w;
  LineVector<float> f, mg, row;  // f, mg: [group][cp], 0 past c; row: a row's weights, padded
  std::vector<float> scale, bias, smax;
  int64_t cp = 0;
};

ATTN_I4 void PrepareWeights(const float* p, int64_t rows, int64_t ldp, const uint8_t* v, int64_t c,
                            int64_t dv, RowWeights* out) {
  const int64_t groups = (dv + kGroup - 1) / kGroup, codes = dv / 2;
  const int64_t rb = codes + groups * 8, cp = (c + 15) / 16 * 16;
  out->cp = cp;
  out->w.resize(static_cast<size_t>(rows * groups * cp));
  out->scale.resize(static_cast<size_t>(rows * groups));
  out->bias.resize(static_cast<size_t>(rows * groups));
  out->f.resize(static_cast<size_t>(groups * cp));
  out->mg.resize(static_cast<size_t>(groups * cp));
  out->row.resize(static_cast<size_t>(cp));
  out->smax.resize(static_cast<size_t>(groups));
  float *smax = out->smax.data(), *row = out->row.data();
  Int4ValueMeta(v + codes, rb, c, groups, cp, out->f.data(), out->mg.data(), smax);
  for (int64_t g = 0; g < groups; ++g) {
    float* f = out->f.data() + g * cp;
    const __mmask16 pad = static_cast<__mmask16>(~Lanes16(c - (cp - 16)));  // past c: 0
    _mm512_mask_storeu_ps(f + cp - 16, pad, _mm512_setzero_ps());
    _mm512_mask_storeu_ps(out->mg.data() + g * cp + cp - 16, pad, _mm512_setzero_ps());
    const __m512 inv = _mm512_set1_ps(smax[g] > 0.0f ? 1.0f / smax[g] : 0.0f);
    for (int64_t j = 0; j < cp; j += 16) {
      _mm512_store_ps(f + j, _mm512_mul_ps(_mm512_load_ps(f + j), inv));
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* pr = p + r * ldp;
    __m512 pm = _mm512_setzero_ps();
    for (int64_t j = 0; j < cp; j += 16) {  // the row padded with zeros, and its largest
      const __m512 x = _mm512_maskz_loadu_ps(Lanes16(c - j), pr + j);
      _mm512_store_ps(row + j, x);
      pm = _mm512_max_ps(pm, x);
    }
    const float pmax = _mm512_reduce_max_ps(pm);
    const __m512 inv = _mm512_set1_ps(pmax > 0.0f ? 255.0f / pmax : 0.0f);
    for (int64_t g = 0; g < groups; ++g) {
      const float *f = out->f.data() + g * cp, *mg = out->mg.data() + g * cp;
      uint8_t* dst = out->w.data() + (r * groups + g) * cp;
      __m512 bias = _mm512_setzero_ps();
      for (int64_t j = 0; j < cp; j += 16) {
        const __m512 pv = _mm512_load_ps(row + j);
        const __m512 w = _mm512_mul_ps(_mm512_mul_ps(pv, inv), _mm512_load_ps(f + j));
        const __m512i q = _mm512_max_epi32(_mm512_cvtps_epi32(w), _mm512_setzero_si512());
        _mm_store_si128(reinterpret_cast<__m128i*>(dst + j), _mm512_cvtusepi32_epi8(q));
        bias = _mm512_fmadd_ps(pv, _mm512_load_ps(mg + j), bias);
      }
      out->scale[static_cast<size_t>(r * groups + g)] = pmax / 255.0f * smax[g];
      out->bias[static_cast<size_t>(r * groups + g)] = _mm512_reduce_add_ps(bias);
    }
  }
}

// Rows [r0, r0 + R) of o += their weights times the low (or high) nibbles
// of segment m of c value rows, four tokens a 32-bit lane: unpacking the
// four rows' bytes gives, in 128-bit lane L (the segment's chunk of 32
// channels), vector k's lane i = byte 4 k + i of the chunk. Lanes 0-7 are
// the segment's first group, 8-15 its second.
template <bool kVnni, int R>
ATTN_I4_VNNI void PvPass(const RowWeights& rw, int64_t r0, const uint8_t* v, int64_t rb, int64_t c,
                         int64_t dv, int64_t m, bool high, float* o, const SpreadPrefetch* ahead,
                         int64_t chunk) {
  const int64_t groups = (dv + kGroup - 1) / kGroup, bytes = dv / 2, cp = rw.cp;
  const int64_t g0 = 2 * m, g1 = std::min(groups - 1, 2 * m + 1);
  __m512i acc[R][4];
  for (int rr = 0; rr < R; ++rr) {
    for (auto& a : acc[rr]) a = _mm512_setzero_si512();
  }
  // The next page's lines of this pass, two a step; no `ahead`: a line of
  // this page again. (At dv 128 a step's share is 3 lines, the rows being
  // 80 bytes: the third is left to the hardware's prefetcher; all three
  // measured the same, 2.37 against 2.40 ms at 1 x 32k.)
  const SpreadPrefetch pf = ahead != nullptr ? *ahead : SpreadPrefetch(nullptr, 0, 0, 1);
  const __mmask64 mask = SegmentMask(m, bytes);
  const __m128i shift = _mm_cvtsi32_si128(high ? 4 : 0);
  const uint8_t *w0p[R], *w1p[R];  // rows' weights of the segment's two groups
  for (int rr = 0; rr < R; ++rr) {
    const uint8_t* wr = rw.w.data() + (r0 + rr) * groups * cp;
    w0p[rr] = wr + g0 * cp;
    w1p[rr] = wr + g1 * cp;
  }
  for (int64_t j = 0; j < c; j += 4) {
    pf.Two(chunk, j / 4, v);
    __m512i n[4];
    for (int t = 0; t < 4; ++t) {  // past c: any row (its weights are 0)
      const __m512i x = Segment(v + std::min(j + t, c - 1) * rb, m, mask);
      n[t] = _mm512_sub_epi8(_mm512_and_si512(_mm512_srl_epi16(x, shift), _mm512_set1_epi8(0x0F)),
                             _mm512_set1_epi8(8));
    }
    const __m512i ab0 = _mm512_unpacklo_epi8(n[0], n[1]), ab1 = _mm512_unpackhi_epi8(n[0], n[1]);
    const __m512i cd0 = _mm512_unpacklo_epi8(n[2], n[3]), cd1 = _mm512_unpackhi_epi8(n[2], n[3]);
    const __m512i u[4] = {_mm512_unpacklo_epi16(ab0, cd0), _mm512_unpackhi_epi16(ab0, cd0),
                          _mm512_unpacklo_epi16(ab1, cd1), _mm512_unpackhi_epi16(ab1, cd1)};
    for (int rr = 0; rr < R; ++rr) {
      int32_t w0, w1;
      std::memcpy(&w0, w0p[rr] + j, 4);
      std::memcpy(&w1, w1p[rr] + j, 4);
      const __m512i w = _mm512_mask_set1_epi32(_mm512_set1_epi32(w0), 0xFF00, w1);
      for (int k = 0; k < 4; ++k) acc[rr][k] = Dot<kVnni>(acc[rr][k], w, u[k]);
    }
  }
  // Lane L of the four vectors: channels 32 L + (16 if high) + [0, 16).
  const int64_t chunks = std::min<int64_t>(4, (bytes - 64 * m) / 16);
#pragma GCC unroll 4
  for (int rr = 0; rr < R; ++rr) {
    const __m512i t0 = _mm512_shuffle_i32x4(acc[rr][0], acc[rr][1], 0x44);
    const __m512i t1 = _mm512_shuffle_i32x4(acc[rr][2], acc[rr][3], 0x44);
    const __m512i t2 = _mm512_shuffle_i32x4(acc[rr][0], acc[rr][1], 0xEE);
    const __m512i t3 = _mm512_shuffle_i32x4(acc[rr][2], acc[rr][3], 0xEE);
    const __m512i lane[4] = {_mm512_shuffle_i32x4(t0, t1, 0x88), _mm512_shuffle_i32x4(t0, t1, 0xDD),
                             _mm512_shuffle_i32x4(t2, t3, 0x88),
                             _mm512_shuffle_i32x4(t2, t3, 0xDD)};
    const float* sc = rw.scale.data() + (r0 + rr) * groups;
    for (int64_t L = 0; L < chunks; ++L) {
      float* dst = o + (r0 + rr) * dv + 128 * m + 32 * L + (high ? 16 : 0);
      const __m512 f = _mm512_set1_ps(sc[L < 2 ? g0 : g1]);
      _mm512_storeu_ps(dst, _mm512_fmadd_ps(_mm512_cvtepi32_ps(lane[L]), f, _mm512_loadu_ps(dst)));
    }
  }
}

// o[r][x] += the bias of x's group, sixteen channels at a time (a group
// is a multiple of 16 channels: dv is a multiple of 32).
ATTN_I4 void AddBias(const RowWeights& rw, int64_t rows, int64_t dv, int64_t groups, float* o) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t x = 0; x < dv; x += 16) {
      const __m512 b = _mm512_set1_ps(rw.bias[static_cast<size_t>(r * groups + x / kGroup)]);
      _mm512_storeu_ps(o + r * dv + x, _mm512_add_ps(_mm512_loadu_ps(o + r * dv + x), b));
    }
  }
}

template <bool kVnni>
void PvValues(const RowWeights& rw, int64_t rows, const uint8_t* v, int64_t c, int64_t dv, float* o,
              const uint8_t* next) {
  const int64_t groups = (dv + kGroup - 1) / kGroup, rb = dv / 2 + groups * 8;
  const int64_t segs = (dv + 127) / 128;
  // The next page's rows, a line or more every four tokens of a pass.
  const SpreadPrefetch ahead(next, 4 * rb, (c + 3) / 4, 2 * segs);
  for (int64_t m = 0; m < segs; ++m) {
    for (int half = 0; half < 2; ++half) {
      const int64_t chunk = 2 * m + half;
      int64_t r = 0;
      for (; r + 4 <= rows; r += 4) {
        PvPass<kVnni, 4>(rw, r, v, rb, c, dv, m, half == 1, o, r == 0 ? &ahead : nullptr, chunk);
      }
      for (; r < rows; ++r) {
        PvPass<kVnni, 1>(rw, r, v, rb, c, dv, m, half == 1, o, r == 0 ? &ahead : nullptr, chunk);
      }
    }
  }
  AddBias(rw, rows, dv, groups, o);
}

}  // namespace

bool Int4Loops(int64_t width) { return InRegisterTier() && width % 32 == 0; }

void QkInt4Block(const float* q, int64_t rows, const uint8_t* block, int64_t g, const float* meta,
                 int64_t j, int64_t c, int64_t d, float* s, int64_t lds, const uint8_t* next) {
  thread_local BlockQuery bq;
  const bool done =
      UseAvx512(d) ? PrepareQuery(q, rows, d, meta, &bq)
                   : QkInt4Block256(q, rows, block, g, meta, j, c, d, s, lds, next);
  if (!done) {  // a NaN or inf query: widened, in float32
    thread_local std::vector<float> keys;
    keys.resize(static_cast<size_t>(c * d));
    Int4KeysCodec().widen_block(block, g, meta, j, c, d, keys.data());
    Float32Codec().qk(q, rows, reinterpret_cast<const uint8_t*>(keys.data()), c, d, s, lds,
                      nullptr);
    return;
  }
  if (!UseAvx512(d)) return;
  if (UseAvx512Vnni()) return QkBlock<true>(bq, rows, block, g, j, c, d, s, lds, next);
  QkBlock<false>(bq, rows, block, g, j, c, d, s, lds, next);
}

void PvInt4Values(const float* p, int64_t rows, int64_t ldp, const uint8_t* v, int64_t c,
                  int64_t dv, float* o, const uint8_t* next) {
  if (!Int4Loops(dv)) {
    thread_local std::vector<float> values;
    values.resize(static_cast<size_t>(c * dv));
    Int4ValuesCodec().widen(v, c, dv, values.data());
    Float32Codec().pv(p, rows, ldp, reinterpret_cast<const uint8_t*>(values.data()), c, dv, o,
                      nullptr);
    return;
  }
  if (!UseAvx512(dv)) return PvInt4Values256(p, rows, ldp, v, c, dv, o, next);
  thread_local RowWeights rw;
  PrepareWeights(p, rows, ldp, v, c, dv, &rw);
  if (UseAvx512Vnni()) return PvValues<true>(rw, rows, v, c, dv, o, next);
  PvValues<false>(rw, rows, v, c, dv, o, next);
}

}  // namespace attn::internal
