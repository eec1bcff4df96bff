// libFuzzer target over the server's whole request path, minus the network:
// request bytes -> parse (the server's, without copying tensor data, checked
// against protobuf's own) -> validation and limits (request_adapter)
// -> core on small shapes -> response encoding.
//
// Input: byte 0 picks the RPC: 0-2 attention.v1's Attention, CrossAttention,
// MultiHeadAttention, the rest that request serialized; 3 the Open Inference
// Protocol's ModelInfer, the rest an inference.ModelInferRequest; 4 an OIP
// HTTP infer body (byte 1: bit 0 picks the model, bit 1 the binary
// extension, whose JSON then ends at the first NUL byte) (byte 0 modulo 5,
// below 250). 250-255: SessionService, against a fresh small KV-cache store
// holding sessions "a", "b" and "a:c" (a fork of "a"): 250 an ExtendRequest,
// 251 CreateSessionRequest, 252 ForkSessionRequest, 253
// TruncateSessionRequest, 254 DeleteSession's SessionRef, 255 an
// ExtendRequest again ("a:c" shares "a"'s partly filled last page of layer 0,
// so a write there copies it first). The
// limits are small, so that a valid request is cheap; the demo models are
// served.
//
// Invariants beyond "no crash, no sanitizer report":
//   - the answer is never INTERNAL (that would be a bug, not bad input);
//   - the in-place parse equals protobuf's parse, data put back;
//   - an OK answer, as sent (in place) and parsed back, has an output whose
//     byte size matches its shape.
//
// Built with clang (-DATTN_FUZZ=ON) as a libFuzzer binary; built with any
// compiler, together with replay_main.cc, it replays files (the committed
// corpus and regressions) in ordinary test runs.
#include <grpcpp/support/byte_buffer.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attention/v1/attention.pb.h"
#include "attention/v1/session.pb.h"
#include "attention_v1/attention_v1_adapter.h"
#include "attn/kv_cache.h"
#include "call/prepared_call.h"
#include "models/model_registry.h"
#include "oip/oip_adapter.h"
#include "oip/oip_json.h"
#include "parse_check.h"
#include "sessions/extend_call.h"
#include "sessions/session_service.h"
#include "wire/tensor_data.h"

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

using attn_fuzz::Die;
using attn_fuzz::ParseInPlace;

