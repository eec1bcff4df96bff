// Wire tensors (attention.v1.Tensor) to core views and back: the only place
// a wire Tensor is decoded or encoded, for the server and the client alike.
//
// Decoding does not copy float data: a view points into the request's `data`
// bytes or `values` array, so the request must outlive the view. Only a BOOL
// tensor sent as `values` is converted (to one byte per element).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attention/v1/attention.pb.h"
#include "attn/status.h"
#include "attn/tensor.h"

namespace attn::wire {

// How a tensor's elements travel: raw `data` bytes or the `values` array.
enum class Encoding { kData, kValues };

struct DecodedTensor {
  TensorView view;
  Encoding encoding = Encoding::kData;
  std::vector<uint8_t> bool_storage;  // BOOL from `values` only
};

// Checks the wire form of `t` and views it. `field` names it in errors
// ("query", "projections.q_weight"). `expected` is the element type the
// field takes (FLOAT32, or BOOL for masks). Errors: INVALID_ARGUMENT for a
// bad dtype, negative dim, both or neither of data/values, or a byte length
// that is not the product of the dims; RESOURCE_EXHAUSTED above
// `max_elements`. Never allocates more than the message already holds.
Status DecodeTensor(const attention::v1::Tensor& t, const std::string& field, DataType expected,
                    int64_t max_elements, DecodedTensor* out);

// Makes `dst` a FLOAT32 tensor of `shape` (already validated) in `data`
// encoding, and returns its bytes for the values to be written into.
float* OutputBytes(const Shape& shape, attention::v1::Tensor* dst);

// Writes `src` into `dst` in `encoding` (FLOAT32).
void EncodeTensor(const Tensor& src, Encoding encoding, attention::v1::Tensor* dst);

// Writes `shape` and the `n` dense row-major `values` into `dst` in
// `encoding`, as FLOAT32, or as BOOL (value != 0) when `dtype` is kBool. `n`
// is written as given, even when it does not match the shape (tests send
// such tensors on purpose; the receiver refuses them).
void EncodeDense(const Shape& shape, const float* values, size_t n, DataType dtype,
                 Encoding encoding, attention::v1::Tensor* dst);

// "DATA_TYPE_FLOAT32"
std::string WireDataTypeName(int dtype);

}  // namespace attn::wire
