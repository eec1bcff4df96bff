// Units of the server and client layers: flag parsing, the compute
// scheduler, and the client's host-array conversions.
#include <grpcpp/support/status.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "attn/json.h"
#include "call/compute_scheduler.h"
#include "call/dispatch.h"
#include "call/held_memory.h"
#include "call/prepared_call.h"
#include "ops/server_log.h"
#include "ops/token_auth.h"
#include "server_config.h"
#include "test_files.h"

namespace attn {
namespace {

// ---- ServerConfig -----------------------------------------------------------

StatusOr<server::ServerConfig> Parse(std::vector<std::string> args,
                                     std::map<std::string, std::string> env = {}) {
  bool help = false;
  return server::ParseServerConfig(
      args, [&env](const char* k) { return env.count(k) ? env.at(k).c_str() : nullptr; }, &help);
}

TEST(ServerConfig, DefaultsFlagsAndEnvironment) {
  auto c = Parse({});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->host, "0.0.0.0");
  EXPECT_EQ(c->port, 50051);
  EXPECT_EQ(c->threads, 0);
  EXPECT_EQ(c->limits.max_message_bytes, 64 << 20);
  // Environment over defaults, flags over environment; --flag=value works too.
  c = Parse({"--port", "6000", "--max-message-mb=8"}, {{"ATTN_PORT", "7000"},
                                                       {"ATTN_HOST", "127.0.0.1"},
                                                       {"ATTN_THREADS", "3"},
                                                       {"ATTN_MODEL_DIR", "/models"},
                                                       {"ATTN_LOG_LEVEL", "debug"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->port, 6000);
  EXPECT_EQ(c->host, "127.0.0.1");
  EXPECT_EQ(c->threads, 3);
  EXPECT_EQ(c->model_dir, "/models");
  EXPECT_EQ(c->log_level, "debug");
  EXPECT_EQ(c->limits.max_message_bytes, 8 << 20);
}

// The KV-cache sessions' flags, and the pool sized from the container's
// memory limit when --kv-cache-mb is not given.
TEST(ServerConfig, SessionFlags) {
  auto c = Parse({});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->kv_cache_bytes, int64_t{1024} << 20);
  EXPECT_EQ(c->max_sessions, 4096);
  EXPECT_EQ(c->max_session_tokens, 131072);
  EXPECT_EQ(c->session_idle_timeout_s, 600);
  c = Parse({"--kv-cache-mb", "256", "--max-sessions=8", "--max-session-tokens", "4096",
             "--session-idle-timeout", "90s"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->kv_cache_bytes, int64_t{256} << 20);
  EXPECT_EQ(c->max_sessions, 8);
  EXPECT_EQ(c->max_session_tokens, 4096);
  EXPECT_EQ(c->session_idle_timeout_s, 90);
  for (const auto& [text, seconds] : {std::pair{"10m", 600.0}, std::pair{"2h", 7200.0},
                                      std::pair{"0", 0.0}, std::pair{"1.5", 1.5}}) {
    c = Parse({"--session-idle-timeout", text});
    ASSERT_TRUE(c.ok()) << text;
    EXPECT_EQ(c->session_idle_timeout_s, seconds) << text;
  }
  for (const char* bad : {"-1", "10x", "", "m"}) {
    c = Parse({"--session-idle-timeout", bad});
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_NE(c.status().message().find("--session-idle-timeout: expected a duration"),
              std::string::npos);
  }
  // --unix-socket: a path sun_path can hold.
  c = Parse({"--unix-socket", "/run/attn/attn.sock"});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->unix_socket, "/run/attn/attn.sock");
  EXPECT_FALSE(Parse({"--unix-socket", ""}).ok());
  c = Parse({"--unix-socket", "/" + std::string(107, 'x')});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "--unix-socket: expected a path of 1-107 bytes, got 108");
  // Bounded: 30 days at most, so that no later duration cast overflows.
  c = Parse({"--session-idle-timeout", "720h"});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->session_idle_timeout_s, 2592000);
  for (const char* bad : {"1e10", "721h", "1e300", "43201m"}) {
    c = Parse({"--session-idle-timeout", bad});
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.status().message(),
              std::string("--session-idle-timeout: expected a duration of at most 720h (2592000 "
                          "s), got '") +
                  bad + "'");
  }
  EXPECT_FALSE(Parse({"--kv-cache-mb", "0"}).ok());
  EXPECT_EQ(c->max_sessions_per_principal, 0) << "no quota by default";
  EXPECT_EQ(c->kv_cache_bytes_per_principal, 0);
  c = Parse({"--max-sessions-per-principal", "16"}, {{"ATTN_KV_CACHE_MB_PER_PRINCIPAL", "64"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->max_sessions_per_principal, 16);
  EXPECT_EQ(c->kv_cache_bytes_per_principal, int64_t{64} << 20);
  EXPECT_FALSE(Parse({"--max-sessions-per-principal", "-1"}).ok());
  // The pool from the container's limit: what is left after gRPC's quota,
  // 256 MiB for the server, one request per compute thread and the
  // sessions' metadata (1/32 of the pool + 16 MiB). The shipped pod: 4 GiB,
  // 2 threads, --max-request-memory-mb 256.
  c = Parse({"--threads", "2", "--max-request-memory-mb", "256"},
            {{"ATTN_CONTAINER_MEMORY_MB", "4096"}});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->kv_cache_bytes, int64_t{(4096 - 512 - 256 - 2 * 256 - 16) * 32 / 33} << 20);
  EXPECT_EQ(c->kv_cache_bytes >> 20, 2715);
  const int64_t pool = c->kv_cache_bytes >> 20, metadata = pool / 32 + 16;
  EXPECT_LE(pool + metadata + 512 + 256 + 2 * 256, 4096) << "every budget fits the pod";
  c = Parse({"--threads", "1", "--memory-quota-mb", "128"}, {{"ATTN_CONTAINER_MEMORY_MB", "8192"}});
  EXPECT_EQ(c->kv_cache_bytes, int64_t{(8192 - 128 - 256 - 2048 - 16) * 32 / 33} << 20);
  c = Parse({}, {{"ATTN_CONTAINER_MEMORY_MB", "300"}});
  EXPECT_EQ(c->kv_cache_bytes, int64_t{64} << 20) << "at least 64 MiB";
  c = Parse({"--kv-cache-mb", "100"}, {{"ATTN_CONTAINER_MEMORY_MB", "8192"}});
  EXPECT_EQ(c->kv_cache_bytes, int64_t{100} << 20) << "--kv-cache-mb wins";
}

