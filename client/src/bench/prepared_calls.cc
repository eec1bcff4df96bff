#include "bench/prepared_calls.h"

#include <cmath>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>

#include "attn/attention.h"
#include "attn/model.h"
#include "request_builder.h"

namespace attn::client {
namespace {

TensorView View(const HostArray& a) { return TensorView::Dense(a.values.data(), a.shape); }

// The projection weights the workload's math uses: a built-in demo model's
// own (known locally), or the inline weights the request carries. A remote
// model that is not a demo model is counted from its shapes alone (its
// weights are not known here); no weights are allocated for that.
struct Weights {
  ProjectionWeights views;
  bool known = true;
  bool out_projection = false;  // a remote model's, for the count
  int64_t e = 0, kdim = 0, vdim = 0, heads = 1;
  int64_t kv_heads = 0;              // mha: grouped-query k/v projections (0: heads)
  std::vector<AttentionModel> demo;  // owns a demo model's weights
};

StatusOr<Weights> ResolveWeights(const BenchConfig& c, AttentionClient& client, std::mt19937& rng,
                                 CallSpec* spec) {
  Weights w;
  w.e = w.kdim = w.vdim = c.dim, w.heads = c.heads;
  if (!c.model.empty()) {
    auto info = client.FindModel(c.model, std::chrono::seconds(10));
    if (!info.ok()) return info.status();
    w.e = info->embed_dim(), w.kdim = info->kdim(), w.vdim = info->vdim();
    w.heads = info->num_heads();
    w.kv_heads = info->num_kv_heads();
    w.out_projection = info->kind() == "multi_head_attention";
    w.demo = BuiltinDemoModels();
    for (const auto& m : w.demo) {
      if (m.info().name == c.model && m.info().embed_dim == w.e) w.views = m.projections();
    }
    w.known = w.views.q.weight.data != nullptr;
    if (!w.known && c.verify) {
      return Status::InvalidArgument("--verify: model '" + c.model +
                                     "' is not a built-in demo model, so its weights are not "
                                     "known here; verify with a demo model or inline shapes");
    }
    return w;
  }
  if (c.op == "attention") return w;
  const float s = 1.0f / std::sqrt(static_cast<float>(w.e));
  // --num-kv-heads: k and v project to that many heads of the query's width.
  w.kv_heads = c.op == "mha" ? c.variants.num_kv_heads : 0;
  const int64_t ekv =
      w.kv_heads > 0 && w.heads > 0 && w.e % w.heads == 0 ? w.e / w.heads * w.kv_heads : w.e;
  const int64_t rows[4] = {w.e, ekv, ekv, w.e};
  for (int i = 0; i < 4; ++i) spec->projections.push_back(RandomArray({rows[i], w.e}, rng, s));
  for (int i = 0; i < 4; ++i) spec->projections.push_back(RandomArray({rows[i]}, rng, s));
  const auto& p = spec->projections;
  w.views.q = {View(p[0]), View(p[4])};
  w.views.k = {View(p[1]), View(p[5])};
  w.views.v = {View(p[2]), View(p[6])};
  if (c.op == "mha") w.views.out = LinearView{View(p[3]), View(p[7])};
  return w;
}

// --data: a .npy file (the query), or a .json file holding an array (the
// query) or an object with "query" and optionally "key" and "value".
struct DataInputs {
  HostArray query;
  std::optional<HostArray> key, value;
};

StatusOr<DataInputs> LoadData(const std::string& path) {
  const std::string where = "--data " + path;
  DataInputs d;
  if (path.size() > 4 && path.substr(path.size() - 4) == ".npy") {
    auto q = ReadNpy(path);
    if (!q.ok()) return Status::InvalidArgument(where + ": " + q.status().message());
    d.query = std::move(*q);
    return d;
  }
  std::ifstream in(path);
  if (!in) return Status::InvalidArgument(where + ": cannot read the file");
  std::stringstream text;
  text << in.rdbuf();
  auto json = ParseJson(text.str());
  if (!json.ok()) return Status::InvalidArgument(where + ": " + json.status().message());
  if (json->type == JsonValue::Type::kArray) {
    auto q = FromJsonArray(*json, where);
    if (!q.ok()) return q.status();
    d.query = std::move(*q);
    return d;
  }
  const JsonValue* q = json->type == JsonValue::Type::kObject ? json->Find("query") : nullptr;
  if (q == nullptr) {
    return Status::InvalidArgument(where + ": expected an array (the query) or an object with " +
                                   "\"query\" (and \"key\", \"value\")");
  }
  for (const auto& [name, v] : json->object) {
    if (name != "query" && name != "key" && name != "value") {
      return Status::InvalidArgument(where + ": unknown member \"" + name +
                                     "\" (query, key, value)");
    }
    auto a = FromJsonArray(v, where + ": " + name);
    if (!a.ok()) return a.status();
    (name == "query" ? d.query
     : name == "key" ? d.key.emplace()
                     : d.value.emplace()) = std::move(*a);
  }
  return d;
}

// --padded-keys N: bool [B, Lk], the last N keys of every row true.
HostArray PaddingMask(int64_t batch, int64_t lk, int64_t padded) {
  HostArray m{{batch, lk}, std::vector<float>(static_cast<size_t>(batch * lk), 0.0f), true};
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = std::max<int64_t>(0, lk - padded); j < lk; ++j) m.values[b * lk + j] = 1;
  }
  return m;
}

