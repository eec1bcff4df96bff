// The exact path of the blocked kernel (blocked_attention.h): the weights are
// the output, so the [qn, Lk] rows exist anyway and the softmax runs on them
// whole. The rows are dense (ld = Lk), which keeps oneDNN on its brgemm and
// jit kernels.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/blocked_attention.h"
#include "kernels/primitive_cache.h"
#include "kernels/simd/softmax_kernels.h"

namespace attn::internal {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

const float* KvRow0(const AttentionProblem& p, const Strided4D& t, int64_t b, int64_t h) {
  return t.data + b * t.stride[0] + (h / p.kv_group) * t.stride[1];
}

float* EnsureBuffer(FloatBuffer& buf, int64_t n) {
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

// The sink's logit joins each row's sum, which oneDNN's softmax primitive
// cannot express: the row kernels normalise instead (and give the lse).
void NormaliseWithSink(const AttentionProblem& p, const SoftmaxKernels& kern, const QueryBlock& blk,
                       float* w, const float* row_max) {
  const int64_t lk = p.lk;
  for (int64_t i = 0; i < blk.qn; ++i) {
    float* row = w + i * lk;
    const float m = row_max[i];
    const float mf = p.sink == nullptr || std::isnan(m) ? m : std::max(m, p.sink[blk.h]);
    float lse = kNegInf;
    if (mf == kNegInf) {
      std::fill(row, row + lk, 0.0f);
    } else {
      const float seen = kern.exp_sum(row, lk, 1.0f, mf);
      const float sum = seen + (p.sink != nullptr ? std::exp(p.sink[blk.h] - mf) : 0.0f);
      kern.scale(row, lk, 1.0f / sum);
      lse = mf + std::log(sum);
    }
    if (p.lse != nullptr) *p.LseAt(blk.b, blk.h, blk.q0 + i) = lse;
  }
}

}  // namespace

Status RunExactBlock(const AttentionProblem& p, const QueryBlock& blk, const float* q, float* out,
                     ExactBuffers bufs) {
  const SoftmaxKernels& kern = GetSoftmaxKernels();
  const int64_t qn = blk.qn, q0 = blk.q0, lk = p.lk, d = p.d, dv = p.dv;
  float* w = p.weights + ((blk.b * p.heads + blk.h) * p.lq + q0) * lk;
  const float* k =
      DenseRows(KvRow0(p, p.k, blk.b, blk.h), lk, d, p.k.stride[2], p.k.stride[3], bufs.k);
  const float* v =
      DenseRows(KvRow0(p, p.v, blk.b, blk.h), lk, dv, p.v.stride[2], p.v.stride[3], bufs.v);
  Matmul({qn, lk, d, d, d, lk, /*b_transposed=*/true, false, false, 1}, q, k, w);

  float* row_max = EnsureBuffer(bufs.row_max, qn);
  for (int64_t i = 0; i < qn; ++i) {
    float* row = w + i * lk;
    ApplyScoreTerms(p, kern, row, lk, blk.b, blk.h, q0 + i, 0);
    int64_t lo = 0, hi = 0;
    p.KeyRange(q0 + i, &lo, &hi);
    hi = std::max(hi, lo);
    std::fill(row, row + lo, kNegInf);
    std::fill(row + hi, row + lk, kNegInf);
    row_max[i] = kern.scaled_max(row, lk, 1.0f);
  }
  if (p.sink != nullptr || p.lse != nullptr) {
    NormaliseWithSink(p, kern, blk, w, row_max);
  } else {
    Softmax({qn, lk, 1}, w);
    // oneDNN gives NaN (0/0) for a row of -inf; such a row is fully masked.
    for (int64_t i = 0; i < qn; ++i) {
      if (row_max[i] == kNegInf) std::fill(w + i * lk, w + (i + 1) * lk, 0.0f);
    }
  }

  float* o = EnsureBuffer(bufs.o, qn * dv);
  Matmul({qn, dv, lk, lk, dv, dv, false, false, false, 1}, w, v, o);
  for (int64_t i = 0; i < qn; ++i) {
    std::memcpy(out + i * p.out_stride[2], o + i * dv, static_cast<size_t>(dv) * sizeof(float));
  }
  return Status::Ok();
}

}  // namespace attn::internal
