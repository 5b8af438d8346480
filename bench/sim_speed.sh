#!/usr/bin/env bash
# Simulator speed: wall time, peak RSS and events/s of one simulated iteration, every rank
# replayed, all inter-node traffic as contending SimGrid flows. Targets (issue 3): GPT-3 175B on
# 1024 GPUs <= 5 s and <= 2 GB on one core; the 16,384-GPU scenario <= 120 s.
# Usage: bench/sim_speed.sh [build dir]   (run ./run.sh or scripts/setup.sh first)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build}/traintwin
[ -x "$bin" ] || { echo "bench: $bin not built (run scripts/setup.sh)" >&2; exit 1; }
command -v /usr/bin/time >/dev/null || { echo "bench: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
printf '%-40s %10s %10s %12s %12s %12s\n' scenario wall_s rss_MB events flows events_per_s
# "name|scenario|flags": every rank replayed, and one rank per TP group (--aggregate-tp, exact
# by rail symmetry when TP fills a node). Set FULL_16K=1 to also replay all 16,384 ranks (~200 s).
runs=("175b-h100-1024|scenarios/gpt3-175b-h100-1024.yaml|"
      "175b-h100-1024 aggregated|scenarios/gpt3-175b-h100-1024.yaml|--aggregate-tp"
      "175b-a100-1024|scenarios/gpt3-175b-a100-1024.yaml|"
      "400b-h100-16384 aggregated|scenarios/gpt-400b-h100-16384.yaml|--aggregate-tp")
[ "${FULL_16K:-0}" = 1 ] && runs+=("400b-h100-16384|scenarios/gpt-400b-h100-16384.yaml|")
for run in "${runs[@]}"; do
  IFS='|' read -r name scenario flags <<< "$run"
  log=$(mktemp)
  # taskset: one core, as the target says.
  # shellcheck disable=SC2086
  taskset -c 0 /usr/bin/time -f '%e %M' "$bin" simulate "$scenario" --json $flags > "$log.json" 2> "$log"
  read -r wall rss < <(tail -1 "$log")
  events=$(grep -m1 '"events"' "$log.json" | tr -dc '0-9')
  flows=$(grep -m1 '"flows"' "$log.json" | tr -dc '0-9')
  printf '%-40s %10.2f %10.0f %12d %12d %12.0f\n' "$name" "$wall" \
    "$(echo "$rss / 1024" | bc -l)" "$events" "$flows" "$(echo "$events / $wall" | bc -l)"
  rm -f "$log" "$log.json"
done
