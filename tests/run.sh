#!/usr/bin/env bash
# Installs what is missing (Debian 12 packages), builds, and runs every test.
#
#   tests/run.sh                 release build + ASan/UBSan build, all tests
#   tests/run.sh --no-sanitize   release build only
#   tests/run.sh --all           also the deployment checks: replicas behind nginx
#                                with a replica killed (deploy/test-lb.sh), and the
#                                container image (deploy/test-container.sh, minutes)
#
# Idempotent: packages already installed are not touched, builds are
# incremental. BUILD_DIR (default build) and SAN_BUILD_DIR (build-asan)
# choose the build folders.
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=1
all=0
for arg in "$@"; do
  case "$arg" in
    --no-sanitize) sanitize=0 ;;
    --all) all=1 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "tests/run.sh: unknown option '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

# shellcheck source=deploy/packages.sh
. deploy/packages.sh
ensure_packages "${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}"
ensure_node
ensure_npm_deps client/node

jobs=$(nproc)
build_dir=${BUILD_DIR:-build}
san_dir=${SAN_BUILD_DIR:-build-asan}

run_suite() {  # dir, extra cmake args...
  local dir=$1; shift
  echo "== configure $dir"
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
  echo "== build $dir"
  cmake --build "$dir" -j"$jobs"
  echo "== test $dir"
  (cd "$dir" && ctest --output-on-failure -j"$jobs" --timeout 600)
}

run_suite "$build_dir"
if [ "$sanitize" = 1 ]; then
  # The benchmark harness is not needed under the sanitizers.
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
    run_suite "$san_dir" -DATTN_SANITIZE=ON -DATTN_BUILD_BENCHMARKS=OFF
fi
if [ "$all" = 1 ]; then
  echo "== replicas behind nginx, one killed (deploy/test-lb.sh)"
  bash deploy/test-lb.sh "$build_dir" 6
  echo "== container image (deploy/test-container.sh)"
  bash deploy/test-container.sh
fi
echo "== all tests passed"
