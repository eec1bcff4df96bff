#include "attention_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "attn/attention.h"
#include "attn/cpu_info.h"
#include "attn/threading.h"
#include "ops/server_log.h"
#include "wire/secret_files.h"

namespace attn::server {
namespace {

constexpr const char* kServiceName = "attention.v1.AttentionService";
constexpr const char* kSessionServiceName = "attention.v1.SessionService";

// One small call per model, so that the first real request does not pay for
// oneDNN's kernel generation and the model is known to run.
Status WarmUp(const ModelRegistry& models, int threads) {
  for (const AttentionModel* m : models.All()) {
    const ModelInfo& info = m->info();
    const int64_t l = 8;
    std::vector<float> q(l * info.embed_dim, 0.1f), k(l * info.kdim, 0.1f), v(l * info.vdim, 0.1f);
    MultiHeadAttentionOptions opt;
    opt.num_heads = info.num_heads;
    opt.num_kv_heads = info.num_kv_heads;
    opt.num_threads = threads;
    auto r =
        MultiHeadAttention(m->projections(), TensorView::Dense(q.data(), {1, l, info.embed_dim}),
                           TensorView::Dense(k.data(), {1, l, info.kdim}),
                           TensorView::Dense(v.data(), {1, l, info.vdim}), opt);
    if (!r.ok()) {
      return Status(r.status().code(),
                    "warm-up of model '" + info.name + "' failed: " + r.status().message());
    }
  }
  return Status::Ok();
}

// The start-up line: where, how many threads, and the engine's tiers.
// 127.0.0.0/8, ::1, localhost: nothing beyond this machine can connect.
bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

// After BuildAndStart: the Unix socket (if any) bound, and made mode 0660:
// its owner and group may connect, anyone else is refused by the kernel
// before gRPC or a token is involved.
Status CheckUnixSocket(const std::string& path, int bound) {
  if (path.empty()) return Status::Ok();
  if (bound == 0) {
    return Status::FailedPrecondition("--unix-socket: cannot listen on " + path +
                                      " (its directory missing or not writable?)");
  }
  if (chmod(path.c_str(), 0660) != 0) {
    return Status::FailedPrecondition("--unix-socket: chmod 0660 " + path + ": " +
                                      std::strerror(errno));
  }
  LogMessage(spdlog::level::info, "listening on unix:" + path + " (mode 0660)");
  return Status::Ok();
}

void LogListening(const ServerConfig& config, int port, int threads) {
  const PrecisionPolicy policy = config.limits.compute_precision;
  LogMessage(
      spdlog::level::info,
      fmt::format("listening on {}:{}; compute threads {} (CPUs this process may use: {}); "
                  "oneDNN ISA {}; core kernels {}; engine tier {} (bf16 matrix: {}, "
                  "bf16 compute: {}); --compute-precision {}",
                  config.host, port, threads, AvailableCpus(), OneDnnIsaName(),
                  IsaTierName(KernelTier()), EngineTierName(), Bf16TierName(Bf16MatrixTier()),
                  Bf16MatrixTier() != Bf16Tier::kNone ? "yes"
                  : Bf16Emulated()
                      ? "emulated (ATTN_BF16_EMULATION=1, for tests: slower than float32)"
                      : "no, every call is float32",
                  policy == PrecisionPolicy::kFloat32    ? "float32"
                  : policy == PrecisionPolicy::kBFloat16 ? "bfloat16"
                                                         : "auto"));
}

StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(const ServerConfig& config) {
  if (config.tls_cert.empty()) return grpc::InsecureServerCredentials();
  auto cert = wire::ReadPemFile("--tls-cert", config.tls_cert);
  if (!cert.ok()) return cert.status();
  auto key = wire::ReadPemFile("--tls-key", config.tls_key);
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions ssl(
      config.tls_client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                   : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  if (!config.tls_client_ca.empty()) {
    auto ca = wire::ReadPemFile("--tls-client-ca", config.tls_client_ca);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
  }
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(ssl);
}

// The listening side's limits: port sharing, streams per connection, the
// memory quota, message sizes.
void ConfigureTransport(const ServerConfig& config, grpc::ServerBuilder* builder) {
  // gRPC sets SO_REUSEPORT by default: a second server on a busy port would
  // silently share it. A port in use must be an error instead.
  builder->AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Streams one connection may have open at once (the HTTP/2 setting; gRPC's
  // own default is unlimited). gRPC clients queue calls past it; a client
  // that opens more anyway loses its connection.
  builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, config.max_streams);
  // gRPC charges its read buffers, and so the requests, to this quota; under
  // pressure it shrinks its windows and closes idle connections. (It does
  // not count answers: HeldMemory does.)
  grpc::ResourceQuota quota("attention-server");
  quota.Resize(static_cast<size_t>(config.memory_quota_bytes));
  builder->SetResourceQuota(quota);
  builder->SetMaxReceiveMessageSize(static_cast<int>(config.limits.max_message_bytes));
  builder->SetMaxSendMessageSize(static_cast<int>(config.limits.max_message_bytes));
}

}  // namespace

StatusOr<std::unique_ptr<AttentionServer>> AttentionServer::Start(const ServerConfig& config) {
  std::unique_ptr<AttentionServer> s(new AttentionServer());
  s->config_ = config;
  ConfigureLogging(config.log_level, config.log_format);
  if (const char* isa = std::getenv("ATTN_MAX_ISA"); isa != nullptr && !ParseIsaTier(isa)) {
    return Status::InvalidArgument(
        std::string("ATTN_MAX_ISA: expected avx512, avx2 or portable, got '") + isa + "'");
  }
  if (config.model_dir.empty()) {
    s->models_ = std::make_unique<ModelRegistry>(ModelRegistry::Demo());
  } else {
    auto loaded = ModelRegistry::FromDirectory(config.model_dir);
    if (!loaded.ok()) return loaded.status();
    s->models_ = std::make_unique<ModelRegistry>(std::move(*loaded));
  }
  const int threads = config.threads > 0 ? config.threads : AvailableCpus();
  SetComputeThreads(threads);
  s->scheduler_ = std::make_unique<ComputeScheduler>(threads, config.max_queue);
  if (!config.auth_token_file.empty()) {
    s->auth_ = std::make_unique<TokenAuth>();
    ATTN_RETURN_IF_ERROR(s->auth_->Load(config.auth_token_file));
  }
  if (config.metrics_port >= 0) {  // without it nothing reads the counters: calls skip them
    std::vector<ModelInfo> infos;
    for (const AttentionModel* m : s->models_->All()) infos.push_back(m->info());
    s->metrics_ = std::make_unique<ServerMetrics>(std::move(infos));
  }
  s->held_ = std::make_unique<HeldMemory>(config.memory_quota_bytes);
  ServiceOptions options;
  options.held = s->held_.get();
  options.models = s->models_.get();
  options.scheduler = s->scheduler_.get();
  options.limits = config.limits;
  options.max_inflight = config.max_inflight;
  options.auth = s->auth_.get();
  // Mutual TLS without tokens: a client certificate's subject names the caller.
  options.certificate_principals = !config.tls_client_ca.empty();
  options.metrics = s->metrics_.get();
  s->dispatcher_ = std::make_unique<CallDispatcher>(options);
  s->service_ = std::make_unique<AttentionServiceImpl>(s->dispatcher_.get());
  s->StartSessions();
  ATTN_RETURN_IF_ERROR(s->sessions_->reserve_status());  // never SERVING with no pool
  s->oip_service_ = std::make_unique<OipServiceImpl>(s->dispatcher_.get(), &s->ready_);
  auto credentials = Credentials(config);
  if (!credentials.ok()) return credentials.status();

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string address = config.host + ":" + std::to_string(config.port);
  ConfigureTransport(config, &builder);
  builder.AddListeningPort(address, *credentials, &s->port_);
  int unix_bound = 0;
  if (!config.unix_socket.empty()) {
    // gRPC removes a stale socket file before binding.
    builder.AddListeningPort("unix:" + config.unix_socket, *credentials, &unix_bound);
  }
  builder.RegisterService(s->service_.get());
  builder.RegisterService(s->oip_service_.get());
  builder.RegisterService(s->session_service_.get());
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->port_ == 0) {
    return Status::FailedPrecondition("cannot listen on " + address +
                                      " (in use, or a bad address?)");
  }
  ATTN_RETURN_IF_ERROR(CheckUnixSocket(config.unix_socket, unix_bound));
  s->SetServing(false);
  if (s->metrics_) {
    AttentionServer* self = s.get();
    auto http = MetricsHttpServer::Start(config.host, config.metrics_port,
                                         [self] { return self->RenderMetrics(); });
    if (!http.ok()) return http.status();
    s->metrics_http_ = std::move(*http);
  }
  if (config.http_port >= 0) {
    OipHttpOptions http;
    http.host = config.host;
    http.port = config.http_port;
    http.tls_cert = config.tls_cert, http.tls_key = config.tls_key;
    http.tls_client_ca = config.tls_client_ca;
    // Handler threads wait for compute or run a small call under the
    // scheduler's CPU budget: more of them than CPUs adds no compute.
    http.threads = std::max(4, 2 * threads);
    http.max_body_bytes = config.limits.max_message_bytes;
    http.calls = s->dispatcher_.get();
    http.ready = &s->ready_;
    auto started = OipHttpServer::Start(http);
    if (!started.ok()) return started.status();
    s->oip_http_ = std::move(*started);
  }
  const auto t0 = std::chrono::steady_clock::now();
  ATTN_RETURN_IF_ERROR(WarmUp(*s->models_, threads));
  LogListening(config, s->port_, threads);
  s->LogSessionPool();
  s->LogTransport();
  for (const AttentionModel* m : s->models_->All()) {
    const ModelInfo& i = m->info();
    LogMessage(spdlog::level::info,
               fmt::format("model {}: kind={} embed_dim={} num_heads={} num_kv_heads={} kdim={} "
                           "vdim={}",
                           i.name, ModelKindName(i.kind), i.embed_dim, i.num_heads, i.num_kv_heads,
                           i.kdim, i.vdim));
  }
  LogMessage(
      spdlog::level::info,
      fmt::format("{} models warmed up in {:.0f} ms; SERVING", s->models_->All().size(),
                  std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                      .count()));
  s->StartSessionExpiry();
  s->ready_ = true;
  s->SetServing(true);
  return s;
}

AttentionServer::~AttentionServer() {
  Shutdown(std::chrono::milliseconds(0));
  StopSessionExpiry();
  // Join the compute workers before the service and the gRPC server go: a
  // worker returns from its last job (after Finish) on its own schedule.
  scheduler_.reset();
}

std::shared_ptr<grpc::Channel> AttentionServer::InProcessChannel() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(config_.limits.max_message_bytes));
  args.SetMaxSendMessageSize(static_cast<int>(config_.limits.max_message_bytes));
  return server_->InProcessChannel(args);
}

