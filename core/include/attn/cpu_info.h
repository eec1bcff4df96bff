// Which instruction-set tier the engine runs on.
//
// Core's hand-written loops (exp, the softmax passes, masking) come in
// AVX-512, AVX2 + FMA and portable versions; oneDNN picks its own kernels.
// Both are chosen once, at the first call, from the CPU and from
// ATTN_MAX_ISA=avx512|avx2|portable, which caps the tier (tests and
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

}  // namespace attn
