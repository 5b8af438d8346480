#!/usr/bin/env bash
# traintwin against ASTRA-sim (issue 30, item 3): export three shipped scenarios as Chakra
# execution traces (`traintwin export --format chakra`), replay them in ASTRA-sim's analytical
# network backend (congestion-unaware) configured like the scenario's topology, and print both
# iteration times side by side with where the difference comes from.
#
# ASTRA-sim is no dependency of traintwin: this script builds it from a checkout you provide.
#   git clone https://github.com/astra-sim/astra-sim.git && cd astra-sim
#   git checkout 72dd7f8a69d2c8b1f5409e9a0bc9397eb7638af0   # tested; newer may work
#   git submodule update --init --recursive
# (or only what the analytical build uses, without ns-3 and htsim: git submodule update --init
#  extern/graph_frontend/chakra extern/network_backend/analytical extern/remote_memory_backend/analytical
#  extern/helper/fmt extern/helper/spdlog && git -C extern/network_backend/analytical submodule
#  update --init extern/yaml-cpp). A source tree without .git (a tarball) names its commit in
# a file .astra_commit at its top, else its build goes to <cache>/unversioned.
# Tested with ASTRA-sim 72dd7f8 (2025-09-03, "bugfix: dont report overlap if there is no
# overlap") and its submodules: chakra 90630ca, astra-network-analytical 599a047 (+ its yaml-cpp
# 3d2888c), astra-memory-analytical 641cce8, fmt 7e73566; spdlog v1.13.0-31-g6230201 stood in for
# the pinned 63f0875 (logging only). Newer ASTRA-sim (2367f6f and later) pulls yaml-cpp with
# CMake FetchContent, which needs the network (or ASTRA_CMAKE_ARGS=-DFETCHCONTENT_SOURCE_DIR_YAML-CPP=...).
# Build needs: cmake >= 3.22, g++ (C++17), protobuf-compiler and libprotobuf-dev (Debian 12: 3.21).
#
# Usage: bench/astra_sim_compare.sh [ASTRA_SIM_DIR]
#   ASTRA_SIM_DIR    the checkout (argument or environment; required)
#   ASTRA_SIM_CACHE  where its build goes, one folder per commit
#                    (default ${XDG_CACHE_HOME:-~/.cache}/traintwin/astra-sim)
#   JOBS             build parallelism (default 2)
#   TRAINTWIN        the traintwin binary (default build/traintwin)
#   WORK             folder for the traces, configs and logs (default a new mktemp -d; kept)
#   ASTRA_CMAKE_ARGS extra arguments for ASTRA-sim's cmake configure
#   SCENARIOS        override the runs: "name|scenario file|traintwin flags;..." (see below)
# The ETs must come from a traintwin whose export never names process group "0" (ASTRA-sim
# reserves it for the world: a CommunicatorGroup id 0 fails an assertion in 72dd7f8, and later
# versions read pg "0" as all ranks); the script refuses a comm-groups file with a group "0".
#
# ASTRA-sim's time unit (a "cycle") is 1 ns; "sys[r] finished, T cycles" is rank r's end time and
# the iteration time is the latest rank's. traintwin's column is `traintwin simulate` of the
# scenario (the default: link contention on, NCCL's algorithm choice); "tt ET" is traintwin's
# replay of the very ETs ASTRA-sim read (`simulate --trace chakra`), the fair pair of the two.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ASTRA_SIM_DIR=${1:-${ASTRA_SIM_DIR:-}}
ASTRA_TESTED=72dd7f8
JOBS=${JOBS:-2}
TRAINTWIN=${TRAINTWIN:-$ROOT/build/traintwin}
CACHE=${ASTRA_SIM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/traintwin/astra-sim}
WORK=${WORK:-$(mktemp -d /tmp/astra_sim_compare.XXXXXX)}
die() { echo "astra_sim_compare: $*" >&2; exit 1; }
[ -n "$ASTRA_SIM_DIR" ] || die "give the ASTRA-sim checkout as argument or ASTRA_SIM_DIR (clone: see the header)"
ASTRA_SIM_DIR=$(cd "$ASTRA_SIM_DIR" && pwd)
[ -x "$TRAINTWIN" ] || die "$TRAINTWIN not built (run scripts/setup.sh or set TRAINTWIN)"
command -v python3 >/dev/null || die "needs python3"
mkdir -p "$WORK"

