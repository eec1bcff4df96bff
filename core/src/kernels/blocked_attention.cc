// Blocked online-softmax attention (FlashAttention-style) on oneDNN matmuls.
// Tasks are (batch, head, query block); each walks its key blocks: S = Q K^T,
// the online softmax on S (running max and sum, O rescaled by exp(m_old -
// m_new)), O += P V. Only per-thread block buffers exist, never Lq x Lk.
// With the weights wanted, [Lq, Lk] is the output anyway: matmul, oneDNN's
// softmax, matmul on each query block's dense weight rows (the exact path).
// We parallelise over tasks with OpenMP and build primitives for one thread
// (oneDNN runs single-threaded inside a parallel region). The band's edge
// blocks, 64 keys wide, run on register-tiled kernels of our own instead
// (tile_matmul.h), and rows that need only the scale take the online
// softmax step a whole block per call (SoftmaxKernels::online_block).
// Strided blocks are packed dense per thread first: oneDNN 2.6 picks gemm:jit
// over brgemm for strided views, and a 512x64 pack costs ~2 us against ~10-20
// us saved.
#include "kernels/blocked_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <dnnl.hpp>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "attn/threading.h"
#include "kernels/block_operands.h"
#include "kernels/primitive_cache.h"
#include "kernels/simd/small_matmul.h"
#include "kernels/simd/softmax_kernels.h"
#include "kernels/simd/tile_matmul.h"

namespace attn::internal {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Block sizes: a 256x512 score block (512 KiB) and its K/V blocks fit the
// 2 MiB L2 with room to spare; measured best on the benchmark shapes, on
// AVX-512 (brgemm) and on the AVX2 tier (gemm:jit) alike: a sweep of
// 64-256 x 256-1024 on AVX2 stayed within 5% of this, noise included.
constexpr int64_t kBlockQ = 256;
constexpr int64_t kBlockK = 512;
constexpr int64_t kMinBlockQ = 32;
// The key blocks of a band's edges (RunOnline): small enough that a causal
// diagonal wastes little, large enough that the per-block work (K^T, the
// row passes) stays small beside the math. On the vector tiers they run on
// the tile kernels (tile_matmul.h), which cost nothing per call; 32-key
// edges measured 5-9% slower than 64 on the causal and window rows.
constexpr int64_t kEdgeK = 64;
// Rows per key span in an edge block (RowSpans): the tile kernels' height.
constexpr int64_t kSpanRows = 6;

SmallMatmulFn SmallMatmul() {
  static const SmallMatmulFn kernel = SmallMatmulFor(KernelTier());
  return kernel;
}

class BlockedAttention {
 public:
  BlockedAttention(const AttentionProblem& p, int64_t block_q)
      : p_(p),
        kern_(GetSoftmaxKernels()),
        tile_(p.bf16 ? nullptr : GetTileKernels()),
        bq_(block_q),
        nqb_((p.lq + block_q - 1) / block_q),
        nbh_(p.batch * p.heads),
        group_(TaskGroup(p)),
        nbg_(p.batch * (p.heads / group_)) {}

  // Query heads per task: with GQA (and no weights wanted), all the heads
  // that read one kv head, so that each K/V block is read once for them and
  // multiplied as one taller block.
  static int64_t TaskGroup(const AttentionProblem& p) {
    return p.weights == nullptr && p.kv_group > 1 && p.heads % p.kv_group == 0 ? p.kv_group : 1;
  }

  int64_t num_tasks() const { return nbg_ * nqb_; }

