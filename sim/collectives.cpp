#include "sim/collectives.hpp"

#include <optional>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "core/error.hpp"

namespace traintwin {
namespace {

/// Steps of latency of a ring: 2(n-1) for all-reduce, 1 for a ring exchange (one send/recv
/// step), n-1 for the others.
int64_t ring_steps(CollectiveKind kind, int64_t n) {
  if (kind == CollectiveKind::kRingExchange) return n > 1 ? 1 : 0;
  return kind == CollectiveKind::kAllReduce ? 2 * (n - 1) : (n - 1);
}

/// Ring data factor: each rank sends factor x bytes over its ring edge.
double ring_factor(CollectiveKind kind, int64_t n) {
  if (kind == CollectiveKind::kBroadcast || kind == CollectiveKind::kRingExchange) {
    return n > 1 ? 1.0 : 0.0;
  }
  return busbw_factor(kind, n);
}

/// Latency of a ring collective over `span` (NCCL src/graph/tuning.cc: of the ring's steps,
/// only those that cross a node boundary pay the network latency, 2 (nodes - 1) of all-reduce's
/// 2 (n - 1), nodes - 1 of the others' n - 1; the rest are NVLink steps).
double ring_latency_s(CollectiveKind kind, const GroupSpan& span, double alpha_intra,
                      double alpha_inter) {
  const int64_t steps = ring_steps(kind, span.ranks);
  if (span.nodes <= 1) return static_cast<double>(steps) * alpha_intra;
  const int64_t inter =
      std::min(steps, kind == CollectiveKind::kAllReduce ? 2 * (span.nodes - 1) : span.nodes - 1);
  return static_cast<double>(inter) * alpha_inter +
         static_cast<double>(steps - inter) * alpha_intra;
}

double alpha_intra_s(const TopologySpec& t, const FabricEfficiency& e) {
  return t.node.nvlink_latency_s + e.step_overhead_s;
}

/// NIC -> leaf -> spine -> leaf -> NIC: two NICs and three switches.
double route_inter_s(const TopologySpec& t) {
  return 2 * t.nic.latency_s + 3 * t.fabric.hop_latency_s;
}

/// Whether a collective runs as steps of link latency + step overhead, one protocol, outside
/// NCCL's tuner: send/recv (an all-to-all, a ring exchange) and every collective of a host's MPI.
bool alpha_steps(CollectiveKind kind, CollectiveAlgorithm algo, const TopologySpec& t) {
  return algo == CollectiveAlgorithm::kP2p || kind == CollectiveKind::kRingExchange ||
         !t.node.nccl;
}

/// A send/recv step between nodes: the route plus the step overhead.
double alpha_inter_s(const TopologySpec& t, const FabricEfficiency& e) {
  return route_inter_s(t) + e.step_overhead_s;
}

/// Bus bandwidth across nodes of a group with k members per node: NCCL runs one channel per
/// member, each on that GPU's NIC (one per rail; GPUs share a NIC when a node has fewer NICs than
/// GPUs), so k NICs carry the node's ring traffic together.
double inter_node_Bps(const TopologySpec& t, const FabricEfficiency& e, int64_t k) {
  const double nic_per_gpu = static_cast<double>(t.nic.nics_per_node) /
                             static_cast<double>(t.node.gpus_per_node);
  return static_cast<double>(k) * std::min(1.0, nic_per_gpu) * t.nic.line_rate_Bps * e.ib;
}

/// Bus bandwidth of the NVLink part of a ring with k members per node on several nodes: each
/// member sends (k-1)/k of its ring traffic over NVLink.
double intra_share_Bps(const TopologySpec& t, const FabricEfficiency& e, int64_t k) {
  if (k <= 1) return 1e300;
  return t.node.nvlink_bandwidth_Bps * e.nvlink_ring * static_cast<double>(k) /
         static_cast<double>(k - 1);
}

/// The distinct nodes of `members` (node = rank / gpus_per_node), ascending.
std::vector<int64_t> nodes_of(const std::vector<int64_t>& members, int64_t gpus_per_node) {
  std::vector<int64_t> nodes;
  nodes.reserve(members.size());
  for (int64_t r : members) nodes.push_back(r / gpus_per_node);
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  return nodes;
}

/// All-to-all: the fraction of its buffer each member sends to other nodes, (n - k)/n.
double a2a_nic_fraction(const GroupSpan& s) {
  return static_cast<double>(s.ranks - s.ranks_per_node) / static_cast<double>(s.ranks);
}

/// All-to-all: the fraction of its buffer each member moves over NVLink: (k - 1)/n to its local
/// peers, and with PXN (k - 1)/k of its inter-node share to the local GPU on the destination's
/// rail.
double a2a_nvlink_fraction(const GroupSpan& s) {
  const double n = static_cast<double>(s.ranks), k = static_cast<double>(s.ranks_per_node);
  return ((k - 1) + (n - k) * (k - 1) / k) / n;
}

}  // namespace

double busbw_factor(CollectiveKind kind, int64_t n) {
  if (n < 1) throw InvalidArgument("busbw_factor: n must be >= 1");
  const double dn = static_cast<double>(n);
  switch (kind) {
    case CollectiveKind::kAllReduce: return 2.0 * (dn - 1) / dn;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll: return (dn - 1) / dn;
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kRingExchange: return 1.0;
  }
  return 1.0;
}

const char* to_string(CollectiveAlgorithm a) {
  switch (a) {
    case CollectiveAlgorithm::kRing: return "ring";
    case CollectiveAlgorithm::kTree: return "tree";
    case CollectiveAlgorithm::kNvls: return "nvls";
    case CollectiveAlgorithm::kP2p: return "p2p";
  }
  return "?";
}

GroupSpan group_span(const std::vector<int64_t>& members, int64_t gpus_per_node) {
  std::map<int64_t, int64_t> per_node;
  for (int64_t r : members) ++per_node[r / gpus_per_node];
  GroupSpan s;
  s.ranks = static_cast<int64_t>(members.size());
  s.nodes = static_cast<int64_t>(per_node.size());
  s.ranks_per_node = 0;
  for (const auto& [node, n] : per_node) s.ranks_per_node = std::max(s.ranks_per_node, n);
  return s;
}

double collective_time_s(CollectiveKind kind, CollectiveAlgorithm algo, int64_t bytes,
                         const GroupSpan& span, const TopologySpec& topo,
                         const FabricEfficiency& eff, CollectiveProtocol protocol) {
  const int64_t n = span.ranks;
  if (n <= 1 || bytes <= 0) return 0.0;
  const double S = static_cast<double>(bytes);
  const double nvlink_Bps = topo.node.nvlink_bandwidth_Bps;
  const bool by_steps = alpha_steps(kind, algo, topo);
  if (by_steps) protocol = CollectiveProtocol::kSimple;
  switch (algo) {
    case CollectiveAlgorithm::kNvls:
      return nccl_latency_s(kind, algo, protocol, span, route_inter_s(topo)) +
             S / (nvlink_Bps * eff.nvls);
    case CollectiveAlgorithm::kP2p: {
      const double alpha = span.nodes > 1 ? alpha_inter_s(topo, eff) : alpha_intra_s(topo, eff);
      const double nic = span.nodes > 1 ? a2a_nic_fraction(span) * S / inter_node_Bps(topo, eff, 1)
                                        : 0.0;
      return alpha + std::max(nic, a2a_nvlink_fraction(span) * S / (nvlink_Bps * eff.nvlink_ring));
    }
    case CollectiveAlgorithm::kTree: {
      const double B =
          span.nodes > 1 ? std::min(inter_node_Bps(topo, eff, span.ranks_per_node),
                                    intra_share_Bps(topo, eff, span.ranks_per_node))
                         : nvlink_Bps * eff.nvlink_ring;
      // Per node and direction a double binary tree moves 2 S: as an interior node of one tree
      // it receives S/2 from each of 2 children and sends S/2 up, then the mirror in the
      // broadcast; as a leaf of the other tree S/2 up and S/2 down.
      const bool across_units =
          span.nodes > std::max<int64_t>(1, topo.fabric.nodes_per_scalable_unit);
      return nccl_latency_s(kind, algo, protocol, span, route_inter_s(topo)) +
             2.0 * S /
                 (B * (across_units ? eff.tree : 1.0) *
                  nccl_protocol_bandwidth_share(algo, protocol, span));
    }
    case CollectiveAlgorithm::kRing: {
      double B = nvlink_Bps * eff.nvlink_ring;
      if (span.nodes > 1) {
        B = std::min(intra_share_Bps(topo, eff, span.ranks_per_node),
                     inter_node_Bps(topo, eff, span.ranks_per_node));
      }
      if (by_steps) {
        return ring_latency_s(kind, span, alpha_intra_s(topo, eff), alpha_inter_s(topo, eff)) +
               ring_factor(kind, n) * S / B;
      }
      return nccl_latency_s(kind, algo, protocol, span, route_inter_s(topo)) +
             ring_factor(kind, n) * S / (B * nccl_protocol_bandwidth_share(algo, protocol, span));
    }
  }
  return 0.0;
}

CollectiveChoice choose_collective(CollectiveKind kind, int64_t bytes, const GroupSpan& span,
                                   const TopologySpec& topo, const FabricEfficiency& eff,
                                   const std::string& forced, const std::string& forced_protocol) {
  std::optional<CollectiveProtocol> only_protocol;
  if (!forced_protocol.empty()) only_protocol = parse_protocol(forced_protocol);
  const bool send_recv = kind == CollectiveKind::kAllToAll || kind == CollectiveKind::kRingExchange;
  if (send_recv && only_protocol && *only_protocol != CollectiveProtocol::kSimple) {
    throw ConfigError("collective protocol '" + forced_protocol + "': " +
                      std::string(to_string(kind)) +
                      " runs as grouped send/recv, modelled with one protocol (allowed: Simple)");
  }
  if (kind == CollectiveKind::kAllToAll && (forced.empty() || forced == "ring")) {
    return {CollectiveAlgorithm::kP2p, CollectiveProtocol::kSimple};
  }
  if (kind == CollectiveKind::kRingExchange && (forced.empty() || forced == "ring")) {
    return {CollectiveAlgorithm::kRing, CollectiveProtocol::kSimple};
  }
  if (!topo.node.nccl) {
    if (!forced.empty() && forced != "ring") {
      throw ConfigError("collective algorithm '" + forced + "': " + topo.name +
                        " runs its collectives with MPI (node.collectives: mpi), as rings "
                        "(allowed: ring)");
    }
    if (only_protocol && *only_protocol != CollectiveProtocol::kSimple) {
      throw ConfigError("collective protocol '" + forced_protocol + "': " + topo.name +
                        " runs its collectives with MPI (node.collectives: mpi), which has no "
                        "NCCL protocols (allowed: Simple)");
    }
    return {CollectiveAlgorithm::kRing, CollectiveProtocol::kSimple};
  }
  std::vector<CollectiveAlgorithm> algorithms;
  if (!forced.empty()) {
    if (forced == "ring") {
      algorithms = {CollectiveAlgorithm::kRing};
    } else if (forced == "tree") {
      if (kind != CollectiveKind::kAllReduce) {
        throw ConfigError("collective algorithm 'tree': NCCL's tree runs all_reduce only, not " +
                          std::string(to_string(kind)) + " (allowed: ring)");
      }
      algorithms = {CollectiveAlgorithm::kTree};
    } else if (forced == "nvls") {
      if (kind != CollectiveKind::kAllReduce || span.nodes > 1 || !topo.node.nvls) {
        throw ConfigError("collective algorithm 'nvls' needs an all_reduce inside one node with "
                          "NVLS (node.nvls: true in " + topo.name + ")");
      }
      algorithms = {CollectiveAlgorithm::kNvls};
    } else {
      throw ConfigError("collective algorithm '" + forced + "' unknown (allowed: ring, tree, nvls)");
    }
  } else {
    algorithms = {CollectiveAlgorithm::kRing};
    if (kind == CollectiveKind::kAllReduce && span.nodes == 1 && topo.node.nvls) {
      algorithms.push_back(CollectiveAlgorithm::kNvls);
    }
    if (kind == CollectiveKind::kAllReduce && span.nodes > 1) {
      algorithms.push_back(CollectiveAlgorithm::kTree);
    }
  }
  std::optional<CollectiveChoice> best;
  double best_s = 0;
  for (CollectiveAlgorithm a : algorithms) {
    for (CollectiveProtocol p : {CollectiveProtocol::kLL, CollectiveProtocol::kLL128,
                                 CollectiveProtocol::kSimple}) {
      if (only_protocol && p != *only_protocol) continue;
      if (a == CollectiveAlgorithm::kNvls && p != CollectiveProtocol::kSimple) continue;
      const double t = collective_time_s(kind, a, bytes, span, topo, eff, p);
      if (!best || t < best_s) {
        best = CollectiveChoice{a, p};
        best_s = t;
      }
    }
  }
  if (!best) {
    throw ConfigError("collective protocol '" + forced_protocol + "': NCCL runs algorithm '" +
                      forced + "' with Simple only (allowed: Simple)");
  }
  return *best;
}

CollectiveAlgorithm choose_algorithm(CollectiveKind kind, int64_t bytes, const GroupSpan& span,
                                     const TopologySpec& topo, const FabricEfficiency& eff,
                                     const std::string& forced) {
  return choose_collective(kind, bytes, span, topo, eff, forced).algorithm;
}

TopologySpec group_topology(const TopologySpec& topo, const std::vector<int64_t>& members) {
  TopologySpec t = topo;
  if (!has_per_node_rates(topo)) return t;
  t.node_groups.clear();
  const int64_t gpn = topo.node.gpus_per_node;
  bool first = true;
  for (int64_t node : nodes_of(members, gpn)) {
    const NodeSpec& n = node_spec_of(topo, node);
    const NicSpec& c = nic_spec_of(topo, node);
    if (first) {
      t.node = n;
      t.nic = c;
      first = false;
      continue;
    }
    t.node.nvlink_bandwidth_Bps = std::min(t.node.nvlink_bandwidth_Bps, n.nvlink_bandwidth_Bps);
    t.node.nvlink_latency_s = std::max(t.node.nvlink_latency_s, n.nvlink_latency_s);
    t.node.nvls = t.node.nvls && n.nvls;
    t.nic.line_rate_Bps = std::min(t.nic.line_rate_Bps, c.line_rate_Bps);
    t.nic.latency_s = std::max(t.nic.latency_s, c.latency_s);
  }
  return t;
}

namespace {

/// plan_collective on a topology whose every node of the group has the same rates.
CollectivePlan plan_on_uniform_nodes(CollectiveKind kind, int64_t bytes,
                                     const std::vector<int64_t>& members,
                                     const TopologySpec& topo, const FabricEfficiency& eff,
                                     const std::string& forced,
                                     const std::string& forced_protocol) {
  const int64_t gpn = topo.node.gpus_per_node;
  const GroupSpan span = group_span(members, gpn);
  CollectivePlan plan;
  const CollectiveChoice choice =
      choose_collective(kind, bytes, span, topo, eff, forced, forced_protocol);
  plan.algorithm = choice.algorithm;
  plan.protocol = choice.protocol;
  if (span.ranks <= 1 || bytes <= 0) return plan;
  if (span.nodes == 1) {
    const std::optional<double> measured =
        eff.measured ? eff.measured->time_s(kind, span.ranks, bytes) : std::nullopt;
    plan.local_time_s = measured ? *measured
                                 : collective_time_s(kind, plan.algorithm, bytes, span, topo, eff,
                                                     plan.protocol);
    return plan;
  }
  // LL and LL128 move their flag bytes too: 1 / share of the data over every link.
  const bool by_steps = alpha_steps(kind, plan.algorithm, topo);
  const double wire =
      by_steps ? 1.0 : 1.0 / nccl_protocol_bandwidth_share(plan.algorithm, plan.protocol, span);
  // Members grouped by node, in rank order; k = members per node (uniform in Megatron layouts).
  std::map<int64_t, std::vector<int64_t>> by_node;
  for (int64_t r : members) by_node[r / gpn].push_back(r);
  std::vector<std::vector<int64_t>> nodes;
  for (auto& [node, ranks] : by_node) nodes.push_back(ranks);
  const int64_t m = static_cast<int64_t>(nodes.size());
  const int64_t k = span.ranks_per_node;
  const double S = static_cast<double>(bytes);
  const double alpha = alpha_inter_s(topo, eff);
  auto add = [&](int64_t a, int64_t b, double per_channel_bytes) {
    for (int64_t j = 0; j < k; ++j) {
      const auto& na = nodes[static_cast<size_t>(a)];
      const auto& nb = nodes[static_cast<size_t>(b)];
      plan.flows.push_back({na[static_cast<size_t>(j) % na.size()],
                            nb[static_cast<size_t>(j) % nb.size()], per_channel_bytes});
    }
  };
  if (plan.algorithm == CollectiveAlgorithm::kP2p) {
    // PXN: node A's messages for B_j (one from each member of A, bytes / n each) leave over
    // rail j, from A_j.
    const double per_message = S / static_cast<double>(span.ranks) / eff.ib;
    for (int64_t a = 0; a < m; ++a) {
      for (int64_t b = 0; b < m; ++b) {
        if (a == b) continue;
        const auto& na = nodes[static_cast<size_t>(a)];
        const auto& nb = nodes[static_cast<size_t>(b)];
        for (size_t j = 0; j < nb.size(); ++j) {
          plan.flows.push_back(
              {na[j % na.size()], nb[j], per_message * static_cast<double>(na.size())});
        }
      }
    }
    plan.latency_s = alpha;
    plan.local_time_s =
        a2a_nvlink_fraction(span) * S / (topo.node.nvlink_bandwidth_Bps * eff.nvlink_ring);
    return plan;
  }
  if (plan.algorithm == CollectiveAlgorithm::kTree) {
    // Two binary trees over the nodes (heap order and its mirror), each carrying half the data
    // up (reduce) and down (broadcast); each node edge split over the k channels.
    const double per = wire * S / 2.0 / static_cast<double>(k) / eff.ib;
    for (int tree = 0; tree < 2; ++tree) {
      for (int64_t i = 1; i < m; ++i) {
        const int64_t child = tree == 0 ? i : m - 1 - i;
        const int64_t parent = tree == 0 ? (i - 1) / 2 : m - 1 - (i - 1) / 2;
        add(child, parent, per);
        add(parent, child, per);
      }
    }
    plan.latency_s = nccl_latency_s(kind, plan.algorithm, plan.protocol, span, route_inter_s(topo));
    if (k > 1) plan.local_time_s = wire * S / intra_share_Bps(topo, eff, k);
    return plan;
  }
  // Ring: every member sends factor x S over its channel; the node ring's edges carry it.
  const double factor = ring_factor(kind, span.ranks);
  const double per = wire * factor * S / static_cast<double>(k) / eff.ib;
  for (int64_t a = 0; a < m; ++a) add(a, (a + 1) % m, per);
  plan.latency_s = by_steps
                       ? ring_latency_s(kind, span, alpha_intra_s(topo, eff), alpha)
                       : nccl_latency_s(kind, plan.algorithm, plan.protocol, span, route_inter_s(topo));
  if (k > 1) plan.local_time_s = wire * factor * S / intra_share_Bps(topo, eff, k);
  return plan;
}

/// Whether every member's node holds the topology's own GPU and rates (its file's node, nic and
/// gpu, not a node group's of another kind).
bool on_own_nodes(const TopologySpec& topo, const std::vector<int64_t>& members) {
  const int64_t gpn = topo.node.gpus_per_node;
  for (int64_t node : nodes_of(members, gpn)) {
    if (&node_spec_of(topo, node) != &topo.node || &nic_spec_of(topo, node) != &topo.nic ||
        gpu_of_node(topo, node).name != topo.gpu.name) {
      return false;
    }
  }
  return true;
}

}  // namespace

CollectivePlan plan_collective(CollectiveKind kind, int64_t bytes, const std::vector<int64_t>& members,
                               const TopologySpec& topo, const FabricEfficiency& eff,
                               const std::string& forced, const std::string& forced_protocol) {
  return plan_placed_collective(kind, bytes, members, members, topo, eff, forced,
                                forced_protocol);
}

CollectivePlan plan_placed_collective(CollectiveKind kind, int64_t bytes,
                                      const std::vector<int64_t>& members,
                                      const std::vector<int64_t>& placed,
                                      const TopologySpec& topo, const FabricEfficiency& eff,
                                      const std::string& forced,
                                      const std::string& forced_protocol) {
  if (topo.node_groups.empty()) {
    return plan_on_uniform_nodes(kind, bytes, members, topo, eff, forced, forced_protocol);
  }
  if (placed.size() != members.size()) {
    throw InvalidArgument("plan_placed_collective: " + std::to_string(members.size()) +
                          " members placed on " + std::to_string(placed.size()) + " GPUs");
  }
  // A mixed cluster: the group's slowest rates; measured rows only on the file's own nodes.
  FabricEfficiency own = eff;
  if (own.measured && !on_own_nodes(topo, placed)) own.measured = nullptr;
  if (!has_per_node_rates(topo)) {
    return plan_on_uniform_nodes(kind, bytes, members, topo, own, forced, forced_protocol);
  }
  return plan_on_uniform_nodes(kind, bytes, members, group_topology(topo, placed), own, forced,
                               forced_protocol);
}

namespace {

/// Route latency of a transfer between two GPUs (see the header: NVLink inside a node; two NICs
/// and one leaf inside a scalable unit, plus two spine hops across units).
/// Each node's own rates (node_spec_of, nic_spec_of: a mixed cluster's node groups).
double route_latency_s(int64_t src, int64_t dst, const TopologySpec& t) {
  const int64_t gpn = t.node.gpus_per_node;
  const int64_t ns = src / gpn, nd = dst / gpn;
  if (ns == nd) return node_spec_of(t, ns).nvlink_latency_s;
  const int64_t su = std::max<int64_t>(1, t.fabric.nodes_per_scalable_unit);
  const double hops = ns / su == nd / su ? 1.0 : 3.0;
  return nic_spec_of(t, ns).latency_s + nic_spec_of(t, nd).latency_s +
         hops * t.fabric.hop_latency_s;
}

/// Bottleneck bandwidth of a transfer between two GPUs: the slower of the two nodes' NICs.
double route_Bps(int64_t src, int64_t dst, const TopologySpec& t) {
  const int64_t gpn = t.node.gpus_per_node;
  const int64_t ns = src / gpn, nd = dst / gpn;
  if (ns == nd) return node_spec_of(t, ns).nvlink_bandwidth_Bps;
  return std::min({nic_spec_of(t, ns).line_rate_Bps, nic_spec_of(t, nd).line_rate_Bps,
                   t.fabric.link_rate_Bps});
}

}  // namespace

double uncontended_transfer_s(int64_t src, int64_t dst, double bytes, const TopologySpec& topo) {
  if (src == dst) {
    throw InvalidArgument("uncontended_transfer_s: source and destination are both GPU " + std::to_string(src));
  }
  return route_latency_s(src, dst, topo) + bytes / route_Bps(src, dst, topo);
}

double uncontended_time_s(const CollectivePlan& plan, const TopologySpec& topo) {
  double flows = 0;
  if (plan.algorithm == CollectiveAlgorithm::kP2p) {
    // An all-to-all's flows leave each GPU (NIC) for every other node and arrive from every
    // other node: each NIC sends and receives its flows one after the other (their bytes
    // summed), the longest route's latency once.
    struct Side {
      double bytes = 0, latency_s = 0, Bps = 1e300;
    };
    std::map<int64_t, Side> out, in;  // by GPU
    for (const CollectiveFlow& f : plan.flows) {
      for (Side* side : {&out[f.src], &in[f.dst]}) {
        side->bytes += f.bytes;
        side->latency_s = std::max(side->latency_s, route_latency_s(f.src, f.dst, topo));
        side->Bps = std::min(side->Bps, route_Bps(f.src, f.dst, topo));
      }
    }
    for (const auto* sides : {&out, &in}) {
      for (const auto& [gpu, side] : *sides) {
        flows = std::max(flows, side.latency_s + side.bytes / side.Bps);
      }
    }
    return std::max(flows, plan.local_time_s) + plan.latency_s;
  }
  for (const CollectiveFlow& f : plan.flows) {
    flows = std::max(flows, uncontended_transfer_s(f.src, f.dst, f.bytes, topo));
  }
  return std::max(flows, plan.local_time_s) + plan.latency_s;
}

}  // namespace traintwin
