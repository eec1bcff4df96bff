// The fuzzers' check of the in-place parse (wire::ParseWithoutTensorData)
// against protobuf's own: it may refuse a form protobuf takes (the server
// then parses with protobuf), but what it takes must be protobuf's message,
// once each Tensor's data is put back. Used by request_fuzzer (the whole
// request path) and parse_fuzzer (the parse alone, faster).
#pragma once

#include <google/protobuf/message.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "attention/v1/attention.pb.h"
#include "attn/status.h"
#include "wire/tensor_data.h"

namespace attn_fuzz {

[[noreturn]] inline void Die(const char* what, const attn::Status& st) {
  std::fprintf(stderr, "fuzz check: %s: %s\n", what, st.ToString().c_str());
  std::abort();
}

// The request parsed without copying tensor data (the server's path) must
// be the message protobuf parses, once its data are put back.
template <typename Request>
inline bool ParseInPlace(const uint8_t* data, size_t size, Request* req,
                         attn::wire::TensorData* tensor_data) {
  Request copied;
  const bool parsed = copied.ParseFromArray(data, static_cast<int>(size));
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (!attn::wire::ParseWithoutTensorData(bytes, req, tensor_data)) {
    tensor_data->Clear();
    req->Swap(&copied);
    return parsed;
  }
  if (!parsed) Die("in-place parse", attn::Status::Internal("took what protobuf refuses"));
  Request restored = *req;
  // Each recorded Tensor's path in `req` is the same in `restored`: put the
  // bytes back through reflection on both.
  std::function<void(const google::protobuf::Message&, google::protobuf::Message*)> restore =
      [&](const google::protobuf::Message& from, google::protobuf::Message* to) {
        const auto* t = google::protobuf::DynamicCastToGenerated<attention::v1::Tensor>(&from);
        if (t != nullptr) {
          if (const std::string_view* d = tensor_data->Find(t)) {
            static_cast<attention::v1::Tensor*>(to)->set_data(std::string(*d));
          }
          return;
        }
        std::vector<const google::protobuf::FieldDescriptor*> fields;
        from.GetReflection()->ListFields(from, &fields);
        for (const auto* f : fields) {
          if (f->type() != google::protobuf::FieldDescriptor::TYPE_MESSAGE || f->is_repeated()) {
            continue;
          }
          restore(from.GetReflection()->GetMessage(from, f),
                  to->GetReflection()->MutableMessage(to, f));
        }
      };
  restore(*req, &restored);
  // Compared as bytes: a NaN among the values equals itself there.
  if (restored.SerializeAsString() != copied.SerializeAsString()) {
    Die("in-place parse",
        attn::Status::Internal("differs from protobuf's: " + restored.ShortDebugString() + " vs " +
                               copied.ShortDebugString()));
  }
  return true;
}

}  // namespace attn_fuzz
