#!/usr/bin/env bash
# Simulator speed: wall and CPU time, peak RSS, events/s of one simulated iteration, all
# inter-node traffic as contending flows, each run beside its target (issue 25, one core), the
# reduction that ran (simulate applies the exact ones by default: TP aggregation, see
# sim/replay.hpp; --full-replay rows replay every rank), and where the time goes (the engine's
# wall time per phase; with perf, the hottest functions of the first run).
# Targets (issue 25): GPT-3 175B on 1024 H100 <= 1 s; Llama 3.1 405B on 1024 <= 3 s; Grok-1 on
# 512 <= 5 s; the 16,384-GPU scenario <= 20 s and <= 2 GB; Llama 3.1 70B on 4096 <= 10 s and
# <= 1.5 GB; Grok-1 on 2048 <= 20 s. Grok-1 (mixture of experts: the all-to-all is one flow per
# node pair and rail) shows the cost of flows that contend.
# Usage: bench/sim_speed.sh [build dir]   (run ./run.sh or scripts/setup.sh first)
#   FULL_16K=1  also replay all 16,384 ranks of gpt-400b-h100-16384 (--full-replay; minutes)
#   SCALE=1     also Llama 3.1 70B on 4096 GPUs and Grok-1 on 2048 GPUs (the scenarios with
#               cluster.num_gpus set and the global batch scaled to keep the micro-batches per
#               data-parallel replica)
#   PERF=0      skip the perf profile
# Wall times depend on what else runs on the core: the targets are judged on cpu_s (user + sys,
# the wall time on an idle core), and the load is printed (uptime).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build}/traintwin
[ -x "$bin" ] || { echo "bench: $bin not built (run scripts/setup.sh)" >&2; exit 1; }
command -v /usr/bin/time >/dev/null || { echo "bench: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
echo "load: $(uptime)"
printf '%-30s %8s %8s %8s %7s %11s %9s %9s %8s %11s %-8s  %s\n' scenario wall_s cpu_s rss_MB target events \
  flows grouped solver events_per_s reduction "wall per phase (s)"
# "name|scenario|flags|target wall s|target MB": the default (exact reductions on) and, for
# reference, every rank replayed (--full-replay).
runs=("175b-h100-1024|scenarios/gpt3-175b-h100-1024.yaml||1.0|"
      "175b-h100-1024 --full-replay|scenarios/gpt3-175b-h100-1024.yaml|--full-replay||"
      "175b-a100-1024|scenarios/gpt3-175b-a100-1024.yaml|||"
      "405b-h100-1024|scenarios/llama3.1-405b-h100-1024.yaml||3|"
      "grok1-314b-h100-512|scenarios/grok1-314b-h100-512.yaml||5|"
      "400b-h100-16384|scenarios/gpt-400b-h100-16384.yaml||20|2048")
[ "${FULL_16K:-0}" = 1 ] && runs+=("400b-h100-16384 --full-replay|scenarios/gpt-400b-h100-16384.yaml|--full-replay|20|2048")
if [ "${SCALE:-0}" = 1 ]; then
  runs+=("70b-h100-4096|scenarios/llama3.1-70b-h100-64.yaml|--set cluster.num_gpus=4096 --set training.global_batch_size=8192|10|1536"
         "grok1-314b-h100-2048|scenarios/grok1-314b-h100-512.yaml|--set cluster.num_gpus=2048 --set training.global_batch_size=4096|20|")
fi
json_int() { grep -m1 "\"$1\"" "$2" | tr -dc '0-9'; }
for run in "${runs[@]}"; do
  IFS='|' read -r name scenario flags target_s target_mb <<< "$run"
  log=$(mktemp)
  # taskset: one core, as the target says.
  # shellcheck disable=SC2086
  taskset -c 0 /usr/bin/time -f '%e %U %S %M' "$bin" simulate "$scenario" --json --quiet $flags > "$log.json" 2> "$log"
  read -r wall user sys rss < <(tail -1 "$log")
  events=$(json_int events "$log.json")
  flows=$(json_int flows "$log.json")
  grouped=$(json_int group_flows "$log.json")
  solver=$(json_int solver_flows "$log.json")
  reduction=none
  sed -n '/"reductions"/,/]/p' "$log.json" | grep -q 'TP aggregation' && reduction=tp-aggr
  phases=$(sed -n '/"wall_phases_s"/,/}/p' "$log.json" | grep -v wall_phases_s | tr -d '",}' |
           awk 'NF == 2 {printf "%s %.2f  ", $1, $2}')
  rss_mb=$(echo "$rss / 1024" | bc -l)
  cpu=$(echo "$user + $sys" | bc -l)
  verdict=-
  if [ -n "$target_s" ]; then
    # Judged on cpu_s: the wall time of this one-threaded replay on an idle core.
    verdict=$(awk -v w="$cpu" -v t="$target_s" -v m="$rss_mb" -v tm="$target_mb" \
      'BEGIN { ok = w <= t && (tm == "" || m <= tm); printf "%s%s", ok ? "met<=" : "MISSED>", t }')
  fi
  printf '%-30s %8.2f %8.2f %8.0f %7s %11d %9d %9d %8d %11.0f %-8s  %s\n' "$name" "$wall" \
    "$cpu" "$rss_mb" "$verdict" "$events" "$flows" "$grouped" "$solver" \
    "$(echo "$events / $wall" | bc -l)" "$reduction" "$phases"
  rm -f "$log" "$log.json"
done
# Where the time goes inside the replay: the hottest functions of the first scenario (perf's
# software clock: works without hardware counters, e.g. in a VM).
if [ "${PERF:-1}" != 0 ] && command -v perf >/dev/null && perf record -q -e cpu-clock -o /dev/null true 2>/dev/null; then
  IFS='|' read -r name scenario flags _ _ <<< "${runs[0]}"
  data=$(mktemp)
  # shellcheck disable=SC2086
  taskset -c 0 perf record -q -e cpu-clock -o "$data" "$bin" simulate "$scenario" --json $flags > /dev/null 2>&1
  echo "perf: $name, share of CPU time by library, then the 12 hottest functions"
  perf report -i "$data" --stdio --sort dso 2>/dev/null | grep '%' | head -5
  perf report -i "$data" --stdio --sort dso,symbol 2>/dev/null | grep '%' | head -12 | cut -c1-120
  rm -f "$data"
fi
