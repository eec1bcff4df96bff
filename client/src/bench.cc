#include "bench.h"

#include <grpcpp/generic/generic_stub.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "attention_client.h"
#include "attn/attention.h"
#include "attn/model.h"

namespace attn::client {
namespace {

using Clock = std::chrono::steady_clock;

// ---- Flags ------------------------------------------------------------------

StatusOr<double> ParseSeconds(const std::string& flag, const std::string& v) {
  double scale = 1;
  std::string num = v;
  if (v.size() > 2 && v.compare(v.size() - 2, 2, "ms") == 0) {
    scale = 1e-3, num = v.substr(0, v.size() - 2);
  } else if (!v.empty() && (v.back() == 's' || v.back() == 'm')) {
    scale = v.back() == 'm' ? 60 : 1, num = v.substr(0, v.size() - 1);
  }
  char* end = nullptr;
  const double x = std::strtod(num.c_str(), &end);
  if (num.empty() || *end != '\0' || !std::isfinite(x) || x < 0) {
    return Status::InvalidArgument(flag + ": expected a duration like 30s, 500ms or 2m, got '" + v +
                                   "'");
  }
  return x * scale;
}

StatusOr<int64_t> ParseCount(const std::string& flag, const std::string& v, int64_t lo,
                             int64_t hi) {
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < lo || x > hi) {
    return Status::InvalidArgument(flag + ": expected an integer in [" + std::to_string(lo) + ", " +
                                   std::to_string(hi) + "], got '" + v + "'");
  }
  return x;
}

const char* kBenchUsage = R"(usage: attention-client bench [flags]

workload:
  --op attention|cross|mha|health   (default mha; health is grpc.health.v1 Check)
  --model NAME                      server-side weights (input widths from ListModels)
  --batch B --seq-q L --seq-k L     input sizes (default 1, 128, = seq-q)
  --dim D --heads H                 inline shapes when no --model (default 64, 1)
  --causal                          causal mask
  --encoding raw|values             how tensors travel (default raw)
  --seed N                          for the random inputs (made once, outside the timing)
load:
  --concurrency N[,N...]            calls in flight; a list sweeps (default 1)
  --connections N                   channels (default 1)
  --requests N | --duration 30s     per level (default --duration 10s)
  --rps R                           open loop at R calls/s (concurrency caps calls in flight)
  --warmup 2s                       not counted (default 1s)
  --timeout 30s                     per-call deadline
report:
  --json FILE                       everything, machine-readable
  --csv FILE                        one row per concurrency level
  --verify                          check every 16th response against core, locally
  --no-progress                     no live line on stderr
  --retry                           retry calls that fail UNAVAILABLE (behind a balancer)
connection:
  --target HOST:PORT --max-message-mb N
  --tls                             TLS, trusting the system's CAs
  --tls-ca FILE                     TLS, trusting this PEM CA bundle
  --tls-cert FILE --tls-key FILE    a client certificate (mutual TLS)
  --token-file FILE                 send 'authorization: Bearer <token>' (or ATTN_TOKEN)
)";

}  // namespace

std::string BenchUsage() { return kBenchUsage; }

