// attention-client: call an attention-server from the command line.
//
//   attention-client health [--service NAME]
//   attention-client models
//   attention-client attention --query '[[1,0],[0,1],[1,1],[1,1],[0.5,1]]'
//   attention-client cross --model demo-cross-attention --random 1,8
//   attention-client mha --model demo-mha --random 2,16 --return-weights
//
// Run with --help for every flag.
#include <absl/synchronization/mutex.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "attention_client.h"
#include "bench.h"
#include "host_array.h"

namespace {

using attn::client::Encoding;
using attn::client::HostArray;

const char* kUsage = R"(usage: attention-client COMMAND [flags]

commands:
  health       grpc.health.v1 Check; exit 0 when SERVING   [--service NAME]
  bench        load test (see attention-client bench --help)
  models       list the server's models
  attention    scaled dot-product attention (query alone: self-attention)
  cross        cross-attention: --decoder and --encoder, with --model
  mha          multi-head attention (nn.MultiheadAttention), with --model

common flags:
  --target HOST:PORT     server (default localhost:50051)
  --timeout-ms N         per-call deadline (default 30000)
  --max-message-mb N     largest message (default 64)
  --tls                  TLS, trusting the system's CAs
  --tls-ca FILE          TLS, trusting this PEM CA bundle
  --tls-cert FILE --tls-key FILE
                         a client certificate (mutual TLS)
  --token-file FILE      send 'authorization: Bearer <token>' (its first line);
                         or set ATTN_TOKEN

inputs (attention, cross, mha): a JSON array, or a .npy file path
  --query ARR  --key ARR  --value ARR      (attention, mha)
  --decoder ARR  --encoder ARR             (cross)
  --random B,L           random inputs sized from --model (B,L,D without a model)
  --seed N               for --random (default 0)
  --model NAME           server-side weights
  --num-heads N          (mha; taken from the model when 0)
  --causal               query i never sees key j > i
  --key-padding-mask ARR bool [B, Lk], true = ignore that key
  --attn-bias ARR        float, added to the scores
  --scale F              (attention, cross; default 1/sqrt(D))
  --return-weights       also print (or write) the attention weights
  --per-head-weights     (mha) weights per head instead of averaged
  --encoding data|values how tensors travel (default data; values: repeated float)
  --output FILE.npy      write the output instead of printing it
  --weights-output FILE.npy
  --precision N          digits printed (default 4)
)";

struct Args {
  std::string command;
  std::map<std::string, std::string> values;
  std::set<std::string> flags;
};

const std::set<std::string> kValueFlags = {
    "--target", "--timeout-ms", "--max-message-mb", "--service",          "--query",
    "--key",    "--value",      "--decoder",        "--encoder",          "--random",
    "--seed",   "--model",      "--num-heads",      "--key-padding-mask", "--attn-bias",
    "--scale",  "--encoding",   "--output",         "--weights-output",   "--precision",
    "--tls-ca", "--tls-cert",   "--tls-key",        "--token-file"};
const std::set<std::string> kBoolFlags = {"--causal", "--return-weights", "--per-head-weights",
                                          "--tls"};

int Fail(const std::string& msg, int code = 2) {
  std::fprintf(stderr, "attention-client: %s\n", msg.c_str());
  return code;
}

bool ParseArgs(int argc, char** argv, Args* a, std::string* error) {
  if (argc < 2) {
    *error = "missing command (see --help)";
    return false;
  }
  a->command = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string name = argv[i], value;
    const auto eq = name.find('=');
    const bool has_inline = eq != std::string::npos && name.rfind("--", 0) == 0;
    if (has_inline) value = name.substr(eq + 1), name = name.substr(0, eq);
    if (kBoolFlags.count(name)) {
      a->flags.insert(name);
    } else if (kValueFlags.count(name)) {
      if (!has_inline) {
        if (i + 1 >= argc) {
          *error = name + ": missing value";
          return false;
        }
        value = argv[++i];
      }
      a->values[name] = value;
    } else {
      *error = "unknown flag '" + name + "' (see --help)";
      return false;
    }
  }
  return true;
}

