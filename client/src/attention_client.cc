#include "attention_client.h"

#include <grpcpp/support/client_interceptor.h>

#include <cstdio>
#include <cstdlib>

#include "oip_call.h"
#include "wire/secret_files.h"
#include "wire/status_mapping.h"

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
    auto ca = wire::ReadPemFile("--tls-ca", o.tls_ca);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
  }
  if (!o.tls_cert.empty()) {
    auto cert = wire::ReadPemFile("--tls-cert", o.tls_cert);
    if (!cert.ok()) return cert.status();
    auto key = wire::ReadPemFile("--tls-key", o.tls_key);
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

StatusOr<std::shared_ptr<grpc::Channel>> OpenConnectedChannel(const std::string& target,
                                                              const ChannelOptions& options,
                                                              std::chrono::milliseconds wait,
                                                              grpc::ChannelArguments args) {
  auto channel = OpenChannel(target, options, std::move(args));
  if (!channel.ok()) return channel.status();
  if (!(*channel)->WaitForConnected(std::chrono::system_clock::now() + wait)) {
    return Status::Unavailable("no connection to " + target + " within " +
                               std::to_string(wait.count()) + " ms");
  }
  return channel;
}

std::shared_ptr<grpc::Channel> Connect(const std::string& target, const ChannelOptions& options) {
  auto channel = OpenChannel(target, options);
  if (!channel.ok()) {  // only PEM files can fail; callers with files use OpenChannel
    std::fprintf(stderr, "attention-client: %s\n", channel.status().message().c_str());
    std::abort();
  }
  return *channel;
}

AttentionClient::AttentionClient(std::shared_ptr<grpc::Channel> channel)
    : stub_(attention::v1::AttentionService::NewStub(channel)),
      health_(grpc::health::v1::Health::NewStub(channel)),
      oip_(inference::GRPCInferenceService::NewStub(channel)) {}

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

grpc::Status AttentionClient::Call(const AttentionCall& call,
                                   attention::v1::AttentionResponse* resp,
                                   std::chrono::milliseconds timeout) {
  if (call.oip) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, timeout);
    inference::ModelInferResponse infer;
    grpc::Status st = oip_->ModelInfer(&ctx, call.infer, &infer);
    if (!st.ok()) return st;
    return wire::ToGrpcStatus(FromOipResponse(infer, resp));
  }
  if (call.op == "cross") return CrossAttention(call.cross, resp, timeout);
  if (call.op == "mha") return MultiHeadAttention(call.mha, resp, timeout);
  return Attention(call.attention, resp, timeout);
}

StatusOr<attention::v1::ModelInfo> AttentionClient::FindModel(const std::string& name,
                                                              std::chrono::milliseconds timeout) {
  attention::v1::ListModelsResponse models;
  auto st = ListModels(&models, timeout);
  if (!st.ok()) return wire::FromGrpcStatus(st);
  for (const auto& m : models.models()) {
    if (m.name() == name) return m;
  }
  return Status::NotFound("--model: the server has no model '" + name + "'");
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

}  // namespace attn::client
