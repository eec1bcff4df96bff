#include "cli/commands.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "attention_client.h"
#include "bench/bench.h"
#include "cli/bench_flags.h"
#include "cli/client_options.h"
#include "cli/variant_flags.h"
#include "host_array.h"
#include "request_builder.h"
#include "wire/status_mapping.h"

namespace attn::client {
namespace {

// The channel and client for the common flags, or the exit code of a failure.
struct Session {
  ClientOptions options;
  std::unique_ptr<AttentionClient> client;
};

int OpenSession(const CommandLine& cl, Session* s) {
  auto options = ClientOptionsFromFlags(cl);
  if (!options.ok()) return Fail(options.status().message());
  s->options = *options;
  auto channel = OpenChannel(s->options.target, s->options.channel);
  if (!channel.ok()) return Fail(channel.status().message());
  s->client = std::make_unique<AttentionClient>(*channel);
  return 0;
}

// The sizes for --random: B,L with --model (widths from the server), or
// B,L,D without.
StatusOr<InputSizes> RandomSizes(const CommandLine& cl, AttentionClient& client,
                                 std::chrono::milliseconds timeout) {
  std::vector<int64_t> dims;
  const std::string arg = cl.get("--random");
  for (std::string rest = arg; !rest.empty();) {
    const auto comma = rest.find(',');
    auto x = ParseIntValue("--random", rest.substr(0, comma), 1, 1 << 20);
    if (!x.ok()) {
      return Status::InvalidArgument("--random: expected B,L (or B,L,D without --model), got '" +
                                     arg + "'");
    }
    dims.push_back(*x);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
  }
  InputSizes z;
  if (cl.has("--model")) {
    if (dims.size() != 2) return Status::InvalidArgument("--random: expected B,L with --model");
    auto info = client.FindModel(cl.get("--model"), timeout);
    if (!info.ok()) return info.status();
    z.embed_dim = info->embed_dim(), z.kdim = info->kdim(), z.vdim = info->vdim();
  } else {
    if (dims.size() != 3)
      return Status::InvalidArgument("--random: expected B,L,D without --model");
    z.embed_dim = z.kdim = z.vdim = dims[2];
  }
  z.batch = dims[0], z.seq_q = z.seq_k = dims[1];
  return z;
}

// The call's spec from its flags: inputs given, or random ones.
StatusOr<CallSpec> SpecFromFlags(const CommandLine& cl, Session& s) {
  CallSpec spec;
  spec.op = cl.command;
  spec.model = cl.get("--model");
  auto encoding = cl.Choice("--encoding", {"raw", "values"}, "raw");
  if (!encoding.ok()) return encoding.status();
  spec.encoding = *encoding == "values" ? Encoding::kValues : Encoding::kData;
  auto dtype = cl.Choice("--dtype", kDtypeNames, "float32");
  if (!dtype.ok()) return dtype.status();
  spec.dtype = DtypeByName(*dtype);
  auto protocol = cl.Choice("--protocol", {"native", "oip"}, "native");
  if (!protocol.ok()) return protocol.status();
  spec.oip = *protocol == "oip";
  spec.causal = cl.has("--causal");
  spec.return_weights = cl.has("--return-weights");
  spec.per_head_weights = cl.has("--per-head-weights");
  auto heads = cl.Int("--num-heads", 0, 1 << 20, 0);
  if (!heads.ok()) return heads.status();
  spec.num_heads = *heads;
  auto variants = VariantsFromFlags(cl);
  if (!variants.ok()) return variants.status();
  spec.variants = std::move(*variants);
  if (cl.has("--random")) {
    auto seed = cl.Int("--seed", 0, int64_t{1} << 40, 0);
    if (!seed.ok()) return seed.status();
    auto sizes = RandomSizes(cl, *s.client, s.options.timeout());
    if (!sizes.ok()) return sizes.status();
    std::mt19937 rng(static_cast<unsigned>(*seed));
    FillRandomInputs(*sizes, rng, &spec);
  }
  std::map<std::string, HostArray> given;
  for (const char* flag : {"--query", "--key", "--value", "--decoder", "--encoder",
                           "--key-padding-mask", "--attn-bias"}) {
    if (!cl.has(flag)) continue;
    auto arr = LoadArrayArg(cl.get(flag), std::string(flag).substr(2));
    if (!arr.ok()) return arr.status();
    given[flag] = std::move(*arr);
  }
  const bool cross = spec.op == "cross";
  if (given.count(cross ? "--decoder" : "--query"))
    spec.query = given[cross ? "--decoder" : "--query"];
  for (const auto& [flag, slot] :
       {std::pair{cross ? "--encoder" : "--key", &spec.key}, std::pair{"--value", &spec.value},
        std::pair{"--key-padding-mask", &spec.key_padding_mask},
        std::pair{"--attn-bias", &spec.attn_bias}}) {
    if (given.count(flag)) *slot = given[flag];
  }
  if (cl.has("--scale")) {
    const std::string v = cl.get("--scale");
    char* end = nullptr;
    spec.scale = std::strtof(v.c_str(), &end);
    if (v.empty() || *end != '\0') {
      return Status::InvalidArgument("--scale: expected a number, got '" + v + "'");
    }
  }
  return spec;
}

}  // namespace

int Report(const attention::v1::AttentionResponse& resp, const CommandLine& cl) {
  auto precision = cl.Int("--precision", 0, 12, 4);
  if (!precision.ok()) return Fail(precision.status().message());
  for (const auto& [name, tensor, file_flag] :
       {std::tuple{"output", &resp.output(), "--output"},
        std::tuple{"weights", &resp.weights(), "--weights-output"},
        std::tuple{"lse", &resp.lse(), "--lse-output"}}) {
    if (std::string(name) == "weights" && !resp.has_weights()) continue;
    if (std::string(name) == "lse" && !resp.has_lse()) continue;
    auto arr = FromWire(*tensor, name);
    if (!arr.ok()) return Fail("bad response: " + arr.status().message(), 1);
    if (cl.has(file_flag)) {
      auto w = WriteNpy(cl.get(file_flag), *arr);
      if (!w.ok()) return Fail(w.message(), 1);
      std::printf("%s %s written to %s\n", name, ShapeToString(arr->shape).c_str(),
                  cl.get(file_flag).c_str());
    } else {
      std::printf("%s %s:\n%s\n", name, ShapeToString(arr->shape).c_str(),
                  FormatArray(*arr, static_cast<int>(*precision)).c_str());
    }
  }
  return 0;
}

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "attention-client: %s\n", message.c_str());
  return code;
}