bool ParseInt(const std::string& s, long long lo, long long hi, long long* out) {
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

HostArray RandomArray(attn::Shape shape, std::mt19937& rng) {
  HostArray a;
  a.shape = std::move(shape);
  std::normal_distribution<float> d(0.0f, 1.0f);
  int64_t n = 1;
  for (int64_t x : a.shape) n *= x;
  a.values.resize(static_cast<size_t>(n));
  for (auto& v : a.values) v = d(rng);
  return a;
}

int Report(const grpc::Status& st, const attention::v1::AttentionResponse& resp, const Args& a) {
  if (!st.ok()) {
    return Fail(std::string("error: ") +
                    attn::StatusCodeName(static_cast<attn::StatusCode>(st.error_code())) + ": " +
                    st.error_message(),
                1);
  }
  long long precision = 4;
  if (a.values.count("--precision") && !ParseInt(a.values.at("--precision"), 0, 12, &precision)) {
    return Fail("--precision: expected 0..12");
  }
  for (const auto& [name, tensor, file_flag] :
       {std::tuple{"output", &resp.output(), "--output"},
        std::tuple{"weights", &resp.weights(), "--weights-output"}}) {
    if (std::string(name) == "weights" && !resp.has_weights()) continue;
    auto arr = attn::client::FromWire(*tensor, name);
    if (!arr.ok()) return Fail("bad response: " + arr.status().message(), 1);
    if (a.values.count(file_flag)) {
      auto w = attn::client::WriteNpy(a.values.at(file_flag), *arr);
      if (!w.ok()) return Fail(w.message(), 1);
      std::printf("%s %s written to %s\n", name, attn::ShapeToString(arr->shape).c_str(),
                  a.values.at(file_flag).c_str());
    } else {
      std::printf("%s %s:\n%s\n", name, attn::ShapeToString(arr->shape).c_str(),
                  attn::client::FormatArray(*arr, static_cast<int>(precision)).c_str());
    }
  }
  return 0;
}

}  // namespace

std::atomic<bool> g_interrupted{false};

extern "C" void OnInterrupt(int /*sig*/) { g_interrupted = true; }