StatusOr<BenchConfig> ParseBenchFlags(const std::vector<std::string>& args, bool* help) {
  BenchConfig c;
  c.progress = isatty(2) != 0;
  if (const char* token = std::getenv("ATTN_TOKEN")) c.channel.token = token;
  *help = false;
  bool requests_set = false, duration_set = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i], value;
    if (name == "--help" || name == "-h") {
      *help = true;
      return c;
    }
    const auto eq = name.find('=');
    if (eq != std::string::npos) value = name.substr(eq + 1), name = name.substr(0, eq);
    auto flag = [&]() {
      return name == "--verify" || name == "--causal" || name == "--no-progress" ||
             name == "--retry" || name == "--tls";
    };
    if (flag()) {
      if (name == "--retry") c.channel.retry_unavailable = true;
      if (name == "--tls") c.channel.tls = true;
      if (name == "--verify") c.verify = true;
      if (name == "--causal") c.causal = true;
      if (name == "--no-progress") c.progress = false;
      continue;
    }
    if (eq == std::string::npos) {
      if (i + 1 >= args.size()) return Status::InvalidArgument(name + ": missing value");
      value = args[++i];
    }
    auto count = [&](int64_t lo, int64_t hi) { return ParseCount(name, value, lo, hi); };
    if (name == "--target") {
      c.target = value;
    } else if (name == "--max-message-mb") {
      auto x = count(1, 2047);
      if (!x.ok()) return x.status();
      c.channel.max_message_mb = static_cast<int>(*x);
    } else if (name == "--tls-ca") {
      c.channel.tls_ca = value;
    } else if (name == "--tls-cert") {
      c.channel.tls_cert = value;
    } else if (name == "--tls-key") {
      c.channel.tls_key = value;
    } else if (name == "--token-file") {
      auto token = ReadTokenFile(value);
      if (!token.ok()) return token.status();
      c.channel.token = *token;
    } else if (name == "--op") {
      if (value != "attention" && value != "cross" && value != "mha" && value != "health") {
        return Status::InvalidArgument("--op: expected attention, cross, mha or health, got '" +
                                       value + "'");
      }
      c.op = value;
    } else if (name == "--model") {
      c.model = value;
    } else if (name == "--batch" || name == "--seq-q" || name == "--seq-k" || name == "--dim" ||
               name == "--heads") {
      auto x = count(1, 1 << 24);
      if (!x.ok()) return x.status();
      (name == "--batch"   ? c.batch
       : name == "--seq-q" ? c.seq_q
       : name == "--seq-k" ? c.seq_k
       : name == "--dim"   ? c.dim
                           : c.heads) = *x;
    } else if (name == "--encoding") {
      if (value != "raw" && value != "data" && value != "values") {
        return Status::InvalidArgument("--encoding: expected raw or values, got '" + value + "'");
      }
      c.encoding = value == "values" ? Encoding::kValues : Encoding::kData;
    } else if (name == "--concurrency") {
      c.concurrency.clear();
      std::stringstream ss(value);
      std::string item;
      while (std::getline(ss, item, ',')) {
        auto x = ParseCount("--concurrency", item, 1, 100000);
        if (!x.ok()) return x.status();
        c.concurrency.push_back(static_cast<int>(*x));
      }
      if (c.concurrency.empty()) return Status::InvalidArgument("--concurrency: empty list");
    } else if (name == "--connections") {
      auto x = count(1, 1024);
      if (!x.ok()) return x.status();
      c.connections = static_cast<int>(*x);
    } else if (name == "--requests") {
      auto x = count(1, int64_t{1} << 40);
      if (!x.ok()) return x.status();
      c.requests = *x;
      requests_set = true;
    } else if (name == "--duration" || name == "--warmup" || name == "--timeout") {
      auto x = ParseSeconds(name, value);
      if (!x.ok()) return x.status();
      if (name == "--duration") {
        if (*x <= 0) return Status::InvalidArgument("--duration: must be positive");
        c.duration_s = *x, duration_set = true;
      } else if (name == "--warmup") {
        c.warmup_s = *x;
      } else {
        if (*x <= 0) return Status::InvalidArgument("--timeout: must be positive");
        c.timeout_s = *x;
      }
    } else if (name == "--rps") {
      char* end = nullptr;
      c.rps = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(c.rps > 0) || !std::isfinite(c.rps)) {
        return Status::InvalidArgument("--rps: expected a positive rate, got '" + value + "'");
      }
    } else if (name == "--seed") {
      auto x = count(0, int64_t{1} << 40);
      if (!x.ok()) return x.status();
      c.seed = static_cast<uint64_t>(*x);
    } else if (name == "--json") {
      c.json_path = value;
    } else if (name == "--csv") {
      c.csv_path = value;
    } else {
      return Status::InvalidArgument("unknown bench flag '" + name + "' (see bench --help)");
    }
  }
  if (requests_set && duration_set) {
    return Status::InvalidArgument("--requests and --duration: give one, not both");
  }
  if (c.seq_k == 0) c.seq_k = c.seq_q;
  if (c.verify && c.op == "health") {
    return Status::InvalidArgument("--verify: nothing to verify for --op health");
  }
  return c;
}

