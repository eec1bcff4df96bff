#include "kernels/decode_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "attn/threading.h"
#include "kernels/softmax_kernels.h"
#include "support/half_kernels.h"
#include "support/isa_cap.h"
#include "support/simd.h"

namespace attn::internal {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// s[r * lds + j] = q_r . k_j for r < rows, j < c (q rows dense, d long).
using QkFn = void (*)(const float* q, int64_t rows, const float* k, int64_t c, int64_t d, float* s,
                      int64_t lds);
// o[r * dv + x] += sum_j p[r * ldp + j] * v[j * dv + x].
using PvFn = void (*)(const float* p, int64_t rows, int64_t ldp, const float* v, int64_t c,
                      int64_t dv, float* o);

void QkPortable(const float* q, int64_t rows, const float* k, int64_t c, int64_t d, float* s,
                int64_t lds) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < c; ++j) {
      float acc = 0.0f;
      for (int64_t x = 0; x < d; ++x) acc += q[r * d + x] * k[j * d + x];
      s[r * lds + j] = acc;
    }
  }
}

void PvPortable(const float* p, int64_t rows, int64_t ldp, const float* v, int64_t c, int64_t dv,
                float* o) {
  for (int64_t r = 0; r < rows; ++r) {
    float* orow = o + r * dv;
    for (int64_t j = 0; j < c; ++j) {
      const float w = p[r * ldp + j];
      if (w == 0.0f) continue;
      for (int64_t x = 0; x < dv; ++x) orow[x] += w * v[j * dv + x];
    }
  }
}

ATTN_AVX2 inline __m256 Load8(const float* p, int64_t left, __m256i tail) {
  return left >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, tail);
}

// Sums of four vectors' lanes: {sum a0, sum a1, sum a2, sum a3}.
ATTN_AVX2 inline __m128 Sum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

ATTN_AVX2 void QkAvx2(const float* q, int64_t rows, const float* k, int64_t c, int64_t d, float* s,
                      int64_t lds) {
  const __m256i tail = LaneMask256(d % 8);
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* q0 = q + r * d;
    for (int64_t j = 0; j < c; ++j) {
      const float* kj = k + j * d;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t x = 0; x < d; x += 8) {
        const __m256 kv = Load8(kj + x, d - x, tail);
        a0 = _mm256_fmadd_ps(Load8(q0 + x, d - x, tail), kv, a0);
        a1 = _mm256_fmadd_ps(Load8(q0 + d + x, d - x, tail), kv, a1);
        a2 = _mm256_fmadd_ps(Load8(q0 + 2 * d + x, d - x, tail), kv, a2);
        a3 = _mm256_fmadd_ps(Load8(q0 + 3 * d + x, d - x, tail), kv, a3);
      }
      alignas(16) float out[4];
      _mm_store_ps(out, Sum4(a0, a1, a2, a3));
      for (int i = 0; i < 4; ++i) s[(r + i) * lds + j] = out[i];
    }
  }
  for (; r < rows; ++r) {
    const float* qr = q + r * d;
    int64_t j = 0;
    for (; j + 4 <= c; j += 4) {  // one row against four keys
      const float* kj = k + j * d;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t x = 0; x < d; x += 8) {
        const __m256 qv = Load8(qr + x, d - x, tail);
        a0 = _mm256_fmadd_ps(Load8(kj + x, d - x, tail), qv, a0);
        a1 = _mm256_fmadd_ps(Load8(kj + d + x, d - x, tail), qv, a1);
        a2 = _mm256_fmadd_ps(Load8(kj + 2 * d + x, d - x, tail), qv, a2);
        a3 = _mm256_fmadd_ps(Load8(kj + 3 * d + x, d - x, tail), qv, a3);
      }
      _mm_storeu_ps(s + r * lds + j, Sum4(a0, a1, a2, a3));
    }
    for (; j < c; ++j) {
      __m256 a = _mm256_setzero_ps();
      for (int64_t x = 0; x < d; x += 8) {
        a = _mm256_fmadd_ps(Load8(qr + x, d - x, tail), Load8(k + j * d + x, d - x, tail), a);
      }
      const __m256 z = _mm256_setzero_ps();
      s[r * lds + j] = _mm_cvtss_f32(Sum4(a, z, z, z));
    }
  }
}

