#include "attn/threading.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <string>

namespace attn {
namespace {

// cgroup v2 "cpu.max" ("max 100000" or "200000 100000"), else cgroup v1 quota.
// Returns 0 when there is no limit.
int CgroupCpuLimit() {
  std::ifstream v2("/sys/fs/cgroup/cpu.max");
  std::string quota;
  long long period = 0;
  if (v2 >> quota >> period) {
    if (quota == "max" || period <= 0) return 0;
    return static_cast<int>(std::ceil(std::stod(quota) / static_cast<double>(period)));
  }
  std::ifstream q1("/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
  std::ifstream p1("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  long long q = 0;
  if (q1 >> q && p1 >> period && q > 0 && period > 0) {
    return static_cast<int>((q + period - 1) / period);
  }
  return 0;
}

int DetectCpus() {
  int n = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) n = CPU_COUNT(&set);
  if (n <= 0) n = 1;
  try {
    int limit = CgroupCpuLimit();
    if (limit > 0) n = std::min(n, limit);
  } catch (...) {
    // A malformed cgroup file leaves the affinity count in place.
  }
  return std::max(n, 1);
}

std::atomic<int> g_threads{0};  // 0 = default

}  // namespace

int AvailableCpus() {
  static const int cpus = DetectCpus();
  return cpus;
}

void SetComputeThreads(int n) { g_threads.store(n > 0 ? n : 0, std::memory_order_relaxed); }

int ComputeThreads() {
  int n = g_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : AvailableCpus();
}

}  // namespace attn
