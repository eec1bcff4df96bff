#include "wire/secret_files.h"

#include <fstream>
#include <sstream>

namespace attn::wire {
namespace {

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n\v\f");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n\v\f") - b + 1);
}

}  // namespace

StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::InvalidArgument(flag + " " + path + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().find("-----BEGIN ") == std::string::npos) {
    return Status::InvalidArgument(flag + " " + path + ": not a PEM file");
  }
  return text.str();
}

StatusOr<std::vector<std::string>> ReadTokenFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::InvalidArgument(flag + " " + path + ": cannot open");
  std::vector<std::string> tokens;
  std::string line;
  while (std::getline(in, line)) {
    line = Trim(line);
    if (line.empty() || line[0] == '#') continue;
    tokens.push_back(line);
  }
  if (in.bad()) return Status::InvalidArgument(flag + " " + path + ": read error");
  if (tokens.empty()) {
    return Status::InvalidArgument(flag + " " + path + ": no token in it (one token per line)");
  }
  return tokens;
}

}  // namespace attn::wire
