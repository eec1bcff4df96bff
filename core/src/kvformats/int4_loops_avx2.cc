// The decode kernel's loops over int4 codes in integer units on the AVX2
// tier (AVX2 + FMA, no AVX-512, no VNNI: a Zen 3), for widths that are
// multiples of 32. The same arithmetic as int4_loops.cc's AVX-512 loops,
// so the same bounds hold (docs/precision.md); before these, the AVX2
// tier widened each page to float32 in memory and read it back, and an
// int4 step cost 1.8 times a bf16 one.
//
// QK: q . k = sum_x (q_x scale_x) code_x + sum_x q_x min_x, the first sum
// with the query times the block's scales rounded to int16 against the
// row's largest, a channel pair broadcast against half a unit of the
// block's codes (eight tokens' pairs of an octet, format_int4.cc's
// layout): VPMADDWD sums eight keys' products in their own lanes, added
// into int32; the second sum is a float per row and block.
// Value rows are read 16 bytes (32 channels) at a time: VPMOVZXBW puts
// byte b in word b, whose low nibble is channel b and whose top bits are
// channel b + 16 (byte b of a 16-byte chunk holds channels b and b + 16 of
// the chunk's 32), so one AND and one shift give two vectors of sixteen
// codes in channel order.
// PV: sum_j p_j v_jx = sum_j (p_j scale_jg) (code_jx - 8)
//                    + sum_j p_j (min_jg + 8 scale_jg),
// the first sum with each row's weights times the tokens' scales as
// unsigned bytes against the row's largest weight times the group's
// largest scale on the page (at most 2^-9 of that off a token), two
// tokens' codes less 8 interleaved a word: VPMADDUBSW gives a channel's
// two products summed in int16 (|sum| <= 2 * 255 * 8), eight such pairs
// are added in int16 (<= 32640) before they are widened into the int32
// sums; the second sum is a float per row and group.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/simd/vec_math.h"
#include "kvformats/formats.h"
#include "kvformats/page_loops.h"

namespace attn::internal {
namespace {

static_assert(kKeyGroup == 16, "a key group's tokens are two 256-bit vectors' 32-bit lanes");

constexpr int64_t kGroup = 64;  // value channels a (scale, min), as format_int4.cc
constexpr int64_t kPairsInInt16 = 8;

// ---- QK -------------------------------------------------------------------

struct BlockQuery256 {
  LineVector<int16_t> q;  // [rows][d] in channel order
  std::vector<float> scale, bias, tmp;
};

// The query times the block's scales as int16 against each row's largest,
// and each row's sum against the block's minimums; false: a row not
// finite.
ATTN_DECODE bool PrepareQuery(const float* q, int64_t rows, int64_t d, const float* meta,
                              BlockQuery256* out) {
  out->q.resize(static_cast<size_t>(rows * d));
  out->scale.resize(static_cast<size_t>(rows));
  out->bias.resize(static_cast<size_t>(rows));
  out->tmp.resize(static_cast<size_t>(d));
  float* t = out->tmp.data();
  const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  for (int64_t r = 0; r < rows; ++r) {
    const float* qr = q + r * d;
    __m256 amax = _mm256_setzero_ps(), bias = amax;
    for (int64_t x = 0; x < d; x += 8) {
      const __m256 qv = _mm256_loadu_ps(qr + x);
      const __m256 v = _mm256_mul_ps(qv, _mm256_loadu_ps(meta + x));
      _mm256_storeu_ps(t + x, v);
      amax = _mm256_max_ps(amax, _mm256_and_ps(v, abs));
      bias = _mm256_fmadd_ps(qv, _mm256_loadu_ps(meta + d + x), bias);
    }
    const float m = ReduceMax256(amax), b = ReduceAdd256(bias);
    if (!std::isfinite(m) || !std::isfinite(b)) return false;
    out->scale[static_cast<size_t>(r)] = m / 32767.0f;
    out->bias[static_cast<size_t>(r)] = b;
    const __m256 inv = _mm256_set1_ps(m > 0.0f ? 32767.0f / m : 0.0f);
    int16_t* dst = out->q.data() + r * d;
    for (int64_t x = 0; x < d; x += 16) {
      const __m256i c0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(t + x), inv));
      const __m256i c1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(t + x + 8), inv));
      // packs works within 128-bit lanes: 64-bit blocks 0, 2, 1, 3 in order.
      const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(c0, c1), 0xD8);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + x), w);
    }
  }
  return true;
}

