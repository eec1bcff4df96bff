// Starting a real attention-server inside a test: 127.0.0.1, a free port,
// logging off.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "attention_client.h"
#include "attention_server.h"

namespace attn_test {

// Starts a server, after `edit` adjusts the configuration; null (with a test
// failure) if it cannot start.
inline std::unique_ptr<attn::server::AttentionServer> StartTestServer(
    const std::function<void(attn::server::ServerConfig&)>& edit = {}) {
  attn::server::ServerConfig config;
  config.host = "127.0.0.1";
  config.port = 0;
  config.log_level = "off";
  if (edit) edit(config);
  auto server = attn::server::AttentionServer::Start(config);
  EXPECT_TRUE(server.ok()) << server.status().ToString();
  return server.ok() ? std::move(*server) : nullptr;
}

inline std::string Target(const attn::server::AttentionServer& s) {
  return "127.0.0.1:" + std::to_string(s.port());
}

// A fixture with a server started and a client connected to it. `Base` is
// ::testing::Test, or a ::testing::TestWithParam for parameterised suites.
template <typename Base = ::testing::Test>
class ServerWithClient : public Base {
 protected:
  void SetUp() override {
    server_ = StartTestServer();
    ASSERT_NE(server_, nullptr);
    client_ =
        std::make_unique<attn::client::AttentionClient>(attn::client::Connect(Target(*server_)));
  }
  std::unique_ptr<attn::server::AttentionServer> server_;
  std::unique_ptr<attn::client::AttentionClient> client_;
};

}  // namespace attn_test