// With --padded-keys: the mask into the request, and its view (over
// `bytes`) for the local count and answer. Keys are the second-last dim.
std::optional<TensorView> Padding(const BenchConfig& c, const Shape& key_shape, CallSpec* spec,
                                  std::vector<uint8_t>* bytes) {
  if (c.padded_keys <= 0) return std::nullopt;
  const int64_t lk = key_shape[key_shape.size() - 2];
  const int64_t batch = key_shape.size() > 2 ? key_shape[0] : 1;
  spec->key_padding_mask = PaddingMask(batch, lk, c.padded_keys);
  if (key_shape.size() == 2) spec->key_padding_mask->shape = {lk};
  bytes->assign(spec->key_padding_mask->values.begin(), spec->key_padding_mask->values.end());
  return TensorView::DenseBool(bytes->data(), spec->key_padding_mask->shape);
}

// The masks and variants in the workload's one-line description.
void DescribeVariants(const BenchConfig& c, std::ostringstream& d) {
  const AttentionVariants& v = c.variants;
  if (c.causal) d << " causal";
  if (v.bottom_right) d << " bottom-right";
  if (v.window_left) d << " window_left=" << *v.window_left;
  if (v.window_right) d << " window_right=" << *v.window_right;
  if (v.softcap) d << " softcap=" << *v.softcap;
  if (v.alibi_slopes) d << " alibi";
  if (v.sink_logits) d << " sinks";
  if (v.num_kv_heads > 0 && c.op == "attention") d << " kv_heads=" << v.num_kv_heads;
  if (!v.compute_precision.empty()) d << " precision=" << v.compute_precision;
  if (!v.cu_seqlens_q.empty()) d << " packed=" << v.cu_seqlens_q.size() - 1 << "seqs";
}

double LinearFlops(int64_t rows, int64_t in, int64_t out) {
  return 2.0 * static_cast<double>(rows) * static_cast<double>(in) * static_cast<double>(out);
}

}  // namespace

double RemoteModelFlops(const BenchConfig& c, int64_t e, int64_t kdim, int64_t vdim,
                        bool out_projection) {
  const int64_t rq = c.batch * c.seq_q, rk = c.batch * c.seq_k;
  const double attention = 2.0 * static_cast<double>(c.batch) * static_cast<double>(c.seq_q) *
                           static_cast<double>(c.seq_k) * static_cast<double>(2 * e);
  return LinearFlops(rq, e, e) + LinearFlops(rk, kdim, e) + LinearFlops(rk, vdim, e) +
         (out_projection ? LinearFlops(rq, e, e) : 0.0) + attention;
}