namespace {

// ---- Workload ---------------------------------------------------------------

struct Workload {
  std::string description;
  double flops = 0;
  attention::v1::AttentionRequest attention;
  attention::v1::CrossAttentionRequest cross;
  attention::v1::MultiHeadAttentionRequest mha;
  std::optional<HostArray> expected;  // for --verify
  // The request, serialized once; every call sends these bytes (a ByteBuffer
  // copy shares its slices), so the client pays no per-call serialization.
  std::string method;  // "/attention.v1.AttentionService/..."
  grpc::ByteBuffer request;
};

// Serializes `w`'s request for its op into w->request.
void SerializeRequest(const std::string& op, Workload* w) {
  std::string bytes;
  if (op == "attention") {
    w->method = "/attention.v1.AttentionService/Attention";
    w->attention.SerializeToString(&bytes);
  } else if (op == "cross") {
    w->method = "/attention.v1.AttentionService/CrossAttention";
    w->cross.SerializeToString(&bytes);
  } else {
    w->method = "/attention.v1.AttentionService/MultiHeadAttention";
    w->mha.SerializeToString(&bytes);
  }
  grpc::Slice slice(bytes);
  w->request = grpc::ByteBuffer(&slice, 1);
}

HostArray Random(Shape shape, std::mt19937& rng, float stddev = 1.0f) {
  HostArray a;
  a.shape = std::move(shape);
  std::normal_distribution<float> dist(0.0f, stddev);
  a.values.resize(static_cast<size_t>(NumElements(a.shape)));
  for (auto& v : a.values) v = dist(rng);
  return a;
}

TensorView View(const HostArray& a) { return TensorView::Dense(a.values.data(), a.shape); }

HostArray FromTensor(const Tensor& t) {
  HostArray a;
  a.shape = t.shape;
  a.values.assign(t.data.begin(), t.data.end());
  return a;
}

StatusOr<Workload> BuildWorkload(const BenchConfig& c, AttentionClient& client) {
  Workload w;
  if (c.op == "health") {
    w.description = "health (grpc.health.v1 Check)";
    return w;
  }
  std::mt19937 rng(static_cast<unsigned>(c.seed));
  // Projection weights: a demo model's own (known locally), a remote model's
  // shapes (zeros, for the FLOP count), or random inline weights.
  std::vector<AttentionModel> demo;
  const AttentionModel* local_model = nullptr;
  int64_t e = c.dim, kdim = c.dim, vdim = c.dim, heads = c.heads;
  std::vector<HostArray> inline_weights;  // q, k, v, out weights then biases
  ProjectionWeights pw;
  if (!c.model.empty()) {
    attention::v1::ListModelsResponse models;
    auto st = client.ListModels(&models, std::chrono::seconds(10));
    if (!st.ok()) return Status(static_cast<StatusCode>(st.error_code()), st.error_message());
    const attention::v1::ModelInfo* info = nullptr;
    for (const auto& m : models.models()) {
      if (m.name() == c.model) info = &m;
    }
    if (info == nullptr)
      return Status::NotFound("--model: the server has no model '" + c.model + "'");
    e = info->embed_dim(), kdim = info->kdim(), vdim = info->vdim(), heads = info->num_heads();
    demo = BuiltinDemoModels();
    for (const auto& m : demo) {
      if (m.info().name == c.model && m.info().embed_dim == e) local_model = &m;
    }
    if (local_model != nullptr) {
      pw = local_model->projections();
    } else if (c.verify) {
      return Status::InvalidArgument("--verify: model '" + c.model +
                                     "' is not a built-in demo model, so its weights are not "
                                     "known here; verify with a demo model or inline shapes");
    } else {  // zeros of the model's shapes: enough to count FLOPs
      for (auto [o, i] :
           {std::pair{e, e}, std::pair{e, kdim}, std::pair{e, vdim}, std::pair{e, e}}) {
        inline_weights.push_back(HostArray{{o, i}, std::vector<float>(o * i, 0.0f), false});
      }
      pw.q = {View(inline_weights[0]), std::nullopt};
      pw.k = {View(inline_weights[1]), std::nullopt};
      pw.v = {View(inline_weights[2]), std::nullopt};
      if (info->kind() == "multi_head_attention")
        pw.out = LinearView{View(inline_weights[3]), std::nullopt};
    }
  } else if (c.op != "attention") {
    const float s = 1.0f / std::sqrt(static_cast<float>(e));
    for (int i = 0; i < 4; ++i) inline_weights.push_back(Random({e, e}, rng, s));
    for (int i = 0; i < 4; ++i) inline_weights.push_back(Random({e}, rng, s));
    pw.q = {View(inline_weights[0]), View(inline_weights[4])};
    pw.k = {View(inline_weights[1]), View(inline_weights[5])};
    pw.v = {View(inline_weights[2]), View(inline_weights[6])};
    if (c.op == "mha") pw.out = LinearView{View(inline_weights[3]), View(inline_weights[7])};
  }
  // Only inline weights create the projections field: an empty one next to
  // --model would be "model and projections" to the server.
  auto set_inline = [&](auto* req) {
    if (!c.model.empty() || inline_weights.empty()) return;
    attention::v1::Projections* p = req->mutable_projections();
    *p->mutable_q_weight() = ToWire(inline_weights[0], c.encoding);
    *p->mutable_k_weight() = ToWire(inline_weights[1], c.encoding);
    *p->mutable_v_weight() = ToWire(inline_weights[2], c.encoding);
    *p->mutable_q_bias() = ToWire(inline_weights[4], c.encoding);
    *p->mutable_k_bias() = ToWire(inline_weights[5], c.encoding);
    *p->mutable_v_bias() = ToWire(inline_weights[6], c.encoding);
    if (c.op == "mha") {
      *p->mutable_out_weight() = ToWire(inline_weights[3], c.encoding);
      *p->mutable_out_bias() = ToWire(inline_weights[7], c.encoding);
    }
  };

  const bool self = c.seq_k == c.seq_q;
  StatusOr<AttentionCost> cost = Status::Internal("unset");
  StatusOr<AttentionResult> local = Status::Internal("unset");
  std::ostringstream d;
  d << c.op << (c.model.empty() ? " inline" : " " + c.model);
  if (c.op == "attention" && c.model.empty()) {
    // SDPA on [B, H, L, D] (or [B, L, D] with one head).
    Shape qs = {c.batch, c.heads, c.seq_q, c.dim}, ks = {c.batch, c.heads, c.seq_k, c.dim};
    if (c.heads == 1) qs.erase(qs.begin() + 1), ks.erase(ks.begin() + 1);
    HostArray q = Random(qs, rng), k = self ? q : Random(ks, rng), v = self ? q : Random(ks, rng);
    *w.attention.mutable_query() = ToWire(q, c.encoding);
    if (!self) {
      *w.attention.mutable_key() = ToWire(k, c.encoding);
      *w.attention.mutable_value() = ToWire(v, c.encoding);
    }
    w.attention.set_causal(c.causal);
    ScaledDotProductAttentionOptions opt;
    opt.masks.causal = c.causal;
    cost = EstimateScaledDotProductAttention(View(q), View(k), View(v), opt);
    if (c.verify) local = ScaledDotProductAttention(View(q), View(k), View(v), opt);
    d << " query" << ShapeToString(qs);
  } else {
    HostArray q = Random({c.batch, c.seq_q, e}, rng);
    HostArray k = self && c.op != "cross" ? q : Random({c.batch, c.seq_k, kdim}, rng);
    HostArray v = c.op == "cross" ? k : (self ? q : Random({c.batch, c.seq_k, vdim}, rng));
    MultiHeadAttentionOptions opt;
    opt.num_heads = c.op == "mha" ? heads : 1;
    opt.masks.causal = c.causal;
    if (c.op == "attention") {
      *w.attention.mutable_query() = ToWire(q, c.encoding);
      if (!self) {
        *w.attention.mutable_key() = ToWire(k, c.encoding);
        *w.attention.mutable_value() = ToWire(v, c.encoding);
      }
      w.attention.set_model(c.model);
      w.attention.set_causal(c.causal);
    } else if (c.op == "cross") {
      *w.cross.mutable_decoder() = ToWire(q, c.encoding);
      *w.cross.mutable_encoder() = ToWire(k, c.encoding);
      w.cross.set_model(c.model);
      w.cross.set_causal(c.causal);
      set_inline(&w.cross);
    } else {
      *w.mha.mutable_query() = ToWire(q, c.encoding);
      if (!self) {
        *w.mha.mutable_key() = ToWire(k, c.encoding);
        *w.mha.mutable_value() = ToWire(v, c.encoding);
      }
      w.mha.set_model(c.model);
      if (c.model.empty()) w.mha.set_num_heads(static_cast<int32_t>(heads));
      w.mha.set_causal(c.causal);
      set_inline(&w.mha);
    }
    cost = EstimateMultiHeadAttention(pw, View(q), View(k), View(v), opt);
    if (c.verify) local = MultiHeadAttention(pw, View(q), View(k), View(v), opt);
    d << " query" << ShapeToString(q.shape);
    if (!self || c.op == "cross") d << " key" << ShapeToString(k.shape);
    if (c.op == "mha") d << " heads=" << heads;
  }
  if (!cost.ok()) return Status::InvalidArgument("workload: " + cost.status().message());
  w.flops = cost->flops;
  if (c.verify) {
    if (!local.ok()) return local.status();
    w.expected = FromTensor(local->output);
  }
  if (c.causal) d << " causal";
  w.description = d.str();
  return w;
}

// ---- The load ---------------------------------------------------------------

// One level of load: calls issued on gRPC's callback API, each completion
// recording its sample and (closed loop) issuing the next call.
class LevelRun {
 public:
  LevelRun(const BenchConfig& c, const Workload& w,
           std::vector<std::unique_ptr<grpc::GenericStub>>& stubs,
           std::vector<std::unique_ptr<grpc::health::v1::Health::Stub>>& health, int concurrency)
      : c_(c), w_(w), stubs_(stubs), health_(health), concurrency_(concurrency) {}

