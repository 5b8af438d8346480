// Routes through one rail's fat tree when switches or cables are down (a topology file's
// link_overrides / switch_overrides with down: true), as a subnet manager recomputes them.
// Pure arithmetic on the FabricPlan (topologies/graph.hpp); the SimGrid platform
// (sim/platform.cpp) installs the routes that differ from SimGrid's as bypass routes.
//
// SimGrid's fat tree routes by D-mod-K (topologies/graph.hpp route(), FatTreeZone.cpp of
// SimGrid 3.32): going up from a leaf, parent port i = dst mod (P x c2) (spine y = i mod P,
// cable i / P); from a spine, port i = (dst / P) mod (Z x c3) (core y + P (i mod Z), cable
// i / Z); going down, parallel cables by src mod c. It never looks at a link's state. InfiniBand
// leaves routing to the subnet manager: OpenSM's fat-tree and up/down engines recompute every
// switch's forwarding table after a switch or cable fails, keep the routes that still work and
// spread the destinations of the broken ones over the parents that remain (ftree balances
// destinations per port; OpenSM documentation, "Fat-tree Routing Algorithm").
//
// The rule here, per stage of the up path and per parallel-cable choice of the down path:
//   * keep D-mod-K's choice when a whole route through it is up (from that stage on: the cable,
//     the parent switch, and everything above and down to the destination);
//   * otherwise take, among the choices of that stage that lead to a working route, in port
//     order, the one of index (dst / K) mod (their count) up (K = the ports of the stage:
//     P x c2 at a leaf, Z x c3 at a spine), (src / c) mod (their count) down: the destinations
//     D-mod-K gave to a dead port are dealt over the live ones in turn, as ftree balances them.
// So routes that avoid every down element stay as SimGrid's; a pair with no working route
// (every spine of its pod down, a leaf's every uplink down) has none (nullopt).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "topologies/graph.hpp"

namespace traintwin {

/// The down elements of one fabric rail (1 = down), indexed as the plan numbers them.
struct RailDown {
  std::vector<char> leaf;        ///< [leaves_per_rail]
  std::vector<char> spine;       ///< [spines_per_rail()]
  std::vector<char> core;        ///< [cores_per_rail()]
  std::vector<char> leaf_spine;  ///< [(leaf x P + local spine y) x c2 + cable]
  std::vector<char> spine_core;  ///< [(spine x Z + z) x c3 + cable]; core y + P z of spine y

  /// All up, sized for `plan`.
  static RailDown all_up(const FabricPlan& plan);
  /// Whether a spine, core or switch-to-switch cable is down (what needs routing around).
  bool any_above_leaves() const;
};

/// The choices of a route between two nodes on different leaves of one rail (indices as in
/// RailDown); the core stage only when they are in different pods of a three-tier rail.
struct FatTreeRoute {
  int64_t spine_y = 0;             ///< local spine index in the pods (both pods' spine y)
  int64_t leaf_spine_up = 0;       ///< cable from the source leaf
  int64_t core_z = -1;             ///< z: core y + P z; -1 within one pod
  int64_t spine_core_up = 0;       ///< cable from the source pod's spine
  int64_t spine_core_down = 0;     ///< cable to the destination pod's spine
  int64_t leaf_spine_down = 0;     ///< cable to the destination leaf
  bool operator==(const FatTreeRoute&) const = default;
};

/// SimGrid's D-mod-K route from node `src` to node `dst` (different leaves).
/// InvalidArgument for nodes out of range or on one leaf.
FatTreeRoute d_mod_k_route(const FabricPlan& plan, int64_t src, int64_t dst);

/// The route the file comment's rule gives around `down` (d_mod_k_route when it crosses nothing
/// down); nullopt when no route avoids the down elements. Leaves down are the caller's (they cut
/// their nodes off; this only routes between leaves that are up). InvalidArgument as
/// d_mod_k_route.
std::optional<FatTreeRoute> route_around(const FabricPlan& plan, const RailDown& down,
                                         int64_t src, int64_t dst);

}  // namespace traintwin
