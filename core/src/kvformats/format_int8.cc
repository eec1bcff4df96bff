// INT8: symmetric int8 codes with a float32 factor per (token, kv head):
// factor = max|x| / 127 (rounded to float32), code = x / factor in float64
// rounded to nearest even, within [-127, 127]. A token all zeros (or so
// small that the factor underflows) is stored as zeros with factor 0.
// The decode kernel multiplies them in integer units: the loops below.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kvformats/formats.h"
#include "kvformats/pair_loops.h"
#include "support/isa_cap.h"

namespace attn::internal {
namespace {

// ---- the codec ------------------------------------------------------------

float EncodeInt8(const float* src, int64_t dim, uint8_t* row) {
  float amax = 0.0f;
  for (int64_t x = 0; x < dim; ++x) amax = std::max(amax, std::fabs(src[x]));
  const float factor = amax / 127.0f;
  auto* q = reinterpret_cast<int8_t*>(row);
  if (factor == 0.0f) {
    std::memset(row, 0, static_cast<size_t>(dim));
    return 0.0f;
  }
  // Round half to even by the 2^52 + 2^51 trick (exact for |y| < 2^51; here
  // |y| <= 127): plain arithmetic the compiler vectorises, where nearbyint
  // is a library call without SSE4.1.
  constexpr double kRound = 6755399441055744.0;
  const double f = factor;
  for (int64_t x = 0; x < dim; ++x) {
    const double shifted = static_cast<double>(src[x]) / f + kRound;
    const double v = shifted - kRound;
    q[x] = static_cast<int8_t>(std::min(127.0, std::max(-127.0, v)));
  }
  return factor;
}

void WidenInt8(const uint8_t* codes, int64_t c, int64_t dim, float* dst) {
  const int64_t n = c * dim;
  const auto* q = reinterpret_cast<const int8_t*>(codes);
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(q[i]);
}

int64_t Bytes1(int64_t dim) { return dim; }



struct LoadI8 {
  using T = int8_t;
  ATTN_DECODE static __m256 Load(const int8_t* p) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  }
};
struct Load512I8 {
  using T = int8_t;
  ATTN_DECODE512 static __m512 Load(const int8_t* p) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
  }
};

// ---- QK in integer units ----------------------------------------------------
// Keys' codes times a query row rounded to int16 (scale max|q| / 32767, a
// relative error of at most 2^-16 of its largest element), summed in int32:
// sixteen (AVX2) or thirty-two (AVX-512) products per instruction pair, or
// per instruction with AVX512-VNNI, against eight or sixteen for the float
// loops. |q16| <= 32767 and |code| <= 127 keep a sum of up to 512 products
// inside int32. Rows with a non-finite element take the float loops (a NaN
// query answers NaN).

#define ATTN_I8_512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))
#define ATTN_I8_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))

struct QRows {
  LineVector<int16_t> q;
  std::vector<float> scale;
  // The rows they were made from: a task asks for the same rows page after
  // page, and they are rounded once a kv head (PreparedRows).
  RowsOrigin origin;
  bool ok = false;
};

// v (|v| <= 32767 and a bit) rounded half to even, by adding and taking
// away 1.5 * 2^23: plain float arithmetic the compiler vectorises.
inline float RoundToInt(float v) {
  constexpr float kRound = 12582912.0f;
  return (v + kRound) - kRound;
}

// q rows (dense, d long) as int16 and their scales; false when one is not
// finite.
bool RoundRows(const float* q, int64_t rows, int64_t d, QRows* out) {
  if (out->origin.Same(q, rows, d)) return out->ok;
  out->ok = false;
  out->q.resize(static_cast<size_t>(rows * d));
  out->scale.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const float* qr = q + r * d;
    // (Each element checked: std::max drops a NaN met against a number, and
    // a NaN row rounded to int16 answered numbers.)
    float amax = 0.0f;
    bool finite = true;
    for (int64_t x = 0; x < d; ++x) {
      const float v = std::fabs(qr[x]);
      amax = std::max(amax, v);
      finite = finite && v <= std::numeric_limits<float>::max();
    }
    if (!finite) return false;
    const float inv = amax > 0.0f ? 32767.0f / amax : 0.0f;
    out->scale[static_cast<size_t>(r)] = amax / 32767.0f;
    int16_t* dst = out->q.data() + r * d;
    for (int64_t x = 0; x < d; ++x) dst[x] = static_cast<int16_t>(RoundToInt(qr[x] * inv));
  }
  out->ok = true;
  return true;
}

