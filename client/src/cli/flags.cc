#include "cli/flags.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

namespace attn::client {
namespace {

// Flags renamed when the two parsers became one: a hint, not an alias.
const std::map<std::string, std::string> kRenamed = {
    {"--timeout-ms", "--timeout (e.g. --timeout 500ms)"},
    {"--heads", "--num-heads"},
};

const FlagSpec* Find(const std::string& name) {
  for (const FlagSpec& f : FlagTable()) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

bool AppliesTo(const FlagSpec& f, const std::string& command) {
  if (std::string(f.commands) == "*") return true;
  std::istringstream words(f.commands);
  for (std::string w; words >> w;) {
    if (w == command) return true;
  }
  return false;
}

bool IsCommand(const std::string& word) {
  for (const auto& c : Commands()) {
    if (c == word) return true;
  }
  return false;
}

bool IsSessionCommand(const std::string& word) {
  for (const char* c : {"create", "extend", "info", "fork", "truncate", "delete", "list"}) {
    if (word == c) return true;
  }
  return false;
}

}  // namespace

const std::vector<std::string>& Commands() {
  static const std::vector<std::string> kCommands = {"health", "models", "attention", "cross",
                                                     "mha",    "bench",  "session"};
  return kCommands;
}

// clang-format off
const std::vector<FlagSpec>& FlagTable() {
  static const std::vector<FlagSpec> kFlags = {
    // Every command.
    {"--target", "HOST:PORT", "*", "server (default localhost:50051)"},
    {"--timeout", "DURATION", "*", "per-call deadline, e.g. 500ms, 30s, 2m (default 30s)"},
    {"--max-message-mb", "N", "*", "largest message, both directions (default 64)"},
    {"--tls", nullptr, "*", "TLS, trusting the system's CAs"},
    {"--tls-ca", "FILE", "*", "TLS, trusting this PEM CA bundle"},
    {"--tls-cert", "FILE", "*", "a client certificate (mutual TLS), with --tls-key"},
    {"--tls-key", "FILE", "*", "the client certificate's key"},
    {"--token-file", "FILE", "*", "send 'authorization: Bearer <token>' (its first token); or set ATTN_TOKEN"},
    {"--retry", nullptr, "*", "retry calls that fail UNAVAILABLE (behind a balancer)"},
    // health
    {"--service", "NAME", "health", "the service to check (default: the whole server)"},
    // The attention calls, one call or a load.
    {"--model", "NAME", "attention cross mha bench", "server-side weights"},
    {"--num-heads", "N", "mha bench", "heads (mha: taken from the model when 0; bench: inline shapes, default 1)"},
    {"--causal", nullptr, "attention cross mha bench session", "query i never sees key j > i"},
    {"--encoding", "raw|values", "attention cross mha bench session", "how tensors travel: raw bytes or repeated float (default raw)"},
    {"--protocol", "native|oip", "attention cross mha bench", "attention.v1, or the Open Inference Protocol's ModelInfer (default native)"},
    {"--dtype", "float32|float16|bfloat16", "attention cross mha bench session", "the float tensors' wire type, both ways (half types as raw bytes; default float32)"},
    {"--seed", "N", "attention cross mha bench", "for the random inputs (default 0)"},
    // One call.
    {"--query", "ARR", "attention mha session", "a JSON array, or a .npy file"},
    {"--key", "ARR", "attention mha session", "(default: the query)"},
    {"--value", "ARR", "attention mha session", "(default: the key)"},
    {"--decoder", "ARR", "cross", "the queries' side"},
    {"--encoder", "ARR", "cross", "the keys' and values' side"},
    {"--random", "B,L", "attention cross mha", "random inputs sized from --model (B,L,D without a model)"},
    {"--key-padding-mask", "ARR", "attention cross mha", "bool [B, Lk], true = ignore that key"},
    {"--attn-bias", "ARR", "attention cross mha", "float, added to the scores"},
    {"--scale", "F", "attention cross session", "score scale (default 1/sqrt(D))"},
    {"--return-weights", nullptr, "attention cross mha", "also print (or write) the attention weights"},
    {"--per-head-weights", nullptr, "mha", "weights per head instead of averaged"},
    {"--output", "FILE.npy", "attention cross mha session", "write the output instead of printing it"},
    {"--weights-output", "FILE.npy", "attention cross mha", "write the weights instead of printing them"},
    {"--precision", "N", "attention cross mha session", "digits printed (default 4)"},
    // The attention variants (attention.v1's AttentionOptions; OIP's parameters).
    {"--causal-alignment", "top_left|bottom_right", "attention cross mha bench", "where query i sits among the keys for --causal and windows: i, or i + Lk - Lq (default top_left)"},
    {"--window-left", "N", "attention cross mha bench session", "sliding window: query i sees keys j >= p_i - N"},
    {"--window-right", "N", "attention cross mha bench session", "sliding window: query i sees keys j <= p_i + N"},
    {"--softcap", "F", "attention cross mha bench session", "scores become F * tanh(s / F) (F > 0)"},
    {"--alibi-slopes", "ARR", "attention cross mha bench session", "ALiBi slopes, float [H] or [B, H]"},
    {"--sink-logits", "ARR", "attention cross mha bench session", "attention sinks: one logit per head, float [H]"},
    {"--return-lse", nullptr, "attention cross mha bench session", "also return (print or write) the log-sum-exp of every row"},
    {"--lse-output", "FILE.npy", "attention cross mha session", "write the lse instead of printing it"},
    {"--compute-precision", "float32|bfloat16", "attention cross mha bench session", "the matmuls' arithmetic the call permits (default: the server's)"},
    {"--cu-seqlens-q", "0,N,...", "attention bench", "a packed batch: offsets of each sequence's queries (B + 1, rising from 0 to total_q); query [total_q, H, D]"},
    {"--cu-seqlens-k", "0,N,...", "attention bench", "a packed batch: offsets of each sequence's keys (B + 1, from 0 to total_k); key/value [total_k, Hkv, D]"},
    {"--num-kv-heads", "N", "mha bench session", "kv heads: mha's field (grouped-query projections); bench --op attention: the key's and value's heads"},
    // A load.
    // session create|extend|info|fork|truncate|delete|list: KV-cache sessions
    {"--session-id", "ID", "session", "the session ([A-Za-z0-9._:-]{1,128}; its family, which balancers hash, is the part before the first ':'; create: named s-<24 hex> when absent)"},
    {"--new-session-id", "ID", "session", "fork: the child's id, in the parent's family (family:...; default: the family and 16 random hex digits)"},
    {"--num-layers", "N", "session bench", "create, bench --op decode: layers of the cache; decode: a token is one step on each, in order (default 1)"},
    {"--head-dim", "D", "session", "create: the key width D"},
    {"--value-dim", "D", "session", "create: the value width (default: --head-dim)"},
    {"--cache-dtype", "float32|bfloat16|float16", "session bench", "how the cache stores K and V (default float32; bench --op decode: bfloat16)"},
    {"--key-format", "unquantized|int8|fp8_e4m3|int4", "session bench", "how the session stores its keys: as --cache-dtype (default) or quantized"},
    {"--value-format", "unquantized|int8|fp8_e4m3|int4", "session bench", "how the session stores its values: as --cache-dtype (default) or quantized"},
    {"--max-tokens", "N", "session", "create: tokens a layer may hold (default: the server's --max-session-tokens)"},
    {"--layer", "N", "session", "extend: the layer (default 0)"},
    {"--tokens", "N", "session", "truncate: keep the first N tokens of every layer"},
    {"--sessions", "N", "bench", "--op decode: sessions of each client, stepped together in one Extend (default 8)"},
    {"--hold-length", nullptr, "bench", "--op decode: truncate back to --prefill after each token, so that a run measures one context length"},
    {"--prefill", "P", "bench", "--op decode: tokens each session is filled with first (default 1024)"},
    {"--step-tokens", "N", "bench", "--op decode: query and key/value tokens per step and session (default 1)"},
    {"--op", "attention|cross|mha|health|decode", "bench", "what to call (default mha); decode: KV-cache sessions stepped through Extend (--sessions, --prefill, --step-tokens)"},
    {"--batch", "B", "bench", "input batch (default 1)"},
    {"--seq-q", "L", "bench", "query length (default 128)"},
    {"--seq-k", "L", "bench", "key length (default: --seq-q)"},
    {"--dim", "D", "bench", "inline width when no --model (default 64)"},
    {"--padded-keys", "N", "bench", "mask the last N keys of every batch row (key_padding_mask)"},
    {"--data", "FILE", "bench", "the inputs: a .npy (the query) or a .json file (an array: the query; or {\"query\", \"key\", \"value\"})"},
    {"--workload", "FILE", "bench", "a JSON or YAML list of weighted entries (op, model or shapes, masks, encoding, dtype, protocol, data); a row each"},
    {"--concurrency", "N[,N...]|A:B:S", "bench", "calls in flight; a list or range sweeps (default 1); --op decode: N independent clients, each its own connection and sessions"},
    {"--connections", "N", "bench", "channels (default 1)"},
    {"--requests", "N", "bench", "measured calls per level (instead of --duration)"},
    {"--duration", "DURATION", "bench", "per level (default 10s)"},
    {"--step-duration", "DURATION", "bench", "per step of a range (the same as --duration)"},
    {"--rps", "R[,R...]|A:B:S", "bench", "open loop at R calls/s, a level per rate; latency counts from the scheduled send"},
    {"--arrival", "constant|poisson", "bench", "open loop's arrivals (default constant)"},
    {"--latency-slo", "STAT=DURATION", "bench", "e.g. p99=50ms (p50, p90, p95, p99, mean): report the highest level that met it"},
    {"--stability", "PCT", "bench", "measure in --window windows until 3 agree within PCT % on req/s and p99"},
    {"--window", "DURATION", "bench", "a stability window (default 5s)"},
    {"--max-windows", "N", "bench", "stability windows at most per level (default 10)"},
    {"--metrics-url", "URL", "bench", "the server's /metrics, scraped before and after each level"},
    {"--warmup", "DURATION", "bench", "not counted (default 1s)"},
    {"--json", "FILE", "bench", "everything, machine-readable"},
    {"--csv", "FILE", "bench", "one row per level"},
    {"--html", "FILE", "bench", "a self-contained report with charts (inline SVG)"},
    {"--verify", nullptr, "bench", "check every 16th response against core, locally"},
    {"--no-progress", nullptr, "bench", "no live line on stderr"},
  };
  return kFlags;
}
// clang-format on

StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& args) {
  CommandLine cl;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i], value;
    if (name == "--help" || name == "-h") {
      cl.help = true;
      continue;
    }
    if (name.rfind("-", 0) != 0) {
      if (cl.command == "session" && cl.subcommand.empty()) {
        if (!IsSessionCommand(name)) {
          return Status::InvalidArgument("unknown session command '" + name +
                                         "': expected create, extend, info, fork, truncate, "
                                         "delete or list");
        }
        cl.subcommand = name;
        continue;
      }
      if (!cl.command.empty()) {
        return Status::InvalidArgument("unexpected argument '" + name + "' after command '" +
                                       cl.command + "' (flags take one value each)");
      }
      if (!IsCommand(name)) {
        return Status::InvalidArgument("unknown command '" + name + "' (see --help)");
      }
      cl.command = name;
      continue;
    }
    const auto eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) value = name.substr(eq + 1), name = name.substr(0, eq);
    const FlagSpec* spec = Find(name);
    if (spec == nullptr) {
      const auto renamed = kRenamed.find(name);
      return Status::InvalidArgument(
          "unknown " + (cl.command.empty() ? std::string() : cl.command + " ") + "flag '" + name +
          "'" + (renamed != kRenamed.end() ? " (now " + renamed->second + ")" : " (see --help)"));
    }
    if (spec->value == nullptr) {
      if (inline_value) return Status::InvalidArgument(name + ": takes no value");
      cl.switches.insert(name);
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= args.size()) return Status::InvalidArgument(name + ": missing value");
      value = args[++i];
    }
    cl.values[name] = value;
  }
  if (cl.command.empty()) {
    if (cl.help) return cl;
    return Status::InvalidArgument("missing command (see --help)");
  }
  std::vector<std::string> given;
  for (const auto& [name, value] : cl.values) given.push_back(name);
  given.insert(given.end(), cl.switches.begin(), cl.switches.end());
  for (const auto& name : given) {
    if (!AppliesTo(*Find(name), cl.command)) {
      return Status::InvalidArgument(name + ": not a flag of '" + cl.command + "' (see " +
                                     cl.command + " --help)");
    }
  }
  return cl;
}

