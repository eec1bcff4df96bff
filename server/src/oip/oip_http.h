// The Open Inference Protocol over HTTP/JSON (cpp-httplib), on --http-port:
//   GET  /v2/health/live, /v2/health/ready, /v2
//   GET  /v2/models/{name}[/versions/{v}], .../ready
//   POST /v2/models/{name}[/versions/{v}]/infer   (JSON, or the binary
//        tensor data extension: Inference-Header-Content-Length)
// An infer call takes the same path as a gRPC one (CallDispatcher::Dispatch,
// call/dispatch.h): token, admission, limits, CPU budget, metrics, access log. The
// handler threads wait for compute on the scheduler or, for a small call,
// run it under the scheduler's CPU budget, so they never add compute
// threads. Errors are {"error": "..."}: 400 bad input, 401 token, 404
// unknown model or path, 413 over a limit, 429 admission refused (with
// Retry-After), 504 deadline.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "attn/status.h"
#include "call/dispatch.h"

namespace httplib {
class Server;
}

namespace attn::server {

struct OipHttpOptions {
  std::string host;
  int port = 0;  // 0: a free port
  // TLS as the gRPC port has it: certificate and key; with a client CA,
  // clients must present a certificate it signed.
  std::string tls_cert, tls_key, tls_client_ca;
  int threads = 4;
  int64_t max_body_bytes = 64 << 20;
  CallDispatcher* calls = nullptr;           // must outlive the server
  const std::atomic<bool>* ready = nullptr;  // every model loaded and warmed up
};

class OipHttpServer {
 public:
  static StatusOr<std::unique_ptr<OipHttpServer>> Start(const OipHttpOptions& options);
  ~OipHttpServer();  // stops and joins
  int port() const { return port_; }

 private:
  OipHttpServer() = default;
  void Routes();

  OipHttpOptions options_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
};

// The HTTP status for a call's status; `admission`: refused by admission.
int HttpStatusOf(const Status& st, bool admission);

}  // namespace attn::server
