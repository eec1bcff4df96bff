// Runs compute jobs so that the threads computing never exceed the CPUs.
//
// The scheduler owns `cpus` CPU tokens and `cpus` worker threads. A job asks
// for k tokens (1 for a small request, all of them for a large one) and runs
// on a worker with an OpenMP team of k threads once k tokens are free.
// Jobs start in FIFO order, so a large job is never starved by a stream of
// small ones. gRPC's own threads only receive and answer calls.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace attn::server {

class ComputeScheduler {
 public:
  // `cpus` >= 1 tokens and workers; at most `max_queue` jobs wait.
  ComputeScheduler(int cpus, int max_queue);
  ~ComputeScheduler();  // runs the queued jobs, then joins the workers
  ComputeScheduler(const ComputeScheduler&) = delete;
  ComputeScheduler& operator=(const ComputeScheduler&) = delete;

  // Runs `job` on a worker, called with the thread count it was granted
  // (min(threads, cpus)): at once when its tokens are free and nobody waits
  // (it never counts as queued), else after the jobs queued before it.
  // Returns false, without queueing, when it would have to wait and
  // `max_queue` jobs already do; so max_queue 0 means "run now or refuse".
  // Thread-safe.
  bool Submit(int threads, std::function<void(int threads)> job);

  // Takes `threads` tokens without queueing when they are free and no job is
  // waiting (so FIFO order holds), for a caller that runs its job on its own
  // thread; Release() gives them back. Saves a thread hand-off (two context
  // switches), which is most of the cost of a small call.
  bool TryAcquire(int threads);
  void Release(int threads);

  int cpus() const { return cpus_; }
  int max_queue() const { return max_queue_; }
  // Jobs waiting, and jobs running (for metrics and tests).
  int queued() const;
  int running() const;

 private:
  struct Job {
    int threads;
    std::function<void(int)> run;
    bool granted = false;  // its tokens are already taken: it starts at once
  };
  void WorkerLoop();

  const int cpus_;
  const int max_queue_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;  // granted jobs (at most one per idle worker), then waiting ones
  int waiting_ = 0;        // jobs in queue_ not granted
  int free_tokens_;
  int running_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace attn::server
