// attention-server: serves attention.v1.AttentionService. See --help.
#include <absl/synchronization/mutex.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "attention_server.h"
#include "ops/server_log.h"
#include "server_config.h"

// gperftools' C API, present when the binary links tcmalloc (ATTN_TCMALLOC);
// weak, so the server also builds and runs without it.
extern "C" int MallocExtension_SetNumericProperty(const char* property, size_t value)
    __attribute__((weak));
extern "C" void MallocExtension_ReleaseFreeMemory(void) __attribute__((weak));

namespace {

// tcmalloc, left to its defaults, holds on to memory: its per-thread caches
// grow to 32 MiB in all (a minute of load: RSS 48 -> 72 MiB before it levels
// off). Capping them at 8 MiB cost no measurable throughput and keeps RSS
// flat under load (a 90 s soak: +0.0%). Free spans stay mapped while calls
// keep coming: returning each at once (aggressive decommit) made every large
// call fault its buffers in again, 4,700 page faults per B=8 L=512 MHA call,
// and cut that row from 27 to 20 calls/s. They go back to the system instead
// when the server has been idle for a second (ReleaseMemoryWhenIdle). The
// variable TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES still overrides the cap.
void CapAllocatorCaches() {
  if (MallocExtension_SetNumericProperty == nullptr) return;
  if (std::getenv("TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES") == nullptr) {
    MallocExtension_SetNumericProperty("tcmalloc.max_total_thread_cache_bytes", size_t{8} << 20);
  }
}

// Called once a second: after a second with no call arriving and none
// unanswered, hands tcmalloc's free memory back to the system, once per idle
// period. A burst of large calls leaves RSS at its peak only while busy.
class ReleaseMemoryWhenIdle {
 public:
  void Tick(const attn::server::AttentionServer& server) {
    const int64_t arrived = server.calls_arrived();
    const bool idle = arrived == last_arrived_ && server.calls_unanswered() == 0;
    last_arrived_ = arrived;
    if (!idle) {
      released_ = false;
    } else if (!released_ && MallocExtension_ReleaseFreeMemory != nullptr) {
      MallocExtension_ReleaseFreeMemory();
      released_ = true;
    }
  }

 private:
  int64_t last_arrived_ = -1;
  bool released_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  bool help = false;
  auto config = attn::server::ParseServerConfig(std::vector<std::string>(argv + 1, argv + argc),
                                                std::getenv, &help);
  if (help) {
    std::fputs(attn::server::ServerUsage().c_str(), stdout);
    return 0;
  }
  if (!config.ok()) {
    std::fprintf(stderr, "attention-server: %s\n", config.status().message().c_str());
    return 2;
  }
  attn::server::ConfigureLogging(config->log_level, config->log_format);
  // Debian builds Abseil without NDEBUG, so every absl::Mutex inside gRPC
  // runs deadlock detection (a lock-order graph update per lock): a few
  // percent of all CPU at high call rates. gRPC's locks are not ours to check.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CapAllocatorCaches();

  // Signals are taken synchronously by this thread; every thread started
  // from here on inherits the blocked mask.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  auto server = attn::server::AttentionServer::Start(*config);
  if (!server.ok()) {
    attn::server::LogMessage(spdlog::level::err, "cannot start: " + server.status().message());
    return 1;
  }
  int sig = 0;
  ReleaseMemoryWhenIdle release;
  const timespec tick{1, 0};
  // SIGHUP reloads --auth-token-file (a no-op line without one).
  while (true) {
    sig = sigtimedwait(&stop, nullptr, &tick);
    if (sig < 0) {  // a second without a signal (EAGAIN), or EINTR
      release.Tick(**server);
      continue;
    }
    if (sig != SIGHUP) break;
    if (!config->auth_token_file.empty()) {
      (void)(*server)->ReloadTokens();  // logs the outcome; old tokens stay on error
    } else {
      attn::server::LogMessage(spdlog::level::info, "SIGHUP: no --auth-token-file to reload");
    }
  }
  // Graceful: NOT_SERVING first (probes and balancers stop sending), then no
  // new calls, then the calls in flight get --shutdown-grace to finish.
  attn::server::LogMessage(
      spdlog::level::info,
      fmt::format("received {}: NOT_SERVING; finishing calls in flight (grace {} s)",
                  sig == SIGTERM ? "SIGTERM" : "SIGINT", config->shutdown_grace_s));
  (*server)->Shutdown(
      std::chrono::milliseconds(static_cast<int64_t>(config->shutdown_grace_s * 1000)));
  attn::server::LogMessage(spdlog::level::info, "stopped");
  return 0;
}
