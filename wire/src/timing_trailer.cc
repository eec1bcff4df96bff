#include "wire/timing_trailer.h"

#include <cstdio>

namespace attn::wire {

std::string TimingTrailerValue(std::chrono::nanoseconds queue, std::chrono::nanoseconds compute) {
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  return "queue=" + std::to_string(duration_cast<microseconds>(queue).count()) +
         ",compute=" + std::to_string(duration_cast<microseconds>(compute).count());
}

bool ParseTimingTrailer(std::string_view value, double* queue_us, double* compute_us) {
  *queue_us = *compute_us = -1;
  const std::string text(value);
  double queue = 0, compute = 0;
  char end = 0;
  if (std::sscanf(text.c_str(), "queue=%lf,compute=%lf%c", &queue, &compute, &end) != 2) {
    return false;
  }
  *queue_us = queue, *compute_us = compute;
  return true;
}

bool ServerTiming(const std::multimap<grpc::string_ref, grpc::string_ref>& trailing,
                  double* queue_us, double* compute_us) {
  *queue_us = *compute_us = -1;
  const auto it = trailing.find(kTimingTrailer);
  if (it == trailing.end()) return false;
  return ParseTimingTrailer(std::string_view(it->second.data(), it->second.size()), queue_us,
                            compute_us);
}

}  // namespace attn::wire
