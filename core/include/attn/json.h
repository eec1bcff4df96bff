// A strict, minimal JSON reader (safetensors headers, client inputs), and
// the one JSON string writer of the project (safetensors headers, JSON logs,
// bench reports).
// Bounded nesting depth, no exceptions, never reads past the input.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attn/status.h"

namespace attn {

struct JsonValue {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0.0;
  bool is_integer = false;  // the literal had no fraction or exponent and fits int64
  int64_t integer = 0;
  std::string string;
  std::vector<JsonValue> array;
  std::vector<std::pair<std::string, JsonValue>> object;  // in input order
  // With JsonOptions::pack_numbers, an array whose items are all numbers or
  // bools keeps them here (bools as 0 and 1; `array` stays empty): 8 bytes
  // an item instead of a JsonValue's ~110, for large tensors sent as JSON.
  std::vector<double> numbers;
  bool packed = false;

  // The member named `key`, or null.
  const JsonValue* Find(std::string_view key) const;
};

struct JsonOptions {
  bool pack_numbers = false;  // see JsonValue::numbers
};

// Parses one JSON document (surrounding whitespace allowed). Errors say
// what was wrong and at which byte offset.
StatusOr<JsonValue> ParseJson(std::string_view text, JsonOptions options = {});

// `s` as a JSON string literal, quotes included: '"' and '\\' escaped, control
// characters as \n, \t, \r or \u00XX. Bytes >= 0x80 pass through (UTF-8).
std::string JsonQuote(std::string_view s);

}  // namespace attn
