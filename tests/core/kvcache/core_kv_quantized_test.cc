// Quantized KV-cache sessions in core: int8 and fp8 e4m3 keys and values,
// chosen separately. Every Extend (prefill on the blocked kernel, decode on
// the decode kernel, chunks that cross pages) against a float64 replay of
// what the cache stores (kv_quant_model.h's quantizers); the error against
// the unquantized inputs within the bounds docs/precision.md gives; fork,
// truncate mid-page, copy-on-write, replays compared against the stored
// codes, non-finite values refused, int4 refused, a full pool. Runs on
// every kernel tier (CMakeLists.txt).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>

#include "attn/cpu_info.h"
#include "attn/kv_cache.h"
#include "session_replay.h"
#include "status_matchers.h"

namespace {

using attn::CacheFormat;
using attn::CacheType;
using attn::KvCacheStore;
using attn::KvExtendOptions;
using attn::KvSessionSpec;
using attn::KvStep;
using attn::StatusCode;
using attn::TensorView;
using attn_test::ReplaySession;
using attn_test::ReplayType;

// A side's per-token model (int4 keys are blocked: ReplaySession::key_block).
attn_test::ReplayQuantizer QuantizerOf(CacheFormat f, bool keys) {
  return f == CacheFormat::kInt8            ? attn_test::ModelInt8
         : f == CacheFormat::kFp8E4M3       ? attn_test::ModelFp8
         : f == CacheFormat::kInt4 && !keys ? attn_test::ModelInt4Values
                                            : nullptr;
}

struct Formats {
  CacheFormat key, value;
  CacheType type;
};

std::string Name(const Formats& f) {
  return std::string(attn::CacheFormatName(f.key, f.type)) + "_" +
         attn::CacheFormatName(f.value, f.type);
}

struct Session {
  std::string id;
  int64_t hq;
  ReplaySession replay;  // what the cache stores
  ReplaySession exact;   // the inputs unquantized
};

attn::KvStoreOptions Pool(int64_t pool_bytes = int64_t{64} << 20) {
  attn::KvStoreOptions o;
  o.pool_bytes = pool_bytes;
  o.page_bytes = 2048;  // D = Dv = 16: a few dozen tokens a page
  o.default_max_tokens = 8192;
  return o;
}

Session Open(KvCacheStore& store, const std::string& id, const Formats& f, int64_t hq = 8,
             int64_t hkv = 2, int64_t d = 16, int64_t dv = 16) {
  KvSessionSpec spec;
  spec.session_id = id;
  spec.num_kv_heads = hkv;
  spec.head_dim = d;
  spec.value_dim = dv;
  spec.cache_type = f.type;
  spec.key_format = f.key;
  spec.value_format = f.value;
  auto info = store.Create(spec);
  EXPECT_TRUE(info.ok()) << info.status().ToString();
  const ReplayType rt = f.type == CacheType::kFloat32    ? ReplayType::kFloat32
                        : f.type == CacheType::kBFloat16 ? ReplayType::kBFloat16
                                                         : ReplayType::kFloat16;
  Session s{id, hq, ReplaySession(1, hkv, d, dv, rt),
            ReplaySession(1, hkv, d, dv, ReplayType::kFloat32)};
  s.replay.key_q = QuantizerOf(f.key, true);
  s.replay.value_q = QuantizerOf(f.value, false);
  if (info.ok()) s.replay.key_block = info->key_block_tokens;
  return s;
}

struct Step {
  std::vector<float> q, k, v;
  int64_t n, nkv;
};

Step MakeStep(const Session& s, int64_t n, int64_t nkv, std::mt19937& rng) {
  Step st{attn_test::Normal(s.hq * n * s.replay.d, rng),
          attn_test::Normal(s.replay.hkv * nkv * s.replay.d, rng),
          attn_test::Normal(s.replay.hkv * nkv * s.replay.dv, rng), n, nkv};
  return st;
}

KvStep View(const Session& s, const Step& st) {
  KvStep step;
  step.session_id = s.id;
  step.query = TensorView::Dense(st.q.data(), {st.n > 0 ? s.hq : s.replay.hkv, st.n, s.replay.d});
  step.key = TensorView::Dense(st.k.data(), {s.replay.hkv, st.nkv, s.replay.d});
  step.value = TensorView::Dense(st.v.data(), {s.replay.hkv, st.nkv, s.replay.dv});
  return step;
}

// How close an answer comes to the replay of what the cache stores. int8
// keys meet the query rounded to int16, int8 values the weights (2^-16 of
// the largest): 2e-4 instead of 1e-5. int4's integer loops (widths that
// are multiples of 32, on the AVX2 tier and above) round the query times a
// key block's scales to int16 (2^-16 of its largest) and the weights times
// the values' scales to bytes (1/510 of the largest): 2e-2. fp8's loops on
// a CPU with a bf16 unit (the same widths, AVX-512 tier) round the query
// and the weights to bf16 (2^-8 of each product at most): 1e-2.
double Tolerance(const Session& s) {
  const auto int4 = attn_test::ModelInt4Values;
  const bool loops = s.replay.d % 32 == 0 && s.replay.dv % 32 == 0;
  const bool wide = attn::KernelTier() >= attn::IsaTier::kAvx512 && loops;
  const bool int4_loops = attn::KernelTier() >= attn::IsaTier::kAvx2 && loops;
  if (int4_loops && (s.replay.key_block > 0 || s.replay.value_q == int4)) return 2e-2;
  const auto fp8 = attn_test::ModelFp8;
  if (wide && attn::Bf16MatrixTier() != attn::Bf16Tier::kNone &&
      (s.replay.key_q == fp8 || s.replay.value_q == fp8)) {
    return 1e-2;
  }
  const bool int8 =
      s.replay.key_q == attn_test::ModelInt8 || s.replay.value_q == attn_test::ModelInt8;
  return int8 ? 2e-4 : 1e-5;
}

// Relative RMS of out against want (float64).
double RelRms(const float* out, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (out[i] - want[i]) * (out[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

// Extends s by st, checks the answer against the replay of what the cache
// stores (tight) and returns its relative RMS error against the unquantized
// inputs.
double ExtendAndCheck(KvCacheStore& store, Session& s, const Step& st, int threads = 0) {
  KvExtendOptions o;
  o.score.return_lse = true;
  o.num_threads = threads;
  auto r = store.Extend(0, {View(s, st)}, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return 1e9;
  s.replay.Append(0, st.k, st.v, st.nkv);
  s.exact.Append(0, st.k, st.v, st.nkv);
  if (st.n == 0) return 0;
  const auto want = s.replay.Expected(0, st.q, s.hq, st.n, {});
  attn_test::ExpectMatches(want, r->results[0].output.data.data(), r->results[0].lse->data.data(),
                           Tolerance(s));
  return RelRms(r->results[0].output.data.data(), s.exact.Expected(0, st.q, s.hq, st.n, {}).out);
}

class Quantized : public ::testing::TestWithParam<Formats> {};

// The most relative RMS error of an answer against the unquantized inputs
// (N(0,1) keys and values) per format: a quantized side's bound, or the
// cache type's rounding.
double Bound(const Formats& f) {
  auto side = [&](CacheFormat c) {
    return c == CacheFormat::kInt8      ? 0.02
           : c == CacheFormat::kFp8E4M3 ? 0.08
           : c == CacheFormat::kInt4    ? 0.25
                                        : 0.01;
  };
  return std::max(side(f.key), side(f.value));
}

TEST_P(Quantized, PrefillChunksAndDecodeSeeWhatTheCacheStores) {
  KvCacheStore store(Pool());
  std::mt19937 rng(3);
  Session s = Open(store, "q", GetParam());
  // A prefill of 100 (400 rows a kv head: the blocked kernel over the
  // gathered cache), chunks of 7 and 50 (the decode kernel), then decode.
  double worst = 0;
  for (int64_t n : {100, 7, 50, 1, 1, 1, 3, 1}) {
    worst = std::max(worst, ExtendAndCheck(store, s, MakeStep(s, n, n, rng)));
  }
  EXPECT_LT(worst, Bound(GetParam()));
  std::printf("%s: worst relative RMS against the unquantized inputs %.4f\n",
              Name(GetParam()).c_str(), worst);
  auto info = store.Get("", "q");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->spec.key_format, GetParam().key);
  EXPECT_EQ(info->spec.value_format, GetParam().value);
}

// Steps of 1200 token rows (300 tokens, 4 kv heads): written into their
// pages and, for the prefill, gathered back on a team of two threads, a kv
// head at a time (kv_attend.cc); every head's answers against the replay,
// then a decode step and a second large step over them.
TEST_P(Quantized, LargeStepsAreWrittenAndGatheredOnTheTeam) {
  KvCacheStore store(Pool());
  std::mt19937 rng(8);
  Session s = Open(store, "big", GetParam(), 8, 4);
  for (int64_t n : {300, 1, 300}) ExtendAndCheck(store, s, MakeStep(s, n, n, rng), 2);
}

TEST_P(Quantized, ForkTruncateMidPageAndCopyOnWrite) {
  KvCacheStore store(Pool());
  std::mt19937 rng(4);
  Session a = Open(store, "a", GetParam());
  const int64_t tpp = store.Get("", "a")->tokens_per_page;
  ExtendAndCheck(store, a, MakeStep(a, 0, tpp + tpp / 2, rng));  // ends mid-page
  ASSERT_TRUE(store.Fork("", "a", "a:b").ok());
  Session b = a;
  b.id = "a:b";
  // Both write into the shared last page: each gets its own copy.
  ExtendAndCheck(store, a, MakeStep(a, 2, 2, rng));
  ExtendAndCheck(store, b, MakeStep(b, 2, 2, rng));
  ExtendAndCheck(store, a, MakeStep(a, 1, 0, rng));  // a still sees its own tokens
  // Truncate b mid-page, then extend past the cut.
  const int64_t cut = tpp + 3;
  ASSERT_TRUE(store.Truncate("", "a:b", cut).ok());
  b.replay.Truncate(cut);
  b.exact.Truncate(cut);
  ExtendAndCheck(store, b, MakeStep(b, 4, 4, rng));
  ExtendAndCheck(store, a, MakeStep(a, 1, 1, rng));
}

TEST_P(Quantized, ARetriedStepIsAReplayOnlyWithTheSameStoredCodes) {
  KvCacheStore store(Pool());
  std::mt19937 rng(5);
  Session s = Open(store, "r", GetParam());
  ExtendAndCheck(store, s, MakeStep(s, 5, 5, rng));
  const Step st = MakeStep(s, 1, 1, rng);
  KvStep step = View(s, st);
  step.expected_tokens = 5;
  auto first = store.Extend(0, {step}, {});
  ASSERT_TRUE(first.ok());
  auto again = store.Extend(0, {step}, {});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->replayed, std::vector<bool>{true});
  EXPECT_EQ(again->results[0].output.data, first->results[0].output.data);
  // Other values at that position: not a replay, and nothing changes.
  Step other = st;
  for (float& v : other.v) v += 1.0f;
  KvStep wrong = View(s, other);
  wrong.expected_tokens = 5;
  attn_test::ExpectStatus(store.Extend(0, {wrong}, {}).status(), StatusCode::kFailedPrecondition,
                          "expected_tokens 5");
  EXPECT_EQ(store.Get("", "r")->layer_tokens, std::vector<int64_t>{6});
}

// A query row that is not finite answers NaN (its output and lse), and
// the step's other rows their replay: the integer loops round the query
// rows and the weights per row, so a NaN in one row must reach no other.
// At D = 16 (the AVX2 integer PV on every tier that has it) and D = 32 (the
// widest loops), decode and a 3-token chunk.
TEST_P(Quantized, ANaNQueryRowAnswersNaNAndTheOtherRowsTheirReplay) {
  for (int64_t d : {16, 32}) {
    SCOPED_TRACE("D " + std::to_string(d));
    KvCacheStore store(Pool());
    std::mt19937 rng(9);
    Session s = Open(store, "nan" + std::to_string(d), GetParam(), 8, 2, d, d);
    ExtendAndCheck(store, s, MakeStep(s, 70, 70, rng));
    for (int64_t n : {1, 3}) {
      Step st = MakeStep(s, n, n, rng);
      const int64_t head = 5, t = n - 1;  // one row of a group of four
      st.q[static_cast<size_t>((head * n + t) * d + 2)] = std::nanf("");
      KvExtendOptions o;
      o.score.return_lse = true;
      auto r = store.Extend(0, {View(s, st)}, o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      s.replay.Append(0, st.k, st.v, n);
      s.exact.Append(0, st.k, st.v, n);
      const auto want = s.replay.Expected(0, st.q, s.hq, n, {});
      const float* out = r->results[0].output.data.data();
      const float* lse = r->results[0].lse->data.data();
      for (int64_t row = 0; row < s.hq * n; ++row) {
        if (row == head * n + t) {
          for (int64_t x = 0; x < d; ++x) ASSERT_TRUE(std::isnan(out[row * d + x])) << x;
          EXPECT_TRUE(std::isnan(lse[row]));
          continue;
        }
        // (ExpectMatches' tolerances, row by row.)
        const double wl = want.lse[static_cast<size_t>(row)], tol = Tolerance(s);
        EXPECT_NEAR(lse[row], wl, tol * std::max(1.0, std::fabs(wl))) << row;
        for (int64_t x = 0; x < d; ++x) {
          const double w = want.out[static_cast<size_t>(row * d + x)];
          ASSERT_NEAR(out[row * d + x], w, tol * std::max(1.0, attn_test::MaxAbs(want.out)))
              << row << "," << x;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Formats, Quantized,
    ::testing::Values(Formats{CacheFormat::kInt8, CacheFormat::kInt8, CacheType::kBFloat16},
                      Formats{CacheFormat::kFp8E4M3, CacheFormat::kFp8E4M3, CacheType::kBFloat16},
                      Formats{CacheFormat::kInt8, CacheFormat::kAsCacheType, CacheType::kFloat32},
                      Formats{CacheFormat::kAsCacheType, CacheFormat::kFp8E4M3,
                              CacheType::kFloat16},
                      Formats{CacheFormat::kFp8E4M3, CacheFormat::kInt8, CacheType::kFloat32},
                      Formats{CacheFormat::kInt4, CacheFormat::kInt4, CacheType::kBFloat16},
                      Formats{CacheFormat::kInt4, CacheFormat::kAsCacheType, CacheType::kFloat32},
                      Formats{CacheFormat::kInt8, CacheFormat::kInt4, CacheType::kFloat16}),
    [](const auto& info) { return Name(info.param); });

TEST(QuantizedSessions, NonFiniteValuesAreRefusedAndChangeNothing) {
  KvCacheStore store(Pool());
  std::mt19937 rng(6);
  Session s =
      Open(store, "f", {CacheFormat::kInt8, CacheFormat::kAsCacheType, CacheType::kFloat32});
  ExtendAndCheck(store, s, MakeStep(s, 2, 2, rng));
  Step bad = MakeStep(s, 1, 1, rng);
  bad.k[3] = INFINITY;
  attn_test::ExpectStatus(
      store.Extend(0, {View(s, bad)}, {}).status(), StatusCode::kInvalidArgument,
      "steps[0] (session 'f') key: the session stores it as int8, which holds finite values "
      "only; expected finite values, got inf at [0, 0, 3]");
  // The value side is float32: an inf value is stored as given.
  Step inf_value = MakeStep(s, 1, 1, rng);
  inf_value.v[0] = INFINITY;
  EXPECT_TRUE(store.Extend(0, {View(s, inf_value)}, {}).ok());
  EXPECT_EQ(store.Get("", "f")->layer_tokens, std::vector<int64_t>{3});
}

// int4 keys' blocks: a truncate into a full block stages its kept tokens
// again (from their codes, in the cache's type), one on a block's edge
// keeps nothing staged, one into the staged block keeps it; each time the
// answers follow the float64 replay of exactly that, and the block fills
// and is quantized again.
TEST(QuantizedSessions, Int4KeysTruncatedIntoAFullBlockStageItsTokensAgain) {
  KvCacheStore store(Pool());
  std::mt19937 rng(9);
  Session s = Open(store, "t4", {CacheFormat::kInt4, CacheFormat::kInt4, CacheType::kBFloat16});
  const int64_t G = store.Get("", "t4")->key_block_tokens;
  ASSERT_GT(G, 8);
  ExtendAndCheck(store, s, MakeStep(s, 0, 2 * G + G / 2, rng));  // two full blocks, one staged
  const auto bytes_before = store.Get("", "t4")->cache_bytes;
  for (int64_t cut : {2 * G + 3, G + 5, 2 * G, G - 1}) {
    SCOPED_TRACE("truncate to " + std::to_string(cut));
    ASSERT_TRUE(store.Truncate("", "t4", cut).ok());
    s.replay.Truncate(cut);
    s.exact.Truncate(cut);
    ExtendAndCheck(store, s, MakeStep(s, 1, 0, rng));  // reads the re-staged tokens
    for (int i = 0; i < 3; ++i) ExtendAndCheck(store, s, MakeStep(s, 1, 1, rng));
    ExtendAndCheck(store, s, MakeStep(s, 2, G, rng));  // fills the block, quantized again
  }
  EXPECT_GT(bytes_before, 0);
  EXPECT_EQ(store.Get("", "t4")->layer_tokens[0], G - 1 + 3 + G);
}

// A cancelled Extend on int4 keys (its step completing a block and staging
// the next) leaves the session as it was: its staging pages, its pool
// bytes, and answers that follow the replay afterwards.
TEST(QuantizedSessions, CancelledInt4ExtendChangesNothing) {
  KvCacheStore store(Pool());
  std::mt19937 rng(10);
  Session s = Open(store, "c4", {CacheFormat::kInt4, CacheFormat::kInt4, CacheType::kBFloat16});
  const int64_t G = store.Get("", "c4")->key_block_tokens;
  ExtendAndCheck(store, s, MakeStep(s, 0, G / 2, rng));  // half a block staged
  const int64_t used = store.bytes_used();
  std::atomic<bool> cancelled{true};
  KvExtendOptions o;
  o.cancelled = &cancelled;
  const Step big = MakeStep(s, 1, G, rng);  // would fill the block and stage the next
  attn_test::ExpectStatus(store.Extend(0, {View(s, big)}, o).status(), StatusCode::kCancelled,
                          "cancelled");
  EXPECT_EQ(store.Get("", "c4")->layer_tokens[0], G / 2);
  EXPECT_EQ(store.bytes_used(), used);
  for (int i = 0; i < 3; ++i) ExtendAndCheck(store, s, MakeStep(s, 1, 1, rng));
  ExtendAndCheck(store, s, MakeStep(s, 2, G, rng));
}

// int4 and fp8 at head widths their own loops take (multiples of 32; int4
// on the AVX2 tier and above, fp8 on the AVX-512 tier with a bf16 unit;
// other tiers run the widening loops): a prefill over two blocks and the staged one, chunks and decode,
// then a fork, a truncate into a full block and more steps, each against
// the replay of what the cache stores.
TEST(QuantizedSessions, WideHeadsSeeWhatTheCacheStores) {
  const Formats formats[] = {
      Formats{CacheFormat::kInt4, CacheFormat::kInt4, CacheType::kBFloat16},
      Formats{CacheFormat::kInt8, CacheFormat::kInt4, CacheType::kFloat32},
      Formats{CacheFormat::kInt4, CacheFormat::kAsCacheType, CacheType::kFloat16},
      Formats{CacheFormat::kFp8E4M3, CacheFormat::kFp8E4M3, CacheType::kBFloat16},
      Formats{CacheFormat::kFp8E4M3, CacheFormat::kInt8, CacheType::kFloat32}};
  for (int64_t d : {128, 96}) {
    for (const Formats& f : formats) {
      SCOPED_TRACE(Name(f) + " d " + std::to_string(d));
      attn::KvStoreOptions o = Pool(int64_t{256} << 20);
      o.page_bytes = 32768;
      KvCacheStore store(o);
      std::mt19937 rng(21);
      Session s = Open(store, "w", f, 8, 2, d, d);
      double worst = 0;
      for (int64_t n : {300, 7, 50, 1, 1, 3, 1}) {
        worst = std::max(worst, ExtendAndCheck(store, s, MakeStep(s, n, n, rng)));
      }
      EXPECT_LT(worst, Bound(f));
      ASSERT_TRUE(store.Fork("", "w", "w:b").ok());
      Session b = s;
      b.id = "w:b";
      ASSERT_TRUE(store.Truncate("", "w:b", 250).ok());
      b.replay.Truncate(250);
      b.exact.Truncate(250);
      for (int64_t n : {1, 4, 120}) ExtendAndCheck(store, b, MakeStep(b, n, n, rng));
      ExtendAndCheck(store, s, MakeStep(s, 1, 1, rng));
    }
  }
}

TEST(QuantizedSessions, Int4NeedsEvenWidths) {
  KvCacheStore store(Pool());
  KvSessionSpec spec;
  spec.head_dim = 16;
  spec.value_dim = 15;
  spec.value_format = CacheFormat::kInt4;
  attn_test::ExpectStatus(store.Create(spec).status(), StatusCode::kInvalidArgument,
                          "value_format: int4 needs an even value_dim (two channels a byte), "
                          "got 15");
  EXPECT_EQ(store.ListAll().size(), 0u);
}

TEST(QuantizedSessions, BytesPerTokenAndAFullPool) {
  // D = Dv = 128 in 32 KiB pages: bf16 holds 64 tokens a page, int8 124 and
  // fp8 124 (codes and a factor a side): 0.516 of bf16's bytes a token.
  attn::KvStoreOptions o;
  o.pool_bytes = 10 * (32 << 10);
  KvCacheStore store(o);
  int64_t tpp[3];
  const CacheFormat fs[] = {CacheFormat::kAsCacheType, CacheFormat::kInt8, CacheFormat::kFp8E4M3};
  for (int i = 0; i < 3; ++i) {
    KvSessionSpec spec;
    spec.session_id = "s" + std::to_string(i);
    spec.head_dim = 128;
    spec.cache_type = CacheType::kBFloat16;
    spec.key_format = spec.value_format = fs[i];
    auto info = store.Create(spec);
    ASSERT_TRUE(info.ok());
    tpp[i] = info->tokens_per_page;
  }
  EXPECT_EQ(tpp[0], 64);
  EXPECT_EQ(tpp[1], 124);
  EXPECT_EQ(tpp[2], 124);
  EXPECT_LE(64.0 / tpp[1], 0.53);
  // Ten pages: 1240 int8 tokens fit, the 1241st is refused whole.
  std::mt19937 rng(8);
  std::vector<float> kv = attn_test::Normal(1241 * 128, rng), q;
  auto step = [&](int64_t n) {
    KvStep st;
    st.session_id = "s1";
    st.query = TensorView::Dense(q.data(), {1, 0, 128});
    st.key = TensorView::Dense(kv.data(), {1, n, 128});
    st.value = TensorView::Dense(kv.data(), {1, n, 128});
    return st;
  };
  attn_test::ExpectStatus(store.Extend(0, {step(1241)}, {}).status(),
                          StatusCode::kResourceExhausted, "");
  EXPECT_TRUE(store.Extend(0, {step(1240)}, {}).ok());
  EXPECT_EQ(store.Get("", "s1")->cache_bytes, 10 * (32 << 10));
}

}  // namespace
