// attention.v1.SessionService on gRPC's callback API: KV-cache sessions
// (core's KvCacheStore) behind one more thin front end. Extend takes the
// shared call path (token, admission, the CPU budget, deadlines, metrics,
// the access line: call/dispatch.h); the other methods touch only the
// store's bookkeeping and answer at once (call/grpc_call.h's simple path).
#pragma once

#include "attention/v1/session.grpc.pb.h"
#include "attn/kv_cache.h"
#include "call/dispatch.h"
#include "ops/session_metrics.h"

namespace attn::server {

// Every method raw (ByteBuffer), as attention.v1's: bytes that are not a
// valid message get INVALID_ARGUMENT naming the message type.
using RawSessionService = attention::v1::SessionService::WithRawCallbackMethod_CreateSession<
    attention::v1::SessionService::WithRawCallbackMethod_GetSession<
        attention::v1::SessionService::WithRawCallbackMethod_Extend<
            attention::v1::SessionService::WithRawCallbackMethod_ForkSession<
                attention::v1::SessionService::WithRawCallbackMethod_TruncateSession<
                    attention::v1::SessionService::WithRawCallbackMethod_DeleteSession<
                        attention::v1::SessionService::WithRawCallbackMethod_ListSessions<
                            attention::v1::SessionService::Service>>>>>>>;

class SessionServiceImpl final : public RawSessionService {
 public:
  // All must outlive the service; `metrics` may be null.
  SessionServiceImpl(CallDispatcher* dispatcher, KvCacheStore* store, SessionMetrics* metrics);

  grpc::ServerUnaryReactor* CreateSession(grpc::CallbackServerContext* ctx,
                                          const grpc::ByteBuffer* req,
                                          grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* ctx,
                                       const grpc::ByteBuffer* req,
                                       grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* Extend(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* req,
                                   grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* ForkSession(grpc::CallbackServerContext* ctx,
                                        const grpc::ByteBuffer* req,
                                        grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* TruncateSession(grpc::CallbackServerContext* ctx,
                                            const grpc::ByteBuffer* req,
                                            grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* DeleteSession(grpc::CallbackServerContext* ctx,
                                          const grpc::ByteBuffer* req,
                                          grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* ListSessions(grpc::CallbackServerContext* ctx,
                                         const grpc::ByteBuffer* req,
                                         grpc::ByteBuffer* resp) override;

 private:
  // A method whose answer is one SessionInfo from `op(request)`.
  template <typename Request, typename Op>
  grpc::ServerUnaryReactor* InfoCall(Rpc rpc, grpc::CallbackServerContext* ctx,
                                     const grpc::ByteBuffer* req, grpc::ByteBuffer* resp, Op op);

  CallDispatcher* const dispatcher_;
  KvCacheStore* const store_;
  SessionMetrics* const metrics_;
};

// CreateSession's request into the store, as `owner`'s session (the
// cache_dtype checked here).
StatusOr<KvSessionInfo> CreateFromWire(const attention::v1::CreateSessionRequest& r,
                                       const std::string& owner, KvCacheStore* store);

// core's session info as the wire's.
void ToWire(const KvSessionInfo& info, attention::v1::SessionInfo* out);

}  // namespace attn::server
