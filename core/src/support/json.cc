#include "attn/json.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace attn {
namespace {

constexpr int kMaxDepth = 64;

class Parser {
 public:
  Parser(std::string_view text, JsonOptions options) : s_(text), options_(options) {}

  Status Parse(JsonValue* out) {
    SkipSpace();
    ATTN_RETURN_IF_ERROR(Value(out, 0));
    SkipSpace();
    if (pos_ != s_.size()) return Error("trailing characters");
    return Status::Ok();
  }

 private:
  Status Error(const std::string& what) const {
    return Status::InvalidArgument("JSON " + what + " at byte " + std::to_string(pos_));
  }
  void SkipSpace() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Consume(std::string_view lit) {
    if (s_.substr(pos_, lit.size()) != lit) return false;
    pos_ += lit.size();
    return true;
  }

  Status Value(JsonValue* v, int depth) {
    if (depth > kMaxDepth) return Error("nested too deeply");
    if (pos_ >= s_.size()) return Error("unexpected end");
    const char c = s_[pos_];
    if (c == '{') return Object(v, depth);
    if (c == '[') return Array(v, depth);
    if (c == '"') {
      v->type = JsonValue::Type::kString;
      return String(&v->string);
    }
    if (Consume("true")) {
      v->type = JsonValue::Type::kBool;
      v->boolean = true;
      return Status::Ok();
    }
    if (Consume("false")) {
      v->type = JsonValue::Type::kBool;
      return Status::Ok();
    }
    if (Consume("null")) return Status::Ok();
    if (c == '-' || (c >= '0' && c <= '9')) return Number(v);
    return Error(std::string("unexpected character '") + c + "'");
  }

  Status Object(JsonValue* v, int depth) {
    v->type = JsonValue::Type::kObject;
    ++pos_;  // '{'
    SkipSpace();
    if (Consume("}")) return Status::Ok();
    while (true) {
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != '"') return Error("expected a member name");
      std::string key;
      ATTN_RETURN_IF_ERROR(String(&key));
      SkipSpace();
      if (!Consume(":")) return Error("expected ':'");
      SkipSpace();
      JsonValue member;
      ATTN_RETURN_IF_ERROR(Value(&member, depth + 1));
      v->object.emplace_back(std::move(key), std::move(member));
      SkipSpace();
      if (Consume("}")) return Status::Ok();
      if (!Consume(",")) return Error("expected ',' or '}'");
    }
  }

  Status Array(JsonValue* v, int depth) {
    v->type = JsonValue::Type::kArray;
    ++pos_;  // '['
    SkipSpace();
    if (Consume("]")) return Status::Ok();
    while (true) {
      SkipSpace();
      JsonValue item;
      ATTN_RETURN_IF_ERROR(Value(&item, depth + 1));
      const bool scalar =
          item.type == JsonValue::Type::kNumber || item.type == JsonValue::Type::kBool;
      if (options_.pack_numbers && scalar && v->array.empty()) {
        v->packed = true;
        v->numbers.push_back(item.type == JsonValue::Type::kBool ? (item.boolean ? 1.0 : 0.0)
                                                                 : item.number);
      } else {
        Unpack(v);  // a mixed array: items after all
        v->array.push_back(std::move(item));
      }
      SkipSpace();
      if (Consume("]")) return Status::Ok();
      if (!Consume(",")) return Error("expected ',' or ']'");
    }
  }

  static void Unpack(JsonValue* v) {
    if (!v->packed) return;
    for (double d : v->numbers) {
      JsonValue n;
      n.type = JsonValue::Type::kNumber;
      n.number = d;
      v->array.push_back(std::move(n));
    }
    v->numbers.clear();
    v->packed = false;
  }

  Status String(std::string* out) {
    ++pos_;  // opening quote
    while (pos_ < s_.size()) {
      const char c = s_[pos_++];
      if (c == '"') return Status::Ok();
      if (static_cast<unsigned char>(c) < 0x20) return Error("control character in string");
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) break;
      const char e = s_[pos_++];
      switch (e) {
        case '"':
          out->push_back('"');
          break;
        case '\\':
          out->push_back('\\');
          break;
        case '/':
          out->push_back('/');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          if (pos_ + 4 > s_.size()) return Error("short \\u escape");
          unsigned code = 0;
          for (int i = 0; i < 4; ++i) {
            const char h = s_[pos_++];
            code <<= 4;
            if (h >= '0' && h <= '9')
              code |= h - '0';
            else if (h >= 'a' && h <= 'f')
              code |= h - 'a' + 10;
            else if (h >= 'A' && h <= 'F')
              code |= h - 'A' + 10;
            else
              return Error("bad \\u escape");
          }
          // UTF-8 encode the BMP code point (surrogates kept as-is).
          if (code < 0x80) {
            out->push_back(static_cast<char>(code));
          } else if (code < 0x800) {
            out->push_back(static_cast<char>(0xC0 | (code >> 6)));
            out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
          } else {
            out->push_back(static_cast<char>(0xE0 | (code >> 12)));
            out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
            out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
          }
          break;
        }
        default:
          return Error("bad escape");
      }
    }
    return Error("unterminated string");
  }

  Status Number(JsonValue* v) {
    const size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    bool integral = true, digits = false;
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c >= '0' && c <= '9') {
        digits = true;
      } else if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
        integral = false;
      } else {
        break;
      }
      ++pos_;
    }
    if (!digits) return Error("bad number");
    const std::string literal(s_.substr(start, pos_ - start));
    char* end = nullptr;
    errno = 0;
    v->type = JsonValue::Type::kNumber;
    v->number = std::strtod(literal.c_str(), &end);
    if (end != literal.c_str() + literal.size()) return Error("bad number");
    if (integral) {
      errno = 0;
      const long long i = std::strtoll(literal.c_str(), &end, 10);
      v->is_integer = errno == 0 && end == literal.c_str() + literal.size();
      v->integer = i;
    }
    return Status::Ok();
  }

  std::string_view s_;
  const JsonOptions options_;
  size_t pos_ = 0;
};

}  // namespace

const JsonValue* JsonValue::Find(std::string_view key) const {
  for (const auto& [k, v] : object) {
    if (k == key) return &v;
  }
  return nullptr;
}

StatusOr<JsonValue> ParseJson(std::string_view text, JsonOptions options) {
  JsonValue v;
  Parser parser(text, options);
  Status st = parser.Parse(&v);
  if (!st.ok()) return st;
  return v;
}

std::string JsonQuote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char esc[8];
          std::snprintf(esc, sizeof(esc), "\\u%04x", static_cast<unsigned>(c));
          out += esc;
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
  return out;
}

}  // namespace attn
