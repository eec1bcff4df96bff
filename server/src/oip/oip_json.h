// The Open Inference Protocol's HTTP/JSON bodies, to and from the gRPC form
// of its messages (inference::ModelInferRequest/Response), so that HTTP
// calls take the very path gRPC ones do (oip_adapter.h).
//
// Inputs always become raw contents: JSON `data` (flat or nested) is written
// as the datatype's little-endian bytes (FP16/BF16 rounded to nearest even),
// and binary tensor data (the `binary_data_size` extension) is taken as is.
// Nothing is allocated from a declared shape: only from data that came.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "attn/status.h"
#include "inference/open_inference_grpc.pb.h"

namespace attn::server::oip {

// What the HTTP layer must remember of a request to answer it.
struct HttpOutputs {
  bool all_binary = false;          // parameters.binary_data_output
  std::vector<std::string> binary;  // outputs whose parameters.binary_data is true
};

// Parses an infer request `body` for `model`/`version` (from the URL).
// `json_length`: the Inference-Header-Content-Length header (-1: none, the
// whole body is JSON); the rest of the body is the inputs' binary data, in
// order. INVALID_ARGUMENT names the JSON field.
Status ParseInferRequest(std::string_view body, int64_t json_length, const std::string& model,
                         const std::string& version, inference::ModelInferRequest* req,
                         HttpOutputs* outputs);

// The response body: JSON, or JSON followed by binary output data, in which
// case *json_length is the JSON's length (else -1).
std::string InferResponseBody(const inference::ModelInferResponse& resp, const HttpOutputs& outputs,
                              int64_t* json_length);

std::string ServerMetadataJson(const inference::ServerMetadataResponse& m);
std::string ModelMetadataJson(const inference::ModelMetadataResponse& m);
// {"error": "<message>"}
std::string ErrorJson(const std::string& message);

}  // namespace attn::server::oip