ATTN_AVX2 void PvAvx2(const float* p, int64_t rows, int64_t ldp, const float* v, int64_t c,
                      int64_t dv, float* o) {
  const __m256i tail = LaneMask256(dv % 8);
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* p0 = p + r * ldp;
    for (int64_t x = 0; x < dv; x += 8) {
      const int64_t left = dv - x;
      float* o0 = o + r * dv + x;
      __m256 a0 = Load8(o0, left, tail), a1 = Load8(o0 + dv, left, tail);
      __m256 a2 = Load8(o0 + 2 * dv, left, tail), a3 = Load8(o0 + 3 * dv, left, tail);
      for (int64_t j = 0; j < c; ++j) {
        const __m256 vv = Load8(v + j * dv + x, left, tail);
        a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + j), vv, a0);
        a1 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + ldp + j), vv, a1);
        a2 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + 2 * ldp + j), vv, a2);
        a3 = _mm256_fmadd_ps(_mm256_broadcast_ss(p0 + 3 * ldp + j), vv, a3);
      }
      if (left >= 8) {
        _mm256_storeu_ps(o0, a0);
        _mm256_storeu_ps(o0 + dv, a1);
        _mm256_storeu_ps(o0 + 2 * dv, a2);
        _mm256_storeu_ps(o0 + 3 * dv, a3);
      } else {
        _mm256_maskstore_ps(o0, tail, a0);
        _mm256_maskstore_ps(o0 + dv, tail, a1);
        _mm256_maskstore_ps(o0 + 2 * dv, tail, a2);
        _mm256_maskstore_ps(o0 + 3 * dv, tail, a3);
      }
    }
  }
  for (; r < rows; ++r) {
    const float* pr = p + r * ldp;
    for (int64_t x = 0; x < dv; x += 32) {  // four vectors of the row at once
      float* orow = o + r * dv + x;
      const int64_t left = dv - x;
      const __m256i m0 = LaneMask256(left), m1 = LaneMask256(left - 8);
      const __m256i m2 = LaneMask256(left - 16), m3 = LaneMask256(left - 24);
      __m256 a0 = _mm256_maskload_ps(orow, m0), a1 = _mm256_maskload_ps(orow + 8, m1);
      __m256 a2 = _mm256_maskload_ps(orow + 16, m2), a3 = _mm256_maskload_ps(orow + 24, m3);
      for (int64_t j = 0; j < c; ++j) {
        const __m256 w = _mm256_broadcast_ss(pr + j);
        const float* vj = v + j * dv + x;
        a0 = _mm256_fmadd_ps(w, _mm256_maskload_ps(vj, m0), a0);
        a1 = _mm256_fmadd_ps(w, _mm256_maskload_ps(vj + 8, m1), a1);
        a2 = _mm256_fmadd_ps(w, _mm256_maskload_ps(vj + 16, m2), a2);
        a3 = _mm256_fmadd_ps(w, _mm256_maskload_ps(vj + 24, m3), a3);
      }
      _mm256_maskstore_ps(orow, m0, a0);
      _mm256_maskstore_ps(orow + 8, m1, a1);
      _mm256_maskstore_ps(orow + 16, m2, a2);
      _mm256_maskstore_ps(orow + 24, m3, a3);
    }
  }
}

struct Kernels {
  QkFn qk;
  PvFn pv;
  const SoftmaxKernels* softmax;
  const HalfKernels* half;
};

