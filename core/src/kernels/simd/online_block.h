// The online softmax's step over one score block, per ISA tier: the
// functions behind SoftmaxKernels::online_block (softmax_kernels.h), which
// says what they compute. Internal to core.
#pragma once

#include "kernels/simd/softmax_kernels.h"

namespace attn::internal {

void OnlineBlockPortable(const OnlineBlock& b);
void OnlineBlockAvx2(const OnlineBlock& b);    // runs on AVX2 + FMA only
void OnlineBlockAvx512(const OnlineBlock& b);  // runs on AVX-512 only

}  // namespace attn::internal