void AttentionServer::SetServing(bool serving) {
  if (auto* health = server_->GetHealthCheckService()) {
    health->SetServingStatus("", serving);
    health->SetServingStatus(kServiceName, serving);
    // A full KV-cache pool is not an unhealthy server: sessions follow the server.
    health->SetServingStatus(kSessionServiceName, serving);
  }
}

void AttentionServer::Shutdown(std::chrono::milliseconds grace) {
  if (shut_down_ || !server_) return;
  shut_down_ = true;
  ready_ = false;
  SetServing(false);
  oip_http_.reset();  // its calls finish first: they use the service
  server_->Shutdown(std::chrono::system_clock::now() + grace);
  server_->Wait();
  metrics_http_.reset();
  StopSessionExpiry();
}

void AttentionServer::StartSessions() {
  KvStoreOptions kv;
  kv.pool_bytes = config_.kv_cache_bytes;
  kv.max_sessions = config_.max_sessions;
  kv.max_sessions_per_owner = config_.max_sessions_per_principal;
  kv.pool_bytes_per_owner = config_.kv_cache_bytes_per_principal;
  kv.default_max_tokens = config_.max_session_tokens;
  sessions_ = std::make_unique<KvCacheStore>(kv);
  session_metrics_ = std::make_unique<SessionMetrics>();
  session_service_ = std::make_unique<SessionServiceImpl>(dispatcher_.get(), sessions_.get(),
                                                          session_metrics_.get());
}

