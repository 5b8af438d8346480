#!/usr/bin/env bash
# Longer fuzzing runs than ctest -L fuzz: every target (or the ones named) for SECONDS each
# (default 600), keeping the grown corpora and any crash under build/fuzz/corpus/.
#   scripts/fuzz.sh [SECONDS] [TARGET...]      e.g. scripts/fuzz.sh 3600 scenario checkpoint
# Needs the clang sub-build: cmake --build build (when clang++ with libFuzzer is installed).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(scenario topology cost_db measured_costs timeline timeline_costs report indexed_dataset
           checkpoint tokenizer)
fi
status=0
for t in "${targets[@]}"; do
  tests/fuzz/run_fuzz.sh "build/fuzz/tests/fuzz/${t}_fuzz" "$t" "$seconds" \
    "build/fuzz/corpus/$t" || status=1
done
exit $status
