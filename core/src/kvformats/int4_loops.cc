// The decode kernel's loops over int4 codes in integer units, on the
// AVX-512 tier for widths that are multiples of 32 (formats.h).
//
// A row's codes are read 64 bytes (128 channels) at a time, in registers.
//
// QK: a key block stores channel x as min_x + code * scale_x, so
//   q . k = sum_x (q_x scale_x) code_x + sum_x q_x min_x.
// The first sum takes the query times the block's scales, rounded to int16
// against its largest (at most 2^-16 of it off an element, as the int8
// loops' query) and laid out in the order the 64 bytes split into four
// vectors of 32 codes as int16, VPDPWSSD (AVX512-VNNI; VPMADDWD
// otherwise); the second is a float per row and block. (An int8 query,
// twice the products an instruction, cost int4 keys most of their gain on
// keys with outlier channels: docs/precision.md.)
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

// A block's query rows: [rows][segment][4][32] int16 in the nibbles'
// order, their scales and the rows' sums against the block's minimums.
struct BlockQuery {
  LineVector<int16_t> q, dense;
  std::vector<float> scale, bias, tmp;
};

// A segment read as 32 words gives four vectors of 32 codes as int16:
// word w's bits 0-3, 4-7, 8-11 and 12-15, the low and high nibbles of
// bytes 2w and 2w + 1. Byte b holds channels 32 (b / 16) + b % 16 (low)
// and that plus 16 (high), so vector k's lane w is channel
// 32 (w / 8) + 16 (k % 2) + 2 (w % 8) + k / 2 of the segment.
template <int kV>
ATTN_I4 inline __m512i Nibbles16(__m512i v) {
  if constexpr (kV == 3) return _mm512_srli_epi16(v, 12);
  const __m512i m = _mm512_set1_epi16(0x000F);
  if constexpr (kV == 0) return _mm512_and_si512(v, m);
  return _mm512_and_si512(_mm512_srli_epi16(v, 4 * kV), m);
}

// Nibbles16's order as permutex2var indices over two vectors of 32
// channels (lanes 0-15 from chunks 0 and 1 of a segment, 16-31 from 2 and
// 3 the same way), built once.
struct NibbleIndex {
  alignas(64) int16_t at[4][32];
};

const NibbleIndex& NibbleOrder() {
  static const NibbleIndex order = [] {
    NibbleIndex o{};
    for (int k = 0; k < 4; ++k) {
      for (int w = 0; w < 32; ++w) {
        o.at[k][w] = static_cast<int16_t>(32 * ((w / 8) % 2) + 16 * (k % 2) + 2 * (w % 8) + k / 2);
      }
    }
    return o;
  }();
  return order;
}

// The query times the block's scales rounded to int16 against each row's
// largest, in Nibbles16's order; false: a row not finite.
ATTN_I4 bool PrepareQuery(const float* q, int64_t rows, int64_t d, const float* meta,
                          BlockQuery* out) {
  const int64_t segs = (d + 127) / 128;
  out->q.resize(static_cast<size_t>(rows * segs * 128));
  out->dense.assign(static_cast<size_t>(segs * 128), 0);  // zeros past d
  out->scale.resize(static_cast<size_t>(rows));
  out->bias.resize(static_cast<size_t>(rows));
  out->tmp.resize(static_cast<size_t>(d));
  float* t = out->tmp.data();
  int16_t* dense = out->dense.data();
  const NibbleIndex& order = NibbleOrder();
  __m512i idx[4];
  for (int k = 0; k < 4; ++k) idx[k] = _mm512_load_si512(order.at[k]);
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
    for (int64_t x = 0; x < d; x += 16) {
      const __m512i c = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(t + x), inv));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dense + x), _mm512_cvtsepi32_epi16(c));
    }
    int16_t* dst = out->q.data() + r * segs * 128;
    for (int64_t seg = 0; seg < segs; ++seg) {
      const int16_t* in = dense + seg * 128;
      const __m512i i0 = _mm512_loadu_si512(in), i1 = _mm512_loadu_si512(in + 32);
      const __m512i i2 = _mm512_loadu_si512(in + 64), i3 = _mm512_loadu_si512(in + 96);
      for (int k = 0; k < 4; ++k) {  // lanes 0-15: chunks 0 and 1, 16-31: chunks 2 and 3
        const __m512i lo = _mm512_permutex2var_epi16(i0, idx[k], i1);
        const __m512i hi = _mm512_permutex2var_epi16(i2, idx[k], i3);
        _mm512_storeu_si512(dst + seg * 128 + 32 * k, _mm512_mask_blend_epi16(0xFFFF0000u, lo, hi));
      }
    }
  }
  return true;
}

