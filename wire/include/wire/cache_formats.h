// How a KV-cache session stores its keys and values, on the wire
// (session.proto's cache_dtype and CacheFormat) and in core (CacheType,
// CacheFormat), and the names the CLI, the reports and the bench use:
// written once for the server, which checks what a client sends, and for
// the clients.
#pragma once

#include <string_view>

#include "attention/v1/session.pb.h"
#include "attn/kv_cache.h"
#include "attn/status.h"

namespace attn::wire {

// cache_dtype: UNSPECIFIED (float32), FLOAT32, BFLOAT16 or FLOAT16; any
// other value is INVALID_ARGUMENT naming the field, the expected and the
// received.
StatusOr<CacheType> CacheTypeFromWire(int dtype);
attention::v1::DataType CacheTypeToWire(CacheType type);

// key_format or value_format (`field` names which in the error).
StatusOr<CacheFormat> CacheFormatFromWire(int format, const char* field);
attention::v1::CacheFormat CacheFormatToWire(CacheFormat format);

// "float32", "bfloat16" or "float16" (UNSPECIFIED and unknown: "float32").
const char* CacheDtypeName(int dtype);
// "int8", "fp8_e4m3", "int4", or "unquantized" (UNSPECIFIED and unknown).
const char* CacheFormatName(int format);
// The inverse of CacheFormatName over its four names; false for any other.
bool CacheFormatByName(std::string_view name, attention::v1::CacheFormat* format);

}  // namespace attn::wire