// --compute-precision, and the arithmetic a call gets: what it asks for,
// else the policy (auto: bf16 for BFLOAT16 queries), bf16 only where the
// CPU and core can (else float32, which every request permits).
TEST(ServerConfig, ComputePrecisionPolicyAndResolution) {
  using server::PrecisionPolicy;
  using server::RequestedPrecision;
  using server::ResolvePrecision;
  using server::UsedPrecision;
  auto c = Parse({});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->limits.compute_precision, PrecisionPolicy::kAuto);
  c = Parse({"--compute-precision", "bfloat16"});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->limits.compute_precision, PrecisionPolicy::kBFloat16);
  c = Parse({}, {{"ATTN_COMPUTE_PRECISION", "float32"}});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->limits.compute_precision, PrecisionPolicy::kFloat32);
  c = Parse({"--compute-precision", "fp8"});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("--compute-precision: expected auto, float32 or bfloat16"),
            std::string::npos)
      << c.status().message();

  const auto bf16 = UsedPrecision::kBFloat16, f32 = UsedPrecision::kFloat32;
  struct Row {
    RequestedPrecision asked;
    PrecisionPolicy policy;
    bool bf16_query;
    UsedPrecision with_bf16_cpu;
  };
  const Row rows[] = {
      {RequestedPrecision::kUnspecified, PrecisionPolicy::kAuto, true, bf16},
      {RequestedPrecision::kUnspecified, PrecisionPolicy::kAuto, false, f32},
      {RequestedPrecision::kUnspecified, PrecisionPolicy::kFloat32, true, f32},
      {RequestedPrecision::kUnspecified, PrecisionPolicy::kBFloat16, false, bf16},
      {RequestedPrecision::kFloat32, PrecisionPolicy::kBFloat16, true, f32},
      {RequestedPrecision::kBFloat16, PrecisionPolicy::kFloat32, false, bf16},
  };
  for (const Row& r : rows) {
    EXPECT_EQ(ResolvePrecision(r.asked, r.policy, r.bf16_query, true), r.with_bf16_cpu);
    // Without bf16 matrix instructions (or core's bf16 kernels): float32.
    EXPECT_EQ(ResolvePrecision(r.asked, r.policy, r.bf16_query, false), f32);
  }
  EXPECT_STREQ(server::PrecisionName(bf16), "bfloat16");
  EXPECT_STREQ(server::PrecisionName(f32), "float32");
}

