#include "attn/cpu_info.h"

#include <cstdlib>
#include <dnnl.hpp>

#include "support/isa_cap.h"

namespace attn {
namespace {

IsaTier DetectTier() {
  IsaTier tier = IsaTier::kPortable;
  if (internal::CpuHasTier(IsaTier::kAvx512)) {
    tier = IsaTier::kAvx512;
  } else if (internal::CpuHasTier(IsaTier::kAvx2)) {
    tier = IsaTier::kAvx2;
  }
  if (const char* cap = std::getenv("ATTN_MAX_ISA")) {
    if (auto max = ParseIsaTier(cap); max.has_value() && *max < tier) tier = *max;
  }
  return tier;
}

}  // namespace

std::optional<IsaTier> ParseIsaTier(std::string_view name) {
  if (name == "avx512") return IsaTier::kAvx512;
  if (name == "avx2") return IsaTier::kAvx2;
  if (name == "portable") return IsaTier::kPortable;
  return std::nullopt;
}

const char* IsaTierName(IsaTier tier) {
  switch (tier) {
    case IsaTier::kAvx512:
      return "avx512";
    case IsaTier::kAvx2:
      return "avx2";
    case IsaTier::kPortable:
      break;
  }
  return "portable";
}

IsaTier KernelTier() {
  static const IsaTier tier = DetectTier();
  return tier;
}

const char* OneDnnIsaName() {
  internal::ApplyOneDnnIsaCap();
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic:
      return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

namespace internal {

bool CpuHasTier(IsaTier tier) {
  __builtin_cpu_init();
  switch (tier) {
    case IsaTier::kAvx512:
      return __builtin_cpu_supports("avx512f");
    case IsaTier::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case IsaTier::kPortable:
      break;
  }
  return true;
}

void ApplyOneDnnIsaCap() {
  // oneDNN accepts the cap only before its first kernel is generated, and
  // only once; every path into oneDNN calls this first.
  static const bool applied = [] {
    if (KernelTier() == IsaTier::kAvx512 || std::getenv("ONEDNN_MAX_CPU_ISA") != nullptr ||
        std::getenv("DNNL_MAX_CPU_ISA") != nullptr) {
      return false;
    }
    try {
      dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2);
      return true;
    } catch (const dnnl::error&) {
      return false;  // too late (a kernel exists already): the tiers differ
    }
  }();
  (void)applied;
}

}  // namespace internal
}  // namespace attn