const Kernels& GetKernels() {
  static const Kernels k = [] {
    // The AVX-512 tier runs the AVX2 dot kernels: the task is bound by the
    // memory it reads, not by the vector width.
    const bool avx2 = KernelTier() >= IsaTier::kAvx2;
    return Kernels{avx2 ? QkAvx2 : QkPortable, avx2 ? PvAvx2 : PvPortable, &GetSoftmaxKernels(),
                   &GetHalfKernels()};
  }();
  return k;
}

int ElemBytes(PageElem e) { return e == PageElem::kFloat32 ? 4 : 2; }

// Keys [lo, hi) that query row t of `p` may see.
void RowRange(const DecodeProblem& p, int64_t t, int64_t* lo, int64_t* hi) {
  const int64_t pos = p.tokens - p.n + t;
  int64_t begin = 0, end = p.causal ? std::min(p.tokens, pos + 1) : p.tokens;
  if (p.window_left >= 0) begin = std::max<int64_t>(0, pos - p.window_left);
  if (p.window_right >= 0 && p.window_right < p.tokens - pos) {
    end = std::min(end, pos + p.window_right + 1);
  }
  *lo = begin;
  *hi = std::max(begin, end);
}

// Partial results of a task: o [R, Dv] unnormalised, m and l [R].
struct Partial {
  float* o;
  float* m;
  float* l;
};

struct Task {
  const DecodeProblem* p;
  int64_t g;       // kv head
  int64_t p0, p1;  // pages [p0, p1)
  Partial part;
};

struct Scratch {
  std::vector<float> q, s, k, v;
  std::vector<int64_t> lo, hi;
};

Scratch& ThreadScratch() {
  thread_local Scratch s;
  return s;
}

const float* Widen(const Kernels& kern, PageElem e, const uint8_t* src, int64_t n,
                   std::vector<float>* buf) {
  if (e == PageElem::kFloat32) return reinterpret_cast<const float*>(src);
  if (static_cast<int64_t>(buf->size()) < n) buf->resize(static_cast<size_t>(n));
  const auto* h = reinterpret_cast<const uint16_t*>(src);
  if (e == PageElem::kBFloat16) {
    kern.half->bf16_to_f32(h, buf->data(), n);
  } else {
    kern.half->f16_to_f32(h, buf->data(), n);
  }
  return buf->data();
}

// One row's scores of keys [a, a + c) (row entries [ra, rb) are live): the
// score terms, then the online softmax's update of m, l and the row of o.
void UpdateRow(const Kernels& kern, const DecodeProblem& p, int64_t h, int64_t pos, float* srow,
               int64_t a, int64_t c, int64_t ra, int64_t rb, float* orow, float* m, float* l) {
  const SoftmaxKernels& sk = *kern.softmax;
  if (rb <= ra) {
    std::fill(srow, srow + c, 0.0f);
    return;
  }
  float* x = srow + (ra - a);
  const int64_t nr = rb - ra;
  if (p.softcap > 0.0f) {
    sk.softcap(x, nr, p.scale, p.softcap);
  } else {
    sk.scale(x, nr, p.scale);
  }
  if (p.alibi != nullptr) sk.alibi(x, nr, p.alibi[h], pos, ra);
  const float mb = sk.scaled_max(x, nr, 1.0f);
  const float mnew = std::isnan(mb) ? mb : std::max(*m, mb);
  std::fill(srow, x, 0.0f);
  std::fill(x + nr, srow + c, 0.0f);
  if (mnew == kNegInf) {  // every live score is -inf: nothing seen yet
    std::fill(x, x + nr, 0.0f);
    return;
  }
  if (*m != mnew) {
    const float alpha = *m == kNegInf ? 0.0f : std::exp(*m - mnew);
    sk.scale(orow, p.dv, alpha);
    *l *= alpha;
    *m = mnew;
  }
  *l += sk.exp_sum(x, nr, 1.0f, mnew);
}

