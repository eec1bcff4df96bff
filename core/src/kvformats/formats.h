// The page formats' codecs (page_codec.h), one file each. Internal to core.
#pragma once

#include <algorithm>

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
// An int4 key block keeps its tokens in groups of kKeyGroup
// (format_int4.cc): the group holding token j starts at KeyGroupStart(j),
// and the group from g0 of a block of g holds KeyGroupTokens(g, g0) (the
// last may hold fewer). The loops score a group's tokens in a vector's 16
// 32-bit lanes.
constexpr int64_t kKeyGroup = 16;
inline int64_t KeyGroupStart(int64_t j) { return j / kKeyGroup * kKeyGroup; }
inline int64_t KeyGroupTokens(int64_t g, int64_t g0) { return std::min(kKeyGroup, g - g0); }
// An int4 key code: x against a channel's (min, scale); and the code of
// channel x of token j in a key block of g tokens.
uint8_t Int4Code(double x, float lo, float scale);
uint8_t Int4KeyNibble(const uint8_t* block, int64_t g, int64_t dim, int64_t j, int64_t x);
// The (scale, min) of each group of c value rows read back (rows rb bytes
// apart, meta0 the first row's pairs): f [groups][ld] the scales, mg
// [groups][ld] each min plus 8 scales (tokens past c untouched), smax[g]
// group g's largest scale. The AVX-512 tier (for int4_loops.cc's PV).
void Int4ValueMeta(const uint8_t* meta0, int64_t rb, int64_t c, int64_t groups, int64_t ld,
                   float* f, float* mg, float* smax);

// format_int8.cc: the decode kernel's loops over int8 codes in integer
// units: QK against each query row rounded to int16, PV with each row's
// weights rounded to int16, products summed in int32 (AVX512-VNNI's
// VPDPWSSD where the CPU has it, VPMADDWD otherwise). Rows with a
// non-finite element, and widths the integer loops do not take, run the
// float loops (codes widened to float32 in registers). As QkCodesFn and
// PvCodesFn (page_codec.h).
void QkInt8Codes(const float* q, int64_t rows, const uint8_t* k, int64_t c, int64_t d, float* s,
                 int64_t lds, const uint8_t* next);
void PvInt8Codes(const float* p, int64_t rows, int64_t ldp, const uint8_t* v, int64_t c, int64_t dv,
                 float* o, const uint8_t* next);

// int4_loops.cc: int4's loops in integer units, for widths where
// Int4Loops (the AVX2 tier or above, a multiple of 32). QkInt4Block scores
// tokens [j, j + c) of a key block of g (format_int4.cc's layout; the
// block's meta: scale[d], min[d]) as the codec's qk_block; PvInt4Values is
// the values' PvCodesFn (other widths: widened to float32 first).
bool Int4Loops(int64_t width);
void QkInt4Block(const float* q, int64_t rows, const uint8_t* block, int64_t g, const float* meta,
                 int64_t j, int64_t c, int64_t d, float* s, int64_t lds, const uint8_t* next);
void PvInt4Values(const float* p, int64_t rows, int64_t ldp, const uint8_t* v, int64_t c,
                  int64_t dv, float* o, const uint8_t* next);
// int4_loops_avx2.cc: the same on the AVX2 tier (below AVX-512): false,
// with nothing written, for a query row that is not finite.
bool QkInt4Block256(const float* q, int64_t rows, const uint8_t* block, int64_t g,
                    const float* meta, int64_t j, int64_t c, int64_t d, float* s, int64_t lds,
                    const uint8_t* next);
void PvInt4Values256(const float* p, int64_t rows, int64_t ldp, const uint8_t* v, int64_t c,
                     int64_t dv, float* o, const uint8_t* next);

}  // namespace attn::internal
