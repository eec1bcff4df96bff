// The decode kernel's in-register loops, AVX2 + FMA + F16C: QK and PV
// over a page's codes, widened to float32 as they are loaded by a Load
// policy (`L::T` the stored element, `L::Load(p)` eight of them as an
// __m256), never staged. A format's file (format_*.cc) instantiates them
// with its Load. A later page (the caller's `next`) is prefetched a token
// or a line at a time while this one is used: a kv head's pages lie
// apart in the pool, where the hardware's stream prefetcher would stop at
// each page's edge. Internal to core.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kvformats/page_codec.h"
#include "support/simd.h"

namespace attn::internal {

#define ATTN_DECODE __attribute__((target("avx2,fma,f16c")))

// Sums of four vectors' lanes: {sum a0, sum a1, sum a2, sum a3}.
ATTN_AVX2 inline __m128 Sum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

// Prefetches the bytes [j * bytes, (j + 1) * bytes) of `next` (null: none).
inline void PrefetchToken(const uint8_t* next, int64_t bytes, int64_t j) {
  if (next == nullptr) return;
  for (int64_t b = 0; b < bytes; b += 64) PrefetchLine(next + j * bytes + b);
}

// The next page's values spread over a PV loop: in token j of column chunk
// k (of `chunks`), a line or more of the c * tb bytes, so that the lines go
// out one at a time beside the work (a slice at once, after a chunk,
// stalled on the line fill buffers).
struct SpreadPrefetch {
  const uint8_t* next;
  int64_t total, per, c;
  SpreadPrefetch(const uint8_t* n, int64_t tb, int64_t c_, int64_t chunks)
      : next(n), total(n == nullptr ? 0 : (c_ * tb + 63) / 64), c(c_) {
    const int64_t slots = std::max<int64_t>(1, chunks * c_);
    per = (total + slots - 1) / slots;
  }
  void operator()(int64_t k, int64_t j) const {
    for (int64_t u = 0, i = (k * c + j) * per; u < per && i < total; ++u, ++i) {
      PrefetchLine(next + i * 64);
    }
  }
  // A prefetch every slot where a slot reads 16 columns of a token in
  // kSz-byte elements (slots = 4 total / kSz): line (k c + j) kSz / 4, the
  // same line twice in a row for 2-byte elements; no `next`, the same
  // offset in `idle` (the page being read).
  template <int64_t kSz>
  void Sixteen(int64_t k, int64_t j, const uint8_t* idle) const {
    const uint8_t* base = total > 0 ? next : idle;
    PrefetchLine(base + (((k * c + j) * kSz) >> 2) * 64);
  }
  // The first two lines of the same share, without a branch or a loop (in
  // a loop body where either made GCC keep the sums in memory): past the
  // last line, the last line again; no `next`, `idle` (a line in cache).
  void Two(int64_t k, int64_t j, const uint8_t* idle) const {
    const uint8_t* base = total > 0 ? next : idle;
    const int64_t last = total > 0 ? total - 1 : 0, i = (k * c + j) * per;
    PrefetchLine(base + std::min(i, last) * 64);
    PrefetchLine(base + std::min(i + 1, last) * 64);
  }
};

// A codec's query rows prepared once per kv head (rounded, scaled): a task
// sweeps its pages head by head within a page and asks for the same rows
// page after page. The thread's last 16 preparations of type T, found by
// the rows' address; T's `origin` (RowsOrigin) tells the caller whether it
// still holds for their content and shape.
template <typename T>
T& PreparedRows(const float* q) {
  constexpr size_t kSlots = 16;
  thread_local T cache[kSlots];
  thread_local const float* where[kSlots] = {};
  thread_local size_t next_slot = 0;
  size_t slot = 0;
  while (slot < kSlots && where[slot] != q) ++slot;
  if (slot == kSlots) {
    slot = next_slot;
    next_slot = (next_slot + 1) % kSlots;
    where[slot] = q;
  }
  return cache[slot];
}

// The query rows a preparation was made from.
struct RowsOrigin {
  std::vector<float> from;
  int64_t rows = -1, d = -1;
  const float* at = nullptr;  // where they were read last
  uint64_t pin = 0;           // the thread's QueryPin epoch they were checked under (0: not pinned)
  // True when these are the rows [r, dd] at q; else they become them.
  // Inside the thread's pinned rows, once checked at q under a pin they
  // hold there until the next pin.
  bool Same(const float* q, int64_t r, int64_t dd) {
    const size_t n = static_cast<size_t>(r * dd);
    const QueryPin& p = ThreadQueryPin();
    const bool pinned = p.lo != nullptr && q >= p.lo && q + n <= p.hi;
    const uint64_t now = pinned ? p.epoch : 0;
    const bool here = q == at;
    at = q;
    if (r == rows && dd == d) {
      if (now != 0 && pin == now && here) return true;
      if (std::memcmp(from.data(), q, n * 4) == 0) {
        pin = now;
        return true;
      }
    }
    from.assign(q, q + n);
    rows = r;
    d = dd;
    pin = now;
    return false;
  }
};

// The next page's values (c * dv bytes, or none) for loops that read two
// tokens a step over `width` columns at a time (32 on the AVX-512 tier, 16
// on the AVX2 tier): column chunk x's share, a line a token pair (np =
// ceil(c / 2) lines a chunk).
struct PairAhead {
  const uint8_t* at = nullptr;
  int64_t lines = 0;
};
inline PairAhead PairAheadOf(const uint8_t* next, int64_t c, int64_t dv, int64_t x,
                             int64_t width = 32) {
  if (next == nullptr) return {};
  const int64_t np = (c + 1) / 2, total = (c * dv + 63) / 64, done = x / width * np;
  return {next + done * 64, std::max<int64_t>(0, std::min(np, total - done))};
}

// The AVX-512 loops run for this width (D or Dv): a multiple of 16 on the
// AVX-512 tier.
bool UseAvx512(int64_t width);

// 2^e as a float, for e in [-126, 127].
inline float Pow2(int e) {
  const uint32_t bits = static_cast<uint32_t>(e + 127) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// x times 2^e for e in [-254, 254] (a ShiftOfMax exponent, or its negation
// for the way back): two float factors, 2^(e/2) then the rest.
inline float ScaledByPow2(float x, int e) { return x * Pow2(e / 2) * Pow2(e - e / 2); }

// The power of two that brings amax, a row's largest magnitude, to
// [2^100, 2^101), as an exponent e (0 for zeros or a non-finite amax).
// Rows scaled so meet a loader's tiny values (fp8's codes at 2^-120 times
// their values: kUnit16 here, kUnit32 on the AVX-512 tier) without
// products in float32's subnormals.
inline int ShiftOfMax(float amax) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return 0;
  uint32_t bits;
  std::memcpy(&bits, &amax, 4);
  // amax in [2^(b - 127), 2^(b - 126)) for its biased exponent b (a
  // subnormal's b is 0: it is below 2^-126 and ends below 2^101).
  // At least -15, so that the sums' way back (2^(112 - e) for fp8) is a
  // float: rows above 2^116 end below 2^113.
  return std::max(-15, 101 - (static_cast<int>(bits >> 23) - 126));
}

// max |x[i]| over i < n (0 for n == 0; a NaN may or may not show).
ATTN_AVX2 inline float AbsMax256(const float* x, int64_t n) {
  const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 m = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + i), abs));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float r = 0.0f;
  for (const float l : lanes) r = std::max(r, l);
  for (; i < n; ++i) r = std::max(r, std::fabs(x[i]));
  return r;
}