// Nibble k of each 16-bit word: eight tokens' channel pairs (2k, 2k + 1).
template <int kV>
ATTN_DECODE inline __m256i Nibbles(__m256i v) {
  if constexpr (kV == 3) return _mm256_srli_epi16(v, 12);
  const __m256i m = _mm256_set1_epi16(0x000F);
  if constexpr (kV == 0) return _mm256_and_si256(v, m);
  return _mm256_and_si256(_mm256_srli_epi16(v, 4 * kV), m);
}

// acc[rr][h] += row rr's pair (2k, 2k + 1) of octet o times half h's
// nibbles k.
template <int R, int kV>
ATTN_DECODE inline void PairDots(const __m256i* u, const int16_t* q0, int64_t d, int64_t o,
                                 __m256i (*acc)[2]) {
  const __m256i n0 = Nibbles<kV>(u[0]), n1 = Nibbles<kV>(u[1]);
#pragma GCC unroll 4
  for (int rr = 0; rr < R; ++rr) {
    int32_t pair;
    std::memcpy(&pair, q0 + rr * d + 8 * o + 2 * kV, 4);
    const __m256i qv = _mm256_set1_epi32(pair);
    acc[rr][0] = _mm256_add_epi32(acc[rr][0], _mm256_madd_epi16(n0, qv));
    acc[rr][1] = _mm256_add_epi32(acc[rr][1], _mm256_madd_epi16(n1, qv));
    // Each sum a chain in a register: GCC otherwise reassociated the
    // integer adds into trees of products kept on the stack.
    asm("" : "+x"(acc[rr][0]), "+x"(acc[rr][1]));
  }
}

// Rows [r0, r0 + R) (R <= 4) against a group of m <= 16 tokens at `codes`
// (units 4 m apart); lanes [lo, hi) of the group stored, at column `col`.
template <int R>
ATTN_DECODE void GroupRows(const BlockQuery256& bq, int64_t r0, const uint8_t* codes, int64_t m,
                           int64_t lo, int64_t hi, int64_t d, float* s, int64_t col, int64_t lds,
                           const uint8_t* next) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i load0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(m)), lane);
  const __m256i load1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(m) - 8), lane);
  __m256i acc[R][2];
#pragma GCC unroll 4
  for (int rr = 0; rr < R; ++rr) acc[rr][0] = acc[rr][1] = _mm256_setzero_si256();
  const int16_t* q0 = bq.q.data() + r0 * d;
  for (int64_t o = 0; o < d / 8; ++o) {
    const uint8_t* unit = codes + o * 4 * m;
    if (next != nullptr) PrefetchLine(next + o * 4 * m);
    const __m256i u[2] = {
        _mm256_maskload_epi32(reinterpret_cast<const int*>(unit), load0),
        _mm256_maskload_epi32(reinterpret_cast<const int*>(unit + 32), load1)};
    PairDots<R, 0>(u, q0, d, o, acc);
    PairDots<R, 1>(u, q0, d, o, acc);
    PairDots<R, 2>(u, q0, d, o, acc);
    PairDots<R, 3>(u, q0, d, o, acc);
  }
  const __m256i from = _mm256_set1_epi32(static_cast<int>(lo) - 1);
  const __m256i to = _mm256_set1_epi32(static_cast<int>(hi));
  const __m256i lane8 = _mm256_add_epi32(lane, _mm256_set1_epi32(8));
  const __m256i store0 = _mm256_and_si256(_mm256_cmpgt_epi32(lane, from), _mm256_cmpgt_epi32(to, lane));
  const __m256i store1 =
      _mm256_and_si256(_mm256_cmpgt_epi32(lane8, from), _mm256_cmpgt_epi32(to, lane8));
