// The `attn-compute-precision` response metadata of every computed gRPC call
// (native and OIP): "float32" or "bfloat16", the arithmetic the answer came
// from. Written by the server, read by the bench's --verify and by clients
// that check it.
#pragma once

namespace attn::wire {

inline constexpr char kPrecisionHeader[] = "attn-compute-precision";
inline constexpr char kPrecisionFloat32[] = "float32";
inline constexpr char kPrecisionBfloat16[] = "bfloat16";

}  // namespace attn::wire