ATTN_I8_512 inline __m256 FoldI(__m512i a) {
  const __m512 f = _mm512_cvtepi32_ps(a);
  return _mm256_add_ps(_mm512_castps512_ps256(f),
                       _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1)));
}

// R rows (q0, d apart; 1 to 4) against keys four at a time: four rows'
// sixteen sums are put together once (SumEach16) instead of a sum at a
// time, fewer rows' row by row. Returns the keys done (c rounded down to 4).
// kD: d as a constant (0: not), so that the compiler unrolls the channels
// and overlaps a quad's sums with the next quad's products (a quarter of
// the loop's time at d = 128). At d = 128 the next page's four rows go
// out one a 32-channel step (four steps, a row each) rather than all
// eight lines at once: 7-9% off a cold int8 step. (fp8's QK, the same
// change: 3-13% slower; docs/performance.md.)
template <bool kVnni, int R, int kD = 0>
ATTN_I8_VNNI int64_t QkRowsByFour(const int16_t* q0, const float* scale, const int8_t* k, int64_t c,
                                  int64_t dd, float* s, int64_t lds, const uint8_t* next) {
  static_assert(R >= 1 && R <= 4, "one to four rows");
  const int64_t d = kD != 0 ? kD : dd;
  float quad[4] = {};
  for (int r = 0; r < R; ++r) quad[r] = scale[r];
  const __m512 sc = QuadOf(quad);
  int64_t j = 0;
  for (; j + 4 <= c; j += 4) {
    constexpr bool kSpread = kD == 128;
    if constexpr (!kSpread) {
      for (int64_t jj = j; jj < j + 4; ++jj) PrefetchToken(next, d, jj);
    }
    const int8_t* kj = k + j * d;
    __m512i a[4 * R];
    for (int i = 0; i < 4 * R; ++i) a[i] = _mm512_setzero_si512();
    for (int64_t x = 0; x < d; x += 32) {
      if constexpr (kSpread) PrefetchToken(next, d, j + x / 32);
      __m512i kv[4], qv[R];
      for (int t = 0; t < 4; ++t) {
        kv[t] = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(kj + t * d + x)));
      }
      for (int rr = 0; rr < R; ++rr) qv[rr] = _mm512_loadu_si512(q0 + rr * d + x);
      for (int rr = 0; rr < R; ++rr) {
        for (int t = 0; t < 4; ++t) a[rr * 4 + t] = DotWords<kVnni>(a[rr * 4 + t], qv[rr], kv[t]);
      }
    }
    if constexpr (R == 4) {  // block rr of the sums: row rr's four keys
      const __m512 sums = _mm512_mul_ps(_mm512_cvtepi32_ps(SumEach16(a)), sc);
      StoreQuad(s + j, lds, sums);
    } else {
      for (int rr = 0; rr < R; ++rr) {
        const __m128 sums = Sum4(FoldI(a[rr * 4]), FoldI(a[rr * 4 + 1]), FoldI(a[rr * 4 + 2]),
                                 FoldI(a[rr * 4 + 3]));
        _mm_storeu_ps(s + rr * lds + j, _mm_mul_ps(sums, _mm_set1_ps(quad[rr])));
      }
    }
  }
  return j;
}

