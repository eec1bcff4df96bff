// KV-cache sessions in core (issue 25): every Extend against a float64
// replay of the session (tests/session_replay.h) on small pages that many
// steps cross; forks, truncation, the errors, atomicity, the pool's limit,
// expiry and concurrency. Runs on every kernel tier (CMakeLists.txt).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "attn/kv_cache.h"
#include "session_replay.h"
#include "status_matchers.h"

namespace {

using attn::CacheType;
using attn::KvCacheStore;
using attn::KvExtendOptions;
using attn::KvSessionSpec;
using attn::KvStep;
using attn::Status;
using attn::StatusCode;
using attn::TensorView;
using attn_test::ReplayOptions;
using attn_test::ReplaySession;
using attn_test::ReplayType;

constexpr int64_t kSmallPage = 1024;  // D = Dv = 8 float32: 16 tokens a page

attn::KvStoreOptions SmallPool(int64_t pool_bytes = int64_t{64} << 20) {
  attn::KvStoreOptions o;
  o.pool_bytes = pool_bytes;
  o.page_bytes = kSmallPage;
  o.max_sessions = 64;
  o.default_max_tokens = 4096;
  return o;
}

ReplayType ReplayOf(CacheType t) {
  return t == CacheType::kFloat32    ? ReplayType::kFloat32
         : t == CacheType::kBFloat16 ? ReplayType::kBFloat16
                                     : ReplayType::kFloat16;
}

// A session in the store and its replay, stepped together.
struct Tracked {
  std::string id;
  int64_t hq;
  ReplaySession replay;
};

Tracked Open(KvCacheStore& store, const std::string& id, int64_t layers, int64_t hq, int64_t hkv,
             int64_t d, int64_t dv, CacheType type) {
  KvSessionSpec spec;
  spec.session_id = id;
  spec.num_layers = layers;
  spec.num_kv_heads = hkv;
  spec.head_dim = d;
  spec.value_dim = dv;
  spec.cache_type = type;
  auto info = store.Create(spec);
  EXPECT_TRUE(info.ok()) << info.status().ToString();
  return Tracked{info.ok() ? info->spec.session_id : id, hq,
                 ReplaySession(layers, hkv, d, dv, ReplayOf(type))};
}

struct StepData {
  std::vector<float> q, k, v;
  int64_t n = 0, nkv = 0;
};

StepData MakeStep(const Tracked& t, int64_t n, int64_t nkv, std::mt19937& rng) {
  StepData s;
  s.n = n;
  s.nkv = nkv;
  s.q = attn_test::Normal(t.hq * n * t.replay.d, rng);
  s.k = attn_test::Normal(t.replay.hkv * nkv * t.replay.d, rng);
  s.v = attn_test::Normal(t.replay.hkv * nkv * t.replay.dv, rng);
  return s;
}

KvStep ViewStep(const Tracked& t, const StepData& s, bool with_kv = true) {
  KvStep step;
  step.session_id = t.id;
  // A step without queries is [Hkv, 0, D], as the server makes it.
  step.query = TensorView::Dense(s.q.data(), {s.n > 0 ? t.hq : t.replay.hkv, s.n, t.replay.d});
  if (with_kv) {
    step.key = TensorView::Dense(s.k.data(), {t.replay.hkv, s.nkv, t.replay.d});
    step.value = TensorView::Dense(s.v.data(), {t.replay.hkv, s.nkv, t.replay.dv});
  }
  return step;
}

KvExtendOptions ToCore(const ReplayOptions& r, bool lse) {
  KvExtendOptions o;
  o.causal = r.causal;
  o.window_left = r.wl;
  o.window_right = r.wr;
  if (r.softcap > 0) o.score.softcap = r.softcap;
  o.score.return_lse = lse;
  return o;
}

// Extends every tracked session by its step in one call and checks each
// result against its replay.
void ExtendAndCheck(KvCacheStore& store, int64_t layer, std::vector<Tracked*> ts,
                    const std::vector<StepData>& data, const ReplayOptions& ro) {
  std::vector<KvStep> steps;
  for (size_t i = 0; i < ts.size(); ++i) steps.push_back(ViewStep(*ts[i], data[i]));
  KvExtendOptions o = ToCore(ro, true);
  if (!ro.alibi.empty()) o.score.alibi_slopes = TensorView::Dense(ro.alibi.data(), {ts[0]->hq});
  if (!ro.sink.empty()) o.score.sink_logits = TensorView::Dense(ro.sink.data(), {ts[0]->hq});
  auto r = store.Extend(layer, steps, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->results.size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    ts[i]->replay.Append(layer, data[i].k, data[i].v, data[i].nkv);
    const auto want = ts[i]->replay.Expected(layer, data[i].q, ts[i]->hq, data[i].n, ro);
    const auto& res = r->results[i];
    const int64_t hq = data[i].n > 0 ? ts[i]->hq : ts[i]->replay.hkv;
    ASSERT_EQ(res.output.shape, (attn::Shape{hq, data[i].n, ts[i]->replay.dv}));
    ASSERT_TRUE(res.lse.has_value());
    SCOPED_TRACE("step " + std::to_string(i) + " of session " + ts[i]->id);
    attn_test::ExpectMatches(want, res.output.data.data(), res.lse->data.data());
  }
}

class KvTypes : public ::testing::TestWithParam<CacheType> {};

TEST_P(KvTypes, DecodeAfterPrefillEqualsOneShotAttention) {
  KvCacheStore store(SmallPool());
  std::mt19937 rng(7);
  // GQA 8 over 2 heads, D 8, Dv 8: a prefill of 100 takes the blocked path
  // (400 rows a kv head), the decode steps the decode kernel.
  Tracked t = Open(store, "decode", 2, 8, 2, 8, 8, GetParam());
  ExtendAndCheck(store, 1, {&t}, {MakeStep(t, 100, 100, rng)}, {});
  for (int step = 0; step < 40; ++step) {
    ExtendAndCheck(store, 1, {&t}, {MakeStep(t, 1, 1, rng)}, {});
  }
  auto info = store.Get("", t.id);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->layer_tokens, (std::vector<int64_t>{0, 140}));
  // 140 tokens in pages of tpp per head, 2 heads; layer 0 holds none.
  const int64_t tpp = info->tokens_per_page;
  EXPECT_EQ(info->cache_bytes, (140 + tpp - 1) / tpp * 2 * kSmallPage);
}

