#!/usr/bin/env bash
# Gathers what a bare GPU machine needs to run traintwin's GPU check (scripts/device_check.sh):
# the traintwin binary, the GPU test suites and benchmarks from BUILD_DIR, the shared libraries
# `ldd` names that such a machine lacks (Debian's yaml-cpp, fmt, SimGrid, OpenBLAS, Open MPI,
# Boost, ...; not the C library, not the CUDA libraries, which the machine's CUDA toolkit or
# PyTorch wheels provide and which are far beyond the size limit), the scenarios, topologies and
# bench scripts, compressed into OUT_DIR/traintwin-device.tar.xz (at most 64 MiB, checked) with
# device_check.sh beside it. Run it here, carry OUT_DIR, then on the GPU machine:
#   scripts/device_check.sh OUT_DIR
# Usage: scripts/device_bundle.sh [OUT_DIR (default .device)]. Environment: BUILD_DIR (default
# build), TARGETS (default: traintwin gpu_tests cuda_host_tests cuda_gemm_bench), NO_BUILD=1
# (pack what BUILD_DIR holds without building). Exits non-zero naming what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.device}
build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
limit_bytes=$((64 * 1024 * 1024))

[ -f "$build/CMakeCache.txt" ] || { echo "device_bundle: $build is not configured (run scripts/setup.sh)" >&2; exit 1; }
read -r -a targets <<< "${TARGETS:-traintwin gpu_tests cuda_host_tests cuda_gemm_bench}"
args=()
for t in "${targets[@]}"; do args+=(--target "$t"); done
[ "${NO_BUILD:-0}" = 1 ] || cmake --build "$build" -j "$jobs" "${args[@]}"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/traintwin-device"
mkdir -p "$root/bin" "$root/lib"
for t in "${targets[@]}"; do
  found=""
  for d in "$build" "$build/tests"; do [ -x "$d/$t" ] && found="$d/$t" && break; done
  [ -n "$found" ] || { echo "device_bundle: $t was not built in $build" >&2; exit 1; }
  cp "$found" "$root/bin/"
done
strip --strip-unneeded "$root"/bin/* 2>/dev/null || true

# Libraries every Linux with glibc has, and the CUDA libraries the GPU machine brings.
skip='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|libresolv|libutil|libcuda|libcudart|libcublas|libcublasLt|libnccl|libcudnn|libnvidia)[.-]'
for b in "$root"/bin/*; do
  ldd "$b" | awk '/=> \//{print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ "$name" =~ $skip ]]; then continue; fi
  cp -L "$path" "$root/lib/$name"
done
# Open MPI loads its components at run time (only mpirun jobs need them; one process does not
# initialize MPI).
ompi=/usr/lib/x86_64-linux-gnu/openmpi
if [ -d "$ompi/lib/openmpi3" ]; then
  mkdir -p "$root/openmpi"
  cp -rL "$ompi/lib/openmpi3" "$root/openmpi/components"
fi

cp -r scenarios topologies "$root/"
# The Brown corpus the training checks read (scripts/prepare_brown.sh makes it here: the GPU
# machine has no network) and the GPT-2 tokenizer files the tiny scenarios name.
for f in data/brown_text_document.bin data/brown_text_document.idx data/gpt2/encoder.json \
         data/gpt2/vocab.bpe; do
  [ -f "$f" ] || { echo "device_bundle: $f is missing: run scripts/prepare_brown.sh $build" >&2; exit 1; }
  mkdir -p "$root/$(dirname "$f")" && cp "$f" "$root/$f"
done
mkdir -p "$root/bench" "$root/scripts"
cp bench/pytorch_gpt_step.py "$root/bench/"
cp scripts/device_check.sh "$root/scripts/"
[ -d traces/db ] && mkdir -p "$root/traces" && cp -r traces/db "$root/traces/" || true
# The validation files the check simulates against (../shared beside the checkout).
if [ -d ../shared/validation ]; then mkdir -p "$root/shared" && cp -r ../shared/validation "$root/shared/"; fi

mkdir -p "$out"
tar -C "$stage" -cf - traintwin-device | xz -T0 -6 > "$out/traintwin-device.tar.xz"
cp scripts/device_check.sh "$out/"
size=$(stat -c %s "$out/traintwin-device.tar.xz")
echo "device_bundle: $out/traintwin-device.tar.xz $((size / 1024 / 1024)) MiB ($(ls "$root/lib" | wc -l) libraries)"
if [ "$size" -gt "$limit_bytes" ]; then
  echo "device_bundle: the bundle is over 64 MiB; the device tool carries no more" >&2
  exit 1
fi
