// Exactly-once steps, numerics at the edges, and long prefills in bounded
// memory, in core: a step retried with expected_tokens is a replay (the
// same answer, nothing appended), a step at the wrong place is refused
// whole; a cancellation or deadline landing between compute and commit
// applies nothing; a NaN query stays NaN; an inf value outside a row's
// window does not touch it; a prefill over a long cache past the gather
// limit is attended over the pages in place. Every result is checked
// against a float64 replay. Runs on every kernel tier (CMakeLists.txt).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>

#include "attn/kv_cache.h"
#include "session_replay.h"
#include "status_matchers.h"

namespace {

using attn::CacheType;
using attn::KvCacheStore;
using attn::KvExtendOptions;
using attn::KvSessionSpec;
using attn::KvStep;
using attn::StatusCode;
using attn::TensorView;
using attn_test::ReplayOptions;
using attn_test::ReplaySession;
using attn_test::ReplayType;

struct Session {
  std::string id;
  int64_t hq, hkv, d;
  ReplaySession replay;
};

Session Open(KvCacheStore& store, const std::string& id, int64_t hq, int64_t hkv, int64_t d,
             CacheType type = CacheType::kFloat32, int64_t layers = 2) {
  KvSessionSpec spec;
  spec.session_id = id;
  spec.num_layers = layers;
  spec.num_kv_heads = hkv;
  spec.head_dim = d;
  spec.cache_type = type;
  EXPECT_TRUE(store.Create(spec).ok());
  const ReplayType rt = type == CacheType::kBFloat16  ? ReplayType::kBFloat16
                        : type == CacheType::kFloat16 ? ReplayType::kFloat16
                                                      : ReplayType::kFloat32;
  return Session{id, hq, hkv, d, ReplaySession(layers, hkv, d, d, rt)};
}

attn::KvStoreOptions Pool() {
  attn::KvStoreOptions o;
  o.pool_bytes = int64_t{256} << 20;
  o.page_bytes = 4096;
  o.default_max_tokens = 1 << 20;
  return o;
}

struct Data {
  std::vector<float> q, k, v;
  int64_t n, nkv;
};

Data Make(const Session& s, int64_t n, int64_t nkv, std::mt19937& rng) {
  return Data{attn_test::Normal(s.hq * n * s.d, rng), attn_test::Normal(s.hkv * nkv * s.d, rng),
              attn_test::Normal(s.hkv * nkv * s.d, rng), n, nkv};
}

KvStep View(const Session& s, const Data& x, std::optional<int64_t> expected = {}) {
  KvStep st;
  st.session_id = s.id;
  st.query = TensorView::Dense(x.q.data(), {x.n > 0 ? s.hq : s.hkv, x.n, s.d});
  if (x.nkv > 0) {
    st.key = TensorView::Dense(x.k.data(), {s.hkv, x.nkv, s.d});
    st.value = TensorView::Dense(x.v.data(), {s.hkv, x.nkv, s.d});
  }
  st.expected_tokens = expected;
  return st;
}

KvExtendOptions Lse() {
  KvExtendOptions o;
  o.score.return_lse = true;
  return o;
}

int64_t Tokens(KvCacheStore& store, const std::string& id, int64_t layer) {
  auto info = store.Get("", id);
  return info.ok() ? info->layer_tokens[static_cast<size_t>(layer)] : -1;
}

class ExactlyOnce : public ::testing::TestWithParam<CacheType> {};

TEST_P(ExactlyOnce, ARetriedStepIsAReplayWithTheSameAnswer) {
  KvCacheStore store(Pool());
  std::mt19937 rng(11);
  Session s = Open(store, "a", 4, 2, 16, GetParam());
  const double tol = GetParam() == CacheType::kFloat32 ? 1e-5 : 1e-2;
  // A prefill, then decode steps, each sent twice: the second time a replay.
  for (int64_t nkv : {40, 1, 1, 3, 1}) {
    const int64_t before = s.replay.Tokens(1);
    const Data x = Make(s, nkv == 40 ? 40 : 1, nkv, rng);
    auto first = store.Extend(1, {View(s, x, before)}, Lse());
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    EXPECT_EQ(first->replayed, std::vector<bool>{false});
    s.replay.Append(1, x.k, x.v, nkv);
    auto again = store.Extend(1, {View(s, x, before)}, Lse());
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->replayed, std::vector<bool>{true});
    EXPECT_EQ(Tokens(store, "a", 1), before + nkv) << "appended once";
    const auto want = s.replay.Expected(1, x.q, s.hq, x.n, {});
    attn_test::ExpectMatches(want, first->results[0].output.data.data(),
                             first->results[0].lse->data.data(), tol);
    attn_test::ExpectMatches(want, again->results[0].output.data.data(),
                             again->results[0].lse->data.data(), tol);
  }
  // A replay of an older step, after later ones: answered over the tokens
  // the first attempt saw (the first 40 + 1), not the layer's 46.
  std::mt19937 same(11);
  const Data prefill = Make(s, 40, 40, same);
  const Data first_decode = Make(s, 1, 1, same);
  auto old = store.Extend(1, {View(s, first_decode, 40)}, Lse());
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_TRUE(old->replayed[0]);
  ReplaySession at41(2, s.hkv, s.d, s.d, s.replay.type);
  at41.Append(1, prefill.k, prefill.v, 40);
  at41.Append(1, first_decode.k, first_decode.v, 1);
  attn_test::ExpectMatches(at41.Expected(1, first_decode.q, s.hq, 1, {}),
                           old->results[0].output.data.data(), old->results[0].lse->data.data(),
                           tol);
  EXPECT_EQ(Tokens(store, "a", 1), 46);
}

