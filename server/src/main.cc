// attention-server: serves attention.v1.AttentionService. See --help.
#include <absl/synchronization/mutex.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "attention_server.h"
#include "server_config.h"
#include "server_log.h"

// gperftools' C API, present when the binary links tcmalloc (ATTN_TCMALLOC);
// weak, so the server also builds and runs without it.
extern "C" int MallocExtension_SetNumericProperty(const char* property, size_t value)
    __attribute__((weak));

namespace {

// tcmalloc, left to its defaults, holds on to memory: its per-thread caches
// grow to 32 MiB in all (a minute of load: RSS 48 -> 72 MiB before it levels
// off), and freed spans stay mapped (a 10-minute soak stepped from 50 to
// 58 MiB after 5 minutes and stayed there). Capping the caches at 8 MiB and
// returning free spans at once cost no measurable throughput (small MHA at
// concurrency 32: 34.0k req/s either way) and keep RSS flat. The variables
// TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES and TCMALLOC_AGGRESSIVE_DECOMMIT
// still override them.
void CapAllocatorCaches() {
  if (MallocExtension_SetNumericProperty == nullptr) return;
  if (std::getenv("TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES") == nullptr) {
    MallocExtension_SetNumericProperty("tcmalloc.max_total_thread_cache_bytes", size_t{8} << 20);
  }
  if (std::getenv("TCMALLOC_AGGRESSIVE_DECOMMIT") == nullptr) {
    MallocExtension_SetNumericProperty("tcmalloc.aggressive_memory_decommit", 1);
  }
}

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
  // SIGHUP reloads --auth-token-file (a no-op line without one).
  while (sigwait(&stop, &sig) == 0 && sig == SIGHUP) {
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
