#include "sessions/session_service.h"

#include <memory>

#include "call/grpc_call.h"
#include "call/raw_messages.h"
#include "sessions/extend_call.h"
#include "wire/cache_formats.h"

namespace attn::server {

namespace v1 = attention::v1;

StatusOr<KvSessionInfo> CreateFromWire(const v1::CreateSessionRequest& r, const std::string& owner,
                                       KvCacheStore* store) {
  KvSessionSpec spec;
  spec.owner = owner;
  spec.session_id = r.session_id();
  spec.num_layers = r.num_layers();
  spec.num_kv_heads = r.num_kv_heads();
  spec.head_dim = r.head_dim();
  spec.value_dim = r.value_dim();
  ATTN_ASSIGN_OR_RETURN(spec.cache_type, wire::CacheTypeFromWire(r.cache_dtype()));
  spec.max_tokens = r.max_tokens();
  ATTN_ASSIGN_OR_RETURN(spec.key_format, wire::CacheFormatFromWire(r.key_format(), "key_format"));
  ATTN_ASSIGN_OR_RETURN(spec.value_format,
                        wire::CacheFormatFromWire(r.value_format(), "value_format"));
  return store->Create(spec);
}

void ToWire(const KvSessionInfo& info, v1::SessionInfo* out) {
  out->set_session_id(info.spec.session_id);
  out->set_num_layers(static_cast<int32_t>(info.spec.num_layers));
  out->set_num_kv_heads(static_cast<int32_t>(info.spec.num_kv_heads));
  out->set_head_dim(static_cast<int32_t>(info.spec.head_dim));
  out->set_value_dim(static_cast<int32_t>(info.spec.value_dim));
  out->set_cache_dtype(wire::CacheTypeToWire(info.spec.cache_type));
  out->set_max_tokens(info.spec.max_tokens);
  for (int64_t t : info.layer_tokens) out->add_layer_tokens(t);
  out->set_cache_bytes(info.cache_bytes);
  out->set_owner(info.spec.owner);
  out->set_key_format(wire::CacheFormatToWire(info.spec.key_format));
  out->set_value_format(wire::CacheFormatToWire(info.spec.value_format));
}

SessionServiceImpl::SessionServiceImpl(CallDispatcher* dispatcher, KvCacheStore* store,
                                       SessionMetrics* metrics)
    : dispatcher_(dispatcher), store_(store), metrics_(metrics) {}

template <typename Request, typename Op>
grpc::ServerUnaryReactor* SessionServiceImpl::InfoCall(Rpc rpc, grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* req,
                                                       grpc::ByteBuffer* resp, Op op) {
  Request request;
  v1::SessionInfo answer;
  const Status parsed = ParseRequest(*req, &request);
  return ServeGrpcAs(dispatcher_, rpc, ctx, &answer, [&](const Principal& who) {
    ATTN_RETURN_IF_ERROR(parsed);
    ATTN_ASSIGN_OR_RETURN(KvSessionInfo info, op(who.name, request));
    ToWire(info, &answer);
    return SerializeInto(answer, resp);
  });
}

grpc::ServerUnaryReactor* SessionServiceImpl::CreateSession(grpc::CallbackServerContext* ctx,
                                                            const grpc::ByteBuffer* req,
                                                            grpc::ByteBuffer* resp) {
  return InfoCall<v1::CreateSessionRequest>(
      Rpc::kCreateSession, ctx, req, resp,
      [this](const std::string& owner, const v1::CreateSessionRequest& r) {
        return CreateFromWire(r, owner, store_);
      });
}

grpc::ServerUnaryReactor* SessionServiceImpl::GetSession(grpc::CallbackServerContext* ctx,
                                                         const grpc::ByteBuffer* req,
                                                         grpc::ByteBuffer* resp) {
  return InfoCall<v1::SessionRef>(Rpc::kGetSession, ctx, req, resp,
                                  [this](const std::string& owner, const v1::SessionRef& r) {
                                    return store_->Get(owner, r.session_id());
                                  });
}

grpc::ServerUnaryReactor* SessionServiceImpl::ForkSession(grpc::CallbackServerContext* ctx,
                                                          const grpc::ByteBuffer* req,
                                                          grpc::ByteBuffer* resp) {
  return InfoCall<v1::ForkSessionRequest>(
      Rpc::kForkSession, ctx, req, resp,
      [this](const std::string& owner, const v1::ForkSessionRequest& r) {
        auto info = store_->Fork(owner, r.session_id(), r.new_session_id());
        if (info.ok() && metrics_ != nullptr) metrics_->RecordFork();
        return info;
      });
}

grpc::ServerUnaryReactor* SessionServiceImpl::TruncateSession(grpc::CallbackServerContext* ctx,
                                                              const grpc::ByteBuffer* req,
                                                              grpc::ByteBuffer* resp) {
  return InfoCall<v1::TruncateSessionRequest>(
      Rpc::kTruncateSession, ctx, req, resp,
      [this](const std::string& owner, const v1::TruncateSessionRequest& r) {
        auto info = store_->Truncate(owner, r.session_id(), r.tokens());
        if (info.ok() && metrics_ != nullptr) metrics_->RecordTruncate();
        return info;
      });
}

grpc::ServerUnaryReactor* SessionServiceImpl::DeleteSession(grpc::CallbackServerContext* ctx,
                                                            const grpc::ByteBuffer* req,
                                                            grpc::ByteBuffer* resp) {
  return InfoCall<v1::SessionRef>(Rpc::kDeleteSession, ctx, req, resp,
                                  [this](const std::string& owner, const v1::SessionRef& r) {
                                    return store_->Delete(owner, r.session_id());
                                  });
}

grpc::ServerUnaryReactor* SessionServiceImpl::ListSessions(grpc::CallbackServerContext* ctx,
                                                           const grpc::ByteBuffer* req,
                                                           grpc::ByteBuffer* resp) {
  v1::ListSessionsRequest request;
  v1::ListSessionsResponse answer;
  const Status parsed = ParseRequest(*req, &request);
  return ServeGrpcAs(dispatcher_, Rpc::kListSessions, ctx, &answer, [&](const Principal& who) {
    ATTN_RETURN_IF_ERROR(parsed);
    // The caller's own sessions only; the pool's totals are the server's.
    for (const KvSessionInfo& info : store_->List(who.name)) ToWire(info, answer.add_sessions());
    answer.set_cache_bytes_used(store_->bytes_used());
    answer.set_cache_bytes_limit(store_->bytes_limit());
    const KvOwnerUsage mine = store_->OwnerUsage(who.name);
    answer.set_owner_bytes_used(mine.bytes_used);
    answer.set_owner_bytes_limit(mine.bytes_limit);
    return SerializeInto(answer, resp);
  });
}

grpc::ServerUnaryReactor* SessionServiceImpl::Extend(grpc::CallbackServerContext* ctx,
                                                     const grpc::ByteBuffer* req,
                                                     grpc::ByteBuffer* resp) {
  const RequestLimits* limits = &dispatcher_->options().limits;
  return ServeGrpc(dispatcher_, Rpc::kExtend, ctx, static_cast<int64_t>(req->Length()), resp,
                   [&](PreparedCall* call) {
                     // After the token and admission, the steps are counted in
                     // the bytes before any is parsed: a 64 MiB request of
                     // millions of empty steps costs a scan, not gigabytes.
                     const int64_t steps =
                         CountTopLevelField(*req, 2, limits->max_extend_steps);  // steps = 2
                     if (steps > limits->max_extend_steps) {
                       return Status::ResourceExhausted(
                           "steps: more than " + std::to_string(limits->max_extend_steps) +
                           " steps in one Extend, the limit (--max-extend-steps); split it");
                     }
                     // The request outlives the call: the steps' views point into it.
                     auto request = std::make_shared<v1::ExtendRequest>();
                     ATTN_RETURN_IF_ERROR(ParseRequest(*req, request.get()));
                     call->keep_alive = request;
                     return PrepareExtend(*request, store_, *limits, metrics_, resp, call);
                   });
}

}  // namespace attn::server
