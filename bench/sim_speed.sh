#!/usr/bin/env bash
# Simulator speed: wall and CPU time, peak RSS, events/s of one simulated iteration, every rank
# replayed, all inter-node traffic as contending flows, and where the time goes (the engine's
# wall time per phase; with perf, the hottest functions of the first run).
# Targets (issue 10, one core): GPT-3 175B on 1024 H100 <= 2 s and <= 1 GB; the 16,384-GPU
# scenario <= 60 s fully expanded (FULL_16K=1). Grok-1 on 512 H100 (mixture of experts: the
# all-to-all is one flow per node pair and rail) shows the cost of flows that contend.
# Usage: bench/sim_speed.sh [build dir]   (run ./run.sh or scripts/setup.sh first)
#   FULL_16K=1  also replay all 16,384 ranks of gpt-400b-h100-16384 (minutes)
#   PERF=0      skip the perf profile
# Wall times depend on what else runs on the core: compare cpu_s, and say the load (uptime).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build}/traintwin
[ -x "$bin" ] || { echo "bench: $bin not built (run scripts/setup.sh)" >&2; exit 1; }
command -v /usr/bin/time >/dev/null || { echo "bench: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
echo "load: $(uptime)"
printf '%-28s %8s %8s %8s %11s %9s %8s %11s  %s\n' scenario wall_s cpu_s rss_MB events flows solver events_per_s \
  "wall per phase (s)"
# "name|scenario|flags": every rank replayed, and one rank per TP group (--aggregate-tp, exact
# by rail symmetry when TP fills a node).
runs=("175b-h100-1024|scenarios/gpt3-175b-h100-1024.yaml|"
      "175b-h100-1024 --aggregate-tp|scenarios/gpt3-175b-h100-1024.yaml|--aggregate-tp"
      "175b-a100-1024|scenarios/gpt3-175b-a100-1024.yaml|"
      "grok1-314b-h100-512|scenarios/grok1-314b-h100-512.yaml|"
      "400b-h100-16384 --aggr.-tp|scenarios/gpt-400b-h100-16384.yaml|--aggregate-tp")
[ "${FULL_16K:-0}" = 1 ] && runs+=("400b-h100-16384|scenarios/gpt-400b-h100-16384.yaml|")
json_int() { grep -m1 "\"$1\"" "$2" | tr -dc '0-9'; }
for run in "${runs[@]}"; do
  IFS='|' read -r name scenario flags <<< "$run"
  log=$(mktemp)
  # taskset: one core, as the target says.
  # shellcheck disable=SC2086
  taskset -c 0 /usr/bin/time -f '%e %U %S %M' "$bin" simulate "$scenario" --json $flags > "$log.json" 2> "$log"
  read -r wall user sys rss < <(tail -1 "$log")
  events=$(json_int events "$log.json")
  flows=$(json_int flows "$log.json")
  solver=$(json_int solver_flows "$log.json")
  phases=$(sed -n '/"wall_phases_s"/,/}/p' "$log.json" | grep -v wall_phases_s | tr -d '",}' |
           awk 'NF == 2 {printf "%s %.2f  ", $1, $2}')
  printf '%-28s %8.2f %8.2f %8.0f %11d %9d %8d %11.0f  %s\n' "$name" "$wall" "$(echo "$user + $sys" | bc -l)" \
    "$(echo "$rss / 1024" | bc -l)" "$events" "$flows" "$solver" "$(echo "$events / $wall" | bc -l)" "$phases"
  rm -f "$log" "$log.json"
done
# Where the time goes inside the replay: the hottest functions of the first scenario (perf's
# software clock: works without hardware counters, e.g. in a VM).
if [ "${PERF:-1}" != 0 ] && command -v perf >/dev/null && perf record -q -e cpu-clock -o /dev/null true 2>/dev/null; then
  IFS='|' read -r name scenario flags <<< "${runs[0]}"
  data=$(mktemp)
  # shellcheck disable=SC2086
  taskset -c 0 perf record -q -e cpu-clock -o "$data" "$bin" simulate "$scenario" --json $flags > /dev/null 2>&1
  echo "perf: $name, share of CPU time by library, then the 12 hottest functions"
  perf report -i "$data" --stdio --sort dso 2>/dev/null | grep '%' | head -5
  perf report -i "$data" --stdio --sort dso,symbol 2>/dev/null | grep '%' | head -12 | cut -c1-120
  rm -f "$data"
fi
