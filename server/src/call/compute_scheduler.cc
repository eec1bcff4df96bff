#include "call/compute_scheduler.h"

#include <algorithm>

namespace attn::server {

ComputeScheduler::ComputeScheduler(int cpus, int max_queue)
    : cpus_(std::max(cpus, 1)), max_queue_(std::max(max_queue, 0)), free_tokens_(cpus_) {
  workers_.reserve(cpus_);
  for (int i = 0; i < cpus_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ComputeScheduler::~ComputeScheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

bool ComputeScheduler::Submit(int threads, std::function<void(int)> job) {
  threads = std::clamp(threads, 1, cpus_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    // Its tokens are free and nobody is ahead of it: it starts now, on an
    // idle worker (a worker runs one job, a job holds a token: one is idle).
    const bool now = waiting_ == 0 && free_tokens_ >= threads;
    if (!now && waiting_ >= max_queue_) return false;
    if (now) {
      free_tokens_ -= threads;
      ++running_;
    } else {
      ++waiting_;
    }
    queue_.push_back({threads, std::move(job), now});
  }
  cv_.notify_all();
  return true;
}

bool ComputeScheduler::TryAcquire(int threads) {
  std::lock_guard<std::mutex> lock(mu_);
  threads = std::clamp(threads, 1, cpus_);
  if (waiting_ > 0 || free_tokens_ < threads || stopping_) return false;
  free_tokens_ -= threads;
  ++running_;
  return true;
}

void ComputeScheduler::Release(int threads) {
  bool waiting;
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_tokens_ += std::clamp(threads, 1, cpus_);
    --running_;
    waiting = waiting_ > 0;
  }
  // Only a queued job can use the tokens; waking idle workers for nothing
  // costs two context switches per small call.
  if (waiting) cv_.notify_all();
}

int ComputeScheduler::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_;
}

int ComputeScheduler::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

void ComputeScheduler::WorkerLoop() {
  while (true) {
    Job job;
    bool more = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // FIFO: only the front job may start: a granted one at once, a
      // waiting one when its tokens are free.
      cv_.wait(lock, [this] {
        return (!queue_.empty() &&
                (queue_.front().granted || queue_.front().threads <= free_tokens_)) ||
               (stopping_ && queue_.empty());
      });
      if (queue_.empty()) return;  // stopping, nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
      if (!job.granted) {
        free_tokens_ -= job.threads;
        ++running_;
        --waiting_;
      }
      more = !queue_.empty() && (queue_.front().granted || free_tokens_ > 0);
    }
    if (more) cv_.notify_all();  // the next job may fit in the remaining tokens
    job.run(job.threads);
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_tokens_ += job.threads;
      --running_;
      more = waiting_ > 0;
    }
    if (more) cv_.notify_all();
  }
}

}  // namespace attn::server
