// The per-tier half <-> float kernels behind attn/half.h. Internal to core.
#pragma once

#include <cstdint>

#include "attn/cpu_info.h"

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

// The kernels of one tier, for tests that compare tiers on one machine;
// null when the CPU cannot run that tier. The AVX2 tier also needs F16C,
// which every AVX2 CPU has.
const HalfKernels* HalfKernelsFor(IsaTier tier);

}  // namespace attn::internal
