#include "oip/oip_http.h"

#include <httplib.h>
#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <future>
#include <memory>

#include "attn/json.h"
#include "call/prepared_call.h"
#include "oip/oip_adapter.h"
#include "oip/oip_json.h"
#include "wire/timing_trailer.h"

namespace attn::server {
namespace {

constexpr char kJson[] = "application/json";
constexpr char kHeaderLength[] = "Inference-Header-Content-Length";

void Reply(httplib::Response& res, int status, const std::string& json) {
  res.status = status;
  res.set_content(json, kJson);
}

void ReplyError(httplib::Response& res, int status, const std::string& message) {
  Reply(res, status, oip::ErrorJson(message));
  if (status == 429) res.set_header("Retry-After", "1");
  if (status == 401) res.set_header("WWW-Authenticate", "Bearer");
}

std::string Peer(const httplib::Request& req) {
  return "http:" + req.remote_addr + ":" + std::to_string(req.remote_port);
}

// One HTTP infer call on the shared path. Finish() runs on whichever thread
// ran the call (or inline in Dispatch); the handler thread waits for it.
class HttpCall final : public CallTransport {
 public:
  // bytes_in: the body's size (the content reader's; req.body stays empty).
  HttpCall(CallDispatcher* calls, const httplib::Request& req, int64_t bytes_in)
      : calls_(calls), req_(req), bytes_in_(bytes_in) {}

  inference::ModelInferRequest request;
  inference::ModelInferResponse response;
  oip::HttpOutputs outputs;

  std::chrono::system_clock::time_point deadline() const override {
    return std::chrono::system_clock::time_point::max();
  }

  void Finish(const Status& st, Clock::time_point began) override {
    status_ = st;
    if (st.ok()) body_ = oip::InferResponseBody(response, outputs, &json_length_);
    if (began != Clock::time_point{}) {
      timing_ = wire::TimingTrailerValue(began - start(), Clock::now() - began);
    }
    const httplib::Request& req = req_;
    const PreparedCall* c = call().get();
    calls_->Completed(Rpc::kHttpInfer, c, c->authenticated ? &c->principal : nullptr, st, start(),
                      began, bytes_in_, static_cast<int64_t>(st.ok() ? body_.size() : 0),
                      [&req] { return Peer(req); });
    done_.set_value();
  }

  // Waits for Finish(), then writes the answer.
  void Answer(httplib::Response& res) {
    done_.get_future().wait();
    if (!timing_.empty()) res.set_header(wire::kTimingTrailer, timing_);
    if (!status_.ok()) {
      return ReplyError(res, HttpStatusOf(status_, admission_refused()), status_.message());
    }
    res.status = 200;
    if (json_length_ >= 0) {
      res.set_header(kHeaderLength, std::to_string(json_length_));
      res.set_content(std::move(body_), "application/octet-stream");
    } else {
      res.set_content(std::move(body_), kJson);
    }
  }

