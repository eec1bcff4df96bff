// Status, its factories and the one exception guard; JsonQuote, the one JSON
// string writer (safetensors headers, JSON logs, bench reports).
#include <gtest/gtest.h>

#include <dnnl.hpp>
#include <new>
#include <stdexcept>
#include <string>

#include "attn/json.h"
#include "attn/status.h"

namespace attn {
namespace {

TEST(Status, EveryFactoryGivesItsCode) {
  const std::pair<Status, StatusCode> cases[] = {
      {Status::Cancelled("m"), StatusCode::kCancelled},
      {Status::Unknown("m"), StatusCode::kUnknown},
      {Status::InvalidArgument("m"), StatusCode::kInvalidArgument},
      {Status::DeadlineExceeded("m"), StatusCode::kDeadlineExceeded},
      {Status::NotFound("m"), StatusCode::kNotFound},
      {Status::AlreadyExists("m"), StatusCode::kAlreadyExists},
      {Status::PermissionDenied("m"), StatusCode::kPermissionDenied},
      {Status::ResourceExhausted("m"), StatusCode::kResourceExhausted},
      {Status::FailedPrecondition("m"), StatusCode::kFailedPrecondition},
      {Status::Aborted("m"), StatusCode::kAborted},
      {Status::OutOfRange("m"), StatusCode::kOutOfRange},
      {Status::Unimplemented("m"), StatusCode::kUnimplemented},
      {Status::Internal("m"), StatusCode::kInternal},
      {Status::Unavailable("m"), StatusCode::kUnavailable},
      {Status::DataLoss("m"), StatusCode::kDataLoss},
      {Status::Unauthenticated("m"), StatusCode::kUnauthenticated},
  };
  for (const auto& [status, code] : cases) {
    EXPECT_EQ(status.code(), code);
    EXPECT_EQ(status.message(), "m");
    EXPECT_EQ(status.ToString(), std::string(StatusCodeName(code)) + ": m");
  }
}

TEST(GuardExceptions, TurnsWhatIsThrownIntoAStatus) {
  EXPECT_TRUE(GuardExceptions("op", [] { return Status::Ok(); }).ok());
  auto value = GuardExceptions("op", []() -> StatusOr<int> { return 7; });
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, 7);
  EXPECT_EQ(GuardExceptions("op", []() -> Status { throw std::bad_alloc(); }).ToString(),
            "RESOURCE_EXHAUSTED: op: out of memory");
  EXPECT_EQ(GuardExceptions("op", []() -> Status { throw std::runtime_error("boom"); }).ToString(),
            "INTERNAL: op: boom");
  EXPECT_EQ(GuardExceptions("op", []() -> StatusOr<int> { throw 42; }).status().ToString(),
            "INTERNAL: op: unknown exception");
  const Status dnnl_error = GuardExceptions(
      "attention", []() -> Status { throw dnnl::error(dnnl_invalid_arguments, "bad desc"); });
  EXPECT_EQ(dnnl_error.code(), StatusCode::kInternal);
  EXPECT_EQ(dnnl_error.message().rfind("attention: oneDNN error: bad desc", 0), 0u)
      << dnnl_error.message();
}

TEST(JsonQuote, EscapesEveryControlCharacterAndParsesBack) {
  std::string all;
  for (int c = 1; c < 128; ++c) all.push_back(static_cast<char>(c));
  all += "\xc3\xa9 \xe2\x82\xac";  // UTF-8 passes through
  const std::string quoted = JsonQuote(all);
  for (char c : quoted) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << "raw control character";
  auto back = ParseJson(quoted);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->string, all);
  EXPECT_EQ(JsonQuote("a\"b\\c\nd\te\x01"), R"("a\"b\\c\nd\te\u0001")");
}

}  // namespace
}  // namespace attn
