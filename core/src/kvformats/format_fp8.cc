// FP8_E4M3: float8 e4m3 codes (OCP FP8 E4M3: bias 7, largest 448, no
// infinities) with a float32 factor per (token, kv head): x / (max|x| / 448)
// in float64 rounded to the nearest e4m3 value, ties to the even code,
// saturating at 448, except that the encoder writes no subnormal codes:
// below 2^-6 (3.5e-5 of the token's largest) a value becomes 0 or 2^-6,
// whichever is nearer (2^-6 on a tie), so that a code moves into bf16's
// places exactly (VDPBF16PS treats bf16 subnormals as 0). A code widens in
// registers through float16: its sign, exponent and mantissa bits moved
// into a half's places give the code's value times 2^-8, so the stored
// factor is (max|x| / 448) * 256.
#include <cmath>
#include <cstring>
#include <vector>

#include "attn/cpu_info.h"
#include "kvformats/formats.h"
#include "kvformats/pair_loops.h"
#include "support/isa_cap.h"

namespace attn::internal {
namespace {

// A code sign-extended to 16 bits and shifted left by 7 puts its exponent
// and mantissa where a half's are and its sign in bit 15, with a copy of
// the sign in bit 14 that the mask clears: three integer instructions and
// the F16C conversion.
// Load16 (the channel-pair loops, pair_loops.h) takes 16 codes into
// float32's places as Load512Fp8's Load32 below does 32.
struct LoadFp8 {
  using T = uint8_t;
  static constexpr float kUnit16 = 0x1p112f;
  ATTN_DECODE static __m256 Load(const uint8_t* p) {
    const __m128i b = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return _mm256_cvtph_ps(
        _mm_and_si128(_mm_slli_epi16(b, 7), _mm_set1_epi16(static_cast<int16_t>(0xBF80))));
  }
  ATTN_DECODE static void Load16(const uint8_t* p, __m256* even, __m256* odd) {
    const __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i m = _mm256_set1_epi32(static_cast<int>(0x87F00000u));
    *even = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(w, 20), m));
    *odd = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(w, 4), m));
  }
};
// Load32 moves 32 codes straight into float32's places, the even codes'
// and the odd ones: a code sign-extended to 16 bits and shifted left by 20
// (4 for the odd ones, in the high halves) puts its mantissa in bits
// 20-22, its exponent in 23-26 and a copy of its sign in 31, and the mask
// clears the rest. That is the code's value times 2^-120 (a float32
// normal: no subnormal code is written); kUnit32 takes the sums back to
// Load's 2^-8.
struct Load512Fp8 {
  using T = uint8_t;
  static constexpr bool kEvenOdd = true;
  static constexpr float kUnit32 = 0x1p112f;
  ATTN_DECODE512 static __m512 Load(const uint8_t* p) {
    const __m256i b = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm512_cvtph_ps(
        _mm256_and_si256(_mm256_slli_epi16(b, 7), _mm256_set1_epi16(static_cast<int16_t>(0xBF80))));
  }
  ATTN_DECODE512 static void Load32(const uint8_t* p, __m512* even, __m512* odd) {
    const __m512i w = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    const __m512i m = _mm512_set1_epi32(static_cast<int>(0x87F00000u));
    *even = _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(w, 20), m));
    *odd = _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(w, 4), m));
  }
};

// The e4m3 code nearest to y (ties to the even code), saturating at 448,
// from y's bits: no branch and no library call per value. |y| in [2^-6,
// 448): adding 2^48 - 1 and the kept mantissa's last bit to |y|'s bits
// rounds its 52 mantissa bits to 3, half to even (a carry moves the
// exponent up), and bits 49 and up are then the biased exponent and the 3
// bits: the code is those less (1023 - 7) << 3. Below 2^-6 it is 0 or 2^-6
// (0x08), whichever is nearer, 2^-6 on the tie; from 448 on, 0x7E. The
// vector encoders below take the same steps on 8 (AVX-512) or 4 (AVX2)
// values a vector, and so write the same codes.
constexpr uint64_t kAbsBits = ~(uint64_t{1} << 63);
constexpr uint64_t kBits2m7 = uint64_t{1023 - 7} << 52;                          // 2^-7
constexpr uint64_t kBits2m6 = uint64_t{1023 - 6} << 52;                          // 2^-6
constexpr uint64_t kBits448 = (uint64_t{1023 + 8} << 52) | (uint64_t{3} << 50);  // 1.75 * 2^8
constexpr uint64_t kCodeBias = uint64_t{1023 - 7} << 3;