  // Every head at once, for a problem that is one query block and one key
  // block per head and too small for more than one thread: S = Q K^T for all
  // heads in one batched matmul, the softmax rows, then O = P V in another.
  // Per-head blocks would pay oneDNN's per-execute cost 2 * B * H times over
  // a few microseconds of math. Buffers are bounded by kSerialFlops.
  Status RunAllHeads(Workspace& ws, const std::atomic<bool>* cancelled) const {
    if (cancelled != nullptr && cancelled->load(std::memory_order_relaxed)) {
      return Status::Cancelled("attention: cancelled");
    }
    const int64_t lq = p_.lq, lk = p_.lk, d = p_.d, dv = p_.dv;
    const float* q = DenseHeads(p_.q, lq, d, ws.qp);
    const float* v = DenseHeads(p_.v, lk, dv, ws.vp);
    // The weights are dense [B, H, Lq, Lk]: S goes straight into them.
    float* s = p_.weights != nullptr ? p_.weights : Workspace::Ensure(ws.s, nbh_ * lq * lk);
    // Per-head products this small cost oneDNN's gemm:jit more in set-up
    // than in math; the AVX2 tier has a kernel of its own for them.
    const SmallMatmulFn small = SmallMatmul();
    const bool use_small = small != nullptr && lq * lk * std::max(d, dv) <= kSmallMatmulMaxMacs;
    if (use_small) {
      float* kt = Workspace::Ensure(ws.kp, nbh_ * d * lk);  // K^T of each head, [d, Lk]
      for (int64_t bh = 0; bh < nbh_; ++bh) {
        const float* k = Row(p_.k, bh / p_.heads, bh % p_.heads, 0);
        float* dst = kt + bh * d * lk;
        for (int64_t j = 0; j < lk; ++j) {
          for (int64_t c = 0; c < d; ++c)
            dst[c * lk + j] = k[j * p_.k.stride[2] + c * p_.k.stride[3]];
        }
        small(lq, lk, d, q + bh * lq * d, d, dst, lk, nullptr, s + bh * lq * lk, lk);
      }
    } else {
      const float* k = DenseHeads(p_.k, lk, d, ws.kp);
      MatmulShape qk{lq, lk, d, d, d, lk, /*b_transposed=*/true, false, false, 1};
      qk.batch = nbh_, qk.a_batch_stride = lq * d, qk.b_batch_stride = lk * d;
      qk.c_batch_stride = lq * lk;
      Matmul(qk, q, k, s);
    }

    // Softmax rows, left unnormalised unless they are the returned weights;
    // inv[r] is what row r of P V is then multiplied by.
    float* inv = Workspace::Ensure(ws.l, nbh_ * lq);
    const bool general_mask = p_.kpm != nullptr || p_.bias != nullptr;
    for (int64_t r = 0; r < nbh_ * lq; ++r) {
      const int64_t bh = r / lq, i = r % lq;
      float* row = s + r * lk;
      const int64_t valid = p_.causal ? std::min(i + 1, lk) : lk;
      float row_scale = p_.scale;
      if (general_mask) {
        ApplyScores(row, valid, bh / p_.heads, bh % p_.heads, i, 0);
        row_scale = 1.0f;  // ApplyScores has scaled the row
      }
      const float m = kern_.scaled_max(row, valid, row_scale);
      if (m == kNegInf) {  // every key masked: P = 0 and the output row is 0
        std::fill(row, row + lk, 0.0f);
        inv[r] = 0.0f;
        continue;
      }
      const float sum = kern_.exp_sum(row, valid, row_scale, m);  // NaN stays NaN
      std::fill(row + valid, row + lk, 0.0f);
      inv[r] = 1.0f / sum;
      if (p_.weights != nullptr) {
        kern_.scale(row, lk, inv[r]);
        inv[r] = 1.0f;
      }
    }

    float* o = Workspace::Ensure(ws.o, nbh_ * lq * dv);
    if (use_small) {
      for (int64_t bh = 0; bh < nbh_; ++bh) {
        small(lq, dv, lk, s + bh * lq * lk, lk, v + bh * lk * dv, dv, nullptr, o + bh * lq * dv,
              dv);
      }
    } else {
      MatmulShape pv{lq, dv, lk, lk, dv, dv, false, false, false, 1};
      pv.batch = nbh_, pv.a_batch_stride = lq * lk, pv.b_batch_stride = lk * dv;
      pv.c_batch_stride = lq * dv;
      Matmul(pv, s, v, o);
    }
    for (int64_t r = 0; r < nbh_ * lq; ++r) {
      const int64_t bh = r / lq, i = r % lq;
      float* dst = p_.out + (bh / p_.heads) * p_.out_stride[0] +
                   (bh % p_.heads) * p_.out_stride[1] + i * p_.out_stride[2];
      for (int64_t c = 0; c < dv; ++c) dst[c] = o[r * dv + c] * inv[r];
    }
    return Status::Ok();
  }