  LevelReport Run(const std::atomic<bool>* interrupt) {
    const auto start = Clock::now();
    if (c_.rps > 0) {
      pacer_ = std::thread([this] { Pace(); });
    } else {
      for (int i = 0; i < concurrency_; ++i) Issue();
    }
    // Warm-up, then measure, for a time or a count; stop early on Ctrl-C.
    auto interrupted = [&] { return interrupt != nullptr && interrupt->load(); };
    while (!interrupted() && Seconds(start) < c_.warmup_s) Sleep();
    {
      std::lock_guard<std::mutex> lock(mu_);
      measure_start_ = Clock::now();
      measuring_ = true;
    }
    int64_t last_printed = -1;
    auto last_print = Clock::now();
    while (!interrupted()) {
      if (c_.requests > 0 ? measured_issued_.load() >= c_.requests
                          : Seconds(measure_start_) >= c_.duration_s) {
        break;
      }
      if (c_.progress && Seconds(last_print) >= 0.5) {
        PrintProgress(&last_printed);
        last_print = Clock::now();
      }
      Sleep();
    }
    stopping_ = true;
    if (pacer_.joinable()) pacer_.join();
    std::unique_lock<std::mutex> lock(mu_);
    const double measured = std::chrono::duration<double>(Clock::now() - measure_start_).count();
    if (interrupted()) {  // Ctrl-C: do not wait for slow calls; they are not counted
      cancelled_ = true;
      for (Call* call : live_) call->ctx.TryCancel();
    }
    // Every call has a deadline, so this ends; callbacks must not outlive us.
    drained_.wait(lock, [this] { return in_flight_ == 0; });
    if (c_.progress) std::fprintf(stderr, "\r%80s\r", "");
    return Summarise(c_.requests > 0
                         ? std::chrono::duration<double>(last_done_ - measure_start_).count()
                         : measured);
  }

