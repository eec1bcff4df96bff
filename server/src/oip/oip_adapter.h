// The Open Inference Protocol (KServe v2) onto the attention call path.
//
// Every server-side model is an OIP model computing nn.MultiheadAttention
// with its weights; `scaled_dot_product_attention` is a built-in one without
// weights. A ModelInferRequest becomes a CallRequest (request_adapter.h), so
// OIP calls get the same checks, limits and messages as attention.v1 ones;
// only the names are OIP's (datatype "FP16", raw_input_contents[i], ...).
// The HTTP/JSON front end (oip_http.h) translates its bodies to and from
// these same messages.
#pragma once

#include <string>
#include <vector>

#include "attn/status.h"
#include "call/prepared_call.h"
#include "inference/open_inference_grpc.pb.h"
#include "models/model_registry.h"

namespace attn::server::oip {

inline constexpr char kSdpaModel[] = "scaled_dot_product_attention";
inline constexpr char kPlatform[] = "attention-server_onednn";
inline constexpr char kVersion[] = "1";  // every model has this one version

// NOT_FOUND naming the models there are, unless `name` is one of them and
// `version` is "" or kVersion.
Status CheckModel(const ModelRegistry& models, const std::string& name, const std::string& version);

void ServerMetadata(inference::ServerMetadataResponse* resp);
Status ModelMetadata(const ModelRegistry& models, const inference::ModelMetadataRequest& req,
                     inference::ModelMetadataResponse* resp);

// Checks and plans `req`; on OK, `call` computes and its respond() fills
// `resp` (which must outlive the call).
Status PrepareInfer(const inference::ModelInferRequest& req, const ModelRegistry& models,
                    const RequestLimits& limits, PreparedCall* call,
                    inference::ModelInferResponse* resp);

}  // namespace attn::server::oip
