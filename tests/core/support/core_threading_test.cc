// ComputeThreads follows the CPUs the process may use, and per-call thread
// counts cap the work's OpenMP team (no oversubscription).
#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "attn/attention.h"
#include "attn/cpu_info.h"
#include "attn/threading.h"
#include "float64_reference.h"
#include "status_matchers.h"
#include "tensor_compare.h"

namespace attn {
namespace {

using attn_test::RandomFloats;

TEST(Threading, AvailableCpusFollowsAffinity) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_GE(AvailableCpus(), 1);
  EXPECT_LE(AvailableCpus(), CPU_COUNT(&set));
  SetComputeThreads(3);
  EXPECT_EQ(ComputeThreads(), 3);
  SetComputeThreads(0);
  EXPECT_EQ(ComputeThreads(), AvailableCpus());
}

// Counts this process's threads (gtest itself runs on one).
int ProcessThreads() {
  int n = 0;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (dirent* e = readdir(dir)) n += e->d_name[0] != '.';
    closedir(dir);
  }
  return n;
}

TEST(Threading, ComputeNeverUsesMoreThreadsThanComputeThreads) {
  // Under `taskset -c 0` ctest sets ATTN_EXPECT_CPUS=1: the default must
  // follow the affinity mask, not the host's core count.
  if (const char* want = std::getenv("ATTN_EXPECT_CPUS")) {
    EXPECT_EQ(AvailableCpus(), std::atoi(want));
  }
  std::mt19937 rng(9);
  const int64_t l = 600, d = 64;
  auto x = RandomFloats(2 * 4 * l * d, rng);
  const TensorView v = TensorView::Dense(x.data(), {2, 4, l, d});
  ASSERT_TRUE(ScaledDotProductAttention(v, v, v).ok());
  std::vector<float> w(64 * 64, 0.01f);
  ProjectionWeights pw;
  pw.q = pw.k = pw.v = {TensorView::Dense(w.data(), {64, 64}), std::nullopt};
  MultiHeadAttentionOptions opt;
  opt.num_heads = 4;
  const TensorView xm = TensorView::Dense(x.data(), {2, l, 64});
  ASSERT_TRUE(MultiHeadAttention(pw, xm, xm, xm, opt).ok());
  // The OpenMP team (including this thread) is the only parallelism: no
  // nested teams from oneDNN inside our parallel region.
  EXPECT_LE(ProcessThreads(), ComputeThreads());
}

TEST(Threading, PerCallThreadsOverrideTheKnob) {
  if (ProcessThreads() != 1) GTEST_SKIP() << "needs a fresh process (ctest runs it alone)";
  SetComputeThreads(2);
  std::mt19937 rng(4);
  const int64_t l = 800, d = 64;
  auto x = RandomFloats(4 * l * d, rng);
  const TensorView v = TensorView::Dense(x.data(), {4, l, d});
  ScaledDotProductAttentionOptions opt;
  opt.num_threads = 1;
  ASSERT_TRUE(ScaledDotProductAttention(v, v, v, opt).ok());
  EXPECT_EQ(ProcessThreads(), 1) << "a 1-thread call must not start an OpenMP team";
  opt.num_threads = 0;  // the knob: 2
  ASSERT_TRUE(ScaledDotProductAttention(v, v, v, opt).ok());
  EXPECT_EQ(ProcessThreads(), 2);
  SetComputeThreads(0);
}

}  // namespace
}  // namespace attn
