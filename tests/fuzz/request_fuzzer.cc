// libFuzzer target over the server's whole request path, minus the network:
// request bytes -> protobuf parse -> validation and limits (request_adapter)
// -> core on small shapes -> response encoding.
//
// Input: byte 0 picks the RPC (Attention, CrossAttention, MultiHeadAttention);
// the rest is that request, serialized. The limits are small, so that a
// valid request is cheap; the demo models are served.
//
// Invariants beyond "no crash, no sanitizer report":
//   - the answer is never INTERNAL (that would be a bug, not bad input);
//   - an OK answer has an output whose byte size matches its shape.
//
// Built with clang (-DATTN_FUZZ=ON) as a libFuzzer binary; built with any
// compiler, together with replay_main.cc, it replays files (the committed
// corpus and regressions) in ordinary test runs.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "attention/v1/attention.pb.h"
#include "model_registry.h"
#include "request_adapter.h"

namespace {

using attn::server::PreparedCall;
using attn::server::RequestLimits;

const attn::server::ModelRegistry& Models() {
  static const auto* models = new attn::server::ModelRegistry(attn::server::ModelRegistry::Demo());
  return *models;
}

RequestLimits SmallLimits() {
  RequestLimits l;
  l.max_message_bytes = 1 << 20;
  l.max_tensor_elements = 1 << 16;
  l.max_attention_work = 1 << 22;
  l.max_projection_elements = 1 << 16;
  l.max_request_memory_bytes = 64 << 20;
  return l;
}

[[noreturn]] void Die(const char* what, const attn::Status& st) {
  std::fprintf(stderr, "request_fuzzer: %s: %s\n", what, st.ToString().c_str());
  std::abort();
}

// ATTN_FUZZ_VERBOSE=1: one line per input with its outcome (to check that
// the corpus reaches compute).
void Report(const attn::Status& st) {
  static const bool verbose = std::getenv("ATTN_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "  %s\n", st.ok() ? "OK" : st.ToString().c_str());
}

template <typename Request, typename Prepare>
void Run(const uint8_t* data, size_t size, Prepare prepare) {
  Request req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) {  // not a request
    return Report(attn::Status::InvalidArgument("not a parsable request"));
  }
  static const RequestLimits limits = SmallLimits();
  PreparedCall call;
  attn::Status st = prepare(req, Models(), limits, &call);
  if (st.code() == attn::StatusCode::kInternal) Die("prepare", st);
  if (!st.ok()) return Report(st);
  attention::v1::AttentionResponse resp;
  auto out = call.compute(1, attn::server::IntoResponse(call, &resp));
  if (!out.ok()) {
    if (out.status().code() == attn::StatusCode::kInternal) Die("compute", out.status());
    return Report(out.status());
  }
  st = attn::server::EncodeResponse(*out, call, limits, &resp);
  if (st.code() == attn::StatusCode::kInternal) Die("encode", st);
  if (!st.ok()) return Report(st);
  int64_t n = 1;
  for (int64_t d : resp.output().shape()) n *= d;
  const int64_t bytes = resp.output().data().size() + 4 * resp.output().values_size();
  if (bytes != 4 * n) {
    std::fprintf(stderr, "request_fuzzer: output holds %lld bytes for %lld elements\n",
                 static_cast<long long>(bytes), static_cast<long long>(n));
    std::abort();
  }
  Report(st);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  switch (data[0] % 3) {
    case 0:
      Run<attention::v1::AttentionRequest>(data + 1, size - 1, attn::server::PrepareAttention);
      break;
    case 1:
      Run<attention::v1::CrossAttentionRequest>(data + 1, size - 1,
                                                attn::server::PrepareCrossAttention);
      break;
    default:
      Run<attention::v1::MultiHeadAttentionRequest>(data + 1, size - 1,
                                                    attn::server::PrepareMultiHeadAttention);
      break;
  }
  return 0;
}
