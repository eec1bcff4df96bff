#include "ops/metrics_http.h"

#include <httplib.h>

namespace attn::server {

StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& host, int port, std::function<std::string()> render) {
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer());
  s->http_ = std::make_unique<httplib::Server>();
  // One worker: scrapes are rare, and the CPUs belong to compute.
  s->http_->new_task_queue = [] { return new httplib::ThreadPool(1); };
  // httplib sets SO_REUSEPORT by default, so a busy port would be shared
  // silently; SO_REUSEADDR only, so that it is an error.
  s->http_->set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  s->http_->Get("/metrics",
                [render = std::move(render)](const httplib::Request&, httplib::Response& res) {
                  res.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
                });
  s->http_->Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("attention-server: Prometheus metrics at /metrics\n", "text/plain");
  });
  const bool bound = port == 0 ? (s->port_ = s->http_->bind_to_any_port(host)) > 0
                               : s->http_->bind_to_port(host, port);
  if (!bound) {
    return Status::FailedPrecondition("--metrics-port: cannot listen on " + host + ":" +
                                      std::to_string(port) + " (in use, or a bad address?)");
  }
  if (port != 0) s->port_ = port;
  httplib::Server* http = s->http_.get();
  s->thread_ = std::thread([http] { http->listen_after_bind(); });
  return s;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (http_) http_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace attn::server