 private:
  struct Call {
    grpc::ClientContext ctx;
    grpc::ByteBuffer request, response;  // serialized; parsed only to verify
    grpc::health::v1::HealthCheckResponse health;
    Clock::time_point start;
    bool measured = false;
    int64_t index = 0;
  };

  static double Seconds(Clock::time_point since) {
    return std::chrono::duration<double>(Clock::now() - since).count();
  }
  static void Sleep() { std::this_thread::sleep_for(std::chrono::milliseconds(5)); }

  // Creates the next call under mu_, unless stopping or past --requests.
  // The caller has a slot for it in in_flight_.
  std::shared_ptr<Call> NextCallLocked() {
    if (stopping_) return nullptr;
    auto call = std::make_shared<Call>();
    call->measured = measuring_;
    if (call->measured) {
      if (c_.requests > 0 && measured_issued_ >= c_.requests) return nullptr;
      call->index = measured_issued_++;
    }
    live_.insert(call.get());
    return call;
  }

  // Starts a call in a new slot (the first calls, and open loop).
  void Issue() {
    std::shared_ptr<Call> call;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (in_flight_ >= concurrency_) return;  // only reachable in open loop
      call = NextCallLocked();
      if (!call) return;
      ++in_flight_;
    }
    Start(call);
  }

