#include "attn/files.h"

#include <fstream>
#include <sstream>

namespace attn {

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

}  // namespace attn
