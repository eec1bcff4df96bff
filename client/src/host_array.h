// Host arrays and their conversions: the wire Tensor, inline JSON, .npy files
// and readable text. The layer every client call and the load generator
// build requests with.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "attention/v1/attention.pb.h"
#include "attn/json.h"
#include "attn/status.h"
#include "attn/tensor.h"
#include "wire/tensor_codec.h"

namespace attn::client {

// How tensors travel: raw little-endian `data` bytes, or the `values` array.
using Encoding = wire::Encoding;

// A dense, row-major float32 or bool array (bool elements stored as 0/1).
struct HostArray {
  Shape shape;
  std::vector<float> values;
  bool is_bool = false;

  int64_t numel() const;
};

// N(0, stddev) floats of `shape`, drawn from `rng`.
HostArray RandomArray(Shape shape, std::mt19937& rng, float stddev = 1.0f);

// Rounds `a`'s floats to `type` (nearest even) and widens them back, in
// place: what the server sees when `a` travels as `type`. No-op for FLOAT32.
void RoundToWireType(HostArray* a, wire::WireType type);

// To the wire, as BOOL or as `float_type` (FLOAT32, or FLOAT16/BFLOAT16
// rounded to nearest even, always as data) (wire::EncodeDense).
attention::v1::Tensor ToWire(const HostArray& a, Encoding encoding,
                             wire::WireType float_type = wire::WireType::kFloat32);
// From the wire: FLOAT32 (or unspecified), FLOAT16, BFLOAT16 (widened) and
// BOOL, from data or values,
// decoded by wire::DecodeTensor, so a malformed tensor gets the same code and
// message as the server gives it.
StatusOr<HostArray> FromWire(const attention::v1::Tensor& t, const std::string& what);

// Nested JSON arrays of numbers (or true/false), e.g. "[[1,0],[0,1]]".
// Ragged arrays are refused, naming the position.
StatusOr<HostArray> ParseJsonArray(const std::string& text, const std::string& what);
// The same from a parsed JSON value (an array).
StatusOr<HostArray> FromJsonArray(const JsonValue& json, const std::string& what);

// .npy (format 1.0-3.0, C order) with dtype <f4, <f8 (converted) or |b1.
StatusOr<HostArray> ReadNpy(const std::string& path);
// Writes float32 .npy (format 1.0).
Status WriteNpy(const std::string& path, const HostArray& a);

// An inline JSON array, or the path of a .npy file when `arg` ends in .npy.
StatusOr<HostArray> LoadArrayArg(const std::string& arg, const std::string& what);

// Readable text, nested like numpy, e.g. "[[0.7988, 0.7616], ...]".
std::string FormatArray(const HostArray& a, int precision = 4);

}  // namespace attn::client
