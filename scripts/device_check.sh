#!/usr/bin/env bash
# traintwin's GPU check, in one go on a bare GPU machine (a driver, the CUDA runtime, PyTorch; no
# Debian packages): unpacks the bundle scripts/device_bundle.sh made into DIR, finds the CUDA
# libraries the machine has (its CUDA toolkit or PyTorch's nvidia-* wheels), and runs the steps
# below, each under a time limit, appending one block per step to RESULTS/summary.txt and its
# whole output to RESULTS/log.txt:
#   info      nvidia-smi: GPU, driver, clocks, power limit; the CUDA libraries found
#   tests     the GPU test suites (gpu_tests: every kernel and CudaBackend against the CPU)
#   gemm      cuBLASLt GEMM TFLOP/s (bench/cuda_gemm_bench.cu), bf16 and fp32
#   smoke     traintwin simulate of the default scenario (the bundle's libraries load; not in
#             the default steps)
#   train     20 iterations of the tiny GPT and tiny Llama on the cuda and cpu backends: losses
#   profile   traintwin profile --backend cuda of scenarios/device/gpt-1.3b-h100-1.yaml
#             (micro-batch 1, 2, 4) -> RESULTS/cuda-<gpu>.json
#   validate  validate --live --backend cuda of the 1.3B GPT: micro-batch 1/2/4, recompute
#             none/selective/full: predicted vs measured iteration time
#   speed     GPT-2 124M and the 1.3B GPT trained by traintwin --backend cuda: the log lines
#             (tokens/s, TFLOP/s/GPU), the allocator's peak against the memory model
#   matmul    the same two models with --float32-matmul-precision high (TF32) and medium (bf16
#             tensor cores): log lines, validate --live and profile of the 1.3B GPT at
#             micro-batch 1 (-> RESULTS/cuda-<gpu>.json)
#   flash     the 1.3B GPT with attention_backend flash (the blockwise kernels, no T x T store;
#             tensor cores under TF32 and bf16 products): train log lines and peak memory at
#             high and medium, validate --live and a profile of its kernels at high, micro-batch
#             1 (-> RESULTS/flash-profile.json)
#   bf16      training.precision bf16 (exec/linear.hpp): 20 iterations of the tiny GPT and Llama
#             on the cuda backend (losses against the train step's fp32 ones), GPT-2 124M and the
#             1.3B GPT at micro-batch 1, 2 and 4: log lines, allocator peak, `traintwin memory`
#   bf16tiny  the first part of bf16 alone: 20 iterations of the tiny GPT and Llama in bf16 on the
#             cuda backend (losses against the train step's fp32 ones)
#   attn      the mma.sync flash attention (exec/cuda/flash_attention_mma.cuh): its GPU tests, a
#             profile of the 1.3B's flash_attention_* kernels in bf16 arithmetic, and the 1.3B
#             trained in bf16 with attention_backend flash at micro-batch 1, 2 and 4, and the
#             timeline of that run at micro-batch 4 (RESULTS/timeline-*.json)
#   ncuattn   Nsight Compute (ncu, where the machine lets it read the counters) on one launch of
#             each mma.sync flash attention kernel of the 1.3B GPT (forward, dq, dk/dv): speed
#             of light, occupancy, warp stall reasons, memory and compute workload
#             (-> RESULTS/ncu-attention.txt; not in the default steps)
#   bf16live  the prediction check in bf16 with attention_backend flash: profile --backend cuda of
#             the 1.3B GPT at micro-batch 1, 2 and 4 (-> RESULTS/cuda-<gpu>.json), then validate
#             --live of the variants in BF16_VALIDATE ("MB RECOMPUTE" separated by commas; default
#             micro-batch 1/2/4 without recomputation, 1 selective, 1 and 4 full; not in the
#             default steps)
#   fused     attention_backend fused (cuDNN's fused flash attention,
#             exec/cuda/cudnn_attention.hpp): its GPU tests, the tiny GPT in bf16 with fused and with flash attention (losses),
#             the 1.3B GPT trained in bf16 with flash at micro-batch 4 (the baseline) and with
#             fused at micro-batch 1, 2 and 4, and a timeline of fused at 4,
#             profile --backend cuda at 1, 2 and 4 (-> RESULTS/cuda-<gpu>.json), validate --live
#             of BF16_VALIDATE's variants (not in the default steps)
#   pytorch   GPT-2 124M tokens/s in PyTorch on the same GPU (fp32 eager; bf16 autocast + SDPA)
#   gemmdb    the bf16 and FP8 GEMMs (gemm_* and the experts' grouped_gemm_*) of every
#             shipped scenario on topologies/dgx-h100-superpod.yaml and of the H100 cases of
#             shared/validation's calibration files, profiled with --backend cuda
#             --bf16-activations (each GEMM alone on bf16 operands, as Megatron runs it) into
#             RESULTS/H100-SXM-80GB.json (the database simulate reads for that GPU; not in the
#             default steps)
# Usage: scripts/device_check.sh DIR   (DIR holds traintwin-device.tar.xz)
# Environment: RESULTS (default DIR/results), STEPS (default: all of the above, in that order),
# BUDGET_S (default 480: steps not started by then are skipped and say so), VALIDATE (the
# validate step's variants, "MB RECOMPUTE [FLOAT32_MATMUL_PRECISION]" separated by commas;
# default the five fp32 ones).
set -uo pipefail
dir=$(cd "${1:?usage: device_check.sh DIR}" && pwd)
results=${RESULTS:-$dir/results}
steps=${STEPS:-info tests train speed matmul profile validate pytorch gemm}
validate_variants=${VALIDATE:-1 none,2 none,1 selective,1 full,4 full}
bf16_validate_variants=${BF16_VALIDATE:-1 none,2 none,4 none,1 selective,1 full,4 full}
# The first H100 run (2026-11-26, 8 minutes): info, tests, train, pytorch, gemm took 90 s; the
# 1.3B model's host initialization (then one core, about a minute a process) starved speed,
# profile and validate. Initialization now runs on every core.
budget_s=${BUDGET_S:-480}
mkdir -p "$results"
summary=$results/summary.txt
log=$results/log.txt
: > "$summary"
: > "$log"
t0=$(date +%s)

