#!/usr/bin/env bash
# Several jobs on one fabric, speed (issue 29 item 6): two 512-GPU jobs of GPT-3 175B on a
# 1,024-GPU DGX H100 fabric replaying 10 iterations each (`traintwin cluster`, each job alone and
# the jobs that share links together) against one job's single-iteration `traintwin simulate`
# of scenarios/gpt3-175b-h100-1024.yaml today. Target: at most 4x. Two placements
# (bench/placements/): "packed" (each job on its own scalable units: no shared link, so each job
# is exact alone and only the alone replays run) and "interleaved" (every scalable unit split
# between the jobs: their flows share the leaves' spine cables and all 20 iterations are
# replayed together).
# Usage: bench/multi_job_speed.sh [build dir]
# Wall times depend on what else runs on the cores; the load is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build}/traintwin
[ -x "$bin" ] || { echo "bench: $bin not built (run scripts/setup.sh)" >&2; exit 1; }
echo "load: $(uptime)"
wall() {  # prints the wall seconds of "$@" (output to a file beside)
  local out=$1; shift
  local t0 t1
  t0=$(date +%s.%N)
  "$@" > "$out"
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc -l
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
single=$(wall "$tmp/single.txt" "$bin" simulate scenarios/gpt3-175b-h100-1024.yaml --quiet)
printf '%-58s %8.2f s\n' "simulate gpt3-175b-h100-1024 (one iteration, 1024 GPUs)" "$single"
for kind in packed interleaved; do
  p=bench/placements/gpt3-175b-2x512-$kind.yaml
  w=$(wall "$tmp/$kind.txt" "$bin" cluster "$p")
  printf '%-58s %8.2f s  %5.1fx the single iteration (target <= 4x)\n' \
    "cluster $kind (2 jobs x 512 GPUs x 10 iterations)" "$w" "$(echo "$w / $single" | bc -l)"
  grep -E '^(a|b) |^reduction|^simulated in' "$tmp/$kind.txt" | sed 's/^/    /'
done
