#!/usr/bin/env bash
# The simulator's error on published runs, in-sample and held out (issue 24): for each calibration
# file of ../shared/validation, `traintwin validate FILE --leave-one-out` simulates every case at
# the calibrated roofline (each row marked in-sample when the efficiencies were fitted on it) and
# at every point of the refit grid (48 points by default), then refits the gemm/attention/memory
# efficiencies without each case and predicts it. Prints both tables and, at the end, one line per
# file: MAPE at the calibrated roofline (split in-sample / held-out), in-sample MAPE of one grid
# fit on all cases, and leave-one-out MAPE. About (grid points + 1) x cases simulations per file:
# 6-7 minutes for calibration.yaml on 2 cores.
# Then each held-out file (HELD_OUT, default bench/published-megatron-runs.yaml: the rows of
# Narayanan et al. SC'21 Table 1 and Korthikanti et al. 2022 Tables 3/5 that calibration.yaml
# leaves out, 9 A100 runs up to PP 64, about 30 s; bench/published-moe-runs.yaml: NVIDIA's Grok-1
# MoE recipe at 8-2,048 H100, BF16 and FP8, 20 rows, about 1 minute;
# bench/published-moe-runs-2025.yaml: Megatron-Bridge's Qwen3-30B-A3B and Qwen3-235B-A22B recipes of
# the 25.09 NeMo container on 16 and 256 H100, FP8 current scaling, measured in tokens/s per GPU,
# 2 rows, about 10 s; and published-runs-2026.yaml)
# is validated at the calibrated roofline only: nothing is fitted on it, so its MAPE is a
# held-out error.
# Also held out (issue 24 item 2): bench/published-scaling-runs.yaml, NVIDIA's GPT-3 175B,
# Llama 3.1 70B and Nemotron-4 340B weak-scaling tables on 64-2,048 H100, BF16 and FP8, 30 rows,
# about 3 minutes.
# Then Blackwell's set: the GB200 runs of ../shared/validation/published-runs-2026.yaml with
# --leave-one-out over the grid the Blackwell efficiencies were fitted on (sim/cost_model.cpp;
# 84 points x 5 cases, about 3 minutes on 2 cores), and the whole of that file at the calibrated
# roofline (its GB200 rows in-sample, the others held out).
# Usage: bench/accuracy.sh [build dir] [calibration files...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(../shared/validation/calibration.yaml ../shared/validation/calibration-modern.yaml)
bin=$(realpath "$build/traintwin")
[ -x "$bin" ] || { echo "bench: $bin not built" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for f in "${files[@]}"; do
  name=$(basename "$f" .yaml)
  echo "== $f"
  start=$(date +%s)
  "$bin" validate "$f" --leave-one-out | tee "$out/$name.txt"
  echo "($(( $(date +%s) - start )) s)"
done
runs2026=../shared/validation/published-runs-2026.yaml
echo "== $runs2026 --case gb200 (Blackwell's efficiencies)"
start=$(date +%s)
"$bin" validate "$runs2026" --case gb200 --leave-one-out --refit-gemm 0.44 0.48 0.52 0.56 0.60 0.64 0.68 \
  --refit-attention 0.35 0.45 0.55 --refit-memory 0.3 0.4 0.5 0.6 | tee "$out/gb200.txt"
echo "($(( $(date +%s) - start )) s)"
read -r -a held_out <<< "${HELD_OUT-bench/published-megatron-runs.yaml bench/published-moe-runs.yaml bench/published-moe-runs-2025.yaml bench/published-scaling-runs.yaml $runs2026}"
for f in "${held_out[@]}"; do
  name=$(basename "$f" .yaml)
  echo "== $f (at the calibrated roofline: no refit)"
  start=$(date +%s)
  "$bin" validate "$f" | tee "$out/$name.txt"
  echo "($(( $(date +%s) - start )) s)"
done
echo
echo "== summary"
for f in "${files[@]}"; do
  name=$(basename "$f" .yaml)
  printf '%-24s MAPE at the calibrated roofline over %s\n' "$name" "$(grep -m1 '^MAPE over' "$out/$name.txt" | sed 's/^MAPE over //')"
  printf '%-24s grid refit: MAPE %s\n' "$name" "$(grep -m1 '^MAPE in-sample' "$out/$name.txt" | sed 's/^MAPE //')"
done
printf '%-24s grid refit: MAPE %s\n' "gb200 (published-runs)" "$(grep -m1 '^MAPE in-sample' "$out/gb200.txt" | sed 's/^MAPE //')"
for f in "${held_out[@]}"; do
  name=$(basename "$f" .yaml)
  printf '%-24s MAPE at the calibrated roofline over %s\n' "$name" "$(grep -m1 '^MAPE over' "$out/$name.txt" | sed 's/^MAPE over //')"
done