  // Runs task t. Largest query blocks come first (t = 0 is the last block),
  // which balances causal work under dynamic scheduling.
  Status RunTask(int64_t t, Workspace& ws, const std::atomic<bool>* cancelled) const {
    if (cancelled != nullptr && cancelled->load(std::memory_order_relaxed)) {
      return Status::Cancelled("attention: cancelled");
    }
    const int64_t qb = nqb_ - 1 - t / nbg_;
    const int64_t bg = t % nbg_, groups = p_.heads / group_;
    // h: the first of the task's group_ query heads.
    Block blk{bg / groups, (bg % groups) * group_, qb * bq_, std::min(bq_, p_.lq - qb * bq_)};
    if (p_.weights != nullptr) {
      const float* q = DenseRows(Row(p_.q, blk.b, blk.h, blk.q0), blk.qn, p_.d, p_.q.stride[2],
                                 p_.q.stride[3], ws.qp);
      float* out =
          p_.out + blk.b * p_.out_stride[0] + blk.h * p_.out_stride[1] + blk.q0 * p_.out_stride[2];
      return RunExactBlock(p_, {blk.b, blk.h, blk.q0, blk.qn}, q, out, {ws.kp, ws.vp, ws.m, ws.o});
    }
    return RunOnline(blk, ws, cancelled);
  }

 private:
  struct Block {
    int64_t b, h, q0, qn;
  };

  static const float* Row(const Strided4D& t, int64_t b, int64_t h, int64_t i) {
    return t.data + b * t.stride[0] + h * t.stride[1] + i * t.stride[2];
  }
  // All heads of `t` ([B, H, rows, cols]) as dense [B * H, rows, cols]:
  // the tensor itself when it is laid out so, else a copy in `buf`.
  const float* DenseHeads(const Strided4D& t, int64_t rows, int64_t cols, FloatBuffer& buf) const {
    const int64_t plane = rows * cols;
    const bool dense = t.stride[3] == 1 && (rows == 1 || t.stride[2] == cols) &&
                       (p_.heads == 1 || t.stride[1] == plane) &&
                       (p_.batch == 1 || t.stride[0] == p_.heads * plane);
    if (dense) return t.data;
    float* dst = Workspace::Ensure(buf, nbh_ * plane);
    for (int64_t bh = 0; bh < nbh_; ++bh) {
      CopyRows(Row(t, bh / p_.heads, bh % p_.heads, 0), rows, cols, t.stride[2], t.stride[3],
               dst + bh * plane);
    }
    return dst;
  }

