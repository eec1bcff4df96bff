// attention.v1.SessionService from C++: the seven calls, a Session handle
// (create, extend, fork, truncate, delete) and a batched Extend. Every
// call on one session carries the `x-attn-session: <id>` header, by which
// a load balancer keeps a session's calls on the replica that holds it.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attention/v1/session.grpc.pb.h"
#include "attn/status.h"

namespace attn::client {

// The request header that names a call's session.
inline constexpr char kSessionHeader[] = "x-attn-session";

class SessionClient {
 public:
  explicit SessionClient(std::shared_ptr<grpc::Channel> channel);

  // Each call waits at most `timeout` (0: no deadline). Errors are the
  // server's status, converted (wire/status_mapping.h).
  StatusOr<attention::v1::SessionInfo> Create(const attention::v1::CreateSessionRequest& req,
                                              std::chrono::milliseconds timeout = {});
  StatusOr<attention::v1::SessionInfo> Get(const std::string& id,
                                           std::chrono::milliseconds timeout = {});
  StatusOr<attention::v1::SessionInfo> Fork(const std::string& id, const std::string& new_id,
                                            std::chrono::milliseconds timeout = {});
  StatusOr<attention::v1::SessionInfo> Truncate(const std::string& id, int64_t tokens,
                                                std::chrono::milliseconds timeout = {});
  StatusOr<attention::v1::SessionInfo> Delete(const std::string& id,
                                              std::chrono::milliseconds timeout = {});
  StatusOr<attention::v1::ListSessionsResponse> List(std::chrono::milliseconds timeout = {});
  // One batch of steps (distinct sessions of one replica); the header names
  // the session when there is one step.
  StatusOr<attention::v1::ExtendResponse> Extend(const attention::v1::ExtendRequest& req,
                                                 std::chrono::milliseconds timeout = {});

  attention::v1::SessionService::Stub& stub() { return *stub_; }

 private:
  std::unique_ptr<attention::v1::SessionService::Stub> stub_;
};

// One session, by id, on a SessionClient (which must outlive it).
class Session {
 public:
  Session(SessionClient* client, std::string id) : client_(client), id_(std::move(id)) {}
  // Creates a session (the server names it when req.session_id is empty).
  static StatusOr<Session> Create(SessionClient* client,
                                  const attention::v1::CreateSessionRequest& req);

  const std::string& id() const { return id_; }
  // Appends key/value (either may be null: none) to `layer` and attends
  // `query` ([Hq, n_q, D]) over the layer; `options` as in ExtendRequest.
  StatusOr<attention::v1::AttentionResponse> Extend(
      int32_t layer, const attention::v1::Tensor& query, const attention::v1::Tensor* key,
      const attention::v1::Tensor* value, bool causal = true,
      const attention::v1::AttentionOptions& options = {}, std::optional<float> scale = {});
  StatusOr<Session> Fork(const std::string& new_id = "");
  StatusOr<attention::v1::SessionInfo> Truncate(int64_t tokens);
  StatusOr<attention::v1::SessionInfo> Info();
  StatusOr<attention::v1::SessionInfo> Delete();

 private:
  SessionClient* client_;
  std::string id_;
};

}  // namespace attn::client
