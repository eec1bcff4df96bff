#include "ops/token_auth.h"

#include <cctype>

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

Status TokenAuth::Load(const std::string& path) {
  auto read = wire::ReadTokenFile("--auth-token-file", path);
  if (!read.ok()) return read.status();
  auto tokens = std::make_shared<std::vector<std::string>>(std::move(*read));
  std::lock_guard<std::mutex> lock(mu_);
  tokens_ = std::move(tokens);
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

Status TokenAuth::Check(const char* value, size_t length) const {
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
  std::shared_ptr<const std::vector<std::string>> tokens;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tokens = tokens_;
  }
  bool ok = false;
  if (tokens) {
    for (const auto& t : *tokens)
      ok |= ConstantTimeEquals(t, value + kSchemeLen, length - kSchemeLen);
  }
  if (!ok) return Status::Unauthenticated("invalid bearer token");
  return Status::Ok();
}

}  // namespace attn::server
