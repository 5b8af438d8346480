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
# Wall times depend on what else runs on the cores (the load is printed); cpu is user + sys of
# the command and its worker processes (the cluster command replays in children, two at once).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build}/traintwin
[ -x "$bin" ] || { echo "bench: $bin not built (run scripts/setup.sh)" >&2; exit 1; }
echo "load: $(uptime)"
command -v /usr/bin/time >/dev/null || { echo "bench: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# run OUT CMD...: CMD's output to OUT; sets wall (s) and cpu (user + sys of it and its children, s)
run() {
  local out=$1; shift
  /usr/bin/time -f "%e %U %S" -o "$tmp/time" "$@" > "$out"
  read -r wall user sys < "$tmp/time"
  cpu=$(echo "$user + $sys" | bc -l)
}
run "$tmp/single.txt" "$bin" simulate scenarios/gpt3-175b-h100-1024.yaml --quiet
single_wall=$wall single_cpu=$cpu
printf '%-56s wall %6.2f s  cpu %6.2f s\n' "simulate gpt3-175b-h100-1024 (one iteration, 1024 GPUs)" \
  "$single_wall" "$single_cpu"
for kind in packed interleaved; do
  p=bench/placements/gpt3-175b-2x512-$kind.yaml
  run "$tmp/$kind.txt" "$bin" cluster "$p"
  printf '%-56s wall %6.2f s  cpu %6.2f s  = %4.1fx / %4.1fx the single iteration (target <= 4x)\n' \
    "cluster $kind (2 jobs x 512 GPUs x 10 iterations)" "$wall" "$cpu" \
    "$(echo "$wall / $single_wall" | bc -l)" "$(echo "$cpu / $single_cpu" | bc -l)"
  grep -E '^(a|b) .*x$|^reduction  independent|^simulated in' "$tmp/$kind.txt" | sed 's/^/    /'
done
