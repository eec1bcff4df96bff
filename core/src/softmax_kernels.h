// Row kernels of the online (blocked) softmax. Internal to core.
//
// Chosen once at run time from the CPU's features: an AVX-512 version with a
// polynomial exp (Cephes coefficients, range-reduced, scalef; about 1 ulp) or
// a portable version using std::exp (forced by ATTN_DISABLE_AVX512=1).
// The shipped binary does not need -march=native.
#pragma once

#include <cstdint>

namespace attn::internal {

struct SoftmaxKernels {
  // max over i < n of x[i] * scale; -inf when n == 0; NaN if any is NaN.
  float (*scaled_max)(const float* x, int64_t n, float scale);
  // x[i] = exp(x[i] * scale - m) for i < n; returns the sum. A masked score
  // (-inf) gives exactly 0; NaN propagates.
  float (*exp_sum)(float* x, int64_t n, float scale, float m);
  // x[i] *= a for i < n.
  void (*scale)(float* x, int64_t n, float a);
  bool avx512;
};

const SoftmaxKernels& GetSoftmaxKernels();

}  // namespace attn::internal