  void Start(const std::shared_ptr<Call>& call) {
    call->ctx.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::microseconds(static_cast<int64_t>(c_.timeout_s * 1e6)));
    const size_t conn = next_conn_++ % stubs_.size();
    call->start = Clock::now();
    auto done = [this, call](grpc::Status st) { Finished(call, st); };
    if (c_.op == "health") {
      health_[conn]->async()->Check(&call->ctx, &health_req_, &call->health, done);
    } else {
      call->request = w_.request;  // shares the slices: no copy
      stubs_[conn]->UnaryCall(&call->ctx, w_.method, grpc::StubOptions(), &call->request,
                              &call->response, done);
    }
  }

  // Records a finished call. In closed loop its slot passes straight to the
  // next call; only when no call follows does in_flight_ drop, and that is
  // the last use of `this` (Run() may return right after).
  void Finished(const std::shared_ptr<Call>& call, const grpc::Status& st) {
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - call->start).count();
    double queue_ms = -1, compute_ms = -1;
    if (st.ok()) {
      double queue_us, compute_us;
      if (ServerTiming(call->ctx.GetServerTrailingMetadata(), &queue_us, &compute_us)) {
        queue_ms = queue_us / 1e3, compute_ms = compute_us / 1e3;
      }
    }
    bool mismatch = false, checked = false;
    if (st.ok() && call->measured && w_.expected && call->index % 16 == 0) {
      checked = true;
      attention::v1::AttentionResponse resp;
      mismatch = !Parse(call->response, &resp);
      if (!mismatch) {
        auto got = FromWire(resp.output(), "output");
        mismatch = !got.ok() || got->shape != w_.expected->shape || !Close(*got, *w_.expected);
      }
    }
    std::shared_ptr<Call> next;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (call->measured && !(cancelled_ && st.error_code() == grpc::StatusCode::CANCELLED)) {
        ++count_;
        if (st.ok()) {
          latencies_.push_back(ms);
          if (queue_ms >= 0) queue_sum_ += queue_ms, compute_sum_ += compute_ms, ++timed_;
        } else {
          ++errors_[StatusCodeName(static_cast<StatusCode>(st.error_code()))];
          if (first_error_.empty()) {
            first_error_ = std::string(StatusCodeName(static_cast<StatusCode>(st.error_code()))) +
                           ": " + st.error_message();
          }
        }
        verified_ += checked;
        mismatches_ += mismatch;
        last_done_ = Clock::now();
      }
      live_.erase(call.get());
      if (c_.rps <= 0) next = NextCallLocked();  // closed loop: reuse the slot
      if (!next) {
        --in_flight_;
        if (in_flight_ == 0) drained_.notify_all();
        return;
      }
    }
    Start(next);  // our slot is still counted, so Run() is still waiting
  }

  static bool Parse(const grpc::ByteBuffer& buffer, attention::v1::AttentionResponse* resp) {
    std::vector<grpc::Slice> slices;
    if (!buffer.Dump(&slices).ok()) return false;
    std::string bytes;
    for (const auto& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
    return resp->ParseFromString(bytes);
  }

  static bool Close(const HostArray& got, const HostArray& want) {
    double scale = 0;
    for (float x : want.values) scale = std::max(scale, static_cast<double>(std::abs(x)));
    for (size_t i = 0; i < want.values.size(); ++i) {
      const double tol = 1e-5 * (std::abs(want.values[i]) + scale);
      if (!(std::abs(got.values[i] - want.values[i]) <= tol)) return false;
    }
    return true;
  }

  // Open loop: calls start on a fixed schedule, whatever the latency.
  void Pace() {
    const auto period = std::chrono::duration<double>(1.0 / c_.rps);
    auto next = Clock::now();
    while (!stopping_) {
      Issue();
      next += std::chrono::duration_cast<Clock::duration>(period);
      std::this_thread::sleep_until(next);
    }
  }

  void PrintProgress(int64_t* last) {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t errors = 0;
    for (const auto& [code, n] : errors_) errors += n;
    const double s =
        std::max(1e-9, std::chrono::duration<double>(Clock::now() - measure_start_).count());
    std::fprintf(stderr, "\r  concurrency %d: %lld requests, %.1f req/s, %lld errors   ",
                 concurrency_, static_cast<long long>(count_), static_cast<double>(count_) / s,
                 static_cast<long long>(errors));
    *last = count_;
  }

  LevelReport Summarise(double seconds) {
    LevelReport r;
    r.concurrency = concurrency_;
    r.seconds = std::max(seconds, 1e-9);
    r.count = count_;
    r.ok = static_cast<int64_t>(latencies_.size());
    r.errors = errors_;
    r.first_error = first_error_;
    r.rps = static_cast<double>(r.ok) / r.seconds;
    r.gflops = r.rps * w_.flops / 1e9;
    r.verified = verified_;
    r.mismatches = mismatches_;
    if (timed_ > 0)
      r.server_queue_ms = queue_sum_ / timed_, r.server_compute_ms = compute_sum_ / timed_;
    if (latencies_.empty()) return r;
    std::sort(latencies_.begin(), latencies_.end());
    auto pct = [&](double p) {
      const size_t i = static_cast<size_t>(std::ceil(p / 100.0 * latencies_.size())) - 1;
      return latencies_[std::min(i, latencies_.size() - 1)];
    };
    r.min_ms = latencies_.front();
    r.max_ms = latencies_.back();
    double sum = 0;
    for (double x : latencies_) sum += x;
    r.mean_ms = sum / latencies_.size();
    r.p50_ms = pct(50), r.p90_ms = pct(90), r.p95_ms = pct(95), r.p99_ms = pct(99);
    // Ten log-spaced buckets from min to max.
    const double lo = std::max(r.min_ms, 1e-3), hi = std::max(r.max_ms, lo * 1.0001);
    const double ratio = std::pow(hi / lo, 1.0 / 10);
    size_t j = 0;
    for (int b = 1; b <= 10; ++b) {
      const double upper = b == 10 ? hi : lo * std::pow(ratio, b);
      int64_t n = 0;
      while (j < latencies_.size() && latencies_[j] <= upper) ++n, ++j;
      r.histogram.emplace_back(upper, n);
    }
    r.histogram.back().second += static_cast<int64_t>(latencies_.size() - j);
    return r;
  }

  const BenchConfig& c_;
  const Workload& w_;
  std::vector<std::unique_ptr<grpc::GenericStub>>& stubs_;
  std::vector<std::unique_ptr<grpc::health::v1::Health::Stub>>& health_;
  const int concurrency_;
  const grpc::health::v1::HealthCheckRequest health_req_;
  std::thread pacer_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> measured_issued_{0};  // written under mu_
  std::set<Call*> live_;                     // calls in flight, to cancel on Ctrl-C
  bool cancelled_ = false;
  std::atomic<uint64_t> next_conn_{0};
  std::mutex mu_;
  std::condition_variable drained_;
  int in_flight_ = 0;
  bool measuring_ = false;
  Clock::time_point measure_start_ = Clock::now(), last_done_ = Clock::now();
  int64_t count_ = 0, verified_ = 0, mismatches_ = 0, timed_ = 0;
  double queue_sum_ = 0, compute_sum_ = 0;
  std::vector<double> latencies_;
  std::map<std::string, int64_t> errors_;
  std::string first_error_;
};

