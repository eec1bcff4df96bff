// attention-client's one flag table: every command takes the common flags in
// the same spelling, before or after the command; one spelling per option.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench/bench_config.h"
#include "cli/bench_flags.h"
#include "cli/client_options.h"
#include "cli/flags.h"

namespace attn {
namespace {

using client::CommandLine;
using client::ParseCommandLine;

// A value for each common flag, so that each command sees all of them.
const std::vector<std::string> kCommon = {"--target", "10.0.0.7:9000",    "--timeout",
                                          "1500ms",   "--max-message-mb", "8",
                                          "--tls-ca", "/ca.pem",          "--retry"};

// The arguments a command needs to be complete (beyond the common flags).
std::vector<std::string> Own(const std::string& command) {
  if (command == "health") return {"--service", "attention.v1.AttentionService"};
  if (command == "attention") return {"--query", "[[1,0],[0,1]]", "--encoding", "values"};
  if (command == "cross") return {"--random", "1,4", "--model", "demo-cross-attention"};
  if (command == "mha") return {"--random", "1,4", "--model", "demo-mha", "--num-heads", "8"};
  if (command == "bench") return {"--op", "health", "--duration", "1s"};
  return {};
}

std::vector<std::string> Join(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(ClientFlags, EveryCommandTakesTheCommonFlagsBeforeOrAfterIt) {
  for (const std::string& command : client::Commands()) {
    SCOPED_TRACE(command);
    auto before = ParseCommandLine(Join(Join(kCommon, {command}), Own(command)));
    auto after = ParseCommandLine(Join(Join({command}, Own(command)), kCommon));
    ASSERT_TRUE(before.ok()) << before.status().ToString();
    ASSERT_TRUE(after.ok()) << after.status().ToString();
    EXPECT_EQ(before->command, command);
    EXPECT_EQ(after->command, command);
    EXPECT_EQ(before->values, after->values);
    EXPECT_EQ(before->switches, after->switches);
    for (const auto* cl : {&*before, &*after}) {
      auto o = client::ClientOptionsFromFlags(*cl);
      ASSERT_TRUE(o.ok()) << o.status().ToString();
      EXPECT_EQ(o->target, "10.0.0.7:9000");
      EXPECT_DOUBLE_EQ(o->timeout_s, 1.5);
      EXPECT_EQ(o->timeout().count(), 1500);
      EXPECT_EQ(o->channel.max_message_mb, 8);
      EXPECT_EQ(o->channel.tls_ca, "/ca.pem");
      EXPECT_TRUE(o->channel.UsesTls());
      EXPECT_TRUE(o->channel.retry_unavailable);
    }
  }
}

TEST(ClientFlags, InlineValuesAndDurations) {
  auto cl = ParseCommandLine({"--target=h:1", "models", "--timeout=2m"});
  ASSERT_TRUE(cl.ok()) << cl.status().ToString();
  auto o = client::ClientOptionsFromFlags(*cl);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->target, "h:1");
  EXPECT_DOUBLE_EQ(o->timeout_s, 120);
  cl = ParseCommandLine({"health", "--timeout", "30s"});
  ASSERT_TRUE(cl.ok());
  EXPECT_DOUBLE_EQ(client::ClientOptionsFromFlags(*cl)->timeout_s, 30);
  cl = ParseCommandLine({"health"});
  ASSERT_TRUE(cl.ok());
  EXPECT_DOUBLE_EQ(client::ClientOptionsFromFlags(*cl)->timeout_s, 30) << "the default";
}

TEST(ClientFlags, OneSpellingPerOption) {
  // The bench and the calls share --num-heads, --encoding raw|values and --timeout.
  bool help = false;
  auto bench = client::ParseBenchFlags(
      {"--num-heads", "4", "--encoding", "raw", "--timeout", "500ms"}, &help);
  ASSERT_TRUE(bench.ok()) << bench.status().ToString();
  EXPECT_EQ(bench->heads, 4);
  EXPECT_EQ(bench->encoding, client::Encoding::kData);
  EXPECT_DOUBLE_EQ(bench->timeout_s, 0.5);
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"health", "--timeout-ms", "200"},
       "unknown health flag '--timeout-ms' (now --timeout (e.g. --timeout 500ms))"},
      {{"bench", "--heads", "4"}, "unknown bench flag '--heads' (now --num-heads)"},
      {{"attention", "--encoding", "data", "--query", "[1]"},
       "--encoding: expected raw or values, got 'data'"},
      {{"health", "--timeout", "soon"},
       "--timeout: expected a duration like 30s, 500ms or 2m, got 'soon'"},
      {{"health", "--timeout", "0s"}, "--timeout: must be positive"},
  };
  for (const auto& [args, message] : refused) {
    auto cl = ParseCommandLine(args);
    Status st = cl.ok() ? client::ClientOptionsFromFlags(*cl).status() : cl.status();
    if (st.ok() && cl.ok()) st = cl->Choice("--encoding", {"raw", "values"}, "raw").status();
    EXPECT_EQ(st.ToString(), "INVALID_ARGUMENT: " + message);
  }
}

TEST(ClientFlags, MistakesAreNamed) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "missing command (see --help)"},
      {{"--target", "h:1"}, "missing command (see --help)"},
      {{"frobnicate"}, "unknown command 'frobnicate' (see --help)"},
      {{"health", "--query", "[1]"}, "--query: not a flag of 'health' (see health --help)"},
      {{"mha", "--scale", "0.5"}, "--scale: not a flag of 'mha' (see mha --help)"},
      {{"health", "--target"}, "--target: missing value"},
      {{"health", "--tls=yes"}, "--tls: takes no value"},
      {{"health", "models"}, "unexpected argument 'models' after command 'health'"},
  };
  for (const auto& [args, message] : cases) {
    auto cl = ParseCommandLine(args);
    ASSERT_FALSE(cl.ok()) << message;
    EXPECT_EQ(cl.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(cl.status().message().find(message), std::string::npos) << cl.status().message();
  }
}

TEST(ClientFlags, UsageListsEveryFlagOfTheCommand) {
  for (const std::string& command : client::Commands()) {
    const std::string usage = client::Usage(command);
    for (const client::FlagSpec& f : client::FlagTable()) {
      auto cl = ParseCommandLine({command, f.name, f.value ? "1" : ""});
      if (!f.value) cl = ParseCommandLine({command, f.name});
      const bool applies = cl.ok();
      EXPECT_EQ(usage.find(std::string("  ") + f.name + " ") != std::string::npos ||
                    usage.find(std::string("  ") + f.name + "\n") != std::string::npos,
                applies)
          << command << " " << f.name;
    }
  }
  EXPECT_NE(client::Usage("").find("flags may come before or after COMMAND"), std::string::npos);
}

}  // namespace
}  // namespace attn