  // The online path: walk key blocks, keep a running max and sum per row.
  //
  // The keys the block's rows see form a band: both ends of a row's range
  // rise with the row. The middle of the band, seen by every row, is walked
  // in blocks of kBlockK; its two edges (a causal diagonal, a window's left
  // end), which only some rows see, in blocks of kEdgeK, each multiplied
  // for just the rows that see any of its keys. So a causal diagonal costs
  // about a sixth more than its triangle instead of twice it.
  Status RunOnline(const Block& blk, Workspace& ws, const std::atomic<bool>* cancelled) const {
    // The task's rows: group_ heads per query position, position-major (row
    // r is position q0 + r / G of head h + r % G), so that the key range
    // still rises with the row.
    const int64_t g = group_, qn = blk.qn * g, q0 = blk.q0, d = p_.d, dv = p_.dv;
    const auto* q = static_cast<const char*>(TaskQueries(p_, g, blk.b, blk.h, q0, blk.qn, ws));
    const int64_t q_bytes = p_.bf16 ? 2 : 4;  // the compute type's
    int64_t lo_first = 0, hi_first = 0, lo_last = 0, hi_last = 0;
    p_.KeyRange(q0, &lo_first, &hi_first);
    p_.KeyRange(q0 + blk.qn - 1, &lo_last, &hi_last);
    const int64_t k_begin = lo_first, k_end = std::max(hi_last, k_begin);
    // The middle: keys every row sees, its ends on the edge grid.
    // (No edge where every row starts, or ends, alike.)
    const int64_t mid_begin =
        lo_last == k_begin ? k_begin
                           : std::clamp((lo_last + kEdgeK - 1) / kEdgeK * kEdgeK, k_begin, k_end);
    const int64_t mid_end =
        hi_first >= k_end ? k_end : std::clamp(hi_first / kEdgeK * kEdgeK, mid_begin, k_end);
    const bool general_mask = GeneralScores();
    float* s = Workspace::Ensure(ws.s, qn * kBlockK);
    float* o = Workspace::Ensure(ws.o, qn * dv);
    float* m = Workspace::Ensure(ws.m, qn);
    float* l = Workspace::Ensure(ws.l, qn);
    std::fill(m, m + qn, kNegInf);
    std::fill(l, l + qn, 0.0f);
    std::fill(o, o + qn * dv, 0.0f);
    if (static_cast<int64_t>(ws.range.size()) < 2 * qn) ws.range.resize(2 * qn);
    int64_t* lo = ws.range.data();
    int64_t* hi = lo + qn;
    for (int64_t r = 0; r < qn; ++r) p_.KeyRange(q0 + r / g, &lo[r], &hi[r]);

    int64_t k0 = k_begin;
    for (int64_t step = 0; k0 < k_end; ++step) {
      if (step > 0 && cancelled != nullptr && cancelled->load(std::memory_order_relaxed)) {
        return Status::Cancelled("attention: cancelled");
      }
      const bool middle = k0 >= mid_begin && k0 < mid_end;
      const int64_t limit = middle ? mid_end : k0 < mid_begin ? mid_begin : k_end;
      const int64_t kn = std::min(middle ? kBlockK : kEdgeK, limit - k0);
      // The rows that see any of keys [k0, k0 + kn): a contiguous run.
      int64_t r0 = 0, r1 = qn;
      while (r0 < qn && hi[r0] <= k0) ++r0;
      while (r1 > r0 && lo[r1 - 1] >= k0 + kn) --r1;
      if (r0 == r1) {
        k0 += kn;
        continue;
      }
      const int64_t rows = r1 - r0;
      const int64_t kvh = blk.h / p_.kv_group;
      const void* k = KvBlock(p_, p_.k, d, blk.b, kvh, k0, kn, ws.kp, ws.k16);
      const void* v = KvBlock(p_, p_.v, dv, blk.b, kvh, k0, kn, ws.vp, ws.v16);

      // For the rows that see the block: S = Q K^T, the online softmax's
      // step, O += P V. An edge block goes to the tile kernels (no per-call
      // cost), the middle ones to oneDNN. The step for rows [first, first +
      // n), whose scores start at `scores`:
      // A bf16 problem's P goes straight to bf16, for the PV matmul.
      uint16_t* p16 = p_.bf16 ? Workspace::Ensure(ws.p16, rows * kn) : nullptr;
      auto softmax_step = [&](int64_t first, int64_t n, float* scores) {
        uint16_t* p = p16 != nullptr ? p16 + (first - r0) * kn : nullptr;
        if (!general_mask) {
          // The scores need only the scale: the rows in one call, which also
          // rescales their O.
          kern_.online_block({scores, kn, n, lo + first, hi + first, k0, p_.scale, m + first,
                              l + first, o + first * dv, dv, p});
        } else {
          OnlineRowsGeneral(
              p_, kern_,
              {blk.b, blk.h, group_, blk.q0, first, n, k0, kn, scores, m, l, o, lo, hi, p});
        }
      };
      if (!middle && tile_ != nullptr) {
        // An edge block on the tile kernels: S = Q K^T (K^T made here), the
        // softmax step, O += P V, each run of rows multiplied only over the
        // keys [ka, ke) that any of them sees (a diagonal's masked half is
        // skipped; the step zeroes the rest of S).
        float* kt = Workspace::Ensure(ws.kt, d * kn);
        tile_->transpose(static_cast<const float*>(k), kn, d, d, kt, kn);
        const auto* qf = static_cast<const float*>(static_cast<const void*>(q));
        const auto* vf = static_cast<const float*>(v);
        const std::vector<int64_t>& spans = RowSpans(r0, r1, k0, kn, lo, hi, ws.spans);
        for (size_t i = 0; i < spans.size(); i += 4) {
          const int64_t first = spans[i], n = spans[i + 1], ka = spans[i + 2], ke = spans[i + 3];
          tile_->matmul(n, ke - ka, d, qf + first * d, d, kt + ka, kn, s + (first - r0) * kn + ka,
                        kn, false);
        }
        softmax_step(r0, rows, s);
        for (size_t i = 0; i < spans.size(); i += 4) {
          const int64_t first = spans[i], n = spans[i + 1], ka = spans[i + 2], ke = spans[i + 3];
          tile_->matmul(n, dv, ke - ka, s + (first - r0) * kn + ka, kn, vf + ka * dv, dv,
                        o + first * dv, dv, true);
        }
      } else {
        BlockScores(p_, rows, kn, q + r0 * d * q_bytes, k, s);
        softmax_step(r0, rows, s);
        BlockAccumulatePv(p_, rows, kn, p16 != nullptr ? static_cast<const void*>(p16) : s, v,
                          o + r0 * dv);
      }
      k0 += kn;
    }

    // Normalise. A fully masked row has l == 0 and gets zeros; a NaN sum stays NaN.
    for (int64_t i = 0; i < qn; ++i) {
      const int64_t head = blk.h + i % g, pos = q0 + i / g;
      float* dst =
          p_.out + blk.b * p_.out_stride[0] + head * p_.out_stride[1] + pos * p_.out_stride[2];
      const RowFinish f = FinishRow(p_, head, m[i], l[i]);
      if (p_.lse != nullptr) *p_.LseAt(blk.b, head, pos) = f.lse;
      if (f.factor == 0.0f) {
        std::fill(dst, dst + dv, 0.0f);
        continue;
      }
      for (int64_t c = 0; c < dv; ++c) dst[c] = o[i * dv + c] * f.factor;
    }
    return Status::Ok();
  }