 private:
  CallDispatcher* const calls_;
  const httplib::Request& req_;
  const int64_t bytes_in_;
  Status status_;
  std::string body_, timing_;
  int64_t json_length_ = -1;
  std::promise<void> done_;
};

// A verified client certificate's subject, RFC 2253, as gRPC gives it
// ("CN=team-a,O=example"); "" without one.
std::string CertificateSubject(const httplib::Request& req) {
  if (req.ssl == nullptr) return "";
  // The handshake verified it against --tls-client-ca when one is set.
  if (SSL_get_verify_result(req.ssl) != X509_V_OK) return "";
  std::unique_ptr<X509, decltype(&X509_free)> cert(SSL_get_peer_certificate(req.ssl), X509_free);
  if (cert == nullptr) return "";
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  if (bio == nullptr ||
      X509_NAME_print_ex(bio.get(), X509_get_subject_name(cert.get()), 0, XN_FLAG_RFC2253) < 0) {
    return "";
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : std::string();
}

// What an HTTP request tells of its caller (the header kept in `storage`).
CallerCredentials CredentialsOf(const httplib::Request& req, std::string* storage) {
  CallerCredentials who;
  if (req.has_header("Authorization")) {
    *storage = req.get_header_value("Authorization");
    who.authorization = storage;
  }
  who.certificate_subject = CertificateSubject(req);
  return who;
}

// POST .../infer: the token, the body, then the shared call path.
void Infer(CallDispatcher* calls, const httplib::Request& req, const std::string& body,
           httplib::Response& res) {
  int64_t json_length = -1;
  if (req.has_header(kHeaderLength)) {
    const std::string v = req.get_header_value(kHeaderLength);
    char* end = nullptr;
    json_length = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || json_length < 0) {
      return ReplyError(res, 400,
                        std::string(kHeaderLength) + ": expected a byte count, got '" + v + "'");
    }
  }
  auto call = std::make_unique<HttpCall>(calls, req, static_cast<int64_t>(body.size()));
  std::string storage;
  const CallerCredentials who = CredentialsOf(req, &storage);
  // The token before the body is even parsed.
  const StatusOr<Principal> principal = calls->Authenticate(who);
  Status st = principal.status();
  if (st.ok()) {
    st = oip::ParseInferRequest(body, json_length, req.matches[1], req.matches[2], &call->request,
                                &call->outputs);
  }
  if (!st.ok()) {  // counted and logged like any refused call
    calls->Completed(
        Rpc::kHttpInfer, nullptr, principal.ok() ? &*principal : nullptr, st, call->start(), {},
        static_cast<int64_t>(body.size()), 0, [&req] { return Peer(req); }, false);
    return ReplyError(res, HttpStatusOf(st, false), st.message());
  }
  HttpCall* c = call.get();
  calls->Dispatch(c, who, [calls, c](PreparedCall* p) {
    const ServiceOptions& o = calls->options();
    return oip::PrepareInfer(c->request, *o.models, o.limits, p, &c->response);
  });
  c->Answer(res);
}

}  // namespace

int HttpStatusOf(const Status& st, bool admission) {
  switch (st.code()) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kOutOfRange:
      return 400;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kResourceExhausted:
      return admission ? 429 : 413;
    case StatusCode::kUnimplemented:
      return 501;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

StatusOr<std::unique_ptr<OipHttpServer>> OipHttpServer::Start(const OipHttpOptions& options) {
  std::unique_ptr<OipHttpServer> s(new OipHttpServer());
  s->options_ = options;
  if (options.tls_cert.empty()) {
    s->http_ = std::make_unique<httplib::Server>();
  } else {
    auto ssl = std::make_unique<httplib::SSLServer>(
        options.tls_cert.c_str(), options.tls_key.c_str(),
        options.tls_client_ca.empty() ? nullptr : options.tls_client_ca.c_str());
    if (!ssl->is_valid()) {
      return Status::InvalidArgument(
          "--http-port: cannot use --tls-cert/--tls-key" +
          std::string(options.tls_client_ca.empty() ? "" : "/--tls-client-ca") + " for HTTPS");
    }
    s->http_ = std::move(ssl);
  }
  const int threads = std::max(1, options.threads);
  s->http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // Refused from Content-Length, before the body is read (413).
  s->http_->set_payload_max_length(static_cast<size_t>(options.max_body_bytes));
  s->http_->set_socket_options([](int sock) {  // an error, not a shared port, when busy
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  s->Routes();
  const bool bound = options.port == 0 ? (s->port_ = s->http_->bind_to_any_port(options.host)) > 0
                                       : s->http_->bind_to_port(options.host, options.port);
  if (!bound) {
    return Status::FailedPrecondition("--http-port: cannot listen on " + options.host + ":" +
                                      std::to_string(options.port) +
                                      " (in use, or a bad address?)");
  }
  if (options.port != 0) s->port_ = options.port;
  httplib::Server* http = s->http_.get();
  s->thread_ = std::thread([http] { http->listen_after_bind(); });
  return s;
}

OipHttpServer::~OipHttpServer() {
  if (http_) http_->stop();
  if (thread_.joinable()) thread_.join();
}

void OipHttpServer::Routes() {
  CallDispatcher* calls = options_.calls;
  const std::atomic<bool>* ready = options_.ready;
  const ModelRegistry* models = calls->options().models;
  // Metadata calls: the token (health aside, for probes), then `answer`,
  // then metrics and the access line.
  auto simple = [calls](const httplib::Request& req, httplib::Response& res, bool authenticate,
                        const std::function<Status(std::string*)>& answer) {
    const auto start = Clock::now();
    std::string storage, body;
    StatusOr<Principal> who = Principal{};
    if (authenticate) who = calls->Authenticate(CredentialsOf(req, &storage));
    Status st = who.status();
    if (st.ok()) st = answer(&body);
    if (st.ok()) {
      Reply(res, 200, body);
    } else {
      ReplyError(res, HttpStatusOf(st, false), st.message());
    }
    calls->Completed(
        Rpc::kHttpMetadata, nullptr, who.ok() ? &*who : nullptr, st, start, {}, 0,
        static_cast<int64_t>(res.body.size()), [&req] { return Peer(req); }, false);
  };
  http_->Get("/v2/health/live", [simple](const httplib::Request& req, httplib::Response& res) {
    simple(req, res, false, [](std::string* body) {
      *body = "{\"live\":true}";
      return Status::Ok();
    });
  });
  http_->Get("/v2/health/ready",
             [simple, ready](const httplib::Request& req, httplib::Response& res) {
               simple(req, res, false, [ready](std::string* body) {
                 if (!ready->load()) return Status::Unavailable("not ready: models warming up");
                 *body = "{\"ready\":true}";
                 return Status::Ok();
               });
             });
  http_->Get("/v2", [simple](const httplib::Request& req, httplib::Response& res) {
    simple(req, res, true, [](std::string* body) {
      inference::ServerMetadataResponse m;
      oip::ServerMetadata(&m);
      *body = oip::ServerMetadataJson(m);
      return Status::Ok();
    });
  });
  const char* model_path = R"(/v2/models/([^/]+)(?:/versions/([^/]+))?)";
  http_->Get(std::string(model_path) + "/ready",
             [simple, ready, models](const httplib::Request& req, httplib::Response& res) {
               simple(req, res, true, [&](std::string* body) {
                 ATTN_RETURN_IF_ERROR(oip::CheckModel(*models, req.matches[1], req.matches[2]));
                 *body = "{\"name\":" + JsonQuote(req.matches[1].str()) +
                         ",\"ready\":" + (ready->load() ? "true" : "false") + "}";
                 return Status::Ok();
               });
             });
  http_->Get(model_path, [simple, models](const httplib::Request& req, httplib::Response& res) {
    simple(req, res, true, [&](std::string* body) {
      inference::ModelMetadataRequest r;
      r.set_name(req.matches[1]);
      r.set_version(req.matches[2]);
      inference::ModelMetadataResponse m;
      ATTN_RETURN_IF_ERROR(oip::ModelMetadata(*models, r, &m));
      *body = oip::ModelMetadataJson(m);
      return Status::Ok();
    });
  });
  // With a content reader, httplib reads the body for us whatever its
  // Content-Type: its own body reading caps form-urlencoded bodies (curl -d's
  // default) at 8 KiB. The size limit still applies before reading (413).
  http_->Post(
      std::string(model_path) + "/infer",
      [calls, max_body = options_.max_body_bytes](
          const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& read) {
        std::string body;
        const bool whole = read([&body](const char* data, size_t n) {
          body.append(data, n);
          return true;
        });
        if (!whole) {  // over the limit (refused before reading), or cut short
          return ReplyError(res, res.status == 413 ? 413 : 400,
                            res.status == 413
                                ? "body: over the size limit of " + std::to_string(max_body) +
                                      " bytes (--max-message-mb)"
                                : "body: cut short");
        }
        Infer(calls, req, body, res);
      });
  // Anything else, and refusals httplib makes itself (413 over the size
  // limit, 404), get a JSON error body too.
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string what = res.status == 404 ? "no such endpoint: " + req.method + " " + req.path
                             : res.status == 413 ? "body: over the size limit (--max-message-mb)"
                                                 : "HTTP " + std::to_string(res.status);
    res.set_content(oip::ErrorJson(what), kJson);
  });
}

}  // namespace attn::server
