#include "wire/tensor_data.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace attn::wire {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// attention.v1 nests Tensors at most two deep (request.projections.q_weight).
constexpr int kMaxDepth = 4;
constexpr uint32_t kTensorDataField = 3;  // attention.v1.Tensor.data
constexpr int kLengthDelimited = 2;

// A varint of at most `max_bytes` bytes. protobuf reads each kind of varint
// with its own limit, and the parse here must refuse whatever protobuf
// refuses among the bytes it drops or rewrites (a Tensor's `data` tag and
// length, a Tensor-holding field's tag and length): an overlong encoding
// accepted here would be written back canonically, and protobuf would then
// parse a message it refuses in the original.
bool ReadVarint(const char** p, const char* end, int max_bytes, uint64_t* v) {
  uint64_t r = 0;
  for (int i = 0; i < max_bytes; ++i) {
    if (*p == end) return false;
    const auto b = static_cast<uint8_t>(*(*p)++);
    r |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
    if ((b & 0x80) == 0) {
      *v = r;
      return true;
    }
  }
  return false;
}

// protobuf 3.21 (parse_context.h) reads a tag as a varint32 of at most 5
// bytes (ReadTag: a sixth byte is an error; bits past 32 are dropped, which
// is refused here: left to protobuf), a length as one of at most 5 bytes
// below 2^31 - 16 (ReadSize), and a value as a varint64 of at most 10 bytes.
constexpr int kMaxTagBytes = 5;
constexpr int kMaxSizeBytes = 5;
constexpr int kMaxVarintBytes = 10;
constexpr uint64_t kMaxSize = uint64_t{INT32_MAX} - 16;  // ParseContext::kSlopBytes

void AppendVarint(uint64_t v, std::string* out) {
  uint8_t buf[10];  // a varint64 takes at most 10 bytes
  const uint8_t* end = google::protobuf::io::CodedOutputStream::WriteVarint64ToArray(v, buf);
  out->append(reinterpret_cast<const char*>(buf), static_cast<size_t>(end - buf));
}

void AppendTag(uint32_t field, std::string* out) {
  AppendVarint((uint64_t{field} << 3) | kLengthDelimited, out);
}

// One field as sent: [start, end) in all, its payload from `payload` (for a
// length-delimited field, after the length).
struct Field {
  const char* start = nullptr;
  const char* payload = nullptr;
  const char* end = nullptr;
  uint32_t number = 0;
  int wire_type = 0;
};

// The field at *p; false when it is malformed, truncated or a group.
bool NextField(const char** p, const char* end, Field* f) {
  f->start = *p;
  uint64_t tag = 0, n = 0;
  if (!ReadVarint(p, end, kMaxTagBytes, &tag) || tag > UINT32_MAX || (tag >> 3) == 0) {
    return false;
  }
  f->number = static_cast<uint32_t>(tag >> 3);
  f->wire_type = static_cast<int>(tag & 7);
  f->payload = *p;
  switch (f->wire_type) {
    case 0:
      if (!ReadVarint(p, end, kMaxVarintBytes, &n)) return false;
      break;
    case 1:
    case 5:
      n = f->wire_type == 1 ? 8 : 4;
      if (static_cast<uint64_t>(end - *p) < n) return false;
      *p += n;
      break;
    case kLengthDelimited:
      if (!ReadVarint(p, end, kMaxSizeBytes, &n) || n > kMaxSize ||
          n > static_cast<uint64_t>(end - *p)) {
        return false;
      }
      f->payload = *p;
      *p += n;
      break;
    default:
      return false;
  }
  f->end = *p;
  return true;
}

const Descriptor* TensorType() { return attention::v1::Tensor::descriptor(); }

// True when messages of type `d` hold a Tensor, directly or deeper.
bool HoldsTensors(const Descriptor* d, int depth) {
  if (depth > kMaxDepth) return false;
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->type() != FieldDescriptor::TYPE_MESSAGE || f->is_repeated()) continue;
    if (f->message_type() == TensorType() || HoldsTensors(f->message_type(), depth + 1)) {
      return true;
    }
  }
  return false;
}

// A Tensor's data, and the fields that lead to that Tensor from the top.
struct Pending {
  const FieldDescriptor* path[kMaxDepth + 1] = {};
  int depth = 0;
  std::string_view bytes;
};

