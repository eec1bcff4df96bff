// attention-core-bench's page-loop rows: the decode kernel's QK and PV over
// one page of each format's codes, with the page in L1 and one thread, so
// that the loops' own rate shows without the memory's (BM_KvDecode holds
// the whole step against the read probe). Four query rows (GQA 32 / 8),
// D 128, 128 tokens; tokens a second as items_per_second (a token: one kv
// head's). BM_PageLoopRows: other numbers of rows a kv head (MHA's 1, a
// group of 2, 3 or 7, or a multi-token step), where the loops' tails run. Run with ATTN_MAX_ISA to see a lower tier's loops. (core/src's
// internal codecs, as the page-codec tests use them.)
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "kvformats/page_codec.h"

namespace {

using attn::internal::CodecOf;
using attn::internal::PageCodec;
using attn::internal::PageFormat;

constexpr int64_t kRows = 4, kD = 128, kTokens = 128;  // kRows: BM_PageLoops'

// Every buffer on its own cache lines, as the cache's pages and the
// kernel's scratch are (malloc's 16-byte alignment moved a binary's rows by
// up to 20% against another's).
struct Page {
  attn::internal::LineVector<float> q, s, p, o, meta;
  attn::internal::LineVector<uint8_t> codes;
};

// Queries, keys and values N(0, 1); the keys' or values' rows as the codec
// writes them (int4 keys: one block of kTokens with its meta).
Page MakePage(const PageCodec& codec, int64_t rows) {
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.0f, 1.0f);
  Page pg;
  pg.q.resize(rows * kD);
  for (float& x : pg.q) x = n(rng);
  std::vector<float> tokens(static_cast<size_t>(kTokens * kD));
  for (float& x : tokens) x = n(rng);
  const int64_t rb = codec.row_bytes(kD);
  pg.codes.resize(static_cast<size_t>(kTokens * rb));
  if (codec.blocked) {
    pg.meta.resize(2 * kD);  // each channel's scale and minimum
    codec.quantize_block(tokens.data(), kTokens, kD, pg.codes.data(), pg.meta.data());
  } else {
    for (int64_t j = 0; j < kTokens; ++j) {
      codec.encode(tokens.data() + j * kD, kD, pg.codes.data() + j * rb);
    }
  }
  pg.s.resize(rows * kTokens);
  pg.p.resize(rows * kTokens);
  for (float& x : pg.p) x = 1.0f / kTokens + 1e-3f * n(rng) * n(rng);
  pg.o.assign(rows * kD, 0.0f);
  return pg;
}

const PageFormat kFormats[] = {PageFormat::kFloat32,  PageFormat::kBFloat16,
                               PageFormat::kFloat16,  PageFormat::kInt8,
                               PageFormat::kFp8E4M3,  PageFormat::kInt4Values,
                               PageFormat::kInt4Keys};

// pv 0: QK, pv 1: PV (registered below: int4's key blocks for QK only,
// its value rows for PV only), over `rows` query rows.
void PageLoops(benchmark::State& state, PageFormat f, bool pv, int64_t rows) {
  const PageCodec& codec = CodecOf(f);
  if (!attn::internal::InRegisterTier()) {
    state.SkipWithError("the portable tier reads pages through its portable loops");
    return;
  }
  Page pg = MakePage(codec, rows);
  for (auto _ : state) {
    if (pv) {
      codec.pv(pg.p.data(), rows, kTokens, pg.codes.data(), kTokens, kD, pg.o.data(), nullptr);
      benchmark::DoNotOptimize(pg.o.data());
    } else if (codec.blocked) {
      codec.qk_block(pg.q.data(), rows, pg.codes.data(), kTokens, pg.meta.data(), 0, kTokens,
                     kD, pg.s.data(), kTokens, nullptr);
      benchmark::DoNotOptimize(pg.s.data());
    } else {
      codec.qk(pg.q.data(), rows, pg.codes.data(), kTokens, kD, pg.s.data(), kTokens, nullptr);
      benchmark::DoNotOptimize(pg.s.data());
    }
    benchmark::ClobberMemory();
  }
  state.SetLabel(std::string(codec.name) + (pv ? " pv" : " qk"));
  // Tokens (of one kv head) a second: 1e9 / items_per_second ns a token.
  state.SetItemsProcessed(state.iterations() * kTokens);
}

void BM_PageLoops(benchmark::State& state) {
  PageLoops(state, kFormats[state.range(0)], state.range(1) != 0, kRows);
}

void BM_PageLoopRows(benchmark::State& state) {
  PageLoops(state, kFormats[state.range(0)], state.range(1) != 0, state.range(2));
}

}  // namespace

BENCHMARK(BM_PageLoops)
    ->ArgsProduct({{0, 1, 2, 3, 4}, {0, 1}})
    ->Args({5, 1})
    ->Args({6, 0})
    ->ArgNames({"format", "pv"})
    ->Unit(benchmark::kNanosecond);

// bf16, int8 and fp8 (their tails: four rows at a time, then the rest).
BENCHMARK(BM_PageLoopRows)
    ->ArgsProduct({{1, 3, 4}, {0, 1}, {1, 2, 3, 7}})
    ->ArgNames({"format", "pv", "rows"})
    ->Unit(benchmark::kNanosecond);