// The shapes of bench --op attention's SDPA: [B, H, L, D] (or [B, L, D] with
// one head), or a packed batch's [total, H, D]; `v` loses --num-kv-heads
// (K/V heads here, not a field) and gains cu_seqlens_k (default: the
// query's). True when the key and value are their own tensors, not the query.
bool SdpaShapes(const BenchConfig& c, AttentionVariants* v, Shape* qs, Shape* ks) {
  const int64_t kv_heads = v->num_kv_heads > 0 ? v->num_kv_heads : c.heads;
  *qs = {c.batch, c.heads, c.seq_q, c.dim}, *ks = {c.batch, kv_heads, c.seq_k, c.dim};
  if (c.heads == 1 && kv_heads == 1) qs->erase(qs->begin() + 1), ks->erase(ks->begin() + 1);
  v->num_kv_heads = 0;
  const auto& cu_q = v->cu_seqlens_q;
  if (v->cu_seqlens_k.empty()) v->cu_seqlens_k = cu_q;
  if (!cu_q.empty())
    *qs = {cu_q.back(), c.heads, c.dim}, *ks = {v->cu_seqlens_k.back(), kv_heads, c.dim};
  return c.seq_k != c.seq_q || kv_heads != c.heads || v->cu_seqlens_k != cu_q;
}

