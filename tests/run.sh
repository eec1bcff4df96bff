#!/usr/bin/env bash
# Installs what is missing (Debian 12 packages), builds, and runs every test.
#
#   tests/run.sh                 release build + ASan/UBSan build, all tests (on an
#                                AVX-512 machine the release tests run twice: again
#                                with the AVX2 tier forced, ATTN_MAX_ISA=avx2), then
#                                FUZZ_SECONDS (default 60) of libFuzzer (clang-14) over the
#                                whole request path and PARSE_FUZZ_SECONDS (default 30) over
#                                the in-place parse against protobuf's,
#                                and a SOAK_SECONDS (default 60) soak (tests/scripts/soak.sh)
#                                beside a session soak as long (tests/scripts/session_soak.py)
#   tests/run.sh --no-sanitize   release build only (no ASan/UBSan build, no fuzzing)
#   tests/run.sh --no-fuzz       skip the fuzzing
#   tests/run.sh --no-soak       skip the soak
#   tests/run.sh --all           also the container image (deploy/container_test.sh,
#                                podman, minutes), the Kubernetes manifests run
#                                with podman kube play (deploy/kube_test.sh), and
#                                the README on a fresh Debian 12 root
#                                (deploy/fresh_machine_test.sh, about 5 minutes);
#                                replicas behind nginx with one killed
#                                (deploy/lb_test.sh) run every time
#
# Idempotent: packages already installed are not touched, builds are
# incremental. BUILD_DIR (default build), SAN_BUILD_DIR (build-asan) and
# FUZZ_BUILD_DIR (build-fuzz) choose the build folders.
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=1
fuzz=1
soak=1
all=0
for arg in "$@"; do
  case "$arg" in
    --no-sanitize) sanitize=0; fuzz=0 ;;
    --no-fuzz) fuzz=0 ;;
    --no-soak) soak=0 ;;
    --all) all=1 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "tests/run.sh: unknown option '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

# shellcheck source=deploy/packages.sh
. deploy/packages.sh
ensure_packages "${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}"
[ "$fuzz" = 1 ] && ensure_packages "${FUZZ_PACKAGES[@]}"
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
if grep -qwE 'amx_bf16|avx512_bf16' /proc/cpuinfo; then
  # A bf16 matrix machine (AMX or AVX512-BF16) covers plain AVX-512 too:
  # ATTN_MAX_ISA=avx512 turns the bf16 tiers off and caps oneDNN to
  # avx512_core (include/attn/cpu_info.h), every suite again.
  echo "== test $build_dir with the AVX-512 tier forced (ATTN_MAX_ISA=avx512)"
  (cd "$build_dir" && ATTN_MAX_ISA=avx512 ctest --output-on-failure -j"$jobs" --timeout 600)
fi
if grep -qw avx512f /proc/cpuinfo; then
  # An AVX-512 machine covers the AVX2 + FMA tier too: core's kernels and
  # oneDNN's capped together (include/attn/cpu_info.h), every suite again.
  echo "== test $build_dir with the AVX2 tier forced (ATTN_MAX_ISA=avx2)"
  (cd "$build_dir" && ATTN_MAX_ISA=avx2 ctest --output-on-failure -j"$jobs" --timeout 600)
fi
if [ "$sanitize" = 1 ]; then
  # The benchmark harness is not needed under the sanitizers. -O1, the
  # sanitizers' usual level: half the compile time of -O3 on 2 cores.
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
    run_suite "$san_dir" -DATTN_SANITIZE=ON -DATTN_BUILD_BENCHMARKS=OFF \
    -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG"
fi
if [ "$fuzz" = 1 ]; then
  # The whole request path (parse, validation, core, encoding) under
  # libFuzzer + ASan + UBSan, from the committed corpus. Any crash fails the
  # run; its input lands in $fuzz_dir/crash-*: fix the bug, then add the file
  # to tests/fuzz/regressions/ (replayed by the fuzz_corpus_replay test).
  fuzz_dir=${FUZZ_BUILD_DIR:-build-fuzz}
  echo "== configure $fuzz_dir (clang-14, libFuzzer, ASan+UBSan)"
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$fuzz_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DATTN_FUZZ=ON -DATTN_OPENMP=OFF -DATTN_BUILD_TESTS=OFF -DATTN_BUILD_BENCHMARKS=OFF >/dev/null
  cmake --build "$fuzz_dir" -j"$jobs" --target request_fuzzer parse_fuzzer
  fuzz_one() {  # target seconds max_len
    local new_inputs log="$fuzz_dir/$1.log"
    new_inputs=$(mktemp -d)
    echo "== fuzz $1 $2 s"
    "$fuzz_dir/bin/$1" "$new_inputs" tests/fuzz/corpus tests/fuzz/regressions \
      -max_total_time="$2" -max_len="$3" -timeout=10 -rss_limit_mb=4096 \
      -artifact_prefix="$fuzz_dir/" -print_final_stats=1 2>"$log" \
      || { tail -60 "$log"; echo "FAIL: $1 found a crash (see above)"; exit 1; }
    grep -E "^(Done|stat::number_of_executed_units|stat::new_units_added)" "$log" || true
    rm -rf "$new_inputs"
  }
  fuzz_one request_fuzzer "${FUZZ_SECONDS:-60}" 65536
  fuzz_one parse_fuzzer "${PARSE_FUZZ_SECONDS:-30}" 4096
fi
if [ "$soak" = 1 ]; then
  # The two soaks run side by side, each against its own server: the mixed
  # stateless calls, and random session calls over 200 KV-cache sessions.
  echo "== soak ${SOAK_SECONDS:-60} s (tests/scripts/soak.sh) and session soak (session_soak.py)"
  PYTHONPATH="$build_dir/tests/client/python-stubs:$PWD/client/python" \
    timeout 600 /usr/bin/python3 tests/scripts/session_soak.py "$build_dir/bin/attention-server" \
    "${SOAK_SECONDS:-60}" >"$build_dir/session_soak.log" 2>&1 &
  session_soak=$!
  bash tests/scripts/soak.sh "$build_dir" "${SOAK_SECONDS:-60}"
  wait $session_soak || { cat "$build_dir/session_soak.log"; echo "FAIL: the session soak"; exit 1; }
  cat "$build_dir/session_soak.log"
fi
echo "== replicas behind nginx, one killed (deploy/lb_test.sh)"
bash deploy/lb_test.sh "$build_dir" 6
if [ "$all" = 1 ]; then
  echo "== container image (deploy/container_test.sh)"
  bash deploy/container_test.sh
  echo "== the Kubernetes manifests under podman kube play (deploy/kube_test.sh)"
  bash deploy/kube_test.sh
  echo "== the README on a fresh Debian 12 root (deploy/fresh_machine_test.sh)"
  bash deploy/fresh_machine_test.sh
fi
echo "== all tests passed"