std::string Num(double v, int precision = 3) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*f", precision, v);
  return buf;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) out += ch;
  }
  return out + "\"";
}

}  // namespace

StatusOr<BenchReport> RunBench(const BenchConfig& config, const std::atomic<bool>* interrupt) {
  BenchReport report;
  report.config = config;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  std::vector<std::unique_ptr<grpc::health::v1::Health::Stub>> health;
  for (int i = 0; i < config.connections; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("attn.bench_connection", i);  // distinct args: a TCP connection each
    auto channel = OpenChannel(config.target, config.channel, args);
    if (!channel.ok()) return channel.status();
    channels.push_back(std::move(*channel));
    stubs.push_back(std::make_unique<grpc::GenericStub>(channels.back()));
    health.push_back(grpc::health::v1::Health::NewStub(channels.back()));
  }
  // Never released: gRPC 1.51 shares one callback completion queue among the
  // channels that use the callback API and tears it down when the last of
  // them goes, even while one of its threads is still finishing a completion
  // (ASan: double free in grpc_cq_internal_unref, right after a run). Keeping
  // the bench's channels for the life of the process avoids the race.
  {
    static auto* kept = new std::vector<std::shared_ptr<grpc::Channel>>();
    static std::mutex kept_mu;
    std::lock_guard<std::mutex> lock(kept_mu);
    kept->insert(kept->end(), channels.begin(), channels.end());
  }
  AttentionClient client(channels.front());
  std::string status;
  auto st = client.Health("", &status, std::chrono::seconds(5));
  if (!st.ok()) {
    return Status(StatusCode::kFailedPrecondition,
                  "cannot reach " + config.target + ": " + st.error_message());
  }
  auto workload = BuildWorkload(config, client);
  if (!workload.ok()) return workload.status();
  if (config.op != "health") SerializeRequest(config.op, &*workload);
  report.workload = workload->description;
  report.flops_per_call = workload->flops;
  for (int level : config.concurrency) {
    LevelRun run(config, *workload, stubs, health, level);
    report.levels.push_back(run.Run(interrupt));
    if (interrupt != nullptr && interrupt->load()) {
      report.interrupted = true;
      break;
    }
  }
  return report;
}

std::string ReportToText(const BenchReport& r) {
  std::ostringstream o;
  o << "workload: " << r.workload << " (" << Num(r.flops_per_call / 1e6, 2)
    << " MFLOP/call), target " << r.config.target << ", " << r.config.connections
    << " connection(s)"
    << (r.config.rps > 0 ? ", open loop at " + Num(r.config.rps, 0) + " req/s" : "")
    << (r.interrupted ? "  [interrupted: partial report]" : "") << "\n";
  for (const auto& l : r.levels) {
    o << "\nconcurrency " << l.concurrency << ": " << l.count << " calls in " << Num(l.seconds, 2)
      << " s, " << l.ok << " ok";
    for (const auto& [code, n] : l.errors) o << ", " << n << " " << code;
    if (!l.first_error.empty()) o << "\n  first error: " << l.first_error;
    o << "\n  throughput " << Num(l.rps, 1) << " req/s, " << Num(l.gflops, 1) << " GFLOP/s\n"
      << "  latency ms: min " << Num(l.min_ms) << "  mean " << Num(l.mean_ms) << "  p50 "
      << Num(l.p50_ms) << "  p90 " << Num(l.p90_ms) << "  p95 " << Num(l.p95_ms) << "  p99 "
      << Num(l.p99_ms) << "  max " << Num(l.max_ms) << "\n"
      << "  server: queue " << Num(l.server_queue_ms) << " ms, compute " << Num(l.server_compute_ms)
      << " ms (means)\n";
    if (r.config.verify) {
      o << "  verify: " << l.verified << " responses checked, " << l.mismatches << " mismatches\n";
    }
    int64_t peak = 1;
    for (const auto& [ub, n] : l.histogram) peak = std::max(peak, n);
    for (const auto& [ub, n] : l.histogram) {
      o << "  <= " << Num(ub) << " ms "
        << std::string(std::max<int64_t>(0, 9 - static_cast<int64_t>(Num(ub).size())), ' ')
        << std::string(static_cast<size_t>(40 * n / peak), '#') << " " << n << "\n";
    }
  }
  if (r.levels.size() > 1) {
    o << "\n"
      << "concurrency  req/s      GFLOP/s   p50 ms    p99 ms    errors\n";
    for (const auto& l : r.levels) {
      int64_t errors = 0;
      for (const auto& [code, n] : l.errors) errors += n;
      char line[160];
      std::snprintf(line, sizeof(line), "%-12d %-10.1f %-9.1f %-9.3f %-9.3f %lld\n", l.concurrency,
                    l.rps, l.gflops, l.p50_ms, l.p99_ms, static_cast<long long>(errors));
      o << line;
    }
  }
  return o.str();
}

