#!/usr/bin/env bash
# Goodput at scale (issue 28, target: the 16,384-GPU scenario's 54-day run, 100 runs, in at most
# 60 s on one core): `traintwin goodput` with the analytical estimator's iteration time, timed
# whole (estimate + 100 runs at the chosen interval + the 9-interval sweep), with the machine's
# load beside it. Usage: bench/goodput_speed.sh [build dir] [goodput options...], e.g. with
# stragglers on (their state replayed once, in a child process):
#   bench/goodput_speed.sh build --set cluster.reliability.straggler_rate_per_1000_node_days=5
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-build}/traintwin")
[ -x "$bin" ] || { echo "bench: $bin not built" >&2; exit 1; }
start=$(date +%s.%N)
taskset -c 0 "$bin" goodput scenarios/gpt-400b-h100-16384.yaml --engine analytical --days 54 \
  --runs 100 "${@:2}" | sed -n '1p;/^degraded/p;/^ETTR/p;/^interrupts/p;/straggler slowdown/p;/degraded links/p;/^best/p'
end=$(date +%s.%N)
printf 'goodput 16,384 GPUs, 54 days, 100 runs: %.2f s (target <= 60 s), load %s\n' \
  "$(echo "$end - $start" | bc)" "$(cut -d' ' -f1-3 /proc/loadavg)"
