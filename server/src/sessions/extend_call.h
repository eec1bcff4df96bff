// attention.v1.SessionService's Extend as a call on the shared call path
// (call/dispatch.h): the steps' tensors decoded and viewed (wire), their
// options, the cost and limits; compute runs KvCacheStore::Extend and
// respond writes the ExtendResponse, each step in its query's type.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include "attention/v1/session.pb.h"
#include "attn/kv_cache.h"
#include "call/prepared_call.h"
#include "ops/session_metrics.h"

namespace attn::server {

// Checks and plans `req` into `call` (which must outlive nothing but the
// request): on OK, call->compute extends the store and call->respond
// serializes the answer into `resp`. `metrics` may be null.
Status PrepareExtend(const attention::v1::ExtendRequest& req, KvCacheStore* store,
                     const RequestLimits& limits, SessionMetrics* metrics, grpc::ByteBuffer* resp,
                     PreparedCall* call);

}  // namespace attn::server