void AttentionServer::LogTransport() const {
  LogMessage(
      spdlog::level::info,
      fmt::format(
          "transport {}; bearer tokens {}; metrics {}; OIP HTTP {}; max in flight {}, "
          "queued {}",
          config_.tls_cert.empty()        ? "plaintext"
          : config_.tls_client_ca.empty() ? "TLS"
                                          : "mutual TLS",
          auth_ ? std::to_string(auth_->size()) + " loaded" : "off",
          metrics_http_ ? fmt::format("http://{}:{}/metrics", config_.host, metrics_http_->port())
                        : "off",
          oip_http_ ? fmt::format("{}://{}:{}/v2", config_.tls_cert.empty() ? "http" : "https",
                                  config_.host, oip_http_->port())
                    : "off",
          config_.max_inflight, config_.max_queue));
  if (!IsLoopbackHost(config_.host) && config_.tls_cert.empty() && !auth_) {
    LogMessage(spdlog::level::warn,
               fmt::format("listening on {} beyond loopback with neither TLS nor "
                           "--auth-token-file: every caller is the same anonymous principal and "
                           "can read, change and delete every session",
                           config_.host));
  }
}

void AttentionServer::LogSessionPool() const {
  LogMessage(spdlog::level::info,
             fmt::format("KV-cache sessions: pool {} MiB in pages of {} KiB, their metadata at "
                         "most {} MiB, at most {} sessions of {} tokens a layer, idle timeout {}",
                         sessions_->bytes_limit() >> 20, sessions_->options().page_bytes >> 10,
                         sessions_->metadata_bytes_limit() >> 20, config_.max_sessions,
                         config_.max_session_tokens,
                         config_.session_idle_timeout_s > 0
                             ? fmt::format("{:g} s", config_.session_idle_timeout_s)
                             : std::string("off")));
}