#pragma GCC unroll 4
  for (int rr = 0; rr < R; ++rr) {
    const __m256 sc = _mm256_set1_ps(bq.scale[static_cast<size_t>(r0 + rr)]);
    const __m256 bias = _mm256_set1_ps(bq.bias[static_cast<size_t>(r0 + rr)]);
    float* row = s + (r0 + rr) * lds + col;
    _mm256_maskstore_ps(row, store0, _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[rr][0]), sc, bias));
    _mm256_maskstore_ps(row + 8, store1, _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[rr][1]), sc, bias));
  }
}

// Tokens [j, j + c) of a block of g, group by group (16 tokens, the last
// m < 16), each group's lanes outside the run left unwritten.
void QkBlock(const BlockQuery256& bq, int64_t rows, const uint8_t* block, int64_t g, int64_t j,
             int64_t c, int64_t d, float* s, int64_t lds, const uint8_t* next) {
  const int64_t rb = d / 2;
  for (int64_t g0 = KeyGroupStart(j); g0 < j + c; g0 += kKeyGroup) {
    const int64_t m = KeyGroupTokens(g, g0);
    const int64_t lo = std::max<int64_t>(0, j - g0), hi = std::min(m, j + c - g0);
    const uint8_t* codes = block + g0 * rb;
    const uint8_t* nx = next != nullptr ? next + g0 * rb : nullptr;
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) {
      GroupRows<4>(bq, r, codes, m, lo, hi, d, s, g0 - j, lds, r == 0 ? nx : nullptr);
    }
    const uint8_t* rest = r == 0 ? nx : nullptr;
    switch (rows - r) {
      case 3: GroupRows<3>(bq, r, codes, m, lo, hi, d, s, g0 - j, lds, rest); break;
      case 2: GroupRows<2>(bq, r, codes, m, lo, hi, d, s, g0 - j, lds, rest); break;
      case 1: GroupRows<1>(bq, r, codes, m, lo, hi, d, s, g0 - j, lds, rest); break;
      default: break;
    }
  }
}

// ---- PV -------------------------------------------------------------------

// Each row's weights times the tokens' scales per group as unsigned bytes,
// w [rows][groups][cp] (cp: c rounded up to 8, the pad 0), read two at a
// time; each (row, group)'s scale and its sum of weights times the
// minimums plus 8 scales; and int32 sums [rows][dv].
struct RowWeights256 {
  LineVector<uint8_t> w;
  LineVector<int32_t> sums;
  std::vector<float> scale, bias, f, mg, smax;
  int64_t cp = 0;
};