int RunHealth(const CommandLine& cl) {
  Session s;
  if (int rc = OpenSession(cl, &s)) return rc;
  std::string status;
  auto st = s.client->Health(cl.get("--service"), &status, s.options.timeout());
  if (!st.ok()) return Fail("health check failed: " + st.error_message(), 1);
  std::printf("%s\n", status.c_str());
  return status == "SERVING" ? 0 : 1;
}

int RunModels(const CommandLine& cl) {
  Session s;
  if (int rc = OpenSession(cl, &s)) return rc;
  attention::v1::ListModelsResponse resp;
  auto st = s.client->ListModels(&resp, s.options.timeout());
  if (!st.ok()) return Fail("error: " + st.error_message(), 1);
  std::printf("%-28s %-22s %9s %9s %12s %6s %6s\n", "NAME", "KIND", "EMBED_DIM", "NUM_HEADS",
              "NUM_KV_HEADS", "KDIM", "VDIM");
  for (const auto& m : resp.models()) {
    std::printf("%-28s %-22s %9lld %9lld %12lld %6lld %6lld\n", m.name().c_str(), m.kind().c_str(),
                static_cast<long long>(m.embed_dim()), static_cast<long long>(m.num_heads()),
                static_cast<long long>(m.num_kv_heads()), static_cast<long long>(m.kdim()),
                static_cast<long long>(m.vdim()));
  }
  return 0;
}

int RunCall(const CommandLine& cl) {
  Session s;
  if (int rc = OpenSession(cl, &s)) return rc;
  auto spec = SpecFromFlags(cl, s);
  if (!spec.ok()) {
    // A model the server lacks, or an unreachable server, is the call failing.
    const bool bad_flag = spec.status().code() == StatusCode::kInvalidArgument;
    return Fail(bad_flag ? spec.status().message() : "error: " + spec.status().ToString(),
                bad_flag ? 2 : 1);
  }
  auto call = BuildCall(*spec);
  if (!call.ok()) return Fail(call.status().message());
  attention::v1::AttentionResponse resp;
  auto st = s.client->Call(*call, &resp, s.options.timeout());
  if (!st.ok()) return Fail("error: " + wire::FromGrpcStatus(st).ToString(), 1);
  return Report(resp, cl);
}

int RunBenchCommand(const CommandLine& cl, const std::atomic<bool>* interrupt) {
  auto config = BenchConfigFromFlags(cl);
  if (!config.ok()) return Fail(config.status().message());
  auto report = RunBench(*config, interrupt);
  if (!report.ok()) return Fail(report.status().message(), 1);
  std::fputs(ReportToText(*report).c_str(), stdout);
  for (const auto& [path, text] : {std::pair{config->json_path, ReportToJson(*report)},
                                   std::pair{config->csv_path, ReportToCsv(*report)},
                                   std::pair{config->html_path, ReportToHtml(*report)}}) {
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

}  // namespace attn::client
