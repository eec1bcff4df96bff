# Debian 12 packages the project needs, and a function that installs only the
# missing ones. Sourced by tests/run.sh (and deploy/run.sh).

# libdnnl-dev's CMake config needs OpenCL (Debian builds oneDNN with it).
BUILD_PACKAGES=(g++ make cmake libdnnl-dev ocl-icd-opencl-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libspdlog-dev
  libcpp-httplib-dev pkg-config libtcmalloc-minimal4 libabsl-dev libyaml-cpp-dev libssl-dev)
# What the README's Python client needs right after deploy/run.sh: a venv
# that sees Debian's grpcio, protobuf and numpy (--system-site-packages),
# and pip's offline build of the package (setuptools, wheel; the stubs come
# from protoc and grpc_python_plugin, in BUILD_PACKAGES).
PYTHON_CLIENT_PACKAGES=(python3-grpcio python3-protobuf python3-numpy python3-venv
  python3-setuptools python3-wheel)
# tests/run.sh's fuzzing stage: clang with libFuzzer and the sanitizer runtimes.
FUZZ_PACKAGES=(clang-14 libclang-rt-14-dev)
# The benchmarks' PyTorch baselines (tests/bench/torch_blas.py): installed by
# run_core_bench.sh and run_server_bench.sh when they find python3-torch.
TORCH_BENCH_PACKAGES=(libopenblas0-pthread)
TEST_PACKAGES=(libgtest-dev libbenchmark-dev python3-grpc-tools yamllint openssl
  python3-pytest curl python3-h2 chromium python3-onnx "${PYTHON_CLIENT_PACKAGES[@]}")

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

# ensure_node: node and npm, from Debian's nodejs/npm unless some node is
# already on PATH (a NodeSource install, say).
ensure_node() {
  if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then return 0; fi
  ensure_packages nodejs npm
}

# ensure_npm_deps DIR: npm ci in DIR when its node_modules is missing or
# older than package-lock.json.
ensure_npm_deps() {
  local dir=$1
  if [ -d "$dir/node_modules" ] && [ ! "$dir/node_modules/.package-lock.json" -ot "$dir/package-lock.json" ]; then
    return 0
  fi
  echo "== npm ci in $dir"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
}
