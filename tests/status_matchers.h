// Assertions on Status values: the specific code and a message substring,
// never just "not ok".
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "attn/status.h"

namespace attn_test {

inline void ExpectStatus(const attn::Status& s, attn::StatusCode code,
                         const std::string& substring) {
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_NE(s.message().find(substring), std::string::npos)
      << "message: " << s.message() << "\nwanted: " << substring;
}

template <typename T>
void ExpectInvalid(const attn::StatusOr<T>& r, const std::string& substring) {
  ASSERT_FALSE(r.ok()) << "expected INVALID_ARGUMENT: " << substring;
  ExpectStatus(r.status(), attn::StatusCode::kInvalidArgument, substring);
}

}  // namespace attn_test