INSTANTIATE_TEST_SUITE_P(CacheTypes, ExactlyOnce,
                         ::testing::Values(CacheType::kFloat32, CacheType::kBFloat16,
                                           CacheType::kFloat16));

TEST(ExactlyOnceCore, WrongPositionsAndOtherTokensAreRefusedWhole) {
  KvCacheStore store(Pool());
  std::mt19937 rng(12);
  Session a = Open(store, "a", 2, 1, 8), b = Open(store, "b", 2, 1, 8);
  const Data a0 = Make(a, 0, 10, rng), b0 = Make(b, 0, 10, rng);
  ASSERT_TRUE(store.Extend(0, {View(a, a0, 0), View(b, b0, 0)}, {}).ok());
  const Data next = Make(a, 1, 1, rng), bnext = Make(b, 1, 1, rng);
  // Ahead of the layer: refused, and b's good step in the same call too.
  auto ahead = store.Extend(0, {View(b, bnext, 10), View(a, next, 12)}, {});
  attn_test::ExpectStatus(ahead.status(), StatusCode::kFailedPrecondition,
                          "steps[1] (session 'a'): layer 0 holds 10 tokens, expected_tokens 12");
  // Behind, but the tokens there are not this step's: not a replay.
  auto other = store.Extend(0, {View(a, next, 9)}, {});
  attn_test::ExpectStatus(other.status(), StatusCode::kFailedPrecondition,
                          "layer 0 holds 10 tokens, expected_tokens 9; the tokens at [9, 10) "
                          "differ from this step's keys and values");
  attn_test::ExpectStatus(store.Extend(0, {View(a, next, -1)}, {}).status(),
                          StatusCode::kFailedPrecondition, "expected_tokens -1");
  EXPECT_EQ(Tokens(store, "a", 0), 10);
  EXPECT_EQ(Tokens(store, "b", 0), 10) << "b's step was not applied either";
  // A batch mixing a replay (a's last 10 again) and a new step (b).
  auto mixed = store.Extend(0, {View(a, a0, 0), View(b, bnext, 10)}, Lse());
  ASSERT_TRUE(mixed.ok()) << mixed.status().ToString();
  EXPECT_EQ(mixed->replayed, (std::vector<bool>{true, false}));
  EXPECT_EQ(Tokens(store, "a", 0), 10);
  EXPECT_EQ(Tokens(store, "b", 0), 11);
  // Unset: today's behaviour, appended wherever the layer stands.
  ASSERT_TRUE(store.Extend(0, {View(a, a0)}, {}).ok());
  EXPECT_EQ(Tokens(store, "a", 0), 20);
}

