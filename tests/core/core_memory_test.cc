// The long-sequence path uses memory linear in L: B=1, H=8, Dh=64, L=16384.
// A full score matrix would need 8 * 16384^2 * 4 bytes = 8 GiB; the blocked
// kernel needs its inputs, its output and per-thread block buffers.
//
// Runs alone in its own process (ctest), so the peak RSS it reads belongs to
// this one call.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <dnnl.hpp>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "attn/attention.h"

namespace attn {
namespace {

// VmHWM (peak resident set) or VmRSS from /proc/self/status, in MiB.
double ProcStatusMiB(const std::string& key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stod(line.substr(key.size() + 1)) / 1024.0;
  }
  return -1;
}

// Drops the peak-RSS mark to the current RSS (Linux >= 4.0).
void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }

TEST(LongSequence, PeakMemoryIsLinearInSequenceLength) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's shadow memory and quarantine distort RSS";
#endif
  const int64_t b = 1, h = 8, l = 16384, d = 64;
  const size_t n = static_cast<size_t>(b * h * l * d);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> q(n), k(n), v(n);
  for (auto* t : {&q, &k, &v})
    for (auto& x : *t) x = dist(rng);
  const double input_mib = 3.0 * n * sizeof(float) / (1 << 20);
  const double output_mib = 1.0 * n * sizeof(float) / (1 << 20);

  ResetPeakRss();
  const double before = ProcStatusMiB("VmRSS");
  const Shape shape = {b, h, l, d};
  auto r = ScaledDotProductAttention(TensorView::Dense(q.data(), shape),
                                     TensorView::Dense(k.data(), shape),
                                     TensorView::Dense(v.data(), shape));
  const double peak = ProcStatusMiB("VmHWM");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const double growth = peak - before;
  std::printf(
      "inputs %.0f MiB, output %.0f MiB, RSS before %.0f MiB, peak %.0f MiB, growth %.0f MiB\n",
      input_mib, output_mib, before, peak, growth);
  // The output plus block buffers, primitives and thread stacks; an Lq x Lk
  // buffer for even one head (1 GiB) would blow through this.
  EXPECT_LT(growth, output_mib + 64.0);
  EXPECT_LT(peak, 400.0) << "whole process, inputs included";

  // Spot-check rows against float64: first, middle and last query of two heads.
  for (int64_t head : {0, 7}) {
    for (int64_t i : {int64_t{0}, l / 2 + 3, l - 1}) {
      const float* qi = q.data() + (head * l + i) * d;
      std::vector<double> s(l);
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < l; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += double(qi[c]) * k[(head * l + j) * d + c];
        s[j] = dot / 8.0;
        mx = std::max(mx, s[j]);
      }
      for (auto& x : s) sum += (x = std::exp(x - mx));
      for (int64_t c = 0; c < d; ++c) {
        double want = 0;
        for (int64_t j = 0; j < l; ++j) want += s[j] / sum * v[(head * l + j) * d + c];
        const float got = r->output.data[(head * l + i) * d + c];
        ASSERT_NEAR(got, want, 1e-5 * std::max(std::abs(want), 0.05))
            << "head " << head << " row " << i << " col " << c;
      }
    }
  }
}

// A stream of distinct shapes keeps a bounded set of primitives alive:
// core's LRU caches (512 each) evict, and oneDNN's own primitive cache,
// which would keep up to 1,024 evicted ones alive besides, is off
// (kernels/primitive_cache.cc). Key lengths 1..2400 each make a new
// (64 x r x 64) and (64 x 64 x r) matmul, r = Lk mod 512 (and Lk up to
// 512); RSS levels off once the caches are full and the block buffers have
// their largest size (about Lk = 700 on AVX-512) and must stay there.
// (Measured here: 1.2 MiB alone, 4.6 MiB under a loaded ctest.)
TEST(PrimitiveCaches, DistinctShapesPastTheCacheDoNotGrowMemory) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's shadow memory and quarantine distort RSS";
#endif
  const int64_t lq = 64, d = 64;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<float> q(lq * d), kv(2400 * d);
  for (auto& x : q) x = nd(rng);
  for (auto& x : kv) x = nd(rng);
  auto run = [&](int64_t from, int64_t to) {
    for (int64_t lk = from; lk < to; ++lk) {
      auto r = ScaledDotProductAttention(TensorView::Dense(q.data(), {1, 1, lq, d}),
                                         TensorView::Dense(kv.data(), {1, 1, lk, d}),
                                         TensorView::Dense(kv.data(), {1, 1, lk, d}));
      ASSERT_TRUE(r.ok()) << r.status().ToString();
    }
  };
  run(1, 1000);  // the caches full, evicting; the buffers at their largest
  const double before = ProcStatusMiB("VmRSS");
  run(1000, 2400);  // 2,800 more primitives made
  const double growth = ProcStatusMiB("VmRSS") - before;
  if (std::getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY") == nullptr &&
      std::getenv("DNNL_PRIMITIVE_CACHE_CAPACITY") == nullptr) {
    EXPECT_EQ(dnnl::get_primitive_cache_capacity(), 0);
  }
  std::printf("RSS growth over 2,800 more primitives: %.1f MiB\n", growth);
  // A leak of what each shape makes would be ~30 KiB x 2,800 (~80 MiB) on
  // AVX-512; malloc's own drift under a loaded ctest reached 4.6 MiB.
  EXPECT_LT(growth, 16.0);
}

}  // namespace
}  // namespace attn