TEST(ServerConfig, OperationsFlags) {
  auto c = Parse({});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->max_inflight, 256);
  EXPECT_EQ(c->max_queue, 128);
  EXPECT_EQ(c->metrics_port, -1) << "metrics are off by default";
  EXPECT_TRUE(c->tls_cert.empty() && c->auth_token_file.empty());
  c = Parse({"--max-inflight", "16", "--max-queue=4", "--metrics-port", "9090", "--tls-cert",
             "s.pem", "--tls-key", "s.key", "--tls-client-ca", "ca.pem"},
            {{"ATTN_AUTH_TOKEN_FILE", "/etc/attn/tokens"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->max_inflight, 16);
  EXPECT_EQ(c->max_queue, 4);
  EXPECT_EQ(c->metrics_port, 9090);
  EXPECT_EQ(c->tls_cert, "s.pem");
  EXPECT_EQ(c->tls_key, "s.key");
  EXPECT_EQ(c->tls_client_ca, "ca.pem");
  EXPECT_EQ(c->auth_token_file, "/etc/attn/tokens");
  auto bad = [](const StatusOr<server::ServerConfig>& r, const std::string& msg) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message(), msg);
  };
  bad(Parse({"--max-inflight", "0"}),
      "--max-inflight: expected an integer in [1, 1048576], got '0'");
  bad(Parse({"--metrics-port", "-2"}),
      "--metrics-port: expected an integer in [-1, 65535], got '-2'");
  bad(Parse({"--tls-cert", "s.pem"}), "--tls-cert and --tls-key go together: got only --tls-cert");
  bad(Parse({"--tls-key", "s.key"}), "--tls-cert and --tls-key go together: got only --tls-key");
  bad(Parse({"--tls-client-ca", "ca.pem"}),
      "--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key");
  bad(Parse({"--auth-token-file="}), "--auth-token-file: expected a file path, got ''");
}