// acc[4 rr + t] += row rr's int16 query (segs * 128 apart from q0) times
// key t's codes of vector kV.
template <bool kVnni, int R, int K, int kV>
ATTN_I4_VNNI inline void TileVector(const __m512i* w, const int16_t* q0, int64_t segs,
                                    __m512i* acc) {
  __m512i n[K];
#pragma GCC unroll 16
  for (int t = 0; t < K; ++t) n[t] = Nibbles16<kV>(w[t]);
#pragma GCC unroll 16
  for (int rr = 0; rr < R; ++rr) {
    const __m512i qv = _mm512_loadu_si512(q0 + rr * segs * 128 + 32 * kV);
#pragma GCC unroll 16
    for (int t = 0; t < K; ++t) acc[rr * 4 + t] = DotWords<kVnni>(acc[rr * 4 + t], n[t], qv);
  }
}

// Rows [r0, r0 + R) against keys [j, j + K) (R, K <= 4): sixteen sums put
// together once (SumEach16), lane 4 rr + t row rr's key t. kD: d as a
// constant (0: not), so that the compiler unrolls the segments and
// overlaps a tile's sums with the next tile's products.
template <bool kVnni, int R, int K, int kD = 0>
ATTN_I4_VNNI void Tile(const BlockQuery& bq, int64_t r0, const uint8_t* k, int64_t rb, int64_t j,
                       int64_t dd, float* s, int64_t lds, const uint8_t* next) {
  const int64_t d = kD != 0 ? kD : dd;
  const int64_t segs = (d + 127) / 128, bytes = d / 2;
  __m512i acc[16];
#pragma GCC unroll 16
  for (auto& a : acc) a = _mm512_setzero_si512();
#pragma GCC unroll 16
  for (int t = 0; t < K; ++t) PrefetchToken(next, rb, j + t);
  for (int64_t m = 0; m < segs; ++m) {
    __m512i w[K];
    const __mmask64 mask = SegmentMask(m, bytes);
#pragma GCC unroll 16
    for (int t = 0; t < K; ++t) w[t] = Segment(k + (j + t) * rb, m, mask);
    const int16_t* q0 = bq.q.data() + (r0 * segs + m) * 128;
    TileVector<kVnni, R, K, 0>(w, q0, segs, acc);
    TileVector<kVnni, R, K, 1>(w, q0, segs, acc);
    TileVector<kVnni, R, K, 2>(w, q0, segs, acc);
    TileVector<kVnni, R, K, 3>(w, q0, segs, acc);
  }
  const __m512 all = _mm512_cvtepi32_ps(SumEach16(acc));
  if constexpr (R == 4 && K == 4) {  // block rr: row rr's four keys
    const float *sc = bq.scale.data() + r0, *b = bq.bias.data() + r0;
    StoreQuad(s + r0 * lds + j, lds, _mm512_fmadd_ps(all, QuadOf(sc), QuadOf(b)));
    return;
  }
  alignas(64) float sums[16];
  _mm512_store_ps(sums, all);
#pragma GCC unroll 16
  for (int rr = 0; rr < R; ++rr) {
    const float sc = bq.scale[static_cast<size_t>(r0 + rr)];
    const float b = bq.bias[static_cast<size_t>(r0 + rr)];
#pragma GCC unroll 16
    for (int t = 0; t < K; ++t) s[(r0 + rr) * lds + j + t] = sums[rr * 4 + t] * sc + b;
  }
}

// (kD as Tile's; a block's last keys too: 2% of an int4 step at d 128
// on the generic tile.)
template <bool kVnni, int R, int kD>
ATTN_I4_VNNI void TileRows(const BlockQuery& bq, int64_t r0, const uint8_t* k, int64_t rb,
                           int64_t c, int64_t d, float* s, int64_t lds, const uint8_t* next) {
  int64_t j = 0;
  for (; j + 4 <= c; j += 4) Tile<kVnni, R, 4, kD>(bq, r0, k, rb, j, d, s, lds, next);
  for (; j < c; ++j) Tile<kVnni, R, 1, kD>(bq, r0, k, rb, j, d, s, lds, next);
}

template <bool kVnni, int kD>
void QkBlockRows(const BlockQuery& bq, int64_t rows, const uint8_t* k, int64_t c, int64_t d,
                 float* s, int64_t lds, const uint8_t* next) {
  const int64_t rb = d / 2;
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    TileRows<kVnni, 4, kD>(bq, r, k, rb, c, d, s, lds, r == 0 ? next : nullptr);
  }
  for (; r < rows; ++r) {
    TileRows<kVnni, 1, kD>(bq, r, k, rb, c, d, s, lds, r == 0 ? next : nullptr);
  }
}