TEST_P(KvTypes, ChunkedPrefillThenDecodeInBothPaths) {
  KvCacheStore store(SmallPool());
  std::mt19937 rng(11);
  Tracked t = Open(store, "chunks", 1, 4, 4, 8, 12, GetParam());
  // Chunks of 7, 13 and 50 (the decode kernel up to 64 rows a kv head, the
  // blocked one past it), each crossing page edges at another offset.
  for (int64_t n : {7, 13, 50, 65, 1, 3}) {
    ExtendAndCheck(store, 0, {&t}, {MakeStep(t, n, n, rng)}, {});
  }
}

INSTANTIATE_TEST_SUITE_P(CacheTypes, KvTypes,
                         ::testing::Values(CacheType::kFloat32, CacheType::kBFloat16,
                                           CacheType::kFloat16),
                         [](const auto& info) {
                           return std::string(attn::CacheTypeName(info.param));
                         });

// Every option alone, and all of them together, on decode steps and on a
// chunk, causal and not.
TEST(KvCache, EveryOptionOnDecodeAndChunks) {
  std::vector<ReplayOptions> opts(8);
  opts[1].causal = false;
  opts[2].wl = 5;
  opts[3].wl = 0;
  opts[3].causal = false;
  opts[3].wr = 2;
  opts[4].softcap = 2.0f;
  opts[5].alibi = {0.5f, 0.25f, 0.125f, 0.0625f};
  opts[6].sink = {0.3f, -1.0f, 2.0f, 0.0f};
  opts[7] = {false, 9, 1, 1.5f, {0.5f, 0.25f, 0.125f, 0.0625f}, {0.3f, -1.0f, 2.0f, 0.0f}};
  for (size_t i = 0; i < opts.size(); ++i) {
    SCOPED_TRACE("options #" + std::to_string(i));
    KvCacheStore store(SmallPool());
    std::mt19937 rng(static_cast<unsigned>(100 + i));
    Tracked t = Open(store, "opts", 1, 4, 2, 8, 8, CacheType::kFloat32);
    ExtendAndCheck(store, 0, {&t}, {MakeStep(t, 40, 40, rng)}, opts[i]);
    for (int64_t n : {1, 1, 3, 70, 1})
      ExtendAndCheck(store, 0, {&t}, {MakeStep(t, n, n, rng)}, opts[i]);
    // Queries only, and more queries than new keys (the first rows see fewer keys).
    ExtendAndCheck(store, 0, {&t}, {MakeStep(t, 4, 0, rng)}, opts[i]);
    ExtendAndCheck(store, 0, {&t}, {MakeStep(t, 6, 2, rng)}, opts[i]);
  }
}

