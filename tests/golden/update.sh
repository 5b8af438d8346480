#!/usr/bin/env bash
# Rewrites the golden outputs of tests/cli/golden_test.cpp from BUILD_DIR's traintwin (default
# build): what `program` lowers and what `simulate` prints and writes for two tiny scenarios.
# Run it after a change that is meant to change the Program or the simulation, and review
# `git diff tests/golden` as the change's effect (SimGrid's .tesh habit).
set -euo pipefail
cd "$(dirname "$0")/../.."
tt=${BUILD_DIR:-build}/traintwin
out=tests/golden
for s in gpt-tiny-brown moe-tiny-brown; do
  f=scenarios/$s.yaml
  last=$(( $(grep -E '^\s*num_gpus:' "$f" | awk '{print $2}') - 1 ))
  "$tt" program "$f" --rank 0 > "$out/$s.program-rank0.txt"
  "$tt" program "$f" --rank "$last" > "$out/$s.program-rank$last.txt"
  tmp=$(mktemp -d)
  # The wall-clock lines and the temporary folder's name are all that vary between runs.
  "$tt" simulate "$f" --out "$tmp" | grep -v -E '^(simulated in|wall time by phase|wrote )' > "$out/$s.simulate.txt"
  cp "$tmp/summary.json" "$out/$s.summary.json"
  rm -rf "$tmp"
done
echo "golden outputs written to $out/"
