#include "bench/client_cpu.h"

#include <dirent.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace attn::client {
namespace {

double TimevalSeconds(const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; }

// A thread's name and user + sys seconds, from /proc/self/task/TID/stat.
bool ReadThread(int tid, std::string* name, double* seconds) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  const auto open = line.find('('), close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos) return false;
  *name = line.substr(open + 1, close - open - 1);
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  *seconds = static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  return true;
}

}  // namespace

CpuSnapshot TakeCpuSnapshot() {
  CpuSnapshot s;
  s.at = std::chrono::steady_clock::now();
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  s.process_s = TimevalSeconds(u.ru_utime) + TimevalSeconds(u.ru_stime);
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      const int tid = std::atoi(e->d_name);
      std::string name;
      double seconds = 0;
      if (tid > 0 && ReadThread(tid, &name, &seconds)) s.threads[tid] = {name, seconds};
    }
    closedir(d);
  }
  std::ifstream stat("/proc/stat");
  std::string cpu;
  uint64_t v[10] = {};
  if (stat >> cpu && cpu == "cpu") {
    for (uint64_t& x : v) stat >> x;
    for (uint64_t x : v) s.machine_total += x;
    s.machine_idle = v[3] + v[4];  // idle + iowait
  }
  return s;
}

ClientCpu CompareCpu(const CpuSnapshot& a, const CpuSnapshot& b) {
  ClientCpu c;
  c.wall_s = std::max(1e-9, std::chrono::duration<double>(b.at - a.at).count());
  c.cpus_used = (b.process_s - a.process_s) / c.wall_s;
  cpu_set_t set;
  c.cpus_available = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  for (const auto& [tid, t] : b.threads) {
    const auto it = a.threads.find(tid);
    const double before = it == a.threads.end() ? 0 : it->second.second;
    c.busiest.emplace_back(t.first, (t.second - before) / c.wall_s);
  }
  std::sort(c.busiest.begin(), c.busiest.end(),
            [](const auto& x, const auto& y) { return x.second > y.second; });
  if (c.busiest.size() > 4) c.busiest.resize(4);
  if (b.machine_total > a.machine_total) {
    c.machine_idle = static_cast<double>(b.machine_idle - a.machine_idle) /
                     static_cast<double>(b.machine_total - a.machine_total);
  }
  c.saturated = c.machine_idle < 0.05 || (!c.busiest.empty() && c.busiest.front().second > 0.9);
  return c;
}

}  // namespace attn::client