// ATTN_FUZZ_VERBOSE=1: one line per input with its outcome (to check that
// the corpus reaches compute).
void Report(const attn::Status& st) {
  static const bool verbose = std::getenv("ATTN_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "  %s\n", st.ok() ? "OK" : st.ToString().c_str());
}

template <typename Request, typename Prepare>
void Run(const uint8_t* data, size_t size, Prepare prepare) {
  Request req;
  attn::wire::TensorData tensor_data;
  if (!ParseInPlace(data, size, &req, &tensor_data)) {  // not a request
    return Report(attn::Status::InvalidArgument("not a parsable request"));
  }
  static const RequestLimits limits = SmallLimits();
  PreparedCall call;
  call.tensor_data = &tensor_data;
  attn::Status st = prepare(req, Models(), limits, &call);
  if (st.code() == attn::StatusCode::kInternal) Die("prepare", st);
  if (!st.ok()) return Report(st);
  attention::v1::AttentionResponse resp;
  attn::server::InPlaceOutput in_place;
  auto out = call.compute(1, attn::server::IntoResponse(call, &in_place));
  if (!out.ok()) {
    if (out.status().code() == attn::StatusCode::kInternal) Die("compute", out.status());
    return Report(out.status());
  }
  st = attn::server::EncodeResponse(*out, call, limits, &resp);
  if (st.code() == attn::StatusCode::kInternal) Die("encode", st);
  if (!st.ok()) return Report(st);
  if (in_place.used()) {  // what goes on the wire, parsed back
    grpc::ByteBuffer sent;
    st = in_place.Serialize(resp, &sent);
    if (!st.ok()) Die("in-place answer", st);
    std::vector<grpc::Slice> slices;
    if (!sent.Dump(&slices).ok()) Die("in-place answer", attn::Status::Internal("no slices"));
    std::string wire;
    for (const grpc::Slice& sl : slices)
      wire.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    if (!resp.ParseFromString(wire)) Die("in-place answer", attn::Status::Internal("unparsable"));
  }
  int64_t n = 1;
  for (int64_t d : resp.output().shape()) n *= d;
  // Data in the answer's own type (float16/bfloat16 answers a half query
  // with 2 bytes an element), or float values.
  const int64_t width =
      resp.output().data().empty()
          ? 4
          : attn::wire::WireTypeBytes(attn::wire::FromNativeDataType(resp.output().dtype()));
  const int64_t bytes = resp.output().data().size() + 4 * resp.output().values_size();
  if (bytes != width * n) {
    std::fprintf(stderr, "request_fuzzer: output holds %lld bytes for %lld elements of %lld\n",
                 static_cast<long long>(bytes), static_cast<long long>(n),
                 static_cast<long long>(width));
    std::abort();
  }
  Report(st);
}

// An OIP call: prepare, compute, respond; every output's raw bytes must
// match its shape and datatype.
void RunOip(const inference::ModelInferRequest& req, const attn::server::oip::HttpOutputs* http) {
  static const RequestLimits limits = SmallLimits();
  PreparedCall call;
  inference::ModelInferResponse resp;
  attn::Status st = attn::server::oip::PrepareInfer(req, Models(), limits, &call, &resp);
  if (st.code() == attn::StatusCode::kInternal) Die("oip prepare", st);
  if (!st.ok()) return Report(st);
  auto out = call.compute(1, call.output);
  if (!out.ok()) {
    if (out.status().code() == attn::StatusCode::kInternal) Die("oip compute", out.status());
    return Report(out.status());
  }
  st = call.respond(*out);
  if (st.code() == attn::StatusCode::kInternal) Die("oip respond", st);
  if (!st.ok()) return Report(st);
  for (int i = 0; i < resp.outputs_size() && resp.raw_output_contents_size() > 0; ++i) {
    int64_t n = 1;
    for (int64_t d : resp.outputs(i).shape()) n *= d;
    const auto type = attn::wire::FromOipDatatype(resp.outputs(i).datatype());
    if (static_cast<int64_t>(resp.raw_output_contents(i).size()) !=
        n * attn::wire::WireTypeBytes(type)) {
      std::fprintf(stderr, "request_fuzzer: OIP output %d has %zu bytes for %lld %s\n", i,
                   resp.raw_output_contents(i).size(), static_cast<long long>(n),
                   resp.outputs(i).datatype().c_str());
      std::abort();
    }
  }
  if (http != nullptr) {
    int64_t json_length = 0;
    const std::string body = attn::server::oip::InferResponseBody(resp, *http, &json_length);
    if (json_length > static_cast<int64_t>(body.size())) Die("http body", st);
  }
  Report(st);
}

void RunHttp(const uint8_t* data, size_t size) {
  if (size == 0) return;
  const std::string model = data[0] & 1 ? "demo-mha-small" : "scaled_dot_product_attention";
  std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  int64_t json_length = -1;
  if (data[0] & 2) {
    const size_t nul = body.find('\0');
    json_length = nul == std::string_view::npos ? -1 : static_cast<int64_t>(nul);
  }
  inference::ModelInferRequest req;
  attn::server::oip::HttpOutputs outputs;
  attn::Status st =
      attn::server::oip::ParseInferRequest(body, json_length, model, "", &req, &outputs);
  if (st.code() == attn::StatusCode::kInternal) Die("http parse", st);
  if (!st.ok()) return Report(st);
  RunOip(req, &outputs);
}

// The principals the session selectors run under: each call is one's, and
// must never change anything of the other's.
constexpr const char* kOwners[2] = {"alice", "bob"};

// `owner`'s sessions (tokens per layer, bytes), and with `pool`, the pool's
// bytes: what a failed call must leave as it was, and what a call of
// another owner must never touch.
std::vector<std::vector<int64_t>> SessionState(attn::KvCacheStore& store, const std::string& owner,
                                               bool pool) {
  std::vector<std::vector<int64_t>> state;
  for (const attn::KvSessionInfo& i : store.List(owner)) {
    state.push_back(i.layer_tokens);
    state.back().push_back(i.cache_bytes);
  }
  const attn::KvOwnerUsage use = store.OwnerUsage(owner);
  state.push_back({use.sessions, use.bytes_used});
  if (pool) state.push_back({store.bytes_used()});
  return state;
}

// A fresh store where each owner has "a" (2 layers, 2 kv heads, D 8,
// float32, 20 tokens in layer 0), "b" (1 layer, 1 head, D 4, Dv 6,
// bfloat16, 5 tokens), "q" (int8 keys, fp8 values, 9 tokens), "q4" (int4,
// 13 tokens) and "a:c", a
// fork of "a"; bob's hold other values, and bob also has "bob-only".
std::unique_ptr<attn::KvCacheStore> SessionStore() {
  attn::KvStoreOptions o;
  o.pool_bytes = 64 << 10;
  o.page_bytes = 1024;
  o.default_max_tokens = 300;
  auto store = std::make_unique<attn::KvCacheStore>(o);
  o.max_sessions = 12;
  auto make = [&](const char* owner, const char* id, int64_t layers, int64_t heads, int64_t d,
                  int64_t dv, attn::CacheType t, int64_t tokens, float fill,
                  attn::CacheFormat kf = attn::CacheFormat::kAsCacheType,
                  attn::CacheFormat vf = attn::CacheFormat::kAsCacheType) {
    attn::KvSessionSpec spec;
    spec.owner = owner, spec.session_id = id, spec.num_layers = layers;
    spec.num_kv_heads = heads, spec.head_dim = d, spec.value_dim = dv, spec.cache_type = t;
    spec.key_format = kf, spec.value_format = vf;
    if (!store->Create(spec).ok()) Die("session setup", attn::Status::Internal(id));
    std::vector<float> kv(static_cast<size_t>(heads * tokens * std::max(d, dv)), fill);
    attn::KvStep st{id, attn::TensorView::Dense(kv.data(), {heads, 0, d}),
                    attn::TensorView::Dense(kv.data(), {heads, tokens, d}),
                    attn::TensorView::Dense(kv.data(), {heads, tokens, dv})};
    attn::KvExtendOptions eo;
    eo.owner = owner;
    auto r = store->Extend(0, {st}, eo);
    if (!r.ok()) Die("session setup", r.status());
  };
  for (const char* owner : kOwners) {
    const float fill = owner == kOwners[0] ? 0.25f : -0.5f;
    make(owner, "a", 2, 2, 8, 8, attn::CacheType::kFloat32, 20, fill);
    make(owner, "b", 1, 1, 4, 6, attn::CacheType::kBFloat16, 5, fill);
    // Quantized: int8 keys, fp8 values.
    make(owner, "q", 1, 1, 8, 8, attn::CacheType::kBFloat16, 9, fill, attn::CacheFormat::kInt8,
         attn::CacheFormat::kFp8E4M3);
    make(owner, "q4", 1, 1, 8, 8, attn::CacheType::kFloat16, 13, fill, attn::CacheFormat::kInt4,
         attn::CacheFormat::kInt4);
    if (!store->Fork(owner, "a", "a:c").ok()) Die("session setup", attn::Status::Internal("fork"));
  }
  make(kOwners[1], "bob-only", 1, 1, 4, 4, attn::CacheType::kFloat32, 3, 1.0f);
  return store;
}

void RunSessions(int op, const uint8_t* data, size_t size) {
  static const RequestLimits limits = SmallLimits();
  auto store = SessionStore();
  // Whose call this is: the input decides, so both run.
  const std::string me = kOwners[size % 2], other = kOwners[1 - size % 2];
  const auto before = SessionState(*store, me, true);
  const auto others = SessionState(*store, other, false);
  attn::Status st;
  auto parse = [&](google::protobuf::MessageLite* m) {
    return m->ParseFromArray(data, static_cast<int>(size));
  };
  if (op == 0 || op == 5) {
    attention::v1::ExtendRequest req;
    if (!parse(&req)) return Report(attn::Status::InvalidArgument("not a parsable request"));
    PreparedCall call;
    call.principal.name = me;
    grpc::ByteBuffer sent;
    st = attn::server::PrepareExtend(req, store.get(), limits, nullptr, &sent, &call);
    if (st.ok()) {
      auto out = call.compute(1, nullptr);
      st = out.ok() ? call.respond(*out) : out.status();
      if (st.ok()) {  // every step's output sized by its shape
        std::vector<grpc::Slice> slices;
        std::string wire;
        if (!sent.Dump(&slices).ok()) Die("extend answer", attn::Status::Internal("no slices"));
        for (const grpc::Slice& sl : slices)
          wire.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
        attention::v1::ExtendResponse resp;
        if (!resp.ParseFromString(wire) || resp.results_size() != req.steps_size()) {
          Die("extend answer", attn::Status::Internal("unparsable or short"));
        }
        for (const auto& r : resp.results()) {
          int64_t n = 1;
          for (int64_t d : r.output().shape()) n *= d;
          const int64_t width =
              r.output().data().empty()
                  ? 4
                  : attn::wire::WireTypeBytes(attn::wire::FromNativeDataType(r.output().dtype()));
          if (static_cast<int64_t>(r.output().data().size()) + 4 * r.output().values_size() !=
              width * n) {
            Die("extend answer", attn::Status::Internal("output size"));
          }
        }
      }
    }
  } else if (op == 1) {
    attention::v1::CreateSessionRequest req;
    if (!parse(&req)) return Report(attn::Status::InvalidArgument("not a parsable request"));
    st = attn::server::CreateFromWire(req, me, store.get()).status();
  } else if (op == 2) {
    attention::v1::ForkSessionRequest req;
    if (!parse(&req)) return Report(attn::Status::InvalidArgument("not a parsable request"));
    st = store->Fork(me, req.session_id(), req.new_session_id()).status();
  } else if (op == 3) {
    attention::v1::TruncateSessionRequest req;
    if (!parse(&req)) return Report(attn::Status::InvalidArgument("not a parsable request"));
    st = store->Truncate(me, req.session_id(), req.tokens()).status();
  } else {
    attention::v1::SessionRef req;
    if (!parse(&req)) return Report(attn::Status::InvalidArgument("not a parsable request"));
    st = store->Delete(me, req.session_id()).status();
  }
  if (st.code() == attn::StatusCode::kInternal) Die("session call", st);
  if (store->bytes_used() > store->bytes_limit())
    Die("session pool", attn::Status::Internal("over"));
  if (!st.ok() && SessionState(*store, me, true) != before) {
    Die("a failed session call changed the store", st);
  }
  if (SessionState(*store, other, false) != others) {
    Die("a call of one principal changed another's sessions", st);
  }
  Report(st);
}

}  // namespace

