#!/usr/bin/env bash
# The test suites under AddressSanitizer + UndefinedBehaviorSanitizer (-DTRAINTWIN_SANITIZE=ON,
# gcc, RelWithDebInfo) in their own build folder. Not part of ./test.sh: the instrumented build of
# every suite took over an hour on a shared 2-core machine, and a suite runs about 14x slower
# under it (core_tests: 307 s against 22 s).
#   scripts/sanitize.sh [LABEL...]     default: core traces exec sim cli (ctest labels)
# Environment: BUILD_DIR (default build-asan), JOBS (default: cores).
# Any sanitizer report fails the test that triggered it (-fno-sanitize-recover, halt_on_error).
# LeakSanitizer is on, except inside mpirun children (tests/mpi_child_run.hpp: Open MPI keeps its
# own allocations past MPI_Finalize). Prints one line per label: tests run, failed, seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build-asan}
jobs=${JOBS:-$(nproc)}
labels=("$@")
if [ ${#labels[@]} -eq 0 ]; then labels=(core traces exec sim cli); fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINTWIN_SANITIZE=ON \
  -DTRAINTWIN_FUZZ=OFF -DTRAINTWIN_ENABLE_CUDA=OFF "${launcher[@]}" > /dev/null
targets=(traintwin)
for l in "${labels[@]}"; do targets+=("${l}_tests"); done
cmake --build "$build_dir" -j "$jobs" --target "${targets[@]}"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
summary=()
for l in "${labels[@]}"; do
  log="$build_dir/sanitize-$l.log"
  start=$(date +%s)
  rc=0
  ctest --test-dir "$build_dir" -L "^$l\$" -j "$jobs" --output-on-failure > "$log" 2>&1 || rc=$?
  line=$(grep -E "tests passed, [0-9]+ tests failed out of" "$log" | tail -1 || true)
  summary+=("$l: ${line:-no ctest summary (see $log)} ($(($(date +%s) - start)) s)")
  [ "$rc" -eq 0 ] || status=1
done
printf 'sanitize: %s\n' "${summary[@]}"
[ "$status" -eq 0 ] || echo "sanitize: failures; logs in $build_dir/sanitize-<label>.log" >&2
exit $status