// Sum4 of v[0, R), zeros past R: {sum v[0], .., sum v[R - 1], 0, ..}.
template <int R>
ATTN_AVX2 inline __m128 SumRows(const __m256* v) {
  const __m256 z = _mm256_setzero_ps();
  return Sum4(v[0], R > 1 ? v[1] : z, R > 2 ? v[2] : z, R > 3 ? v[3] : z);
}

// R query rows (q0, d apart; 1 to 4) against keys [0, c) three at a time:
// twelve sums for four rows, and each query load feeds three FMAs (the
// loop had run at the loads' rate, two a cycle on a Zen 5, with a load for
// every FMA). `pb` is where the spread prefetch reads (the next page, or
// these keys); `next` the next page or null. Returns the keys done (c
// rounded down to 3).
template <typename L, int R = 4>
ATTN_DECODE int64_t QkThreeKeys(const float* q0, const typename L::T* k, int64_t c, int64_t d,
                                float* s, int64_t lds, const uint8_t* pb, const uint8_t* next) {
  static_assert(R >= 1 && R <= 4, "one to four rows");
  constexpr int64_t kSz = static_cast<int64_t>(sizeof(typename L::T));
  constexpr bool kWide = kSz >= 2;  // as PvFast's
  const int64_t tb = d * kSz;
  int64_t j = 0;
  for (; j + 3 <= c; j += 3) {
    if (!kWide) {
      for (int64_t jj = j; jj < j + 3; ++jj) PrefetchToken(next, tb, jj);
    }
    const typename L::T* kj = k + j * d;
    const uint8_t* pj = pb + j * tb;
    __m256 a[R], b[R], e[R];  // rows' sums against keys j, j + 1, j + 2
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) a[i] = b[i] = e[i] = _mm256_setzero_ps();
    for (int64_t x = 0; x < d; x += 8) {
      if constexpr (kWide) PrefetchLine(pj + 3 * kSz * x);  // the triple's lines, spread
      const __m256 k0 = L::Load(kj + x), k1 = L::Load(kj + d + x), k2 = L::Load(kj + 2 * d + x);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        const __m256 qv = _mm256_loadu_ps(q0 + i * d + x);
        a[i] = _mm256_fmadd_ps(qv, k0, a[i]);
        b[i] = _mm256_fmadd_ps(qv, k1, b[i]);
        e[i] = _mm256_fmadd_ps(qv, k2, e[i]);
      }
    }
    alignas(16) float out[12];
    _mm_store_ps(out, SumRows<R>(a));
    _mm_store_ps(out + 4, SumRows<R>(b));
    _mm_store_ps(out + 8, SumRows<R>(e));
    for (int i = 0; i < R; ++i) {
      s[i * lds + j] = out[i];
      s[i * lds + j + 1] = out[4 + i];
      s[i * lds + j + 2] = out[8 + i];
    }
  }
  return j;
}

