// oneDNN matmul and softmax primitives, created once per shape and reused.
//
// Internal to core. Functions here may throw dnnl::error; the public entry
// points catch it at core's edge.
#pragma once

#ifdef _OPENMP
#include <omp.h>
#endif

#include <cstddef>
#include <cstdint>
#include <dnnl.hpp>
#include <memory>
#include <string>

#include "attn/tensor.h"

namespace attn::internal {

dnnl::engine& CpuEngine();

// C[M, N] = A[M, K] * B[K, N] (+ bias[N]) (+ C when accumulate).
// A and C are row-major with leading dims lda and ldc. B is row-major [K, N]
// with leading dim ldb, or, when b_transposed, stored as [N, K] with leading
// dim ldb (an nn.Linear weight, or K for Q K^T); that is a format tag, not a
// copy. `threads` is the OpenMP team the primitive is built for: oneDNN fixes
// its work split and scratchpad at creation, so a primitive must run with the
// thread count it was built with (1 inside our own parallel regions).
struct MatmulShape {
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  bool b_transposed = false;
  bool has_bias = false;
  bool accumulate = false;
  int threads = 1;
  // A batched matmul: `batch` independent products, the i-th reading A at
  // a + i * a_batch_stride (likewise B and C). 1 for a plain matmul.
  int64_t batch = 1;
  int64_t a_batch_stride = 0, b_batch_stride = 0, c_batch_stride = 0;
  // A and B are bfloat16 (C and the bias stay float32, and so does the
  // accumulation): set by MatmulBf16.
  bool bf16 = false;

  bool operator==(const MatmulShape& o) const;
};

struct MatmulPrimitive {
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c, bias, scratchpad;
  std::string impl;  // e.g. "brg:avx512_core"
  // brgemm fixes its OpenMP team when it is created; other implementations
  // (gemm:jit, all oneDNN 2.6 has below AVX-512) size it when they run, from
  // the calling thread's omp_get_max_threads().
  bool team_set_at_execute = true;
};

// Returns the cached primitive for `shape`, creating it on first use. The cache
// is bounded (least recently used entries are dropped). Thread-safe.
std::shared_ptr<const MatmulPrimitive> GetMatmul(const MatmulShape& shape);

// Runs the primitive for `shape` on the calling thread: C = A B (+ bias)
// (+ C). The thread keeps its most recently used primitives with their
// dnnl::memory objects bound, so a call on a known shape takes no lock and
// creates nothing: it sets four data handles and executes (through the C API,
// which needs no argument map). oneDNN's own per-execute cost remains.
void Matmul(const MatmulShape& shape, const float* a, const float* b, float* c,
            const float* bias = nullptr);

// C = A B (+ C) with bfloat16 A and B (raw bf16 bits) and float32 C: the
// matmuls of the bf16 compute path. On a bf16 matrix tier, oneDNN's bf16
// primitive; under bf16 emulation (attn/cpu_info.h: Bf16Emulated), the
// operands widened into per-thread buffers and the float32 primitive.
// `bias` (float32) as for Matmul, with shape.has_bias.
void MatmulBf16(MatmulShape shape, const uint16_t* a, const uint16_t* b, float* c,
                const float* bias = nullptr);

// Softmax over the last axis of a dense row-major [m, n] matrix, in place.
// oneDNN 2.6 uses a jit kernel only for dense rows (strided rows get ref).
struct SoftmaxShape {
  int64_t m = 0, n = 0;
  int threads = 1;

  bool operator==(const SoftmaxShape& o) const;
};

struct SoftmaxPrimitive {
  dnnl::softmax_forward primitive;
  dnnl::memory::desc data, scratchpad;
  std::string impl;
};

std::shared_ptr<const SoftmaxPrimitive> GetSoftmax(const SoftmaxShape& shape);

// Rows of `data` become their softmax, on the calling thread. A row of -inf
// gives NaN (as 0/0).
void Softmax(const SoftmaxShape& shape, float* data);

// Sets the calling thread's OpenMP team size for the scope, restoring it after.
// oneDNN reads omp_get_max_threads() of the calling thread.
// (A no-op in a build without OpenMP, -DATTN_OPENMP=OFF: the fuzzing build.)
class ScopedOmpThreads {
 public:
#ifdef _OPENMP
  explicit ScopedOmpThreads(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ScopedOmpThreads() { omp_set_num_threads(saved_); }
#else
  explicit ScopedOmpThreads(int /*n*/) {}
#endif
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

#ifdef _OPENMP
 private:
  int saved_;
#endif
};

}  // namespace attn::internal
