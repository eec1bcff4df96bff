// The .safetensors format: a JSON header of names, dtypes, shapes and byte
// offsets, then the raw little-endian data. Models are read from it
// (AttentionModel::LoadSafetensors) and the tests write it.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "attn/status.h"
#include "attn/tensor.h"

namespace attn {

// The contents of a .safetensors file: float32 tensors and string metadata.
struct SafetensorsFile {
  std::map<std::string, std::string> metadata;
  std::map<std::string, Tensor> tensors;
};

// Parses safetensors bytes. Only F32 tensors are accepted. `source` (usually
// the file name) starts every error message. Never reads out of bounds.
StatusOr<SafetensorsFile> ParseSafetensors(std::string_view bytes, const std::string& source);
StatusOr<SafetensorsFile> ReadSafetensorsFile(const std::string& path);
// Serializes to safetensors bytes (tensors in name order).
std::string SerializeSafetensors(const SafetensorsFile& file);

}  // namespace attn