template <bool kVnni>
ATTN_I8_VNNI void QkI16x512(const QRows& qr, int64_t rows, const int8_t* k, int64_t c, int64_t d,
                            float* s, int64_t lds, const uint8_t* next) {
  const int16_t* q = qr.q.data();
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {  // four rows against four keys, then two
    const int16_t* q0 = q + r * d;
    const auto quads = d == 128 ? QkRowsByFour<kVnni, 4, 128> : QkRowsByFour<kVnni, 4>;
    int64_t j = quads(q0, qr.scale.data() + r, k, c, d, s + r * lds, lds, r == 0 ? next : nullptr);
    for (; j + 2 <= c; j += 2) {
      if (r == 0) {
        PrefetchToken(next, d, j);
        PrefetchToken(next, d, j + 1);
      }
      const int8_t* kj = k + j * d;
      __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
      __m512i b0 = a0, b1 = a0, b2 = a0, b3 = a0;
      for (int64_t x = 0; x < d; x += 32) {
        const __m512i k0 = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(kj + x)));
        const __m512i k1 = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(kj + d + x)));
        const __m512i q0v = _mm512_loadu_si512(q0 + x), q1v = _mm512_loadu_si512(q0 + d + x);
        const __m512i q2v = _mm512_loadu_si512(q0 + 2 * d + x);
        const __m512i q3v = _mm512_loadu_si512(q0 + 3 * d + x);
        a0 = DotWords<kVnni>(a0, q0v, k0);
        a1 = DotWords<kVnni>(a1, q1v, k0);
        a2 = DotWords<kVnni>(a2, q2v, k0);
        a3 = DotWords<kVnni>(a3, q3v, k0);
        b0 = DotWords<kVnni>(b0, q0v, k1);
        b1 = DotWords<kVnni>(b1, q1v, k1);
        b2 = DotWords<kVnni>(b2, q2v, k1);
        b3 = DotWords<kVnni>(b3, q3v, k1);
      }
      alignas(16) float out[8];
      _mm_store_ps(out, Sum4(FoldI(a0), FoldI(a1), FoldI(a2), FoldI(a3)));
      _mm_store_ps(out + 4, Sum4(FoldI(b0), FoldI(b1), FoldI(b2), FoldI(b3)));
      for (int i = 0; i < 4; ++i) {
        const float sc = qr.scale[static_cast<size_t>(r + i)];
        s[(r + i) * lds + j] = out[i] * sc;
        s[(r + i) * lds + j + 1] = out[4 + i] * sc;
      }
    }
    for (; j < c; ++j) {
      if (r == 0) PrefetchToken(next, d, j);
      const int8_t* kj = k + j * d;
      __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t x = 0; x < d; x += 32) {
        const __m512i kv = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(kj + x)));
        a0 = DotWords<kVnni>(a0, _mm512_loadu_si512(q0 + x), kv);
        a1 = DotWords<kVnni>(a1, _mm512_loadu_si512(q0 + d + x), kv);
        a2 = DotWords<kVnni>(a2, _mm512_loadu_si512(q0 + 2 * d + x), kv);
        a3 = DotWords<kVnni>(a3, _mm512_loadu_si512(q0 + 3 * d + x), kv);
      }
      alignas(16) float out[4];
      _mm_store_ps(out, Sum4(FoldI(a0), FoldI(a1), FoldI(a2), FoldI(a3)));
      for (int i = 0; i < 4; ++i) s[(r + i) * lds + j] = out[i] * qr.scale[r + i];
    }
  }
  if (r == rows) return;
  // The one to three rows left: against four keys at a time together, then
  // each against the last keys.
  const int64_t rest = rows - r;
  const int16_t* q0 = q + r * d;
  const auto tile = rest == 3 ? QkRowsByFour<kVnni, 3> : rest == 2 ? QkRowsByFour<kVnni, 2>
                                                                   : QkRowsByFour<kVnni, 1>;
  const uint8_t* ahead = r == 0 ? next : nullptr;
  const int64_t done = tile(q0, qr.scale.data() + r, k, c, d, s + r * lds, lds, ahead);
  for (int64_t j = done; j < c; ++j) {
    PrefetchToken(ahead, d, j);
    for (int64_t rr = 0; rr < rest; ++rr) {
      __m512i a = _mm512_setzero_si512();
      for (int64_t x = 0; x < d; x += 32) {
        a = DotWords<kVnni>(
            a, _mm512_loadu_si512(q0 + rr * d + x),
            _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(k + j * d + x))));
      }
      s[(r + rr) * lds + j] =
          static_cast<float>(_mm512_reduce_add_epi32(a)) * qr.scale[static_cast<size_t>(r + rr)];
    }
  }
}

// The same sixteen products wide on the AVX2 tier: DotWords256 and
// Int8Words256 (pair_loops.h).