TEST(KvCache, MixedBatchOfDecodeChunkQueryOnlyAndFillOnly) {
  KvCacheStore store(SmallPool());
  std::mt19937 rng(3);
  Tracked a = Open(store, "a", 1, 4, 1, 8, 8, CacheType::kFloat32);
  Tracked b = Open(store, "b", 1, 4, 1, 8, 8, CacheType::kBFloat16);
  Tracked c = Open(store, "c", 1, 4, 1, 8, 8, CacheType::kFloat16);
  Tracked d = Open(store, "d", 1, 4, 1, 8, 8, CacheType::kFloat32);
  ExtendAndCheck(store, 0, {&a, &b, &c, &d},
                 {MakeStep(a, 20, 20, rng), MakeStep(b, 33, 33, rng), MakeStep(c, 5, 5, rng),
                  MakeStep(d, 17, 17, rng)},
                 {});
  // decode, a chunk, queries only, keys only; with sinks, which the
  // keys-only step (no query heads to match) does not need to fit.
  ReplayOptions sinks;
  sinks.sink = {0.5f, -1.0f, 0.25f, 2.0f};
  ExtendAndCheck(store, 0, {&a, &b, &c, &d},
                 {MakeStep(a, 1, 1, rng), MakeStep(b, 90, 90, rng), MakeStep(c, 3, 0, rng),
                  MakeStep(d, 0, 9, rng)},
                 sinks);
  EXPECT_EQ(store.Get("", "d")->layer_tokens[0], 26);
}

TEST(KvCache, ForkSharesPagesAndDivergesCopyOnWrite) {
  KvCacheStore store(SmallPool());
  std::mt19937 rng(5);
  Tracked parent = Open(store, "parent", 2, 4, 2, 8, 8, CacheType::kBFloat16);
  for (int64_t layer : {0, 1})
    ExtendAndCheck(store, layer, {&parent}, {MakeStep(parent, 37, 37, rng)}, {});
  const int64_t used = store.bytes_used();
  auto forked = store.Fork("", "parent", "parent:child");
  ASSERT_TRUE(forked.ok()) << forked.status().ToString();
  EXPECT_EQ(store.bytes_used(), used) << "a fork allocates no page";
  EXPECT_EQ(forked->layer_tokens, (std::vector<int64_t>{37, 37}));
  Tracked child{"parent:child", parent.hq, parent.replay};
  // Both write into their shared last page: each gets its own copy.
  ExtendAndCheck(store, 0, {&parent, &child},
                 {MakeStep(parent, 1, 1, rng), MakeStep(child, 2, 2, rng)}, {});
  ExtendAndCheck(store, 0, {&parent}, {MakeStep(parent, 1, 0, rng)}, {});
  ExtendAndCheck(store, 0, {&child}, {MakeStep(child, 1, 0, rng)}, {});
  // The child outlives its parent, and its pages stay.
  ASSERT_TRUE(store.Delete("", "parent").ok());
  for (int i = 0; i < 20; ++i) ExtendAndCheck(store, 1, {&child}, {MakeStep(child, 1, 1, rng)}, {});
  ExtendAndCheck(store, 0, {&child}, {MakeStep(child, 2, 0, rng)}, {});
  ASSERT_TRUE(store.Delete("", "parent:child").ok());
  EXPECT_EQ(store.bytes_used(), 0) << "every page back once nobody holds it";
}