class Stripper {
 public:
  // Appends the fields of the `d` message in [p, end) to `out`, without the
  // Tensors' data, which go to pending_.
  bool Strip(const Descriptor* d, const char* p, const char* end, std::string* out) {
    uint64_t seen = 0;  // message fields (numbers below 64) already met here
    while (p < end) {
      Field f;
      if (!NextField(&p, end, &f)) return false;
      const FieldDescriptor* fd = f.wire_type == kLengthDelimited
                                      ? d->FindFieldByNumber(static_cast<int>(f.number))
                                      : nullptr;
      const bool message = fd != nullptr && fd->type() == FieldDescriptor::TYPE_MESSAGE &&
                           !fd->is_repeated() && depth_ < kMaxDepth;
      const bool tensor = message && fd->message_type() == TensorType();
      if (!tensor && !(message && HoldsTensors(fd->message_type(), depth_ + 1))) {
        out->append(f.start, f.end);
        continue;
      }
      // A message field sent twice is merged by protobuf: left to it.
      if (f.number >= 64 || ((seen >> f.number) & 1) != 0) return false;
      seen |= uint64_t{1} << f.number;
      path_[depth_++] = fd;
      std::string inner;
      const bool ok = tensor ? StripTensor(f.payload, f.end, &inner)
                             : Strip(fd->message_type(), f.payload, f.end, &inner);
      --depth_;
      if (!ok) return false;
      AppendTag(f.number, out);
      AppendVarint(inner.size(), out);
      out->append(inner);
    }
    return true;
  }

  std::vector<Pending>& pending() { return pending_; }

 private:
  bool StripTensor(const char* p, const char* end, std::string* out) {
    bool found = false;
    while (p < end) {
      Field f;
      if (!NextField(&p, end, &f)) return false;
      if (f.number != kTensorDataField || f.wire_type != kLengthDelimited) {
        out->append(f.start, f.end);
        continue;
      }
      if (found) return false;  // the last would win: left to protobuf
      found = true;
      Pending pd;
      std::copy(path_, path_ + depth_, pd.path);
      pd.depth = depth_;
      pd.bytes = std::string_view(f.payload, static_cast<size_t>(f.end - f.payload));
      pending_.push_back(pd);
    }
    return true;
  }

  const FieldDescriptor* path_[kMaxDepth + 1] = {};
  int depth_ = 0;
  std::vector<Pending> pending_;
};

}  // namespace

const std::string_view* TensorData::Find(const attention::v1::Tensor* t) const {
  for (const auto& [tensor, bytes] : spans_) {
    if (tensor == t) return &bytes;
  }
  return nullptr;
}

std::string OutputPrefix(const Shape& shape, uint64_t data_bytes) {
  attention::v1::Tensor head;  // the fields before `data`, as protobuf writes them
  head.mutable_shape()->Add(shape.begin(), shape.end());
  head.set_dtype(attention::v1::DATA_TYPE_FLOAT32);
  std::string tensor_head = head.SerializeAsString();
  AppendTag(kTensorDataField, &tensor_head);
  AppendVarint(data_bytes, &tensor_head);
  std::string out;
  out.reserve(tensor_head.size() + 12);
  AppendTag(attention::v1::AttentionResponse::kOutputFieldNumber, &out);
  AppendVarint(tensor_head.size() + data_bytes, &out);
  out += tensor_head;
  return out;
}

bool ParseWithoutTensorData(std::string_view bytes, Message* msg, TensorData* data) {
  data->Clear();
  Stripper stripper;
  std::string skeleton;
  skeleton.reserve(64);
  if (!stripper.Strip(msg->GetDescriptor(), bytes.data(), bytes.data() + bytes.size(), &skeleton) ||
      !msg->ParseFromString(skeleton)) {
    return false;
  }
  for (const Pending& pd : stripper.pending()) {
    const Message* m = msg;
    for (int i = 0; i < pd.depth; ++i) m = &m->GetReflection()->GetMessage(*m, pd.path[i]);
    const auto* tensor = google::protobuf::DynamicCastToGenerated<attention::v1::Tensor>(m);
    if (tensor == nullptr) return false;
    data->Add(tensor, pd.bytes);
  }
  return true;
}

}  // namespace attn::wire
