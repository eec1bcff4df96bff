#include "session_client.h"

#include <algorithm>
#include <random>
#include <thread>

#include "wire/status_mapping.h"

namespace attn::client {
namespace {

namespace v1 = attention::v1;

void Prepare(grpc::ClientContext* ctx, std::chrono::milliseconds timeout, const std::string& id) {
  if (timeout.count() > 0) ctx->set_deadline(std::chrono::system_clock::now() + timeout);
  // Only an id a header can carry (gRPC aborts on a control character in
  // one): anything else goes without it, and the server names the bad id.
  const bool printable =
      !id.empty() && id.size() <= 128 &&
      std::all_of(id.begin(), id.end(), [](char c) { return c > 0x20 && c < 0x7f; });
  if (printable) ctx->AddMetadata(kSessionHeader, id);
}

// One unary call of `stub` with the session header (`id`, when not empty).
template <typename Req, typename Resp, typename Method>
StatusOr<Resp> Unary(v1::SessionService::Stub* stub, Method method, const Req& req,
                     std::chrono::milliseconds timeout, const std::string& id) {
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout, id);
  Resp resp;
  const grpc::Status st = (stub->*method)(&ctx, req, &resp);
  if (!st.ok()) return wire::FromGrpcStatus(st);
  return resp;
}

v1::SessionRef Ref(const std::string& id) {
  v1::SessionRef ref;
  ref.set_session_id(id);
  return ref;
}

}  // namespace

SessionClient::SessionClient(std::shared_ptr<grpc::Channel> channel)
    : stub_(v1::SessionService::NewStub(channel)) {}

StatusOr<v1::SessionInfo> SessionClient::Create(const v1::CreateSessionRequest& req,
                                                std::chrono::milliseconds timeout) {
  return Unary<v1::CreateSessionRequest, v1::SessionInfo>(
      stub_.get(), &v1::SessionService::Stub::CreateSession, req, timeout, req.session_id());
}

StatusOr<v1::SessionInfo> SessionClient::Get(const std::string& id,
                                             std::chrono::milliseconds timeout) {
  return Unary<v1::SessionRef, v1::SessionInfo>(stub_.get(), &v1::SessionService::Stub::GetSession,
                                                Ref(id), timeout, id);
}

StatusOr<v1::SessionInfo> SessionClient::Fork(const std::string& id, const std::string& new_id,
                                              std::chrono::milliseconds timeout) {
  v1::ForkSessionRequest req;
  req.set_session_id(id);
  req.set_new_session_id(new_id);
  return Unary<v1::ForkSessionRequest, v1::SessionInfo>(
      stub_.get(), &v1::SessionService::Stub::ForkSession, req, timeout, id);
}

StatusOr<v1::SessionInfo> SessionClient::Truncate(const std::string& id, int64_t tokens,
                                                  std::chrono::milliseconds timeout) {
  v1::TruncateSessionRequest req;
  req.set_session_id(id);
  req.set_tokens(tokens);
  return Unary<v1::TruncateSessionRequest, v1::SessionInfo>(
      stub_.get(), &v1::SessionService::Stub::TruncateSession, req, timeout, id);
}

StatusOr<v1::SessionInfo> SessionClient::Delete(const std::string& id,
                                                std::chrono::milliseconds timeout) {
  return Unary<v1::SessionRef, v1::SessionInfo>(
      stub_.get(), &v1::SessionService::Stub::DeleteSession, Ref(id), timeout, id);
}

StatusOr<v1::ListSessionsResponse> SessionClient::List(std::chrono::milliseconds timeout) {
  return Unary<v1::ListSessionsRequest, v1::ListSessionsResponse>(
      stub_.get(), &v1::SessionService::Stub::ListSessions, v1::ListSessionsRequest(), timeout, "");
}

StatusOr<v1::ExtendResponse> SessionClient::Extend(const v1::ExtendRequest& req,
                                                   std::chrono::milliseconds timeout) {
  return Unary<v1::ExtendRequest, v1::ExtendResponse>(
      stub_.get(), &v1::SessionService::Stub::Extend, req, timeout,
      req.steps_size() == 1 ? req.steps(0).session_id() : "");
}

namespace {

std::string RandomHex(int digits) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < digits; ++i) out += kHex[rng() & 15];
  return out;
}

}  // namespace

std::string NewSessionId() { return "s-" + RandomHex(24); }

std::string ChildSessionId(const std::string& parent, const std::string& new_id) {
  if (!new_id.empty()) return new_id;
  return parent.substr(0, parent.find(':')) + ":" + RandomHex(16);
}

void Session::Learn(const v1::SessionInfo& info) {
  tokens_.assign(info.layer_tokens().begin(), info.layer_tokens().end());
  known_ = true;
}

StatusOr<Session> Session::Create(SessionClient* client, const v1::CreateSessionRequest& req) {
  v1::CreateSessionRequest named = req;
  if (named.session_id().empty()) named.set_session_id(NewSessionId());
  auto info = client->Create(named);
  if (!info.ok()) return info.status();
  Session s(client, info->session_id());
  s.Learn(*info);
  return s;
}

StatusOr<v1::AttentionResponse> Session::Extend(int32_t layer, const v1::Tensor& query,
                                                const v1::Tensor* key, const v1::Tensor* value,
                                                bool causal, const v1::AttentionOptions& options,
                                                std::optional<float> scale) {
  v1::ExtendRequest req;
  req.set_layer(layer);
  req.set_causal(causal);
  if (scale) req.set_scale(*scale);
  *req.mutable_options() = options;
  v1::SessionStep* step = req.add_steps();
  step->set_session_id(id_);
  *step->mutable_query() = query;
  if (key != nullptr) *step->mutable_key() = *key;
  if (value != nullptr) *step->mutable_value() = *value;
  if (!known_) {
    auto info = Info();
    if (!info.ok()) return info.status();
  }
  const bool counted = layer >= 0 && static_cast<size_t>(layer) < tokens_.size();
  if (counted) step->set_expected_tokens(tokens_[static_cast<size_t>(layer)]);
  StatusOr<v1::ExtendResponse> resp = client_->Extend(req);
  // Safe to send again only because the step says where it goes.
  for (int i = 0; counted && i < retries_ && resp.status().code() == StatusCode::kUnavailable;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100 << std::min(i, 4)));
    resp = client_->Extend(req);
  }
  if (!resp.ok()) return resp.status();
  if (resp->results_size() != 1) {
    return Status::Internal("extend: expected 1 result, got " +
                            std::to_string(resp->results_size()));
  }
  last_replayed_ = resp->replayed_size() == 1 && resp->replayed(0);
  if (counted) {
    const int64_t n = key != nullptr && key->shape_size() >= 2 ? key->shape(1) : 0;
    tokens_[static_cast<size_t>(layer)] = step->expected_tokens() + n;
  }
  return std::move(*resp->mutable_results(0));
}

StatusOr<Session> Session::Fork(const std::string& new_id) {
  auto info = client_->Fork(id_, ChildSessionId(id_, new_id));
  if (!info.ok()) return info.status();
  Session child(client_, info->session_id());
  child.Learn(*info);
  return child;
}

StatusOr<v1::SessionInfo> Session::Truncate(int64_t tokens) {
  auto info = client_->Truncate(id_, tokens);
  if (info.ok()) Learn(*info);
  return info;
}
StatusOr<v1::SessionInfo> Session::Info() {
  auto info = client_->Get(id_);
  if (info.ok()) Learn(*info);
  return info;
}
StatusOr<v1::SessionInfo> Session::Delete() { return client_->Delete(id_); }

}  // namespace attn::client
