// Collectives as NCCL runs them: algorithm choice, closed forms (alpha-beta) and the flows an
// algorithm puts on the network.
//
// Conventions (nccl-tests, doc/PERFORMANCE.md): `bytes` is the nccl-tests "size" (all_reduce:
// the buffer; all_gather: the output; reduce_scatter: the input); algbw = bytes / time;
// busbw = algbw x factor with factor all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n,
// broadcast 1, all_to_all (n-1)/n, send/recv 1.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/program.hpp"
#include "sim/measured_collectives.hpp"
#include "sim/nccl_tuning.hpp"
#include "topologies/topology.hpp"

namespace traintwin {

/// nccl-tests' bus-bandwidth factor of `kind` over `n` ranks (n >= 1, else InvalidArgument).
/// A ring exchange (each rank sends its buffer to its successor) moves 1 x bytes per ring edge
/// in one step, like nccl-tests' sendrecv (factor 1); with several members per node the plan
/// spreads the inter-node edge over the node's NICs as for the other ring collectives (exact
/// when the group has one member per node, as CP groups across nodes do).
double busbw_factor(CollectiveKind kind, int64_t n);

/// NCCL algorithms modelled.
enum class CollectiveAlgorithm {
  kRing,  ///< ring: n-1 (x2 for all-reduce) steps of bytes/n over each ring edge
  kTree,  ///< NCCL's double binary tree (all-reduce only): pipelined reduce + broadcast
  kNvls,  ///< NVLink SHARP: the NVSwitch reduces/multicasts (all-reduce inside one node)
  kP2p,   ///< all-to-all: one send/recv per pair of members, all in one NCCL group
};
/// "ring" | "tree" | "nvls" | "p2p".
const char* to_string(CollectiveAlgorithm a);

/// Bandwidth efficiencies of the fabric model, calibrated on the nccl-tests figures of
/// ../shared/validation/calibration.yaml (busbw measured / busbw of the raw links):
///  - ring over NVLink: DGX H100 365-370 GB/s of 450 (0.82), DGX A100 230 of 300 (0.77);
///  - NVLS all-reduce on DGX H100: 480 GB/s busbw at 8 GiB = time 1.75 S / 480e9, i.e. 0.61 x
///    the 787 GB/s an ideal in-switch reduction over 450 GB/s links would give;
///  - InfiniBand: 46-48 GB/s busbw per 400 Gb/s (50 GB/s) NIC (0.94).
struct FabricEfficiency {
  double nvlink_ring = 0.80;
  double nvls = 0.61;
  double ib = 0.94;
  /// Bandwidth of NCCL's double binary tree relative to its ideal 2 S / B when the group spans
  /// more than one scalable unit, used by the closed form (the tuner's choice and the
  /// uncontended time): the trees' edges that leave a scalable unit share its leaves' uplinks,
  /// which the flows of the tree's plan meet in the replay. The value is that flow model's own
  /// result, `traintwin collective --topology topologies/dgx-h100-superpod.yaml --op all_reduce
  /// --algorithm tree` on DGX H100 (32 nodes per scalable unit): 128 MiB over 128 and 512 nodes
  /// (--group dp) 8.62 and 8.63 ms against 5.71 ms ideal (0.66), the same for 1 GiB over all
  /// 1,024 GPUs (8.62 ms); within one unit (8 and 32 nodes) 5.73 and 5.75 ms, the ideal (1.0),
  /// so the closed form agrees with the flows it stands for and the tuner picks what a forced
  /// run shows faster.
  double tree = 0.66;
  /// Per-step software latency of a send/recv step (all-to-all, a ring exchange), added to the
  /// link latency; NCCL's collectives take their tuner's latencies instead (nccl_tuning.hpp).
  double step_overhead_s = 2e-6;
  /// Measured collective rows of the topology's device (`traintwin profile --collectives`, in
  /// its cost database; sim/measured_collectives.hpp): a collective inside one node whose op and
  /// group size they cover takes their time instead of the closed form. Null: closed forms only.
  std::shared_ptr<const MeasuredCollectives> measured;
};

/// Where the members of a group sit.
struct GroupSpan {
  int64_t ranks = 1;           ///< n
  int64_t nodes = 1;           ///< distinct nodes among the members
  int64_t ranks_per_node = 1;  ///< max members on one node
};

/// The span of `members` (global ranks = GPU indices) on nodes of `gpus_per_node` GPUs.
GroupSpan group_span(const std::vector<int64_t>& members, int64_t gpus_per_node);

/// The algorithm and protocol of one collective.
struct CollectiveChoice {
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::kRing;
  CollectiveProtocol protocol = CollectiveProtocol::kSimple;
};

/// NCCL's tuner (src/graph/tuning.cc, ncclTopoGetAlgoTime): the (algorithm, protocol) pair of
/// least collective_time_s among those NCCL runs for `kind` over `span`: ring with LL, LL128 and
/// Simple for every collective; for all-reduce also NVLS (Simple) inside one node whose
/// topology has it, and the tree with the three protocols across nodes. All-to-all is always
/// p2p (NCCL runs it as grouped ncclSend/ncclRecv, which NCCL_ALGO and NCCL_PROTO do not affect,
/// so a forced "ring" leaves it p2p), as is a ring exchange's send/recv (reported as ring,
/// Simple). `forced` ("ring" | "tree" | "nvls", NCCL_ALGO) and `forced_protocol` ("LL" | "LL128"
/// | "Simple", NCCL_PROTO) restrict the choice when not empty; an override the group cannot
/// run (tree for all_gather, NVLS across nodes or without NVLS hardware, NVLS with LL, LL or
/// LL128 for the send/recv of an all-to-all or a ring exchange) throws ConfigError naming the
/// override and why. A topology whose collectives MPI runs
/// (node.collectives: mpi) takes rings with Simple only (other overrides: ConfigError).
CollectiveChoice choose_collective(CollectiveKind kind, int64_t bytes, const GroupSpan& span,
                                   const TopologySpec& topo, const FabricEfficiency& eff,
                                   const std::string& forced = "",
                                   const std::string& forced_protocol = "");

/// choose_collective()'s algorithm.
CollectiveAlgorithm choose_algorithm(CollectiveKind kind, int64_t bytes, const GroupSpan& span,
                                     const TopologySpec& topo, const FabricEfficiency& eff,
                                     const std::string& forced = "");

/// Closed-form time of one collective in seconds (no contention) with `protocol` (Simple by
/// default): ring latency + factor x bytes / (B x share) with factor the busbw factor, the
/// latency NCCL's tuner's (nccl_latency_s with the fabric's NIC and switch latencies between
/// nodes: of the 2(n-1) steps of all-reduce (n-1 otherwise), the 2(nodes-1) (nodes-1) that cross
/// the network pay its network step, the rest its NVLink step) and share the protocol's
/// (nccl_protocol_bandwidth_share). A ring exchange (one send/recv step), and every ring of a
/// topology whose collectives MPI runs (node.collectives: mpi, e.g. the host topology `traintwin
/// profile --topology-out` writes), take instead the link latency plus
/// FabricEfficiency::step_overhead_s per step, Simple. B inside a node NVLink x nvlink_ring; across nodes with k members per
/// node min(k NICs x ib, NVLink x nvlink_ring x k/(k-1)) (NCCL: one channel per member, each on
/// its own NIC; (k-1)/k of a member's ring traffic stays on NVLink); tree all-reduce
/// the tree's NCCL latency + 2 bytes / (B x tree efficiency across scalable units x share)
/// (NCCL's double binary tree: each tree carries half the data up and down, so a node moves 2
/// bytes per direction; FabricEfficiency::tree); NVLS all-reduce (Simple only)
/// 25 us + bytes / (NVLink x nvls); all-to-all (p2p, Simple) alpha + max(NVLink part, NIC part), every
/// member sending bytes / n to each other member: with k members per node on m nodes the NIC
/// part is (n - k)/n x bytes / (NIC x ib) (NCCL's PXN: a message for another node first crosses
/// NVLink to the local GPU on the destination's rail, so each GPU's NIC carries its rail's
/// share, (n - k)/n x bytes, a rail per member), the NVLink part ((k - 1) + (n - k)(k - 1)/k)/n
/// x bytes / (NVLink x nvlink_ring) (direct sends to the k - 1 local peers plus the PXN hops);
/// alpha the inter-node one across nodes, else the NVLink one: all sends are posted in one
/// group and progress together (one step). `topo`'s node and nic are the group's rates: on a
/// mixed cluster pass group_topology(topo, members) (as plan_collective does); choose_collective
/// likewise.
double collective_time_s(CollectiveKind kind, CollectiveAlgorithm algo, int64_t bytes,
                         const GroupSpan& span, const TopologySpec& topo,
                         const FabricEfficiency& eff,
                         CollectiveProtocol protocol = CollectiveProtocol::kSimple);

/// One point-to-point flow of a collective: `bytes` from global rank `src` to global rank `dst`.
struct CollectiveFlow {
  int64_t src = 0, dst = 0;
  double bytes = 0;
};

/// How one collective is simulated: network flows that run concurrently, a closed-form time for
/// the part inside each node (NVLink, not simulated as flows) and the latency the flows do not
/// carry. The collective ends at start + max(flows done, local_time_s) + latency_s.
struct CollectivePlan {
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::kRing;
  CollectiveProtocol protocol = CollectiveProtocol::kSimple;
  std::vector<CollectiveFlow> flows;
  double local_time_s = 0;
  double latency_s = 0;
};

/// The topology a collective over `members` (global ranks, GPU i on node i / gpus_per_node) is
/// chosen, timed and planned on: `topo` whose node and nic hold the slowest of the members'
/// nodes (node_spec_of, nic_spec_of: a mixed cluster's node groups): the least NVLink bandwidth
/// and NIC line rate, the largest NVLink and NIC latencies, NVLS only if every node has it; no
/// node groups. One rule for a group across nodes of several kinds: NCCL's ring moves each step
/// to the next member and its tree each chunk to the next level in lockstep, so every channel
/// runs at the pace of its slowest link (NCCL's topology search, src/graph/search.cc
/// ncclTopoCompute, settles on the highest per-channel bandwidth that every GPU's path of the
/// ring or tree can carry), and NVLS needs the GPUs' multicast support (src/transport/nvls.cc,
/// ncclNvlsInit: CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED; Hopper and later, no A100).
/// `topo` itself (a copy) when it has no per-node rates (has_per_node_rates).
TopologySpec group_topology(const TopologySpec& topo, const std::vector<int64_t>& members);

/// Plans a collective over `members` (global ranks, GPU i on node i / gpus_per_node).
/// Inside one node: no flows, local_time_s = the measured rows' time when eff.measured covers
/// the op and group size (MeasuredCollectives::time_s), else the closed form. Across nodes, NCCL-style with one
/// channel per local member (rail): ring = for each edge A -> B of the ring of nodes and each
/// local index j, a flow A_j -> B_j of factor x bytes / (k x ib efficiency) (factor 2(n-1)/n for
/// all-reduce, (n-1)/n otherwise; k members per node); tree = for each edge of NCCL's two binary
/// trees over nodes (heap order and its mirror), bytes/(2k) up and down per local index;
/// local_time_s = the NVLink part of the ring (0 with one member per node); latency = the
/// algorithm's latency of collective_time_s (SIMGRID-NOTES.md: one transfer per ring edge carrying the step
/// bytes, latency added analytically); LL and LL128 put 1 / share of those bytes on the links
/// (their flag bytes: nccl_protocol_bandwidth_share), flows and NVLink part alike. All-to-all (p2p) across nodes: for each ordered pair of nodes (A, B) and local
/// index j, one flow A_j -> B_j of k x bytes / n / ib efficiency — the k messages of node A for
/// B_j, gathered on A_j by PXN and sent over rail j; local_time_s the NVLink part of
/// collective_time_s; latency one alpha. `forced` and `forced_protocol` as in choose_collective().
/// On a mixed cluster (has_per_node_rates) the choice, closed forms and latencies take
/// group_topology(topo, members), and eff.measured (the rows of the topology's own device) times
/// only a group whose nodes all hold the topology's own GPU and rates.
CollectivePlan plan_collective(CollectiveKind kind, int64_t bytes, const std::vector<int64_t>& members,
                               const TopologySpec& topo, const FabricEfficiency& eff,
                               const std::string& forced = "",
                               const std::string& forced_protocol = "");

/// plan_collective for a group whose member i runs on platform GPU placed[i] (a job placed on
/// some nodes of a shared fabric, sim/multi_job.hpp): the rates, NVLS and measured rows those
/// GPUs' nodes give, the flows between `members` as plan_collective plans them (placed ==
/// members: plan_collective). InvalidArgument when the sizes differ.
CollectivePlan plan_placed_collective(CollectiveKind kind, int64_t bytes,
                                      const std::vector<int64_t>& members,
                                      const std::vector<int64_t>& placed,
                                      const TopologySpec& topo, const FabricEfficiency& eff,
                                      const std::string& forced = "",
                                      const std::string& forced_protocol = "");

/// Duration of one transfer of `bytes` from GPU `src` to GPU `dst` alone on its route (no other
/// traffic): route latency + bytes / bottleneck bandwidth. Inside a node: NVLink latency and
/// bandwidth. Across nodes: two NIC latencies plus one leaf hop inside a scalable unit or
/// leaf-spine-leaf (three hops) across units (a three-tier core crossing, ~0.3 us more, is not
/// distinguished), at min(NIC line rate, fabric link rate). Each node takes its own rates
/// (node_spec_of, nic_spec_of: the sender's and the receiver's NIC on a mixed cluster), as the
/// platform's links do. Both engines time uncontended
/// communication with it (the estimator always, the replay without link contention).
/// InvalidArgument for src == dst.
double uncontended_transfer_s(int64_t src, int64_t dst, double bytes, const TopologySpec& topo);

/// Duration of a planned collective with no other traffic on its links: max(max over its flows
/// of uncontended_transfer_s, plan.local_time_s) + plan.latency_s (the contention-free case of
/// CollectivePlan's rule). An all-to-all (p2p) has several flows per GPU, which share its NIC:
/// instead of one flow's time, per GPU and direction the longest route latency + the bytes of
/// all its flows / the route bandwidth.
double uncontended_time_s(const CollectivePlan& plan, const TopologySpec& topo);

}  // namespace traintwin
