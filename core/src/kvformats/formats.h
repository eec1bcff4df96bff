// The page formats' codecs (page_codec.h), one file each. Internal to core.
#pragma once

#include "kvformats/page_codec.h"

namespace attn::internal {

// format_float.cc: the values as given, rounded to the type.
const PageCodec& Float32Codec();
const PageCodec& BFloat16Codec();
const PageCodec& Float16Codec();
// format_int8.cc: symmetric int8 codes, a factor per (token, kv head).
const PageCodec& Int8Codec();
// format_fp8.cc: float8 e4m3 codes, a factor per (token, kv head).
const PageCodec& Fp8E4M3Codec();
// format_int4.cc: 4-bit codes; values per token in groups, keys per channel
// over a block of tokens.
const PageCodec& Int4ValuesCodec();
const PageCodec& Int4KeysCodec();
// An int4 key code: x against a channel's (min, scale); and the code of
// channel x in a row.
uint8_t Int4Code(double x, float lo, float scale);
uint8_t Int4Nibble(const uint8_t* row, int64_t dim, int64_t x);

}  // namespace attn::internal
