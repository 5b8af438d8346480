#!/usr/bin/env bash
# Fetches the browser builds of Vega 5, Vega-Lite 5 and vega-embed 6 from the npm registry into
# data/vega/ (git-ignored): vega.min.js, vega-lite.min.js, vega-embed.min.js plus a VERSIONS file.
# `traintwin report` inlines these files into report.html so that it opens offline from disk.
#
# Usage: scripts/fetch_vega.sh [DEST]   (DEST defaults to data/vega in the source tree)
# Idempotent: does nothing when the three files are already there (delete DEST to refresh).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-$root/data/vega}"
files=(vega.min.js vega-lite.min.js vega-embed.min.js)

have_all=1
for f in "${files[@]}"; do [ -s "$dest/$f" ] || have_all=0; done
if ((have_all)); then
  echo "fetch_vega: $dest already has ${files[*]}" >&2
  exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
  echo "fetch_vega: npm is not installed; install it (Debian: apt-get install npm) and run" \
       "scripts/fetch_vega.sh again, or put ${files[*]} into $dest by hand" >&2
  exit 1
fi

mkdir -p "$dest"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# npm pack downloads the published tarballs only (no install, no scripts run).
(cd "$work" && npm pack --silent vega@5 vega-lite@5 vega-embed@6 >packed.txt) || {
  echo "fetch_vega: 'npm pack vega@5 vega-lite@5 vega-embed@6' failed (is the npm registry" \
       "reachable?)" >&2
  exit 1
}

: >"$work/VERSIONS"
for pkg in vega vega-lite vega-embed; do
  tarball="$(ls "$work"/"$pkg"-[0-9]*.tgz 2>/dev/null | head -n 1)"
  [ -n "$tarball" ] || { echo "fetch_vega: npm pack gave no tarball for $pkg" >&2; exit 1; }
  tar -xzf "$tarball" -C "$work" "package/build/$pkg.min.js"
  mv "$work/package/build/$pkg.min.js" "$dest/$pkg.min.js.tmp"
  basename "$tarball" .tgz >>"$work/VERSIONS"
done
for f in "${files[@]}"; do mv "$dest/$f.tmp" "$dest/$f"; done
mv "$work/VERSIONS" "$dest/VERSIONS"
echo "fetch_vega: wrote ${files[*]} ($(tr '\n' ' ' <"$dest/VERSIONS")) into $dest" >&2
