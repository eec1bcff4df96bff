#include "cli/variant_flags.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "host_array.h"

namespace attn::client {

StatusOr<AttentionVariants> VariantsFromFlags(const CommandLine& cl) {
  AttentionVariants v;
  auto align = cl.Choice("--causal-alignment", {"top_left", "bottom_right"}, "top_left");
  if (!align.ok()) return align.status();
  v.bottom_right = *align == "bottom_right";
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  for (const auto& [flag, dst] :
       {std::pair{"--window-left", &v.window_left}, std::pair{"--window-right", &v.window_right}}) {
    if (!cl.has(flag)) continue;
    auto n = cl.Int(flag, -kMax, kMax, 0);  // a negative window: the server's message
    if (!n.ok()) return n.status();
    *dst = *n;
  }
  if (cl.has("--softcap")) {
    const std::string s = cl.get("--softcap");
    char* end = nullptr;
    const float f = std::strtof(s.c_str(), &end);
    if (s.empty() || *end != '\0') {
      return Status::InvalidArgument("--softcap: expected a number, got '" + s + "'");
    }
    v.softcap = f;
  }
  for (const auto& [flag, dst] :
       {std::pair{"--alibi-slopes", &v.alibi_slopes}, std::pair{"--sink-logits", &v.sink_logits}}) {
    if (!cl.has(flag)) continue;
    auto arr = LoadArrayArg(cl.get(flag), std::string(flag).substr(2));
    if (!arr.ok()) return arr.status();
    *dst = std::move(*arr);
  }
  v.return_lse = cl.has("--return-lse");
  if (cl.has("--compute-precision")) {
    auto p = cl.Choice("--compute-precision", {"float32", "bfloat16"}, "float32");
    if (!p.ok()) return p.status();
    v.compute_precision = *p;
  }
  for (const auto& [flag, dst] : {std::pair{"--cu-seqlens-q", &v.cu_seqlens_q},
                                  std::pair{"--cu-seqlens-k", &v.cu_seqlens_k}}) {
    if (!cl.has(flag)) continue;
    // A comma list of offsets, "0,128,640": checked by the server.
    const std::string list = cl.get(flag);
    size_t at = 0;
    while (at <= list.size()) {
      const size_t comma = std::min(list.find(',', at), list.size());
      const std::string item = list.substr(at, comma - at);
      char* end = nullptr;
      const long long x = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0') {
        return Status::InvalidArgument(std::string(flag) +
                                       ": expected comma-separated integers, got '" + list + "'");
      }
      dst->push_back(x);
      at = comma + 1;
    }
  }
  auto kv = cl.Int("--num-kv-heads", 0, 1 << 20, 0);
  if (!kv.ok()) return kv.status();
  v.num_kv_heads = *kv;
  return v;
}

}  // namespace attn::client
