#!/usr/bin/env bash
# Installs what traintwin needs on Debian 12 (only what is missing) and builds it (Release).
# Used by ./run.sh and ./test.sh. Arguments: the CMake targets to build (default: all, i.e. the
# traintwin binary and every test suite); ./run.sh builds only `traintwin`.
# Environment: BUILD_DIR (default build), JOBS (default: cores), WITH_PYTORCH=1 (also Debian's
# python3-torch, for bench/cpu_speed_vs_pytorch.sh only: ./run.sh and ./test.sh do not need it).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake pkg-config git
          libsimgrid-dev libboost-graph-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev
          libfmt-dev libopenblas-dev libopenmpi-dev openmpi-bin googletest libgtest-dev
          libgmock-dev libbenchmark-dev
          libprotobuf-dev protobuf-compiler  # Chakra execution traces (traintwin export)
          clang-14 libclang-rt-14-dev  # libFuzzer: the fuzz targets (tests/fuzz, ctest -L fuzz)
          chromium)  # chromium: the report's headless rendering test
# npm fetches Vega for the report; Debian's npm only where no npm exists (a NodeSource nodejs
# ships its own and conflicts with Debian's).
command -v npm >/dev/null 2>&1 || packages+=(npm)
[ "${WITH_PYTORCH:-0}" = 1 ] && packages+=(python3-torch)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to apt-get install ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Vega, Vega-Lite and vega-embed for the HTML report (data/vega/, inlined into report.html); a
# failure (npm registry unreachable) only leaves `traintwin report` and its browser test without it.
scripts/fetch_vega.sh || echo "setup: could not fetch Vega; traintwin report needs it" >&2

build_dir=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
# CUDA is optional: found under /usr/local/cuda when present; CI compiles for one arch only.
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build_dir" -j "$jobs" "${targets[@]}"
