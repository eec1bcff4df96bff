#include "attention_client.h"

namespace attn::client {
namespace {

void SetDeadline(grpc::ClientContext* ctx, std::chrono::milliseconds timeout) {
  if (timeout.count() > 0) ctx->set_deadline(std::chrono::system_clock::now() + timeout);
}

}  // namespace

grpc::ChannelArguments ChannelArgs(const ChannelOptions& options) {
  grpc::ChannelArguments args;
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

std::shared_ptr<grpc::Channel> Connect(const std::string& target, const ChannelOptions& options) {
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(),
                                   ChannelArgs(options));
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

}  // namespace attn::client
