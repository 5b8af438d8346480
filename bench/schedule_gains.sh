#!/usr/bin/env bash
# What each pipeline schedule gains on the shipped large scenarios (issue 26, "Done means"): for
# GPT-3 175B (PP 16, 1,024 H100), Llama 3.1 405B (PP 8, 1,024 H100) and Grok-1 314B (PP 8, EP 8,
# 512 H100), `traintwin simulate` (the replay, with link contention) of every schedule:
#   gpipe, 1f1b (v = 1), 1f1b interleaved (the scenario's own v, or v = 2 where it ships v = 1),
#   zb-h1, zb-h2 (v = 1), zb-v, dualpipev (v = 2: the V placement), dualpipe (v = 2: two copies).
# One row per schedule: iteration time, gain against 1F1B with v = 1, the pipeline bubble and the
# sync wait of the reported rank, and the memory verdict with its peak per GPU. A schedule the
# scenario's rules refuse prints the refusal instead (nothing is downgraded).
# About 2-30 s per simulation on 2 cores (24 simulations).
# Usage: bench/schedule_gains.sh [build dir] [scenario files...]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-build}/traintwin")
[ -x "$bin" ] || { echo "bench: $bin not built" >&2; exit 1; }
shift || true
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(scenarios/gpt3-175b-h100-1024.yaml
  scenarios/llama3.1-405b-h100-1024.yaml scenarios/grok1-314b-h100-512.yaml)

# The scenario's own virtual pipeline size (1 when it sets none).
own_vpp() {
  local v
  v=$(sed -n 's/^ *virtual_pipeline_model_parallel_size: *\([0-9]*\).*/\1/p' "$1" | head -1)
  echo "${v:-1}"
}

for sc in "${scenarios[@]}"; do
  v=$(own_vpp "$sc")
  [ "$v" -gt 1 ] || v=2
  echo "== $sc"
  printf '%-16s %4s %12s %9s %11s %11s  %s\n' schedule v iteration gain bubble "sync wait" memory
  base=""
  for run in gpipe:1 1f1b:1 "1f1b:$v" zb-h1:1 zb-h2:1 zb-v:2 dualpipev:2 dualpipe:2; do
    sched=${run%%:*}
    vpp=${run##*:}
    if ! out=$("$bin" simulate "$sc" --quiet --set "parallelism.pipeline_schedule=$sched" \
        --set "parallelism.virtual_pipeline_model_parallel_size=$vpp" 2>&1); then
      printf '%-16s %4s refused: %s\n' "$sched" "$vpp" "$(echo "$out" | tail -1)"
      continue
    fi
    t=$(echo "$out" | sed -n 's/^iteration time *\([0-9.]*\) s.*/\1/p')
    bubble=$(echo "$out" | sed -n 's/.*pipeline bubble \([0-9.]*\) s.*/\1/p')
    wait=$(echo "$out" | sed -n 's/.*sync wait \([0-9.]*\) s.*/\1/p')
    mem=$(echo "$out" | sed -n 's/^memory *peak \([0-9.]* GiB\) per GPU of [0-9.]* GiB: \([^,]*\).*/\2, \1/p')
    [ -n "$base" ] || [ "$sched:$vpp" != "1f1b:1" ] || base=$t
    gain="-"
    [ -z "$base" ] || gain=$(awk -v b="$base" -v t="$t" 'BEGIN { printf "%+.1f%%", (b / t - 1) * 100 }')
    printf '%-16s %4s %10s s %9s %9s s %9s s  %s\n' "$sched" "$vpp" "$t" "$gain" "${bubble:-0}" \
      "${wait:-0}" "$mem"
  done
done
echo "gain = 1F1B (v = 1) iteration time / this schedule's - 1 (gpipe's row is printed before 1F1B's and has none)"