// A fork of a 32k-token session (bf16, 8 kv heads, D 128: 128 MiB of K/V)
// allocates no page; the first write after it copies one page per head.
TEST(KvCache, ForkOfALongSessionAllocatesNoPage) {
  attn::KvStoreOptions o;
  o.pool_bytes = int64_t{160} << 20;
  o.default_max_tokens = 65536;
  KvCacheStore store(o);
  KvSessionSpec spec;
  spec.session_id = "long";
  spec.num_kv_heads = 8;
  spec.head_dim = 128;
  spec.cache_type = CacheType::kBFloat16;
  ASSERT_TRUE(store.Create(spec).ok());
  std::mt19937 rng(12);
  const int64_t chunk = 4096;
  const std::vector<float> kv = attn_test::Normal(8 * chunk * 128, rng);
  std::vector<float> none;
  for (int64_t at = 0; at < 32768; at += chunk) {
    KvStep st{"long", TensorView::Dense(none.data(), {8, 0, 128}),
              TensorView::Dense(kv.data(), {8, chunk, 128}),
              TensorView::Dense(kv.data(), {8, chunk, 128}), std::nullopt};
    ASSERT_TRUE(store.Extend(0, {st}, {}).ok());
  }
  auto info = store.Get("", "long");
  ASSERT_TRUE(info.ok());
  const int64_t raw = int64_t{32768} * 8 * 256 * 2;
  EXPECT_EQ(info->tokens_per_page, 64);
  EXPECT_EQ(info->cache_bytes, raw) << "32768 tokens fill whole pages of 64";
  const int64_t used = store.bytes_used();
  ASSERT_TRUE(store.Fork("", "long", "long:beam").ok());
  EXPECT_EQ(store.bytes_used(), used) << "the fork allocated a page";
  // One token into the child: its last pages are full, so new ones (one a
  // head), nothing copied; and the parent's bytes stay where they were.
  std::vector<float> one(8 * 128, 0.5f);
  KvStep st{"long:beam", TensorView::Dense(one.data(), {8, 1, 128}),
            TensorView::Dense(one.data(), {8, 1, 128}), TensorView::Dense(one.data(), {8, 1, 128}),
            std::nullopt};
  ASSERT_TRUE(store.Extend(0, {st}, {}).ok());
  EXPECT_EQ(store.bytes_used(), used + 8 * o.page_bytes);
  EXPECT_EQ(store.Get("", "long")->cache_bytes, raw);
}

