// NCCL's protocols and its tuner's latency and bandwidth model (src/graph/tuning.cc): for each
// (algorithm, protocol) a latency (a base plus one hardware latency per step) and a bus
// bandwidth scaled by what the protocol leaves of the links; NCCL runs the pair whose
// latency + bytes / bandwidth is least. sim/collectives.cpp times and plans every NCCL
// collective with it (the protocol's bandwidth share scales the bytes its flows carry).
#pragma once

#include <cstdint>
#include <string>

#include "core/program.hpp"

namespace traintwin {

enum class CollectiveAlgorithm;
struct GroupSpan;

/// NCCL's protocols (src/include/device.h; tuning.cc): LL sends 8-byte lines of 4 data bytes and
/// a 4-byte flag (half the bandwidth, the lowest latency); LL128 128-byte lines of which 8 bytes
/// are flags (120/128 of it); Simple whole chunks behind a memory fence (all of it, the highest
/// latency per step).
enum class CollectiveProtocol { kLL, kLL128, kSimple };
/// "LL" | "LL128" | "Simple" (NCCL_PROTO's names).
const char* to_string(CollectiveProtocol p);
/// Parses NCCL_PROTO's names "LL" | "LL128" | "Simple"; ConfigError naming the allowed values.
CollectiveProtocol parse_protocol(const std::string& text);

/// The latency NCCL's tuner charges `kind` over `span` with `algo` and `proto`, in seconds
/// (ncclTunerConstantsDefaults of NCCL 2.2x, tuning.cc; us in the source):
///  - base: ring {LL 6.6, LL128 14.0, Simple 8.4}, tree {6.8, 14.0, 8.4}, NVLS 0 us;
///  - per step inside a node (NVLink): ring {0.6, 1.9, 3.4}, tree {0.6, 1.25, 4.0}, NVLS Simple 25;
///    across nodes the NVLink steps of a ring take at least the network overhead (1 us, 3 us for
///    Simple: Intel hosts);
///  - per network step: ring {2.7, 4.0, 14.0}, tree {5.0, 8.5, 14} (with one member per node the
///    ring's steps take the tree's), plus `route_inter_s`, the fabric's own latency between two
///    nodes (NCCL adds the net plugin's latency here, twice for Simple; InfiniBand's plugin
///    reports 0, the topology's NIC and switch latencies stand for it, once).
/// Ring: base + (steps - net steps) x NVLink step + net steps x network step, steps 2(n-1) for
/// all-reduce and n-1 otherwise, net steps 2(nodes-1) and nodes-1. Tree (all-reduce):
/// base + 2 ((k-1) NVLink step + floor(log2 nodes) network step), k members per node. NVLS
/// (all-reduce in one node, Simple only): 25 us. Throws InvalidArgument for a pair NCCL does not
/// run (NVLS with LL or LL128, P2P: all-to-all is grouped send/recv, outside the tuner).
double nccl_latency_s(CollectiveKind kind, CollectiveAlgorithm algo, CollectiveProtocol proto,
                      const GroupSpan& span, double route_inter_s);

/// The share of the Simple bus bandwidth `proto` reaches with `algo` (tuning.cc's model
/// refinements): ring LL 0.5, LL128 0.92 (120/128 less NCCL's margin); tree LL 1/3.8, LL128 7/9
/// inside one node and 120/128 across nodes; Simple 1 (NVLS runs Simple only). NCCL also caps
/// LL and LL128 at per-architecture rates per channel (llMaxBws, perChMax*LL128Bws), which bind
/// only at sizes where latency decides and are left out. InvalidArgument as nccl_latency_s.
double nccl_protocol_bandwidth_share(CollectiveAlgorithm algo, CollectiveProtocol proto,
                                     const GroupSpan& span);

}  // namespace traintwin