uint8_t E4m3Code(double y) {
  uint64_t bits;
  std::memcpy(&bits, &y, 8);
  const uint64_t a = bits & kAbsBits;
  const uint64_t rounded = a + ((uint64_t{1} << 48) - 1) + ((a >> 49) & 1);
  uint64_t code = std::min<uint64_t>((rounded >> 49) - kCodeBias, 0x7E);
  if (a < kBits2m6) code = a >= kBits2m7 ? 0x08 : 0x00;  // no subnormal codes
  if (a >= kBits448) code = 0x7E;
  return static_cast<uint8_t>(code | ((bits >> 56) & 0x80));
}

// src[x] / scale in float64 to codes, 8 values a vector; the tail as
// E4m3Code.
ATTN_AVX512 void Codes512(const float* src, int64_t dim, double scale, uint8_t* row) {
  const __m512d sc = _mm512_set1_pd(scale);
  const __m512i abs_bits = _mm512_set1_epi64(static_cast<int64_t>(kAbsBits));
  const __m512i half_less_1 = _mm512_set1_epi64((int64_t{1} << 48) - 1);
  const __m512i one = _mm512_set1_epi64(1), bias = _mm512_set1_epi64(kCodeBias);
  const __m512i top = _mm512_set1_epi64(0x7E), sign = _mm512_set1_epi64(0x80);
  const __m512i tiny = _mm512_set1_epi64(static_cast<int64_t>(kBits2m7));
  const __m512i small = _mm512_set1_epi64(static_cast<int64_t>(kBits2m6));
  const __m512i big = _mm512_set1_epi64(static_cast<int64_t>(kBits448));
  int64_t x = 0;
  for (; x + 8 <= dim; x += 8) {
    const __m512i bits =
        _mm512_castpd_si512(_mm512_div_pd(_mm512_cvtps_pd(_mm256_loadu_ps(src + x)), sc));
    const __m512i a = _mm512_and_si512(bits, abs_bits);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi64(a, 49), one);
    const __m512i rounded = _mm512_add_epi64(_mm512_add_epi64(a, half_less_1), lsb);
    __m512i code = _mm512_min_epu64(_mm512_sub_epi64(_mm512_srli_epi64(rounded, 49), bias), top);
    const __mmask8 below = _mm512_cmplt_epu64_mask(a, small);
    code = _mm512_mask_mov_epi64(
        code, below,
        _mm512_maskz_mov_epi64(_mm512_cmpge_epu64_mask(a, tiny), _mm512_set1_epi64(0x08)));
    code = _mm512_mask_mov_epi64(code, _mm512_cmpge_epu64_mask(a, big), top);
    code = _mm512_or_si512(code, _mm512_and_si512(_mm512_srli_epi64(bits, 56), sign));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(row + x), _mm512_cvtepi64_epi8(code));
  }
  for (; x < dim; ++x) row[x] = E4m3Code(static_cast<double>(src[x]) / scale);
}

ATTN_AVX2 float AbsMax256(const float* src, int64_t dim) {
  const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 m = _mm256_setzero_ps();
  int64_t x = 0;
  for (; x + 8 <= dim; x += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(src + x), abs));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  float amax = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
  for (; x < dim; ++x) amax = std::max(amax, std::fabs(src[x]));
  return amax;
}

