#include "bench_config.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "client_options.h"

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
      !Set([&] { return cl.Int("--seed", 0, int64_t{1} << 40, 0); }, &c->seed, &st)) {
    return st;
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
  if (c->seq_k == 0) c->seq_k = c->seq_q;
  return Status::Ok();
}

Status ReadLoad(const CommandLine& cl, BenchConfig* c) {
  if (cl.has("--concurrency")) {
    c->concurrency.clear();
    std::stringstream list(cl.get("--concurrency"));
    for (std::string item; std::getline(list, item, ',');) {
      auto x = ParseIntValue("--concurrency", item, 1, 100000);
      if (!x.ok()) return x.status();
      c->concurrency.push_back(static_cast<int>(*x));
    }
    if (c->concurrency.empty()) return Status::InvalidArgument("--concurrency: empty list");
  }
  Status st;
  if (!Set([&] { return cl.Int("--connections", 1, 1024, c->connections); }, &c->connections,
           &st) ||
      !Set([&] { return cl.Int("--requests", 1, int64_t{1} << 40, c->requests); }, &c->requests,
           &st) ||
      !Set([&] { return cl.Seconds("--duration", c->duration_s); }, &c->duration_s, &st) ||
      !Set([&] { return cl.Seconds("--warmup", c->warmup_s); }, &c->warmup_s, &st)) {
    return st;
  }
  if (cl.has("--duration") && c->duration_s <= 0) {
    return Status::InvalidArgument("--duration: must be positive");
  }
  if (cl.has("--requests") && cl.has("--duration")) {
    return Status::InvalidArgument("--requests and --duration: give one, not both");
  }
  if (cl.has("--rps")) {
    const std::string v = cl.get("--rps");
    char* end = nullptr;
    c->rps = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !(c->rps > 0) || !std::isfinite(c->rps)) {
      return Status::InvalidArgument("--rps: expected a positive rate, got '" + v + "'");
    }
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
  c.verify = cl.has("--verify");
  c.progress = isatty(2) != 0 && !cl.has("--no-progress");
  if (c.verify && c.op == "health") {
    return Status::InvalidArgument("--verify: nothing to verify for --op health");
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
