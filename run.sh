#!/usr/bin/env bash
# The main job: install, build, and report on the default scenario.
# Until the simulator lands this prints the scenario's Program and memory summary.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
scenario=${1:-scenarios/gpt3-175b-h100-1024.yaml}
mkdir -p out
./build/traintwin summary "$scenario" | tee out/summary.txt
echo "report written to out/summary.txt" >&2
