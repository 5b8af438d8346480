#!/usr/bin/env bash
# Runs one libFuzzer target for a while on its seed corpus and prints its statistics.
#   tests/fuzz/run_fuzz.sh BINARY TARGET SECONDS [CORPUS_DIR] [extra libFuzzer flags...]
# Seeds: the shipped files the reader reads (scenarios/, topologies/, traces/db/) and the small
# files of tests/fuzz/corpus/TARGET (written by the project's own writers). New inputs go to
# CORPUS_DIR (default: a temporary folder, removed afterwards); a crash, a sanitizer report, a
# timeout (an input slower than 10 s) or an escaped non-traintwin exception is saved under
# CORPUS_DIR/../crashes and fails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=$1 target=$2 seconds=$3
shift 3
corpus=""
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then corpus=$1; shift; fi
if [ ! -x "$bin" ]; then
  echo "run_fuzz: $bin is not built (cmake --build build builds it when clang++ is found)" >&2
  exit 1
fi
tmp=""
if [ -z "$corpus" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  corpus=$tmp/corpus
fi
mkdir -p "$corpus" "$corpus/../crashes"
seeds=("$here/corpus/$target")
case $target in
  scenario) seeds+=("$root/scenarios") ;;
  topology) seeds+=("$root/topologies") ;;
  cost_db) seeds+=("$root/traces/db") ;;
esac
existing=()
for d in "${seeds[@]}"; do [ -d "$d" ] && existing+=("$d"); done
log=$(mktemp)
rc=0
# Fork mode (-fork=1): a child per batch. A crash, sanitizer report or out-of-memory ends the run;
# an input slower than 10 s is saved and the run goes on (-ignore_timeouts=1) to collect them
# all, and fails afterwards (yaml-cpp 0.7's loop on a stray ',' is refused by
# core/yaml_document since, see tests/fuzz/README.md).
# LeakSanitizer stays on: the readers must not leak either.
# -print_funcs=0: the fork-mode parent symbolizes every NEW_FUNC through llvm-symbolizer, and
# that deadlocked once (parent in a futex, symbolizer on its pipe) until ctest's timeout; crash
# reports are still symbolized. The outer timeout bounds the harness itself: a stall after the
# run is judged on the statistics printed so far.
timeout --kill-after=10 $((seconds + 60)) \
  "$bin" -fork=1 -ignore_timeouts=1 -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -print_funcs=0 -max_len=65536 -artifact_prefix="$corpus/../crashes/$target-" "$@" \
  "$corpus" "${existing[@]}" > "$log" 2>&1 || rc=$?
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "run_fuzz: $target: the libFuzzer harness did not exit $((seconds + 60)) s after a ${seconds} s run; judged on its last statistics" >&2
fi
stats=$(grep -E "^#[0-9]+: .*oom/timeout/crash" "$log" | tail -1 || true)
runs=$(sed -n 's/^#\([0-9]*\):.*/\1/p' <<< "$stats")
read -r ooms timeouts crashes < <(sed -n 's|.*oom/timeout/crash: \([0-9]*\)/\([0-9]*\)/\([0-9]*\).*|\1 \2 \3|p' <<< "$stats")
if [ -z "$stats" ] || [ "${crashes:-1}" -ne 0 ] || [ "${ooms:-1}" -ne 0 ] ||
   [ "${timeouts:-1}" -ne 0 ]; then
  cat "$log"
  echo "run_fuzz: $target FAILED (exit $rc; oom/timeout/crash ${ooms:-?}/${timeouts:-?}/${crashes:-?}); inputs under $corpus/../crashes/" >&2
  rm -f "$log"
  exit 1
fi
echo "run_fuzz: $target: $runs executions in $seconds s, no crash, no leak, no out-of-memory, no input slower than 10 s"
rm -f "$log"
exit 0
