#include "attn/cpu_info.h"

#include <cpuid.h>

#include <cstdlib>
#include <dnnl.hpp>
#include <string_view>

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
  // The bf16 caps (Bf16MatrixTier) are AVX-512 tiers for core's own loops.
  if (name == "avx512" || name == "avx512_bf16" || name == "avx512_amx") return IsaTier::kAvx512;
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

Bf16Tier Bf16MatrixTier() {
  static const Bf16Tier tier = [] {
    if (KernelTier() != IsaTier::kAvx512) return Bf16Tier::kNone;
    Bf16Tier t = internal::CpuBf16Tier();
    const char* cap = std::getenv("ATTN_MAX_ISA");
    const std::string_view c = cap == nullptr ? "" : cap;
    if (c == "avx512") t = Bf16Tier::kNone;
    if (c == "avx512_bf16" && t == Bf16Tier::kAmxBf16) t = Bf16Tier::kAvx512Bf16;
    return t;
  }();
  return tier;
}

const char* Bf16TierName(Bf16Tier tier) {
  switch (tier) {
    case Bf16Tier::kAmxBf16:
      return "amx_bf16";
    case Bf16Tier::kAvx512Bf16:
      return "avx512_bf16";
    case Bf16Tier::kNone:
      break;
  }
  return "none";
}

const char* EngineTierName() {
  switch (Bf16MatrixTier()) {
    case Bf16Tier::kAmxBf16:
      return "avx512_amx";
    case Bf16Tier::kAvx512Bf16:
      return "avx512_bf16";
    case Bf16Tier::kNone:
      break;
  }
  return IsaTierName(KernelTier());
}

bool Bf16Emulated() {
  static const bool emulated = [] {
    const char* e = std::getenv("ATTN_BF16_EMULATION");
    return e != nullptr && std::string_view(e) == "1" && Bf16MatrixTier() == Bf16Tier::kNone;
  }();
  return emulated;
}

bool Bf16ComputeAvailable() { return Bf16MatrixTier() != Bf16Tier::kNone || Bf16Emulated(); }

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

Bf16Tier CpuBf16Tier() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  // CPUID leaf 7: sub-leaf 0 EDX bit 22 is AMX-BF16 (bit 24 AMX-TILE);
  // sub-leaf 1 EAX bit 5 is AVX512_BF16. AMX also needs the OS to enable
  // its tile state (XCR0 bits 17 and 18), which oneDNN requests itself.
  if (!CpuHasTier(IsaTier::kAvx512) || __get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) {
    return Bf16Tier::kNone;
  }
  const bool amx = ((d >> 22) & 1) != 0 && ((d >> 24) & 1) != 0;
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  const bool avx512_bf16 = __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) != 0 && ((a1 >> 5) & 1);
  if (amx) {
    unsigned lo = 0, hi = 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if (((lo >> 17) & 3) == 3) return Bf16Tier::kAmxBf16;
  }
  return avx512_bf16 ? Bf16Tier::kAvx512Bf16 : Bf16Tier::kNone;
}

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

bool UseAvx512Vnni() {
  static const bool vnni = [] {
    if (KernelTier() != IsaTier::kAvx512 || !__builtin_cpu_supports("avx512vnni")) return false;
    const char* cap = std::getenv("ATTN_MAX_ISA");
    return cap == nullptr || std::string_view(cap) != "avx512";
  }();
  return vnni;
}

bool UseGfni() {
  static const bool gfni = Bf16MatrixTier() != Bf16Tier::kNone && __builtin_cpu_supports("gfni");
  return gfni;
}

void ApplyOneDnnIsaCap() {
  // oneDNN accepts the cap only before its first kernel is generated, and
  // only once; every path into oneDNN calls this first.
  static const bool applied = [] {
    if (std::getenv("ONEDNN_MAX_CPU_ISA") != nullptr ||
        std::getenv("DNNL_MAX_CPU_ISA") != nullptr) {
      return false;
    }
    // Below the CPU's bf16 tier (ATTN_MAX_ISA=avx512 or avx512_bf16 on a
    // bf16 machine), oneDNN is capped to the same.
    dnnl::cpu_isa cap = dnnl::cpu_isa::avx2;
    if (KernelTier() == IsaTier::kAvx512) {
      const Bf16Tier cpu = CpuBf16Tier(), used = Bf16MatrixTier();
      if (used == cpu) return false;
      cap = used == Bf16Tier::kAvx512Bf16 ? dnnl::cpu_isa::avx512_core_bf16
                                          : dnnl::cpu_isa::avx512_core;
    }
    try {
      dnnl::set_max_cpu_isa(cap);
      return true;
    } catch (const dnnl::error&) {
      return false;  // too late (a kernel exists already): the tiers differ
    }
  }();
  (void)applied;
}

}  // namespace internal
}  // namespace attn