TEST(ServerConfig, TransportMemoryFlags) {
  auto c = Parse({});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->max_streams, 100);
  EXPECT_EQ(c->memory_quota_bytes, int64_t{512} << 20);
  c = Parse({"--max-streams", "8"}, {{"ATTN_MEMORY_QUOTA_MB", "3000"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->max_streams, 8);
  EXPECT_EQ(c->memory_quota_bytes, int64_t{3000} << 20) << "no 32-bit overflow";
  EXPECT_EQ(Parse({"--max-streams", "0"}).status().message(),
            "--max-streams: expected an integer in [1, 1048576], got '0'");
  EXPECT_EQ(Parse({"--memory-quota-mb", "lots"}).status().message(),
            "--memory-quota-mb: expected an integer in [1, 1073741824], got 'lots'");
}

TEST(LargeCalls, EveryCpuAloneAShareUnderConcurrentLoad) {
  using S = server::CallDispatcher;
  const std::chrono::milliseconds long_ago(5000), just_now(1);
  EXPECT_EQ(S::ThreadsForLargeCall(2, 1, long_ago), 2) << "a lone call: every CPU";
  EXPECT_EQ(S::ThreadsForLargeCall(8, 1, long_ago), 8);
  EXPECT_EQ(S::ThreadsForLargeCall(2, 2, just_now), 1) << "two at once on 2 CPUs: one each";
  EXPECT_EQ(S::ThreadsForLargeCall(2, 1, just_now), 1) << "overlap a moment ago: still shared";
  EXPECT_EQ(S::ThreadsForLargeCall(8, 2, just_now), 4);
  EXPECT_EQ(S::ThreadsForLargeCall(8, 1, just_now), 4) << "at least a 2-way split";
  EXPECT_EQ(S::ThreadsForLargeCall(8, 3, just_now), 2);
  EXPECT_EQ(S::ThreadsForLargeCall(2, 64, just_now), 1) << "never below one thread";
  EXPECT_EQ(S::ThreadsForLargeCall(1, 4, just_now), 1);
}

TEST(HeldMemory, OverTheQuotaOnlyConnectionsHoldingNothingElseAreServed) {
  server::HeldMemory held(100);
  held.Add("a", 60);
  EXPECT_TRUE(held.Admit("a", 60).ok());
  held.Add("a", 30);  // a's second call: 90 held, within the quota
  EXPECT_TRUE(held.Admit("a", 30).ok());
  held.Add("b", 20);  // 110: over, but b holds nothing else
  EXPECT_TRUE(held.Admit("b", 20).ok());
  held.Add("a", 10);  // a holds 90 in other calls
  const Status refused = held.Admit("a", 10);
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("--memory-quota-mb"), std::string::npos) << refused.message();
  EXPECT_EQ(held.held(), 120);
  EXPECT_EQ(held.connections(), 2);
  held.Add("a", -100);  // a's calls are done: its entry goes
  EXPECT_EQ(held.connections(), 1);
  held.Add("b", 10);
  EXPECT_TRUE(held.Admit("b", 10).ok()) << "back within the quota: 30";
  held.Add("b", -30);
  EXPECT_EQ(held.held(), 0);
  EXPECT_EQ(held.connections(), 0);
}

TEST(ServerConfig, BadValuesNameTheFlag) {
  auto expect = [](const StatusOr<server::ServerConfig>& c, const std::string& msg) {
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find(msg), std::string::npos) << c.status().message();
  };
  expect(Parse({"--port", "70000"}), "--port: expected an integer in [0, 65535], got '70000'");
  expect(Parse({"--threads", "-1"}), "--threads: expected an integer in [0, 1024], got '-1'");
  expect(Parse({"--log-level", "loud"}),
         "--log-level: expected trace, debug, info, warn, error or off");
  expect(Parse({"--max-attention-work", "0"}), "--max-attention-work: expected a positive number");
  expect(Parse({"--log-format", "xml"}), "--log-format: expected text or json, got 'xml'");
  expect(Parse({"--shutdown-grace", "-1"}), "--shutdown-grace: expected seconds >= 0, got '-1'");
  expect(Parse({"--nope", "1"}), "unknown flag '--nope'");
  expect(Parse({"--port"}), "--port: missing value");
  expect(Parse({}, {{"ATTN_MAX_MESSAGE_MB", "lots"}}), "ATTN_MAX_MESSAGE_MB (--max-message-mb:");
  bool help = false;
  EXPECT_TRUE(server::ParseServerConfig(
                  {"--help"}, [](const char*) { return nullptr; }, &help)
                  .ok());
  EXPECT_TRUE(help);
  EXPECT_NE(server::ServerUsage().find("ATTN_MODEL_DIR"), std::string::npos);
}

