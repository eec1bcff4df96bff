#include "cli/bench_flags.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "bench/workload_file.h"
#include "cli/client_options.h"
#include "cli/variant_flags.h"

namespace attn::client {
namespace {

// Reads a flag through `read` into `*out` when given; false on an error,
// which lands in *status.
template <typename T, typename Read>
bool Set(Read read, T* out, Status* status) {
  auto v = read();
  if (!v.ok()) {
    *status = v.status();
    return false;
  }
  *out = static_cast<T>(*v);
  return true;
}

Status ReadWorkload(const CommandLine& cl, BenchConfig* c) {
  Status st;
  std::string op;
  if (!Set(
          [&] {
            return cl.Choice("--op", {"attention", "cross", "mha", "health"}, c->op);
          },
          &op, &st)) {
    return st;
  }
  c->op = op;
  c->model = cl.get("--model");
  const int64_t kMaxDim = int64_t{1} << 24;
  if (!Set([&] { return cl.Int("--batch", 1, kMaxDim, c->batch); }, &c->batch, &st) ||
      !Set([&] { return cl.Int("--seq-q", 1, kMaxDim, c->seq_q); }, &c->seq_q, &st) ||
      !Set([&] { return cl.Int("--seq-k", 1, kMaxDim, c->seq_k); }, &c->seq_k, &st) ||
      !Set([&] { return cl.Int("--dim", 1, kMaxDim, c->dim); }, &c->dim, &st) ||
      !Set([&] { return cl.Int("--num-heads", 1, kMaxDim, c->heads); }, &c->heads, &st) ||
      !Set([&] { return cl.Int("--seed", 0, int64_t{1} << 40, 0); }, &c->seed, &st) ||
      !Set([&] { return cl.Int("--padded-keys", 0, kMaxDim, 0); }, &c->padded_keys, &st)) {
    return st;
  }
  if (cl.has("--data")) {
    c->data_path = cl.get("--data");
    if (c->data_path.empty()) return Status::InvalidArgument("--data: expected a file, got ''");
  }
  std::string encoding;
  if (!Set([&] { return cl.Choice("--encoding", {"raw", "values"}, "raw"); }, &encoding, &st)) {
    return st;
  }
  c->encoding = encoding == "values" ? Encoding::kValues : Encoding::kData;
  std::string dtype;
  if (!Set([&] { return cl.Choice("--dtype", kDtypeNames, "float32"); }, &dtype, &st)) return st;
  c->dtype = DtypeByName(dtype);
  std::string protocol;
  if (!Set([&] { return cl.Choice("--protocol", {"native", "oip"}, "native"); }, &protocol, &st)) {
    return st;
  }
  c->oip = protocol == "oip";
  c->causal = cl.has("--causal");
  auto variants = VariantsFromFlags(cl);
  if (!variants.ok()) return variants.status();
  c->variants = std::move(*variants);
  if (c->seq_k == 0) c->seq_k = c->seq_q;
  return Status::Ok();
}

std::string FormatNumber(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", x);
  return buf;
}

// A list "1,2,4" or a range "A:B:S" (A, A+S, ... up to B) of numbers in
// [lo, hi]; integers only when `integer`.
StatusOr<std::vector<double>> ParseLevels(const std::string& flag, const std::string& v, double lo,
                                          double hi, bool integer) {
  auto number = [&](const std::string& item) -> StatusOr<double> {
    char* end = nullptr;
    const double x = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !std::isfinite(x) || x < lo || x > hi ||
        (integer && x != std::floor(x))) {
      return Status::InvalidArgument(flag + ": expected " + (integer ? "an integer" : "a number") +
                                     " in [" + FormatNumber(lo) + ", " + FormatNumber(hi) +
                                     "], got '" + item + "'");
    }
    return x;
  };
  std::vector<std::string> parts;
  std::stringstream in(v);
  const char sep = v.find(':') != std::string::npos ? ':' : ',';
  for (std::string item; std::getline(in, item, sep);) parts.push_back(item);
  if (v.empty() || (sep == ':' && parts.size() != 3)) {
    return Status::InvalidArgument(
        flag + ": expected N, a list N,N,... or a range START:END:STEP, " + "got '" + v + "'");
  }
  std::vector<double> out;
  for (const auto& item : parts) {
    auto x = number(item);
    if (!x.ok()) return x.status();
    out.push_back(*x);
  }
  if (sep == ',') return out;
  const double start = out[0], end = out[1], step = out[2];
  if (!(step > 0) || end < start || (end - start) / step > 1000) {
    return Status::InvalidArgument(flag + ": a range START:END:STEP needs START <= END and a " +
                                   "positive STEP, at most 1000 steps; got '" + v + "'");
  }
  out.clear();
  for (int i = 0; start + i * step <= end * (1 + 1e-12); ++i) out.push_back(start + i * step);
  return out;
}

Status ReadSlo(const std::string& v, LatencySlo* slo) {
  const auto eq = v.find('=');
  const std::string stat = v.substr(0, eq);
  const std::vector<std::string> stats = {"p50", "p90", "p95", "p99", "mean"};
  if (eq == std::string::npos || std::find(stats.begin(), stats.end(), stat) == stats.end()) {
    return Status::InvalidArgument("--latency-slo: expected STAT=DURATION with STAT p50, p90, " +
                                   std::string("p95, p99 or mean, e.g. p99=50ms; got '") + v + "'");
  }
  auto s = ParseSecondsValue("--latency-slo", v.substr(eq + 1));
  if (!s.ok()) return s.status();
  if (!(*s > 0)) return Status::InvalidArgument("--latency-slo: the bound must be positive");
  slo->stat = stat, slo->ms = *s * 1e3;
  return Status::Ok();
}

Status ReadLoad(const CommandLine& cl, BenchConfig* c) {
  if (cl.has("--concurrency")) {
    auto levels = ParseLevels("--concurrency", cl.get("--concurrency"), 1, 100000, true);
    if (!levels.ok()) return levels.status();
    c->concurrency.assign(levels->begin(), levels->end());
  }
  Status st;
  if (!Set([&] { return cl.Int("--connections", 1, 1024, c->connections); }, &c->connections,
           &st) ||
      !Set([&] { return cl.Int("--requests", 1, int64_t{1} << 40, c->requests); }, &c->requests,
           &st) ||
      !Set([&] { return cl.Seconds("--duration", c->duration_s); }, &c->duration_s, &st) ||
      !Set([&] { return cl.Seconds("--step-duration", c->duration_s); }, &c->duration_s, &st) ||
      !Set([&] { return cl.Seconds("--warmup", c->warmup_s); }, &c->warmup_s, &st) ||
      !Set([&] { return cl.Seconds("--window", c->window_s); }, &c->window_s, &st) ||
      !Set([&] { return cl.Int("--max-windows", 3, 1000, c->max_windows); }, &c->max_windows,
           &st)) {
    return st;
  }
  for (const char* flag : {"--duration", "--step-duration", "--window"}) {
    if (cl.has(flag) && !(flag[2] == 'w' ? c->window_s > 0 : c->duration_s > 0)) {
      return Status::InvalidArgument(std::string(flag) + ": must be positive");
    }
  }
  if (cl.has("--duration") && cl.has("--step-duration")) {
    return Status::InvalidArgument("--duration and --step-duration: give one, not both");
  }
  if (cl.has("--requests") && (cl.has("--duration") || cl.has("--step-duration"))) {
    return Status::InvalidArgument("--requests and --duration: give one, not both");
  }
  if (cl.has("--rps")) {
    auto levels = ParseLevels("--rps", cl.get("--rps"), 1e-3, 1e7, false);
    if (!levels.ok()) return levels.status();
    c->rps = *levels;
    if (c->concurrency.size() > 1) {
      return Status::InvalidArgument(
          "--rps with a --concurrency list: in open loop --concurrency is one cap on the calls "
          "in flight; sweep the rate instead");
    }
    if (!cl.has("--concurrency")) c->concurrency = {kOpenLoopCap};
  }
  std::string arrival;
  if (!Set(
          [&] {
            return cl.Choice("--arrival", {"constant", "poisson"}, "constant");
          },
          &arrival, &st)) {
    return st;
  }
  c->arrival = arrival == "poisson" ? Arrival::kPoisson : Arrival::kConstant;
  if (cl.has("--arrival") && c->rps.empty()) {
    return Status::InvalidArgument("--arrival: only with --rps (open loop)");
  }
  if (cl.has("--latency-slo")) ATTN_RETURN_IF_ERROR(ReadSlo(cl.get("--latency-slo"), &c->slo));
  if (cl.has("--stability")) {
    auto p = ParseLevels("--stability", cl.get("--stability"), 0.1, 100, false);
    if (!p.ok()) return p.status();
    if (p->size() != 1) return Status::InvalidArgument("--stability: one percentage");
    c->stability_pct = p->front();
    if (cl.has("--requests")) {
      return Status::InvalidArgument("--stability and --requests: windows are timed");
    }
  }
  c->metrics_url = cl.get("--metrics-url");
  if (cl.has("--metrics-url") && c->metrics_url.rfind("http://", 0) != 0) {
    return Status::InvalidArgument("--metrics-url: expected http://HOST:PORT/metrics, got '" +
                                   c->metrics_url + "'");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<BenchConfig> BenchConfigFromFlags(const CommandLine& cl) {
  BenchConfig c;
  auto common = ClientOptionsFromFlags(cl);
  if (!common.ok()) return common.status();
  c.target = common->target;
  c.channel = common->channel;
  c.timeout_s = common->timeout_s;
  ATTN_RETURN_IF_ERROR(ReadWorkload(cl, &c));
  ATTN_RETURN_IF_ERROR(ReadLoad(cl, &c));
  c.json_path = cl.get("--json");
  c.csv_path = cl.get("--csv");
  c.html_path = cl.get("--html");
  c.verify = cl.has("--verify");
  c.progress = isatty(2) != 0 && !cl.has("--no-progress");
  if (c.verify && c.op == "health") {
    return Status::InvalidArgument("--verify: nothing to verify for --op health");
  }
  if (cl.has("--workload")) {
    auto mix = ReadWorkloadFile(cl.get("--workload"), c);
    if (!mix.ok()) return mix.status();
    c.mix = std::move(*mix);
  }
  return c;
}

StatusOr<BenchConfig> ParseBenchFlags(const std::vector<std::string>& args, bool* help) {
  std::vector<std::string> argv = {"bench"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto cl = ParseCommandLine(argv);
  if (!cl.ok()) return cl.status();
  *help = cl->help;
  if (cl->help) return BenchConfig();
  return BenchConfigFromFlags(*cl);
}

}  // namespace attn::client
