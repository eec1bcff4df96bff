// attention.v1 tensor data that protobuf never copies: requests parsed
// without copying their tensors' `data`, and answers framed around data that
// lies elsewhere.
//
// protobuf copies every bytes field it parses: a request's tensors would be
// copied once more before core reads them. ParseWithoutTensorData parses
// everything else with protobuf and leaves each attention.v1.Tensor's `data`
// where it lies in the input, as a view (TensorData); FromNative(t, &data)
// then views those bytes. The input must outlive the views.
#pragma once

#include <google/protobuf/message.h>

#include <string_view>
#include <utility>
#include <vector>

#include "attention/v1/attention.pb.h"
#include "attn/tensor.h"

namespace attn::wire {

// Where each parsed Tensor's `data` lies in the input.
class TensorData {
 public:
  // The data of `t`, or null when `t` has none recorded here.
  const std::string_view* Find(const attention::v1::Tensor* t) const;

  void Add(const attention::v1::Tensor* t, std::string_view bytes) {
    spans_.emplace_back(t, bytes);
  }
  void Clear() { spans_.clear(); }
  size_t size() const { return spans_.size(); }

 private:
  std::vector<std::pair<const attention::v1::Tensor*, std::string_view>> spans_;
};

// Parses `bytes` into `msg` (cleared first) the way ParseFromArray would,
// except that every Tensor's `data` stays in `bytes` and is recorded in
// `data`. Returns false, with `msg` and `data` in an unspecified state, when
// the input is not a valid message or uses a form this parser leaves to
// protobuf (a Tensor field or a `data` field given twice, which protobuf
// merges; groups); parse those with protobuf itself.
bool ParseWithoutTensorData(std::string_view bytes, google::protobuf::Message* msg,
                            TensorData* data);

// The bytes of an attention.v1.AttentionResponse up to its output's data:
// the output field's header, the output Tensor's shape and FLOAT32 dtype,
// and the header of a `data` field of `data_bytes` bytes. Followed by those
// bytes (and then the response's other fields, serialized), they are the
// message protobuf would write: an answer whose data never passes through
// protobuf.
std::string OutputPrefix(const Shape& shape, uint64_t data_bytes);

}  // namespace attn::wire
