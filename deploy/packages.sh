# Debian 12 packages the project needs, and a function that installs only the
# missing ones. Sourced by tests/run.sh (and deploy/run.sh).

# libdnnl-dev's CMake config needs OpenCL (Debian builds oneDNN with it).
BUILD_PACKAGES=(g++ make cmake libdnnl-dev ocl-icd-opencl-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libspdlog-dev)
TEST_PACKAGES=(libgtest-dev libbenchmark-dev)

# ensure_packages PKG...: apt-get installs the packages that are not
# installed yet; does nothing (not even apt-get update) when all are present.
ensure_packages() {
  local missing=() pkg
  for pkg in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$pkg")
    fi
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "== installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
