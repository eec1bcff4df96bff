// The `attn-timing-us` trailer: the server's split of a call's time,
// "queue=<us>,compute=<us>". Written by the server, read by the bench. One
// entry rather than two: each custom trailer costs both ends HPACK and
// metadata work on every call (two of them cost small calls ~2% req/s).
#pragma once

#include <grpcpp/support/string_ref.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace attn::wire {

inline constexpr char kTimingTrailer[] = "attn-timing-us";

// "queue=12,compute=345", in whole microseconds.
std::string TimingTrailerValue(std::chrono::nanoseconds queue, std::chrono::nanoseconds compute);

// Parses a value written by TimingTrailerValue. False (and -1s) when it does
// not parse.
bool ParseTimingTrailer(std::string_view value, double* queue_us, double* compute_us);

// The trailer among a call's trailing metadata. False (and -1s) when the call
// carries none (it never reached a CPU) or the value does not parse.
bool ServerTiming(const std::multimap<grpc::string_ref, grpc::string_ref>& trailing,
                  double* queue_us, double* compute_us);

}  // namespace attn::wire
