#!/usr/bin/env bash
# Install, build, run every test (ctest). GPU tests carry the label `gpu` and skip without one.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
ctest --test-dir build --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
