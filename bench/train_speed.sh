#!/usr/bin/env bash
# Live-training speed of the CPU executor: tokens/s of scenarios/gpt-tiny-brown.yaml (4 layers,
# h 128, GPT-2 vocabulary, seq 128, global batch 16) on the Brown corpus, in one process
# (TP = PP = DP = 1) and on 8 MPI ranks (TP 2 x PP 2 x DP 2, SP), after 2 warm-up iterations.
# Prints the mean tokens/s of the timed iterations as the log lines report them.
# Usage: bench/train_speed.sh [build dir] [timed iterations]   (default: build 8)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
iters=${2:-8}
bin=$build/traintwin
[ -x "$bin" ] || { echo "bench: $bin not built (run scripts/setup.sh)" >&2; exit 1; }
scripts/prepare_brown.sh "$build" > /dev/null
total=$((iters + 2))
common=(scenarios/gpt-tiny-brown.yaml --train-iters "$total" --eval-iters 0 --log-interval 1
        --set training.lr_warmup_iters=1)
mean_tokens_per_s() {  # the log lines of iterations 3.. on stdin
  awk -F'tokens per second: ' '/ iteration /{split($2, a, " "); n++; if (n > 2) {s += a[1]; k++}}
       END {if (k) printf "%.1f\n", s / k; else print "n/a"}'
}
printf '%-44s %12s\n' layout tokens_per_s
one=$("$bin" train "${common[@]}" --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 \
        --set cluster.num_gpus=1 --set parallelism.sequence_parallel=false | mean_tokens_per_s)
printf '%-44s %12s\n' "1 process (TP 1, PP 1, DP 1)" "$one"
eight=$(mpirun --allow-run-as-root --oversubscribe -np 8 "$bin" train "${common[@]}" 2>/dev/null |
        mean_tokens_per_s)
printf '%-44s %12s\n' "8 ranks (TP 2, PP 2, DP 2, SP)" "$eight"
