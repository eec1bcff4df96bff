// attention-client: call an attention-server from the command line.
//
//   attention-client health
//   attention-client --target host:50051 models
//   attention-client attention --query '[[1,0],[0,1],[1,1],[1,1],[0.5,1]]'
//   attention-client cross --model demo-cross-attention --random 1,8
//   attention-client mha --model demo-mha --random 2,16 --return-weights
//   attention-client bench --op mha --model demo-mha-small --concurrency 1,4,16
//   attention-client session create --session-id chat-1 --num-kv-heads 8 --head-dim 128
//   attention-client bench --op decode --sessions 8 --prefill 4096
//
// Flags (flags.h) may come before or after the command; --help lists them.
#include <absl/synchronization/mutex.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/flags.h"

namespace {

std::atomic<bool> g_interrupted{false};

extern "C" void OnInterrupt(int /*sig*/) { g_interrupted = true; }

}  // namespace

int main(int argc, char** argv) {
  // Debian builds Abseil without NDEBUG, so every absl::Mutex inside gRPC
  // runs deadlock detection (a lock-order graph update per lock): a few
  // percent of all CPU at high call rates. gRPC's locks are not ours to check.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  namespace client = attn::client;
  auto cl = client::ParseCommandLine(std::vector<std::string>(argv + 1, argv + argc));
  if (!cl.ok()) return client::Fail(cl.status().message());
  if (cl->help) {
    std::fputs(client::Usage(cl->command).c_str(), stdout);
    return 0;
  }
  const std::string& command = cl->command;
  if (command == "health") return client::RunHealth(*cl);
  if (command == "models") return client::RunModels(*cl);
  if (command == "session") return client::RunSession(*cl);
  if (command == "bench") {
    struct sigaction sa = {};
    sa.sa_handler = OnInterrupt;
    sigaction(SIGINT, &sa, nullptr);  // Ctrl-C: stop, print the partial report
    if (cl->get("--op") == "decode") return client::RunDecodeBench(*cl, &g_interrupted);
    return client::RunBenchCommand(*cl, &g_interrupted);
  }
  return client::RunCall(*cl);
}
