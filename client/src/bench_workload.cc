#include "bench_workload.h"

#include <cmath>
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
  for (int i = 0; i < 4; ++i) spec->projections.push_back(RandomArray({w.e, w.e}, rng, s));
  for (int i = 0; i < 4; ++i) spec->projections.push_back(RandomArray({w.e}, rng, s));
  const auto& p = spec->projections;
  w.views.q = {View(p[0]), View(p[4])};
  w.views.k = {View(p[1]), View(p[5])};
  w.views.v = {View(p[2]), View(p[6])};
  if (c.op == "mha") w.views.out = LinearView{View(p[3]), View(p[7])};
  return w;
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

StatusOr<Workload> BuildWorkload(const BenchConfig& c, AttentionClient& client) {
  Workload w;
  if (c.op == "health") {
    w.description = "health (grpc.health.v1 Check)";
    return w;
  }
  std::mt19937 rng(static_cast<unsigned>(c.seed));
  CallSpec spec;
  spec.op = c.op, spec.model = c.model, spec.encoding = c.encoding, spec.dtype = c.dtype,
  spec.oip = c.oip, spec.causal = c.causal;
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
  const bool self = c.seq_k == c.seq_q;
  std::ostringstream d;
  d << c.op << (c.model.empty() ? " inline" : " " + c.model);
  StatusOr<AttentionCost> cost = Status::Internal("unset");
  StatusOr<AttentionResult> local = Status::Internal("unset");
  if (c.op == "attention" && c.model.empty()) {
    // SDPA on [B, H, L, D] (or [B, L, D] with one head).
    Shape qs = {c.batch, c.heads, c.seq_q, c.dim}, ks = {c.batch, c.heads, c.seq_k, c.dim};
    if (c.heads == 1) qs.erase(qs.begin() + 1), ks.erase(ks.begin() + 1);
    spec.query = RandomArray(qs, rng);
    if (!self) spec.key = RandomArray(ks, rng), spec.value = RandomArray(ks, rng);
    round_inputs();
    const HostArray& k = self ? spec.query : *spec.key;
    const HostArray& v = self ? spec.query : *spec.value;
    ScaledDotProductAttentionOptions opt;
    opt.masks.causal = c.causal;
    cost = EstimateScaledDotProductAttention(View(spec.query), View(k), View(v), opt);
    if (c.verify) local = ScaledDotProductAttention(View(spec.query), View(k), View(v), opt);
    d << " query" << ShapeToString(qs);
  } else {
    FillRandomInputs({c.batch, c.seq_q, c.seq_k, weights->e, weights->kdim, weights->vdim}, rng,
                     &spec);
    round_inputs();
    const HostArray& q = spec.query;
    const HostArray& k = spec.key ? *spec.key : q;
    const HostArray& v = spec.value ? *spec.value : k;
    spec.num_heads = c.op == "mha" && c.model.empty() ? weights->heads : 0;
    MultiHeadAttentionOptions opt;
    opt.num_heads = c.op == "mha" ? weights->heads : 1;
    opt.masks.causal = c.causal;
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
    if (!self || c.op == "cross") d << " key" << ShapeToString(k.shape);
    if (c.op == "mha") d << " heads=" << weights->heads;
  }
  if (!cost.ok()) return Status::InvalidArgument("workload: " + cost.status().message());
  w.flops = cost->flops;
  if (c.verify) {
    if (!local.ok()) return local.status();
    w.expected =
        HostArray{local->output.shape,
                  std::vector<float>(local->output.data.begin(), local->output.data.end()), false};
  }
  if (c.causal) d << " causal";
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
