#include "call/grpc_call.h"

#include <memory>
#include <string>

#include "call/held_memory.h"
#include "call/prepared_call.h"
#include "wire/status_mapping.h"
#include "wire/timing_trailer.h"

namespace attn::server {

CallerCredentials CredentialsOf(grpc::CallbackServerContext* ctx, std::string* storage) {
  CallerCredentials who;
  const auto& md = ctx->client_metadata();
  const auto it = md.find("authorization");
  if (it != md.end()) {
    storage->assign(it->second.data(), it->second.size());
    who.authorization = storage;
  }
  // gRPC verified the certificate against --tls-client-ca before the call
  // reached us; its subject is RFC 2253 ("CN=team-a,O=example").
  const std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    const auto subject = auth->FindPropertyValues(GRPC_X509_SUBJECT_PROPERTY_NAME);
    if (!subject.empty()) who.certificate_subject.assign(subject[0].data(), subject[0].size());
  }
  return who;
}

// One gRPC call's reactor: it finishes the call (timing trailer, access
// line, metrics), tells the call when gRPC cancels it (client cancel or
// deadline: queued work is dropped, running work stops between blocks), and
// holds the call's in-flight slot until its answer is handed to gRPC. (Not
// until OnDone: under load gRPC runs OnDone hundreds of calls late, long
// after the answer went out, and counting those would refuse calls the
// server has room for.) With a HeldMemory, the call's bytes count there from
// arrival until OnDone: the request and its parsed copy, then the request
// and the serialized answer, which gRPC keeps until its client reads it.
namespace {

class CallReactor final : public grpc::ServerUnaryReactor, public CallTransport {
 public:
  CallReactor(CallDispatcher* service, Rpc rpc, grpc::CallbackServerContext* ctx, int64_t bytes_in,
              const grpc::ByteBuffer* resp)
      : service_(service), rpc_(rpc), ctx_(ctx), bytes_in_(bytes_in), resp_(resp) {
    if (HeldMemory* h = service_->options().held) {
      peer_ = ctx->peer();
      Hold(h, 2 * bytes_in_);
    }
  }

  void OnCancel() override { call()->cancelled = true; }
  void OnDone() override {
    if (HeldMemory* h = service_->options().held) Hold(h, -held_);
    delete this;
  }
  // Both reactions above are trivial and never block, so gRPC may run them
  // inline on the thread that completed the call. By default it hands every
  // OnDone and OnCancel to its executor thread: a futex wake-up and a
  // context switch per call, and OnDone ran hundreds of calls late under load.
  // (gRPC marks this hook as internal; its own trivial reactors use it the
  // same way.)
  bool InternalInlineable() override { return true; }

  std::chrono::system_clock::time_point deadline() const override { return ctx_->deadline(); }
  const std::string& peer() const { return peer_; }
  int64_t held() const { return held_; }

  void Finish(const Status& st, Clock::time_point began) override {
    if (began != Clock::time_point{}) {
      // Where the time went, for load testers: waiting for a CPU, computing.
      ctx_->AddTrailingMetadata(wire::kTimingTrailer,
                                wire::TimingTrailerValue(began - start(), Clock::now() - began));
      // What arithmetic the answer came from.
      ctx_->AddInitialMetadata(wire::kPrecisionHeader, PrecisionName(call()->precision));
    }
    HeldMemory* held = service_->options().held;
    const int64_t bytes_out = st.ok() && (service_->options().metrics != nullptr || held != nullptr)
                                  ? static_cast<int64_t>(resp_->Length())
                                  : 0;
    grpc::CallbackServerContext* ctx = ctx_;
    const PreparedCall* c = call().get();
    service_->Completed(rpc_, c, c->authenticated ? &c->principal : nullptr, st, start(), began,
                        bytes_in_, bytes_out, [ctx] { return ctx->peer(); });
    // The parsed request and the typed answer are done with (the answer
    // went into gRPC's buffer): free them now, not when gRPC is done.
    call()->keep_alive.reset();
    if (held != nullptr) Hold(held, bytes_out - bytes_in_);
    // gRPC may run OnDone, and delete this, inside Finish.
    grpc::ServerUnaryReactor::Finish(wire::ToGrpcStatus(st));
  }

 private:
  void Hold(HeldMemory* h, int64_t bytes) {
    h->Add(peer_, bytes);
    held_ += bytes;
  }

  CallDispatcher* const service_;
  const Rpc rpc_;
  grpc::CallbackServerContext* const ctx_;
  const int64_t bytes_in_;
  const grpc::ByteBuffer* const resp_;  // the serialized answer
  std::string peer_;                    // with a HeldMemory only
  int64_t held_ = 0;
};

}  // namespace

grpc::ServerUnaryReactor* ServeGrpc(CallDispatcher* dispatcher, Rpc rpc,
                                    grpc::CallbackServerContext* ctx, int64_t bytes_in,
                                    const grpc::ByteBuffer* resp,
                                    const std::function<Status(PreparedCall*)>& prepare) {
  auto* reactor = new CallReactor(dispatcher, rpc, ctx, bytes_in, resp);
  std::string storage;
  const ServiceOptions& options = dispatcher->options();
  const CallerCredentials who = CredentialsOf(ctx, &storage);
  if (options.held == nullptr) {
    dispatcher->Dispatch(reactor, who, prepare);
    return reactor;
  }
  dispatcher->Dispatch(reactor, who, [&](PreparedCall* call) {
    Status st = options.held->Admit(reactor->peer(), reactor->held());
    if (!st.ok()) {
      reactor->set_admission_refused();
      return st;
    }
    return prepare(call);
  });
  return reactor;
}

grpc::ServerUnaryReactor* ServeGrpcSimple(CallDispatcher* dispatcher, Rpc rpc,
                                          grpc::CallbackServerContext* ctx,
                                          const google::protobuf::MessageLite* resp,
                                          const std::function<Status()>& answer, bool open) {
  if (open) {
    const auto start = Clock::now();
    const Status st = answer();
    const int64_t bytes_out = st.ok() && dispatcher->options().metrics != nullptr
                                  ? static_cast<int64_t>(resp->ByteSizeLong())
                                  : 0;
    const Principal anyone;
    dispatcher->Completed(
        rpc, nullptr, &anyone, st, start, {}, 0, bytes_out, [ctx] { return ctx->peer(); }, false);
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(wire::ToGrpcStatus(st));
    return reactor;
  }
  return ServeGrpcAs(dispatcher, rpc, ctx, resp, [&](const Principal&) { return answer(); });
}

grpc::ServerUnaryReactor* ServeGrpcAs(CallDispatcher* dispatcher, Rpc rpc,
                                      grpc::CallbackServerContext* ctx,
                                      const google::protobuf::MessageLite* resp,
                                      const std::function<Status(const Principal&)>& answer) {
  const auto start = Clock::now();
  std::string storage;
  const StatusOr<Principal> who = dispatcher->Authenticate(CredentialsOf(ctx, &storage));
  const Status st = who.ok() ? answer(*who) : who.status();
  const int64_t bytes_out = st.ok() && dispatcher->options().metrics != nullptr
                                ? static_cast<int64_t>(resp->ByteSizeLong())
                                : 0;
  dispatcher->Completed(
      rpc, nullptr, who.ok() ? &*who : nullptr, st, start, {}, 0, bytes_out,
      [ctx] { return ctx->peer(); }, false);
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(wire::ToGrpcStatus(st));
  return reactor;
}

}  // namespace attn::server
