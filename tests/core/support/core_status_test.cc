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

TEST(ParseJson, PackedNumberArraysKeepEveryValueAndFallBackWhenMixed) {
  JsonOptions packed;
  packed.pack_numbers = true;
  auto v =
      ParseJson(R"({"data": [[1.5, -2e3, true], [false, 0, 7]], "mixed": [1, "a", 2]})", packed);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  const JsonValue* rows = v->Find("data");
  ASSERT_EQ(rows->array.size(), 2u);
  EXPECT_FALSE(rows->packed);  // its items are arrays
  EXPECT_TRUE(rows->array[0].packed);
  EXPECT_TRUE(rows->array[0].array.empty());
  EXPECT_EQ(rows->array[0].numbers, (std::vector<double>{1.5, -2000, 1}));
  EXPECT_EQ(rows->array[1].numbers, (std::vector<double>{0, 0, 7}));
  const JsonValue* mixed = v->Find("mixed");
  EXPECT_FALSE(mixed->packed);
  ASSERT_EQ(mixed->array.size(), 3u);
  EXPECT_EQ(mixed->array[0].number, 1);
  EXPECT_EQ(mixed->array[1].string, "a");
  EXPECT_EQ(mixed->array[2].number, 2);
  // Off by default: every item a JsonValue.
  auto plain = ParseJson("[1, 2]");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->packed);
  EXPECT_EQ(plain->array.size(), 2u);
}

}  // namespace
}  // namespace attn
