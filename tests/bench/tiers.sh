# ISA tiers for the benchmark scripts (sourced). One place that knows which
# tiers this CPU can run and how to give PyTorch the same tier.

_cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
cpu_has() { [[ "$_cpu_flags" == *" $1 "* ]]; }

# cpu_tiers: the tiers this CPU can run, best first, down to avx2 (portable
# only where there is no AVX2 + FMA).
cpu_tiers() {
  local found=0
  cpu_has avx512f && { echo avx512; found=1; }
  cpu_has avx2 && cpu_has fma && { echo avx2; found=1; }
  [ "$found" = 1 ] || echo portable
}

# torch_tier_env TIER: VAR=value words that hold PyTorch to TIER: ATen's own
# kernels through ATEN_CPU_CAPABILITY, and an OpenBLAS core type the CPU can
# run (SkylakeX dies with an illegal instruction on an AVX2-only CPU).
# OPENBLAS_L2_SIZE, which some machines here set, is left to the caller.
torch_tier_env() {
  case "$1" in
    avx512) cpu_has avx512f || return 1; echo ATEN_CPU_CAPABILITY=avx512 OPENBLAS_CORETYPE=SkylakeX ;;
    avx2) cpu_has avx2 && cpu_has fma || return 1; echo ATEN_CPU_CAPABILITY=avx2 OPENBLAS_CORETYPE=Haswell ;;
    portable) echo ATEN_CPU_CAPABILITY=default OPENBLAS_CORETYPE=Prescott ;;
    *) return 2 ;;
  esac
}

# torch_malloc_env: LD_PRELOAD=tcmalloc for the PyTorch side, as the server
# has. With glibc malloc every large fresh buffer of PyTorch's faults its
# pages in again, which made it up to 10x slower on this VM (SDPA L=2048:
# 800 ms against 83 ms with tcmalloc). Prints nothing without tcmalloc.
torch_malloc_env() {
  local lib
  lib=$(ldconfig -p | awk '/libtcmalloc_minimal.so.4 / {print $NF; exit}')
  [ -n "$lib" ] && echo "LD_PRELOAD=$lib"
  return 0
}