TEST(ExactlyOnceCore, ABf16CacheRecognisesItsOwnRoundedTokens) {
  KvCacheStore store(Pool());
  std::mt19937 rng(13);
  Session s = Open(store, "bf", 2, 1, 8, CacheType::kBFloat16);
  Data x = Make(s, 1, 3, rng);
  ASSERT_TRUE(store.Extend(0, {View(s, x, 0)}, {}).ok());
  // The same values rounded to bf16 by the caller: the cache stores them alike.
  Data rounded = x;
  for (float& e : rounded.k) e = attn_test::RoundTo(ReplayType::kBFloat16, e);
  for (float& e : rounded.v) e = attn_test::RoundTo(ReplayType::kBFloat16, e);
  auto r = store.Extend(0, {View(s, rounded, 0)}, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->replayed[0]);
  // A change below bf16's precision rounds the same; one above it does not.
  Data tiny = x, big = x;
  tiny.k[0] = std::nextafter(x.k[0], 1e9f);
  big.k[0] = x.k[0] * 1.5f + 1.0f;
  EXPECT_TRUE(store.Extend(0, {View(s, tiny, 0)}, {}).ok());
  EXPECT_EQ(store.Extend(0, {View(s, big, 0)}, {}).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(Tokens(store, "bf", 0), 3);
}

// The test hook lands a cancellation, then a deadline, between the compute
// and the commit: nothing is applied, and the retry runs as a first try.
TEST(ExactlyOnceCore, CancellationOrDeadlineBeforeTheCommitAppliesNothing) {
  KvCacheStore store(Pool());
  std::mt19937 rng(14);
  Session s = Open(store, "c", 2, 1, 8);
  for (bool keys_only : {false, true}) {
    for (int how = 0; how < 2; ++how) {
      const int64_t before = Tokens(store, "c", 0);
      const Data x = Make(s, keys_only ? 0 : 1, 2, rng);
      std::atomic<bool> cancelled{false};
      KvExtendOptions o;
      o.cancelled = &cancelled;
      int hooked = 0;
      o.before_commit = [&] {
        ++hooked;
        if (how == 0) cancelled = true;
        if (how == 1) o.deadline = std::chrono::system_clock::now() - std::chrono::seconds(1);
      };
      auto r = store.Extend(0, {View(s, x, before)}, o);
      EXPECT_EQ(hooked, 1);
      EXPECT_EQ(r.status().code(),
                how == 0 ? StatusCode::kCancelled : StatusCode::kDeadlineExceeded)
          << r.status().ToString();
      EXPECT_NE(r.status().message().find("nothing was appended"), std::string::npos);
      EXPECT_EQ(Tokens(store, "c", 0), before) << "nothing applied";
      auto retry = store.Extend(0, {View(s, x, before)}, {});
      ASSERT_TRUE(retry.ok()) << retry.status().ToString();
      EXPECT_FALSE(retry->replayed[0]) << "the first try never landed";
      auto again = store.Extend(0, {View(s, x, before)}, {});
      ASSERT_TRUE(again.ok());
      EXPECT_TRUE(again->replayed[0]) << "a retry of an applied step is a replay";
      EXPECT_EQ(Tokens(store, "c", 0), before + 2);
    }
  }
}

TEST(DecodeNumerics, ANanQueryStaysNanAndAnInfValueOutsideTheWindowIsUnseen) {
  KvCacheStore store(Pool());
  std::mt19937 rng(15);
  Session s = Open(store, "n", 2, 1, 16);  // 32 tokens a page
  Data prefill = Make(s, 0, 300, rng);
  // Token 198, column 3: inside the window of the rows at position 298,
  // outside that of the rows at 299 (window_left 100), on a page both read.
  prefill.v[198 * 16 + 3] = std::numeric_limits<float>::infinity();
  ASSERT_TRUE(store.Extend(0, {View(s, prefill)}, {}).ok());
  ReplaySession with_inf = s.replay, without = s.replay;
  with_inf.Append(0, prefill.k, prefill.v, 300);
  Data finite = prefill;
  finite.v[198 * 16 + 3] = 0.0f;  // unseen by those rows: any value gives their answer
  without.Append(0, finite.k, finite.v, 300);
  Data q = Make(s, 2, 0, rng);
  for (int64_t x = 0; x < s.d; ++x) q.q[static_cast<size_t>(s.d + x)] = std::nanf("");  // h0 t1
  KvExtendOptions o = Lse();
  o.window_left = 100;
  auto r = store.Extend(0, {View(s, q)}, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& out = r->results[0].output.data;
  const auto& lse = r->results[0].lse->data;
  ReplayOptions ro;
  ro.wl = 100;
  const auto seen = with_inf.Expected(0, q.q, s.hq, 2, ro);
  const auto unseen = without.Expected(0, q.q, s.hq, 2, ro);
  for (int64_t h = 0; h < s.hq; ++h) {
    for (int64_t t = 0; t < 2; ++t) {
      const int64_t row = h * 2 + t;
      SCOPED_TRACE("head " + std::to_string(h) + ", row " + std::to_string(t));
      if (h == 0 && t == 1) {  // the NaN query: NaN output and lse, as prefill gives
        for (int64_t x = 0; x < s.d; ++x) EXPECT_TRUE(std::isnan(out[row * s.d + x])) << x;
        EXPECT_TRUE(std::isnan(lse[row])) << lse[row];
        continue;
      }
      const auto& want = t == 0 ? seen : unseen;
      for (int64_t x = 0; x < s.d; ++x) {
        const float got = out[static_cast<size_t>(row * s.d + x)];
        const double w = want.out[static_cast<size_t>(row * s.d + x)];
        if (t == 0 && x == 3) {
          EXPECT_EQ(got, std::numeric_limits<float>::infinity()) << "it sees the inf";
        } else {
          ASSERT_TRUE(std::isfinite(got)) << "column " << x;
          EXPECT_NEAR(got, w, 1e-5) << "column " << x;
        }
      }
      EXPECT_NEAR(lse[static_cast<size_t>(row)], want.lse[static_cast<size_t>(row)], 1e-4);
    }
  }
}

// A 65-row prefill (speculative verification) over a long cache with a
// gather limit far below the widened copy: attended over the pages in
// place, in row slices, and equal to the float64 replay and to the
// gathered path.
TEST(LongPrefill, PastTheGatherLimitTheRowsAreSlicedOverThePages) {
  KvCacheStore store(Pool());
  std::mt19937 rng(16);
  Session s = Open(store, "p", 4, 2, 16, CacheType::kBFloat16);
  const Data fill = Make(s, 0, 3000, rng);
  ASSERT_TRUE(store.Extend(0, {View(s, fill)}, {}).ok());
  s.replay.Append(0, fill.k, fill.v, 3000);
  const Data verify = Make(s, 65, 65, rng);
  s.replay.Append(0, verify.k, verify.v, 65);
  for (const bool causal : {true, false}) {
    for (const int64_t limit : {int64_t{64} << 10, int64_t{0}}) {  // 64 KiB: sliced; 0: gathered
      KvExtendOptions o = Lse();
      o.causal = causal;
      o.max_gather_bytes = limit;
      o.window_left = 500;
      // Appended the first time; every later time a replay of it.
      auto r = store.Extend(0, {View(s, verify, 3000)}, o);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ReplayOptions ro;
      ro.causal = causal;
      ro.wl = 500;
      SCOPED_TRACE(std::string(causal ? "causal" : "not causal") +
                   (limit ? ", sliced" : ", gathered"));
      attn_test::ExpectMatches(s.replay.Expected(0, verify.q, s.hq, 65, ro),
                               r->results[0].output.data.data(), r->results[0].lse->data.data(),
                               1e-4);
    }
  }
  EXPECT_EQ(Tokens(store, "p", 0), 3065);
}

}  // namespace
