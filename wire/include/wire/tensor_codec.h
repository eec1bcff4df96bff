// Wire tensors to core views and back: the only place a tensor from the
// network is decoded or encoded, for every protocol (attention.v1 and the
// Open Inference Protocol), for the server and the client alike.
//
// A protocol first describes its tensor as a WireTensor (pointers into its
// message); DecodeTensor checks it and views it. Float32 and one-byte BOOL
// data are not copied: the view points into the message, which must outlive
// it. FLOAT16/BFLOAT16 (raw bytes only) are widened exactly to float32, and
// BOOL sent as floats is converted, into storage the DecodedTensor owns.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "attention/v1/attention.pb.h"
#include "attn/status.h"
#include "attn/tensor.h"

namespace attn::wire {

// The element types the service takes on the wire.
enum class WireType { kFloat32, kFloat16, kBFloat16, kBool, kOther };

// Bytes per element (0 for kOther).
int64_t WireTypeBytes(WireType type);

// How a tensor's elements travel: raw little-endian bytes (attention.v1
// `data`, OIP raw contents) or a typed array (`values`, OIP contents).
enum class Encoding { kData, kValues };

// One tensor as a protocol carries it, not yet checked. Points into the
// message.
struct WireTensor {
  WireType type = WireType::kFloat32;
  std::string type_name;  // as the protocol spells it, for messages
  Shape shape;
  bool has_raw = false;
  std::string_view raw;
  // The typed array: floats, or bools (one byte each); count elements.
  const float* floats = nullptr;
  const bool* bools = nullptr;
  int64_t typed_count = 0;
  // The protocol's names, for messages: the two forms, the type field, and
  // the types a float or a bool field takes.
  const char* raw_name = "data";
  const char* typed_name = "values";
  const char* type_field = "dtype";
  const char* float_types = "DATA_TYPE_FLOAT32, DATA_TYPE_FLOAT16 or DATA_TYPE_BFLOAT16";
  const char* bool_type = "DATA_TYPE_BOOL";
};

struct DecodedTensor {
  TensorView view;
  Encoding encoding = Encoding::kData;
  WireType type = WireType::kFloat32;  // as sent
  std::vector<uint8_t> bool_storage;   // BOOL sent as floats
  std::vector<float> float_storage;    // FLOAT16/BFLOAT16, widened
  std::vector<uint16_t> half_storage;  // BFLOAT16 kept, when its bytes are unaligned
};

// Checks `t` and views it. `field` names it in errors ("query",
// "projections.q_weight"). `expected` is what the field takes: kFloat32
// (sent as float32, float16 or bfloat16), kBool, or kBFloat16 (sent as
// BFLOAT16 and viewed as bf16 in place: a call that computes in bf16). Errors: INVALID_ARGUMENT
// for a bad dtype, negative dim, rank over 8, both or neither of raw/typed,
// a half type sent typed, or a size that is not the product of the dims;
// RESOURCE_EXHAUSTED above `max_elements`. Allocates at most 4 bytes per
// element, for elements the message already holds.
Status DecodeTensor(const WireTensor& t, const std::string& field, DataType expected,
                    int64_t max_elements, DecodedTensor* out);

class TensorData;

// attention.v1.Tensor as a WireTensor; with `data` (tensor_data.h), its
// bytes are the ones recorded there when there are.
WireTensor FromNative(const attention::v1::Tensor& t, const TensorData* data = nullptr);

// DecodeTensor(FromNative(t), ...).
Status DecodeTensor(const attention::v1::Tensor& t, const std::string& field, DataType expected,
                    int64_t max_elements, DecodedTensor* out);

// Writes `n` float32 `src` values into `dst` as `type` (kFloat32, or a half
// type rounded to nearest even); `dst` holds n * WireTypeBytes(type) bytes.
void NarrowInto(const float* src, int64_t n, WireType type, char* dst);

// INT64 values as OIP's raw bytes (little-endian, 8 each), and back; `raw`
// must hold a multiple of 8 bytes. For the cu_seqlens offsets.
std::string Int64ToRaw(const std::vector<int64_t>& values);
std::vector<int64_t> Int64FromRaw(std::string_view raw);

// Writes `src` into `dst` in `encoding`, as `type` (kFloat32, kFloat16 or
// kBFloat16; the half types always as `data`).
void EncodeTensor(const Tensor& src, WireType type, Encoding encoding, attention::v1::Tensor* dst);

// Writes `shape` and the `n` dense row-major `values` into `dst` in
// `encoding`, as `type`: FLOAT32, a half type (rounded; `data` only), or
// BOOL (value != 0). `n` is written as given, even when it does not match
// the shape (tests send such tensors on purpose; the receiver refuses them).
void EncodeDense(const Shape& shape, const float* values, size_t n, WireType type,
                 Encoding encoding, attention::v1::Tensor* dst);

// "DATA_TYPE_FLOAT32"
std::string WireDataTypeName(int dtype);

// attention.v1's dtype enum value for `type`, and back (kOther for any
// other value).
int NativeDataType(WireType type);
WireType FromNativeDataType(int dtype);

// The Open Inference Protocol's datatype names: "FP32", "FP16", "BF16",
// "BOOL" (kOther: ""), and back (kOther for any other name).
const char* OipDatatype(WireType type);
WireType FromOipDatatype(const std::string& datatype);

}  // namespace attn::wire
