#include "attn/status.h"

#include <dnnl.hpp>
#include <exception>
#include <iterator>
#include <new>

namespace attn {

const char* StatusCodeName(StatusCode code) {
  static constexpr const char* kNames[] = {"OK",
                                           "CANCELLED",
                                           "UNKNOWN",
                                           "INVALID_ARGUMENT",
                                           "DEADLINE_EXCEEDED",
                                           "NOT_FOUND",
                                           "ALREADY_EXISTS",
                                           "PERMISSION_DENIED",
                                           "RESOURCE_EXHAUSTED",
                                           "FAILED_PRECONDITION",
                                           "ABORTED",
                                           "OUT_OF_RANGE",
                                           "UNIMPLEMENTED",
                                           "INTERNAL",
                                           "UNAVAILABLE",
                                           "DATA_LOSS",
                                           "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  return i >= 0 && i < static_cast<int>(std::size(kNames)) ? kNames[i] : "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status CurrentExceptionStatus(const std::string& what) {
  try {
    throw;
  } catch (const dnnl::error& e) {
    return Status::Internal(what + ": oneDNN error: " + e.what());
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(what + ": out of memory");
  } catch (const std::exception& e) {
    return Status::Internal(what + ": " + e.what());
  } catch (...) {
    return Status::Internal(what + ": unknown exception");
  }
}

}  // namespace attn
