// Internal to core: what the CPU can run, and applying ATTN_MAX_ISA to oneDNN.
#pragma once

#include "attn/cpu_info.h"

namespace attn::internal {

// True when this CPU can run `tier` (AVX-512: avx512f; AVX2: avx2 and fma),
// whatever ATTN_MAX_ISA says. The one place that reads the CPU's features.
bool CpuHasTier(IsaTier tier);

// The CPU's own bf16 matrix tier (CPUID and XCR0), whatever ATTN_MAX_ISA says.
Bf16Tier CpuBf16Tier();

// AVX512-VNNI for core's int8 loops: the CPU has it, the kernel tier is
// AVX-512, and ATTN_MAX_ISA is not "avx512" (which stands for AVX-512
// without VNNI or bf16, oneDNN's avx512_core, so that tests can run the
// other loops on a VNNI machine).
bool UseAvx512Vnni();

// GFNI (GF2P8AFFINEQB) for fp8's bf16 PV: the CPU has it and core's loops
// run a bf16 matrix tier (Bf16MatrixTier() is set). Zen 4 and 5 and Intel
// from Ice Lake have it; on Cooper Lake (AVX512-BF16 without GFNI) fp8's
// PV runs the float loops and its QK the bf16 ones.
bool UseGfni();

// Caps oneDNN at AVX2 when KernelTier() is below AVX-512 and the user set no
// ONEDNN_MAX_CPU_ISA. Idempotent and thread-safe; must run before oneDNN
// creates its first primitive, so CpuEngine() calls it.
void ApplyOneDnnIsaCap();

}  // namespace attn::internal
