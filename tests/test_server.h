// Starting a real attention-server inside a test: 127.0.0.1, a free port,
// logging off.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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

// A loopback port that was free a moment ago (bound to port 0, read,
// closed): where no server listens, or where a test starts one later. 0
// (with a test failure) if no socket could be bound.
inline int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  close(fd);
  EXPECT_TRUE(ok) << "no loopback port";
  return ok ? ntohs(a.sin_port) : 0;
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