void RunTask(const Kernels& kern, const Task& task, Scratch& sc) {
  const DecodeProblem& p = *task.p;
  const int64_t group = p.hq / p.hkv, rows = group * p.n, d = p.d, dv = p.dv;
  const int64_t T = p.tokens_per_page, es = ElemBytes(p.elem);
  sc.q.resize(static_cast<size_t>(rows * d));
  sc.s.resize(static_cast<size_t>(rows * T));
  sc.lo.resize(static_cast<size_t>(p.n));
  sc.hi.resize(static_cast<size_t>(p.n));
  for (int64_t hh = 0; hh < group; ++hh) {
    const int64_t h = task.g * group + hh;
    for (int64_t t = 0; t < p.n; ++t) {
      const float* src = p.q + h * p.q_stride[0] + t * p.q_stride[1];
      float* dst = sc.q.data() + (hh * p.n + t) * d;
      for (int64_t x = 0; x < d; ++x) dst[x] = src[x * p.q_stride[2]];
    }
  }
  for (int64_t t = 0; t < p.n; ++t) RowRange(p, t, &sc.lo[t], &sc.hi[t]);
  std::fill(task.part.o, task.part.o + rows * dv, 0.0f);
  std::fill(task.part.m, task.part.m + rows, kNegInf);
  std::fill(task.part.l, task.part.l + rows, 0.0f);
  const int64_t lo_u = *std::min_element(sc.lo.begin(), sc.lo.end());
  const int64_t hi_u = *std::max_element(sc.hi.begin(), sc.hi.end());
  for (int64_t pg = task.p0; pg < task.p1; ++pg) {
    const int64_t j0 = pg * T;
    const int64_t a = std::max(j0, lo_u), b = std::min({j0 + T, p.tokens, hi_u});
    if (b <= a) continue;
    const int64_t c = b - a;
    const uint8_t* base = p.pages[task.g * p.pages_per_head + pg];
    const float* kf = Widen(kern, p.elem, base + (a - j0) * d * es, c * d, &sc.k);
    kern.qk(sc.q.data(), rows, kf, c, d, sc.s.data(), T);
    for (int64_t hh = 0; hh < group; ++hh) {
      for (int64_t t = 0; t < p.n; ++t) {
        const int64_t r = hh * p.n + t;
        UpdateRow(kern, p, task.g * group + hh, p.tokens - p.n + t, sc.s.data() + r * T, a, c,
                  std::max(a, sc.lo[t]), std::min(b, sc.hi[t]), task.part.o + r * dv,
                  task.part.m + r, task.part.l + r);
      }
    }
    const float* vf = Widen(kern, p.elem, base + T * d * es + (a - j0) * dv * es, c * dv, &sc.v);
    kern.pv(sc.s.data(), rows, T, vf, c, dv, task.part.o);
  }
}

// Merges the partials of one kv head's slices and writes its rows.
void Finish(const DecodeProblem& p, int64_t g, const Task* slices, int64_t count) {
  const int64_t group = p.hq / p.hkv, dv = p.dv;
  for (int64_t hh = 0; hh < group; ++hh) {
    const int64_t h = g * group + hh;
    const float sink = p.sink != nullptr ? p.sink[h] : kNegInf;
    for (int64_t t = 0; t < p.n; ++t) {
      const int64_t r = hh * p.n + t;
      float m = sink;
      for (int64_t s = 0; s < count; ++s) m = std::max(m, slices[s].part.m[r]);
      float* out = p.out + (h * p.n + t) * dv;
      std::fill(out, out + dv, 0.0f);
      if (m == kNegInf || std::isnan(m)) {
        if (p.lse != nullptr) p.lse[h * p.n + t] = m;
        continue;
      }
      double total = sink == kNegInf ? 0.0 : std::exp(static_cast<double>(sink - m));
      for (int64_t s = 0; s < count; ++s) {
        const Partial& part = slices[s].part;
        if (part.m[r] == kNegInf) continue;
        const float w = std::exp(part.m[r] - m);
        total += static_cast<double>(part.l[r]) * w;
        const float* o = part.o + r * dv;
        for (int64_t x = 0; x < dv; ++x) out[x] += w * o[x];
      }
      const float inv = static_cast<float>(1.0 / total);
      for (int64_t x = 0; x < dv; ++x) out[x] *= inv;
      if (p.lse != nullptr) p.lse[h * p.n + t] = m + static_cast<float>(std::log(total));
    }
  }
}