# --- 1. Build ASTRA-sim's analytical backend (congestion-unaware) into the cache --------------
commit=$(git -C "$ASTRA_SIM_DIR" rev-parse HEAD 2>/dev/null || true)
[ -n "$commit" ] || commit=$(cat "$ASTRA_SIM_DIR/.astra_commit" 2>/dev/null || echo unversioned)
for f in build/astra_analytical/CMakeLists.txt extern/graph_frontend/chakra/schema/protobuf/et_def.proto \
         extern/network_backend/analytical/CMakeLists.txt extern/remote_memory_backend/analytical \
         extern/helper/fmt/CMakeLists.txt extern/helper/spdlog/CMakeLists.txt; do
  [ -e "$ASTRA_SIM_DIR/$f" ] || die "$ASTRA_SIM_DIR/$f missing (git submodule update --init --recursive)"
done
build=$CACHE/${commit:0:12}
bin=$build/bin/AstraSim_Analytical_Congestion_Unaware
if [ ! -x "$bin" ]; then
  command -v protoc >/dev/null || die "needs protoc (apt-get install protobuf-compiler libprotobuf-dev)"
  proto=$ASTRA_SIM_DIR/extern/graph_frontend/chakra/schema/protobuf
  # As ASTRA-sim's own build/astra_analytical/build.sh: generated next to the .proto.
  [ -f "$proto/et_def.pb.cc" ] || protoc et_def.proto --proto_path="$proto" --cpp_out="$proto"
  echo "building ASTRA-sim ${commit:0:12} (congestion_unaware, -j$JOBS) into $build ..." >&2
  mkdir -p "$build"
  # shellcheck disable=SC2086
  cmake -S "$ASTRA_SIM_DIR/build/astra_analytical" -B "$build" -DBUILDTARGET=congestion_unaware \
    -DCMAKE_BUILD_TYPE=Release ${ASTRA_CMAKE_ARGS:-} > "$build.configure.log" 2>&1 ||
    die "configure failed: $build.configure.log"
  cmake --build "$build" -j "$JOBS" > "$build.build.log" 2>&1 || die "build failed: $build.build.log"
  [ -x "$bin" ] || die "no $bin after the build"
fi
[ "${commit:0:7}" = "$ASTRA_TESTED" ] || echo "note: ASTRA-sim ${commit:0:12}, tested with $ASTRA_TESTED" >&2

# --- 2. The scenarios: "name|scenario|traintwin flags" ---------------------------------------
# GPT TP+DP (Nemotron-4 15B: TP 4 x DP 4, 16 H100), PP (Qwen3-30B-A3B: TP 4 x PP 2 x DP 2 and
# EP 4, so MoE all-to-alls too; global batch 32 instead of 256: 16 micro-batches keep its ETs
# at 54 MB instead of 430), a Llama (Llama 3.1 8B at 8K context: CP 2 x DP 4, 8 H100; CP's ring
# exchanges become Chakra sends and recvs).
SCENARIOS=${SCENARIOS:-"nemotron4-15b (GPT, TP4 DP4)|scenarios/nemotron4-15b-h100-16.yaml|;qwen3-30b-a3b (MoE, TP4 PP2 EP4)|scenarios/qwen3-30b-a3b-h100-16.yaml|--set training.global_batch_size=32;llama3.1-8b (CP2 DP4)|scenarios/llama3.1-8b-h100-8.yaml|"}

