#include "call_spec.h"

namespace attn::client {

wire::WireType DtypeByName(const std::string& name) {
  if (name == "float16") return wire::WireType::kFloat16;
  if (name == "bfloat16") return wire::WireType::kBFloat16;
  return wire::WireType::kFloat32;
}

const char* DtypeName(wire::WireType type) {
  if (type == wire::WireType::kFloat16) return "float16";
  if (type == wire::WireType::kBFloat16) return "bfloat16";
  return "float32";
}

}  // namespace attn::client