// f [groups][c8] the tokens' scales, mg [groups][c8] each minimum plus 8
// scales (c8: c rounded up to 8, zeros past c), and each group's largest
// scale. Two groups (Dv 128): a token's (scale, min) pairs are one 16-byte
// load, and eight tokens' are put in order by a 4 x 4 transpose in each
// 128-bit lane (the scalar loop took half of the weights' preparation).
ATTN_DECODE void GroupMeta(const uint8_t* meta0, int64_t rb, int64_t c, int64_t c8, int64_t groups,
                           RowWeights256* out) {
  out->f.resize(static_cast<size_t>(groups * c8));
  out->mg.resize(static_cast<size_t>(groups * c8));
  out->smax.assign(static_cast<size_t>(groups), 0.0f);
  float *f = out->f.data(), *mg = out->mg.data(), *smax = out->smax.data();
  int64_t j = 0;
  if (groups == 2) {
    const auto at = [&](int64_t t) { return reinterpret_cast<const float*>(meta0 + t * rb); };
    const __m256 eight = _mm256_set1_ps(8.0f);
    __m256 sm0 = _mm256_setzero_ps(), sm1 = sm0;
    for (; j + 8 <= c; j += 8) {
      const __m256 a = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(at(j))),
                                            _mm_loadu_ps(at(j + 4)), 1);
      const __m256 b = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(at(j + 1))),
                                            _mm_loadu_ps(at(j + 5)), 1);
      const __m256 cc = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(at(j + 2))),
                                             _mm_loadu_ps(at(j + 6)), 1);
      const __m256 d = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(at(j + 3))),
                                            _mm_loadu_ps(at(j + 7)), 1);
      // ab_lo: s0 and m0 of tokens 0, 1 (and 4, 5); ab_hi: s1 and m1.
      const __m256 ab_lo = _mm256_unpacklo_ps(a, b), ab_hi = _mm256_unpackhi_ps(a, b);
      const __m256 cd_lo = _mm256_unpacklo_ps(cc, d), cd_hi = _mm256_unpackhi_ps(cc, d);
      const __m256 s0 = _mm256_shuffle_ps(ab_lo, cd_lo, 0x44), m0 = _mm256_shuffle_ps(ab_lo, cd_lo, 0xEE);
      const __m256 s1 = _mm256_shuffle_ps(ab_hi, cd_hi, 0x44), m1 = _mm256_shuffle_ps(ab_hi, cd_hi, 0xEE);
      _mm256_storeu_ps(f + j, s0);
      _mm256_storeu_ps(f + c8 + j, s1);
      _mm256_storeu_ps(mg + j, _mm256_fmadd_ps(s0, eight, m0));
      _mm256_storeu_ps(mg + c8 + j, _mm256_fmadd_ps(s1, eight, m1));
      sm0 = _mm256_max_ps(sm0, s0);
      sm1 = _mm256_max_ps(sm1, s1);
    }
    smax[0] = ReduceMax256(sm0);
    smax[1] = ReduceMax256(sm1);
  }
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t t = j; t < c8; ++t) {
      float sm[2] = {0.0f, 0.0f};  // (scale, min); zeros past c
      if (t < c) std::memcpy(sm, meta0 + t * rb + 8 * g, 8);
      f[g * c8 + t] = sm[0];
      mg[g * c8 + t] = std::fmaf(sm[0], 8.0f, sm[1]);
      smax[g] = std::max(smax[g], sm[0]);
    }
  }
}

// Eight weights of a row (lanes past c: 0) times a group's factor and its
// tokens' scales, as bytes at dst; their sum against the minimums into bias.
ATTN_DECODE inline void EightWeights(__m256 pv, __m256 k, const float* f, const float* mg,
                                     uint8_t* dst, __m256* bias) {
  const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_mul_ps(pv, k), _mm256_loadu_ps(f)));
  const __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm_packus_epi16(h, h));
  *bias = _mm256_fmadd_ps(pv, _mm256_loadu_ps(mg), *bias);
}

// The weights are a softmax's (>= 0; a NaN row is answered NaN whatever
// its bytes), so a byte is p_j scale_jg * 255 / (pmax smax_g), at most
// 255 (packus saturates a float's rounding above it).
ATTN_DECODE void PrepareWeights(const float* p, int64_t rows, int64_t ldp, const uint8_t* v,
                                int64_t c, int64_t dv, RowWeights256* out) {
  const int64_t groups = (dv + kGroup - 1) / kGroup, codes = dv / 2;
  const int64_t rb = codes + groups * 8, c8 = (c + 7) / 8 * 8;
  out->cp = c8;
  out->w.resize(static_cast<size_t>(rows * groups * c8));
  out->scale.resize(static_cast<size_t>(rows * groups));
  out->bias.resize(static_cast<size_t>(rows * groups));
  GroupMeta(v + codes, rb, c, c8, groups, out);
  const int64_t full = c / 8 * 8;
  const __m256i tail = LaneMask256(c - full);
  constexpr int kMaxGroups = 8;
  for (int64_t r = 0; r < rows; ++r) {
    const float* pr = p + r * ldp;
    __m256 pm = _mm256_maskload_ps(pr + full, tail);
    for (int64_t j = 0; j < full; j += 8) pm = _mm256_max_ps(pm, _mm256_loadu_ps(pr + j));
    const float pmax = ReduceMax256(pm);
    for (int64_t g0 = 0; g0 < groups; g0 += kMaxGroups) {
      const int64_t ng = std::min<int64_t>(kMaxGroups, groups - g0);
      __m256 k[kMaxGroups], bias[kMaxGroups];
      for (int64_t i = 0; i < ng; ++i) {
        const float sm = out->smax[static_cast<size_t>(g0 + i)];
        k[i] = _mm256_set1_ps(pmax > 0.0f && sm > 0.0f ? 255.0f / (pmax * sm) : 0.0f);
        bias[i] = _mm256_setzero_ps();
      }
      uint8_t* w0 = out->w.data() + (r * groups + g0) * c8;
      const float *f0 = out->f.data() + g0 * c8, *mg0 = out->mg.data() + g0 * c8;
      for (int64_t j = 0; j < c8; j += 8) {
        const __m256 pv = j < full ? _mm256_loadu_ps(pr + j) : _mm256_maskload_ps(pr + j, tail);
        for (int64_t i = 0; i < ng; ++i) {
          EightWeights(pv, k[i], f0 + i * c8 + j, mg0 + i * c8 + j, w0 + i * c8 + j, &bias[i]);
        }
      }
      for (int64_t i = 0; i < ng; ++i) {
        const size_t at = static_cast<size_t>(r * groups + g0 + i);
        out->scale[at] = pmax / 255.0f * out->smax[static_cast<size_t>(g0 + i)];
        out->bias[at] = ReduceAdd256(bias[i]);
      }
    }
  }
}