// Pages of `p` that some row may read: [*first, *last).
void VisiblePages(const DecodeProblem& p, int64_t* first, int64_t* last) {
  int64_t lo = p.tokens, hi = 0;
  for (int64_t t = 0; t < p.n; ++t) {
    int64_t a, b;
    RowRange(p, t, &a, &b);
    if (b > a) {
      lo = std::min(lo, a);
      hi = std::max(hi, b);
    }
  }
  const int64_t T = p.tokens_per_page;
  *first = hi > lo ? lo / T : 0;
  *last = hi > lo ? (hi + T - 1) / T : 0;
}

}  // namespace

Status RunDecodeAttention(const std::vector<const DecodeProblem*>& problems, int threads,
                          const std::atomic<bool>* cancelled) {
  const Kernels& kern = GetKernels();
  if (threads <= 0) threads = ComputeThreads();
  int64_t heads = 0;
  for (const DecodeProblem* p : problems) heads += p->n > 0 ? p->hkv : 0;
  // Split-K when the kv heads cannot keep the team busy; a slice keeps at
  // least kMinSlicePages pages, so its merge costs little against its reads.
  constexpr int64_t kMinSlicePages = 8;
  const int64_t want = heads > 0 && heads < 2 * threads ? (2 * threads + heads - 1) / heads : 1;
  std::vector<Task> tasks;
  std::vector<std::pair<size_t, size_t>> heads_at;  // (first task, count) per (problem, g)
  std::vector<float> storage;
  size_t floats = 0;
  for (int pass = 0; pass < 2; ++pass) {  // sizes, then the tasks with their storage
    size_t at = 0;
    for (const DecodeProblem* p : problems) {
      if (p->n == 0) continue;
      int64_t first, last;
      VisiblePages(*p, &first, &last);
      const int64_t visible = last - first;
      const int64_t slices = std::max<int64_t>(1, std::min(want, visible / kMinSlicePages));
      const int64_t rows = p->hq / p->hkv * p->n;
      for (int64_t g = 0; g < p->hkv; ++g) {
        if (pass == 1) heads_at.emplace_back(tasks.size(), static_cast<size_t>(slices));
        for (int64_t s = 0; s < slices; ++s) {
          if (pass == 1) {
            float* o = storage.data() + at;
            tasks.push_back(Task{p, g, first + visible * s / slices,
                                 first + visible * (s + 1) / slices,
                                 Partial{o, o + rows * p->dv, o + rows * p->dv + rows}});
          }
          at += static_cast<size_t>(rows * (p->dv + 2));
        }
      }
    }
    if (pass == 0) {
      floats = at;
      storage.resize(floats);
    }
  }
  std::atomic<bool> stop{false};
  auto run = [&](int64_t i) {
    if (stop.load(std::memory_order_relaxed)) return;
    if (cancelled != nullptr && cancelled->load(std::memory_order_relaxed)) {
      stop = true;
      return;
    }
    RunTask(kern, tasks[static_cast<size_t>(i)], ThreadScratch());
  };
  const int64_t n = static_cast<int64_t>(tasks.size());
  const int team = static_cast<int>(std::min<int64_t>(threads, n));
  if (team <= 1) {
    for (int64_t i = 0; i < n; ++i) run(i);
  } else {
#pragma omp parallel for num_threads(team) schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i) run(i);
  }
  if (stop.load() || (cancelled != nullptr && cancelled->load())) {
    return Status::Cancelled("extend: cancelled");
  }
  for (const auto& [first, count] : heads_at) {
    const Task& t = tasks[first];
    Finish(*t.p, t.g, &tasks[first], static_cast<int64_t>(count));
  }
  // Problems with no query rows have nothing to write.
  return Status::Ok();
}

}  // namespace attn::internal