std::string ReportToCsv(const BenchReport& r) {
  std::string s =
      "concurrency,requests,ok,errors,seconds,rps,gflops,min_ms,mean_ms,p50_ms,p90_ms,p95_ms,p99_"
      "ms,max_ms,server_queue_ms,server_compute_ms\n";
  for (const auto& l : r.levels) {
    int64_t errors = 0;
    for (const auto& [code, n] : l.errors) errors += n;
    s += std::to_string(l.concurrency) + "," + std::to_string(l.count) + "," +
         std::to_string(l.ok) + "," + std::to_string(errors) + "," + Num(l.seconds, 3) + "," +
         Num(l.rps, 2) + "," + Num(l.gflops, 3) + "," + Num(l.min_ms) + "," + Num(l.mean_ms) + "," +
         Num(l.p50_ms) + "," + Num(l.p90_ms) + "," + Num(l.p95_ms) + "," + Num(l.p99_ms) + "," +
         Num(l.max_ms) + "," + Num(l.server_queue_ms) + "," + Num(l.server_compute_ms) + "\n";
  }
  return s;
}

std::string ReportToJson(const BenchReport& r) {
  std::ostringstream o;
  const BenchConfig& c = r.config;
  o << "{\n  \"workload\": " << JsonString(r.workload)
    << ",\n  \"flops_per_call\": " << Num(r.flops_per_call, 0)
    << ",\n  \"interrupted\": " << (r.interrupted ? "true" : "false")
    << ",\n  \"config\": {\"target\": " << JsonString(c.target) << ", \"op\": " << JsonString(c.op)
    << ", \"model\": " << JsonString(c.model) << ", \"batch\": " << c.batch
    << ", \"seq_q\": " << c.seq_q << ", \"seq_k\": " << c.seq_k << ", \"dim\": " << c.dim
    << ", \"heads\": " << c.heads << ", \"causal\": " << (c.causal ? "true" : "false")
    << ", \"encoding\": " << JsonString(c.encoding == Encoding::kValues ? "values" : "raw")
    << ", \"connections\": " << c.connections << ", \"requests\": " << c.requests
    << ", \"duration_s\": " << Num(c.duration_s) << ", \"rps\": " << Num(c.rps)
    << ", \"warmup_s\": " << Num(c.warmup_s) << ", \"timeout_s\": " << Num(c.timeout_s)
    << ", \"retry\": " << (c.channel.retry_unavailable ? "true" : "false")
    << ", \"tls\": " << (c.channel.UsesTls() ? "true" : "false")
    << ", \"token\": " << (c.channel.token.empty() ? "false" : "true")
    << ", \"verify\": " << (c.verify ? "true" : "false") << "},\n  \"levels\": [";
  for (size_t i = 0; i < r.levels.size(); ++i) {
    const LevelReport& l = r.levels[i];
    o << (i ? "," : "") << "\n    {\"concurrency\": " << l.concurrency
      << ", \"seconds\": " << Num(l.seconds, 4) << ", \"count\": " << l.count
      << ", \"ok\": " << l.ok << ", \"errors\": {";
    bool first = true;
    for (const auto& [code, n] : l.errors) {
      o << (first ? "" : ", ") << JsonString(code) << ": " << n;
      first = false;
    }
    o << "}, \"first_error\": " << JsonString(l.first_error) << ", \"rps\": " << Num(l.rps, 3)
      << ", \"gflops\": " << Num(l.gflops, 4) << ", \"latency_ms\": {\"min\": " << Num(l.min_ms, 4)
      << ", \"mean\": " << Num(l.mean_ms, 4) << ", \"p50\": " << Num(l.p50_ms, 4)
      << ", \"p90\": " << Num(l.p90_ms, 4) << ", \"p95\": " << Num(l.p95_ms, 4)
      << ", \"p99\": " << Num(l.p99_ms, 4) << ", \"max\": " << Num(l.max_ms, 4)
      << "}, \"histogram\": [";
    for (size_t j = 0; j < l.histogram.size(); ++j) {
      o << (j ? ", " : "") << "{\"le_ms\": " << Num(l.histogram[j].first, 4)
        << ", \"count\": " << l.histogram[j].second << "}";
    }
    o << "], \"server\": {\"queue_ms\": " << Num(l.server_queue_ms, 4)
      << ", \"compute_ms\": " << Num(l.server_compute_ms, 4)
      << "}, \"verify\": {\"checked\": " << l.verified << ", \"mismatches\": " << l.mismatches
      << "}}";
  }
  o << "\n  ]\n}\n";
  return o.str();
}

}  // namespace attn::client
