#!/usr/bin/env bash
# The simulator's error on published runs, in-sample and held out (issue 24): for each calibration
# file of ../shared/validation, `traintwin validate FILE --leave-one-out` simulates every case at
# the calibrated roofline (each row marked in-sample when the efficiencies were fitted on it) and
# at every point of the refit grid (36 points by default), then refits the gemm/attention/memory
# efficiencies without each case and predicts it. Prints both tables and, at the end, one line per
# file: MAPE at the calibrated roofline (split in-sample / held-out), in-sample MAPE of one grid
# fit on all cases, and leave-one-out MAPE. About (grid points + 1) x cases simulations per file:
# 4-5 minutes for calibration.yaml on 2 cores.
# Then each held-out file (HELD_OUT, default bench/published-moe-runs.yaml: NVIDIA's Grok-1 MoE
# recipe at 8-2,048 H100, BF16 and FP8, 20 rows) is validated at the calibrated roofline only:
# nothing is fitted on it, so its MAPE is a held-out error (about 1 minute).
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
read -r -a held_out <<< "${HELD_OUT-bench/published-moe-runs.yaml}"
for f in "${held_out[@]}"; do
  name=$(basename "$f" .yaml)
  echo "== $f (held out: no refit)"
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
for f in "${held_out[@]}"; do
  name=$(basename "$f" .yaml)
  printf '%-24s MAPE at the calibrated roofline over %s\n' "$name" "$(grep -m1 '^MAPE over' "$out/$name.txt" | sed 's/^MAPE over //')"
done