void AttentionServer::StartSessionExpiry() {
  if (config_.session_idle_timeout_s <= 0) return;
  const auto idle = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(config_.session_idle_timeout_s));
  // Checked a few times per timeout (at least once a second), so a session
  // lives at most a quarter timeout (or a second) past its expiry.
  const auto every =
      std::min<std::chrono::steady_clock::duration>(idle / 4, std::chrono::seconds(1));
  expiry_ = std::thread([this, idle, every] {
    std::unique_lock<std::mutex> lock(expiry_mu_);
    while (!expiry_stop_) {
      expiry_cv_.wait_for(lock, std::max<std::chrono::steady_clock::duration>(
                                    every, std::chrono::milliseconds(10)));
      if (expiry_stop_) break;
      const std::vector<KvSessionInfo> gone = sessions_->ExpireIdle(idle);
      if (gone.empty()) continue;
      // One line per owner: how many of its sessions expired, and which.
      std::map<std::string, std::vector<std::string>> by_owner;
      for (const KvSessionInfo& info : gone) {
        session_metrics_->RecordExpired(info.spec.owner);
        by_owner[info.spec.owner].push_back(info.spec.session_id);
      }
      for (const auto& [owner, ids] : by_owner) {
        std::string list;
        for (size_t i = 0; i < ids.size() && i < 16; ++i) list += (i ? "," : "") + ids[i];
        if (ids.size() > 16) list += ",...";
        LogMessage(spdlog::level::info,
                   fmt::format("expired {} idle KV-cache sessions of principal '{}' "
                               "(--session-idle-timeout): {}",
                               ids.size(), owner.empty() ? "-" : owner, list));
      }
    }
  });
}

void AttentionServer::StopSessionExpiry() {
  {
    std::lock_guard<std::mutex> lock(expiry_mu_);
    expiry_stop_ = true;
  }
  expiry_cv_.notify_all();
  if (expiry_.joinable()) expiry_.join();
}

std::string AttentionServer::RenderMetrics() const {
  MetricsGauges g;
  g.in_flight = dispatcher_->calls_in_flight();
  g.queued = scheduler_->queued();
  g.running = scheduler_->running();
  g.compute_threads = scheduler_->cpus();
  g.max_inflight = config_.max_inflight;
  g.max_queue = config_.max_queue;
  g.calls_skipped = dispatcher_->calls_skipped();
  g.held_bytes = held_->held();
  g.held_connections = held_->connections();
  g.memory_quota_bytes = held_->quota();
  SessionGauges sg;
  sg.sessions = sessions_->num_sessions();
  sg.max_sessions = config_.max_sessions;
  sg.bytes_used = sessions_->bytes_used();
  sg.bytes_limit = sessions_->bytes_limit();
  sg.metadata_bytes = sessions_->metadata_bytes();
  sg.metadata_limit = sessions_->metadata_bytes_limit();
  sg.owners = sessions_->Owners();
  for (const KvSessionInfo& i : sessions_->ListAll()) {
    auto& f = sg.by_format[{CacheFormatName(i.spec.key_format, i.spec.cache_type),
                            CacheFormatName(i.spec.value_format, i.spec.cache_type)}];
    ++f.first;
    f.second += i.cache_bytes;
  }
  return metrics_->Render(g) + session_metrics_->Render(sg);
}

Status AttentionServer::ReloadTokens() {
  if (!auth_) return Status::FailedPrecondition("no --auth-token-file to reload");
  Status st = auth_->Reload();
  LogMessage(st.ok() ? spdlog::level::info : spdlog::level::warn,
             st.ok() ? fmt::format("reloaded --auth-token-file: {} tokens of {} principals",
                                   auth_->size(), auth_->names().size())
                     : "token reload failed, keeping the old tokens: " + st.message());
  return st;
}

void AttentionServer::Wait() { server_->Wait(); }

}  // namespace attn::server
