// Which instruction-set tier the engine runs on.
//
// Core's hand-written loops (exp, the softmax passes, masking) come in
// AVX-512, AVX2 + FMA and portable versions; oneDNN picks its own kernels.
// Both are chosen once, at the first call, from the CPU and from
// ATTN_MAX_ISA=avx512_amx|avx512_bf16|avx512|avx2|portable, which caps the tier (tests and
// benchmarks force the lower tiers with it on a higher machine). When
// ATTN_MAX_ISA is below AVX-512 and ONEDNN_MAX_CPU_ISA is unset, oneDNN is
// capped to match (avx2 for both avx2 and portable), so one switch moves the
// whole engine. The binary is never built with -march=native.
#pragma once

#include <optional>
#include <string_view>

namespace attn {

enum class IsaTier { kPortable = 0, kAvx2 = 1, kAvx512 = 2 };

// The tier of core's own kernels: the highest the CPU supports, capped by
// ATTN_MAX_ISA. Read once; thread-safe.
IsaTier KernelTier();

// "avx512", "avx2" or "portable".
const char* IsaTierName(IsaTier tier);

// The tier named by `name` ("avx512", "avx2" or "portable"), or nullopt. Core
// ignores an ATTN_MAX_ISA it cannot parse; a binary should refuse to start.
std::optional<IsaTier> ParseIsaTier(std::string_view name);

// Name of the oneDNN CPU ISA in use, e.g. "avx512_core" or "avx2", after the
// cap above. For start-up logs and benchmark reports.
const char* OneDnnIsaName();

// The CPU's bfloat16 matrix instructions: AMX-BF16 (Sapphire Rapids and
// newer), AVX512-BF16 (Zen 4, Cooper Lake), or none; capped by ATTN_MAX_ISA:
// "avx512_bf16" turns AMX off, "avx512" and below turn both off (and cap
// oneDNN to match: avx512_core_bf16, avx512_core), "avx512_amx" or unset
// leave the CPU's. Read once; thread-safe.
enum class Bf16Tier { kNone = 0, kAvx512Bf16 = 1, kAmxBf16 = 2 };
Bf16Tier Bf16MatrixTier();
// "none", "avx512_bf16" or "amx_bf16".
const char* Bf16TierName(Bf16Tier tier);

// The whole engine's tier for logs and reports: "avx512_amx",
// "avx512_bf16", "avx512", "avx2" or "portable".
const char* EngineTierName();

// What a call permitted to compute in bfloat16 (AttentionOptions'
// PRECISION_BFLOAT16, core's ComputePrecision::kBFloat16) gets here: true
// with a bf16 matrix tier (oneDNN's bf16 matmuls, brgemm on AMX or
// AVX512-BF16), or with bf16 emulation; false otherwise, and such calls
// compute float32 (which the permission allows).
bool Bf16ComputeAvailable();

// ATTN_BF16_EMULATION=1, for tests on CPUs without a bf16 matrix tier (read
// once): calls permitted bf16 run core's bf16 kernel all the same, each bf16
// matmul computed as a float32 matmul of its bf16 operands widened. The
// products of bf16 values are exact in float32, so the results are the bf16
// kernel's up to the order of the float32 sums; it is slower than float32.
// Ignored where the CPU has a bf16 matrix tier (the real kernels run).
bool Bf16Emulated();

}  // namespace attn