// Eight int32 vectors' sums, exact: lane 2 r + t the sum of a[2 r + t]'s
// lanes (row r's key t, four rows by two keys).
ATTN_DECODE inline __m256i SumEach8(const __m256i* a) {
  const __m256i g0 = _mm256_hadd_epi32(_mm256_hadd_epi32(a[0], a[1]), _mm256_hadd_epi32(a[2], a[3]));
  const __m256i g1 = _mm256_hadd_epi32(_mm256_hadd_epi32(a[4], a[5]), _mm256_hadd_epi32(a[6], a[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(g0, g1, 0x20),
                          _mm256_permute2x128_si256(g0, g1, 0x31));
}

// R rows (q0, d apart; 2 to 4) against keys two at a time: eight sums
// (fewer rows' padded with zeros) put together once (SumEach8) and stored
// as pairs, where one key's four sums a time took about half of the loop's
// time in their reduction and scalar stores. kD: d as a constant (0: not),
// so that the compiler unrolls the channels. Returns the keys done (c
// rounded down to 2).
template <int R, int kD = 0>
ATTN_DECODE int64_t QkRowsByTwo256(const int16_t* q0, const float* scale, const int8_t* k,
                                   int64_t c, int64_t dd, float* s, int64_t lds,
                                   const uint8_t* next) {
  static_assert(R >= 2 && R <= 4, "two to four rows");
  const int64_t d = kD != 0 ? kD : dd;
  float quad[4] = {};
  for (int r = 0; r < R; ++r) quad[r] = scale[r];
  const __m256 sc = _mm256_setr_ps(quad[0], quad[0], quad[1], quad[1], quad[2], quad[2],
                                   quad[3], quad[3]);
  int64_t j = 0;
  for (; j + 2 <= c; j += 2) {
    PrefetchToken(next, d, j);
    PrefetchToken(next, d, j + 1);
    const int8_t* kj = k + j * d;
    __m256i a[8];
    for (auto& v : a) v = _mm256_setzero_si256();
    for (int64_t x = 0; x < d; x += 16) {
      const __m256i k0 = Int8Words256(kj + x), k1 = Int8Words256(kj + d + x);
      for (int rr = 0; rr < R; ++rr) {
        const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q0 + rr * d + x));
        a[2 * rr] = DotWords256(a[2 * rr], qv, k0);
        a[2 * rr + 1] = DotWords256(a[2 * rr + 1], qv, k1);
        // (Each sum a chain in a register: with the channels unrolled GCC
        // otherwise added all of a key's products in a tree through the
        // stack, 25% slower than the loop before this tile.)
        asm("" : "+x"(a[2 * rr]), "+x"(a[2 * rr + 1]));
      }
    }
    const __m256 sums = _mm256_mul_ps(_mm256_cvtepi32_ps(SumEach8(a)), sc);
    const __m128 lo = _mm256_castps256_ps128(sums), hi = _mm256_extractf128_ps(sums, 1);
    _mm_storel_pi(reinterpret_cast<__m64*>(s + j), lo);
    _mm_storeh_pi(reinterpret_cast<__m64*>(s + lds + j), lo);
    if constexpr (R > 2) _mm_storel_pi(reinterpret_cast<__m64*>(s + 2 * lds + j), hi);
    if constexpr (R > 3) _mm_storeh_pi(reinterpret_cast<__m64*>(s + 3 * lds + j), hi);
  }
  return j;
}