template <typename L>
ATTN_DECODE void QkFast(const float* q, int64_t rows, const typename L::T* k, int64_t c, int64_t d,
                        float* s, int64_t lds, const uint8_t* next) {
  constexpr int64_t kSz = static_cast<int64_t>(sizeof(typename L::T));
  constexpr bool kWide = kSz >= 2;  // as PvFast's
  const int64_t tb = d * kSz;
  int64_t r = 0;
  // Four rows against three keys (QkThreeKeys), then two: eight or twelve
  // independent sums, so the loop runs at the FMA units' rate rather than
  // one FMA's latency.
  for (; r + 4 <= rows; r += 4) {
    const float* q0 = q + r * d;
    const uint8_t* pb = r == 0 && next != nullptr ? next : reinterpret_cast<const uint8_t*>(k);
    int64_t j = QkThreeKeys<L>(q0, k, c, d, s + r * lds, lds, pb, r == 0 ? next : nullptr);
    for (; j + 2 <= c; j += 2) {
      if (!kWide && r == 0) {
        PrefetchToken(next, tb, j);
        PrefetchToken(next, tb, j + 1);
      }
      const typename L::T* kj = k + j * d;
      const uint8_t* pj = pb + j * tb;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
      for (int64_t x = 0; x < d; x += 8) {
        if constexpr (kWide) PrefetchLine(pj + 2 * kSz * x);  // the pair's lines, spread
        const __m256 k0 = L::Load(kj + x), k1 = L::Load(kj + d + x);
        const __m256 q0v = _mm256_loadu_ps(q0 + x), q1v = _mm256_loadu_ps(q0 + d + x);
        const __m256 q2v = _mm256_loadu_ps(q0 + 2 * d + x), q3v = _mm256_loadu_ps(q0 + 3 * d + x);
        a0 = _mm256_fmadd_ps(q0v, k0, a0);
        a1 = _mm256_fmadd_ps(q1v, k0, a1);
        a2 = _mm256_fmadd_ps(q2v, k0, a2);
        a3 = _mm256_fmadd_ps(q3v, k0, a3);
        b0 = _mm256_fmadd_ps(q0v, k1, b0);
        b1 = _mm256_fmadd_ps(q1v, k1, b1);
        b2 = _mm256_fmadd_ps(q2v, k1, b2);
        b3 = _mm256_fmadd_ps(q3v, k1, b3);
      }
      alignas(16) float out[8];
      _mm_store_ps(out, Sum4(a0, a1, a2, a3));
      _mm_store_ps(out + 4, Sum4(b0, b1, b2, b3));
      for (int i = 0; i < 4; ++i) {
        s[(r + i) * lds + j] = out[i];
        s[(r + i) * lds + j + 1] = out[4 + i];
      }
    }
    for (; j < c; ++j) {
      if (r == 0) PrefetchToken(next, tb, j);
      const typename L::T* kj = k + j * d;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t x = 0; x < d; x += 8) {
        const __m256 kv = L::Load(kj + x);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + x), kv, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d + x), kv, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + 2 * d + x), kv, a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + 3 * d + x), kv, a3);
      }
      alignas(16) float out[4];
      _mm_store_ps(out, Sum4(a0, a1, a2, a3));
      for (int i = 0; i < 4; ++i) s[(r + i) * lds + j] = out[i];
    }
  }
  if (rows - r >= 2) {  // two or three rows left: together, three keys at a time
    const int64_t rest = rows - r;
    const float* q0 = q + r * d;
    const uint8_t* ahead = r == 0 ? next : nullptr;
    const uint8_t* pb = ahead != nullptr ? ahead : reinterpret_cast<const uint8_t*>(k);
    const int64_t done = rest == 3 ? QkThreeKeys<L, 3>(q0, k, c, d, s + r * lds, lds, pb, ahead)
                                   : QkThreeKeys<L, 2>(q0, k, c, d, s + r * lds, lds, pb, ahead);
    const __m256 z = _mm256_setzero_ps();
    for (int64_t j = done; j < c; ++j) {  // the last one or two keys, a row at a time
      PrefetchToken(ahead, tb, j);
      for (int64_t rr = 0; rr < rest; ++rr) {
        __m256 a = z;
        for (int64_t x = 0; x < d; x += 8) {
          a = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + rr * d + x), L::Load(k + j * d + x), a);
        }
        s[(r + rr) * lds + j] = _mm_cvtss_f32(Sum4(a, z, z, z));
      }
    }
    return;
  }
  for (; r < rows; ++r) {
    const float* qr = q + r * d;
    int64_t j = 0;
    for (; j + 4 <= c; j += 4) {  // one row against four keys
      if (r == 0) {
        for (int64_t jj = j; jj < j + 4; ++jj) PrefetchToken(next, tb, jj);
      }
      const typename L::T* kj = k + j * d;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t x = 0; x < d; x += 8) {
        const __m256 qv = _mm256_loadu_ps(qr + x);
        a0 = _mm256_fmadd_ps(L::Load(kj + x), qv, a0);
        a1 = _mm256_fmadd_ps(L::Load(kj + d + x), qv, a1);
        a2 = _mm256_fmadd_ps(L::Load(kj + 2 * d + x), qv, a2);
        a3 = _mm256_fmadd_ps(L::Load(kj + 3 * d + x), qv, a3);
      }
      _mm_storeu_ps(s + r * lds + j, Sum4(a0, a1, a2, a3));
    }
    for (; j < c; ++j) {
      if (r == 0) PrefetchToken(next, tb, j);
      __m256 a = _mm256_setzero_ps();
      for (int64_t x = 0; x < d; x += 8) {
        a = _mm256_fmadd_ps(_mm256_loadu_ps(qr + x), L::Load(k + j * d + x), a);
      }
      const __m256 z = _mm256_setzero_ps();
      s[r * lds + j] = _mm_cvtss_f32(Sum4(a, z, z, z));
    }
  }
}