// Codes512's steps on 4 values a vector (unsigned 64-bit compares as signed
// ones: every |y|'s bits are below 2^63).
ATTN_AVX2 void Codes256(const float* src, int64_t dim, double scale, uint8_t* row) {
  const __m256d sc = _mm256_set1_pd(scale);
  const __m256i abs_bits = _mm256_set1_epi64x(static_cast<int64_t>(kAbsBits));
  const __m256i half_less_1 = _mm256_set1_epi64x((int64_t{1} << 48) - 1);
  const __m256i one = _mm256_set1_epi64x(1), bias = _mm256_set1_epi64x(kCodeBias);
  const __m256i top = _mm256_set1_epi64x(0x7E), sign = _mm256_set1_epi64x(0x80);
  const __m256i eight = _mm256_set1_epi64x(0x08);
  // a >= t as a > t - 1.
  const __m256i tiny_less_1 = _mm256_set1_epi64x(static_cast<int64_t>(kBits2m7 - 1));
  const __m256i small_less_1 = _mm256_set1_epi64x(static_cast<int64_t>(kBits2m6 - 1));
  const __m256i big_less_1 = _mm256_set1_epi64x(static_cast<int64_t>(kBits448 - 1));
  int64_t x = 0;
  for (; x + 4 <= dim; x += 4) {
    const __m256i bits =
        _mm256_castpd_si256(_mm256_div_pd(_mm256_cvtps_pd(_mm_loadu_ps(src + x)), sc));
    const __m256i a = _mm256_and_si256(bits, abs_bits);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi64(a, 49), one);
    const __m256i rounded = _mm256_add_epi64(_mm256_add_epi64(a, half_less_1), lsb);
    __m256i code = _mm256_sub_epi64(_mm256_srli_epi64(rounded, 49), bias);
    code = _mm256_blendv_epi8(code, top, _mm256_cmpgt_epi64(code, top));
    const __m256i low = _mm256_and_si256(eight, _mm256_cmpgt_epi64(a, tiny_less_1));
    code = _mm256_blendv_epi8(low, code, _mm256_cmpgt_epi64(a, small_less_1));
    code = _mm256_blendv_epi8(code, top, _mm256_cmpgt_epi64(a, big_less_1));
    code = _mm256_or_si256(code, _mm256_and_si256(_mm256_srli_epi64(bits, 56), sign));
    // The low byte of each 64-bit lane, four bytes.
    const __m128i lo = _mm256_castsi256_si128(code), hi = _mm256_extracti128_si256(code, 1);
    const __m128i dw = _mm_unpacklo_epi64(_mm_shuffle_epi32(lo, 0x08), _mm_shuffle_epi32(hi, 0x08));
    const int32_t four = _mm_cvtsi128_si32(_mm_packus_epi16(_mm_packus_epi32(dw, dw), dw));
    std::memcpy(row + x, &four, 4);
  }
  for (; x < dim; ++x) row[x] = E4m3Code(static_cast<double>(src[x]) / scale);
}

float EncodeFp8(const float* src, int64_t dim, uint8_t* row) {
  static const IsaTier tier = KernelTier();
  float amax = 0.0f;
  if (tier >= IsaTier::kAvx512) {
    amax = AbsMax512(src, dim);  // page_loops_avx512.h; max is exact, so any order
  } else if (tier >= IsaTier::kAvx2) {
    amax = AbsMax256(src, dim);
  } else {
    for (int64_t x = 0; x < dim; ++x) amax = std::max(amax, std::fabs(src[x]));
  }
  const float scale = amax / 448.0f;
  if (scale == 0.0f) {
    std::memset(row, 0, static_cast<size_t>(dim));
    return 0.0f;
  }
  const double sc = static_cast<double>(scale);
  if (tier >= IsaTier::kAvx512) {
    Codes512(src, dim, sc, row);
  } else if (tier >= IsaTier::kAvx2) {
    Codes256(src, dim, sc, row);
  } else {
    for (int64_t x = 0; x < dim; ++x) row[x] = E4m3Code(static_cast<double>(src[x]) / sc);
  }
  return scale * 256.0f;
}

// A code's value times 2^-8, as the registers widen it.
const float* Fp8Table() {
  static const auto* t = [] {
    auto* v = new float[256];
    for (int b = 0; b < 256; ++b) {
      const int e = (b >> 3) & 15, m = b & 7;
      const double mag = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
      v[b] = static_cast<float>(std::ldexp((b & 0x80) ? -mag : mag, -8));
    }
    return v;
  }();
  return t;
}

void WidenFp8(const uint8_t* codes, int64_t c, int64_t dim, float* dst) {
  const int64_t n = c * dim;
  const float* t = Fp8Table();
  for (int64_t i = 0; i < n; ++i) dst[i] = t[codes[i]];
}

int64_t Bytes1(int64_t dim) { return dim; }