ATTN_DECODE void QkI16x256(const QRows& qr, int64_t rows, const int8_t* k, int64_t c, int64_t d,
                           float* s, int64_t lds, const uint8_t* next) {
  const int16_t* q = qr.q.data();
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {  // four rows against two keys, then one
    const int16_t* q0 = q + r * d;
    const auto pairs = d == 128 ? QkRowsByTwo256<4, 128> : QkRowsByTwo256<4>;
    const int64_t done =
        pairs(q0, qr.scale.data() + r, k, c, d, s + r * lds, lds, r == 0 ? next : nullptr);
    for (int64_t j = done; j < c; ++j) {
      if (r == 0) PrefetchToken(next, d, j);
      const int8_t* kj = k + j * d;
      __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t x = 0; x < d; x += 16) {
        const __m256i kv = Int8Words256(kj + x);
        a0 = DotWords256(a0, _mm256_loadu_si256((const __m256i*)(q0 + x)), kv);
        a1 = DotWords256(a1, _mm256_loadu_si256((const __m256i*)(q0 + d + x)), kv);
        a2 = DotWords256(a2, _mm256_loadu_si256((const __m256i*)(q0 + 2 * d + x)), kv);
        a3 = DotWords256(a3, _mm256_loadu_si256((const __m256i*)(q0 + 3 * d + x)), kv);
      }
      alignas(16) float out[4];
      _mm_store_ps(out, Sum4(_mm256_cvtepi32_ps(a0), _mm256_cvtepi32_ps(a1), _mm256_cvtepi32_ps(a2),
                             _mm256_cvtepi32_ps(a3)));
      for (int i = 0; i < 4; ++i) s[(r + i) * lds + j] = out[i] * qr.scale[r + i];
    }
  }
  if (rows - r >= 2) {  // two or three rows left: together, two keys at a time
    const int64_t rest = rows - r;
    const int16_t* q0 = q + r * d;
    const auto pairs = rest == 3 ? QkRowsByTwo256<3> : QkRowsByTwo256<2>;
    const uint8_t* ahead = r == 0 ? next : nullptr;
    const int64_t done = pairs(q0, qr.scale.data() + r, k, c, d, s + r * lds, lds, ahead);
    for (int64_t rr = 0; rr < rest && done < c; ++rr) {  // an odd last key
      __m256i a = _mm256_setzero_si256();
      for (int64_t x = 0; x < d; x += 16) {
        a = DotWords256(a, _mm256_loadu_si256((const __m256i*)(q0 + rr * d + x)),
                        Int8Words256(k + done * d + x));
      }
      const __m256 z = _mm256_setzero_ps();
      s[(r + rr) * lds + done] =
          _mm_cvtss_f32(Sum4(_mm256_cvtepi32_ps(a), z, z, z)) * qr.scale[static_cast<size_t>(r + rr)];
    }
    r = rows;
  }
  for (; r < rows; ++r) {  // one row against four keys (and the last ones alone)
    const int16_t* q0 = q + r * d;
    const float sc = qr.scale[static_cast<size_t>(r)];
    int64_t j = 0;
    for (; j < c; j += 4) {
      const int64_t n = std::min<int64_t>(4, c - j);
      if (r == 0) {
        for (int64_t jj = j; jj < j + n; ++jj) PrefetchToken(next, d, jj);
      }
      __m256i a[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                      _mm256_setzero_si256()};
      for (int64_t x = 0; x < d; x += 16) {
        const __m256i qv = _mm256_loadu_si256((const __m256i*)(q0 + x));
        for (int64_t t = 0; t < n; ++t)
          a[t] = DotWords256(a[t], qv, Int8Words256(k + (j + t) * d + x));
      }
      alignas(16) float out[4];
      _mm_store_ps(out, Sum4(_mm256_cvtepi32_ps(a[0]), _mm256_cvtepi32_ps(a[1]),
                             _mm256_cvtepi32_ps(a[2]), _mm256_cvtepi32_ps(a[3])));
      for (int64_t t = 0; t < n; ++t) s[r * lds + j + t] = out[t] * sc;
    }
  }
}

// ---- PV in integer units ------------------------------------------------------
// Each row's weights (over at most kPvTokens tokens: |sum| <= 256 * 32767 *
// 127 < 2^31) rounded to int16 against its largest, two tokens at once:
// the codes of tokens j and j + 1 interleaved (unpack of their widened
// rows) meet the pair (w_j, w_j+1) broadcast, one VPDPWSSD a 16-lane pair.
// The interleave scatters columns within 128-bit lanes; the sums are put
// back in order once a row and column chunk, after all the tokens. The
// AVX2 tier does the same with VPMADDWD over 16 columns a pass
// (pair_loops.h, PairPasses256): 1387 -> 1063 ns over a 128-token page in
// L1 against the float loops it replaced (Zen 5, forced AVX2).

constexpr int64_t kPvTokens = 256;

// Weights of `rows` rows over c tokens as int16, 2 * ceil(c / 2) a row (an
// odd last token paired with 0), and each row's scale. Weights are finite
// (at most 1 times a finite scale) unless a score was NaN, and a row with a
// NaN score is answered NaN whatever its sums.
ATTN_I8_512 void RoundWeights(const float* p, int64_t rows, int64_t ldp, int64_t c,
                              LineVector<int16_t>* w16, std::vector<float>* scale) {
  const int64_t np = (c + 1) / 2;
  w16->resize(static_cast<size_t>(rows * 2 * np));
  scale->resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const float* pr = p + r * ldp;
    const float amax = AbsMax512(pr, c);
    const __m512 inv = _mm512_set1_ps(amax > 0.0f ? 32767.0f / amax : 0.0f);
    (*scale)[static_cast<size_t>(r)] = amax / 32767.0f;
    int16_t* dst = w16->data() + r * 2 * np;  // read as int32 pairs: j low, j + 1 high
    for (int64_t j = 0; j < c; j += 16) {
      const __mmask16 k = Lanes16(c - j);
      const __m512i w = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, pr + j), inv));
      _mm256_mask_storeu_epi16(dst + j, k, _mm512_cvtsepi32_epi16(w));
    }
    if (c % 2 != 0) dst[c] = 0;
  }
}