work=/tmp/traintwin-device
rm -rf "$work" && mkdir -p "$work"
tar -C "$work" -xJf "$dir/traintwin-device.tar.xz" || { echo "device_check: cannot unpack $dir/traintwin-device.tar.xz" | tee -a "$summary"; exit 1; }
root=$work/traintwin-device
cd "$root"

# CUDA libraries: the toolkit's, else PyTorch's wheels.
cuda_dirs=()
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -e "$d/libcublasLt.so.13" ] && cuda_dirs+=("$d")
done
if [ ${#cuda_dirs[@]} -eq 0 ]; then
  while IFS= read -r f; do cuda_dirs+=("$(dirname "$f")"); done < <(
    find /usr/local /opt /usr/lib -name 'libcublasLt.so.13' 2>/dev/null | head -1)
fi
for name in libnccl.so.2 libcudart.so.13; do
  f=$(find "${cuda_dirs[@]:-/usr/local/cuda/lib64}" /usr/local /opt -name "$name" 2>/dev/null | head -1)
  [ -n "$f" ] && cuda_dirs+=("$(dirname "$f")")
done
# cuDNN (attention_backend fused): PyTorch's wheel (nvidia-cudnn-cu13) first, else the system's.
f=$(find /opt /usr/local -name 'libcudnn.so.9' 2>/dev/null | head -1)
[ -z "$f" ] && f=$(find /usr/lib /lib -name 'libcudnn.so.9' 2>/dev/null | head -1)
[ -n "$f" ] && cuda_dirs+=("$(dirname "$f")")
export LD_LIBRARY_PATH=$root/lib:$(IFS=:; echo "${cuda_dirs[*]:-}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OMPI_MCA_mca_base_component_path=$root/openmpi/components
export PATH=$root/bin:$PATH
tt=$root/bin/traintwin
# The cuda topology whose gpu.name is this GPU's device id ("cuda-" + its CUDA name in lower case,
# other characters as '-': cli/backend_choice.hpp): scenarios/device/ names the H100's, so
# validate --live on another GPU (an H200: topologies/cuda-h200-1gpu.yaml) passes its own.
gpu_model=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
device_id=cuda-$(printf '%s' "$gpu_model" | tr 'A-Z' 'a-z' | sed -E 's/[^a-z0-9]+/-/g; s/^-+|-+$//g')
device_topology=$(grep -l "^  name: $device_id\$" topologies/cuda-*.yaml 2>/dev/null | head -1)
vt=${device_topology:+--topology $device_topology}

step() {  # step NAME LIMIT_S COMMAND...
  local name=$1 limit=$2; shift 2
  local now=$(( $(date +%s) - t0 ))
  if [ $((now + 20)) -gt "$budget_s" ]; then
    echo "== $name: skipped (budget: ${now}s of ${budget_s}s used)" >> "$summary"
    return 0
  fi
  [ $((now + limit)) -gt "$budget_s" ] && limit=$((budget_s - now))
  echo "== $name (limit ${limit}s) ==" >> "$log"
  local s=$(date +%s%N)
  timeout --kill-after=5 "$limit" bash -c "$*" > "$results/$name.out" 2>&1
  local rc=$?
  local took=$(( ($(date +%s%N) - s) / 1000000000 ))
  cat "$results/$name.out" >> "$log"
  {
    echo "== $name: rc $rc, ${took} s$([ $rc -eq 124 ] && echo ' (TIMED OUT)')"
    case $name in
      tests) grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|tests ran' "$results/$name.out" | tail -30 ;;
      *) grep -E '^#|^  |^summary|^pytorch|TFLOP|tokens|MFU|error|Error|what\(\)' "$results/$name.out" | tail -45 ;;
    esac
  } >> "$summary"
  rm -f "$results/$name.out"
}

# The tiny models of the README on one rank, 20 iterations, every loss printed: the cuda and cpu
# backends compute the same fp32 model (only summation orders differ).
tiny() {  # tiny SCENARIO BACKEND [PRECISION [ATTENTION_BACKEND]]
  "$tt" train "$1" --backend "$2" --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 \
    --set cluster.num_gpus=1 --set parallelism.sequence_parallel=false \
    --set training.train_iters=20 --set training.lr_warmup_iters=2 --set training.log_interval=1 \
    --set training.eval_iters=0 ${3:+--set training.precision=$3} \
    ${4:+--set training.attention_backend=$4} 2>&1 |
    awk -v tag="$(basename "$1" .yaml) $2${3:+ $3}${4:+ $4}" '/ iteration /{split($0, a, "lm loss: "); split(a[2], b, " "); l = l sprintf(" %.6f", b[1]); split($0, c, "elapsed time per iteration \\(ms\\): "); split(c[2], d, " "); ms = d[1]} /error/{print "  " $0} END{print "  " tag " losses" l " | last ms " ms}'
}
# The bf16 and FP8 GEMMs of the H100 scenarios and calibration cases into one database (step
# gemmdb).
gemmdb() {
  local re='^(grouped_)?gemm_(fwd|dgrad|wgrad)\[.*\] (bf16|fp8) ' db=$results/H100-SXM-80GB.json
  local args=(--backend cuda --kernels "$re" --out "$db" --warmup 2 --repeats 10 --min-time 0.01
              --bf16-activations)
  for sc in $(grep -l 'dgx-h100-superpod' scenarios/*.yaml); do
    "$tt" profile "$sc" "${args[@]}" 2>&1 | grep -E '^wrote|error' | sed "s|^|  [$(basename "$sc" .yaml)] |"
  done
  for f in calibration calibration-modern; do
    [ -f "shared/validation/$f.yaml" ] || { echo "  [$f] shared/validation/$f.yaml is not in the bundle"; continue; }
    "$tt" profile --cases "shared/validation/$f.yaml" --gpu H100-SXM-80GB "${args[@]}" 2>&1 |
      grep -E '^wrote|error|^# case' | sed "s|^|  [$f] |"
  done
}
# A 1.3B variant: micro-batch MB, recompute R, float32 matmul precision P (default highest).
v13() { echo "--micro-batch-size $1 --recompute-granularity $2${3:+ --float32-matmul-precision $3}"; }
export -f tiny v13 gemmdb
# The 1.3B in bf16 with flash attention (steps bf16live), and with cuDNN's fused attention (step
# fused).
b16="--set training.precision=bf16 --set training.attention_backend=flash"
b16f="--set training.precision=bf16 --set training.attention_backend=fused"
export tt validate_variants bf16_validate_variants results b16 b16f vt

for s in $steps; do
  case $s in
    info)
      step info 30 "echo '  device id $device_id, topology ${device_topology:-none (validate --live will refuse: add topologies/cuda-<gpu>-1gpu.yaml)}'; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu --format=csv 2>&1 | sed 's/^/  /'; echo '  LD_LIBRARY_PATH='\$LD_LIBRARY_PATH; ldd $tt | grep -E 'not found|cublas|cudart|cudnn' | sed 's/^/  /'" ;;
    tests)
      step tests 80 "cuda_host_tests --gtest_brief=1; gpu_tests --gtest_brief=1" ;;
    gemm)
      step gemm 60 "cuda_gemm_bench" ;;
    smoke)
      step smoke 60 "$tt simulate scenarios/gpt3-175b-h100-1024.yaml | head -4 | sed 's/^/  /'" ;;
    train)
      step train 90 "for sc in scenarios/gpt-tiny-brown.yaml scenarios/llama-tiny-brown.yaml; do for b in cuda cpu; do tiny \$sc \$b; done; done" ;;
    profile)
      step profile 150 "for mb in 1 2 4; do $tt profile scenarios/device/gpt-1.3b-h100-1.yaml --backend cuda --micro-batch-size \$mb --repeats 10 --min-time 0.02 2>/dev/null | tail -1 | sed \"s/^/  [mb \$mb] /\"; cp traces/db/cuda-*.json $results/ 2>/dev/null; done" ;;
    validate)
      step validate 200 "IFS=,; for v in \$validate_variants; do IFS=' '; $tt validate --live scenarios/device/gpt-1.3b-h100-1.yaml --backend cuda \$vt \$(v13 \$v) --iterations 2 --warmup 1 --kernels 0 2>&1 | grep -E 'iteration time|error' | head -2 | sed \"s/^/  [mb \$v] /\"; done" ;;
    matmul)
      step matmul 240 "for p in high medium; do $tt train scenarios/device/gpt2-124m-h100-1.yaml --backend cuda --float32-matmul-precision \$p --set training.train_iters=10 --set training.log_interval=5 2>&1 | grep -E 'iteration|error' | tail -1 | sed \"s/^/  [124m \$p] /\"; $tt train scenarios/device/gpt-1.3b-h100-1.yaml --backend cuda --float32-matmul-precision \$p --set training.train_iters=6 --set training.log_interval=3 2>&1 | grep -E 'iteration|peak|error' | tail -2 | sed \"s/^/  [1.3b \$p] /\"; $tt validate --live scenarios/device/gpt-1.3b-h100-1.yaml --backend cuda \$vt --float32-matmul-precision \$p \$(v13 1 none) --iterations 2 --warmup 1 --kernels 0 2>&1 | grep -E 'iteration time|error' | head -2 | sed \"s/^/  [validate \$p] /\"; $tt profile scenarios/device/gpt-1.3b-h100-1.yaml --backend cuda --float32-matmul-precision \$p --micro-batch-size 1 --repeats 10 --min-time 0.02 2>/dev/null | tail -1 | sed \"s/^/  [profile \$p] /\"; cp traces/db/cuda-*.json $results/ 2>/dev/null; done" ;;
    speed)
      step speed 100 "$tt train scenarios/device/gpt2-124m-h100-1.yaml --backend cuda 2>&1 | grep -E 'iteration|peak|error' | tail -3 | sed 's/^/  /'; $tt train scenarios/device/gpt-1.3b-h100-1.yaml --backend cuda --set training.train_iters=4 --set training.log_interval=2 2>&1 | grep -E 'iteration|peak|error' | tail -3 | sed 's/^/  /'; $tt memory scenarios/device/gpt-1.3b-h100-1.yaml | tail -2 | sed 's/^/  /'" ;;
    flash)
      step flash 220 "for pr in high medium; do $tt train scenarios/device/gpt-1.3b-h100-1.yaml --backend cuda --float32-matmul-precision \$pr --set training.attention_backend=flash --set training.train_iters=6 --set training.log_interval=3 2>&1 | grep -E 'iteration|peak|error' | tail -2 | sed \"s/^/  [1.3b flash \$pr] /\"; done; $tt validate --live scenarios/device/gpt-1.3b-h100-1.yaml --backend cuda \$vt --float32-matmul-precision high --set training.attention_backend=flash \$(v13 1 none) --iterations 2 --warmup 1 --kernels 0 2>&1 | grep -E 'iteration time|error' | head -2 | sed 's/^/  [validate flash high] /'; $tt profile scenarios/device/gpt-1.3b-h100-1.yaml --backend cuda --float32-matmul-precision high --set training.attention_backend=flash --micro-batch-size 1 --repeats 5 --min-time 0.01 --out $results/flash-profile.json 2>/dev/null | tail -1 | sed 's/^/  [profile flash high] /'" ;;
    gemmdb)
      step gemmdb 300 "gemmdb" ;;
    bf16)
      step bf16 300 "for sc in scenarios/gpt-tiny-brown.yaml scenarios/llama-tiny-brown.yaml; do tiny \$sc cuda bf16; done; $tt train scenarios/device/gpt2-124m-h100-1.yaml --backend cuda --set training.precision=bf16 --set training.train_iters=10 --set training.log_interval=5 2>&1 | grep -E 'iteration|peak|precision|error' | tail -3 | sed 's/^/  [124m bf16] /'; for mb in 1 2 4; do $tt train scenarios/device/gpt-1.3b-h100-1.yaml --backend cuda --set training.precision=bf16 --micro-batch-size \$mb --set training.train_iters=6 --set training.log_interval=3 2>&1 | grep -E 'iteration|peak|error' | tail -2 | sed \"s/^/  [1.3b bf16 mb \$mb] /\"; done; $tt memory scenarios/device/gpt-1.3b-h100-1.yaml --set training.precision=bf16 | tail -2 | sed 's/^/  [memory bf16] /'" ;;
    bf16tiny)
      step bf16tiny 60 "for sc in scenarios/gpt-tiny-brown.yaml scenarios/llama-tiny-brown.yaml; do tiny \$sc cuda bf16; done" ;;
    ncuattn)
      step ncuattn 120 "ncu_bin=\$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1); [ -n \"\$ncu_bin\" ] || { echo '  no ncu on this machine'; exit 0; }; for k in mma_forward mma_backward_dq mma_backward_dkv; do \$ncu_bin --clock-control none -k regex:\$k --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis $tt profile scenarios/device/gpt-1.3b-h100-1.yaml --backend cuda --float32-matmul-precision medium --set training.attention_backend=flash --kernels '^flash_attention' --repeats 1 --warmup 0 --min-time 0 --out /tmp/ncu-profile.json > $results/ncu-\$k.txt 2>&1; echo \"  [\$k] rc \$?\"; grep -E 'Duration|Throughput|Registers|Achieved Occupancy|Theoretical Occupancy|Stall|Warp Cycles|Block Limit|Executed Ipc|Issue Slots' $results/ncu-\$k.txt | head -24 | sed 's/^/    /'; done" ;;
    pytorch)
      step pytorch 60 "cd bench && for v in 'fp32' 'bf16 --sdpa'; do set -- \$v; python3 pytorch_gpt_step.py --device cuda --layers 12 --hidden 768 --heads 12 --seq 1024 --micro-batch 8 --global-batch 32 --warmup 3 --steps 5 --dtype \$* | tail -1 | sed 's/^/  /'; done" ;;
    attn)
      step attn 300 "gpu_tests --gtest_brief=1 --gtest_filter='*BlockAttention*:*RingAttention*' 2>&1 | grep -E 'PASSED|FAILED|Failure|error' -A3 | head -30 | sed 's/^/  /'; $tt profile scenarios/device/gpt-1.3b-h100-1.yaml --backend cuda --float32-matmul-precision medium --set training.attention_backend=flash --kernels '^flash_attention' --repeats 10 --min-time 0.01 --out $results/flash-mma.json 2>&1 | grep -E 'flash_attention|wrote|rror' | sed 's/^/  [profile] /'; for mb in 1 2 4; do $tt train scenarios/device/gpt-1.3b-h100-1.yaml --backend cuda --set training.precision=bf16 --set training.attention_backend=flash --micro-batch-size \$mb --set training.train_iters=6 --set training.log_interval=3 2>&1 | grep -E 'iteration|peak|error' | tail -2 | sed \"s/^/  [1.3b bf16 flash mb \$mb] /\"; done; $tt train scenarios/device/gpt-1.3b-h100-1.yaml --backend cuda --set training.precision=bf16 --set training.attention_backend=flash --micro-batch-size 4 --set training.train_iters=3 --set training.log_interval=3 --timeline $results/timeline-1.3b-bf16-flash-mb4.json 2>&1 | grep -E 'timeline|error' | sed 's/^/  [timeline] /'" ;;
    bf16live)
      step bf16live 420 "for mb in 1 2 4; do $tt profile scenarios/device/gpt-1.3b-h100-1.yaml --backend cuda \$b16 --micro-batch-size \$mb --repeats 10 --min-time 0.02 > $results/profile.out 2>&1; { grep -a 'rror' $results/profile.out | tail -1; tail -1 $results/profile.out; } | sed \"s/^/  [profile bf16 mb \$mb] /\"; done; rm -f $results/profile.out; cp traces/db/cuda-*.json $results/ 2>/dev/null; IFS=,; for v in \$bf16_validate_variants; do IFS=' '; $tt validate --live scenarios/device/gpt-1.3b-h100-1.yaml --backend cuda \$vt \$b16 \$(v13 \$v) --iterations 2 --warmup 1 --kernels 0 2>&1 | grep -E 'iteration time|error|^(GEMM|attention|elementwise|optimizer) ' | head -6 | sed \"s/^/  [bf16 mb \$v] /\"; done" ;;
    fused)
      step fused 420 "gpu_tests --gtest_brief=1 --gtest_filter='*FusedAttention*:*BlockAttentionOnTensorCores*' 2>&1 | grep -E 'PASSED|FAILED|Failure|rror' -A3 | head -30 | sed 's/^/  /'; tiny scenarios/gpt-tiny-brown.yaml cuda bf16 fused; tiny scenarios/gpt-tiny-brown.yaml cuda bf16 flash; $tt train scenarios/device/gpt-1.3b-h100-1.yaml --backend cuda \$b16 --micro-batch-size 4 --set training.train_iters=6 --set training.log_interval=3 2>&1 | grep -E 'iteration|peak|rror' | tail -2 | sed 's/^/  [1.3b bf16 flash mb 4] /'; for mb in 1 2 4; do $tt train scenarios/device/gpt-1.3b-h100-1.yaml --backend cuda \$b16f --micro-batch-size \$mb --set training.train_iters=6 --set training.log_interval=3 2>&1 | grep -E 'iteration|peak|rror' | tail -2 | sed \"s/^/  [1.3b bf16 fused mb \$mb] /\"; done; $tt train scenarios/device/gpt-1.3b-h100-1.yaml --backend cuda \$b16f --micro-batch-size 4 --set training.train_iters=3 --set training.log_interval=3 --timeline $results/timeline-1.3b-bf16-fused-mb4.json 2>&1 | grep -E 'timeline|rror' | sed 's/^/  [timeline] /'; for mb in 1 2 4; do $tt profile scenarios/device/gpt-1.3b-h100-1.yaml --backend cuda \$b16f --micro-batch-size \$mb --repeats 10 --min-time 0.02 > $results/profile.out 2>&1; { grep -a 'rror' $results/profile.out | tail -1; grep -a 'fused_attention' $results/profile.out | head -2; tail -1 $results/profile.out; } | sed \"s/^/  [profile fused mb \$mb] /\"; done; rm -f $results/profile.out; cp traces/db/cuda-*.json $results/ 2>/dev/null; IFS=,; for v in \$bf16_validate_variants; do IFS=' '; $tt validate --live scenarios/device/gpt-1.3b-h100-1.yaml --backend cuda \$vt \$b16f \$(v13 \$v) --iterations 2 --warmup 1 --kernels 0 2>&1 | grep -E 'iteration time|rror|^(GEMM|attention|elementwise|optimizer) ' | head -6 | sed \"s/^/  [fused mb \$v] /\"; done" ;;
    *) echo "== $s: unknown step (allowed: info tests gemm smoke train profile validate speed matmul flash pytorch gemmdb bf16 bf16tiny attn ncuattn bf16live fused)" >> "$summary" ;;
  esac
done
echo "== total $(( $(date +%s) - t0 )) s" >> "$summary"
cat "$summary"