// ---- bf16 dot products (AVX512-BF16) -------------------------------------
// A code's sign, exponent and mantissa bits moved into bf16's places are its
// value times 2^-120 (the code has no subnormals to lose: the encoder never
// writes them), so VDPBF16PS multiplies 32 codes by 32 bf16 numbers in one
// instruction, where the float loops widen and multiply 16. The query rows
// and the weights are rounded to bf16 (a relative error of at most 2^-8,
// against the code's 2^-4) after scaling by a power of two that keeps every product
// clear of float32's subnormals, which VDPBF16PS flushes; the power goes back
// with the sums. PV makes its words with GFNI (Fp8Rows64), so it runs
// where the CPU has that too (UseGfni; otherwise the float loops); QK
// keeps CodeWords, which timed faster inside a decode step (a GFNI QK was
// 8% faster on a page in L1 and 6-10% slower on the step, its prefetches
// stalling).

#define ATTN_FP8_DOT ATTN_DECODE512

ATTN_FP8_DOT inline __m512 DotBf16(__m512 acc, __m512i a, __m512i b) {
  asm("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

ATTN_FP8_DOT inline __m512i CodeWords(const uint8_t* p) {
  const __m512i w = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_and_si512(_mm512_slli_epi16(w, 4), _mm512_set1_epi16(static_cast<int16_t>(0x87F0)));
}

// GFNI's bit matrices for fp8's PV (GF2P8AFFINEQB: bit i of a result byte
// is the parity of the code's bits selected by byte 7 - i of the matrix):
// kLowByte moves a code's bits 0-3 to 4-7 (a word's low byte: the top of
// bf16's mantissa), kHighByte keeps the sign in bit 7 and moves bits 4-6 to
// 0-2 (the word's high byte: sign and exponent). A code's two bytes,
// unpacked into a word, are CodeWords' word.
#define ATTN_FP8_GF __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c,gfni")))
constexpr int64_t kLowByte = 0x01020408LL;
constexpr int64_t kHighByte = 0x1020400000000080LL;

// n floats times 2^e rounded to bf16 (nearest even), 16 at a time (the
// last ones padded with 0).
ATTN_FP8_DOT inline void ScaledWords(const float* x, int64_t n, int e, uint16_t* dst) {
  const TimesPow2 times(e);
  for (int64_t i = 0; i < n; i += 16) {
    __m256i bits;
    const __m512 v = times(_mm512_maskz_loadu_ps(Lanes16(n - i), x + i));
    asm("vcvtneps2bf16 %1, %0" : "=v"(bits) : "v"(v));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), bits);
  }
}

// Rows of floats as bf16 words (ScaledWords, each scaled as ShiftFor says)
// `stride` apart (n rounded up to 16, zeros past n), and the factor that
// takes a row's sums against codes back to the loaders' units: the codes'
// 2^-120 and Load's 2^-8 undone, and the row's 2^e.
struct WordRows {
  LineVector<uint16_t> w;
  std::vector<float> unit;
  int64_t stride = 0;
  RowsOrigin origin;  // the query rows they were made from (PreparedRows)
};

void RoundRows(const float* x, int64_t rows, int64_t ld, int64_t n, WordRows* out) {
  out->stride = (n + 15) / 16 * 16;
  out->w.resize(static_cast<size_t>(rows * out->stride));
  out->unit.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const int e = ShiftFor(x + r * ld, n);
    ScaledWords(x + r * ld, n, e, out->w.data() + r * out->stride);
    out->unit[static_cast<size_t>(r)] = Pow2(112 - e);
  }
}

