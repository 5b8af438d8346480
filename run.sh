#!/usr/bin/env bash
# The main job: install, build, and simulate one iteration of the default scenario (GPT-3 175B
# on 1024 H100) in SimGrid; prints the summary and writes out/summary.json and
# out/timeline.json (open it in https://ui.perfetto.dev) with the ops of TP/DP rank 0 of every
# pipeline stage (the full TP groups, the default of `simulate --out`, make a ~600 MB trace).
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh traintwin   # the binary only: the test suites are ./test.sh's
scenario=${1:-scenarios/gpt3-175b-h100-1024.yaml}
./build/traintwin simulate "$scenario" --out out --trace-ranks stages
