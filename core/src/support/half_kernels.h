// The per-tier half <-> float kernels behind attn/half.h. Internal to core.
#pragma once

#include <cstdint>
#include <vector>

#include "attn/cpu_info.h"
#include "attn/tensor.h"

namespace attn::internal {

struct HalfKernels {
  void (*f16_to_f32)(const uint16_t* src, float* dst, int64_t n);
  void (*f32_to_f16)(const float* src, uint16_t* dst, int64_t n);
  void (*bf16_to_f32)(const uint16_t* src, float* dst, int64_t n);
  void (*f32_to_bf16)(const float* src, uint16_t* dst, int64_t n);
  IsaTier tier;
};

// The kernels of KernelTier().
const HalfKernels& GetHalfKernels();

// bfloat16 bits, 64-byte aligned like FloatBuffer.
using Bf16Buffer = std::vector<uint16_t, AlignedAllocator<uint16_t>>;

// `rows` rows of `cols` floats at row stride `ld`, rounded to bf16 (nearest
// even) as dense rows at `dst` (rows * cols elements).
void RowsToBf16(const float* src, int64_t rows, int64_t cols, int64_t ld, uint16_t* dst);

// The kernels of one tier, for tests that compare tiers on one machine;
// null when the CPU cannot run that tier. The AVX2 tier also needs F16C,
// which every AVX2 CPU has.
const HalfKernels* HalfKernelsFor(IsaTier tier);

}  // namespace attn::internal
