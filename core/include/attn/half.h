// IEEE float16 and bfloat16 storage, converted to and from float32.
//
// Compute stays float32; half types are a storage and transport format.
// Widening is exact. Narrowing rounds to nearest, ties to even, on every
// tier: a float16 overflow gives +-Inf (float16's largest finite value is
// 65504), a NaN stays NaN (quiet, sign kept), subnormals are kept, not
// flushed. The conversions run with F16C or AVX-512 where the CPU has them,
// chosen at run time like the other kernels (attn/cpu_info.h), with a
// portable fallback that gives the same bits.
#pragma once

#include <cstdint>

namespace attn {

enum class HalfType { kFloat16, kBFloat16 };

// "float16" or "bfloat16".
const char* HalfTypeName(HalfType type);

// dst[i] = src[i] widened, for i < n.
void HalfToFloat(HalfType type, const uint16_t* src, float* dst, int64_t n);

// dst[i] = src[i] rounded to nearest even, for i < n.
void FloatToHalf(HalfType type, const float* src, uint16_t* dst, int64_t n);

}  // namespace attn