// R query rows (words, d apart) against keys [0, c): four keys at a time.
// kD: d as a constant (0: not), so that the compiler unrolls the channels
// and overlaps a quad's sums with the next quad's products.
template <int R, int kD = 0>
ATTN_FP8_DOT void QkWords(const uint16_t* qw, const float* unit, const uint8_t* k, int64_t c,
                          int64_t dd, float* s, int64_t lds, const uint8_t* next) {
  const int64_t d = kD != 0 ? kD : dd;
  int64_t j = 0;
  for (; j + 4 <= c; j += 4) {
    for (int64_t jj = j; jj < j + 4; ++jj) PrefetchToken(next, d, jj);
    __m512 acc[4 * R];
    for (int i = 0; i < 4 * R; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t x = 0; x < d; x += 32) {
      __m512i qv[R];
      for (int r = 0; r < R; ++r) qv[r] = _mm512_loadu_si512(qw + r * d + x);
      for (int t = 0; t < 4; ++t) {
        const __m512i kw = CodeWords(k + (j + t) * d + x);
        for (int r = 0; r < R; ++r) acc[r * 4 + t] = DotBf16(acc[r * 4 + t], qv[r], kw);
      }
    }
    if constexpr (R == 4) {
      const __m512 u = QuadOf(unit);
      const __m512 sum = _mm512_mul_ps(SumEach16Ps(acc), u);
      StoreQuad(s + j, lds, sum);
    } else {
      for (int r = 0; r < R; ++r) {
        const __m128 sums = Sum4(Fold(acc[r * 4]), Fold(acc[r * 4 + 1]), Fold(acc[r * 4 + 2]),
                                 Fold(acc[r * 4 + 3]));
        _mm_storeu_ps(s + r * lds + j, _mm_mul_ps(sums, _mm_set1_ps(unit[r])));
      }
    }
  }
  for (; j < c; ++j) {
    PrefetchToken(next, d, j);
    for (int r = 0; r < R; ++r) {
      __m512 a = _mm512_setzero_ps();
      for (int64_t x = 0; x < d; x += 32)
        a = DotBf16(a, _mm512_loadu_si512(qw + r * d + x), CodeWords(k + j * d + x));
      s[r * lds + j] = _mm512_reduce_add_ps(a) * unit[r];
    }
  }
}

void QkFp8(const float* q, int64_t rows, const uint8_t* k, int64_t c, int64_t d, float* s,
           int64_t lds, const uint8_t* next) {
  if (!(UseAvx512(d) && d % 32 == 0 && Bf16MatrixTier() != Bf16Tier::kNone)) {
    if (!UseAvx512(d) && d % 16 == 0) {
      return QkEvenOddPage<LoadFp8>(q, rows, k, c, d, s, lds, next);
    }
    return QkPageOf<LoadFp8, Load512Fp8>(q, rows, k, c, d, s, lds, next);
  }
  WordRows& qw = PreparedRows<WordRows>(q);  // once per kv head, not per page
  if (!qw.origin.Same(q, rows, d)) RoundRows(q, rows, d, d, &qw);
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const auto quad = d == 128 ? QkWords<4, 128> : QkWords<4>;
    quad(qw.w.data() + r * d, qw.unit.data() + r, k, c, d, s + r * lds, lds,
         r == 0 ? next : nullptr);
  }
  if (r < rows) {  // the one to three rows left, together
    const auto tail = rows - r == 3 ? QkWords<3> : rows - r == 2 ? QkWords<2> : QkWords<1>;
    tail(qw.w.data() + r * d, qw.unit.data() + r, k, c, d, s + r * lds, lds,
         r == 0 ? next : nullptr);
  }
}

// Rows64's sums back in column order, times unit and added to o[0, 64):
// acc[m] holds columns 16k + 4m .. 16k + 4m + 3 of each 128-bit lane k (a
// four-by-four transpose of 128-bit blocks).
ATTN_FP8_GF inline void AddSums64(const __m512* acc, float unit, float* o) {
  const __m512 t0 = _mm512_shuffle_f32x4(acc[0], acc[1], 0x44);
  const __m512 t1 = _mm512_shuffle_f32x4(acc[0], acc[1], 0xEE);
  const __m512 t2 = _mm512_shuffle_f32x4(acc[2], acc[3], 0x44);
  const __m512 t3 = _mm512_shuffle_f32x4(acc[2], acc[3], 0xEE);
  const __m512 cols[4] = {_mm512_shuffle_f32x4(t0, t2, 0x88), _mm512_shuffle_f32x4(t0, t2, 0xDD),
                          _mm512_shuffle_f32x4(t1, t3, 0x88), _mm512_shuffle_f32x4(t1, t3, 0xDD)};
  const __m512 sc = _mm512_set1_ps(unit);
  for (int k = 0; k < 4; ++k) {
    _mm512_storeu_ps(o + 16 * k, _mm512_fmadd_ps(cols[k], sc, _mm512_loadu_ps(o + 16 * k)));
  }
}

