#!/usr/bin/env bash
# CPU training speed of traintwin against PyTorch on the same model, layout and threads (issue 11,
# deliverable 7: >= 1.0x PyTorch's tokens/s on GPT-2 124M, >= 1.2x on the tiny model).
#
# Both train the GPT of a scenario in fp32 in one process: `traintwin train` on the Brown corpus
# (TP = PP = DP = 1) and bench/pytorch_gpt_step.py (the same model in torch.nn, random tokens),
# one step = every micro-batch's forward + backward, gradient clipping, AdamW. Models:
#   tiny      scenarios/gpt-tiny-brown.yaml: 4 layers, h 128, 4 heads, seq 128, micro-batch 4,
#             global batch 16 (4 micro-batches), GPT-2 vocabulary (padded to 50,304)
#   gpt2-124m the same file with 12 layers, h 768, 12 heads, seq 256, micro-batch 4, global batch 4
# The runs alternate (PyTorch first on odd repeats, traintwin first on even ones) so both see the
# same load; each run's figure is the median tokens/s of its timed steps (after warm-up steps), and
# the ratio is traintwin / PyTorch of each pair. A shared machine moves both: compare the pairs.
#
# Usage: bench/cpu_speed_vs_pytorch.sh [build dir] [repeats] [threads] [models]
#        (defaults: build 3 1 "tiny gpt2-124m"); PYTHON picks the interpreter (/usr/bin/python3,
#        Debian's python3-torch: WITH_PYTORCH=1 scripts/setup.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
repeats=${2:-3}
threads=${3:-1}
models=${4:-tiny gpt2-124m}
bin=$build/traintwin
py=${PYTHON:-/usr/bin/python3}
[ -x "$bin" ] || { echo "bench: $bin not built (run scripts/setup.sh)" >&2; exit 1; }
if ! "$py" -c 'import torch' 2>/dev/null; then
  echo "bench: $py cannot import torch; install it with: WITH_PYTORCH=1 scripts/setup.sh traintwin" >&2
  exit 1
fi
scripts/prepare_brown.sh "$build" > /dev/null
cores=$(nproc)
export OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads

median() { sort -g | awk '{a[NR] = $1} END {if (NR == 0) print "n/a"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

# model -> "layers hidden heads seq micro_batch global_batch warmup steps"
shape() {
  case $1 in
    tiny) echo "4 128 4 128 4 16 2 5" ;;
    gpt2-124m) echo "12 768 12 256 4 4 1 3" ;;
    *) echo "bench: unknown model '$1' (allowed: tiny, gpt2-124m)" >&2; exit 1 ;;
  esac
}

run_traintwin() {  # layers hidden heads seq mb gbs warmup steps -> median tokens/s of timed steps
  local iters=$(($7 + $8))
  "$bin" train scenarios/gpt-tiny-brown.yaml --tensor-model-parallel-size 1 \
      --pipeline-model-parallel-size 1 --set cluster.num_gpus=1 \
      --set parallelism.sequence_parallel=false --set model.num_layers="$1" \
      --set model.hidden_size="$2" --set model.num_attention_heads="$3" \
      --set model.seq_length="$4" --micro-batch-size "$5" --global-batch-size "$6" \
      --train-iters "$iters" --eval-iters 0 --log-interval 1 --set training.lr_warmup_iters=1 |
    awk -F'tokens per second: ' -v skip="$7" '/ iteration /{split($2, a, " "); if (++n > skip) print a[1]}' |
    median
}

run_pytorch() {
  "$py" bench/pytorch_gpt_step.py --layers "$1" --hidden "$2" --heads "$3" --seq "$4" \
      --micro-batch "$5" --global-batch "$6" --warmup "$7" --steps "$8" --threads "$threads" |
    awk '/^step / && !/warm-up/ {print $6}' | median
}

echo "threads $threads, $cores cores, load average $(cut -d' ' -f1-3 /proc/loadavg)," \
     "$("$py" -c 'import torch; print("PyTorch", torch.__version__)')"
printf '%-10s %6s %14s %14s %8s\n' model repeat pytorch_tok_s traintwin_tok_s ratio
for model in $models; do
  read -r -a s <<< "$(shape "$model")"
  ratios=()
  for ((r = 1; r <= repeats; ++r)); do
    if ((r % 2)); then pt=$(run_pytorch "${s[@]}"); tt=$(run_traintwin "${s[@]}")
    else tt=$(run_traintwin "${s[@]}"); pt=$(run_pytorch "${s[@]}"); fi
    ratio=$(awk -v a="$tt" -v b="$pt" 'BEGIN {printf "%.3f", a / b}')
    ratios+=("$ratio")
    printf '%-10s %6d %14.1f %14.1f %8s\n' "$model" "$r" "$pt" "$tt" "$ratio"
  done
  printf '%-10s %6s %14s %14s %8s\n' "$model" median "" "" "$(printf "%.3f" "$(printf "%s\n" "${ratios[@]}" | median)")"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