StatusOr<Workload> BuildWorkload(const BenchConfig& config, AttentionClient& client) {
  Workload w;
  if (config.op == "health") {
    w.description = "health (grpc.health.v1 Check)";
    return w;
  }
  // With --data, its shapes replace the size flags.
  std::optional<DataInputs> data;
  BenchConfig c = config;
  if (!c.data_path.empty()) {
    auto loaded = LoadData(c.data_path);
    if (!loaded.ok()) return loaded.status();
    data = std::move(*loaded);
    const Shape& qs = data->query.shape;
    if (qs.size() < 2) return Status::InvalidArgument("--data: the query needs 2 or more dims");
    c.dim = qs.back(), c.seq_q = qs[qs.size() - 2], c.batch = qs.size() > 2 ? qs[0] : 1;
    c.heads = c.op == "attention" && qs.size() == 4 ? qs[1] : c.heads;
    c.seq_k = data->key ? data->key->shape[data->key->shape.size() - 2] : c.seq_q;
  }
  std::mt19937 rng(static_cast<unsigned>(c.seed));
  CallSpec spec;
  spec.op = c.op, spec.model = c.model, spec.encoding = c.encoding, spec.dtype = c.dtype,
  spec.oip = c.oip, spec.causal = c.causal, spec.variants = c.variants;
  auto weights = ResolveWeights(c, client, rng, &spec);
  if (!weights.ok()) return weights.status();
  // Half types: what the server computes on is the rounded inputs, so the
  // local answer (--verify) uses them too. (The views stay valid: rounding
  // is in place.)
  auto round_inputs = [&spec] {
    for (HostArray* a :
         {&spec.query, spec.key ? &*spec.key : nullptr, spec.value ? &*spec.value : nullptr}) {
      if (a != nullptr) RoundToWireType(a, spec.dtype);
    }
    for (HostArray& p : spec.projections) RoundToWireType(&p, spec.dtype);
  };
  std::vector<uint8_t> mask_bytes;  // the padding mask, for the local computation
  std::ostringstream d;
  d << c.op << (c.model.empty() ? " inline" : " " + c.model);
  StatusOr<AttentionCost> cost = Status::Internal("unset");
  StatusOr<AttentionResult> local = Status::Internal("unset");
  if (c.op == "attention" && c.model.empty()) {
    // SDPA on [B, H, L, D] (or [B, L, D] with one head).
    Shape qs, ks;
    const bool own_kv = SdpaShapes(c, &spec.variants, &qs, &ks);
    spec.query = data ? data->query : RandomArray(qs, rng);
    if (data && data->key) {
      spec.key = data->key, spec.value = data->value ? *data->value : *data->key;
    } else if (own_kv) {
      spec.key = RandomArray(ks, rng), spec.value = RandomArray(ks, rng);
    }
    qs = spec.query.shape;
    round_inputs();
    const HostArray& k = spec.key ? *spec.key : spec.query;
    const HostArray& v = spec.value ? *spec.value : k;
    ScaledDotProductAttentionOptions opt;
    ApplyVariants(spec.variants, &opt);
    opt.masks.causal = c.causal;
    opt.masks.key_padding_mask = Padding(c, k.shape, &spec, &mask_bytes);
    cost = EstimateScaledDotProductAttention(View(spec.query), View(k), View(v), opt);
    if (c.verify) local = ScaledDotProductAttention(View(spec.query), View(k), View(v), opt);
    d << " query" << ShapeToString(qs);
  } else {
    FillRandomInputs({c.batch, c.seq_q, c.seq_k, weights->e, weights->kdim, weights->vdim}, rng,
                     &spec);
    if (data) {
      spec.query = data->query;
      if (data->key) spec.key = data->key;
      if (data->value) spec.value = data->value;
      if (c.op == "cross" && !data->key) {
        return Status::InvalidArgument("--data: cross-attention needs \"key\" (the encoder)");
      }
    }
    round_inputs();
    const HostArray& q = spec.query;
    const HostArray& k = spec.key ? *spec.key : q;
    const HostArray& v = spec.value ? *spec.value : k;
    spec.num_heads = c.op == "mha" && c.model.empty() ? weights->heads : 0;
    MultiHeadAttentionOptions opt;
    opt.num_heads = c.op == "mha" ? weights->heads : 1;
    opt.num_kv_heads = c.op == "mha" ? weights->kv_heads : 0;
    ApplyVariants(spec.variants, &opt.masks, &opt.score);
    opt.masks.causal = c.causal;
    opt.masks.key_padding_mask = Padding(c, k.shape, &spec, &mask_bytes);
    if (weights->known) {
      cost = EstimateMultiHeadAttention(weights->views, View(q), View(k), View(v), opt);
    } else {
      AttentionCost remote;
      remote.flops =
          RemoteModelFlops(c, weights->e, weights->kdim, weights->vdim, weights->out_projection);
      cost = remote;
    }
    if (c.verify) local = MultiHeadAttention(weights->views, View(q), View(k), View(v), opt);
    d << " query" << ShapeToString(q.shape);
    if (c.seq_k != c.seq_q || c.op == "cross") d << " key" << ShapeToString(k.shape);
    if (c.op == "mha") d << " heads=" << weights->heads;
    if (c.op == "mha" && weights->kv_heads > 0 && weights->kv_heads != weights->heads)
      d << " kv_heads=" << weights->kv_heads;
  }
  if (!cost.ok()) return Status::InvalidArgument("workload: " + cost.status().message());
  w.flops = cost->flops;
  if (c.verify) {
    if (!local.ok()) return local.status();
    w.expected =
        HostArray{local->output.shape,
                  std::vector<float>(local->output.data.begin(), local->output.data.end()), false};
  }
  DescribeVariants(c, d);
  if (c.padded_keys > 0) d << " padded_keys=" << c.padded_keys;
  if (data) d << " data=" << c.data_path;
  w.description = d.str();
  auto call = BuildCall(spec);
  if (!call.ok()) return call.status();
  std::string bytes;
  call->message().SerializeToString(&bytes);
  grpc::Slice slice(bytes);
  w.request = grpc::ByteBuffer(&slice, 1);
  w.method = call->method();
  w.request_bytes = static_cast<int64_t>(bytes.size());
  return w;
}

}  // namespace attn::client