bool CommandLine::has(const std::string& flag) const {
  return values.count(flag) > 0 || switches.count(flag) > 0;
}

std::string CommandLine::get(const std::string& flag, const std::string& fallback) const {
  const auto it = values.find(flag);
  return it == values.end() ? fallback : it->second;
}

StatusOr<int64_t> ParseIntValue(const std::string& flag, const std::string& value, int64_t lo,
                                int64_t hi) {
  char* end = nullptr;
  const long long x = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || x < lo || x > hi) {
    return Status::InvalidArgument(flag + ": expected an integer in [" + std::to_string(lo) + ", " +
                                   std::to_string(hi) + "], got '" + value + "'");
  }
  return static_cast<int64_t>(x);
}

StatusOr<double> ParseSecondsValue(const std::string& flag, const std::string& value) {
  double scale = 1;
  std::string num = value;
  if (value.size() > 2 && value.compare(value.size() - 2, 2, "ms") == 0) {
    scale = 1e-3, num = value.substr(0, value.size() - 2);
  } else if (!value.empty() && (value.back() == 's' || value.back() == 'm')) {
    scale = value.back() == 'm' ? 60 : 1, num = value.substr(0, value.size() - 1);
  }
  char* end = nullptr;
  const double x = std::strtod(num.c_str(), &end);
  if (num.empty() || *end != '\0' || !std::isfinite(x) || x < 0) {
    return Status::InvalidArgument(flag + ": expected a duration like 30s, 500ms or 2m, got '" +
                                   value + "'");
  }
  return x * scale;
}