// attention-client bench: exit 0 when every call succeeded (and verified),
// 1 when set-up failed or calls failed, 2 for bad flags.
int Bench(int argc, char** argv) {
  bool help = false;
  auto config =
      attn::client::ParseBenchFlags(std::vector<std::string>(argv + 2, argv + argc), &help);
  if (help) {
    std::fputs(attn::client::BenchUsage().c_str(), stdout);
    return 0;
  }
  if (!config.ok()) return Fail(config.status().message());
  struct sigaction sa = {};
  sa.sa_handler = OnInterrupt;
  sigaction(SIGINT, &sa, nullptr);  // Ctrl-C: stop, print the partial report
  auto report = attn::client::RunBench(*config, &g_interrupted);
  if (!report.ok()) return Fail(report.status().message(), 1);
  std::fputs(attn::client::ReportToText(*report).c_str(), stdout);
  for (const auto& [path, text] :
       {std::pair{config->json_path, attn::client::ReportToJson(*report)},
        std::pair{config->csv_path, attn::client::ReportToCsv(*report)}}) {
    if (path.empty()) continue;
    std::ofstream out(path);
    out << text;
    if (!out) return Fail("cannot write " + path, 1);
  }
  for (const auto& level : report->levels) {
    if (!level.errors.empty() || level.mismatches > 0) return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  // Debian builds Abseil without NDEBUG, so every absl::Mutex inside gRPC
  // runs deadlock detection (a lock-order graph update per lock): a few
  // percent of all CPU at high call rates. gRPC's locks are not ours to check.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (argc >= 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (argc >= 2 && std::string(argv[1]) == "bench") return Bench(argc, argv);
  Args a;
  std::string error;
  if (!ParseArgs(argc, argv, &a, &error)) return Fail(error);
  auto get = [&](const char* f, const std::string& def = "") {
    return a.values.count(f) ? a.values.at(f) : def;
  };
  long long timeout_ms = 30000, max_mb = 64, seed = 0;
  if (!ParseInt(get("--timeout-ms", "30000"), 1, 1LL << 40, &timeout_ms)) {
    return Fail("--timeout-ms: expected a positive integer, got '" + get("--timeout-ms") + "'");
  }
  if (!ParseInt(get("--max-message-mb", "64"), 1, 2047, &max_mb)) {
    return Fail("--max-message-mb: expected 1..2047, got '" + get("--max-message-mb") + "'");
  }
  if (!ParseInt(get("--seed", "0"), 0, 1LL << 40, &seed))
    return Fail("--seed: expected an integer");
  const std::string enc_name = get("--encoding", "data");
  if (enc_name != "data" && enc_name != "values" && enc_name != "raw") {
    return Fail("--encoding: expected data or values, got '" + enc_name + "'");
  }
  const Encoding enc = enc_name == "values" ? Encoding::kValues : Encoding::kData;
  const auto timeout = std::chrono::milliseconds(timeout_ms);
  attn::client::ChannelOptions channel_options;
  channel_options.max_message_mb = static_cast<int>(max_mb);
  channel_options.tls = a.flags.count("--tls") > 0;
  channel_options.tls_ca = get("--tls-ca");
  channel_options.tls_cert = get("--tls-cert");
  channel_options.tls_key = get("--tls-key");
  if (const char* token = std::getenv("ATTN_TOKEN")) channel_options.token = token;
  if (a.values.count("--token-file")) {
    auto token = attn::client::ReadTokenFile(get("--token-file"));
    if (!token.ok()) return Fail(token.status().message());
    channel_options.token = *token;
  }
  auto channel = attn::client::OpenChannel(get("--target", "localhost:50051"), channel_options);
  if (!channel.ok()) return Fail(channel.status().message());
  attn::client::AttentionClient client(*channel);

  if (a.command == "health") {
    std::string status;
    auto st = client.Health(get("--service"), &status, timeout);
    if (!st.ok()) return Fail("health check failed: " + st.error_message(), 1);
    std::printf("%s\n", status.c_str());
    return status == "SERVING" ? 0 : 1;
  }
  if (a.command == "models") {
    attention::v1::ListModelsResponse resp;
    auto st = client.ListModels(&resp, timeout);
    if (!st.ok()) return Fail("error: " + st.error_message(), 1);
    std::printf("%-28s %-22s %9s %9s %6s %6s\n", "NAME", "KIND", "EMBED_DIM", "NUM_HEADS", "KDIM",
                "VDIM");
    for (const auto& m : resp.models()) {
      std::printf("%-28s %-22s %9lld %9lld %6lld %6lld\n", m.name().c_str(), m.kind().c_str(),
                  static_cast<long long>(m.embed_dim()), static_cast<long long>(m.num_heads()),
                  static_cast<long long>(m.kdim()), static_cast<long long>(m.vdim()));
    }
    return 0;
  }
  if (a.command != "attention" && a.command != "cross" && a.command != "mha") {
    return Fail("unknown command '" + a.command + "' (see --help)");
  }

  // Inputs: explicit arrays, or random ones sized from the model.
  std::map<std::string, HostArray> in;
  const std::vector<std::string> names =
      a.command == "cross" ? std::vector<std::string>{"--decoder", "--encoder"}
                           : std::vector<std::string>{"--query", "--key", "--value"};
  for (const auto& n : names) {
    if (!a.values.count(n)) continue;
    auto arr = attn::client::LoadArrayArg(a.values.at(n), n.substr(2));
    if (!arr.ok()) return Fail(arr.status().message());
    in[n] = std::move(*arr);
  }
  if (a.values.count("--random")) {
    std::vector<int64_t> dims;
    for (std::string rest = get("--random"); !rest.empty();) {
      const auto comma = rest.find(',');
      long long x = 0;
      if (!ParseInt(rest.substr(0, comma), 1, 1 << 20, &x)) {
        return Fail("--random: expected B,L (or B,L,D without --model), got '" + get("--random") +
                    "'");
      }
      dims.push_back(x);
      rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    }
    int64_t e = 0, kdim = 0;
    if (a.values.count("--model")) {
      attention::v1::ListModelsResponse models;
      auto st = client.ListModels(&models, timeout);
      if (!st.ok()) return Fail("error: " + st.error_message(), 1);
      for (const auto& m : models.models()) {
        if (m.name() == get("--model")) e = m.embed_dim(), kdim = m.kdim();
      }
      if (e == 0) return Fail("--random: the server has no model '" + get("--model") + "'", 1);
      if (dims.size() != 2) return Fail("--random: expected B,L with --model");
    } else {
      if (dims.size() != 3) return Fail("--random: expected B,L,D without --model");
      e = kdim = dims[2];
    }
    std::mt19937 rng(static_cast<unsigned>(seed));
    const int64_t b = dims[0], l = dims[1];
    if (a.command == "cross") {
      in["--decoder"] = RandomArray({b, l, e}, rng);
      in["--encoder"] = RandomArray({b, l, kdim}, rng);
    } else {
      in["--query"] = RandomArray({b, l, e}, rng);
    }
  }
  std::map<std::string, attention::v1::Tensor> masks;
  for (const char* n : {"--key-padding-mask", "--attn-bias"}) {
    if (!a.values.count(n)) continue;
    auto arr = attn::client::LoadArrayArg(a.values.at(n), std::string(n).substr(2));
    if (!arr.ok()) return Fail(arr.status().message());
    if (std::string(n) == "--key-padding-mask") arr->is_bool = true;
    masks[n] = attn::client::ToWire(*arr, enc);
  }
  std::optional<float> scale;
  if (a.values.count("--scale")) {
    char* end = nullptr;
    const std::string s = get("--scale");
    scale = std::strtof(s.c_str(), &end);
    if (s.empty() || *end != '\0') return Fail("--scale: expected a number, got '" + s + "'");
  }
  // The fields every request shares.
  const auto shared = [&](auto* req) {
    req->set_model(get("--model"));
    req->set_causal(a.flags.count("--causal") > 0);
    req->set_return_weights(a.flags.count("--return-weights") > 0);
    if (masks.count("--key-padding-mask")) {
      *req->mutable_key_padding_mask() = masks["--key-padding-mask"];
    }
    if (masks.count("--attn-bias")) *req->mutable_attn_bias() = masks["--attn-bias"];
  };
  const auto query_key_value = [&](auto* req) {
    *req->mutable_query() = ToWire(in["--query"], enc);
    if (in.count("--key")) *req->mutable_key() = ToWire(in["--key"], enc);
    if (in.count("--value")) *req->mutable_value() = ToWire(in["--value"], enc);
  };
  attention::v1::AttentionResponse resp;

  if (a.command == "cross") {
    if (!in.count("--decoder") || !in.count("--encoder")) {
      return Fail("cross: --decoder and --encoder (or --random) are required");
    }
    attention::v1::CrossAttentionRequest req;
    *req.mutable_decoder() = ToWire(in["--decoder"], enc);
    *req.mutable_encoder() = ToWire(in["--encoder"], enc);
    shared(&req);
    if (scale) req.set_scale(*scale);
    return Report(client.CrossAttention(req, &resp, timeout), resp, a);
  }
  if (!in.count("--query")) return Fail(a.command + ": --query (or --random) is required");
  if (a.command == "attention") {
    attention::v1::AttentionRequest req;
    query_key_value(&req);
    shared(&req);
    if (scale) req.set_scale(*scale);
    return Report(client.Attention(req, &resp, timeout), resp, a);
  }
  long long heads = 0;
  if (!ParseInt(get("--num-heads", "0"), 0, 1 << 20, &heads)) {
    return Fail("--num-heads: expected a non-negative integer, got '" + get("--num-heads") + "'");
  }
  if (scale) return Fail("--scale: not a MultiHeadAttention field (scale is 1/sqrt(head_dim))");
  attention::v1::MultiHeadAttentionRequest req;
  query_key_value(&req);
  shared(&req);
  req.set_num_heads(static_cast<int32_t>(heads));
  req.set_per_head_weights(a.flags.count("--per-head-weights") > 0);
  return Report(client.MultiHeadAttention(req, &resp, timeout), resp, a);
}
