#!/usr/bin/env bash
# Builds the Brown-corpus training set of scenarios/gpt-tiny-brown.yaml: fetches the GPT-2
# vocabulary and the corpus (scripts/fetch_data.sh) and tokenizes data/brown.txt (one document
# per corpus file) into data/brown_text_document.bin/.idx with `traintwin preprocess`.
# Usage: scripts/prepare_brown.sh [BUILD_DIR]   (default: build). Idempotent.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-build}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
"$root/scripts/fetch_data.sh"
if [[ -f "$root/data/brown_text_document.bin" && -f "$root/data/brown_text_document.idx" ]]; then
  exit 0
fi
"$build/traintwin" preprocess --input "$root/data/brown.txt" --output-prefix "$root/data/brown" \
  --tokenizer-type GPT2BPETokenizer --vocab-file "$root/data/gpt2/encoder.json" \
  --merge-file "$root/data/gpt2/vocab.bpe" --append-eod