# --- 3. ASTRA-sim's inputs from the scenario's topology --------------------------------------
# network.yml: dim 0 the NVLink domain (Switch of gpus_per_node), dim 1 (when more than one
# node) the InfiniBand rail (Switch of num_gpus / gpus_per_node: same-rail GPUs of different
# nodes meet at one leaf switch of the rail-optimized fat tree inside a scalable unit).
# ASTRA-sim's bandwidth is GiB/s (NetworkFunction.cpp: x 2^30 / 1e9 bytes per ns) and its Switch
# counts 2 hops (NPU -> switch -> NPU), each of `latency` ns. NVLink: nvlink_bandwidth per
# direction, half of nvlink_latency (NCCL's per-step latency) per hop. IB: nic line_rate, and
# (2 x nic latency + leaf hop_latency) / 2 per hop: adapter, leaf, adapter.
# system.json: ring for every collective and dimension (NCCL's ring; ASTRA-sim has no NVLS or
# tree of NCCL's kind), FIFO, no roofline (compute nodes replay their duration_micros).
write_configs() {  # scenario file, extra flags..., into $1.dir
  local out=$1 scen=$2; shift 2
  "$TRAINTWIN" simulate --json --quiet "$scen" "$@" > "$out/traintwin.json"
  python3 - "$ROOT" "$scen" "$out" "$@" <<'EOF'
import json, os, re, sys
root, scen, out, flags = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
def yaml_values(path):
    # The flat 'key: value' lines of a scenario/topology file (no PyYAML needed).
    vals = {}
    for line in open(path):
        m = re.match(r'\s*([A-Za-z_]+):\s*([^#\s][^#]*?)\s*(#.*)?$', line)
        if m: vals.setdefault(m.group(1), m.group(2).strip('"\''))
    return vals
s = yaml_values(scen)
num_gpus = int(s['num_gpus'])
for i, f in enumerate(flags):
    if f == '--set' and flags[i + 1].startswith('cluster.num_gpus='):
        num_gpus = int(flags[i + 1].split('=')[1])
topo_path = os.path.normpath(os.path.join(os.path.dirname(scen), s['topology']))
t = yaml_values(topo_path)
units = {'GBps': 1e9, 'TBps': 1e12, 'Gbps': 1e9 / 8, 'Tbps': 1e12 / 8,
         'ns': 1.0, 'us': 1e3, 'ms': 1e6}
def q(v):
    m = re.match(r'([0-9.]+)\s*([A-Za-z]+)$', v)
    return float(m.group(1)) * units[m.group(2)]
gib = float(1 << 30)
per_node = int(t['gpus_per_node'])
nvl_bw, nvl_lat = q(t['nvlink_bandwidth']) / gib, q(t['nvlink_latency']) / 2
ib_bw = q(t['line_rate']) / gib
ib_lat = (2 * q(t['latency']) + q(t['hop_latency'])) / 2
dims = [('Switch', min(per_node, num_gpus), nvl_bw, nvl_lat)]
if num_gpus > per_node:
    dims.append(('Switch', num_gpus // per_node, ib_bw, ib_lat))
with open(os.path.join(out, 'network.yml'), 'w') as f:
    f.write('# from %s for %d GPUs (bench/astra_sim_compare.sh)\n' % (os.path.relpath(topo_path, root), num_gpus))
    f.write('topology: [ %s ]\n' % ', '.join(d[0] for d in dims))
    f.write('npus_count: [ %s ]\n' % ', '.join(str(d[1]) for d in dims))
    f.write('bandwidth: [ %s ]  # GiB/s\n' % ', '.join('%.3f' % d[2] for d in dims))
    f.write('latency: [ %s ]  # ns per hop\n' % ', '.join('%.1f' % d[3] for d in dims))
ring = ['ring'] * len(dims)
json.dump({'scheduling-policy': 'FIFO', 'endpoint-delay': 10, 'active-chunks-per-dimension': 1,
           'preferred-dataset-splits': 4, 'all-reduce-implementation': ring,
           'all-gather-implementation': ring, 'reduce-scatter-implementation': ring,
           'all-to-all-implementation': ring, 'collective-optimization': 'localBWAware',
           'local-mem-bw': q(t['hbm_bandwidth']) / 1e9, 'boost-mode': 0, 'roofline-enabled': 0},
          open(os.path.join(out, 'system.json'), 'w'), indent=2)
json.dump({'memory-type': 'NO_MEMORY_EXPANSION'}, open(os.path.join(out, 'remote_memory.json'), 'w'))
EOF
}

# --- 4. Export, run both, tabulate ------------------------------------------------------------
results=$WORK/results.tsv
: > "$results"
IFS=';' read -r -a runs <<< "$SCENARIOS"
for run in "${runs[@]}"; do
  IFS='|' read -r label scen flags <<< "$run"
  # shellcheck disable=SC2206
  extra=($flags)
  dir=$WORK/$(basename "$scen" .yaml)
  rm -rf "$dir" && mkdir -p "$dir/et"
  echo "== $label: export, traintwin simulate, ASTRA-sim ..." >&2
  (cd "$ROOT" && write_configs "$dir" "$scen" "${extra[@]}")
  # ASTRA-sim reads an all-gather's comm_size as each rank's input (its Ring.cc).
  (cd "$ROOT" && "$TRAINTWIN" export --format chakra --all-gather-comm-size input "$scen" "${extra[@]}" \
     --out "$dir/et") > "$dir/export.log"
  name=$(basename "$(ls "$dir"/et/*.comm_groups.json)" .comm_groups.json)
  if grep -q '^  "0":' "$dir/et/$name.comm_groups.json"; then
    die "$dir/et/$name.comm_groups.json names process group 0: this traintwin predates the export fix (pg ids from 1)"
  fi
  # traintwin replaying the same ETs (what ASTRA-sim reads), on the scenario's topology.
  topo_file=$(cd "$ROOT" && python3 - "$scen" <<'EOF'
import os, re, sys
for line in open(sys.argv[1]):
    m = re.match(r'\s*topology:\s*(\S+)', line)
    if m: print(os.path.normpath(os.path.join(os.path.dirname(sys.argv[1]), m.group(1)))); break
EOF
)
  # (--json is not offered with --trace: its text is parsed.)
  (cd "$ROOT" && "$TRAINTWIN" simulate --quiet --trace chakra "$dir/et/$name" --topology "$topo_file") \
    > "$dir/traintwin_et.txt" 2>&1 || echo "  traintwin --trace chakra failed: $dir/traintwin_et.txt" >&2
  (cd "$dir" && /usr/bin/env time -f '%e %M' -o "$dir/astra.time" "$bin" \
     --workload-configuration="$dir/et/$name" \
     --comm-group-configuration="$dir/et/$name.comm_groups.json" \
     --system-configuration="$dir/system.json" \
     --remote-memory-configuration="$dir/remote_memory.json" \
     --network-configuration="$dir/network.yml" --logging-folder="$dir/astra_log") \
     > "$dir/astra.log" 2>&1 || echo "  ASTRA-sim failed (rc $?): $dir/astra.log" >&2
  python3 - "$label" "$dir" >> "$results" <<'EOF'
import json, re, sys
label, d = sys.argv[1], sys.argv[2]
tt = json.load(open(d + '/traintwin.json'))
m = re.search(r'^iteration time\s+([0-9.]+) s', open(d + '/traintwin_et.txt').read(), re.M)
et_iter = float(m.group(1)) if m else float('nan')
fin = [(int(r), int(c), int(x)) for r, c, x in re.findall(
    r'sys\[(\d+)\] finished, (\d+) cycles, exposed communication (\d+) cycles', open(d + '/astra.log').read())]
try: wall, rss = open(d + '/astra.time').read().split()[:2]
except Exception: wall, rss = 'nan', 'nan'
astra = max((c for _, c, _ in fin), default=float('nan')) / 1e9
worst = max(fin, key=lambda f: f[1]) if fin else (-1, 0, 0)
ranks = tt.get('num_gpus', 0)
# Compute and the rest (exposed communication, bubble, waits) of the rank that ends last: for
# traintwin its critical rank (compute includes the optimizer), for ASTRA-sim the latest sys
# (GPU time = the compute nodes' replayed durations; "exposed communication" = end - GPU time).
crit = tt.get('critical_rank', {})
comp = crit.get('compute_s', float('nan'))
print('\t'.join(str(v) for v in [
    label, ranks, len(fin), tt['iteration_time_s'], et_iter, astra,
    comp, tt['iteration_time_s'] - comp,
    (worst[1] - worst[2]) / 1e9, worst[2] / 1e9, worst[0], wall, rss]))
EOF
done

python3 - "$results" <<'EOF'
import math, sys
rows = [l.rstrip('\n').split('\t') for l in open(sys.argv[1]) if l.strip()]
f = lambda v: float(v)
print('%-34s %5s %10s %10s %10s %8s   %s' % ('scenario', 'ranks', 'traintwin', 'tt ET', 'ASTRA-sim',
                                             'diff', 'compute + rest: ASTRA-sim (its latest rank); traintwin (critical rank)'))
for r in rows:
    label, ranks, done, tt, et, astra, comp, exp, acomp, aexp, arank, wall, rss = r
    diff = (f(astra) - f(tt)) / f(tt) * 100 if not math.isnan(f(astra)) else float('nan')
    note = '' if int(done) == int(ranks) else '  (only %s of %s ranks finished)' % (done, ranks)
    print('%-34s %5s %9.4fs %9.4fs %9.4fs %+7.1f%%   %.4f + %.4f s (rank %s); %.4f + %.4f s   [ASTRA-sim %s s wall, %d MB]%s' % (
        label, ranks, f(tt), f(et), f(astra), diff, f(acomp), f(aexp), arank, f(comp), f(exp),
        wall, int(f(rss) / 1024) if rss != 'nan' else -1, note))
EOF
echo "(work folder: $WORK; ASTRA-sim ${commit:0:12}, binary $bin)"