// bf16 compute emulated where the CPU has none (attn/cpu_info.h), so that
// requests permitted bf16 (and BFLOAT16 ones viewed in place) reach the bf16
// kernel on every machine; before the first call reads it.
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  setenv("ATTN_BF16_EMULATION", "1", /*overwrite=*/0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] >= 250) {
    RunSessions(data[0] - 250, data + 1, size - 1);
    return 0;
  }
  switch (data[0] % 5) {
    case 0:
      Run<attention::v1::AttentionRequest>(data + 1, size - 1, attn::server::PrepareAttention);
      break;
    case 1:
      Run<attention::v1::CrossAttentionRequest>(data + 1, size - 1,
                                                attn::server::PrepareCrossAttention);
      break;
    case 2:
      Run<attention::v1::MultiHeadAttentionRequest>(data + 1, size - 1,
                                                    attn::server::PrepareMultiHeadAttention);
      break;
    case 3: {
      inference::ModelInferRequest req;
      if (req.ParseFromArray(data + 1, static_cast<int>(size - 1))) {
        RunOip(req, nullptr);
      } else {
        Report(attn::Status::InvalidArgument("not a parsable request"));
      }
      break;
    }
    default:
      RunHttp(data + 1, size - 1);
      break;
  }
  return 0;
}