// ---- Status codes -----------------------------------------------------------

TEST(StatusCodes, EveryGrpcCodeHasItsName) {
  // The bench counts errors by these names, and metrics label them: a code
  // core never returns (UNAVAILABLE from a balancer) must still be named.
  const std::vector<std::pair<grpc::StatusCode, std::string>> codes = {
      {grpc::StatusCode::OK, "OK"},
      {grpc::StatusCode::CANCELLED, "CANCELLED"},
      {grpc::StatusCode::UNKNOWN, "UNKNOWN"},
      {grpc::StatusCode::INVALID_ARGUMENT, "INVALID_ARGUMENT"},
      {grpc::StatusCode::DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED"},
      {grpc::StatusCode::NOT_FOUND, "NOT_FOUND"},
      {grpc::StatusCode::ALREADY_EXISTS, "ALREADY_EXISTS"},
      {grpc::StatusCode::PERMISSION_DENIED, "PERMISSION_DENIED"},
      {grpc::StatusCode::RESOURCE_EXHAUSTED, "RESOURCE_EXHAUSTED"},
      {grpc::StatusCode::FAILED_PRECONDITION, "FAILED_PRECONDITION"},
      {grpc::StatusCode::ABORTED, "ABORTED"},
      {grpc::StatusCode::OUT_OF_RANGE, "OUT_OF_RANGE"},
      {grpc::StatusCode::UNIMPLEMENTED, "UNIMPLEMENTED"},
      {grpc::StatusCode::INTERNAL, "INTERNAL"},
      {grpc::StatusCode::UNAVAILABLE, "UNAVAILABLE"},
      {grpc::StatusCode::DATA_LOSS, "DATA_LOSS"},
      {grpc::StatusCode::UNAUTHENTICATED, "UNAUTHENTICATED"}};
  for (const auto& [code, name] : codes) {
    EXPECT_EQ(StatusCodeName(static_cast<StatusCode>(code)), name);
  }
  EXPECT_STREQ(StatusCodeName(static_cast<StatusCode>(99)), "UNKNOWN");
}

// ---- Logs -------------------------------------------------------------------

server::AccessRecord ErrorRecord() {
  server::AccessRecord r;
  r.rpc = "Attention";
  r.model = "-";
  r.shapes = "query[5, 2]";
  r.code = "INVALID_ARGUMENT";
  r.latency_ms = 0.25;
  r.peer = "ipv4:127.0.0.1:1234";
  r.reason = "key: last dim must equal query's (2), got \"3\"\n";
  return r;
}

TEST(ServerLog, JsonLinesAreJsonWithEveryField) {
  const std::string line =
      "{" + server::FormatAccess(ErrorRecord(), server::LogFormat::kJson, 7) + "}";
  auto json = ParseJson(line);
  ASSERT_TRUE(json.ok()) << line;
  EXPECT_EQ(json->Find("rpc")->string, "Attention");
  EXPECT_EQ(json->Find("protocol")->string, "attention.v1");
  EXPECT_EQ(json->Find("code")->string, "INVALID_ARGUMENT");
  EXPECT_EQ(json->Find("reason")->string, "key: last dim must equal query's (2), got \"3\"\n");
  EXPECT_DOUBLE_EQ(json->Find("latency_ms")->number, 0.25);
  EXPECT_EQ(json->Find("suppressed")->integer, 7);
  const std::string text = server::FormatAccess(ErrorRecord(), server::LogFormat::kText, 0);
  EXPECT_EQ(text.find("suppressed"), std::string::npos);
  EXPECT_NE(text.find("rpc=Attention"), std::string::npos);
}

TEST(ServerLog, TextLinesEscapeControlCharactersAndNameThePrincipal) {
  server::AccessRecord r = ErrorRecord();
  r.principal = "CN=a \"b\"\nrpc=Forged";
  r.reason = "session 'x\ny' \x1b[31mred\x7f";
  const std::string text = server::FormatAccess(r, server::LogFormat::kText, 0);
  EXPECT_EQ(text.find('\n'), std::string::npos) << text;
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_EQ(text.find('\x7f'), std::string::npos) << text;
  EXPECT_NE(text.find("principal=\"CN=a \\\"b\\\"\\x0arpc=Forged\""), std::string::npos) << text;
  EXPECT_NE(text.find("reason=\"session 'x\\x0ay' \\x1b[31mred\\x7f\""), std::string::npos) << text;
  auto json = ParseJson("{" + server::FormatAccess(r, server::LogFormat::kJson, 0) + "}");
  ASSERT_TRUE(json.ok());
  EXPECT_EQ(json->Find("principal")->string, r.principal) << "JSON carries it exactly, escaped";
}

// The token file: NAME TOKEN lines and bare tokens (named by their SHA-256),
// and the lines it refuses, keeping the tokens in use.
TEST(TokenAuth, NamedAndBareTokensAndWhatTheFileRefuses) {
  attn_test::TempDir dir;
  dir.Write("t", "# teams\nteam-a tok-aaaa\n  team-b   tok-bbbb  \ntok-cccc\nteam-a tok-a-next\n");
  server::TokenAuth auth;
  ASSERT_TRUE(auth.Load(dir.File("t")).ok());
  EXPECT_EQ(auth.size(), 4u);
  auto check = [&](const std::string& header) { return auth.Check(header.data(), header.size()); };
  EXPECT_EQ(*check("Bearer tok-aaaa"), "team-a");
  EXPECT_EQ(*check("Bearer tok-a-next"), "team-a") << "a name may hold two tokens (a rotation)";
  EXPECT_EQ(*check("Bearer tok-bbbb"), "team-b");
  // sha256("tok-cccc"), from coreutils: 8 hex digits.
  EXPECT_EQ(*check("Bearer tok-cccc"), server::BareTokenName("tok-cccc"));
  FILE* p = popen("printf %s tok-cccc | sha256sum", "r");
  char hex[9] = {};
  ASSERT_EQ(fread(hex, 1, 8, p), 8u);
  pclose(p);
  EXPECT_EQ(server::BareTokenName("tok-cccc"), hex);
  EXPECT_EQ(check("Bearer team-a").status().code(), StatusCode::kUnauthenticated)
      << "a name is not a token";
  EXPECT_EQ(auth.names(), (std::vector<std::string>{hex, "team-a", "team-b"}));
  for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
           {"team a tok-x\n", "more than two fields"},
           {"team/a tok-x\n", "a name must match [A-Za-z0-9._-]{1,64}"},
           {"team-a tok-x\nteam-b tok-x\n", "a token given twice"},
           {"# nobody\n", "no token"}}) {
    dir.Write("bad", text);
    server::TokenAuth fresh;
    const Status st = fresh.Load(dir.File("bad"));
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(st.message().find(why), std::string::npos) << st.message();
    EXPECT_EQ(st.message().find("tok-x"), std::string::npos) << "never a token: " << st.message();
  }
  dir.Write("t", "team-a tok-a b c\n");
  EXPECT_FALSE(auth.Reload().ok());
  EXPECT_EQ(*check("Bearer tok-bbbb"), "team-b") << "a failed reload keeps the tokens in use";
  EXPECT_EQ(server::PrincipalLabel(""), "anonymous");
  EXPECT_EQ(server::PrincipalLabel("team-a"), "team-a");
  EXPECT_EQ(server::PrincipalLabel("CN=x,O=y"), "certificate") << "subjects are not labels";
}

