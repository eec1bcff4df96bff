// attention-client session create|extend|info|fork|truncate|delete|list,
// and bench --op decode (bench/decode/decode_bench.h).
#include <cstdio>
#include <fstream>

#include "bench/decode/decode_bench.h"
#include "call_spec.h"
#include "cli/client_options.h"
#include "cli/commands.h"
#include "cli/variant_flags.h"
#include "host_array.h"
#include "request_builder.h"
#include "session_client.h"
#include "wire/cache_formats.h"

namespace attn::client {
namespace {

namespace v1 = attention::v1;

StatusOr<v1::DataType> CacheDtype(const CommandLine& cl, const std::string& fallback) {
  auto name = cl.Choice("--cache-dtype", {"float32", "bfloat16", "float16"}, fallback);
  if (!name.ok()) return name.status();
  return *name == "bfloat16"  ? v1::DATA_TYPE_BFLOAT16
         : *name == "float16" ? v1::DATA_TYPE_FLOAT16
                              : v1::DATA_TYPE_FLOAT32;
}

// --key-format or --value-format as the wire's CacheFormat.
StatusOr<v1::CacheFormat> CacheFormatFlag(const CommandLine& cl, const char* flag) {
  auto name = cl.Choice(flag, {"unquantized", "int8", "fp8_e4m3", "int4"}, "unquantized");
  if (!name.ok()) return name.status();
  v1::CacheFormat f = v1::CACHE_FORMAT_UNSPECIFIED;
  wire::CacheFormatByName(*name, &f);  // one of its names: Choice checked
  return f;
}

// A side's format as `session info` prints it: the cache's type when unquantized.
std::string FormatName(int f, int dtype) {
  return f == v1::CACHE_FORMAT_UNSPECIFIED ? wire::CacheDtypeName(dtype) : wire::CacheFormatName(f);
}

void PrintInfo(const v1::SessionInfo& i) {
  std::string tokens;
  for (int l = 0; l < i.layer_tokens_size(); ++l) {
    tokens += (l ? "," : "") + std::to_string(i.layer_tokens(l));
  }
  std::printf(
      "%-24s layers=%d kv_heads=%d head_dim=%d value_dim=%d cache=%s keys=%s values=%s "
      "max_tokens=%lld tokens=[%s] bytes=%lld owner=%s\n",
      i.session_id().c_str(), i.num_layers(), i.num_kv_heads(), i.head_dim(), i.value_dim(),
      wire::CacheDtypeName(i.cache_dtype()), FormatName(i.key_format(), i.cache_dtype()).c_str(),
      FormatName(i.value_format(), i.cache_dtype()).c_str(), static_cast<long long>(i.max_tokens()),
      tokens.c_str(), static_cast<long long>(i.cache_bytes()),
      i.owner().empty() ? "-" : i.owner().c_str());
}

StatusOr<v1::CreateSessionRequest> CreateRequest(const CommandLine& cl) {
  v1::CreateSessionRequest r;
  r.set_session_id(cl.get("--session-id"));
  auto layers = cl.Int("--num-layers", 1, 1 << 20, 1);
  auto heads = cl.Int("--num-kv-heads", 1, 1 << 20, 1);
  auto d = cl.Int("--head-dim", 1, 1 << 20, 0);
  auto dv = cl.Int("--value-dim", 0, 1 << 20, 0);
  auto max_tokens = cl.Int("--max-tokens", 0, int64_t{1} << 40, 0);
  auto type = CacheDtype(cl, "float32");
  auto kf = CacheFormatFlag(cl, "--key-format");
  auto vf = CacheFormatFlag(cl, "--value-format");
  for (const Status& st : {layers.status(), heads.status(), d.status(), dv.status(),
                           max_tokens.status(), type.status(), kf.status(), vf.status()}) {
    if (!st.ok()) return st;
  }
  if (!cl.has("--head-dim"))
    return Status::InvalidArgument("--head-dim: required by session create");
  r.set_num_layers(static_cast<int32_t>(*layers));
  r.set_num_kv_heads(static_cast<int32_t>(*heads));
  r.set_head_dim(static_cast<int32_t>(*d));
  r.set_value_dim(static_cast<int32_t>(*dv));
  r.set_cache_dtype(*type);
  r.set_max_tokens(*max_tokens);
  r.set_key_format(*kf);
  r.set_value_format(*vf);
  return r;
}

// session extend: --query (and --key with --value) as [Hq, n, D] arrays.
StatusOr<v1::ExtendRequest> ExtendRequest(const CommandLine& cl) {
  v1::ExtendRequest req;
  auto layer = cl.Int("--layer", 0, 1 << 20, 0);
  if (!layer.ok()) return layer.status();
  req.set_layer(static_cast<int32_t>(*layer));
  req.set_causal(cl.has("--causal"));
  auto encoding = cl.Choice("--encoding", {"raw", "values"}, "raw");
  auto dtype = cl.Choice("--dtype", kDtypeNames, "float32");
  if (!encoding.ok()) return encoding.status();
  if (!dtype.ok()) return dtype.status();
  const Encoding enc = *encoding == "values" ? Encoding::kValues : Encoding::kData;
  v1::SessionStep* step = req.add_steps();
  step->set_session_id(cl.get("--session-id"));
  for (const auto& [flag, slot] :
       {std::pair{"--query", step->mutable_query()}, std::pair{"--key", step->mutable_key()},
        std::pair{"--value", step->mutable_value()}}) {
    if (!cl.has(flag)) continue;
    auto arr = LoadArrayArg(cl.get(flag), std::string(flag).substr(2));
    if (!arr.ok()) return arr.status();
    *slot = ToWire(*arr, enc, DtypeByName(*dtype));
  }
  if (!cl.has("--key")) step->clear_key();
  if (!cl.has("--value")) step->clear_value();
  if (!cl.has("--query")) step->clear_query();
  auto variants = VariantsFromFlags(cl);
  if (!variants.ok()) return variants.status();
  if (variants->any()) SetAttentionOptions(*variants, enc, req.mutable_options());
  if (cl.has("--scale")) {
    const std::string v = cl.get("--scale");
    char* end = nullptr;
    const float x = std::strtof(v.c_str(), &end);
    if (v.empty() || *end != '\0')
      return Status::InvalidArgument("--scale: expected a number, got '" + v + "'");
    req.set_scale(x);
  }
  return req;
}

// From bench's flags (--concurrency, --sessions, --prefill, --step-tokens,
// --num-layers, --hold-length, --num-heads, --num-kv-heads, --dim,
// --cache-dtype, --dtype, --duration, --requests, --warmup, --verify,
// --seed, --json, --html); the connection's are the caller's.
StatusOr<DecodeBenchConfig> DecodeBenchConfigFromFlags(const CommandLine& cl) {
  DecodeBenchConfig c;
  struct IntFlag {
    const char* name;
    int64_t lo, hi, *out;
  };
  for (const IntFlag& f :
       {IntFlag{"--sessions", 1, 4096, &c.sessions},
        IntFlag{"--prefill", 0, int64_t{1} << 24, &c.prefill},
        IntFlag{"--step-tokens", 1, 1 << 16, &c.step_tokens},
        IntFlag{"--num-layers", 1, 4096, &c.layers}, IntFlag{"--num-kv-heads", 1, 4096, &c.hkv},
        IntFlag{"--dim", 1, 65536, &c.d}, IntFlag{"--requests", 0, int64_t{1} << 40, &c.requests},
        IntFlag{"--concurrency", 1, 1024, &c.concurrency}}) {
    auto x = cl.Int(f.name, f.lo, f.hi, *f.out);
    if (!x.ok()) return x.status();
    *f.out = *x;
  }
  auto hq = cl.Int("--num-heads", 1, 1 << 16, 4 * c.hkv);
  if (!hq.ok()) return hq.status();
  c.hq = *hq;
  auto seed = cl.Int("--seed", 0, int64_t{1} << 31, 0);
  if (!seed.ok()) return seed.status();
  c.seed = static_cast<uint32_t>(*seed);
  auto type = cl.Choice("--cache-dtype", {"float32", "bfloat16", "float16"}, "bfloat16");
  if (!type.ok()) return type.status();
  c.cache_dtype = *type == "float32"   ? v1::DATA_TYPE_FLOAT32
                  : *type == "float16" ? v1::DATA_TYPE_FLOAT16
                                       : v1::DATA_TYPE_BFLOAT16;
  auto kf = CacheFormatFlag(cl, "--key-format");
  auto vf = CacheFormatFlag(cl, "--value-format");
  if (!kf.ok()) return kf.status();
  if (!vf.ok()) return vf.status();
  c.key_format = *kf, c.value_format = *vf;
  if (c.key_format == v1::CACHE_FORMAT_INT4 && cl.has("--verify")) {
    return Status::InvalidArgument(
        "--verify: int4 keys are quantized per channel over blocks of tokens, which the "
        "verifier does not model; run --key-format int4 without --verify");
  }
  auto dtype = cl.Choice("--dtype", kDtypeNames, "float32");
  if (!dtype.ok()) return dtype.status();
  c.wire = DtypeByName(*dtype);
  auto duration = cl.Seconds("--duration", 10);
  auto warmup = cl.Seconds("--warmup", 1);
  if (!duration.ok()) return duration.status();
  if (!warmup.ok()) return warmup.status();
  c.duration_s = *duration, c.warmup_s = *warmup;
  c.verify = cl.has("--verify");
  c.hold_length = cl.has("--hold-length");
  c.json_path = cl.get("--json");
  c.html_path = cl.get("--html");
  return c;
}

}  // namespace

int RunSession(const CommandLine& cl) {
  if (cl.subcommand.empty()) {
    return Fail("session: expected create, extend, info, fork, truncate, delete or list");
  }
  auto options = ClientOptionsFromFlags(cl);
  if (!options.ok()) return Fail(options.status().message());
  auto channel = OpenChannel(options->target, options->channel);
  if (!channel.ok()) return Fail(channel.status().message());
  SessionClient client(*channel);
  const auto timeout = options->timeout();
  const std::string& sub = cl.subcommand;
  const std::string id = cl.get("--session-id");
  if (sub != "create" && sub != "list" && id.empty()) {
    return Fail("--session-id: required by session " + sub);
  }
  auto failed = [](const Status& st) { return Fail("error: " + st.ToString(), 1); };
  StatusOr<v1::SessionInfo> info = Status::Internal("unset");
  if (sub == "create") {
    auto req = CreateRequest(cl);
    if (!req.ok()) return Fail(req.status().message());
    // Named here when --session-id is not given: the create call then
    // carries the header a balancer hashes, as every later call does.
    if (req->session_id().empty()) req->set_session_id(NewSessionId());
    info = client.Create(*req, timeout);
  } else if (sub == "info") {
    info = client.Get(id, timeout);
  } else if (sub == "fork") {
    info = client.Fork(id, ChildSessionId(id, cl.get("--new-session-id")), timeout);
  } else if (sub == "truncate") {
    if (!cl.has("--tokens")) return Fail("--tokens: required by session truncate");
    auto tokens = cl.Int("--tokens", INT64_MIN, INT64_MAX, 0);
    if (!tokens.ok()) return Fail(tokens.status().message());
    info = client.Truncate(id, *tokens, timeout);
  } else if (sub == "delete") {
    info = client.Delete(id, timeout);
  } else if (sub == "list") {
    auto list = client.List(timeout);
    if (!list.ok()) return failed(list.status());
    std::printf("%d sessions; yours %lld of %lld bytes used; pool %lld of %lld bytes used\n",
                list->sessions_size(), static_cast<long long>(list->owner_bytes_used()),
                static_cast<long long>(list->owner_bytes_limit()),
                static_cast<long long>(list->cache_bytes_used()),
                static_cast<long long>(list->cache_bytes_limit()));
    for (const auto& s : list->sessions()) PrintInfo(s);
    return 0;
  } else {  // extend
    auto req = ExtendRequest(cl);
    if (!req.ok()) return Fail(req.status().message());
    auto resp = client.Extend(*req, timeout);
    if (!resp.ok()) return failed(resp.status());
    return Report(resp->results(0), cl);
  }
  if (!info.ok()) return failed(info.status());
  PrintInfo(*info);
  return 0;
}

int RunDecodeBench(const CommandLine& cl, const std::atomic<bool>* interrupt) {
  auto options = ClientOptionsFromFlags(cl);
  if (!options.ok()) return Fail(options.status().message());
  auto config = DecodeBenchConfigFromFlags(cl);
  if (!config.ok()) return Fail(config.status().message());
  config->target = options->target;
  config->channel = options->channel;
  config->timeout = options->timeout();
  auto report = RunDecodeBench(*config, interrupt);
  if (!report.ok()) return Fail("error: " + report.status().ToString(), 1);
  std::fputs(DecodeReportText(*report).c_str(), stdout);
  for (const auto& [path, text] : {std::pair{config->json_path, DecodeReportJson(*report)},
                                   std::pair{config->html_path, DecodeReportHtml(*report)}}) {
    if (path.empty()) continue;
    std::ofstream out(path);
    out << text;
    if (!out) return Fail("cannot write " + path, 1);
  }
  return report->errors > 0 || report->mismatches > 0 ? 1 : 0;
}

}  // namespace attn::client