template <bool kVnni>
void QkBlock(const BlockQuery& bq, int64_t rows, const uint8_t* k, int64_t c, int64_t d, float* s,
             int64_t lds, const uint8_t* next) {
  if (d == 128) return QkBlockRows<kVnni, 128>(bq, rows, k, c, d, s, lds, next);
  QkBlockRows<kVnni, 0>(bq, rows, k, c, d, s, lds, next);
}

// ---- PV -------------------------------------------------------------------

// Each row's weights times the tokens' scales per group, as unsigned bytes
// over the tokens padded to a multiple of four: w [rows][groups][cp]; and
// each (row, group)'s scale and its sum of weights times minimums. A byte
// is p_j scale_jg against the row's largest weight times the group's
// largest scale on the page (f_jg = scale_jg / that, once a page), so
// that a row takes one pass a group.
struct RowWeights {
  LineVector<uint8_t> w;
  std::vector<float> scale, bias, f, mg, smax;
  int64_t cp = 0;
};

ATTN_I4 void PrepareWeights(const float* p, int64_t rows, int64_t ldp, const uint8_t* v, int64_t c,
                            int64_t dv, RowWeights* out) {
  const int64_t groups = (dv + kGroup - 1) / kGroup, codes = dv / 2;
  const int64_t rb = codes + groups * 8, cp = (c + 3) / 4 * 4;
  out->cp = cp;
  out->w.resize(static_cast<size_t>(rows * groups * cp));
  out->scale.resize(static_cast<size_t>(rows * groups));
  out->bias.resize(static_cast<size_t>(rows * groups));
  out->f.resize(static_cast<size_t>(groups * c));  // [group][token]
  out->mg.resize(static_cast<size_t>(groups * c));
  out->smax.resize(static_cast<size_t>(groups));
  float* smax = out->smax.data();
  Int4ValueMeta(v + codes, rb, c, groups, out->f.data(), out->mg.data(), smax);
  for (int64_t g = 0; g < groups; ++g) {
    float* f = out->f.data() + g * c;
    const __m512 inv = _mm512_set1_ps(smax[g] > 0.0f ? 1.0f / smax[g] : 0.0f);
    for (int64_t j = 0; j < c; j += 16) {
      const __mmask16 k = Lanes16(c - j);
      _mm512_mask_storeu_ps(f + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, f + j), inv));
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* pr = p + r * ldp;
    __m512 pm = _mm512_setzero_ps();
    for (int64_t j = 0; j < c; j += 16) {
      pm = _mm512_max_ps(pm, _mm512_maskz_loadu_ps(Lanes16(c - j), pr + j));
    }
    const float pmax = _mm512_reduce_max_ps(pm);
    const __m512 inv = _mm512_set1_ps(pmax > 0.0f ? 255.0f / pmax : 0.0f);
    for (int64_t g = 0; g < groups; ++g) {
      const float *f = out->f.data() + g * c, *mg = out->mg.data() + g * c;
      uint8_t* dst = out->w.data() + (r * groups + g) * cp;
      __m512 bias = _mm512_setzero_ps();
      for (int64_t j = 0; j < cp; j += 16) {
        const __mmask16 k = Lanes16(c - j);
        const __m512 pv = _mm512_maskz_loadu_ps(k, pr + j);
        const __m512 w = _mm512_mul_ps(_mm512_mul_ps(pv, inv), _mm512_maskz_loadu_ps(k, f + j));
        const __m512i q = _mm512_max_epi32(_mm512_cvtps_epi32(w), _mm512_setzero_si512());
        _mm_mask_storeu_epi8(dst + j, Lanes16(cp - j), _mm512_cvtusepi32_epi8(q));
        bias = _mm512_fmadd_ps(pv, _mm512_maskz_loadu_ps(k, mg + j), bias);
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

void QkInt4Block(const float* q, int64_t rows, const uint8_t* k, const float* meta, int64_t c,
                 int64_t d, float* s, int64_t lds, const uint8_t* next) {
  thread_local BlockQuery bq;
  const bool done = UseAvx512(d) ? PrepareQuery(q, rows, d, meta, &bq)
                                 : QkInt4Block256(q, rows, k, meta, c, d, s, lds, next);
  if (!done) {  // a NaN or inf query: widened, in float32
    thread_local std::vector<float> keys;
    keys.resize(static_cast<size_t>(c * d));
    Int4KeysCodec().widen_block(k, meta, c, d, keys.data());
    Float32Codec().qk(q, rows, reinterpret_cast<const uint8_t*>(keys.data()), c, d, s, lds,
                      nullptr);
    return;
  }
  if (!UseAvx512(d)) return;
  if (UseAvx512Vnni()) return QkBlock<true>(bq, rows, k, c, d, s, lds, next);
  QkBlock<false>(bq, rows, k, c, d, s, lds, next);
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
