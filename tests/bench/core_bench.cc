// attention-core-bench: GFLOP/s of the core kernels next to a plain oneDNN
// 1024^3 fp32 matmul, which stands for the machine's practical peak (and
// its bf16 twin for the bf16 rows, where the CPU has a bf16 matrix tier).
// tests/bench/run_core_bench.sh prints the ratios.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <dnnl.hpp>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "attn/attention.h"
#include "attn/cpu_info.h"
#include "attn/half.h"
#include "attn/model.h"
#include "attn/threading.h"

namespace {

std::vector<float> Random(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// C = A B, 1024^3, float32 C; A and B float32, or bf16 (bf16 = true: the
// reference of the bf16 rows, on a CPU with a bf16 matrix tier).
void OneDnnMatmul1024(benchmark::State& state, bool bf16) {
  const int64_t n = 1024;
  using dt = dnnl::memory::data_type;
  if (bf16 && attn::Bf16MatrixTier() == attn::Bf16Tier::kNone) {
    state.SkipWithError("no bf16 matrix tier (AMX or AVX512-BF16) here");
    return;
  }
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  const dt in = bf16 ? dt::bf16 : dt::f32;
  dnnl::memory::desc md_in({n, n}, in, dnnl::memory::format_tag::ab);
  dnnl::memory::desc md({n, n}, dt::f32, dnnl::memory::format_tag::ab);
  auto a = Random(n * n, 1), b = Random(n * n, 2);
  std::vector<uint16_t> a16(bf16 ? n * n : 0), b16(bf16 ? n * n : 0);
  if (bf16) {
    attn::FloatToHalf(attn::HalfType::kBFloat16, a.data(), a16.data(), n * n);
    attn::FloatToHalf(attn::HalfType::kBFloat16, b.data(), b16.data(), n * n);
  }
  std::vector<float> c(n * n);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md_in, md_in, md), eng);
  dnnl::matmul mm(pd);
  dnnl::memory ma(md_in, eng, bf16 ? static_cast<void*>(a16.data()) : a.data());
  dnnl::memory mb(md_in, eng, bf16 ? static_cast<void*>(b16.data()) : b.data());
  dnnl::memory mc(md, eng, c.data());
  for (auto _ : state) {
    mm.execute(s, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
    s.wait();
  }
  state.counters["GFLOPS"] =
      benchmark::Counter(2.0 * n * n * n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(pd.impl_info_str());
}
void BM_OneDnnMatmul1024(benchmark::State& state) { OneDnnMatmul1024(state, false); }
void BM_OneDnnMatmul1024Bf16(benchmark::State& state) { OneDnnMatmul1024(state, true); }

// "float32", "bfloat16", or what a call permitted bf16 computed instead.
std::string PrecisionLabel(attn::ComputePrecision asked, attn::ComputePrecision used) {
  if (used == attn::ComputePrecision::kBFloat16) {
    return attn::Bf16Emulated() ? "bfloat16 (emulated)" : "bfloat16";
  }
  return asked == attn::ComputePrecision::kBFloat16 ? "float32 (no bf16 matrix tier)" : "float32";
}

// SDPA with B=1, H=8, Dh=64 on [B, H, L, Dh] tensors, causal or not, in
// `precision`; the label says what core computed.
void RunSdpa(benchmark::State& state, int64_t l, bool causal, attn::ComputePrecision precision) {
  const int64_t b = 1, h = 8, d = 64;
  auto q = Random(b * h * l * d, 1), k = Random(b * h * l * d, 2), v = Random(b * h * l * d, 3);
  const attn::Shape shape = {b, h, l, d};
  attn::ScaledDotProductAttentionOptions opt;
  opt.masks.causal = causal;
  opt.compute_precision = precision;
  attn::ComputePrecision used = attn::ComputePrecision::kFloat32;
  for (auto _ : state) {
    auto r = attn::ScaledDotProductAttention(attn::TensorView::Dense(q.data(), shape),
                                             attn::TensorView::Dense(k.data(), shape),
                                             attn::TensorView::Dense(v.data(), shape), opt);
    if (!r.ok()) state.SkipWithError(r.status().ToString().c_str());
    if (r.ok()) used = r->compute_precision;
    benchmark::DoNotOptimize(r);
  }
  // Two matmuls of 2*L*L*D each; causal counts only the unmasked pairs.
  const double pairs = causal ? l * (l + 1) / 2.0 : static_cast<double>(l) * l;
  state.counters["GFLOPS"] = benchmark::Counter(4.0 * b * h * d * pairs / 1e9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  if (precision == attn::ComputePrecision::kBFloat16) {
    state.SetLabel(PrecisionLabel(precision, used));
  }
}

void BM_Sdpa(benchmark::State& state) {
  RunSdpa(state, state.range(0), state.range(1) != 0, attn::ComputePrecision::kFloat32);
}

// Issue 24's SDPA row, L = 2048, H8 D64, in float32 and bfloat16 (bf16: 1):
// bfloat16 where the CPU has a bf16 matrix tier, else it computes float32
// (the label says which).
void BM_SdpaPrecision(benchmark::State& state) {
  const bool bf16 = state.range(1) != 0;
  RunSdpa(state, state.range(0), false,
          bf16 ? attn::ComputePrecision::kBFloat16 : attn::ComputePrecision::kFloat32);
  if (!bf16) state.SetLabel("float32");
}

// The variants of issue 23, each on its own shape, D=128 unless said; the
// FLOPs count only the unmasked (query, key) pairs, counted exactly:
//   kind 0: GQA Hq32/Hkv8, Lq = Lk = L, no mask
//   kind 1: bottom-right causal, Lq 512 over Lk = L (a prefill chunk), H8
//   kind 2: a window of 1024 (left, causal), Lq = Lk = L, H8 D64
void BM_SdpaVariant(benchmark::State& state) {
  const int kind = static_cast<int>(state.range(0));
  const int64_t l = state.range(1);
  const int64_t hq = kind == 0 ? 32 : 8, hkv = kind == 0 ? 8 : 8, d = kind == 2 ? 64 : 128;
  const int64_t lq = kind == 1 ? 512 : l, lk = l;
  auto q = Random(hq * lq * d, 1), k = Random(hkv * lk * d, 2), v = Random(hkv * lk * d, 3);
  attn::ScaledDotProductAttentionOptions opt;
  if (kind == 1) {
    opt.masks.causal = true;
    opt.masks.causal_alignment = attn::CausalAlignment::kBottomRight;
  }
  if (kind == 2) opt.masks.causal = true, opt.masks.window_left = 1024;
  const attn::Shape qs = {1, hq, lq, d}, ks = {1, hkv, lk, d};
  for (auto _ : state) {
    auto r = attn::ScaledDotProductAttention(attn::TensorView::Dense(q.data(), qs),
                                             attn::TensorView::Dense(k.data(), ks),
                                             attn::TensorView::Dense(v.data(), ks), opt);
    if (!r.ok()) state.SkipWithError(r.status().ToString().c_str());
    benchmark::DoNotOptimize(r);
  }
  double pairs = 0;
  for (int64_t i = 0; i < lq; ++i) {
    const int64_t pos = kind == 1 ? i + lk - lq : i;
    const int64_t hi = kind == 0 ? lk : pos + 1;
    const int64_t lo = kind == 2 ? std::max<int64_t>(0, pos - 1024) : 0;
    pairs += static_cast<double>(hi - lo);
  }
  state.counters["GFLOPS"] =
      benchmark::Counter(4.0 * hq * d * pairs / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// A packed batch of 8 causal sequences of 128 to 4096 tokens (H8 D64) in
// one call (cu_seqlens, one:0), against the same sequences run one call
// each (one:1). FLOPs of the unmasked pairs only.
void BM_SdpaPacked(benchmark::State& state) {
  const bool one_by_one = state.range(0) != 0;
  const std::vector<int64_t> lengths = {128, 256, 512, 768, 1024, 2048, 3072, 4096};
  const int64_t h = 8, d = 64;
  std::vector<int64_t> cu = {0};
  for (int64_t l : lengths) cu.push_back(cu.back() + l);
  const int64_t total = cu.back();
  auto q = Random(total * h * d, 1), k = Random(total * h * d, 2), v = Random(total * h * d, 3);
  attn::ScaledDotProductAttentionOptions opt;
  opt.masks.causal = true;
  const attn::Shape packed = {total, h, d};
  for (auto _ : state) {
    if (!one_by_one) {
      opt.cu_seqlens_q = cu, opt.cu_seqlens_k = cu;
      auto r = attn::ScaledDotProductAttention(attn::TensorView::Dense(q.data(), packed),
                                               attn::TensorView::Dense(k.data(), packed),
                                               attn::TensorView::Dense(v.data(), packed), opt);
      if (!r.ok()) state.SkipWithError(r.status().ToString().c_str());
      benchmark::DoNotOptimize(r);
      continue;
    }
    for (size_t s = 0; s < lengths.size(); ++s) {
      // Sequence s of the same packed buffers, viewed [1, H, L, D] through strides.
      const int64_t row0 = cu[s], l = lengths[s];
      auto view = [&](const std::vector<float>& x) {
        attn::TensorView t = attn::TensorView::Dense(x.data() + row0 * h * d, {1, h, l, d});
        t.strides = {h * l * d, d, h * d, 1};
        return t;
      };
      auto r = attn::ScaledDotProductAttention(view(q), view(k), view(v), opt);
      if (!r.ok()) state.SkipWithError(r.status().ToString().c_str());
      benchmark::DoNotOptimize(r);
    }
  }
  double pairs = 0;
  for (int64_t l : lengths) pairs += static_cast<double>(l) * static_cast<double>(l + 1) / 2;
  state.counters["GFLOPS"] =
      benchmark::Counter(4.0 * h * d * pairs / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// nn.MultiheadAttention-style self-attention, E=512, H=8, packed in_proj.
// BM_MhaWeights also returns the head-averaged weights (PyTorch's default
// need_weights=True), which takes the exact matmul-softmax-matmul path.
// `as_model`: the weights are loaded as a model, as the server serves them
// (which may also keep small weights as W^T: LinearView::weight_t).
void RunMha(benchmark::State& state, bool need_weights, int64_t e = 512, int64_t h = 8,
            int threads = 0, bool as_model = false,
            attn::ComputePrecision precision = attn::ComputePrecision::kFloat32) {
  const int64_t b = state.range(0), l = state.range(1);
  auto x = Random(b * l * e, 1);
  auto in_proj = Random(3 * e * e, 2), in_bias = Random(3 * e, 3);
  auto out_w = Random(e * e, 4), out_b = Random(e, 5);
  for (auto& w : in_proj) w *= 0.05f;
  for (auto& w : out_w) w *= 0.05f;
  attn::ProjectionWeights pw;
  auto rows = [&](int i) {
    return attn::LinearView{attn::TensorView::Dense(in_proj.data() + i * e * e, {e, e}),
                            attn::TensorView::Dense(in_bias.data() + i * e, {e})};
  };
  pw.q = rows(0), pw.k = rows(1), pw.v = rows(2);
  pw.out = attn::LinearView{attn::TensorView::Dense(out_w.data(), {e, e}),
                            attn::TensorView::Dense(out_b.data(), {e})};
  std::optional<attn::AttentionModel> model;
  if (as_model) {
    auto tensor = [](const std::vector<float>& v, attn::Shape shape) {
      attn::Tensor t(std::move(shape));
      std::copy(v.begin(), v.end(), t.data.begin());
      return t;
    };
    std::map<std::string, attn::Tensor> tensors;
    tensors.emplace("in_proj_weight", tensor(in_proj, {3 * e, e}));
    tensors.emplace("in_proj_bias", tensor(in_bias, {3 * e}));
    tensors.emplace("out_proj.weight", tensor(out_w, {e, e}));
    tensors.emplace("out_proj.bias", tensor(out_b, {e}));
    auto m = attn::AttentionModel::FromTensors("bench", attn::ModelKind::kMultiHeadAttention, h,
                                               std::move(tensors));
    if (!m.ok()) return state.SkipWithError(m.status().ToString().c_str());
    model.emplace(std::move(*m));
    pw = model->projections();
  }
  attn::MultiHeadAttentionOptions opt;
  opt.num_heads = h;
  opt.need_weights = need_weights;
  opt.num_threads = threads;
  opt.compute_precision = precision;
  const auto xv = attn::TensorView::Dense(x.data(), {b, l, e});
  attn::ComputePrecision used = attn::ComputePrecision::kFloat32;
  for (auto _ : state) {
    auto r = attn::MultiHeadAttention(pw, xv, xv, xv, opt);
    if (!r.ok()) state.SkipWithError(r.status().ToString().c_str());
    if (r.ok()) used = r->compute_precision;
    benchmark::DoNotOptimize(r);
  }
  state.SetLabel(PrecisionLabel(precision, used));
  const double flops = 4.0 * 2.0 * b * l * e * e + 4.0 * b * l * l * e;
  state.counters["GFLOPS"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Mha(benchmark::State& state) { RunMha(state, false); }
// Issue 24's MHA row (B1 L2048 E512 H8, a model's weights) in float32 and
// bfloat16 (bf16: 1); the label says what core computed.
void BM_MhaPrecision(benchmark::State& state) {
  const bool bf16 = state.range(2) != 0;
  RunMha(state, false, 512, 8, 0, true,
         bf16 ? attn::ComputePrecision::kBFloat16 : attn::ComputePrecision::kFloat32);
}
void BM_MhaWeights(benchmark::State& state) { RunMha(state, true); }
// The server benchmark's small request: E=64, 4 heads, on one thread, with
// the weights of a model (as the server runs requests this small).
// Measures per-call overhead.
void BM_MhaSmall(benchmark::State& state) { RunMha(state, false, 64, 4, 1, true); }

// float32 <-> float16/bfloat16 on one thread, over 1M elements (4 MiB of
// float32, 2 MiB of half: L2-resident on neither side, as a large call's
// tensors are). `f32_GBps` counts the float32 side's bytes.
void RunHalf(benchmark::State& state, bool widen) {
  const auto type = state.range(0) == 0 ? attn::HalfType::kFloat16 : attn::HalfType::kBFloat16;
  const int64_t n = 1 << 20;
  auto f = Random(n, 5);
  std::vector<uint16_t> h(n);
  attn::FloatToHalf(type, f.data(), h.data(), n);
  for (auto _ : state) {
    if (widen) {
      attn::HalfToFloat(type, h.data(), f.data(), n);
    } else {
      attn::FloatToHalf(type, f.data(), h.data(), n);
    }
    benchmark::ClobberMemory();
  }
  state.counters["f32_GBps"] = benchmark::Counter(4.0 * static_cast<double>(n) / 1e9,
                                                  benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(attn::HalfTypeName(type));
}
void BM_HalfToFloat(benchmark::State& state) { RunHalf(state, true); }
void BM_FloatToHalf(benchmark::State& state) { RunHalf(state, false); }

BENCHMARK(BM_HalfToFloat)
    ->Arg(0)
    ->Arg(1)
    ->ArgName("bf16")
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FloatToHalf)
    ->Arg(0)
    ->Arg(1)
    ->ArgName("bf16")
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_OneDnnMatmul1024)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_OneDnnMatmul1024Bf16)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Sdpa)
    ->ArgsProduct({{128, 512, 2048, 8192}, {0, 1}})
    ->ArgNames({"L", "causal"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SdpaPrecision)
    ->ArgsProduct({{2048}, {0, 1}})
    ->ArgNames({"L", "bf16"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SdpaVariant)
    ->Args({0, 2048})
    ->Args({0, 8192})
    ->Args({1, 8192})
    ->Args({2, 16384})
    ->ArgNames({"kind", "L"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SdpaPacked)
    ->Arg(0)
    ->Arg(1)
    ->ArgName("one")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Mha)
    ->ArgsProduct({{1, 8}, {128, 512, 2048}})
    ->ArgNames({"B", "L"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MhaPrecision)
    ->ArgsProduct({{1}, {2048}, {0, 1}})
    ->ArgNames({"B", "L", "bf16"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MhaSmall)
    ->ArgsProduct({{1}, {16}})
    ->ArgNames({"B", "L"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MhaWeights)
    ->ArgsProduct({{1}, {128, 512, 2048}})
    ->ArgNames({"B", "L"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

std::string CpuModel() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("cpu_model", CpuModel());
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("compute_threads", std::to_string(attn::ComputeThreads()));
  benchmark::AddCustomContext("onednn_isa", attn::OneDnnIsaName());
  benchmark::AddCustomContext("kernel_tier", attn::IsaTierName(attn::KernelTier()));
  benchmark::AddCustomContext("engine_tier", attn::EngineTierName());
  benchmark::AddCustomContext("bf16_matrix", attn::Bf16TierName(attn::Bf16MatrixTier()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