template <typename L>
ATTN_DECODE void PvFast(const float* p, int64_t rows, int64_t ldp, const typename L::T* v,
                        int64_t c, int64_t dv, float* o, const uint8_t* next) {
  constexpr int64_t kSz = static_cast<int64_t>(sizeof(typename L::T));
  // 2- and 4-byte elements prefetch the next page a line beside each step
  // of the four-row loops (QK: a key triple's or pair's lines over its
  // channel steps). A burst of a pair's 8 or 16 lines at once stalled the
  // loops on the line fill buffers: bf16 cold, AVX2 forced on a Zen 5,
  // 1 x 32k 4.93 -> 4.22 ms and 32 x 4k 20.1 -> 17.0 (docs/performance.md).
  // 1-byte codes keep a token's lines at once (a line a step would ask for
  // each line four times).
  constexpr bool kWide = kSz >= 2;
  const int64_t tb = dv * kSz;
  int64_t r = 0;
  // Four rows by sixteen columns: eight independent sums per key.
  for (; r + 4 <= rows; r += 4) {
    const float* p0 = p + r * ldp;
    const SpreadPrefetch pf(r == 0 ? next : nullptr, tb, c, dv / 16);
    int64_t x = 0;
    for (; x + 16 <= dv; x += 16) {
      float* o0 = o + r * dv + x;
      __m256 a0 = _mm256_loadu_ps(o0), a1 = _mm256_loadu_ps(o0 + dv);
      __m256 a2 = _mm256_loadu_ps(o0 + 2 * dv), a3 = _mm256_loadu_ps(o0 + 3 * dv);
      __m256 b0 = _mm256_loadu_ps(o0 + 8), b1 = _mm256_loadu_ps(o0 + dv + 8);
      __m256 b2 = _mm256_loadu_ps(o0 + 2 * dv + 8), b3 = _mm256_loadu_ps(o0 + 3 * dv + 8);
      for (int64_t j = 0; j < c; ++j) {
        if constexpr (kWide) {
          pf.Sixteen<kSz>(x / 16, j, reinterpret_cast<const uint8_t*>(v));
        } else {
          pf(x / 16, j);
        }
        const __m256 v0 = L::Load(v + j * dv + x), v1 = L::Load(v + j * dv + x + 8);
        const __m256 w0 = _mm256_broadcast_ss(p0 + j), w1 = _mm256_broadcast_ss(p0 + ldp + j);
        const __m256 w2 = _mm256_broadcast_ss(p0 + 2 * ldp + j);
        const __m256 w3 = _mm256_broadcast_ss(p0 + 3 * ldp + j);
        a0 = _mm256_fmadd_ps(w0, v0, a0);
        a1 = _mm256_fmadd_ps(w1, v0, a1);
        a2 = _mm256_fmadd_ps(w2, v0, a2);
        a3 = _mm256_fmadd_ps(w3, v0, a3);
        b0 = _mm256_fmadd_ps(w0, v1, b0);
        b1 = _mm256_fmadd_ps(w1, v1, b1);
        b2 = _mm256_fmadd_ps(w2, v1, b2);
        b3 = _mm256_fmadd_ps(w3, v1, b3);
      }
      _mm256_storeu_ps(o0, a0);
      _mm256_storeu_ps(o0 + dv, a1);
      _mm256_storeu_ps(o0 + 2 * dv, a2);
      _mm256_storeu_ps(o0 + 3 * dv, a3);
      _mm256_storeu_ps(o0 + 8, b0);
      _mm256_storeu_ps(o0 + dv + 8, b1);
      _mm256_storeu_ps(o0 + 2 * dv + 8, b2);
      _mm256_storeu_ps(o0 + 3 * dv + 8, b3);
    }
    for (; x < dv; x += 8) {
      float* o0 = o + r * dv + x;
      __m256 a0 = _mm256_loadu_ps(o0), a1 = _mm256_loadu_ps(o0 + dv);
      __m256 a2 = _mm256_loadu_ps(o0 + 2 * dv), a3 = _mm256_loadu_ps(o0 + 3 * dv);
      for (int64_t j = 0; j < c; ++j) {
        const __m256 vv = L::Load(v + j * dv + x);
        a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + j), vv, a0);
        a1 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + ldp + j), vv, a1);
        a2 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + 2 * ldp + j), vv, a2);
        a3 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + 3 * ldp + j), vv, a3);
      }
      _mm256_storeu_ps(o0, a0);
      _mm256_storeu_ps(o0 + dv, a1);
      _mm256_storeu_ps(o0 + 2 * dv, a2);
      _mm256_storeu_ps(o0 + 3 * dv, a3);
    }
  }
  // One row by 32 columns: four sums per key.
  for (; r < rows; ++r) {
    const float* pr = p + r * ldp;
    const SpreadPrefetch pf(r == 0 ? next : nullptr, tb, c, dv / 32);
    int64_t x = 0;
    for (; x + 32 <= dv; x += 32) {
      float* orow = o + r * dv + x;
      __m256 a0 = _mm256_loadu_ps(orow), a1 = _mm256_loadu_ps(orow + 8);
      __m256 a2 = _mm256_loadu_ps(orow + 16), a3 = _mm256_loadu_ps(orow + 24);
      for (int64_t j = 0; j < c; ++j) {
        pf(x / 32, j);
        const __m256 w = _mm256_broadcast_ss(pr + j);
        const typename L::T* vj = v + j * dv + x;
        a0 = _mm256_fmadd_ps(w, L::Load(vj), a0);
        a1 = _mm256_fmadd_ps(w, L::Load(vj + 8), a1);
        a2 = _mm256_fmadd_ps(w, L::Load(vj + 16), a2);
        a3 = _mm256_fmadd_ps(w, L::Load(vj + 24), a3);
      }
      _mm256_storeu_ps(orow, a0);
      _mm256_storeu_ps(orow + 8, a1);
      _mm256_storeu_ps(orow + 16, a2);
      _mm256_storeu_ps(orow + 24, a3);
    }
    for (; x < dv; x += 8) {
      float* orow = o + r * dv + x;
      __m256 a0 = _mm256_loadu_ps(orow);
      for (int64_t j = 0; j < c; ++j) {
        a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(pr + j), L::Load(v + j * dv + x), a0);
      }
      _mm256_storeu_ps(orow, a0);
    }
  }
}

}  // namespace attn::internal