// The sessions' own memory (state, page tables) is outside the pool's
// pages: counted, freed with them, and bounded, so that many-layer sessions
// or forks of a long session (whose page tables are copies) cannot grow it
// without limit.
TEST(KvCache, SessionMetadataIsCountedAndBounded) {
  attn::KvStoreOptions o = SmallPool();
  o.metadata_bytes_limit = 1 << 20;
  o.max_sessions = 4096;
  KvCacheStore store(o);
  EXPECT_EQ(store.metadata_bytes(), 0);
  EXPECT_EQ(store.metadata_bytes_limit(), 1 << 20);
  Tracked t = Open(store, "long", 1, 1, 1, 8, 8, CacheType::kFloat32);
  const int64_t one = store.metadata_bytes();
  EXPECT_GT(one, 0);
  std::mt19937 rng(3);
  const std::vector<float> kv = attn_test::Normal(4096 * 8, rng);
  std::vector<float> none;
  KvStep st{"long", TensorView::Dense(none.data(), {1, 0, 8}),
            TensorView::Dense(kv.data(), {1, 4096, 8}), TensorView::Dense(kv.data(), {1, 4096, 8}),
            std::nullopt};
  ASSERT_TRUE(store.Extend(0, {st}, {}).ok());  // 256 pages of 16 tokens
  const int64_t filled = store.metadata_bytes();
  EXPECT_GE(filled - one, 256 * 4) << "its page table is counted";
  ASSERT_TRUE(store.Fork("", "long", "long:1").ok());
  EXPECT_GE(store.metadata_bytes() - filled, 256 * 4) << "a fork's page table is a copy";
  // Many-layer sessions until the limit: refused, naming it, nothing made.
  int made = 0;
  attn::Status refused;
  for (int i = 0; i < 64 && refused.ok(); ++i) {
    KvSessionSpec wide;
    wide.session_id = "wide-" + std::to_string(i);
    wide.num_layers = 4096;
    wide.num_kv_heads = 1;
    wide.head_dim = 8;
    auto r = store.Create(wide);
    made += r.ok() ? 1 : 0;
    refused = r.status();
  }
  EXPECT_GT(made, 0);
  attn_test::ExpectStatus(refused, StatusCode::kResourceExhausted,
                          "create: the sessions' metadata (state and page tables) takes");
  EXPECT_LE(store.metadata_bytes(), 1 << 20);
  EXPECT_EQ(store.List("").size(), static_cast<size_t>(made) + 2);
  // Forks of the long session too, once the limit is near.
  attn::Status fork;
  for (int i = 2; i < 2000 && fork.ok(); ++i) {
    fork = store.Fork("", "long", "long:" + std::to_string(i)).status();
  }
  attn_test::ExpectStatus(fork, StatusCode::kResourceExhausted, "fork: the sessions' metadata");
  EXPECT_LE(store.metadata_bytes(), 1 << 20);
  for (const attn::KvSessionInfo& s : store.List("")) {
    ASSERT_TRUE(store.Delete("", s.spec.session_id).ok());
  }
  EXPECT_EQ(store.metadata_bytes(), 0) << "all given back";
  EXPECT_EQ(store.bytes_used(), 0);
  (void)t;
}

TEST(KvCache, TruncateThenExtend) {
  KvCacheStore store(SmallPool());
  std::mt19937 rng(9);
  Tracked t = Open(store, "spec", 2, 2, 2, 8, 8, CacheType::kFloat16);
  ExtendAndCheck(store, 0, {&t}, {MakeStep(t, 50, 50, rng)}, {});
  ExtendAndCheck(store, 1, {&t}, {MakeStep(t, 20, 20, rng)}, {});
  const int64_t before = store.bytes_used();
  auto info = store.Truncate("", t.id, 30);  // layer 0: 50 -> 30; layer 1 keeps 20
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->layer_tokens, (std::vector<int64_t>{30, 20}));
  EXPECT_LT(store.bytes_used(), before);
  t.replay.Truncate(30);
  for (int i = 0; i < 5; ++i) ExtendAndCheck(store, 0, {&t}, {MakeStep(t, 3, 3, rng)}, {});
  ExtendAndCheck(store, 1, {&t}, {MakeStep(t, 1, 1, rng)}, {});
  ASSERT_TRUE(store.Truncate("", t.id, 0).ok());
  t.replay.Truncate(0);
  ExtendAndCheck(store, 0, {&t}, {MakeStep(t, 2, 2, rng)}, {});
  attn_test::ExpectStatus(store.Truncate("", t.id, -1).status(), StatusCode::kInvalidArgument,
                          "tokens: must be >= 0");
}

TEST(KvCache, EmptyLayerAndFullyMaskedRows) {
  KvCacheStore store(SmallPool());
  std::mt19937 rng(1);
  Tracked t = Open(store, "empty", 1, 2, 1, 8, 8, CacheType::kFloat32);
  // Queries over an empty layer: zeros, lse -inf; with a sink, lse = sink.
  ExtendAndCheck(store, 0, {&t}, {MakeStep(t, 2, 0, rng)}, {});
  ReplayOptions sink;
  sink.sink = {0.5f, -0.5f};
  ExtendAndCheck(store, 0, {&t}, {MakeStep(t, 2, 0, rng)}, sink);
  // More queries than keys, causal: the first rows see nothing.
  ExtendAndCheck(store, 0, {&t}, {MakeStep(t, 5, 2, rng)}, {});
}