// PairRows512's policy over int8 codes: widened to int16, VPDPWSSD (or
// VPMADDWD and an add) into int32.
template <bool kVnni>
struct PairsI8 {
  using Acc = __m512i;
  static constexpr bool kRows64 = false;
  ATTN_I8_512 static __m512i Zero() { return _mm512_setzero_si512(); }
  ATTN_I8_512 static __m512i Words(const uint8_t* p) {
    return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  ATTN_I8_VNNI static __m512i Dot(__m512i acc, __m512i a, __m512i b) {
    return DotWords<kVnni>(acc, a, b);
  }
  ATTN_I8_512 static __m512 Floats(__m512i acc) { return _mm512_cvtepi32_ps(acc); }
};

}  // namespace

void QkInt8Codes(const float* q, int64_t rows, const uint8_t* k, int64_t c, int64_t d, float* s,
                 int64_t lds, const uint8_t* next) {
  QRows& qr = PreparedRows<QRows>(q);
  const auto* k8 = reinterpret_cast<const int8_t*>(k);
  const bool wide = UseAvx512(d) && d % 32 == 0;
  if (d <= 512 && (wide || d % 16 == 0) && RoundRows(q, rows, d, &qr)) {
    const bool vnni = UseAvx512Vnni();
    if (wide && vnni) return QkI16x512<true>(qr, rows, k8, c, d, s, lds, next);
    if (wide) return QkI16x512<false>(qr, rows, k8, c, d, s, lds, next);
    return QkI16x256(qr, rows, k8, c, d, s, lds, next);
  }
  QkPageOf<LoadI8, Load512I8>(q, rows, k, c, d, s, lds, next);
}

void PvInt8Codes(const float* p, int64_t rows, int64_t ldp, const uint8_t* v, int64_t c, int64_t dv,
                 float* o, const uint8_t* next) {
  thread_local LineVector<int16_t> pairs;
  thread_local std::vector<float> scale;
  if (UseAvx512(dv) && dv % 32 == 0) {
    const bool vnni = UseAvx512Vnni();
    for (int64_t j0 = 0; j0 < c; j0 += kPvTokens) {  // in int32's range
      const int64_t n = std::min(kPvTokens, c - j0);
      RoundWeights(p + j0, rows, ldp, n, &pairs, &scale);
      const auto* w = reinterpret_cast<const int32_t*>(pairs.data());
      const uint8_t* vj = v + j0 * dv;
      const uint8_t* pf = j0 == 0 ? next : nullptr;
      if (vnni) {
        PairPasses512<PairsI8<true>>(w, (n + 1) / 2, scale.data(), rows, vj, n, dv, o, pf);
      } else {
        PairPasses512<PairsI8<false>>(w, (n + 1) / 2, scale.data(), rows, vj, n, dv, o, pf);
      }
    }
    return;
  }
  if (InRegisterTier() && dv % 16 == 0) {  // the AVX2 tier: the same in 256 bits
    for (int64_t j0 = 0; j0 < c; j0 += kPvTokens) {
      const int64_t n = std::min(kPvTokens, c - j0);
      RoundWeights256(p + j0, rows, ldp, n, &pairs, &scale);
      PairPasses256(reinterpret_cast<const int32_t*>(pairs.data()), (n + 1) / 2, scale.data(), rows,
                    reinterpret_cast<const int8_t*>(v + j0 * dv), n, dv, o,
                    j0 == 0 ? next : nullptr);
    }
    return;
  }
  PvPageOf<LoadI8, Load512I8>(p, rows, ldp, v, c, dv, o, next);
}

const PageCodec& Int8Codec() {
  static const PageCodec c{"int8", Bytes1, true, EncodeInt8, WidenInt8, QkInt8Codes, PvInt8Codes};
  return c;
}

}  // namespace attn::internal
