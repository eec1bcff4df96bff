// The blocked kernel's operand blocks (block_operands.h).
#include "kernels/block_operands.h"

#include "kernels/primitive_cache.h"

namespace attn::internal {

namespace {

const float* Row(const Strided4D& t, int64_t b, int64_t h, int64_t i) {
  return t.data + b * t.stride[0] + h * t.stride[1] + i * t.stride[2];
}
const uint16_t* Row16(const Strided4D& t, int64_t b, int64_t h, int64_t i) {
  return t.data16 + b * t.stride[0] + h * t.stride[1] + i * t.stride[2];
}

// rows x cols of bf16 elements through strides, as dense rows at `dst`.
void CopyRows16(const uint16_t* base, int64_t rows, int64_t cols, int64_t row_stride,
                int64_t col_stride, uint16_t* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = base[r * row_stride + c * col_stride];
  }
}

// The float32 query rows of the task (as TaskQueries lays them out).
const float* StackedQueries(const AttentionProblem& p, int64_t g, int64_t b, int64_t h, int64_t q0,
                            int64_t qn, Workspace& ws) {
  const int64_t d = p.d;
  if (g == 1) return DenseRows(Row(p.q, b, h, q0), qn, d, p.q.stride[2], p.q.stride[3], ws.qp);
  float* dst = Workspace::Ensure(ws.qp, qn * g * d);
  for (int64_t i = 0; i < qn; ++i) {
    for (int64_t j = 0; j < g; ++j) {
      CopyRows(Row(p.q, b, h + j, q0 + i), 1, d, 0, p.q.stride[3], dst + (i * g + j) * d);
    }
  }
  return dst;
}

}  // namespace

const void* TaskQueries(const AttentionProblem& p, int64_t g, int64_t b, int64_t h, int64_t q0,
                        int64_t qn, Workspace& ws) {
  const int64_t d = p.d;
  if (p.q.data16 != nullptr) {  // a bf16 view: its own elements, stacked
    uint16_t* dst = Workspace::Ensure(ws.q16, qn * g * d);
    for (int64_t i = 0; i < qn; ++i) {
      for (int64_t j = 0; j < g; ++j) {
        CopyRows16(Row16(p.q, b, h + j, q0 + i), 1, d, 0, p.q.stride[3], dst + (i * g + j) * d);
      }
    }
    return dst;
  }
  const float* q = StackedQueries(p, g, b, h, q0, qn, ws);
  if (!p.bf16) return q;
  return ToBf16(q, qn * g * d, ws.q16);  // rounded once per task
}

const void* KvBlock(const AttentionProblem& p, const Strided4D& t, int64_t cols, int64_t b,
                    int64_t kvh, int64_t k0, int64_t kn, FloatBuffer& f32, Bf16Buffer& b16) {
  if (t.data16 != nullptr) {
    const uint16_t* base = Row16(t, b, kvh, k0);
    if (t.stride[3] == 1 && (kn == 1 || t.stride[2] == cols)) return base;
    uint16_t* dst = Workspace::Ensure(b16, kn * cols);
    CopyRows16(base, kn, cols, t.stride[2], t.stride[3], dst);
    return dst;
  }
  const float* dense = DenseRows(Row(t, b, kvh, k0), kn, cols, t.stride[2], t.stride[3], f32);
  return p.bf16 ? static_cast<const void*>(ToBf16(dense, kn * cols, b16)) : dense;
}

const AttentionProblem& KeyValuesInBf16(const AttentionProblem& p, int64_t query_blocks,
                                        int threads, Bf16KeyValues* kv) {
  if (!p.bf16 || p.k.data16 != nullptr || p.v.data16 != nullptr || query_blocks <= 1) return p;
  const int64_t kv_heads = p.heads / p.kv_group, planes = p.batch * kv_heads, lk = p.lk;
  kv->problem = p;
  auto round = [&](const Strided4D& src, int64_t cols, Bf16Buffer& buf, Strided4D* dst) {
    uint16_t* out = Workspace::Ensure(buf, planes * lk * cols);
    const auto f32_to_bf16 = GetHalfKernels().f32_to_bf16;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t bh = 0; bh < planes; ++bh) {
      const float* in = Row(src, bh / kv_heads, bh % kv_heads, 0);
      uint16_t* plane = out + bh * lk * cols;
      if (src.stride[3] == 1) {
        RowsToBf16(in, lk, cols, src.stride[2], plane);
        continue;
      }
      for (int64_t j = 0; j < lk; ++j) {  // strided columns: element by element
        for (int64_t c = 0; c < cols; ++c)
          f32_to_bf16(in + j * src.stride[2] + c * src.stride[3], plane + j * cols + c, 1);
      }
    }
    *dst = Strided4D{};
    dst->data16 = out;
    dst->stride[0] = kv_heads * lk * cols, dst->stride[1] = lk * cols, dst->stride[2] = cols;
    dst->stride[3] = 1;
  };
  round(p.k, p.d, kv->k, &kv->problem.k);
  round(p.v, p.dv, kv->v, &kv->problem.v);
  return kv->problem;
}

void BlockScores(const AttentionProblem& p, int64_t rows, int64_t kn, const void* q, const void* k,
                 float* s) {
  const int64_t d = p.d;
  const MatmulShape qk{rows, kn, d, d, d, kn, /*b_transposed=*/true, false, false, 1};
  if (p.bf16) {
    MatmulBf16(qk, static_cast<const uint16_t*>(q), static_cast<const uint16_t*>(k), s);
  } else {
    Matmul(qk, static_cast<const float*>(q), static_cast<const float*>(k), s);
  }
}

void BlockAccumulatePv(const AttentionProblem& p, int64_t rows, int64_t kn, const void* prob,
                       const void* v, float* o) {
  const int64_t dv = p.dv;
  const MatmulShape pv{rows, dv, kn, kn, dv, dv, false, false, /*accumulate=*/true, 1};
  if (p.bf16) {
    MatmulBf16(pv, static_cast<const uint16_t*>(prob), static_cast<const uint16_t*>(v), o);
  } else {
    Matmul(pv, static_cast<const float*>(prob), static_cast<const float*>(v), o);
  }
}

}  // namespace attn::internal
