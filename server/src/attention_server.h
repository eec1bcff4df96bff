// A running attention-server: models, compute scheduler, the gRPC server with
// AttentionService, the Open Inference Protocol's GRPCInferenceService,
// grpc.health.v1 and server reflection. Used by main() and,
// in-process, by the tests.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "attention_v1/attention_service.h"
#include "attn/status.h"
#include "call/compute_scheduler.h"
#include "call/dispatch.h"
#include "call/held_memory.h"
#include "models/model_registry.h"
#include "oip/oip_http.h"
#include "oip/oip_service.h"
#include "ops/metrics_http.h"
#include "ops/server_metrics.h"
#include "ops/token_auth.h"
#include "server_config.h"
#include "sessions/session_service.h"

namespace attn::server {

class AttentionServer {
 public:
  // Loads the models (the demo set without a model dir), starts listening
  // with health NOT_SERVING, warms every model up, then reports SERVING.
  // Fails with the reason (bad model file, port in use, ...).
  static StatusOr<std::unique_ptr<AttentionServer>> Start(const ServerConfig& config);
  ~AttentionServer();

  int port() const { return port_; }
  const ModelRegistry& models() const { return *models_; }
  int compute_threads() const { return scheduler_->cpus(); }
  // The compute scheduler (tests hold its CPUs to keep calls waiting).
  ComputeScheduler& scheduler() const { return *scheduler_; }
  // The KV-cache sessions (tests look at the pool).
  KvCacheStore& sessions() const { return *sessions_; }
  // Calls computing or waiting for a CPU.
  int calls_in_flight() const { return scheduler_->running() + scheduler_->queued(); }
  // The port of /metrics, or -1 when --metrics-port is off.
  int metrics_port() const { return metrics_http_ ? metrics_http_->port() : -1; }
  // The port of the OIP HTTP/JSON API, or -1 when --http-port is off.
  int http_port() const { return oip_http_ ? oip_http_->port() : -1; }
  // Reads --auth-token-file again (SIGHUP). On error the old tokens stay.
  Status ReloadTokens();
  // Calls that arrived so far, and those not yet answered (see the service).
  int64_t calls_arrived() const { return dispatcher_->calls_arrived(); }
  int calls_unanswered() const { return dispatcher_->calls_in_flight(); }
  // Calls dropped unanswered because their client gave up while they waited.
  int64_t calls_skipped() const { return dispatcher_->calls_skipped(); }
  // A channel to this server that bypasses the network.
  std::shared_ptr<grpc::Channel> InProcessChannel();
  // Health for "" and "attention.v1.AttentionService".
  void SetServing(bool serving);
  // Stops accepting calls and waits for those in flight, cancelling any still
  // running after `grace`. Idempotent.
  void Shutdown(std::chrono::milliseconds grace);
  // Blocks until the server has shut down.
  void Wait();

 private:
  AttentionServer() = default;
  // The Prometheus text /metrics serves (only with --metrics-port).
  std::string RenderMetrics() const;
  // The KV-cache store and its service (before the gRPC server is built).
  void StartSessions();
  void LogSessionPool() const;
  // The transport, tokens and listeners; a warning when anyone beyond
  // loopback may call without TLS or tokens.
  void LogTransport() const;
  // The thread that expires idle sessions (--session-idle-timeout).
  void StartSessionExpiry();
  void StopSessionExpiry();

  ServerConfig config_;
  std::unique_ptr<ModelRegistry> models_;
  std::unique_ptr<ComputeScheduler> scheduler_;
  std::unique_ptr<TokenAuth> auth_;  // null without --auth-token-file
  std::unique_ptr<HeldMemory> held_;
  std::unique_ptr<ServerMetrics> metrics_;  // null without --metrics-port
  std::unique_ptr<CallDispatcher> dispatcher_;
  std::unique_ptr<AttentionServiceImpl> service_;
  std::unique_ptr<OipServiceImpl> oip_service_;
  std::unique_ptr<KvCacheStore> sessions_;  // the KV-cache sessions
  std::unique_ptr<SessionMetrics> session_metrics_;
  std::unique_ptr<SessionServiceImpl> session_service_;
  std::thread expiry_;
  std::mutex expiry_mu_;
  std::condition_variable expiry_cv_;
  bool expiry_stop_ = false;
  std::atomic<bool> ready_{false};  // every model loaded and warmed up (OIP ServerReady)
  std::unique_ptr<MetricsHttpServer> metrics_http_;
  std::unique_ptr<OipHttpServer> oip_http_;  // null without --http-port
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace attn::server