// Each error of the issue's table, with its code and a message naming it.
TEST(KvCache, ErrorsNameTheSessionStepAndNumbers) {
  KvCacheStore store(SmallPool());
  std::mt19937 rng(2);
  Tracked t = Open(store, "err", 2, 4, 2, 8, 8, CacheType::kFloat32);
  StepData s = MakeStep(t, 1, 1, rng);
  auto run = [&](int64_t layer, std::vector<KvStep> steps, KvExtendOptions o = {}) {
    return store.Extend(layer, steps, o).status();
  };
  attn_test::ExpectStatus(run(0, {ViewStep(Tracked{"nope", 4, t.replay}, s)}),
                          StatusCode::kNotFound, "session 'nope' not found: it may have expired");
  attn_test::ExpectStatus(run(2, {ViewStep(t, s)}), StatusCode::kInvalidArgument,
                          "has 2 layers (0..1), got 2");
  attn_test::ExpectStatus(run(-1, {ViewStep(t, s)}), StatusCode::kInvalidArgument,
                          "layer: must be >= 0");
  attn_test::ExpectStatus(run(0, {ViewStep(t, s), ViewStep(t, s)}), StatusCode::kInvalidArgument,
                          "steps[1] (session 'err'): a session may appear once");
  KvStep bad = ViewStep(t, s);
  bad.query = TensorView::Dense(s.q.data(), {3, 1, 8});
  attn_test::ExpectStatus(run(0, {bad}), StatusCode::kInvalidArgument,
                          "multiple of num_kv_heads (2), got float32 [3, 1, 8]");
  bad = ViewStep(t, s);
  bad.key = TensorView::Dense(s.k.data(), {1, 2, 8});
  attn_test::ExpectStatus(
      run(0, {bad}), StatusCode::kInvalidArgument,
      "key: expected float32 [num_kv_heads, n_kv, D] = [2, n_kv, 8], got float32 [1, 2, 8]");
  bad = ViewStep(t, s);
  bad.value.reset();
  attn_test::ExpectStatus(run(0, {bad}), StatusCode::kInvalidArgument,
                          "key and value come together");
  KvExtendOptions o;
  o.window_left = -1;
  attn_test::ExpectStatus(run(0, {ViewStep(t, s)}, o), StatusCode::kInvalidArgument,
                          "window_left: must be >= 0, got -1");
  o = {};
  o.score.softcap = 0.0f;
  attn_test::ExpectStatus(run(0, {ViewStep(t, s)}, o), StatusCode::kInvalidArgument,
                          "softcap: must be > 0");
  std::vector<float> slopes(3, 0.5f);
  o = {};
  o.score.alibi_slopes = TensorView::Dense(slopes.data(), {3});
  attn_test::ExpectStatus(run(0, {ViewStep(t, s)}, o), StatusCode::kInvalidArgument,
                          "alibi_slopes: steps[0] has 4 query heads, got [3]");
  // Create and fork.
  KvSessionSpec spec;
  spec.session_id = "err";
  spec.head_dim = 8;
  attn_test::ExpectStatus(store.Create(spec).status(), StatusCode::kAlreadyExists,
                          "session 'err' already exists");
  attn_test::ExpectStatus(store.Fork("", "err", "err").status(), StatusCode::kAlreadyExists,
                          "already exists");
  attn_test::ExpectStatus(store.Fork("", "gone", "gone:x").status(), StatusCode::kNotFound,
                          "session 'gone' not found");
  spec.session_id = "bad id!";
  attn_test::ExpectStatus(store.Create(spec).status(), StatusCode::kInvalidArgument,
                          "session_id: must match [A-Za-z0-9._:-]{1,128}");
  spec.session_id = "";
  spec.head_dim = 0;
  attn_test::ExpectStatus(store.Create(spec).status(), StatusCode::kInvalidArgument,
                          "head_dim: must be in [1, 65536], got 0");
  spec.head_dim = 200;  // (200 + 200) * 4 bytes > a 1 KiB page
  attn_test::ExpectStatus(store.Create(spec).status(), StatusCode::kInvalidArgument,
                          "more than a page (1024 bytes)");
  spec.head_dim = 8;
  spec.max_tokens = 5000;
  attn_test::ExpectStatus(store.Create(spec).status(), StatusCode::kInvalidArgument,
                          "max_tokens: must be in [0, 4096]");
  attn_test::ExpectStatus(store.Delete("", "gone").status(), StatusCode::kNotFound,
                          "delete: session 'gone'");
  attn_test::ExpectStatus(store.Get("", "gone").status(), StatusCode::kNotFound,
                          "lost in a server restart");
}

