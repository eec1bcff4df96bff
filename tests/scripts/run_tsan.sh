#!/usr/bin/env bash
# Builds the server's concurrency tests with ThreadSanitizer and runs them
# (by hand; not in CI: the Debian libraries are uninstrumented, see
# tests/scripts/tsan.supp). Core's own OpenMP loop is off in this build (TSan does not
# understand libgomp's barriers); the server's threads, scheduler, metrics,
# token reloads and the bench's completion path are what it checks.
#   tests/scripts/run_tsan.sh [BUILD_DIR]      (default build-tsan)
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-build-tsan}
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTN_OPENMP=OFF -DATTN_TCMALLOC=OFF \
  -DATTN_BUILD_BENCHMARKS=OFF -DCMAKE_CXX_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread >/dev/null
cmake --build "$dir" -j"$(nproc)" --target server_test server_ops_test server_units_test bench_test
export TSAN_OPTIONS="suppressions=$PWD/tests/scripts/tsan.supp halt_on_error=0 second_deadlock_stack=1 report_signal_unsafe=0"
status=0
for t in server_units_test server_ops_test bench_test server_test; do
  echo "== $t"
  "$dir/bin/$t" --gtest_brief=1 2>"$dir/$t.tsan.log" || status=1
  echo "   TSan warnings: $(grep -c '^WARNING: ThreadSanitizer' "$dir/$t.tsan.log" || true) (log: $dir/$t.tsan.log)"
done
exit $status
