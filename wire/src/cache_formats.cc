// A session's storage on the wire and in core (wire/cache_formats.h).
#include "wire/cache_formats.h"

#include <string>

#include "wire/tensor_codec.h"

namespace attn::wire {

namespace v1 = attention::v1;

StatusOr<CacheType> CacheTypeFromWire(int dtype) {
  switch (dtype) {
    case v1::DATA_TYPE_UNSPECIFIED:
    case v1::DATA_TYPE_FLOAT32:
      return CacheType::kFloat32;
    case v1::DATA_TYPE_BFLOAT16:
      return CacheType::kBFloat16;
    case v1::DATA_TYPE_FLOAT16:
      return CacheType::kFloat16;
    default:
      return Status::InvalidArgument(
          "cache_dtype: expected DATA_TYPE_FLOAT32 (or UNSPECIFIED), DATA_TYPE_BFLOAT16 or "
          "DATA_TYPE_FLOAT16, got " +
          WireDataTypeName(dtype));
  }
}

v1::DataType CacheTypeToWire(CacheType type) {
  return type == CacheType::kBFloat16  ? v1::DATA_TYPE_BFLOAT16
         : type == CacheType::kFloat16 ? v1::DATA_TYPE_FLOAT16
                                       : v1::DATA_TYPE_FLOAT32;
}

StatusOr<CacheFormat> CacheFormatFromWire(int format, const char* field) {
  switch (format) {
    case v1::CACHE_FORMAT_UNSPECIFIED:
      return CacheFormat::kAsCacheType;
    case v1::CACHE_FORMAT_INT8:
      return CacheFormat::kInt8;
    case v1::CACHE_FORMAT_FP8_E4M3:
      return CacheFormat::kFp8E4M3;
    case v1::CACHE_FORMAT_INT4:
      return CacheFormat::kInt4;
    default:
      return Status::InvalidArgument(std::string(field) +
                                     ": expected CACHE_FORMAT_UNSPECIFIED, CACHE_FORMAT_INT8, "
                                     "CACHE_FORMAT_FP8_E4M3 or CACHE_FORMAT_INT4, got " +
                                     std::to_string(format));
  }
}

v1::CacheFormat CacheFormatToWire(CacheFormat format) {
  return format == CacheFormat::kInt8      ? v1::CACHE_FORMAT_INT8
         : format == CacheFormat::kFp8E4M3 ? v1::CACHE_FORMAT_FP8_E4M3
         : format == CacheFormat::kInt4    ? v1::CACHE_FORMAT_INT4
                                           : v1::CACHE_FORMAT_UNSPECIFIED;
}

const char* CacheDtypeName(int dtype) {
  return dtype == v1::DATA_TYPE_BFLOAT16  ? "bfloat16"
         : dtype == v1::DATA_TYPE_FLOAT16 ? "float16"
                                          : "float32";
}

const char* CacheFormatName(int format) {
  return format == v1::CACHE_FORMAT_INT8       ? "int8"
         : format == v1::CACHE_FORMAT_FP8_E4M3 ? "fp8_e4m3"
         : format == v1::CACHE_FORMAT_INT4     ? "int4"
                                               : "unquantized";
}

bool CacheFormatByName(std::string_view name, v1::CacheFormat* format) {
  for (v1::CacheFormat f : {v1::CACHE_FORMAT_UNSPECIFIED, v1::CACHE_FORMAT_INT8,
                            v1::CACHE_FORMAT_FP8_E4M3, v1::CACHE_FORMAT_INT4}) {
    if (name == CacheFormatName(f)) {
      *format = f;
      return true;
    }
  }
  return false;
}

}  // namespace attn::wire
