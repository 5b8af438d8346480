// The elements a topology file's link_overrides and switch_overrides name (topologies/
// topology.hpp LinkOverride, SwitchOverride): parsing their names, finding them in the fabric
// planned for a job (topologies/graph.hpp FabricPlan) and the loader's check of every override
// against the largest cluster the file describes. The SimGrid platform (sim/platform.cpp) then
// applies them: bandwidth and latency on its links, down elements routed around.
//
// Names are the platform's (Platform::links(), sim/platform.hpp) and the graph's vertices:
//   links   node<i>-gpu<j>-nvlink-up/-down, node<i>-loopback, node<i>-nic<r>-up/-down,
//           rail<r>-leaf<l>-spine<s>-c<k>-up/-down, rail<r>-spine<s>-core<c>-c<k>-up/-down;
//           without -up/-down: the cable (both directions). Dual-plane fabrics spell the NIC
//           port node<i>-nic<r>-plane<p> and the rail rail<r>-plane<p>.
//   switches rail<r>-leaf<l>, rail<r>-spine<s>, rail<r>-core<c> (rail<r>-plane<p>-...), and
//           node<i>-nvswitch.
// The platform is built for a job's GPUs, so its nodes, leaves, spines and cores are the first
// ones of the cluster's: an element past them (a node the job does not reach, the cores of a
// job within one pod) carries none of the job's traffic and is left out of that job
// (element_beyond_plan); anything else must be an element of the job's platform.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "topologies/graph.hpp"
#include "topologies/topology.hpp"

namespace traintwin {

/// What an override names.
enum class FabricElementKind {
  kNvlink,     ///< a GPU's NVLink to its NVSwitch
  kLoopback,   ///< a node's loopback (device-local copies)
  kNic,        ///< a NIC (port) cable to its leaf
  kLeafSpine,  ///< a leaf-spine cable
  kSpineCore,  ///< a spine-core cable
  kNvSwitch,   ///< a node's NVSwitch fabric
  kLeaf,
  kSpine,
  kCore,
};

/// Which direction of a cable a link name takes.
enum class CableDirection { kBoth, kUp, kDown };

/// A parsed element name.
struct FabricElement {
  FabricElementKind kind = FabricElementKind::kNic;
  int64_t node = -1;   ///< kNvlink, kLoopback, kNic, kNvSwitch
  int64_t gpu = -1;    ///< kNvlink: GPU in its node
  int64_t rail = -1;   ///< fabric rail (NIC rail x planes + plane): kNic and the fabric's
  int64_t lower = -1;  ///< kLeafSpine: leaf; kSpineCore: spine; kLeaf/kSpine/kCore: its index
  int64_t upper = -1;  ///< kLeafSpine: spine; kSpineCore: core
  int64_t cable = 0;   ///< kLeafSpine, kSpineCore: which parallel cable
  CableDirection direction = CableDirection::kBoth;

  bool is_switch() const {
    return kind == FabricElementKind::kNvSwitch || kind == FabricElementKind::kLeaf ||
           kind == FabricElementKind::kSpine || kind == FabricElementKind::kCore;
  }
};

/// Parses a link or cable name (the file comment's forms) of a fabric of `planes` planes (1 or
/// 2: a plane is named exactly when there are two); nullopt when the text is no such name.
std::optional<FabricElement> parse_link_element(std::string_view name, int64_t planes);

/// Parses a switch name (rail<r>[-plane<p>]-leaf|spine|core<i>, node<i>-nvswitch); nullopt when
/// the text is no such name.
std::optional<FabricElement> parse_switch_element(std::string_view name, int64_t planes);

/// Whether `e` is an element of the fabric planned by `plan` (nodes, GPUs per node, rails,
/// leaves, spines and cores in range; a cable's ends wired together, its index among the
/// parallel cables in range).
bool element_in_plan(const FabricElement& e, const FabricPlan& plan);

/// Whether `e` lies past the elements `plan` builds (a node past num_nodes, a leaf, spine or
/// core past the rail's, a spine-core cable of a two-tier build): the job's platform has no such
/// element and none of its traffic would cross it.
bool element_beyond_plan(const FabricElement& e, const FabricPlan& plan);

/// The link names of `e` (a link, or a cable: its -up then its -down) as Platform::links()
/// spells them for `plan`.
std::vector<std::string> element_link_names(const FabricElement& e, const FabricPlan& plan);

/// The vertex name of a switch element ("rail0-spine3", "rail1-plane0-leaf2", "node3-nvswitch").
std::string element_switch_name(const FabricElement& e, const FabricPlan& plan);

/// The fabric of the largest cluster `t` describes (max_nodes(t) nodes): what the loader checks
/// override names against.
FabricPlan capacity_plan(const TopologySpec& t);

/// Checks every override of `t` (the loader calls it): each name a link (switch) of the largest
/// cluster's fabric, no link or switch given twice (a cable and one of its directions count as
/// the same link), `down` only on a whole cable (no -up/-down), and a hop latency only on a
/// fabric switch. Throws ConfigError "<where>.link: '<name>': <problem> (did you mean <closest>?
/// names look like ...; here nodes 0..N-1, ...)".
void check_fabric_overrides(const TopologySpec& t);

/// "names look like ..." for links of `plan`, with the index ranges: the tail of every
/// unknown-link message (the what-if degraded link's too).
std::string link_name_forms(const FabricPlan& plan);

}  // namespace traintwin
