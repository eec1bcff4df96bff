// Status and StatusOr: how every fallible core call reports errors.
//
// The codes mirror the canonical gRPC codes (same numbering), so the server
// maps them one-to-one. Messages name the input and the mismatch, e.g.
// "key: last dim must equal query's (64), got 32".
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace attn {

// gRPC's codes, with gRPC's numbers, so that a gRPC status code converts
// directly. Core itself returns only some of them.
enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// Returns a stable upper-case name, e.g. "INVALID_ARGUMENT" (gRPC's names);
// "UNKNOWN" for a number outside 0..16.
const char* StatusCodeName(StatusCode code);

// A value type: either OK or a code with a message. Cheap to copy when OK.
class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  // One factory per non-OK code.
  static Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
  static Status Unknown(std::string m) { return {StatusCode::kUnknown, std::move(m)}; }
  static Status InvalidArgument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status DeadlineExceeded(std::string m) {
    return {StatusCode::kDeadlineExceeded, std::move(m)};
  }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status PermissionDenied(std::string m) {
    return {StatusCode::kPermissionDenied, std::move(m)};
  }
  static Status ResourceExhausted(std::string m) {
    return {StatusCode::kResourceExhausted, std::move(m)};
  }
  static Status FailedPrecondition(std::string m) {
    return {StatusCode::kFailedPrecondition, std::move(m)};
  }
  static Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
  static Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
  static Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
  static Status Unauthenticated(std::string m) {
    return {StatusCode::kUnauthenticated, std::move(m)};
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message", or "OK".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Holds either a T or a non-OK Status. Accessing value() of an error is a bug
// (asserted in debug builds).
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    assert(!status_.ok());
    if (status_.ok()) status_ = Status::Internal("StatusOr constructed from OK status");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & {
    assert(ok());
    return *value_;
  }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

// The Status of the exception being handled, for the one guard below: call it
// only inside a catch block. std::bad_alloc is RESOURCE_EXHAUSTED ("<what>:
// out of memory"); a oneDNN error, any other exception or a non-exception
// is INTERNAL ("<what>: oneDNN error: ...", "<what>: ...").
Status CurrentExceptionStatus(const std::string& what);

// Runs f() (returning Status or StatusOr) and turns anything it throws into
// a Status: the project's one exception-to-Status boundary, at every public
// entry point that may reach oneDNN or allocate.
template <typename F>
auto GuardExceptions(const std::string& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (...) {
    return CurrentExceptionStatus(what);
  }
}

}  // namespace attn

#define ATTN_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::attn::Status attn_status_ = (expr);        \
    if (!attn_status_.ok()) return attn_status_; \
  } while (0)

#define ATTN_STATUS_CONCAT_INNER_(a, b) a##b
#define ATTN_STATUS_CONCAT_(a, b) ATTN_STATUS_CONCAT_INNER_(a, b)
// `decl = value of expr`, or return expr's error. expr is a StatusOr.
#define ATTN_ASSIGN_OR_RETURN(decl, expr)                                           \
  auto ATTN_STATUS_CONCAT_(attn_statusor_, __LINE__) = (expr);                      \
  if (!ATTN_STATUS_CONCAT_(attn_statusor_, __LINE__).ok())                          \
    return ATTN_STATUS_CONCAT_(attn_statusor_, __LINE__).status();                  \
  decl = std::move(ATTN_STATUS_CONCAT_(attn_statusor_, __LINE__)).value()
