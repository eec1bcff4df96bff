#include "ops/token_auth.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>

#include "wire/secret_files.h"

namespace attn::server {
namespace {

// Compares in time that depends on the lengths only, not on where the first
// difference is.
bool ConstantTimeEquals(const std::string& a, const char* b, size_t n) {
  if (a.size() != n) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

bool IsTokenName(const std::string& name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

std::string BareTokenName(const std::string& token) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(token.data(), token.size(), digest, &n, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < 4 && i < n; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

std::string PrincipalLabel(const std::string& principal) {
  if (principal.empty()) return "anonymous";
  return IsTokenName(principal) ? principal : "certificate";
}

Status TokenAuth::Load(const std::string& path) {
  auto read = wire::ReadTokenFile("--auth-token-file", path);
  if (!read.ok()) return read.status();
  auto entries = std::make_shared<std::vector<Entry>>();
  std::set<std::string> seen;
  int line = 0;
  for (const std::string& text : *read) {
    ++line;
    std::istringstream fields(text);
    std::string first, second, extra;
    fields >> first >> second >> extra;
    const std::string where = "--auth-token-file " + path + ": token line " + std::to_string(line);
    if (!extra.empty()) {
      return Status::InvalidArgument(where + ": expected 'NAME TOKEN' or 'TOKEN', got " +
                                     "more than two fields");
    }
    Entry e;
    if (second.empty()) {
      e.token = first;
      e.name = BareTokenName(first);
    } else {
      if (!IsTokenName(first)) {
        return Status::InvalidArgument(where +
                                       ": a name must match [A-Za-z0-9._-]{1,64} (it "
                                       "appears in logs and metrics)");
      }
      e.name = first;
      e.token = second;
    }
    if (!seen.insert(e.token).second) {
      return Status::InvalidArgument(where +
                                     ": a token given twice (a token names one "
                                     "principal)");
    }
    entries->push_back(std::move(e));
  }
  std::lock_guard<std::mutex> lock(mu_);
  tokens_ = std::move(entries);
  path_ = path;
  return Status::Ok();
}

Status TokenAuth::Reload() {
  std::string path;
  {
    std::lock_guard<std::mutex> lock(mu_);
    path = path_;
  }
  if (path.empty()) return Status::FailedPrecondition("no --auth-token-file to reload");
  return Load(path);
}

size_t TokenAuth::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tokens_ ? tokens_->size() : 0;
}

std::vector<std::string> TokenAuth::names() const {
  std::shared_ptr<const std::vector<Entry>> tokens;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tokens = tokens_;
  }
  std::set<std::string> names;
  if (tokens) {
    for (const Entry& e : *tokens) names.insert(e.name);
  }
  return {names.begin(), names.end()};
}

StatusOr<std::string> TokenAuth::Check(const char* value, size_t length) const {
  if (value == nullptr) {
    return Status::Unauthenticated("missing 'authorization: Bearer <token>' metadata");
  }
  static constexpr char kScheme[] = "bearer ";
  constexpr size_t kSchemeLen = sizeof(kScheme) - 1;
  bool scheme_ok = length > kSchemeLen;
  for (size_t i = 0; scheme_ok && i < kSchemeLen; ++i) {
    scheme_ok = std::tolower(static_cast<unsigned char>(value[i])) == kScheme[i];
  }
  if (!scheme_ok) {
    return Status::Unauthenticated("the authorization metadata is not 'Bearer <token>'");
  }
  std::shared_ptr<const std::vector<Entry>> tokens;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tokens = tokens_;
  }
  // Every entry is compared, whichever matches: the time says nothing of which.
  const std::string* name = nullptr;
  if (tokens) {
    for (const Entry& e : *tokens) {
      if (ConstantTimeEquals(e.token, value + kSchemeLen, length - kSchemeLen)) name = &e.name;
    }
  }
  if (name == nullptr) return Status::Unauthenticated("invalid bearer token");
  return *name;
}

}  // namespace attn::server