// R rows by 64 columns at x of o over tokens [0, c) of v: the codes of
// tokens 2t and 2t + 1 interleaved byte by byte, then each byte's two GFNI
// transforms unpacked, give four vectors of 16 columns' pairs of bf16 words
// (token 2t in the low half): ten operations for 128 codes against
// sixteen through CodeWords and 16-bit unpacks.
template <int R>
ATTN_FP8_GF void Fp8Rows64(const int32_t* pairs, int64_t np, const float* unit, const uint8_t* v,
                           int64_t c, int64_t dv, int64_t x, float* o, const PairAhead* ahead) {
  __m512 acc[4 * R];
  for (int i = 0; i < 4 * R; ++i) acc[i] = _mm512_setzero_ps();
  const auto step = [&](int64_t t, int64_t j, bool second) ATTN_FP8_GF {
    const __m512i a = _mm512_loadu_si512(v + j * dv + x);
    const __m512i b = second ? _mm512_loadu_si512(v + (j + 1) * dv + x) : _mm512_setzero_si512();
    const __m512i m[2] = {_mm512_unpacklo_epi8(a, b), _mm512_unpackhi_epi8(a, b)};
    __m512i words[4];
    for (int h = 0; h < 2; ++h) {
      const __m512i lo = _mm512_gf2p8affine_epi64_epi8(m[h], _mm512_set1_epi64(kLowByte), 0);
      const __m512i hi = _mm512_gf2p8affine_epi64_epi8(m[h], _mm512_set1_epi64(kHighByte), 0);
      words[2 * h] = _mm512_unpacklo_epi8(lo, hi);
      words[2 * h + 1] = _mm512_unpackhi_epi8(lo, hi);
    }
    for (int i = 0; i < R; ++i) {
      const __m512i w = _mm512_set1_epi32(pairs[i * np + t]);
      for (int u = 0; u < 4; ++u) acc[i * 4 + u] = DotBf16(acc[i * 4 + u], words[u], w);
    }
  };
  PairSchedule<2>(c, ahead, step);
  for (int i = 0; i < R; ++i) AddSums64(acc + 4 * i, unit[i], o + i * dv + x);
}

// PairRows512's policy over fp8 codes: their bits in bf16's places,
// VDPBF16PS into float32; 64 columns at a time by Fp8Rows64.
struct PairsFp8 {
  using Acc = __m512;
  static constexpr bool kRows64 = true;
  template <int R>
  static void Rows64(const int32_t* pairs, int64_t np, const float* unit, const uint8_t* v,
                     int64_t c, int64_t dv, int64_t x, float* o, const PairAhead* ahead) {
    Fp8Rows64<R>(pairs, np, unit, v, c, dv, x, o, ahead);
  }
  ATTN_FP8_DOT static __m512 Zero() { return _mm512_setzero_ps(); }
  ATTN_FP8_DOT static __m512i Words(const uint8_t* p) { return CodeWords(p); }
  ATTN_FP8_DOT static __m512 Dot(__m512 acc, __m512i a, __m512i b) { return DotBf16(acc, a, b); }
  ATTN_FP8_DOT static __m512 Floats(__m512 acc) { return acc; }
};

void PvFp8(const float* p, int64_t rows, int64_t ldp, const uint8_t* v, int64_t c, int64_t dv,
           float* o, const uint8_t* next) {
  if (!(UseAvx512(dv) && dv % 32 == 0 && UseGfni())) {
    if (!UseAvx512(dv) && dv % 16 == 0) {
      return PvEvenOddPage<LoadFp8>(p, rows, ldp, v, c, dv, o, next);
    }
    return PvPageOf<LoadFp8, Load512Fp8>(p, rows, ldp, v, c, dv, o, next);
  }
  thread_local WordRows w;
  RoundRows(p, rows, ldp, c, &w);
  PairPasses512<PairsFp8>(reinterpret_cast<const int32_t*>(w.w.data()), w.stride / 2, w.unit.data(),
                          rows, v, c, dv, o, next);
}

}  // namespace

const PageCodec& Fp8E4M3Codec() {
  static const PageCodec c{"fp8_e4m3", Bytes1, true, EncodeFp8, WidenFp8, QkFp8, PvFp8};
  return c;
}

}  // namespace attn::internal
