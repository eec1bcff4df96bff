// libFuzzer target over the in-place parse alone: every input is parsed as
// each attention.v1 request type by wire::ParseWithoutTensorData and by
// protobuf, which must agree (parse_check.h). The input is read twice, whole
// and without its first byte, so that request_fuzzer's corpus (whose byte 0
// picks the RPC) seeds it too. Far faster than request_fuzzer, which also
// validates and computes: tests/run.sh runs both.
#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>

#include "attention/v1/attention.pb.h"
#include "parse_check.h"
#include "wire/tensor_data.h"

namespace {

template <typename Request>
void Check(const uint8_t* data, size_t size) {
  Request req;
  attn::wire::TensorData tensor_data;
  attn_fuzz::ParseInPlace(data, size, &req, &tensor_data);
}

void CheckAll(const uint8_t* data, size_t size) {
  Check<attention::v1::AttentionRequest>(data, size);
  Check<attention::v1::CrossAttentionRequest>(data, size);
  Check<attention::v1::MultiHeadAttentionRequest>(data, size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // protobuf logs every string field that is not UTF-8: silenced, as it
  // would cost more than the parse.
  static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  (void)quiet;
  CheckAll(data, size);
  if (size > 0) CheckAll(data + 1, size - 1);
  return 0;
}
