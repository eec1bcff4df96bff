// The per-row passes of the blocked kernel (blocked_attention.cc) that are
// not matmuls: the keys a query row sees, the score terms of one row of a
// block (scale, softcap, bias, ALiBi, padding), how a row ends, and the
// copies that make strided blocks dense.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "kernels/blocked_attention.h"
#include "kernels/simd/softmax_kernels.h"

namespace attn::internal {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

void MaskPadded(const AttentionProblem& p, float* row, int64_t n, int64_t b, int64_t k0) {
  if (p.kpm == nullptr) return;
  const uint8_t* kpm = p.kpm + b * p.kpm_stride[0] + k0 * p.kpm_stride[1];
  const int64_t ks = p.kpm_stride[1];
  for (int64_t j = 0; j < n; ++j) {
    if (kpm[j * ks] != 0) row[j] = kNegInf;
  }
}

const float* BiasRow(const AttentionProblem& p, int64_t b, int64_t h, int64_t i, int64_t k0) {
  return p.bias + b * p.bias_stride[0] + h * p.bias_stride[1] + i * p.bias_stride[2] +
         k0 * p.bias_stride[3];
}

}  // namespace

void AttentionProblem::KeyRange(int64_t i, int64_t* lo, int64_t* hi) const {
  const int64_t pos = i + pos_offset;  // may lie outside [0, Lk)
  int64_t begin = 0, end = lk;
  if (window_left >= 0 && pos > window_left) begin = std::min(lk, pos - window_left);
  if (causal) end = std::clamp<int64_t>(pos + 1, 0, lk);
  if (window_right >= 0 && window_right < lk - pos) {
    end = std::min(end, std::max<int64_t>(0, pos + window_right + 1));
  }
  *lo = begin;
  *hi = end;
}

bool HasScoreTerms(const AttentionProblem& p) {
  return p.kpm != nullptr || p.bias != nullptr || p.softcap != 0.0f || p.alibi != nullptr;
}

void ApplyScoreTerms(const AttentionProblem& p, const SoftmaxKernels& kern, float* row, int64_t n,
                     int64_t b, int64_t h, int64_t i, int64_t k0) {
  const int64_t bs = p.bias_stride[3];
  if (p.softcap == 0.0f && p.alibi == nullptr) {
    // The masks alone: the row kernels' fused scale (+ bias).
    if (p.bias != nullptr && bs == 1) {
      kern.scale_add(row, n, p.scale, BiasRow(p, b, h, i, k0));
    } else if (p.bias != nullptr) {
      const float* bias = BiasRow(p, b, h, i, k0);
      for (int64_t j = 0; j < n; ++j) row[j] = row[j] * p.scale + bias[j * bs];
    } else {
      kern.scale(row, n, p.scale);
    }
    return MaskPadded(p, row, n, b, k0);
  }
  if (p.softcap != 0.0f) {
    kern.softcap(row, n, p.scale, p.softcap);
  } else {
    kern.scale(row, n, p.scale);
  }
  if (p.bias != nullptr) {
    const float* bias = BiasRow(p, b, h, i, k0);
    for (int64_t j = 0; j < n; ++j) row[j] += bias[j * bs];
  }
  if (p.alibi != nullptr) {
    const float slope = p.alibi[b * p.alibi_stride[0] + h * p.alibi_stride[1]];
    kern.alibi(row, n, slope, i + p.pos_offset, k0);
  }
  MaskPadded(p, row, n, b, k0);
}

void OnlineRowsGeneral(const AttentionProblem& p, const SoftmaxKernels& kern,
                       const ScoreBlockRows& blk) {
  const int64_t kn = blk.kn, k0 = blk.k0;
  for (int64_t r = 0; r < blk.rows; ++r) {
    const int64_t i = blk.r0 + r;
    // This row's keys in the block: [a, e). Inside the band no element
    // needs a mask; only the range's ends cut it.
    const int64_t a = std::clamp<int64_t>(blk.lo[i] - k0, 0, kn);
    const int64_t e = std::clamp<int64_t>(blk.hi[i] - k0, a, kn);
    if (e > a) {
      ApplyScoreTerms(p, kern, blk.s + r * kn + a, e - a, blk.b, blk.h + i % blk.g,
                      blk.q0 + i / blk.g, k0 + a);
    }
  }
  // The scores are scaled now: the same step as the other rows take.
  kern.online_block({blk.s, kn, blk.rows, blk.lo + blk.r0, blk.hi + blk.r0, k0, 1.0f,
                     blk.m + blk.r0, blk.l + blk.r0, blk.o + blk.r0 * p.dv, p.dv, blk.p16});
}

RowFinish FinishRow(const AttentionProblem& p, int64_t h, float m, float l) {
  if (p.sink == nullptr) {
    if (l == 0.0f) return {0.0f, kNegInf};
    return {1.0f / l, p.lse != nullptr ? m + std::log(l) : kNaN};
  }
  const float sink = p.sink[h];
  const float mf = std::isnan(m) ? m : std::max(m, sink);
  const float seen = m == kNegInf || l == 0.0f ? 0.0f : std::exp(m - mf);
  const float lf = l * seen + std::exp(sink - mf);
  return {seen / lf, p.lse != nullptr ? mf + std::log(lf) : kNaN};
}

void CopyRows(const float* base, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride,
              float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = base + r * row_stride;
    if (col_stride == 1) {
      std::memcpy(dst + r * cols, src, static_cast<size_t>(cols) * sizeof(float));
    } else {
      for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = src[c * col_stride];
    }
  }
}

const float* DenseRows(const float* base, int64_t rows, int64_t cols, int64_t row_stride,
                       int64_t col_stride, FloatBuffer& buf) {
  if (col_stride == 1 && (row_stride == cols || rows == 1)) return base;
  const size_t n = static_cast<size_t>(rows * cols);
  if (buf.size() < n) buf.resize(n);
  CopyRows(base, rows, cols, row_stride, col_stride, buf.data());
  return buf.data();
}

}  // namespace attn::internal
