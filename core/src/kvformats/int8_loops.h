// The decode kernel's loops over int8 codes in integer units: QK against
// each query row rounded to int16, PV with each row's weights rounded to
// int16, products summed in int32 (AVX512-VNNI's VPDPWSSD where the CPU
// has it, VPMADDWD otherwise). Rows with a non-finite element, and widths
// the integer loops do not take, run the float loops (codes widened to
// float32 in registers). Internal to core.
#pragma once

#include <cstdint>

namespace attn::internal {

// As QkCodesFn and PvCodesFn (page_codec.h) over int8 codes.
void QkInt8Codes(const float* q, int64_t rows, const uint8_t* k, int64_t c, int64_t d, float* s,
                 int64_t lds, const uint8_t* next);
void PvInt8Codes(const float* p, int64_t rows, int64_t ldp, const uint8_t* v, int64_t c, int64_t dv,
                 float* o, const uint8_t* next);

}  // namespace attn::internal