// A batch that fails on its second step, or is cancelled, changes nothing.
TEST(KvCache, FailedOrCancelledExtendChangesNoSession) {
  KvCacheStore store(SmallPool());
  std::mt19937 rng(4);
  Tracked a = Open(store, "a", 1, 2, 2, 8, 8, CacheType::kFloat32);
  Tracked b = Open(store, "b", 1, 2, 2, 8, 8, CacheType::kFloat32);
  ExtendAndCheck(store, 0, {&a, &b}, {MakeStep(a, 15, 15, rng), MakeStep(b, 10, 10, rng)}, {});
  ASSERT_TRUE(store.Fork("", "a", "a:2").ok());  // a's last page is shared: a write would copy it
  const int64_t used = store.bytes_used();
  KvSessionSpec small;
  small.session_id = "tiny";
  small.head_dim = 8;
  small.num_kv_heads = 2;
  small.max_tokens = 3;
  ASSERT_TRUE(store.Create(small).ok());
  Tracked tiny{"tiny", 2, ReplaySession(1, 2, 8, 8, ReplayType::kFloat32)};
  StepData sa = MakeStep(a, 1, 4, rng), st = MakeStep(tiny, 1, 4, rng);
  auto r = store.Extend(0, {ViewStep(a, sa), ViewStep(tiny, st)}, {});
  attn_test::ExpectStatus(r.status(), StatusCode::kResourceExhausted,
                          "would pass its max_tokens (3)");
  EXPECT_EQ(store.Get("", "a")->layer_tokens[0], 15);
  EXPECT_EQ(store.bytes_used(), used);
  std::atomic<bool> cancelled{true};
  KvExtendOptions o;
  o.cancelled = &cancelled;
  StepData big = MakeStep(a, 80, 40, rng), one = MakeStep(b, 1, 1, rng);
  r = store.Extend(0, {ViewStep(a, big), ViewStep(b, one)}, o);
  attn_test::ExpectStatus(r.status(), StatusCode::kCancelled, "cancelled");
  EXPECT_EQ(store.Get("", "a")->layer_tokens[0], 15);
  EXPECT_EQ(store.Get("", "b")->layer_tokens[0], 10);
  EXPECT_EQ(store.bytes_used(), used);
  // And the sessions go on as if nothing happened.
  ExtendAndCheck(store, 0, {&a, &b}, {MakeStep(a, 2, 2, rng), MakeStep(b, 1, 1, rng)}, {});
}

TEST(KvCache, FullPoolRefusesThenRecoversAfterDelete) {
  KvCacheStore store(SmallPool(8 * kSmallPage));  // 8 pages
  std::mt19937 rng(6);
  Tracked a = Open(store, "a", 1, 2, 2, 8, 8, CacheType::kFloat32);  // 16 tokens a page
  ExtendAndCheck(store, 0, {&a}, {MakeStep(a, 48, 48, rng)}, {});    // 3 pages x 2 heads
  Tracked b = Open(store, "b", 1, 2, 2, 8, 8, CacheType::kFloat32);
  StepData big = MakeStep(b, 1, 20, rng);  // 2 pages x 2 heads: 2 left
  auto r = store.Extend(0, {ViewStep(b, big)}, {});
  attn_test::ExpectStatus(r.status(), StatusCode::kResourceExhausted, "6144 of 8192 bytes used");
  EXPECT_EQ(store.bytes_used(), 6 * kSmallPage);
  EXPECT_LE(store.bytes_used(), store.bytes_limit());
  ASSERT_TRUE(store.Delete("", "a").ok());
  EXPECT_EQ(store.bytes_used(), 0);
  ExtendAndCheck(store, 0, {&b}, {big}, {});
}

