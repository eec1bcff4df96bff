#include "kvcache/decode_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "attn/threading.h"
#include "kernels/simd/softmax_kernels.h"

namespace attn::internal {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The portable loops over widened float32 pages: the portable tier, and
// dims that are not multiples of 8 on every tier.
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

// Keys [lo, hi) that query row t of `p` may see.
void RowRange(const DecodeProblem& p, int64_t t, int64_t* lo, int64_t* hi) {
  const int64_t pos = p.Pos(t);
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
  int64_t p0, p1;  // pages [p0, p1) of every kv head
  Partial part;    // [Hkv][rows] of them
};

struct Scratch {
  LineVector<float> q, s, k, v;  // rows on 64-byte boundaries (page_codec.h)
  std::vector<int64_t> lo, hi;
};

Scratch& ThreadScratch() {
  thread_local Scratch s;
  return s;
}

// One page of kv head g: keys [a, b) of the page at tokens [j0, j0 + T).
struct PageSpan {
  const uint8_t* base;
  const uint8_t *knext, *vnext;  // the same places in the page to prefetch (or null)
  int64_t g, j0, a, b;
  bool whole;                      // every row sees every key of [a, b)
  const uint8_t* ahead = nullptr;  // the page of knext and vnext (or null)
};

// The factors (scaled sides) and block meta (blocked keys) of the page
// read `ahead` pages later, all at once as a page starts: the codes'
// loops prefetch that page's rows a token at a time, but not these
// regions, and without them a cold cache (a server's step, the other
// layers read since) waited on their lines in the softmax and in the
// int4 keys' query preparation: int8 and fp8 steps 10-13% slower at
// 1 x 32k and 32 x 4k (docs/performance.md).
void PrefetchFactors(const DecodeProblem& p, const uint8_t* page) {
  if (page == nullptr) return;
  for (const PageSide* side : {&p.key, &p.value}) {
    for (int64_t b = 0; b < side->factor_bytes; b += 64) {
      PrefetchLine(page + side->factors + b);
    }
  }
}

// c rows of `dim` of a side widened (without their factors) into buf.
const float* Widen(const PageSide& side, const uint8_t* rows, int64_t c, int64_t dim,
                   LineVector<float>* buf) {
  if (static_cast<int64_t>(buf->size()) < c * dim) buf->resize(static_cast<size_t>(c * dim));
  side.codec->widen(rows, c, dim, buf->data());
  return buf->data();
}

// A side's rows [a, a + c) of a page as the loops read them: its codes in
// place (a codec with in-register loops, on a tier that runs them), or
// widened into buf as float32 (blocked keys from their blocks and staging).
struct Rows {
  const PageCodec* codec;  // whose loops read `data`
  const uint8_t* data;
  int64_t row_bytes;
  bool floats;  // `data` is float32 rows (buf)
};

Rows SideRows(const DecodeProblem& p, const PageSide& side, const PageSpan& sp, int64_t dim,
              bool fast, bool keys, LineVector<float>* buf) {
  const int64_t c = sp.b - sp.a;
  if (side.codec->blocked) {
    if (static_cast<int64_t>(buf->size()) < c * dim) buf->resize(static_cast<size_t>(c * dim));
    const uint8_t* stage = p.stage != nullptr ? p.stage[sp.g] : nullptr;
    WidenBlockedKeys(*p.layout, sp.base, stage, sp.j0, sp.a, c, p.fill_start, dim, buf->data());
  } else if (fast && (keys ? side.codec->qk != nullptr : side.codec->pv != nullptr)) {
    return Rows{side.codec, side.Row(sp.base, sp.a - sp.j0), side.row_bytes, false};
  } else {
    Widen(side, side.Row(sp.base, sp.a - sp.j0), c, dim, buf);
  }
  return Rows{&CodecOf(PageFormat::kFloat32), reinterpret_cast<const uint8_t*>(buf->data()),
              dim * 4, true};
}

// A page's per-token factors of keys [a, ...) for each side (null: an
// unscaled side).
struct PageFactors {
  const float *k, *v;
};

// One row's raw dot products with keys [a, a + c) (row entries [ra, rb)
// are live): the keys' factors and the score terms, then the online
// softmax's update of m, l and the row of o; the row ends as the weights,
// times the values' factors.
void UpdateRow(const SoftmaxKernels& sk, const DecodeProblem& p, int64_t h, int64_t pos,
               float* srow, int64_t a, int64_t c, int64_t ra, int64_t rb, PageFactors f,
               float* orow, float* m, float* l) {
  if (rb <= ra) {
    std::fill(srow, srow + c, 0.0f);
    return;
  }
  float* x = srow + (ra - a);
  const int64_t nr = rb - ra;
  const float* kf = f.k != nullptr ? f.k + (ra - a) : nullptr;
  float mb;
  if (p.softcap > 0.0f || p.alibi != nullptr) {
    if (kf != nullptr) sk.times_max(x, nr, 1.0f, kf);
    if (p.softcap > 0.0f) {
      sk.softcap(x, nr, p.scale, p.softcap);
    } else {
      sk.scale(x, nr, p.scale);
    }
    if (p.alibi != nullptr) sk.alibi(x, nr, p.alibi[h], pos, ra);
    mb = sk.scaled_max(x, nr, 1.0f);
  } else {
    mb = sk.times_max(x, nr, p.scale, kf);  // the factors, the scale and the max in one pass
  }
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
  *l += sk.exp_sum_times(x, nr, mnew, f.v != nullptr ? f.v + (ra - a) : nullptr);
}

// Scores, the online softmax's update, and the weighted values of a page.
void AttendPage(const SoftmaxKernels& sk, const Task& task, Scratch& sc, const PageSpan& sp,
                bool fast) {
  const DecodeProblem& p = *task.p;
  const int64_t group = p.hq / p.hkv, rows = group * p.n, d = p.d, dv = p.dv;
  const int64_t T = p.tokens_per_page, g = sp.g, a = sp.a, b = sp.b, c = b - a;
  const PageSide &ks = p.key, &vs = p.value;
  const float* qg = sc.q.data() + g * rows * d;
  float* og = task.part.o + g * rows * dv;
  float* s = sc.s.data();
  PrefetchFactors(p, sp.ahead);
  // Blocked keys score in place where their codec's loops take d.
  const bool scored = fast && ks.codec->blocked &&
                      QkBlockedKeys(*p.layout, sp.base, p.stage != nullptr ? p.stage[g] : nullptr,
                                    sp.j0, a, c, p.fill_start, d, qg, rows, s, T, sp.knext);
  if (!scored) {
    const Rows kr = SideRows(p, ks, sp, d, fast, true, &sc.k);
    if (fast) {
      kr.codec->qk(qg, rows, kr.data, c, d, s, T, kr.floats ? nullptr : sp.knext);
    } else {
      QkPortable(qg, rows, reinterpret_cast<const float*>(kr.data), c, d, s, T);
    }
  }
  // A quantized side's factors: the keys' on the scores, the values' on the
  // weights (0 outside a row's keys).
  const PageFactors f{ks.codec->scaled ? ks.Factors(sp.base) + (a - sp.j0) : nullptr,
                      vs.codec->scaled ? vs.Factors(sp.base) + (a - sp.j0) : nullptr};
  for (int64_t hh = 0; hh < group; ++hh) {
    for (int64_t t = 0; t < p.n; ++t) {
      const int64_t r = hh * p.n + t;
      UpdateRow(sk, p, g * group + hh, p.Pos(t), s + r * T, a, c, std::max(a, sc.lo[t]),
                std::min(b, sc.hi[t]), f, og + r * dv, task.part.m + g * rows + r,
                task.part.l + g * rows + r);
    }
  }
  const Rows vr = SideRows(p, vs, sp, dv, fast, false, &sc.v);
  const uint8_t* vnext = vr.floats ? nullptr : sp.vnext;
  if (sp.whole) {
    if (fast) {
      vr.codec->pv(s, rows, T, vr.data, c, dv, og, vnext);
    } else {
      PvPortable(s, rows, T, reinterpret_cast<const float*>(vr.data), c, dv, og);
    }
    return;
  }
  // An edge page: each row reads only the values of its own keys, so an
  // inf value outside a row's window never meets its 0 weight.
  for (int64_t hh = 0; hh < group; ++hh) {
    for (int64_t t = 0; t < p.n; ++t) {
      const int64_t r = hh * p.n + t;
      const int64_t ra = std::max(a, sc.lo[t]), rb = std::min(b, sc.hi[t]);
      if (rb <= ra) continue;
      const float* srow = s + r * T + (ra - a);
      const uint8_t* vrow = vr.data + (ra - a) * vr.row_bytes;
      if (fast) {
        vr.codec->pv(srow, 1, T, vrow, rb - ra, dv, og + r * dv, nullptr);
      } else {
        PvPortable(srow, 1, T, reinterpret_cast<const float*>(vrow), rb - ra, dv, og + r * dv);
      }
    }
  }
}

// A task: pages [p0, p1) of every kv head, page by page and head by head
// within a page, so that it sweeps the pool in the order the heads' pages
// were allocated (together, one per head, as the layer grew).
void RunTask(const SoftmaxKernels& sk, const Task& task, Scratch& sc) {
  const DecodeProblem& p = *task.p;
  const int64_t group = p.hq / p.hkv, rows = group * p.n, d = p.d, dv = p.dv;
  const int64_t T = p.tokens_per_page;
  sc.q.resize(static_cast<size_t>(p.hkv * rows * d));
  sc.s.resize(static_cast<size_t>(rows * T));
  sc.lo.resize(static_cast<size_t>(p.n));
  sc.hi.resize(static_cast<size_t>(p.n));
  for (int64_t h = 0; h < p.hq; ++h) {  // head h's rows at (h * n + t) * d: group-major
    for (int64_t t = 0; t < p.n; ++t) {
      const float* src = p.q + h * p.q_stride[0] + t * p.q_stride[1];
      float* dst = sc.q.data() + (h * p.n + t) * d;
      for (int64_t x = 0; x < d; ++x) dst[x] = src[x * p.q_stride[2]];
    }
  }
  PinQueryRows(sc.q.data(), static_cast<int64_t>(sc.q.size()));  // unchanged until the task ends
  for (int64_t t = 0; t < p.n; ++t) RowRange(p, t, &sc.lo[t], &sc.hi[t]);
  std::fill(task.part.o, task.part.o + p.hkv * rows * dv, 0.0f);
  std::fill(task.part.m, task.part.m + p.hkv * rows, kNegInf);
  std::fill(task.part.l, task.part.l + p.hkv * rows, 0.0f);
  const int64_t lo_u = *std::min_element(sc.lo.begin(), sc.lo.end());
  const int64_t hi_u = *std::max_element(sc.hi.begin(), sc.hi.end());
  const bool fast = InRegisterTier() && d % 8 == 0 && dv % 8 == 0;
  // How far ahead the loops prefetch, in pages in the order read: three for
  // int8 and fp8 keys (a factor a token), two for int4's blocked keys, one
  // for float keys (measured, as docs/performance.md says).
  const int64_t ahead = p.key.codec->scaled ? 3 : p.key.codec->blocked ? 2 : 1;
  for (int64_t pg = task.p0; pg < task.p1; ++pg) {
    const int64_t j0 = pg * T;
    const int64_t a = std::max(j0, lo_u), b = std::min({j0 + T, p.tokens, hi_u});
    if (b <= a) continue;
    bool whole = true;
    for (int64_t t = 0; t < p.n && whole; ++t) whole = sc.lo[t] <= a && sc.hi[t] >= b;
    for (int64_t g = 0; g < p.hkv; ++g) {
      PageSpan sp{p.pages[g * p.pages_per_head + pg], nullptr, nullptr, g, j0, a, b, whole};
      // The same offsets in the page read `ahead` pages later, to
      // prefetch: a later head's of this page, or one of the next page.
      const int64_t ng = (g + ahead) % p.hkv, npg = pg + (g + ahead) / p.hkv;
      if (npg < task.p1 && npg * T < std::min(p.tokens, hi_u)) {
        const uint8_t* nb = p.pages[ng * p.pages_per_head + npg];
        const int64_t off = std::max<int64_t>(0, lo_u - npg * T);
        sp.knext = p.key.Row(nb, off);
        sp.vnext = p.value.Row(nb, off);
        sp.ahead = nb;
      }
      AttendPage(sk, task, sc, sp, fast);
    }
  }
  UnpinQueryRows();
}

// Merges kv head g's partials of a problem's slices and writes its rows.
void Finish(const DecodeProblem& p, int64_t g, const Task* slices, int64_t count) {
  const int64_t group = p.hq / p.hkv, dv = p.dv;
  for (int64_t hh = 0; hh < group; ++hh) {
    const int64_t h = g * group + hh;
    const float sink = p.sink != nullptr ? p.sink[h] : kNegInf;
    for (int64_t t = 0; t < p.n; ++t) {
      const int64_t r = hh * p.n + t;
      float m = sink;
      bool nan = false;  // a NaN score (a NaN query, say): the row is NaN, as in prefill
      for (int64_t s = 0; s < count; ++s) {
        const float ms = slices[s].part.m[g * group * p.n + r];
        if (std::isnan(ms)) nan = true;
        m = std::max(m, ms);
      }
      float* out = p.out + (h * p.n + t) * dv;
      if (nan) {
        std::fill(out, out + dv, std::numeric_limits<float>::quiet_NaN());
        if (p.lse != nullptr) p.lse[h * p.n + t] = std::numeric_limits<float>::quiet_NaN();
        continue;
      }
      std::fill(out, out + dv, 0.0f);
      if (m == kNegInf) {
        if (p.lse != nullptr) p.lse[h * p.n + t] = m;
        continue;
      }
      double total = sink == kNegInf ? 0.0 : std::exp(static_cast<double>(sink - m));
      for (int64_t s = 0; s < count; ++s) {
        const Partial& part = slices[s].part;
        const int64_t gr = g * group * p.n + r;  // the row among all kv heads' rows
        if (part.m[gr] == kNegInf) continue;
        const float w = std::exp(part.m[gr] - m);
        total += static_cast<double>(part.l[gr]) * w;
        const float* o = part.o + gr * dv;
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
  const SoftmaxKernels& sk = GetSoftmaxKernels();
  if (threads <= 0) threads = ComputeThreads();
  int64_t live = 0;
  for (const DecodeProblem* p : problems) live += p->n > 0 ? 1 : 0;
  // Split-K when the problems cannot keep the team busy; a slice keeps at
  // least kMinSlicePages pages a head, so its merge costs little against
  // its reads.
  constexpr int64_t kMinSlicePages = 4;
  const int64_t want = live > 0 && live < 2 * threads ? (2 * threads + live - 1) / live : 1;
  std::vector<Task> tasks;
  std::vector<std::pair<size_t, size_t>> slices_at;  // (first task, count) per problem
  std::vector<float> storage;
  for (int pass = 0; pass < 2; ++pass) {  // sizes, then the tasks with their storage
    size_t at = 0;
    for (const DecodeProblem* p : problems) {
      if (p->n == 0) continue;
      int64_t first, last;
      VisiblePages(*p, &first, &last);
      const int64_t visible = last - first;
      const int64_t slices = std::max<int64_t>(1, std::min(want, visible / kMinSlicePages));
      const int64_t rows = p->hq * p->n;  // of every kv head
      if (pass == 1) slices_at.emplace_back(tasks.size(), static_cast<size_t>(slices));
      for (int64_t s = 0; s < slices; ++s) {
        if (pass == 1) {
          float* o = storage.data() + at;
          tasks.push_back(Task{p, first + visible * s / slices, first + visible * (s + 1) / slices,
                               Partial{o, o + rows * p->dv, o + rows * p->dv + rows}});
        }
        at += static_cast<size_t>(rows * (p->dv + 2));
      }
    }
    if (pass == 0) storage.resize(at);
  }
  std::atomic<bool> stop{false};
  auto run = [&](int64_t i) {
    if (stop.load(std::memory_order_relaxed)) return;
    if (cancelled != nullptr && cancelled->load(std::memory_order_relaxed)) {
      stop = true;
      return;
    }
    RunTask(sk, tasks[static_cast<size_t>(i)], ThreadScratch());
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
  for (const auto& [first, count] : slices_at) {
    const Task& t = tasks[first];
    for (int64_t g = 0; g < t.p->hkv; ++g)
      Finish(*t.p, g, &tasks[first], static_cast<int64_t>(count));
  }
  // Problems with no query rows have nothing to write.
  return Status::Ok();
}

}  // namespace attn::internal