TEST(ServerLog, RepeatedErrorLinesAreRateLimited) {
  std::ostringstream captured;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(captured);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  server::ConfigureLogging("info", server::LogFormat::kJson);
  for (int i = 0; i < 500; ++i) server::LogAccess(ErrorRecord());  // a flood, within a second
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  server::LogAccess(ErrorRecord());  // the next second: logged, with the count dropped
  spdlog::set_default_logger(previous);
  std::istringstream lines(captured.str());
  std::string line, last;
  int n = 0;
  while (std::getline(lines, line)) {
    ASSERT_TRUE(ParseJson(line).ok()) << line;
    ++n;
    last = line;
  }
  EXPECT_LE(n, server::kMaxErrorLinesPerSecond + 1);
  EXPECT_GE(n, 2);
  EXPECT_NE(last.find("\"suppressed\":"), std::string::npos) << last;
}

// ---- ComputeScheduler -------------------------------------------------------

TEST(ComputeScheduler, NeverGrantsMoreThreadsThanCpusAndKeepsFifoOrder) {
  std::atomic<int> in_use{0}, peak{0};
  std::vector<int> order;
  std::mutex mu;
  {
    server::ComputeScheduler s(3, 100);
    for (int i = 0; i < 40; ++i) {
      const int want = i % 4 == 0 ? 3 : 1;  // every fourth job wants every CPU
      ASSERT_TRUE(s.Submit(want, [&, i, want](int granted) {
        EXPECT_EQ(granted, want);
        const int now = in_use += granted;
        int p = peak.load();
        while (now > p && !peak.compare_exchange_weak(p, now)) {
        }
        {
          std::lock_guard<std::mutex> lock(mu);
          order.push_back(i);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        in_use -= granted;
      }));
    }
  }  // the destructor runs what is queued
  EXPECT_LE(peak.load(), 3);
  ASSERT_EQ(order.size(), 40u);
  // A job that needs every CPU starts after all earlier jobs have finished,
  // and no later job starts before it is done: its place in the start order
  // is exactly its place in the queue.
  for (size_t pos = 0; pos < order.size(); ++pos) {
    if (order[pos] % 4 == 0) {
      EXPECT_EQ(order[pos], static_cast<int>(pos));
    }
  }
}

TEST(ComputeScheduler, FullQueueRefusesAndClampsThreads) {
  std::atomic<bool> release{false};
  server::ComputeScheduler s(1, 2);
  std::atomic<int> granted{0};
  ASSERT_TRUE(s.Submit(1, [&](int) {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (s.running() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(s.Submit(8, [&](int g) { granted = g; }));  // clamped to the one CPU
  EXPECT_TRUE(s.Submit(1, [](int) {}));
  EXPECT_FALSE(s.Submit(1, [](int) {})) << "the queue holds 2";
  EXPECT_EQ(s.queued(), 2);
  release = true;
  while (s.queued() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  while (s.running() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(granted.load(), 1);
}

TEST(ComputeScheduler, QueueZeroRunsWhenTokensAreFreeAndRefusesOtherwise) {
  std::atomic<bool> release{false}, ran_all{false};
  server::ComputeScheduler s(2, 0);
  // Idle: a job wanting every CPU starts at once; it never counts as queued.
  ASSERT_TRUE(s.Submit(2, [&](int g) {
    EXPECT_EQ(g, 2);
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }));
  EXPECT_EQ(s.queued(), 0);
  // Busy: anything that would wait is refused, inline or queued.
  EXPECT_FALSE(s.Submit(1, [](int) {}));
  EXPECT_FALSE(s.TryAcquire(1));
  release = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (s.running() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(s.running(), 0);
  // Free again: two one-CPU jobs start at once side by side.
  std::atomic<int> started{0};
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(s.Submit(1, [&](int) {
      ++started;
      while (started < 2 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      ran_all = started == 2;
    }));
  }
  while (s.running() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(ran_all.load()) << "both ran at the same time";
}

// ---- Host arrays ------------------------------------------------------------

}  // namespace
}  // namespace attn
