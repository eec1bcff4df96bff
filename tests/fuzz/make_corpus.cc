// Writes the fuzzer's seed corpus: valid requests of each RPC with each
// option (masks, projections, models, encodings) and typical invalid ones.
// Run by hand; the output is committed as tests/fuzz/corpus/.
//
//   build/bin/fuzz_make_corpus tests/fuzz/corpus tests/fuzz/regressions
//
// The second directory gets the inputs of bugs found so far (each fixed, each
// replayed by the fuzz_corpus_replay test); crashes found by the fuzzer go
// there too, as the files libFuzzer writes.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "attention/v1/attention.pb.h"
#include "attention/v1/session.pb.h"
#include "host_array.h"
#include "inference/open_inference_grpc.pb.h"

namespace {

using attn::client::Encoding;
using attn::client::HostArray;

attention::v1::Tensor T(attn::Shape shape, Encoding enc = Encoding::kData, bool is_bool = false) {
  HostArray a;
  a.shape = shape;
  a.is_bool = is_bool;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  for (int64_t i = 0; i < n; ++i) {
    a.values.push_back(is_bool ? static_cast<float>(i % 3 == 2) : std::sin(0.7f * i));
  }
  return attn::client::ToWire(a, enc);
}

int written = 0;
std::string dir;

void Write(const std::string& name, char rpc, const google::protobuf::Message& m) {
  std::ofstream out(dir + "/" + name, std::ios::binary);
  out.put(rpc);
  out << m.SerializeAsString();
  ++written;
}

// An OIP HTTP body (rpc 4); `flags` is the fuzzer's byte 1.
void WriteHttp(const std::string& name, char flags, const std::string& body) {
  std::ofstream out(dir + "/" + name, std::ios::binary);
  out.put(4);
  out.put(flags);
  out << body;
  ++written;
}

// An OIP input with raw contents of `datatype` (FP32, FP16, BF16 or BOOL).
void OipInput(inference::ModelInferRequest* r, const std::string& name, const std::string& datatype,
              attn::Shape shape) {
  auto* in = r->add_inputs();
  in->set_name(name);
  in->set_datatype(datatype);
  int64_t n = 1;
  for (int64_t d : shape) in->add_shape(d), n *= d;
  const size_t bytes = datatype == "FP32" ? 4 : datatype == "BOOL" ? 1 : 2;
  std::string raw(static_cast<size_t>(n) * bytes, '\0');
  for (size_t i = 0; i < raw.size(); ++i)
    raw[i] = static_cast<char>(datatype == "BOOL" ? i % 2 : 0x3c - i % 3);
  r->add_raw_input_contents(raw);
}

void Projections(attention::v1::Projections* p, int64_t e, bool out) {
  *p->mutable_q_weight() = T({e, e});
  *p->mutable_k_weight() = T({e, e});
  *p->mutable_v_weight() = T({e, e});
  *p->mutable_q_bias() = T({e});
  if (out) *p->mutable_out_weight() = T({e, e});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR REGRESSIONS_DIR\n", argv[0]);
    return 2;
  }
  dir = argv[1];
  using attention::v1::AttentionRequest;
  using attention::v1::CrossAttentionRequest;
  using attention::v1::MultiHeadAttentionRequest;
  {  // the seed's worked example, self-attention
    AttentionRequest r;
    *r.mutable_query() = T({5, 2});
    Write("sdpa_self_2d", 0, r);
    *r.mutable_query() = T({5, 2}, Encoding::kValues);
    Write("sdpa_self_values", 0, r);
    r.set_return_weights(true);
    r.set_causal(true);
    Write("sdpa_causal_weights", 0, r);
  }
  {  // key/value, every mask, rank 4
    AttentionRequest r;
    *r.mutable_query() = T({2, 2, 3, 4});
    *r.mutable_key() = T({2, 2, 5, 4});
    *r.mutable_value() = T({2, 2, 5, 3});
    *r.mutable_key_padding_mask() = T({2, 5}, Encoding::kData, true);
    *r.mutable_attn_bias() = T({2, 2, 3, 5});
    r.set_scale(0.25f);
    Write("sdpa_kv_masks_4d", 0, r);
    *r.mutable_attn_bias() = T({3, 5});
    Write("sdpa_bias_broadcast", 0, r);
  }
  {  // every AttentionOptions field, grouped-query shapes (issue 23)
    AttentionRequest r;
    *r.mutable_query() = T({1, 4, 3, 4});
    *r.mutable_key() = T({1, 2, 7, 4});
    *r.mutable_value() = T({1, 2, 7, 3});
    r.set_causal(true);
    auto* o = r.mutable_options();
    o->set_causal_alignment(attention::v1::CAUSAL_ALIGNMENT_BOTTOM_RIGHT);
    o->set_window_left(2);
    o->set_window_right(0);
    *o->mutable_alibi_slopes() = T({4});
    o->set_softcap(3.0f);
    *o->mutable_sink_logits() = T({4});
    o->set_return_lse(true);
    o->set_compute_precision(attention::v1::PRECISION_BFLOAT16);
    Write("sdpa_variants_gqa", 0, r);
  }
  {  // a packed batch (cu_seqlens): three sequences, one of them empty, GQA
    AttentionRequest r;
    *r.mutable_query() = T({5, 4, 4});
    *r.mutable_key() = T({7, 2, 4});
    *r.mutable_value() = T({7, 2, 3});
    for (int64_t x : {0, 2, 2, 5}) r.add_cu_seqlens_q(x);
    for (int64_t x : {0, 3, 4, 7}) r.add_cu_seqlens_k(x);
    r.set_causal(true);
    r.mutable_options()->set_causal_alignment(attention::v1::CAUSAL_ALIGNMENT_BOTTOM_RIGHT);
    r.mutable_options()->set_return_lse(true);
    Write("sdpa_packed_varlen", 0, r);
  }
  {  // inline projections; the demo single-head model
    AttentionRequest r;
    *r.mutable_query() = T({1, 4, 6});
    Projections(r.mutable_projections(), 6, true);
    Write("sdpa_projections", 0, r);
    AttentionRequest m;
    *m.mutable_query() = T({1, 3, 64});
    m.set_model("demo-attention");
    Write("sdpa_model", 0, m);
  }
  {  // cross-attention
    CrossAttentionRequest r;
    *r.mutable_decoder() = T({1, 3, 64});
    *r.mutable_encoder() = T({1, 6, 64});
    r.set_model("demo-cross-attention");
    Write("cross_model", 1, r);
    r.set_return_weights(true);
    *r.mutable_key_padding_mask() = T({1, 6}, Encoding::kData, true);
    Write("cross_model_kpm_weights", 1, r);
    CrossAttentionRequest p;
    *p.mutable_decoder() = T({2, 4});
    *p.mutable_encoder() = T({3, 4});
    Projections(p.mutable_projections(), 4, false);
    Write("cross_projections_2d", 1, p);
  }
  {  // multi-head attention
    MultiHeadAttentionRequest r;
    *r.mutable_query() = T({1, 4, 64});
    r.set_model("demo-mha-small");
    Write("mha_self_model", 2, r);
    *r.mutable_key() = T({1, 5, 64});
    *r.mutable_value() = T({1, 5, 64});
    r.set_return_weights(true);
    r.set_per_head_weights(true);
    *r.mutable_attn_bias() = T({4, 5});
    Write("mha_cross_per_head", 2, r);
    MultiHeadAttentionRequest p;
    *p.mutable_query() = T({3, 8});
    p.set_num_heads(2);
    Projections(p.mutable_projections(), 8, true);
    p.set_causal(true);
    Write("mha_projections_unbatched", 2, p);
  }
  {  // invalid: each should be refused, never crash
    AttentionRequest r;
    *r.mutable_query() = T({5, 2});
    r.mutable_query()->set_shape(0, -3);
    Write("bad_negative_dim", 0, r);
    *r.mutable_query() = T({5, 2});
    r.mutable_query()->mutable_data()->resize(17);
    Write("bad_truncated_data", 0, r);
    *r.mutable_query() = T({5, 2});
    r.mutable_query()->set_dtype(attention::v1::DATA_TYPE_BFLOAT16);
    Write("bad_dtype", 0, r);
    *r.mutable_query() = T({5, 2});
    r.mutable_query()->set_shape(0, int64_t{1} << 40);
    r.mutable_query()->set_shape(1, int64_t{1} << 40);
    Write("bad_overflowing_dims", 0, r);
    *r.mutable_query() = T({0, 2});
    Write("empty_query", 0, r);
    MultiHeadAttentionRequest m;
    *m.mutable_query() = T({1, 3, 64});
    m.set_model("no-such-model");
    Write("bad_unknown_model", 2, m);
    m.set_model("demo-mha-small");
    *m.mutable_key_padding_mask() = T({2, 9}, Encoding::kData, true);
    Write("bad_mask_shape", 2, m);
    CrossAttentionRequest c;
    *c.mutable_decoder() = T({1, 3, 64});
    Write("bad_cross_no_encoder", 1, c);
  }
  {  // The Open Inference Protocol over gRPC (rpc 3): raw, half types, typed.
    inference::ModelInferRequest r;
    r.set_model_name("scaled_dot_product_attention");
    OipInput(&r, "query", "FP32", {2, 3, 4});
    Write("oip_sdpa_raw", 3, r);
    (*r.mutable_parameters())["causal"].set_bool_param(true);
    r.add_outputs()->set_name("weights");
    Write("oip_sdpa_causal_weights", 3, r);
    inference::ModelInferRequest h;
    h.set_model_name("demo-mha-small");
    OipInput(&h, "query", "FP16", {1, 3, 64});
    OipInput(&h, "key", "BF16", {1, 5, 64});
    OipInput(&h, "value", "FP32", {1, 5, 64});
    OipInput(&h, "key_padding_mask", "BOOL", {1, 5});
    Write("oip_mha_half_mixed", 3, h);
    inference::ModelInferRequest t;
    t.set_model_name("scaled_dot_product_attention");
    auto* in = t.add_inputs();
    in->set_name("query");
    in->set_datatype("FP32");
    in->add_shape(2), in->add_shape(2);
    for (float v : {1.0f, 0.0f, 0.5f, 1.0f}) in->mutable_contents()->add_fp32_contents(v);
    Write("oip_sdpa_typed", 3, t);
  }
  {  // OIP HTTP bodies (rpc 4): JSON, and JSON + binary (split at the NUL).
    WriteHttp(
        "http_json_seed", 0,
        R"({"id": "x", "inputs": [{"name": "query", "shape": [5, 2], "datatype": "FP32",)"
        R"( "data": [[1, 0], [0, 1], [1, 1], [1, 1], [0.5, 1]]}],)"
        R"( "outputs": [{"name": "output"}, {"name": "weights", "parameters": {"binary_data": true}}]})");
    std::string data = "0.5";
    for (int i = 1; i < 128; ++i) data += i % 2 ? ", -1.25" : ", 0.5";
    WriteHttp(
        "http_json_mha_params", 1,
        R"({"inputs": [{"name": "query", "shape": [1, 2, 64], "datatype": "FP16", "data": [)" +
            data + R"(]}], "parameters": {"causal": true}})");
    std::string binary = R"({"inputs": [{"name": "query", "shape": [2, 2], "datatype": "FP32",)"
                         R"( "parameters": {"binary_data_size": 16}}],)"
                         R"( "parameters": {"binary_data_output": true}})";
    binary.push_back('\0');
    binary += std::string(15, '\x3f');
    WriteHttp("http_binary", 2, binary);
  }
  {  // SessionService (bytes 250-255) against the fuzzer's sessions a, b and c
    attention::v1::ExtendRequest e;
    e.set_causal(true);
    auto* st = e.add_steps();
    st->set_session_id("a");
    *st->mutable_query() = T({4, 1, 8});
    *st->mutable_key() = T({2, 1, 8});
    *st->mutable_value() = T({2, 1, 8});
    Write("session_extend_decode", static_cast<char>(250), e);
    auto* st2 = e.add_steps();
    st2->set_session_id("b");
    *st2->mutable_query() = T({2, 3, 4}, Encoding::kValues);
    *st2->mutable_key() = T({1, 3, 4});
    *st2->mutable_value() = T({1, 3, 6});
    auto* o = e.mutable_options();
    o->set_window_left(4);
    o->set_softcap(2.5f);
    o->set_return_lse(true);
    *o->mutable_sink_logits() = T({2});
    e.mutable_steps(0)->mutable_query()->CopyFrom(T({2, 1, 8}));
    Write("session_extend_batch_options", static_cast<char>(250), e);
    attention::v1::ExtendRequest cow;
    cow.set_causal(true);
    auto* c = cow.add_steps();
    c->set_session_id("a:c");
    *c->mutable_key() = T({2, 20, 8});
    *c->mutable_value() = T({2, 20, 8});
    Write("session_extend_fork_copy_on_write", static_cast<char>(255), cow);
    attention::v1::CreateSessionRequest cr;
    cr.set_session_id("d");
    cr.set_num_layers(2);
    cr.set_num_kv_heads(1);
    cr.set_head_dim(16);
    cr.set_cache_dtype(attention::v1::DATA_TYPE_FLOAT16);
    Write("session_create", static_cast<char>(251), cr);
    cr.set_session_id("q2");
    cr.set_key_format(attention::v1::CACHE_FORMAT_INT8);
    cr.set_value_format(attention::v1::CACHE_FORMAT_FP8_E4M3);
    Write("session_create_quantized", static_cast<char>(251), cr);
    attention::v1::ForkSessionRequest f;
    f.set_session_id("b");
    f.set_new_session_id("b:2");
    Write("session_fork", static_cast<char>(252), f);
    attention::v1::TruncateSessionRequest t;
    t.set_session_id("a");
    t.set_tokens(7);
    Write("session_truncate", static_cast<char>(253), t);
    attention::v1::SessionRef d;
    d.set_session_id("a");
    Write("session_delete", static_cast<char>(254), d);
  }
  std::printf("wrote %d seeds to %s\n", written, dir.c_str());
  dir = argv[2];
  written = 0;
  {  // Signed overflow in the element count: an empty tensor whose other dims
     // multiply past int64 (found by fuzzing the live server; fixed in
     // CheckedNumElements).
    AttentionRequest r;
    *r.mutable_query() = T({0, 2});
    r.mutable_query()->clear_shape();
    for (int64_t d : {int64_t{0}, int64_t{1} << 40, int64_t{1} << 40})
      r.mutable_query()->add_shape(d);
    Write("regression_empty_tensor_overflowing_dims", 0, r);
    AttentionRequest b;
    *b.mutable_query() = T({1, 3, 4});
    *b.mutable_attn_bias() = T({0, 2});
    b.mutable_attn_bias()->clear_shape();
    for (int64_t d : {int64_t{0}, int64_t{1} << 62, int64_t{4}})
      b.mutable_attn_bias()->add_shape(d);
    Write("regression_empty_mask_overflowing_dims", 0, b);
  }
  std::printf("wrote %d regressions to %s\n", written, dir.c_str());
  return 0;
}
