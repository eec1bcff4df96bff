// Internal to core: applying ATTN_MAX_ISA to oneDNN.
#pragma once

namespace attn::internal {

// Caps oneDNN at AVX2 when KernelTier() is below AVX-512 and the user set no
// ONEDNN_MAX_CPU_ISA. Idempotent and thread-safe; must run before oneDNN
// creates its first primitive, so CpuEngine() calls it.
void ApplyOneDnnIsaCap();

}  // namespace attn::internal