  // Rows [r0, r1) of an edge block at k0 (kn keys) as runs for the tile
  // kernels: groups of kSpanRows rows, each with the union [ka, ke) of its
  // rows' key ranges in the block, consecutive groups with the same span
  // merged; groups that see no key left out. Flat (first, n, ka, ke) in
  // `out`.
  static const std::vector<int64_t>& RowSpans(int64_t r0, int64_t r1, int64_t k0, int64_t kn,
                                              const int64_t* lo, const int64_t* hi,
                                              std::vector<int64_t>& out) {
    out.clear();
    for (int64_t c0 = r0; c0 < r1; c0 += kSpanRows) {
      const int64_t c1 = std::min(c0 + kSpanRows, r1);
      int64_t ka = kn, ke = 0;
      for (int64_t r = c0; r < c1; ++r) {
        const int64_t a = std::clamp<int64_t>(lo[r] - k0, 0, kn);
        const int64_t e = std::clamp<int64_t>(hi[r] - k0, a, kn);
        if (e > a) ka = std::min(ka, a), ke = std::max(ke, e);
      }
      if (ke <= ka) continue;
      const size_t n = out.size();
      if (n > 0 && out[n - 4] + out[n - 3] == c0 && out[n - 2] == ka && out[n - 1] == ke) {
        out[n - 3] += c1 - c0;
      } else {
        out.insert(out.end(), {c0, c1 - c0, ka, ke});
      }
    }
    return out;
  }

  bool GeneralScores() const { return HasScoreTerms(p_); }
  void ApplyScores(float* row, int64_t n, int64_t b, int64_t h, int64_t i, int64_t k0) const {
    ApplyScoreTerms(p_, kern_, row, n, b, h, i, k0);
  }

  const AttentionProblem& p_;
  const SoftmaxKernels& kern_;
  const TileKernels* tile_;  // null: every block on oneDNN
  const int64_t bq_, nqb_, nbh_;
  const int64_t group_, nbg_;  // query heads per task; (batch, group) pairs
};

}  // namespace

namespace {

// A problem with no work for the tasks: nothing to write, or no keys (every
// row fully masked: zeros, and the lse of the sink alone). True when done.
bool RunTrivial(const AttentionProblem& p) {
  if (p.batch == 0 || p.heads == 0 || p.lq == 0 || p.dv == 0) return true;
  if (p.lk != 0) return false;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t i = 0; i < p.lq; ++i) {
        float* row = p.out + b * p.out_stride[0] + h * p.out_stride[1] + i * p.out_stride[2];
        std::fill(row, row + p.dv, 0.0f);
        if (p.lse != nullptr) *p.LseAt(b, h, i) = p.sink ? p.sink[h] : kNegInf;
      }
  return true;
}

double ProblemFlops(const AttentionProblem& p) {
  return 2.0 * static_cast<double>(p.batch * p.heads) * static_cast<double>(p.lq) *
         static_cast<double>(p.lk) * (static_cast<double>(p.d) + static_cast<double>(p.dv));
}

