#include "attention_client.h"

#include <grpcpp/support/client_interceptor.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "attn/files.h"

namespace attn::client {
namespace {

// Adds `authorization: Bearer <token>` to every call on the channel.
class BearerTokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", *header_});
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;
};

class BearerTokenFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenFactory(const std::string& token) : header_("Bearer " + token) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new BearerTokenInterceptor(&header_);
  }

 private:
  const std::string header_;  // lives as long as the channel (which owns the factory)
};

StatusOr<std::shared_ptr<grpc::ChannelCredentials>> Credentials(const ChannelOptions& o) {
  if (!o.UsesTls()) return grpc::InsecureChannelCredentials();
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    return Status::InvalidArgument("--tls-cert and --tls-key go together");
  }
  grpc::SslCredentialsOptions ssl;
  if (!o.tls_ca.empty()) {
    auto ca = ReadPemFile("--tls-ca", o.tls_ca);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
  }
  if (!o.tls_cert.empty()) {
    auto cert = ReadPemFile("--tls-cert", o.tls_cert);
    if (!cert.ok()) return cert.status();
    auto key = ReadPemFile("--tls-key", o.tls_key);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *cert;
    ssl.pem_private_key = *key;
  }
  return grpc::SslCredentials(ssl);
}

void SetDeadline(grpc::ClientContext* ctx, std::chrono::milliseconds timeout) {
  if (timeout.count() > 0) ctx->set_deadline(std::chrono::system_clock::now() + timeout);
}

grpc::ChannelArguments AddChannelArgs(const ChannelOptions& options, grpc::ChannelArguments args) {
  args.SetMaxReceiveMessageSize(options.max_message_mb << 20);
  args.SetMaxSendMessageSize(options.max_message_mb << 20);
  if (options.retry_unavailable) {
    args.SetServiceConfigJSON(R"({"methodConfig": [{
      "name": [{"service": "attention.v1.AttentionService"}, {"service": "grpc.health.v1.Health"}],
      "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.05s", "maxBackoff": "1s",
                      "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]})");
  }
  return args;
}

}  // namespace

grpc::ChannelArguments ChannelArgs(const ChannelOptions& options) {
  return AddChannelArgs(options, grpc::ChannelArguments());
}

StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const std::string& target,
                                                     const ChannelOptions& options,
                                                     grpc::ChannelArguments args) {
  auto creds = Credentials(options);
  if (!creds.ok()) return creds.status();
  args = AddChannelArgs(options, std::move(args));
  if (options.token.empty()) return grpc::CreateCustomChannel(target, *creds, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<BearerTokenFactory>(options.token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(target, *creds, args,
                                                                 std::move(factories));
}

std::shared_ptr<grpc::Channel> Connect(const std::string& target, const ChannelOptions& options) {
  auto channel = OpenChannel(target, options);
  if (!channel.ok()) {  // only PEM files can fail; callers with files use OpenChannel
    std::fprintf(stderr, "attention-client: %s\n", channel.status().message().c_str());
    std::abort();
  }
  return *channel;
}

StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::InvalidArgument("--token-file " + path + ": cannot open");
  std::string line;
  while (std::getline(in, line)) {
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    const size_t e = line.find_last_not_of(" \t\r");
    return line.substr(b, e - b + 1);
  }
  return Status::InvalidArgument("--token-file " + path + ": no token in it");
}

AttentionClient::AttentionClient(std::shared_ptr<grpc::Channel> channel)
    : stub_(attention::v1::AttentionService::NewStub(channel)),
      health_(grpc::health::v1::Health::NewStub(channel)) {}

grpc::Status AttentionClient::Attention(const attention::v1::AttentionRequest& req,
                                        attention::v1::AttentionResponse* resp,
                                        std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  return stub_->Attention(&ctx, req, resp);
}

grpc::Status AttentionClient::CrossAttention(const attention::v1::CrossAttentionRequest& req,
                                             attention::v1::AttentionResponse* resp,
                                             std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  return stub_->CrossAttention(&ctx, req, resp);
}

grpc::Status AttentionClient::MultiHeadAttention(
    const attention::v1::MultiHeadAttentionRequest& req, attention::v1::AttentionResponse* resp,
    std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  return stub_->MultiHeadAttention(&ctx, req, resp);
}

grpc::Status AttentionClient::ListModels(attention::v1::ListModelsResponse* resp,
                                         std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  return stub_->ListModels(&ctx, attention::v1::ListModelsRequest(), resp);
}

grpc::Status AttentionClient::Health(const std::string& service, std::string* status,
                                     std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, timeout);
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status st = health_->Check(&ctx, req, &resp);
  if (st.ok()) *status = grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status());
  return st;
}

bool ServerTiming(const std::multimap<grpc::string_ref, grpc::string_ref>& trailing,
                  double* queue_us, double* compute_us) {
  *queue_us = *compute_us = -1;
  const auto it = trailing.find("attn-timing-us");
  if (it == trailing.end()) return false;
  const std::string value(it->second.data(), it->second.size());
  double queue = 0, compute = 0;
  char end = 0;
  if (std::sscanf(value.c_str(), "queue=%lf,compute=%lf%c", &queue, &compute, &end) != 2) {
    return false;
  }
  *queue_us = queue, *compute_us = compute;
  return true;
}

}  // namespace attn::client