StatusOr<int64_t> CommandLine::Int(const std::string& flag, int64_t lo, int64_t hi,
                                   int64_t fallback) const {
  if (!values.count(flag)) return fallback;
  return ParseIntValue(flag, values.at(flag), lo, hi);
}

StatusOr<double> CommandLine::Seconds(const std::string& flag, double fallback) const {
  if (!values.count(flag)) return fallback;
  return ParseSecondsValue(flag, values.at(flag));
}

StatusOr<std::string> CommandLine::Choice(const std::string& flag,
                                          const std::vector<std::string>& choices,
                                          const std::string& fallback) const {
  if (!values.count(flag)) return fallback;
  const std::string& v = values.at(flag);
  std::string list;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (v == choices[i]) return v;
    list += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  }
  return Status::InvalidArgument(flag + ": expected " + list + ", got '" + v + "'");
}

std::string Usage(const std::string& command) {
  std::ostringstream o;
  auto flag_lines = [&](bool common) {
    for (const FlagSpec& f : FlagTable()) {
      const bool is_common = std::string(f.commands) == "*";
      if (is_common != common || (!common && !AppliesTo(f, command))) continue;
      std::string left = std::string("  ") + f.name + (f.value ? std::string(" ") + f.value : "");
      if (left.size() < 30) left.resize(30, ' ');
      o << left << " " << f.help << "\n";
    }
  };
  if (command.empty()) {
    o << "usage: attention-client COMMAND [flags]   (flags may come before or after COMMAND)\n\n"
         "commands:\n"
         "  health       grpc.health.v1 Check; exit 0 when SERVING\n"
         "  models       list the server's models\n"
         "  attention    scaled dot-product attention (query alone: self-attention)\n"
         "  cross        cross-attention: --decoder and --encoder, with --model\n"
         "  mha          multi-head attention (nn.MultiheadAttention), with --model\n"
         "  bench        load test: closed or open loop, a concurrency sweep, JSON/CSV\n"
         "  session      KV-cache sessions: create, extend, info, fork, truncate, delete, list\n\n"
         "inputs (ARR) are a JSON array like '[[1,0],[0,1]]' or a .npy file path.\n"
         "attention-client COMMAND --help lists a command's own flags.\n\n"
         "common flags:\n";
    flag_lines(true);
    return o.str();
  }
  if (command == "session") {
    o << "usage: attention-client session create|extend|info|fork|truncate|delete|list [flags]\n\n"
         "  create    a session (--num-layers, --num-kv-heads, --head-dim, --cache-dtype, ...)\n"
         "  extend    append --key/--value to --layer and attend --query over it (bottom-right)\n"
         "  info      a session's layers, tokens and bytes\n"
         "  fork      a copy-on-write child (--new-session-id)\n"
         "  truncate  keep the first --tokens of every layer\n"
         "  delete    free a session\n"
         "  list      every session, and the pool's bytes\n\n";
  }
  o << "usage: attention-client " << command << " [flags]\n\n" << command << " flags:\n";
  flag_lines(false);
  o << "\ncommon flags:\n";
  flag_lines(true);
  return o.str();
}

}  // namespace attn::client