// Runs the tasks of `work` (problems in the order given) on up to `threads`
// OpenMP threads; returns the first error.
Status RunTasks(const std::vector<BlockedAttention>& work, int threads,
                const std::atomic<bool>* cancelled) {
  std::vector<int64_t> first(work.size() + 1, 0);  // task index where problem w starts
  for (size_t w = 0; w < work.size(); ++w) first[w + 1] = first[w] + work[w].num_tasks();
  const int64_t tasks = first.back();
  threads = static_cast<int>(std::min<int64_t>(threads, tasks));
  Status first_error;
  std::atomic<bool> failed{false};
  auto run = [&](int64_t t) {
    if (failed.load(std::memory_order_relaxed)) return;
    const size_t w =
        static_cast<size_t>(std::upper_bound(first.begin(), first.end(), t) - first.begin() - 1);
    Status st = GuardExceptions(
        "attention", [&] { return work[w].RunTask(t - first[w], ThreadWorkspace(), cancelled); });
    if (!st.ok() && !failed.exchange(true)) first_error = st;
  };
  if (threads <= 1) {
    for (int64_t t = 0; t < tasks; ++t) run(t);
  } else {
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) run(t);
  }
  return first_error;
}

// The query block size: halved while the problems' tasks cannot keep the
// team busy.
int64_t ChooseBlockQ(const std::vector<const AttentionProblem*>& problems, int threads) {
  // A task holds block_q positions of G heads (BlockedAttention::TaskGroup):
  // its rows, block_q * G, start at kBlockQ.
  const int64_t g = BlockedAttention::TaskGroup(*problems[0]);
  int64_t rows = kBlockQ;
  auto count = [&](int64_t bq) {
    int64_t n = 0;
    for (const AttentionProblem* p : problems) {
      n += p->batch * (p->heads / g) * ((p->lq + bq - 1) / bq);
    }
    return n;
  };
  auto positions = [g](int64_t r) { return std::max<int64_t>(1, r / g); };
  while (rows > kMinBlockQ && positions(rows) > 1 &&
         count(positions(rows)) < int64_t{2} * threads) {
    rows /= 2;
  }
  return positions(rows);
}

}  // namespace

Status RunBlockedAttention(const AttentionProblem& p, const std::atomic<bool>* cancelled) {
  if (RunTrivial(p)) return Status::Ok();
  int threads = p.threads > 0 ? p.threads : ComputeThreads();
  const double flops = ProblemFlops(p);
  if (flops < kSerialFlops) threads = 1;
  if (flops < kSerialFlops && p.batch * p.heads > 1 && p.lq <= kBlockQ && p.lk <= kBlockK &&
      p.Plain() && !p.bf16) {
    return GuardExceptions("attention", [&] {
      return BlockedAttention(p, p.lq).RunAllHeads(ThreadWorkspace(), cancelled);
    });
  }
  const int64_t block_q = ChooseBlockQ({&p}, threads);
  Bf16KeyValues kv;
  std::vector<BlockedAttention> work;
  work.emplace_back(KeyValuesInBf16(p, (p.lq + block_q - 1) / block_q, threads, &kv), block_q);
  return RunTasks(work, threads, cancelled);
}

Status RunBlockedAttentionBatch(const std::vector<AttentionProblem>& problems,
                                const std::atomic<bool>* cancelled) {
  std::vector<const AttentionProblem*> live;
  double flops = 0;
  for (const AttentionProblem& p : problems) {
    if (RunTrivial(p)) continue;
    live.push_back(&p);
    flops += ProblemFlops(p);
  }
  if (live.empty()) return Status::Ok();
  int threads = live[0]->threads > 0 ? live[0]->threads : ComputeThreads();
  if (flops < kSerialFlops) threads = 1;
  // Longest keys first: their tasks cost the most, and dynamic scheduling
  // then fills the tail with the short ones.
  std::stable_sort(
      live.begin(), live.end(),
      [](const AttentionProblem* a, const AttentionProblem* b) { return a->lk > b->lk; });
  const int64_t block_q = ChooseBlockQ(live, threads);
  std::vector<Bf16KeyValues> kv(live.size());  // BlockedAttention keeps a reference
  std::vector<BlockedAttention> work;
  work.reserve(live.size());
  for (size_t i = 0; i < live.size(); ++i) {
    const AttentionProblem& p = *live[i];
    work.emplace_back(KeyValuesInBf16(p, (p.lq + block_q - 1) / block_q, threads, &kv[i]), block_q);
  }
  return RunTasks(work, threads, cancelled);
}

}  // namespace attn::internal
