// The client's host arrays: inline JSON, the wire in both encodings, .npy.
#include "host_array.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

namespace attn {
namespace {

TEST(HostArray, JsonArraysAndErrors) {
  auto a = client::ParseJsonArray("[[1, 0], [0.5, -2e1]]", "query");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->shape, (Shape{2, 2}));
  EXPECT_EQ(a->values, (std::vector<float>{1, 0, 0.5f, -20}));
  auto b = client::ParseJsonArray("[true, false]", "mask");
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->is_bool);
  auto ragged = client::ParseJsonArray("[[1, 0], [1]]", "query");
  ASSERT_FALSE(ragged.ok());
  EXPECT_NE(ragged.status().message().find("query: ragged array at top level[1]"),
            std::string::npos);
  EXPECT_FALSE(client::ParseJsonArray("[[1, \"x\"]]", "query").ok());
  EXPECT_FALSE(client::ParseJsonArray("{\"a\": 1}", "query").ok());
  EXPECT_FALSE(client::ParseJsonArray("[1, 2", "query").ok());
}

TEST(HostArray, WireRoundTripInBothEncodings) {
  client::HostArray a{{2, 3}, {1, 2, 3, 4, 5, 6}, false};
  for (auto enc : {client::Encoding::kData, client::Encoding::kValues}) {
    auto back = client::FromWire(client::ToWire(a, enc), "x");
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->shape, a.shape);
    EXPECT_EQ(back->values, a.values);
  }
  client::HostArray m{{3}, {1, 0, 1}, true};
  auto wire = client::ToWire(m, client::Encoding::kData);
  EXPECT_EQ(wire.dtype(), attention::v1::DATA_TYPE_BOOL);
  EXPECT_EQ(wire.data(), std::string("\x01\x00\x01", 3));
}

TEST(HostArray, NpyRoundTripAndFormatting) {
  const std::string path = "/tmp/attn_host_array_test_" + std::to_string(getpid()) + ".npy";
  client::HostArray a{{2, 2}, {0.79884f, 0.76159f, 1, -1}, false};
  ASSERT_TRUE(client::WriteNpy(path, a).ok());
  auto back = client::ReadNpy(path);
  std::remove(path.c_str());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->shape, a.shape);
  EXPECT_EQ(back->values, a.values);
  EXPECT_EQ(client::FormatArray(a), "[[0.7988, 0.7616],\n [1.0000, -1.0000]]");
  EXPECT_EQ(client::ReadNpy("/nonexistent.npy").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace attn