TEST(KvCache, IdleSessionsExpireAndFreeTheirPages) {
  KvCacheStore store(SmallPool());
  std::mt19937 rng(8);
  Tracked a = Open(store, "a", 1, 2, 2, 8, 8, CacheType::kFloat32);
  ExtendAndCheck(store, 0, {&a}, {MakeStep(a, 30, 30, rng)}, {});
  EXPECT_EQ(store.ExpireIdle(std::chrono::hours(1)).size(), 0u);
  EXPECT_GT(store.bytes_used(), 0);
  EXPECT_EQ(store.ExpireIdle(std::chrono::seconds(0)).size(), 1u);
  EXPECT_EQ(store.bytes_used(), 0);
  EXPECT_EQ(store.num_sessions(), 0);
  attn_test::ExpectStatus(store.Get("", "a").status(), StatusCode::kNotFound, "may have expired");
}

TEST(KvCache, TwelveThreadsWithTheirOwnSessions) {
  KvCacheStore store(SmallPool());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 12; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      Tracked s = Open(store, "t" + std::to_string(t), 1, 4, 2, 8, 8,
                       t % 2 ? CacheType::kBFloat16 : CacheType::kFloat32);
      for (int i = 0; i < 30 && failures == 0; ++i) {
        StepData d = MakeStep(s, i == 0 ? 20 : 1, i == 0 ? 20 : 1, rng);
        KvExtendOptions o;
        o.num_threads = 1;
        auto r = store.Extend(0, {ViewStep(s, d)}, o);
        if (!r.ok()) {
          ++failures;
          return;
        }
        s.replay.Append(0, d.k, d.v, d.nkv);
        const auto want = s.replay.Expected(0, d.q, s.hq, d.n, {});
        if (!attn_test::AllClose(r->results[0].output.data.data(), want.out, 1e-5, 1.0)) ++failures;
      }
      if (!store.Delete("", s.id).ok()) ++failures;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(store.bytes_used(), 0);
}

// Two Extends on one layer at once: the second is ABORTED ("busy"), and
// truncation waits for the first too. Retried while the first ends too soon.
TEST(KvCache, ConcurrentExtendOnOneLayerIsBusy) {
  attn::KvStoreOptions opts;
  opts.pool_bytes = int64_t{512} << 20;
  KvCacheStore store(opts);
  KvSessionSpec spec;
  spec.session_id = "busy";
  spec.num_kv_heads = 8;
  spec.head_dim = 64;
  ASSERT_TRUE(store.Create(spec).ok());
  std::mt19937 rng(1);
  bool seen = false;
  for (int attempt = 0; attempt < 5 && !seen; ++attempt) {
    ASSERT_TRUE(store.Truncate("", "busy", 0).ok());
    const int64_t n = 2048;
    std::vector<float> q = attn_test::Normal(8 * n * 64, rng),
                       k = attn_test::Normal(8 * n * 64, rng);
    std::atomic<bool> done{false};
    std::thread first([&] {
      KvStep st{"busy", TensorView::Dense(q.data(), {8, n, 64}),
                TensorView::Dense(k.data(), {8, n, 64}), TensorView::Dense(k.data(), {8, n, 64}),
                std::nullopt};
      EXPECT_TRUE(store.Extend(0, {st}, {}).ok());
      done = true;
    });
    while (store.bytes_used() == 0 && !done) std::this_thread::yield();
    std::vector<float> q1(8 * 64, 0.1f);
    KvStep one{"busy", TensorView::Dense(q1.data(), {8, 1, 64}), std::nullopt, std::nullopt,
               std::nullopt};
    const Status second = store.Extend(0, {one}, {}).status();
    const Status trunc = store.Truncate("", "busy", 0).status();
    const bool still_running = !done;
    first.join();
    if (still_running) {
      seen = true;
      attn_test::ExpectStatus(second, StatusCode::kAborted, "layer 0 is busy with another Extend");
      attn_test::ExpectStatus(trunc, StatusCode::kAborted, "is busy");
    }
  }
  EXPECT_TRUE(seen) << "the first Extend always ended before the second began";
}

}  // namespace