// The 16 (kN16: a chunk's 16 bytes) or 32 bytes of a value row at p,
// nibbles (kHigh: the high ones) less 8, as signed bytes; past a 16-byte
// chunk, zeros.
template <bool kHigh, bool kN16>
ATTN_DECODE inline __m256i Codes(const uint8_t* p) {
  const __m256i x = kN16 ? _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))
                         : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i n = kHigh ? _mm256_srli_epi16(x, 4) : x;
  return _mm256_sub_epi8(_mm256_and_si256(n, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
}

// Rows [r0, r0 + R) of the int32 sums += their weights times the low (or
// high) nibbles of the value rows' bytes [32 m, 32 m + 32) (group m; the
// last 16 where dv is an odd multiple of 32, kN16), two tokens a step,
// sixteen tokens a run summed in int16 and then widened: acc16 [k]'s
// 128-bit lane L, words 0-7, are channels 32 L + (16 if high) + 8 k +
// [0, 8) of the group.
template <int R, bool kHigh, bool kN16>
ATTN_DECODE void PvPass(const RowWeights256& rw, int64_t r0, const uint8_t* v, int64_t rb,
                        int64_t c, int64_t dv, int64_t m, int32_t* sums, const SpreadPrefetch* ahead,
                        int64_t chunk) {
  const int64_t groups = (dv + kGroup - 1) / kGroup, cp = rw.cp;
  const uint8_t* w0 = rw.w.data() + (r0 * groups + m) * cp;
  const int64_t wstride = groups * cp;
  const uint8_t* vm = v + 32 * m;
  for (int64_t j0 = 0; j0 < c; j0 += 2 * kPairsInInt16) {
    const int64_t j1 = std::min(c, j0 + 2 * kPairsInInt16);
    __m256i acc16[R][2];
#pragma GCC unroll 4
    for (int rr = 0; rr < R; ++rr) acc16[rr][0] = acc16[rr][1] = _mm256_setzero_si256();
    for (int64_t j = j0; j < j1; j += 2) {
      if (ahead != nullptr) (*ahead)(chunk, j / 2);
      const __m256i n0 = Codes<kHigh, kN16>(vm + j * rb);
      const __m256i n1 = Codes<kHigh, kN16>(vm + std::min(j + 1, c - 1) * rb);
      const __m256i u0 = _mm256_unpacklo_epi8(n0, n1), u1 = _mm256_unpackhi_epi8(n0, n1);
#pragma GCC unroll 4
      for (int rr = 0; rr < R; ++rr) {
        int16_t pair;
        std::memcpy(&pair, w0 + rr * wstride + j, 2);
        const __m256i w = _mm256_set1_epi16(pair);
        acc16[rr][0] = _mm256_add_epi16(acc16[rr][0], _mm256_maddubs_epi16(w, u0));
        acc16[rr][1] = _mm256_add_epi16(acc16[rr][1], _mm256_maddubs_epi16(w, u1));
      }
    }
#pragma GCC unroll 4
    for (int rr = 0; rr < R; ++rr) {
#pragma GCC unroll 2
      for (int k = 0; k < 2; ++k) {
#pragma GCC unroll 2
        for (int L = 0; L < (kN16 ? 1 : 2); ++L) {
          const __m128i h = L == 0 ? _mm256_castsi256_si128(acc16[rr][k])
                                   : _mm256_extracti128_si256(acc16[rr][k], 1);
          int32_t* at = sums + (r0 + rr) * dv + 64 * m + 32 * L + (kHigh ? 16 : 0) + 8 * k;
          const __m256i cur = _mm256_load_si256(reinterpret_cast<const __m256i*>(at));
          _mm256_store_si256(reinterpret_cast<__m256i*>(at),
                             _mm256_add_epi32(cur, _mm256_cvtepi16_epi32(h)));
        }
      }
    }
  }
}

template <int R>
ATTN_DECODE void PvPasses(const RowWeights256& rw, int64_t r0, const uint8_t* v, int64_t rb,
                          int64_t c, int64_t dv, int64_t m, int32_t* sums,
                          const SpreadPrefetch* ahead) {
  if (dv / 2 - 32 * m == 16) {
    PvPass<R, false, true>(rw, r0, v, rb, c, dv, m, sums, ahead, 2 * m);
    PvPass<R, true, true>(rw, r0, v, rb, c, dv, m, sums, ahead, 2 * m + 1);
  } else {
    PvPass<R, false, false>(rw, r0, v, rb, c, dv, m, sums, ahead, 2 * m);
    PvPass<R, true, false>(rw, r0, v, rb, c, dv, m, sums, ahead, 2 * m + 1);
  }
}

ATTN_DECODE void PvValues(const RowWeights256& rw, int64_t rows, const uint8_t* v, int64_t c,
                          int64_t dv, int32_t* sums, float* o, const uint8_t* next) {
  const int64_t groups = (dv + kGroup - 1) / kGroup, rb = dv / 2 + groups * 8;
  // The next page's rows, a line or more every two tokens of a pass.
  const SpreadPrefetch ahead(next, 2 * rb, (c + 1) / 2, 2 * groups);
  for (int64_t m = 0; m < groups; ++m) {
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) PvPasses<4>(rw, r, v, rb, c, dv, m, sums, r == 0 ? &ahead : nullptr);
    for (; r < rows; ++r) PvPasses<1>(rw, r, v, rb, c, dv, m, sums, r == 0 ? &ahead : nullptr);
  }
  // o += the sums times their (row, group)'s scale, plus its bias.
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t x = 0; x < dv; x += 8) {
      const int64_t at = r * groups + x / kGroup;
      const __m256 f = _mm256_set1_ps(rw.scale[static_cast<size_t>(at)]);
      const __m256 b = _mm256_set1_ps(rw.bias[static_cast<size_t>(at)]);
      const __m256 s = _mm256_cvtepi32_ps(
          _mm256_load_si256(reinterpret_cast<const __m256i*>(sums + r * dv + x)));
      _mm256_storeu_ps(o + r * dv + x, _mm256_add_ps(_mm256_loadu_ps(o + r * dv + x),
                                                     _mm256_fmadd_ps(s, f, b)));
    }
  }
}

}  // namespace

bool QkInt4Block256(const float* q, int64_t rows, const uint8_t* block, int64_t g,
                    const float* meta, int64_t j, int64_t c, int64_t d, float* s, int64_t lds,
                    const uint8_t* next) {
  thread_local BlockQuery256 bq;
  if (!PrepareQuery(q, rows, d, meta, &bq)) return false;
  QkBlock(bq, rows, block, g, j, c, d, s, lds, next);
  return true;
}

void PvInt4Values256(const float* p, int64_t rows, int64_t ldp, const uint8_t* v, int64_t c,
                     int64_t dv, float* o, const uint8_t* next) {
  thread_local RowWeights256 rw;
  PrepareWeights(p, rows, ldp, v, c, dv, &rw);
  rw.sums.assign(static_cast<size_t>(rows * dv), 0);
  PvValues(rw, rows, v, c, dv, rw.sums.data(), o, next);
}

}  // namespace attn::internal
