// Names of the elements link_overrides and switch_overrides name; see
// topologies/fabric_overrides.hpp.
#include "topologies/fabric_overrides.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/text.hpp"

namespace traintwin {
namespace {

using K = FabricElementKind;

int64_t number(const std::ssub_match& m) { return std::stoll(m.str()); }

/// The fabric rail of NIC rail `r` and plane group `plane` (unmatched: no plane given), or -1
/// when the plane's presence does not match the fabric's planes.
int64_t fabric_rail(int64_t r, const std::ssub_match& plane, int64_t planes) {
  if (plane.matched != (planes > 1)) return -1;
  const int64_t p = plane.matched ? number(plane) : 0;
  if (p >= planes) return -1;
  return r * planes + p;
}

CableDirection direction(const std::ssub_match& m) {
  if (!m.matched) return CableDirection::kBoth;
  return m.str() == "up" ? CableDirection::kUp : CableDirection::kDown;
}

int64_t pod_of_leaf(const FabricPlan& p, int64_t leaf) { return leaf / p.leaves_per_pod; }
int64_t pod_of_spine(const FabricPlan& p, int64_t spine) { return spine / p.spines_per_pod; }

std::string rail_prefix(const FabricPlan& p, int64_t rail) {
  return fmt::format("rail{}", p.rail_label(rail));
}

/// Up to `most` names of every link kind of `plan` (the first nodes, leaves, spines and cores
/// of each rail): candidates for "did you mean".
std::vector<std::string> sample_link_names(const FabricPlan& p, int64_t most) {
  std::vector<std::string> out;
  const int64_t nodes = std::min(p.num_nodes, most);
  for (int64_t n = 0; n < nodes; ++n) {
    out.push_back(fmt::format("node{}-loopback", n));
    for (int64_t j = 0; j < p.gpus_per_node; ++j) {
      out.push_back(fmt::format("node{}-gpu{}-nvlink", n, j));
    }
    for (int64_t f = 0; f < p.rails; ++f) {
      const std::string label = p.rail_label(f);
      out.push_back(fmt::format("node{}-nic{}", n, label));
    }
  }
  for (int64_t f = 0; f < p.rails; ++f) {
    const std::string rail = rail_prefix(p, f);
    for (int64_t l = 0; l < std::min(p.leaves_per_rail, most); ++l) {
      const int64_t pod = pod_of_leaf(p, l);
      for (int64_t y = 0; y < p.spines_per_pod; ++y) {
        for (int64_t c = 0; c < p.cables_leaf_spine; ++c) {
          out.push_back(
              fmt::format("{}-leaf{}-spine{}-c{}", rail, l, y + p.spines_per_pod * pod, c));
        }
      }
    }
    for (int64_t s = 0; p.tiers == 3 && s < std::min(p.spines_per_rail(), most); ++s) {
      for (int64_t z = 0; z < p.cores_per_spine; ++z) {
        for (int64_t c = 0; c < p.cables_spine_core; ++c) {
          out.push_back(fmt::format("{}-spine{}-core{}-c{}", rail, s,
                                    s % p.spines_per_pod + p.spines_per_pod * z, c));
        }
      }
    }
  }
  const size_t cables = out.size();
  for (size_t i = 0; i < cables; ++i) {
    if (out[i].ends_with("-loopback")) continue;
    out.push_back(out[i] + "-up");
    out.push_back(out[i] + "-down");
  }
  return out;
}

std::vector<std::string> sample_switch_names(const FabricPlan& p, int64_t most) {
  std::vector<std::string> out;
  for (int64_t n = 0; n < std::min(p.num_nodes, most); ++n) {
    out.push_back(fmt::format("node{}-nvswitch", n));
  }
  for (int64_t f = 0; f < p.rails; ++f) {
    const std::string rail = rail_prefix(p, f);
    for (int64_t l = 0; l < std::min(p.leaves_per_rail, most); ++l) {
      out.push_back(fmt::format("{}-leaf{}", rail, l));
    }
    for (int64_t s = 0; s < std::min(p.spines_per_rail(), most); ++s) {
      out.push_back(fmt::format("{}-spine{}", rail, s));
    }
    for (int64_t c = 0; c < std::min(p.cores_per_rail(), most); ++c) {
      out.push_back(fmt::format("{}-core{}", rail, c));
    }
  }
  return out;
}

std::string did_you_mean(const std::string& name, const std::vector<std::string>& candidates) {
  const std::string_view best = closest_match(
      name, std::vector<std::string_view>(candidates.begin(), candidates.end()));
  return best.empty() ? "" : fmt::format("did you mean {}? ", best);
}

std::string switch_name_forms(const FabricPlan& p) {
  const std::string rail = p.planes > 1 ? "rail0-plane0" : "rail0";
  return fmt::format(
      "names look like {}-leaf0, {}-spine0{} and node0-nvswitch; here rails 0..{}{}, leaves "
      "0..{}, spines 0..{}{} per rail, nodes 0..{}",
      rail, rail, p.tiers == 3 ? fmt::format(", {}-core0", rail) : "",
      p.rails / p.planes - 1, p.planes > 1 ? fmt::format(", planes 0..{}", p.planes - 1) : "",
      p.leaves_per_rail - 1, p.spines_per_rail() - 1,
      p.tiers == 3 ? fmt::format(", cores 0..{}", p.cores_per_rail() - 1) : "",
      p.num_nodes - 1);
}

}  // namespace

std::optional<FabricElement> parse_link_element(std::string_view name_in, int64_t planes) {
  static const std::regex nvlink(R"(node(\d+)-gpu(\d+)-nvlink(?:-(up|down))?)");
  static const std::regex loopback(R"(node(\d+)-loopback)");
  static const std::regex nic(R"(node(\d+)-nic(\d+)(?:-plane(\d+))?(?:-(up|down))?)");
  static const std::regex leaf_spine(
      R"(rail(\d+)(?:-plane(\d+))?-leaf(\d+)-spine(\d+)-c(\d+)(?:-(up|down))?)");
  static const std::regex spine_core(
      R"(rail(\d+)(?:-plane(\d+))?-spine(\d+)-core(\d+)-c(\d+)(?:-(up|down))?)");
  const std::string name(name_in);
  if (name.size() > 200) return std::nullopt;
  std::smatch m;
  FabricElement e;
  try {
    if (std::regex_match(name, m, nvlink)) {
      e.kind = K::kNvlink;
      e.node = number(m[1]);
      e.gpu = number(m[2]);
      e.direction = direction(m[3]);
      return e;
    }
    if (std::regex_match(name, m, loopback)) {
      e.kind = K::kLoopback;
      e.node = number(m[1]);
      return e;
    }
    if (std::regex_match(name, m, nic)) {
      e.kind = K::kNic;
      e.node = number(m[1]);
      e.rail = fabric_rail(number(m[2]), m[3], planes);
      e.direction = direction(m[4]);
      return e.rail < 0 ? std::nullopt : std::optional(e);
    }
    for (const auto& [re, kind] : {std::pair{&leaf_spine, K::kLeafSpine},
                                   std::pair{&spine_core, K::kSpineCore}}) {
      if (!std::regex_match(name, m, *re)) continue;
      e.kind = kind;
      e.rail = fabric_rail(number(m[1]), m[2], planes);
      e.lower = number(m[3]);
      e.upper = number(m[4]);
      e.cable = number(m[5]);
      e.direction = direction(m[6]);
      return e.rail < 0 ? std::nullopt : std::optional(e);
    }
  } catch (const std::out_of_range&) {  // an index past int64
    return std::nullopt;
  }
  return std::nullopt;
}

std::optional<FabricElement> parse_switch_element(std::string_view name_in, int64_t planes) {
  static const std::regex nvswitch(R"(node(\d+)-nvswitch)");
  static const std::regex fabric(R"(rail(\d+)(?:-plane(\d+))?-(leaf|spine|core)(\d+))");
  const std::string name(name_in);
  if (name.size() > 200) return std::nullopt;
  std::smatch m;
  FabricElement e;
  try {
    if (std::regex_match(name, m, nvswitch)) {
      e.kind = K::kNvSwitch;
      e.node = number(m[1]);
      return e;
    }
    if (std::regex_match(name, m, fabric)) {
      const std::string level = m[3].str();
      e.kind = level == "leaf" ? K::kLeaf : level == "spine" ? K::kSpine : K::kCore;
      e.rail = fabric_rail(number(m[1]), m[2], planes);
      e.lower = number(m[4]);
      return e.rail < 0 ? std::nullopt : std::optional(e);
    }
  } catch (const std::out_of_range&) {
    return std::nullopt;
  }
  return std::nullopt;
}

bool element_in_plan(const FabricElement& e, const FabricPlan& p) {
  const bool rail_ok = e.rail >= 0 && e.rail < p.rails;
  switch (e.kind) {
    case K::kNvlink:
      return e.node >= 0 && e.node < p.num_nodes && e.gpu >= 0 && e.gpu < p.gpus_per_node;
    case K::kLoopback:
    case K::kNvSwitch:
      return e.node >= 0 && e.node < p.num_nodes;
    case K::kNic:
      return e.node >= 0 && e.node < p.num_nodes && rail_ok;
    case K::kLeafSpine:
      return rail_ok && e.lower >= 0 && e.lower < p.leaves_per_rail && e.upper >= 0 &&
             e.upper < p.spines_per_rail() && pod_of_leaf(p, e.lower) == pod_of_spine(p, e.upper) &&
             e.cable >= 0 && e.cable < p.cables_leaf_spine;
    case K::kSpineCore:
      return p.tiers == 3 && rail_ok && e.lower >= 0 && e.lower < p.spines_per_rail() &&
             e.upper >= 0 && e.upper < p.cores_per_rail() &&
             e.upper % p.spines_per_pod == e.lower % p.spines_per_pod && e.cable >= 0 &&
             e.cable < p.cables_spine_core;
    case K::kLeaf:
      return rail_ok && e.lower >= 0 && e.lower < p.leaves_per_rail;
    case K::kSpine:
      return rail_ok && e.lower >= 0 && e.lower < p.spines_per_rail();
    case K::kCore:
      return rail_ok && e.lower >= 0 && e.lower < p.cores_per_rail();
  }
  return false;
}

bool element_beyond_plan(const FabricElement& e, const FabricPlan& p) {
  switch (e.kind) {
    case K::kNvlink:
    case K::kLoopback:
    case K::kNvSwitch:
    case K::kNic:
      return e.node >= p.num_nodes;
    case K::kLeafSpine:
      return e.lower >= p.leaves_per_rail || e.upper >= p.spines_per_rail();
    case K::kSpineCore:
      return p.tiers != 3 || e.lower >= p.spines_per_rail() || e.upper >= p.cores_per_rail();
    case K::kLeaf:
      return e.lower >= p.leaves_per_rail;
    case K::kSpine:
      return e.lower >= p.spines_per_rail();
    case K::kCore:
      return e.lower >= p.cores_per_rail();
  }
  return false;
}

std::vector<std::string> element_link_names(const FabricElement& e, const FabricPlan& p) {
  std::string cable;
  switch (e.kind) {
    case K::kNvlink:
      cable = fmt::format("node{}-gpu{}-nvlink", e.node, e.gpu);
      break;
    case K::kLoopback:
      return {fmt::format("node{}-loopback", e.node)};
    case K::kNic:
      cable = fmt::format("node{}-nic{}", e.node, p.rail_label(e.rail));
      break;
    case K::kLeafSpine:
      cable = fmt::format("{}-leaf{}-spine{}-c{}", rail_prefix(p, e.rail), e.lower, e.upper,
                          e.cable);
      break;
    case K::kSpineCore:
      cable = fmt::format("{}-spine{}-core{}-c{}", rail_prefix(p, e.rail), e.lower, e.upper,
                          e.cable);
      break;
    default:
      throw InvalidArgument("element_link_names: a switch is not a link");
  }
  switch (e.direction) {
    case CableDirection::kUp: return {cable + "-up"};
    case CableDirection::kDown: return {cable + "-down"};
    case CableDirection::kBoth: break;
  }
  return {cable + "-up", cable + "-down"};
}

std::string element_switch_name(const FabricElement& e, const FabricPlan& p) {
  switch (e.kind) {
    case K::kNvSwitch: return fmt::format("node{}-nvswitch", e.node);
    case K::kLeaf: return fmt::format("{}-leaf{}", rail_prefix(p, e.rail), e.lower);
    case K::kSpine: return fmt::format("{}-spine{}", rail_prefix(p, e.rail), e.lower);
    case K::kCore: return fmt::format("{}-core{}", rail_prefix(p, e.rail), e.lower);
    default: throw InvalidArgument("element_switch_name: not a switch");
  }
}

FabricPlan capacity_plan(const TopologySpec& t) {
  return plan_fabric(t, max_nodes(t) * t.node.gpus_per_node);
}

std::string link_name_forms(const FabricPlan& p) {
  const std::string rail = p.planes > 1 ? "rail0-plane0" : "rail0";
  const std::string nic = p.planes > 1 ? "node0-nic0-plane0" : "node0-nic0";
  const std::string core_names =
      p.tiers == 3 ? fmt::format(", {}-spine0-core0-c0-up (spine -> core; cores 0..{})", rail,
                                 p.cores_per_rail() - 1)
                   : "";
  return fmt::format(
      "names look like node0-gpu0-nvlink-up / -down (GPU <-> NVSwitch), node0-loopback, {}-up / "
      "-down (NIC <-> leaf), {}-leaf0-spine0-c0-up / -down (leaf <-> spine, cable 0){}; here "
      "nodes 0..{}, GPUs 0..{} per node, rails 0..{}{}, leaves 0..{} and spines 0..{} per rail",
      nic, rail, core_names, p.num_nodes - 1, p.gpus_per_node - 1, p.rails / p.planes - 1,
      p.planes > 1 ? fmt::format(", planes 0..{}", p.planes - 1) : "", p.leaves_per_rail - 1,
      p.spines_per_rail() - 1);
}

void check_fabric_overrides(const TopologySpec& t) {
  if (!t.has_overrides()) return;
  const FabricPlan cap = capacity_plan(t);
  const int64_t planes = t.fabric.planes;
  const int64_t most = 16;  // candidates for "did you mean": the first nodes, leaves, ...
  std::map<std::string, std::string> seen;  // link name -> where it was first given
  for (const LinkOverride& o : t.link_overrides) {
    const std::optional<FabricElement> e = parse_link_element(o.link, planes);
    if (!e || !element_in_plan(*e, cap)) {
      throw ConfigError(fmt::format(
          "{}.link: '{}': no such link in the fabric of {} nodes ({}{})", o.where, o.link,
          cap.num_nodes, did_you_mean(o.link, sample_link_names(cap, most)),
          link_name_forms(cap)));
    }
    if (o.down && e->direction != CableDirection::kBoth) {
      const std::string cable = o.link.substr(0, o.link.rfind('-'));
      throw ConfigError(fmt::format(
          "{}.down: '{}' is one direction of a cable; a cable is down as a whole (allowed: the "
          "cable's name, {})",
          o.where, o.link, cable));
    }
    for (const std::string& name : element_link_names(*e, cap)) {
      const auto [it, fresh] = seen.emplace(name, o.where);
      if (!fresh) {
        throw ConfigError(fmt::format("{}.link: '{}': link {} is given twice (first at {})",
                                      o.where, o.link, name, it->second));
      }
    }
  }
  std::map<std::string, std::string> seen_switch;
  for (const SwitchOverride& o : t.switch_overrides) {
    const std::optional<FabricElement> e = parse_switch_element(o.name, planes);
    if (!e || !element_in_plan(*e, cap)) {
      throw ConfigError(fmt::format("{}.switch: '{}': no such switch in the fabric of {} nodes "
                                    "({}{})",
                                    o.where, o.name, cap.num_nodes,
                                    did_you_mean(o.name, sample_switch_names(cap, most)),
                                    switch_name_forms(cap)));
    }
    if (o.hop_latency_s && e->kind == K::kNvSwitch) {
      throw ConfigError(fmt::format(
          "{}.hop_latency: '{}' is an NVSwitch (its latency is node.nvlink_latency; allowed: a "
          "fabric switch, or link_overrides on its NVLinks)",
          o.where, o.name));
    }
    const auto [it, fresh] = seen_switch.emplace(o.name, o.where);
    if (!fresh) {
      throw ConfigError(fmt::format("{}.switch: '{}' is given twice (first at {})", o.where,
                                    o.name, it->second));
    }
  }
}

}  // namespace traintwin
