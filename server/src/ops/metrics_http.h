// A small HTTP server (cpp-httplib, one thread) that serves GET /metrics
// in Prometheus text format. Kept apart from the gRPC server: a scrape never
// waits for compute, and calls never wait for a scrape.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "attn/status.h"

namespace httplib {
class Server;
}

namespace attn::server {

class MetricsHttpServer {
 public:
  // Listens on host:port (0: a free port) and serves `render()` at /metrics.
  static StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& host, int port,
                                                            std::function<std::string()> render);
  ~MetricsHttpServer();  // stops and joins
  int port() const { return port_; }

 private:
  MetricsHttpServer() = default;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace attn::server
