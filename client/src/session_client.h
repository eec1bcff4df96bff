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

// A fresh session id ("s-" and 24 hex digits), a family of its own: made by
// the client so that the create call carries the header a balancer hashes.
std::string NewSessionId();
// A fork child's id: `new_id`, or `parent`'s family ("family:...") and a
// fresh tail, so that the balancer routes the child with its parent.
std::string ChildSessionId(const std::string& parent, const std::string& new_id);

// One session, by id, on a SessionClient (which must outlive it). It knows
// each layer's token count and sends it with every step (expected_tokens):
// a step the server applied before its answer was lost is a replay when
// sent again, so Extend retries UNAVAILABLE up to `retries` times.
class Session {
 public:
  Session(SessionClient* client, std::string id) : client_(client), id_(std::move(id)) {}
  // Creates a session (named by NewSessionId() when req.session_id is empty).
  static StatusOr<Session> Create(SessionClient* client,
                                  const attention::v1::CreateSessionRequest& req);

  const std::string& id() const { return id_; }
  // Appends key/value (either may be null: none) to `layer` and attends
  // `query` ([Hq, n_q, D]) over the layer; `options` as in ExtendRequest.
  // The first step of a handle made from an id asks the server for the
  // counts (Info); after FAILED_PRECONDITION, Info() resynchronizes them.
  StatusOr<attention::v1::AttentionResponse> Extend(
      int32_t layer, const attention::v1::Tensor& query, const attention::v1::Tensor* key,
      const attention::v1::Tensor* value, bool causal = true,
      const attention::v1::AttentionOptions& options = {}, std::optional<float> scale = {});
  StatusOr<Session> Fork(const std::string& new_id = "");
  StatusOr<attention::v1::SessionInfo> Truncate(int64_t tokens);
  StatusOr<attention::v1::SessionInfo> Info();
  StatusOr<attention::v1::SessionInfo> Delete();

  // Each layer's tokens as this handle counts them (empty until known).
  const std::vector<int64_t>& layer_tokens() const { return tokens_; }
  // Whether the last Extend was a replay (the server had applied it).
  bool last_replayed() const { return last_replayed_; }
  void set_retries(int retries) { retries_ = retries; }

 private:
  void Learn(const attention::v1::SessionInfo& info);

  SessionClient* client_;
  std::string id_;
  std::vector<int64_t> tokens_;
  bool known_ = false;
  bool last_replayed_ = false;
  int retries_ = 3;
};

}  // namespace attn::client
