// Operating the server: admission control (--max-inflight, --max-queue),
// Prometheus /metrics, bearer tokens and TLS/mTLS (certificates made with the
// openssl CLI at test time). Every server binds to 127.0.0.1 on a free port.
#include <gtest/gtest.h>
#include <httplib.h>
#include <spdlog/sinks/ostream_sink.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include "attention_client.h"
#include "host_array.h"
#include "inference/open_inference_grpc.grpc.pb.h"
#include "test_files.h"
#include "test_server.h"

namespace attn {
namespace {

using attn_test::CapturedLog;
using attn_test::Pki;
using attn_test::TempDir;

using attention::v1::AttentionRequest;
using attention::v1::AttentionResponse;
using attention::v1::MultiHeadAttentionRequest;
using Clock = std::chrono::steady_clock;

client::HostArray Ramp(Shape shape, float step) {
  client::HostArray a;
  a.shape = std::move(shape);
  int64_t n = 1;
  for (int64_t d : a.shape) n *= d;
  for (int64_t i = 0; i < n; ++i) a.values.push_back(std::sin(step * static_cast<float>(i)));
  return a;
}

// SDPA over [1, 8, L, 64]: long enough to hold a CPU for a while.
AttentionRequest LongSdpa(int64_t l) {
  AttentionRequest req;
  *req.mutable_query() = client::ToWire(Ramp({1, 8, l, 64}, 0.37f), client::Encoding::kData);
  return req;
}

AttentionRequest SmallSdpa() {
  AttentionRequest req;
  *req.mutable_query() = client::ToWire(Ramp({1, 5, 2}, 0.5f), client::Encoding::kData);
  return req;
}

// Waits (bounded) until `done()`; returns it.
bool WaitFor(const std::function<bool()>& done,
             std::chrono::seconds limit = std::chrono::seconds(30)) {
  const auto until = Clock::now() + limit;
  while (!done() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return done();
}

// Long calls started on their own threads, joined at the end.
class Background {
 public:
  explicit Background(std::string target) : target_(std::move(target)) {}
  ~Background() {
    for (auto& t : threads_) t.join();
  }
  void Start(AttentionRequest req) {
    threads_.emplace_back([this, req = std::move(req)] {
      client::AttentionClient c(client::Connect(target_));
      AttentionResponse resp;
      if (c.Attention(req, &resp, std::chrono::seconds(120)).ok()) ++ok_;
    });
  }
  void Join() {
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  int ok() const { return ok_; }

 private:
  std::string target_;
  std::vector<std::thread> threads_;
  std::atomic<int> ok_{0};
};

// Starts an 8192-token SDPA call on `bg` and waits until `s` holds
// `in_flight` calls (the new one included). The request is built once: a
// later call must reach the server while the earlier ones still run, so it
// must not wait for its 4M inputs to be made. (With 4096 tokens a first call
// sometimes finished before the second arrived: ~0.3 s of compute on
// AVX-512.)
bool StartLongCall(Background& bg, const server::AttentionServer& s, int in_flight) {
  static const AttentionRequest* const kLong = new AttentionRequest(LongSdpa(8192));
  bg.Start(*kLong);
  return WaitFor([&] { return s.calls_in_flight() == in_flight; });
}

// ---- admission control ------------------------------------------------------

TEST(Admission, CallsOverMaxInflightAreRefusedAtOnce) {
  auto s = attn_test::StartTestServer([](server::ServerConfig& c) {
    c.threads = 1;
    c.max_inflight = 2;
    c.max_queue = 8;
  });
  ASSERT_NE(s, nullptr);
  Background bg(attn_test::Target(*s));
  ASSERT_TRUE(StartLongCall(bg, *s, 1));  // runs
  ASSERT_TRUE(StartLongCall(bg, *s, 2));  // waits for the CPU
  client::AttentionClient c(client::Connect(attn_test::Target(*s)));
  AttentionResponse resp;
  const auto t0 = Clock::now();
  const grpc::Status st = c.Attention(SmallSdpa(), &resp, std::chrono::seconds(60));
  const double waited_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_EQ(st.error_message(),
            "server: 2 calls in flight already, the limit (--max-inflight); retry later");
  EXPECT_LT(waited_ms, 200) << "refused only after waiting";
  bg.Join();
  EXPECT_EQ(bg.ok(), 2) << "the admitted calls must finish";
  // Room again: the next call is served.
  EXPECT_TRUE(c.Attention(SmallSdpa(), &resp, std::chrono::seconds(60)).ok());
}

TEST(Admission, CallsOverMaxQueueAreRefusedAtOnce) {
  auto s = attn_test::StartTestServer([](server::ServerConfig& c) {
    c.threads = 1;
    c.max_inflight = 100;
    c.max_queue = 1;
  });
  ASSERT_NE(s, nullptr);
  Background bg(attn_test::Target(*s));
  ASSERT_TRUE(StartLongCall(bg, *s, 1));
  ASSERT_TRUE(StartLongCall(bg, *s, 2));
  client::AttentionClient c(client::Connect(attn_test::Target(*s)));
  AttentionResponse resp;
  const grpc::Status st = c.Attention(SmallSdpa(), &resp, std::chrono::seconds(60));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
  EXPECT_EQ(st.error_message(), "server: the compute queue is full (--max-queue 1); retry later");
  bg.Join();
  EXPECT_EQ(bg.ok(), 2);
}

// --max-queue 0 means "never wait": a call runs when its CPUs are free now,
// and is refused otherwise. (It used to refuse every call that was not
// small enough to run inline, even on an idle server.)
TEST(Admission, MaxQueueZeroRunsWhenTheCpusAreFreeAndRefusesOtherwise) {
  // Two compute threads: a large call wants both, so it goes through the
  // scheduler's queue path rather than running inline.
  auto s = attn_test::StartTestServer([](server::ServerConfig& c) {
    c.threads = 2;
    c.max_inflight = 4;
    c.max_queue = 0;
  });
  ASSERT_NE(s, nullptr);
  client::AttentionClient c(client::Connect(attn_test::Target(*s)));
  AttentionResponse resp;
  // Idle: a call large enough for the compute workers (not inline) runs.
  const grpc::Status idle = c.Attention(LongSdpa(2048), &resp, std::chrono::seconds(60));
  EXPECT_TRUE(idle.ok()) << idle.error_message();
  EXPECT_EQ(resp.output().shape(2), 2048);
  // Busy: the CPU is taken, so the next call (large or small) is refused at once.
  Background bg(attn_test::Target(*s));
  ASSERT_TRUE(StartLongCall(bg, *s, 1));
  for (const AttentionRequest& req : {SmallSdpa(), LongSdpa(512)}) {
    const grpc::Status st = c.Attention(req, &resp, std::chrono::seconds(60));
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << st.error_message();
    EXPECT_EQ(st.error_message(), "server: the compute queue is full (--max-queue 0); retry later");
  }
  bg.Join();
  EXPECT_EQ(bg.ok(), 1);
  EXPECT_TRUE(c.Attention(LongSdpa(512), &resp, std::chrono::seconds(60)).ok()) << "free again";
}

// The other edges: one call in flight at a time, and a queue as deep as the
// in-flight limit (the in-flight limit refuses first).
TEST(Admission, MaxInflightOneAndMaxQueueEqualToMaxInflight) {
  for (const int inflight : {1, 2}) {
    SCOPED_TRACE("max_inflight " + std::to_string(inflight));
    auto s = attn_test::StartTestServer([&](server::ServerConfig& c) {
      c.threads = 1;
      c.max_inflight = inflight;
      c.max_queue = inflight;
    });
    ASSERT_NE(s, nullptr);
    Background bg(attn_test::Target(*s));
    for (int i = 1; i <= inflight; ++i) ASSERT_TRUE(StartLongCall(bg, *s, i));
    client::AttentionClient c(client::Connect(attn_test::Target(*s)));
    AttentionResponse resp;
    const grpc::Status st = c.Attention(SmallSdpa(), &resp, std::chrono::seconds(60));
    EXPECT_EQ(st.error_message(), "server: " + std::to_string(inflight) +
                                      " calls in flight already, the limit (--max-inflight); "
                                      "retry later");
    bg.Join();
    EXPECT_EQ(bg.ok(), inflight) << "every admitted call finishes";
    EXPECT_TRUE(c.Attention(SmallSdpa(), &resp, std::chrono::seconds(60)).ok());
  }
}

TEST(Admission, ClientCancelFreesItsQueuedWork) {
  // One CPU, held by a long call; a second call waits, then its client
  // cancels it: the server drops it unanswered and never computes it.
  auto s = attn_test::StartTestServer([](server::ServerConfig& c) { c.threads = 1; });
  ASSERT_NE(s, nullptr);
  Background bg(attn_test::Target(*s));
  ASSERT_TRUE(StartLongCall(bg, *s, 1));
  auto stub = attention::v1::AttentionService::NewStub(client::Connect(attn_test::Target(*s)));
  grpc::ClientContext ctx;
  AttentionResponse resp;
  std::atomic<bool> done{false};
  grpc::Status status;
  const AttentionRequest queued = LongSdpa(2048);
  stub->async()->Attention(&ctx, &queued, &resp, [&](grpc::Status st) {
    status = std::move(st);
    done = true;
  });
  ASSERT_TRUE(WaitFor([&] { return s->calls_in_flight() == 2; }));
  ctx.TryCancel();
  ASSERT_TRUE(WaitFor([&] { return done.load(); }));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  bg.Join();
  EXPECT_EQ(bg.ok(), 1);
  // It reached the CPU only after its client gave up: dropped, not computed.
  ASSERT_TRUE(WaitFor([&] { return s->calls_in_flight() == 0; }));
  EXPECT_EQ(s->calls_skipped(), 1);
}

int64_t RssBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

TEST(Admission, ManyClientsAtOnceKeepMemoryBounded) {
  // 400 clients, each on its own connection, each sending a 256 KiB request
  // at the same moment, against 4 slots: the rest are refused, nothing
  // queues without bound, and the process (client side included) stays small.
  auto s = attn_test::StartTestServer([](server::ServerConfig& c) {
    c.max_inflight = 4;
    c.max_queue = 2;
  });
  ASSERT_NE(s, nullptr);
  const std::string target = attn_test::Target(*s);
  MultiHeadAttentionRequest req;
  req.set_model("demo-mha");
  *req.mutable_query() = client::ToWire(Ramp({1, 128, 512}, 0.01f), client::Encoding::kData);
  const int64_t before = RssBytes();
  constexpr int kClients = 400;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<attention::v1::AttentionService::Stub>> stubs;
  for (int i = 0; i < kClients; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("attn.test_connection", i);
    channels.push_back(*client::OpenChannel(target, {}, args));
    stubs.push_back(attention::v1::AttentionService::NewStub(channels.back()));
  }
  struct Slot {
    grpc::ClientContext ctx;
    AttentionResponse resp;
    grpc::Status status;
  };
  std::vector<Slot> slots(kClients);
  std::atomic<int> done{0};
  int64_t peak = 0;
  for (int i = 0; i < kClients; ++i) {
    slots[i].ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    stubs[i]->async()->MultiHeadAttention(&slots[i].ctx, &req, &slots[i].resp,
                                          [&, i](grpc::Status st) {
                                            slots[i].status = std::move(st);
                                            ++done;
                                          });
  }
  const auto until = Clock::now() + std::chrono::seconds(60);
  while (done < kClients && Clock::now() < until) {
    peak = std::max(peak, RssBytes());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(done.load(), kClients);
  std::map<grpc::StatusCode, int> codes;
  for (const auto& slot : slots) {
    const auto code = slot.status.error_code();
    if (code != grpc::StatusCode::OK && code != grpc::StatusCode::RESOURCE_EXHAUSTED &&
        codes[code] == 0) {
      std::printf("unexpected: %s\n", slot.status.error_message().c_str());
    }
    ++codes[code];
  }
  EXPECT_GT(codes[grpc::StatusCode::OK], 0);
  EXPECT_GT(codes[grpc::StatusCode::RESOURCE_EXHAUSTED], 0);
  EXPECT_EQ(codes[grpc::StatusCode::OK] + codes[grpc::StatusCode::RESOURCE_EXHAUSTED], kClients)
      << "only OK or RESOURCE_EXHAUSTED";
  const double grown_mib = (peak - before) / 1048576.0;
  std::printf("RSS before %.1f MiB, peak growth %.1f MiB; codes:", before / 1048576.0, grown_mib);
  for (const auto& [code, n] : codes) {
    std::printf(" %s %d", StatusCodeName(static_cast<StatusCode>(code)), n);
  }
  std::printf("\n");
  // The requests alone are 400 x 256 KiB = 100 MiB on each side; computing
  // them all at once would need ~5x that. (ASan keeps up to 256 MiB of freed
  // memory in quarantine and pads every block, and TSan shadows every byte
  // several times over, so their bounds are looser.)
#if defined(__SANITIZE_ADDRESS__)
  constexpr double kBoundMib = 1024;
#elif defined(__SANITIZE_THREAD__)
  constexpr double kBoundMib = 2048;
#else
  constexpr double kBoundMib = 400;
#endif
  EXPECT_LT(grown_mib, kBoundMib);
  std::string health;
  client::AttentionClient c(client::Connect(target));
  ASSERT_TRUE(c.Health("", &health).ok());
  EXPECT_EQ(health, "SERVING");
}

// ---- metrics ----------------------------------------------------------------

std::string Scrape(int port) {
  httplib::Client http("127.0.0.1", port);
  http.set_connection_timeout(5);
  http.set_read_timeout(5);
  auto res = http.Get("/metrics");
  if (!res) return "no response: " + httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  return res->body;
}

// The value of the sample `name_and_labels` (exact text before the value),
// or -1 when absent.
double Sample(const std::string& text, const std::string& name_and_labels) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(name_and_labels + " ", 0) == 0) {
      return std::stod(line.substr(name_and_labels.size() + 1));
    }
  }
  return -1;
}

TEST(Metrics, ScrapeCountsKnownTraffic) {
  auto s = attn_test::StartTestServer([](server::ServerConfig& c) { c.metrics_port = 0; });
  ASSERT_NE(s, nullptr);
  ASSERT_GT(s->metrics_port(), 0);
  client::AttentionClient c(client::Connect(attn_test::Target(*s)));
  AttentionResponse resp;
  int64_t bytes_in = 0, bytes_out = 0;
  for (int i = 0; i < 3; ++i) {
    const AttentionRequest req = SmallSdpa();
    ASSERT_TRUE(c.Attention(req, &resp).ok());
    bytes_in += static_cast<int64_t>(req.ByteSizeLong());
    bytes_out += static_cast<int64_t>(resp.ByteSizeLong());
  }
  MultiHeadAttentionRequest bad;  // the query is 8 wide, the model 64
  bad.set_model("demo-mha-small");
  *bad.mutable_query() = client::ToWire(Ramp({1, 3, 8}, 0.1f), client::Encoding::kData);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(c.MultiHeadAttention(bad, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  bad.set_model("no-such-model");
  EXPECT_EQ(c.MultiHeadAttention(bad, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  attention::v1::ListModelsResponse models;
  ASSERT_TRUE(c.ListModels(&models).ok());

  std::string text;
  // The last call's counters land just after its answer is sent: poll.
  ASSERT_TRUE(WaitFor(
      [&] {
        text = Scrape(s->metrics_port());
        return Sample(text, "attn_inflight_requests") == 0 &&
               Sample(
                   text,
                   R"(attn_requests_total{rpc="ListModels",model="-",code="OK",protocol="attention.v1"})") ==
                   1;
      },
      std::chrono::seconds(10)))
      << text;
  EXPECT_EQ(
      Sample(text,
             R"(attn_requests_total{rpc="Attention",model="-",code="OK",protocol="attention.v1"})"),
      3);
  EXPECT_EQ(
      Sample(
          text,
          R"(attn_requests_total{rpc="MultiHeadAttention",model="demo-mha-small",code="INVALID_ARGUMENT",protocol="attention.v1"})"),
      2);
  EXPECT_EQ(
      Sample(
          text,
          R"(attn_requests_total{rpc="MultiHeadAttention",model="-",code="NOT_FOUND",protocol="attention.v1"})"),
      1);
  EXPECT_EQ(
      Sample(text,
             R"(attn_request_duration_seconds_count{rpc="Attention",protocol="attention.v1"})"),
      3);
  EXPECT_EQ(
      Sample(
          text,
          R"(attn_request_duration_seconds_bucket{rpc="Attention",protocol="attention.v1",le="+Inf"})"),
      3);
  EXPECT_EQ(
      Sample(
          text,
          R"(attn_request_duration_seconds_count{rpc="MultiHeadAttention",protocol="attention.v1"})"),
      3);
  EXPECT_EQ(
      Sample(
          text,
          R"(attn_compute_duration_seconds_count{rpc="Attention",protocol="attention.v1",precision="float32"})"),
      3);
  // float32 queries under the auto policy compute float32: the bf16 series stays 0.
  EXPECT_EQ(
      Sample(
          text,
          R"(attn_compute_duration_seconds_count{rpc="Attention",protocol="attention.v1",precision="bfloat16"})"),
      0);
  EXPECT_EQ(
      Sample(text, R"(attn_queue_duration_seconds_count{rpc="Attention",protocol="attention.v1"})"),
      3);
  // Rejected before computing: no queue or compute time.
  EXPECT_EQ(
      Sample(
          text,
          R"(attn_compute_duration_seconds_count{rpc="MultiHeadAttention",protocol="attention.v1",precision="float32"})"),
      0);
  EXPECT_GT(
      Sample(text, R"(attn_request_duration_seconds_sum{rpc="Attention",protocol="attention.v1"})"),
      0);
  EXPECT_EQ(Sample(text, R"(attn_request_bytes_total{rpc="Attention",protocol="attention.v1"})"),
            bytes_in);
  EXPECT_EQ(Sample(text, R"(attn_response_bytes_total{rpc="Attention",protocol="attention.v1"})"),
            bytes_out);
  EXPECT_EQ(Sample(text, "attn_queued_requests"), 0);
  EXPECT_EQ(Sample(text, "attn_compute_threads"), s->compute_threads());
  EXPECT_EQ(
      Sample(
          text,
          R"(attn_model_info{model="demo-mha",kind="multi_head_attention",embed_dim="512",num_heads="8",kdim="512",vdim="512"})"),
      1)
      << text;
  EXPECT_GT(Sample(text, "process_resident_memory_bytes"), 10 << 20);
  // Histogram buckets are cumulative.
  std::regex bucket(
      R"re(attn_request_duration_seconds_bucket\{rpc="Attention",protocol="attention.v1",le="[^"]+"\} (\d+))re");
  int64_t last = 0;
  int buckets = 0;
  for (std::sregex_iterator it(text.begin(), text.end(), bucket), end; it != end; ++it) {
    const int64_t v = std::stoll((*it)[1]);
    EXPECT_GE(v, last);
    last = v;
    ++buckets;
  }
  EXPECT_EQ(buckets, static_cast<int>(server::ServerMetrics::kBuckets.size()) + 1);
}

TEST(Metrics, BusyMetricsPortIsRefused) {
  auto first = attn_test::StartTestServer([](server::ServerConfig& c) { c.metrics_port = 0; });
  ASSERT_NE(first, nullptr);
  server::ServerConfig cfg;
  cfg.host = "127.0.0.1";
  cfg.port = 0;
  cfg.log_level = "off";
  cfg.metrics_port = first->metrics_port();
  auto second = server::AttentionServer::Start(cfg);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("--metrics-port: cannot listen on 127.0.0.1:" +
                                           std::to_string(cfg.metrics_port)),
            std::string::npos)
      << second.status().message();
}

// ---- files for auth and TLS ---------------------------------------------------

// ---- bearer tokens ------------------------------------------------------------

constexpr char kTokenA[] = "tok-A-6f1c2e9b7d";
constexpr char kTokenB[] = "tok-B-0a4d81c3f2";
constexpr char kTokenC[] = "tok-C-93be57a0d4";

TEST(Auth, CallsNeedAValidBearerTokenAndHealthStaysOpen) {
  TempDir dir;
  dir.Write("tokens", std::string("# allowed callers\n") + kTokenA + "\n\n  " + kTokenB + "  \n");
  auto s = attn_test::StartTestServer([&](server::ServerConfig& c) {
    c.auth_token_file = dir.File("tokens");
    c.log_level = "warn";
    c.metrics_port = 0;
  });
  ASSERT_NE(s, nullptr);
  CapturedLog log;
  const std::string target = attn_test::Target(*s);
  auto call = [&](const std::string& token) {
    client::ChannelOptions o;
    o.token = token;
    client::AttentionClient c(client::Connect(target, o));
    AttentionResponse resp;
    return c.Attention(SmallSdpa(), &resp, std::chrono::seconds(10));
  };
  grpc::Status st = call("");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(st.error_message(), "missing 'authorization: Bearer <token>' metadata");
  st = call("tok-A-wrong");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(st.error_message(), "invalid bearer token");
  EXPECT_TRUE(call(kTokenA).ok());
  EXPECT_TRUE(call(kTokenB).ok()) << "surrounding whitespace is trimmed";
  {  // A scheme other than Bearer.
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", std::string("Basic ") + kTokenA);
    auto stub = attention::v1::AttentionService::NewStub(client::Connect(target));
    AttentionResponse resp;
    st = stub->Attention(&ctx, SmallSdpa(), &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(st.error_message(), "the authorization metadata is not 'Bearer <token>'");
  }
  // ListModels too; health (for probes) without any token.
  client::AttentionClient anonymous(client::Connect(target));
  attention::v1::ListModelsResponse models;
  EXPECT_EQ(anonymous.ListModels(&models).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  std::string health;
  ASSERT_TRUE(anonymous.Health("", &health).ok());
  EXPECT_EQ(health, "SERVING");
  {  // The Open Inference Protocol: the same tokens; its live/ready open to probes.
    auto oip = inference::GRPCInferenceService::NewStub(client::Connect(target));
    grpc::ClientContext live_ctx, ready_ctx, meta_ctx, infer_ctx;
    inference::ServerLiveResponse live;
    ASSERT_TRUE(oip->ServerLive(&live_ctx, {}, &live).ok());
    EXPECT_TRUE(live.live());
    inference::ServerReadyResponse ready;
    ASSERT_TRUE(oip->ServerReady(&ready_ctx, {}, &ready).ok());
    EXPECT_TRUE(ready.ready());
    inference::ServerMetadataResponse meta;
    EXPECT_EQ(oip->ServerMetadata(&meta_ctx, {}, &meta).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    inference::ModelInferRequest req;
    req.set_model_name("scaled_dot_product_attention");
    auto* q = req.add_inputs();
    q->set_name("query"), q->set_datatype("FP32"), q->add_shape(1), q->add_shape(1);
    q->mutable_contents()->add_fp32_contents(2.0f);
    inference::ModelInferResponse resp;
    EXPECT_EQ(oip->ModelInfer(&infer_ctx, req, &resp).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    grpc::ClientContext with_token;
    with_token.AddMetadata("authorization", std::string("Bearer ") + kTokenA);
    ASSERT_TRUE(oip->ModelInfer(&with_token, req, &resp).ok());
    EXPECT_EQ(resp.outputs(0).contents().fp32_contents(0), 2.0f);
  }

  // Reload: B leaves, C arrives; A stays.
  dir.Write("tokens", std::string(kTokenA) + "\n" + kTokenC + "\n");
  ASSERT_TRUE(s->ReloadTokens().ok());
  EXPECT_TRUE(call(kTokenA).ok());
  EXPECT_EQ(call(kTokenB).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(call(kTokenC).ok());
  // A file without tokens would lock everyone out: refused, old set kept.
  dir.Write("tokens", "# nobody\n");
  const Status reload = s->ReloadTokens();
  EXPECT_EQ(reload.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(reload.message().find("no token in it"), std::string::npos);
  EXPECT_TRUE(call(kTokenC).ok());

  // The refusals were logged, the tokens never.
  const std::string text = log.Text();
  EXPECT_NE(text.find("code=UNAUTHENTICATED"), std::string::npos) << text;
  for (const char* token : {kTokenA, kTokenB, kTokenC, "tok-A-wrong"}) {
    EXPECT_EQ(text.find(token), std::string::npos) << token << " in the log:\n" << text;
  }
  EXPECT_EQ(Scrape(s->metrics_port()).find(kTokenA), std::string::npos);
  EXPECT_GE(
      Sample(
          Scrape(s->metrics_port()),
          R"(attn_requests_total{rpc="Attention",model="-",code="UNAUTHENTICATED",protocol="attention.v1"})"),
      4);
}

TEST(Auth, MissingOrEmptyTokenFileStopsTheStart) {
  TempDir dir;
  dir.Write("empty", "\n# no tokens\n");
  for (const std::string& path : {dir.File("absent"), dir.File("empty")}) {
    server::ServerConfig cfg;
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.log_level = "off";
    cfg.auth_token_file = path;
    auto s = server::AttentionServer::Start(cfg);
    ASSERT_FALSE(s.ok()) << path;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("--auth-token-file " + path), std::string::npos)
        << s.status().message();
  }
}

// ---- TLS ----------------------------------------------------------------------

class Tls : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Pki::Get().ok()) << "openssl failed; see " << Pki::Get().File("openssl.log");
  }
  static std::string F(const std::string& name) { return Pki::Get().File(name); }

  std::unique_ptr<server::AttentionServer> Serve(bool mutual) {
    return attn_test::StartTestServer([&](server::ServerConfig& c) {
      c.tls_cert = F("server.pem");
      c.tls_key = F("server.key");
      if (mutual) c.tls_client_ca = F("ca.pem");
    });
  }
  // One SDPA call over a fresh channel with `o`.
  static grpc::Status Call(const server::AttentionServer& s, client::ChannelOptions o) {
    auto channel = client::OpenChannel(attn_test::Target(s), o);
    if (!channel.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, channel.status().message());
    client::AttentionClient c(*channel);
    AttentionResponse resp;
    return c.Attention(SmallSdpa(), &resp, std::chrono::seconds(10));
  }
  static client::ChannelOptions TrustingCa(const std::string& ca) {
    client::ChannelOptions o;
    o.tls_ca = F(ca);
    return o;
  }
};

TEST_F(Tls, ServerTlsServesAClientThatTrustsItsCa) {
  auto s = Serve(false);
  ASSERT_NE(s, nullptr);
  const grpc::Status st = Call(*s, TrustingCa("ca.pem"));
  EXPECT_TRUE(st.ok()) << st.error_message();
}

TEST_F(Tls, PlaintextClientIsRefused) {
  auto s = Serve(false);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(Call(*s, {}).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(Tls, ClientTrustingAnotherCaIsRefused) {
  auto s = Serve(false);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(Call(*s, TrustingCa("other-ca.pem")).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(Tls, MutualTlsNeedsAClientCertificateFromTheClientCa) {
  auto s = Serve(true);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(Call(*s, TrustingCa("ca.pem")).error_code(), grpc::StatusCode::UNAVAILABLE)
      << "no client certificate";
  client::ChannelOptions intruder = TrustingCa("ca.pem");
  intruder.tls_cert = F("other-client.pem");
  intruder.tls_key = F("other-client.key");
  EXPECT_EQ(Call(*s, intruder).error_code(), grpc::StatusCode::UNAVAILABLE)
      << "a certificate from another CA";
  client::ChannelOptions good = TrustingCa("ca.pem");
  good.tls_cert = F("client.pem");
  good.tls_key = F("client.key");
  const grpc::Status st = Call(*s, good);
  EXPECT_TRUE(st.ok()) << st.error_message();
}

TEST_F(Tls, TokensWorkOverTls) {
  TempDir dir;
  dir.Write("tokens", std::string(kTokenA) + "\n");
  auto s = attn_test::StartTestServer([&](server::ServerConfig& c) {
    c.tls_cert = F("server.pem");
    c.tls_key = F("server.key");
    c.auth_token_file = dir.File("tokens");
  });
  ASSERT_NE(s, nullptr);
  client::ChannelOptions o = TrustingCa("ca.pem");
  EXPECT_EQ(Call(*s, o).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  o.token = kTokenA;
  EXPECT_TRUE(Call(*s, o).ok());
}

TEST_F(Tls, UnreadableOrNonPemFilesStopTheStart) {
  TempDir dir;
  dir.Write("junk.pem", "not a certificate\n");
  struct Case {
    std::string cert, key, ca, expected;
  };
  for (const Case& c :
       std::vector<Case>{{dir.File("none.pem"), F("server.key"), "",
                          "--tls-cert " + dir.File("none.pem") + ": cannot open"},
                         {F("server.pem"), dir.File("junk.pem"), "",
                          "--tls-key " + dir.File("junk.pem") + ": not a PEM file"},
                         {F("server.pem"), F("server.key"), dir.File("none.pem"),
                          "--tls-client-ca " + dir.File("none.pem") + ": cannot open"}}) {
    server::ServerConfig cfg;
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    cfg.log_level = "off";
    cfg.tls_cert = c.cert;
    cfg.tls_key = c.key;
    cfg.tls_client_ca = c.ca;
    auto s = server::AttentionServer::Start(cfg);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().message(), c.expected);
  }
  // And the client's side.
  client::ChannelOptions o;
  o.tls_ca = dir.File("junk.pem");
  auto channel = client::OpenChannel("127.0.0.1:1", o);
  ASSERT_FALSE(channel.ok());
  EXPECT_EQ(channel.status().message(), "--tls-ca " + dir.File("junk.pem") + ": not a PEM file");
}

}  // namespace
}  // namespace attn
