// How much CPU the bench itself used over a level, per thread, and how idle
// the machine was: a client with no spare CPU measures itself, not the
// server (on a 2-CPU machine shared with the server, it happens).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace attn::client {

struct CpuSnapshot {
  std::chrono::steady_clock::time_point at;
  double process_s = 0;                                   // user + sys, all threads
  std::map<int, std::pair<std::string, double>> threads;  // tid -> (name, user + sys s)
  uint64_t machine_idle = 0, machine_total = 0;           // /proc/stat jiffies
};

CpuSnapshot TakeCpuSnapshot();

struct ClientCpu {
  double wall_s = 0;
  double cpus_used = 0;                                 // (user + sys) / wall
  int cpus_available = 0;                               // this process's affinity
  std::vector<std::pair<std::string, double>> busiest;  // up to 4 threads: (name, share of a CPU)
  double machine_idle = 1;  // share of all the machine's CPU time left idle
  // No spare CPU: the machine was under 5% idle, or one client thread
  // used over 90% of a CPU. The numbers then show the client's limit.
  bool saturated = false;
};

ClientCpu CompareCpu(const CpuSnapshot& before, const CpuSnapshot& after);

}  // namespace attn::client
