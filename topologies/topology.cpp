// Loader and checks of cluster topology files. See topologies/topology.hpp for the format.
#include "topologies/topology.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <map>
#include <sstream>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/yaml_document.hpp"
#include "core/text.hpp"
#include "core/units.hpp"
#include "topologies/fabric_overrides.hpp"
#include "topologies/topology_schema.hpp"

namespace traintwin {
namespace {

constexpr std::string_view kFabricKind = "rail_optimized_fat_tree";
constexpr std::string_view kDualPlaneKind = "dual_plane_rail_fat_tree";

/// 1-based line of a node, or 0 when yaml-cpp has no mark for it.
int line_of(const YAML::Node& n) {
  const YAML::Mark m = n.Mark();
  return m.line >= 0 ? m.line + 1 : 0;
}

/// "<origin>:<line>" (or "<origin>" without a line).
std::string place(const std::string& origin, int line) {
  return line > 0 ? fmt::format("{}:{}", origin, line) : origin;
}

/// Parses "down:up" with positive integers ("1:1", "2:1").
std::pair<int64_t, int64_t> parse_ratio(const std::string& s, const std::string& where) {
  const auto fail = [&]() -> std::pair<int64_t, int64_t> {
    throw ConfigError(fmt::format(
        "{}: \"{}\" is not a down:up ratio (allowed: two positive integers such as \"1:1\" "
        "(non-blocking) or \"2:1\")",
        where, s));
  };
  const auto colon = s.find(':');
  if (colon == std::string::npos) return fail();
  int64_t down = 0, up = 0;
  const char* b = s.data();
  const char* e = s.data() + s.size();
  const auto r1 = std::from_chars(b, b + colon, down);
  const auto r2 = std::from_chars(b + colon + 1, e, up);
  if (r1.ec != std::errc() || r1.ptr != b + colon || r2.ec != std::errc() || r2.ptr != e ||
      down < 1 || up < 1) {
    return fail();
  }
  return {down, up};
}

using topology_schema::KeySpec;
using topology_schema::ValueType;

/// A YAML mapping whose keys were checked against its section of the topology schema
/// (topologies/topology_schema.hpp): no unknown, duplicate or missing keys. Values are then read
/// by name and parsed as the schema types them, each error pointing at its line.
class Mapping {
 public:
  /// `path` is the dotted key of this mapping ("" at the top) and its schema section, `line` the
  /// line of that key.
  Mapping(const YAML::Node& node, std::string origin, std::string path, int line)
      : origin_(std::move(origin)), path_(std::move(path)),
        keys_(topology_schema::keys_of(path_)) {
    if (!node.IsMap()) {
      const int at = node.IsDefined() && !node.IsNull() ? line_of(node) : line;
      throw ConfigError(fmt::format("{}: {}: expected a mapping with keys {}", place(origin_, at),
                                    path_.empty() ? "(top level)" : path_, key_list()));
    }
    for (auto it = node.begin(); it != node.end(); ++it) {
      const YAML::Node key = it->first;  // a copy: it-> points into a temporary
      const int key_line = line_of(key);
      if (!key.IsScalar()) {
        throw ConfigError(fmt::format("{}: {}: keys must be plain names (allowed: {})",
                                      place(origin_, key_line), display(""), key_list()));
      }
      const std::string name = key.Scalar();
      const auto rule = std::find_if(keys_.begin(), keys_.end(),
                                     [&](const KeySpec& r) { return name == r.key; });
      if (rule == keys_.end()) {
        throw ConfigError(fmt::format("{}: {}: unknown key{} (allowed: {})",
                                      place(origin_, key_line), display(name), suggestion(name),
                                      key_list()));
      }
      if (values_.count(name) != 0) {
        throw ConfigError(fmt::format("{}: {}: duplicate key (first given on line {})",
                                      place(origin_, key_line), display(name), lines_.at(name)));
      }
      values_.emplace(name, it->second);
      lines_.emplace(name, key_line);
    }
    for (const KeySpec& r : keys_) {
      if (r.required && values_.count(std::string(r.key)) == 0) {
        throw ConfigError(fmt::format("{}: {}: missing required key '{}' (required: {})",
                                      place(origin_, line), path_.empty() ? "(top level)" : path_,
                                      r.key, required_list()));
      }
    }
  }

  bool has(const std::string& key) const { return values_.count(key) != 0; }

  /// The value of `key` (given in the file: required, or checked with has()).
  const YAML::Node& node(const std::string& key) const { return values_.at(key); }

  /// Line of `key` in the file.
  int line(const std::string& key) const { return lines_.at(key); }

  /// "<origin>:<line>: <path.key>", the prefix of every message about `key`.
  std::string where(const std::string& key) const {
    return fmt::format("{}: {}", place(origin_, line(key)), display(key));
  }

  /// The sub-mapping given under `key`, checked against its schema section.
  Mapping child(const std::string& key) const {
    spec(key, ValueType::kMapping);
    return Mapping(node(key), origin_, display(key), line(key));
  }

  /// The scalar text of `key`, or ConfigError naming what was expected.
  std::string scalar(const std::string& key, const char* expected) const {
    const YAML::Node& n = node(key);
    if (!n.IsScalar()) {
      throw ConfigError(fmt::format("{}: expected {}, got {}", where(key), expected,
                                    n.IsNull()  ? "nothing"
                                    : n.IsMap() ? "a mapping"
                                                : "a list"));
    }
    return n.Scalar();
  }

  /// A text key: non-empty unless the schema says free text.
  std::string text(const std::string& key) const {
    const KeySpec& k = spec(key);
    if (k.type != ValueType::kText && k.type != ValueType::kFreeText) wrong_type(k, "text");
    std::string s = scalar(key, "a text");
    if (s.empty() && k.type == ValueType::kText) {
      throw ConfigError(fmt::format("{}: must not be empty", where(key)));
    }
    return s;
  }

  /// An integer >= the schema's minimum.
  int64_t integer(const std::string& key) const {
    const int64_t min = spec(key, ValueType::kInteger).min;
    const std::string s = scalar(key, "an integer");
    int64_t v = 0;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (r.ec != std::errc() || r.ptr != s.data() + s.size()) {
      throw ConfigError(fmt::format("{}: \"{}\" is not an integer", where(key), s));
    }
    if (v < min) {
      throw ConfigError(fmt::format("{}: {} is too small (allowed: >= {})", where(key), v, min));
    }
    return v;
  }

  bool boolean(const std::string& key) const {
    spec(key, ValueType::kBoolean);
    const std::string s = scalar(key, "true or false");
    if (s == "true") return true;
    if (s == "false") return false;
    throw ConfigError(
        fmt::format("{}: \"{}\" is not a boolean (allowed: true, false)", where(key), s));
  }

  /// A quantity in the unit its schema type gives it: bytes, bytes/s, seconds or FLOP/s.
  double quantity(const std::string& key) const {
    const KeySpec& k = spec(key);
    switch (k.type) {
      case ValueType::kBytes:
        return parse_bytes(scalar(key, "a size such as 80GiB"), where(key));
      case ValueType::kBandwidth:
        return parse_bandwidth_Bps(scalar(key, "a bandwidth such as 400Gbps"), where(key));
      case ValueType::kTime:
        return parse_time_s(scalar(key, "a time such as 1us"), where(key));
      case ValueType::kFlopRate:
        return parse_flop_rate_FLOPs(scalar(key, "a FLOP rate such as 989TFLOPs"), where(key));
      default:
        wrong_type(k, "a quantity");
    }
  }

  /// The items of list `key` (a YAML sequence), each with its line; ConfigError when it is not a
  /// non-empty list.
  std::vector<std::pair<YAML::Node, int>> list(const std::string& key) const {
    spec(key, ValueType::kList);
    const YAML::Node& n = node(key);
    if (!n.IsSequence() || n.size() == 0) {
      throw ConfigError(fmt::format("{}: expected a non-empty list of mappings", where(key)));
    }
    std::vector<std::pair<YAML::Node, int>> items;
    for (const YAML::Node& item : n) {
      const int at = item.IsDefined() && !item.IsNull() ? line_of(item) : line(key);
      items.emplace_back(item, at > 0 ? at : line(key));
    }
    return items;
  }

  /// A "down:up" ratio of positive integers.
  std::pair<int64_t, int64_t> ratio(const std::string& key) const {
    spec(key, ValueType::kRatio);
    return parse_ratio(scalar(key, "a down:up ratio such as \"1:1\""), where(key));
  }

 private:
  std::string display(const std::string& key) const {
    if (path_.empty()) return key;
    return key.empty() ? path_ : path_ + "." + key;
  }

  /// The schema entry of `key` in this mapping's section (of type `type` when given).
  const KeySpec& spec(const std::string& key,
                      std::optional<ValueType> type = std::nullopt) const {
    const KeySpec& k = topology_schema::key(path_, key);
    if (type && k.type != *type) wrong_type(k, topology_schema::to_string(*type));
    return k;
  }

  [[noreturn]] static void wrong_type(const KeySpec& k, std::string_view read_as) {
    throw InvalidArgument(fmt::format("topology loader: key '{}' of '{}' is a {} in the schema, "
                                      "read as {}",
                                      k.key, k.section, topology_schema::to_string(k.type),
                                      read_as));
  }

  std::string key_list() const {
    std::string out;
    for (const KeySpec& r : keys_) {
      if (!out.empty()) out += ", ";
      out += r.key;
      if (!r.required) out += " (optional)";
    }
    return out;
  }

  std::string required_list() const {
    std::string out;
    for (const KeySpec& r : keys_) {
      if (!r.required) continue;
      if (!out.empty()) out += ", ";
      out += r.key;
    }
    return out;
  }

  std::string suggestion(const std::string& name) const {
    std::vector<std::string_view> names;
    for (const KeySpec& r : keys_) names.push_back(r.key);
    const std::string_view best = closest_match(name, names);
    return best.empty() ? std::string() : fmt::format(", did you mean '{}'?", best);
  }

  std::string origin_;
  std::string path_;
  std::vector<KeySpec> keys_;
  std::map<std::string, YAML::Node> values_;
  std::map<std::string, int> lines_;
};

/// The node groups of `top` (its node_groups list; none when absent): each node_template read
/// relative to `base_dir`, its node and nic sections checked equal to `t`'s.
std::vector<NodeGroup> parse_node_groups(const Mapping& top, const TopologySpec& t,
                                         const std::string& origin,
                                         const std::filesystem::path& base_dir);

void parse_overrides(const Mapping& top, TopologySpec& t, const std::string& origin);

TopologySpec parse_root(const YAML::Node& root, const std::string& origin,
                        const std::filesystem::path& base_dir) {
  const Mapping top(root, origin, "", 1);
  TopologySpec t;
  t.name = top.text("name");
  if (top.has("description")) t.description = top.text("description");

  // --- gpu ---
  const Mapping gpu = top.child("gpu");
  t.gpu.name = gpu.text("name");
  t.gpu.memory_bytes = gpu.quantity("memory");
  if (t.gpu.memory_bytes <= 0) {
    throw ConfigError(fmt::format("{}: must be greater than zero", gpu.where("memory")));
  }
  t.gpu.hbm_bandwidth_Bps = gpu.quantity("hbm_bandwidth");
  const Mapping peak = gpu.child("peak_flops");
  t.gpu.peak.fp32_FLOPs = peak.quantity("fp32");
  if (peak.has("tf32")) t.gpu.peak.tf32_FLOPs = peak.quantity("tf32");
  t.gpu.peak.fp16_FLOPs = peak.quantity("fp16");
  // No bf16 key: no BF16 tensor cores (Turing and older); check_gpu_supports refuses bf16 runs.
  t.gpu.peak.bf16_FLOPs = peak.has("bf16") ? peak.quantity("bf16") : 0.0;
  if (peak.has("fp8")) t.gpu.peak.fp8_FLOPs = peak.quantity("fp8");
  if (peak.has("fp4")) t.gpu.peak.fp4_FLOPs = peak.quantity("fp4");
  if (gpu.has("host_link")) {
    // The GPU's link to its host and the host's share for this GPU: what CPU offload uses.
    const Mapping link = gpu.child("host_link");
    HostLinkSpec h;
    h.bandwidth_Bps = link.quantity("bandwidth");
    h.latency_s = link.quantity("latency");
    h.host_memory_bytes = link.quantity("host_memory");
    h.optimizer_bandwidth_Bps = link.quantity("optimizer_bandwidth");
    for (const auto& [key, value] : {std::pair{"bandwidth", h.bandwidth_Bps},
                                     std::pair{"host_memory", h.host_memory_bytes},
                                     std::pair{"optimizer_bandwidth", h.optimizer_bandwidth_Bps}}) {
      if (value <= 0) {
        throw ConfigError(fmt::format("{}: must be greater than zero", link.where(key)));
      }
    }
    t.gpu.host_link = h;
  }

  // --- node: one NVLink domain, its trays and the GPUs a job uses ---
  const Mapping node = top.child("node");
  const int64_t domain = node.integer("gpus_per_node");
  const int64_t tray = node.has("gpus_per_tray") ? node.integer("gpus_per_tray") : domain;
  if (domain % tray != 0) {
    throw ConfigError(fmt::format(
        "{}: {} GPUs per tray do not fill node.gpus_per_node = {} (allowed: a divisor of {}; "
        "GB200 NVL72: 4)",
        node.where("gpus_per_tray"), tray, domain, domain));
  }
  const int64_t used =
      node.has("gpus_used_per_node") ? node.integer("gpus_used_per_node") : domain;
  if (used > domain) {
    throw ConfigError(fmt::format(
        "{}: {} GPUs used per NVLink domain, but node.gpus_per_node = {} (allowed: 1 to {})",
        node.where("gpus_used_per_node"), used, domain, domain));
  }
  if (used % tray != 0) {
    throw ConfigError(fmt::format(
        "{}: {} GPUs are not whole trays of node.gpus_per_tray = {} (allowed: a multiple of {} "
        "up to {}; a job takes whole hosts)",
        node.where("gpus_used_per_node"), used, tray, tray, domain));
  }
  t.node.gpus_per_node = used;
  t.node.nvlink_domain_gpus = domain;
  t.node.gpus_per_tray = tray;
  t.node.nvlink_bandwidth_Bps = node.quantity("nvlink_bandwidth");
  t.node.nvlink_latency_s = node.quantity("nvlink_latency");
  t.node.nvls = node.boolean("nvls");
  if (node.has("collectives")) {
    const std::string library = node.text("collectives");
    if (library != "nccl" && library != "mpi") {
      throw ConfigError(fmt::format("{}: unknown library \"{}\" (allowed: nccl, mpi)",
                                    node.where("collectives"), library));
    }
    t.node.nccl = library == "nccl";
  }

  // --- nic ---
  const Mapping nic =
      top.child("nic");
  const int64_t nics = nic.integer("nics_per_node");
  if (domain % nics != 0) {
    throw ConfigError(fmt::format(
        "{}: {} NICs cannot be shared evenly by node.gpus_per_node = {} GPUs (allowed: a "
        "divisor of {}; DGX nodes have one NIC per GPU)",
        nic.where("nics_per_node"), nics, domain, domain));
  }
  if (nics * used % domain != 0) {
    throw ConfigError(fmt::format(
        "{}: {} GPUs of {} do not use whole NICs ({} NICs per domain, one per {} GPUs) "
        "(allowed: a multiple of {})",
        node.where("gpus_used_per_node"), used, domain, nics, domain / nics, domain / nics));
  }
  // The job's rails: the NICs of the GPUs it uses (GPU j on NIC j x nics / domain).
  t.nic.nics_per_node = nics * used / domain;
  t.nic.line_rate_Bps = nic.quantity("line_rate");
  t.nic.latency_s = nic.quantity("latency");

  // --- fabric ---
  const Mapping fabric = top.child("fabric");
  FabricSpec& f = t.fabric;
  f.kind = fabric.text("kind");
  if (f.kind != kFabricKind && f.kind != kDualPlaneKind) {
    throw ConfigError(fmt::format("{}: unknown kind \"{}\" (allowed: {}, {})",
                                  fabric.where("kind"), f.kind, kFabricKind, kDualPlaneKind));
  }
  f.planes = f.kind == kDualPlaneKind ? 2 : 1;
  if (fabric.has("ports_down")) {
    if (f.planes == 1) {
      throw ConfigError(fmt::format(
          "{}: a NIC of a {} has one port (allowed: kind {}, or leave the key out)",
          fabric.where("ports_down"), kFabricKind, kDualPlaneKind));
    }
    const std::string text = fabric.text("ports_down");
    for (size_t at = 0; at <= text.size();) {
      size_t end = text.find(',', at);
      if (end == std::string::npos) end = text.size();
      std::string name = text.substr(at, end - at);
      name.erase(0, name.find_first_not_of(" \t"));
      name.erase(name.find_last_not_of(" \t") + 1);
      at = end + 1;
      long index = -1, rail = -1, plane = -1;  // NOLINT(runtime/int): sscanf's %ld
      int consumed = 0;
      const bool ok = std::sscanf(name.c_str(), "node%ld-nic%ld-plane%ld%n", &index, &rail, &plane,
                                  &consumed) == 3 &&
                      consumed == static_cast<int>(name.size()) && index >= 0 && rail >= 0 &&
                      rail < t.nic.nics_per_node && plane >= 0 && plane < f.planes;
      if (!ok) {
        throw ConfigError(fmt::format(
            "{}: '{}' is not a NIC port (allowed: node<i>-nic<r>-plane<p>, r 0..{}, p 0..{}, "
            "comma-separated)",
            fabric.where("ports_down"), name, t.nic.nics_per_node - 1, f.planes - 1));
      }
      f.ports_down.push_back({index, rail, plane});
    }
  }
  f.tiers = fabric.integer("tiers");
  if (f.tiers != 2 && f.tiers != 3) {
    throw ConfigError(fmt::format("{}: {} tiers are not supported (allowed: 2, 3)",
                                  fabric.where("tiers"), f.tiers));
  }
  f.switch_radix = fabric.integer("switch_radix");
  if (f.tiers == 3 && f.switch_radix % 2 != 0) {
    throw ConfigError(fmt::format(
        "{}: a three-tier fat tree needs an even radix (spines split k/2 down, k/2 up), got {}",
        fabric.where("switch_radix"), f.switch_radix));
  }
  std::tie(f.oversubscription_down, f.oversubscription_up) =
      fabric.ratio("oversubscription");
  if (fabric.has("spine_oversubscription")) {
    if (f.tiers != 3) {
      throw ConfigError(fmt::format(
          "{}: a spine's uplinks go to the cores of a three-tier fat tree; this fabric has {} "
          "tiers (allowed: tiers 3, or leave the key out)",
          fabric.where("spine_oversubscription"), f.tiers));
    }
    std::tie(f.spine_oversubscription_down, f.spine_oversubscription_up) =
        fabric.ratio("spine_oversubscription");
  }
  const int64_t down = leaf_down_ports(f);
  if (down < 1 || down >= f.switch_radix) {
    throw ConfigError(fmt::format(
        "{}: {}:{} leaves {} of {} leaf ports toward nodes; a leaf needs at least one port down "
        "and one up",
        fabric.where("oversubscription"), f.oversubscription_down, f.oversubscription_up, down,
        f.switch_radix));
  }
  f.leaf_switches_per_scalable_unit = fabric.integer("leaf_switches_per_scalable_unit");
  if (f.leaf_switches_per_scalable_unit != nics * f.planes) {
    throw ConfigError(fmt::format(
        "{}: {} leaves per scalable unit, but a rail-optimized fabric has one leaf per rail{} "
        "(allowed: nic.nics_per_node{} = {})",
        fabric.where("leaf_switches_per_scalable_unit"), f.leaf_switches_per_scalable_unit,
        f.planes > 1 ? " and plane" : "", f.planes > 1 ? " x 2 planes" : "", nics * f.planes));
  }
  f.nodes_per_scalable_unit = fabric.integer("nodes_per_scalable_unit");
  if (f.nodes_per_scalable_unit > down) {
    throw ConfigError(fmt::format(
        "{}: {} nodes per scalable unit do not fit a leaf with {} ports toward nodes (radix {}, "
        "oversubscription {}:{}) (allowed: 1 to {})",
        fabric.where("nodes_per_scalable_unit"), f.nodes_per_scalable_unit, down, f.switch_radix,
        f.oversubscription_down, f.oversubscription_up, down));
  }
  f.link_rate_Bps = fabric.quantity("link_rate");
  f.hop_latency_s = fabric.quantity("hop_latency");
  t.node_groups = parse_node_groups(top, t, origin, base_dir);
  parse_overrides(top, t, origin);
  return t;
}

/// The file's link_overrides and switch_overrides (none when absent): each item's keys and
/// values, at least one setting per item; then their names (check_fabric_overrides).
void parse_overrides(const Mapping& top, TopologySpec& t, const std::string& origin) {
  const auto positive = [](const Mapping& item, const char* key) {
    const double v = item.quantity(key);
    if (!(v > 0)) throw ConfigError(fmt::format("{}: must be greater than zero", item.where(key)));
    return v;
  };
  if (top.has("link_overrides")) {
    int index = 0;
    for (const auto& [yaml, line] : top.list("link_overrides")) {
      const Mapping item(yaml, origin, "link_overrides", line);
      LinkOverride o;
      o.where = fmt::format("{}: link_overrides[{}]", place(origin, line), index++);
      o.link = item.text("link");
      if (item.has("bandwidth")) o.bandwidth_Bps = positive(item, "bandwidth");
      if (item.has("latency")) o.latency_s = item.quantity("latency");
      if (item.has("down")) o.down = item.boolean("down");
      if (!o.bandwidth_Bps && !o.latency_s && !item.has("down")) {
        throw ConfigError(fmt::format(
            "{}: link '{}': no setting (allowed: at least one of bandwidth, latency, down)",
            o.where, o.link));
      }
      if (o.down && (o.bandwidth_Bps || o.latency_s)) {
        throw ConfigError(fmt::format(
            "{}: link '{}': down with a bandwidth or latency (a cable down carries nothing: give "
            "down alone)",
            o.where, o.link));
      }
      t.link_overrides.push_back(std::move(o));
    }
  }
  if (top.has("switch_overrides")) {
    int index = 0;
    for (const auto& [yaml, line] : top.list("switch_overrides")) {
      const Mapping item(yaml, origin, "switch_overrides", line);
      SwitchOverride o;
      o.where = fmt::format("{}: switch_overrides[{}]", place(origin, line), index++);
      o.name = item.text("switch");
      if (item.has("hop_latency")) o.hop_latency_s = item.quantity("hop_latency");
      if (item.has("down")) o.down = item.boolean("down");
      if (!o.hop_latency_s && !item.has("down")) {
        throw ConfigError(fmt::format(
            "{}: switch '{}': no setting (allowed: at least one of hop_latency, down)", o.where,
            o.name));
      }
      if (o.down && o.hop_latency_s) {
        throw ConfigError(fmt::format(
            "{}: switch '{}': down with a hop_latency (a switch down carries nothing: give down "
            "alone)",
            o.where, o.name));
      }
      t.switch_overrides.push_back(std::move(o));
    }
  }
  check_fabric_overrides(t);
}

/// The first key of the node and nic sections that set the shape of an NVLink domain and its
/// rails (what every node of a topology shares: rank placement, the rails of the fabric, the
/// collectives library) whose values differ between `a` and `b`, with both values as text;
/// nullopt when none does. The rates (NVLink bandwidth and latency, NVLS, NIC line rate and
/// latency) may differ per node group.
std::optional<std::tuple<std::string, std::string, std::string>> first_shape_difference(
    const TopologySpec& a, const TopologySpec& b) {
  auto count = [](int64_t v) { return std::to_string(v); };
  const std::initializer_list<std::tuple<const char*, std::string, std::string>> keys = {
      {"node.gpus_per_node", count(a.node.nvlink_domain_gpus), count(b.node.nvlink_domain_gpus)},
      {"node.gpus_used_per_node", count(a.node.gpus_per_node), count(b.node.gpus_per_node)},
      {"node.gpus_per_tray", count(a.node.tray_gpus()), count(b.node.tray_gpus())},
      {"node.collectives", a.node.nccl ? "nccl" : "mpi", b.node.nccl ? "nccl" : "mpi"},
      {"nic.nics_per_node", count(a.nic.nics_per_node), count(b.nic.nics_per_node)},
  };
  for (const auto& [key, va, vb] : keys) {
    if (va != vb) return std::make_tuple(std::string(key), va, vb);
  }
  return std::nullopt;
}

std::vector<NodeGroup> parse_node_groups(const Mapping& top, const TopologySpec& t,
                                         const std::string& origin,
                                         const std::filesystem::path& base_dir) {
  std::vector<NodeGroup> groups;
  if (!top.has("node_groups")) return groups;
  for (const auto& [yaml, line] : top.list("node_groups")) {
    const Mapping item(yaml, origin, "node_groups", line);
    NodeGroup g;
    g.name = item.text("name");
    for (const NodeGroup& before : groups) {
      if (before.name == g.name) {
        throw ConfigError(fmt::format("{}: duplicate group name \"{}\"", item.where("name"),
                                      g.name));
      }
    }
    g.nodes = item.integer("nodes");
    const std::filesystem::path file = base_dir / item.text("node_template");
    TopologySpec tmpl;
    try {
      tmpl = load_topology(file);
    } catch (const Error& e) {
      throw ConfigError(fmt::format("{}: group \"{}\": {}", item.where("node_template"), g.name,
                                    e.what()));
    }
    if (!tmpl.node_groups.empty()) {
      throw ConfigError(fmt::format(
          "{}: group \"{}\": {} has node_groups itself (allowed: a topology of one GPU type)",
          item.where("node_template"), g.name, file.string()));
    }
    if (const auto diff = first_shape_difference(t, tmpl)) {
      const auto& [key, mine, theirs] = *diff;
      throw ConfigError(fmt::format(
          "{}: group \"{}\": {} of {} is {}, this file's is {}; the node groups of a topology "
          "share the shape of its NVLink domain and its rails on one fabric (allowed: a template "
          "whose node.gpus_per_node, gpus_used_per_node, gpus_per_tray, collectives and "
          "nic.nics_per_node equal this file's; NVLink and NIC rates may differ, e.g. DGX A100 "
          "nodes beside DGX H100 ones)",
          item.where("node_template"), g.name, key, file.string(), theirs, mine));
    }
    g.gpu = tmpl.gpu;
    g.node_template = file;
    const NodeSpec& n = tmpl.node;
    if (n.nvlink_bandwidth_Bps != t.node.nvlink_bandwidth_Bps ||
        n.nvlink_latency_s != t.node.nvlink_latency_s || n.nvls != t.node.nvls) {
      g.node = n;
    }
    if (tmpl.nic.line_rate_Bps != t.nic.line_rate_Bps || tmpl.nic.latency_s != t.nic.latency_s) {
      g.nic = tmpl.nic;
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

}  // namespace

double GpuSpec::peak_FLOPs(Precision p) const {
  switch (p) {
    case Precision::kFp32:
      return peak.fp32_FLOPs;
    case Precision::kFp16:
      return peak.fp16_FLOPs;
    case Precision::kBf16:
    case Precision::kFp32Bf16:  // fp32 operands rounded to bf16 on the bf16 tensor cores
      return peak.bf16_FLOPs;
    case Precision::kFp8:
      return peak.fp8_FLOPs.value_or(0.0);
    case Precision::kTf32:
      return peak.tf32_FLOPs.value_or(0.0);
  }
  throw InvalidArgument("GpuSpec::peak_FLOPs: unknown precision");
}

TopologySpec load_scenario_topology(const Scenario& s) {
  TopologySpec topo = load_topology(s.cluster.topology);
  check_cluster_size(topo, s.cluster.num_gpus);
  check_gpu_supports(topo, s.training);
  check_layout_fits_nvlink_domain(topo, s);
  return topo;
}

int64_t fabric_rails(const TopologySpec& t) {
  if (t.node.gpus_per_node < 1) return t.nic.nics_per_node;
  return t.nic.nics_per_node * t.node.domain_gpus() / t.node.gpus_per_node;
}

GpuPlacement place_rank(const TopologySpec& t, int64_t rank) {
  if (rank < 0 || t.node.gpus_per_node < 1) {
    throw InvalidArgument(
        fmt::format("place_rank: rank {} on nodes of {} GPUs", rank, t.node.gpus_per_node));
  }
  GpuPlacement p;
  p.node = rank / t.node.gpus_per_node;
  p.gpu_in_node = rank % t.node.gpus_per_node;
  p.tray = p.gpu_in_node / t.node.tray_gpus();
  p.gpu_in_tray = p.gpu_in_node % t.node.tray_gpus();
  p.physical_gpu = p.node * t.node.domain_gpus() + p.gpu_in_node;
  return p;
}

void check_layout_fits_nvlink_domain(const TopologySpec& t, const Scenario& s) {
  const int64_t g = t.node.gpus_per_node;
  const std::string file = s.source.empty() ? std::string("scenario") : s.source.string();
  const std::string topo_file = t.source.empty() ? t.name : t.source.string();
  const std::string domain_key =
      g == t.node.domain_gpus()
          ? fmt::format("node.gpus_per_node = {}", g)
          : fmt::format("node.gpus_used_per_node = {} of node.gpus_per_node = {}", g,
                        t.node.domain_gpus());
  const auto check = [&](const char* key, int64_t size) {
    if (size <= g) return;
    throw ConfigError(fmt::format(
        "{}: parallelism.{}: {} exceeds the NVLink domain: the job uses {} GPUs per domain "
        "({}: {}); a tensor-parallel group's collectives run inside one NVLink domain "
        "(allowed: 1 to {})",
        file, key, size, g, topo_file, domain_key, g));
  };
  check("tensor_model_parallel_size", s.parallel.tensor_model_parallel_size);
  if (s.parallel.expert_tensor_parallel_size) {
    check("expert_tensor_parallel_size", *s.parallel.expert_tensor_parallel_size);
  }
}

namespace {
/// check_gpu_supports for `gpu`, one GPU of topology `topology`.
void check_one_gpu_supports(const std::string& topology, const GpuSpec& gpu,
                            const TrainingConfig& training) {
  if (matmul_precision(training) == Precision::kTf32 && !gpu.peak.tf32_FLOPs) {
    throw ConfigError(fmt::format(
        "training.float32_matmul_precision: high runs the matrix products on TF32 tensor cores; "
        "topology {} gives no gpu.peak_flops.tf32 for {} (give it, or use highest or medium)",
        topology, gpu.name));
  }
  const Precision matmul = matmul_precision(training);
  const bool on_bf16_cores = matmul == Precision::kBf16 || matmul == Precision::kFp32Bf16;
  if (on_bf16_cores && !(gpu.peak.bf16_FLOPs > 0)) {
    throw ConfigError(fmt::format(
        "training.{}: the matrix products run on BF16 tensor cores; {} has none (topology {} "
        "gives no gpu.peak_flops.bf16: Turing and older; use fp16 or fp32)",
        training.precision == Precision::kBf16 ? "precision: bf16"
                                               : "float32_matmul_precision: medium",
        gpu.name, topology));
  }
  if ((training.optimizer_cpu_offload || training.cpu_offloading) && !gpu.host_link) {
    throw ConfigError(fmt::format(
        "training.{}: CPU offload copies over the GPU's link to its host; topology {} gives no "
        "gpu.host_link for {} (give its bandwidth, latency, host_memory and "
        "optimizer_bandwidth, or set it false)",
        training.optimizer_cpu_offload ? "optimizer_cpu_offload" : "cpu_offloading", topology,
        gpu.name));
  }
  if (!training.fp8()) return;
  if (!gpu.peak.fp8_FLOPs) {
    throw ConfigError(fmt::format(
        "training.fp8_format: {}: {} has no FP8 tensor cores (topology {} gives no "
        "gpu.peak_flops.fp8); FP8 training needs Hopper (H100, H200) or later (B200, GB200)",
        to_string(*training.fp8_format), gpu.name, topology));
  }
  const bool blackwell = gpu.name.rfind("B", 0) == 0 || gpu.name.rfind("GB", 0) == 0;
  if (training.fp8_recipe == Fp8Recipe::kMxfp8 && !blackwell) {
    throw ConfigError(fmt::format(
        "training.fp8_recipe: mxfp8 needs Blackwell's MX block scaling (B200, GB200); {} has "
        "none (allowed here: delayed, tensorwise, blockwise)",
        gpu.name));
  }
}
}  // namespace

void check_gpu_supports(const TopologySpec& t, const TrainingConfig& training) {
  check_one_gpu_supports(t.name, t.gpu, training);
  for (const NodeGroup& g : t.node_groups) check_one_gpu_supports(t.name, g.gpu, training);
}

namespace {
/// node_group_index() naming the caller `who` in its error.
size_t group_index(const TopologySpec& t, int64_t node, const char* who) {
  if (node < 0) throw InvalidArgument(fmt::format("{}: node {} < 0", who, node));
  int64_t first = 0;
  for (size_t k = 0; k < t.node_groups.size(); ++k) {
    if (node < first + t.node_groups[k].nodes) return k;
    first += t.node_groups[k].nodes;
  }
  return t.node_groups.size();
}

/// The node group that holds NVLink domain `node`, or null for the nodes past the groups.
/// InvalidArgument for node < 0.
const NodeGroup* group_of_node(const TopologySpec& t, int64_t node, const char* who) {
  const size_t k = group_index(t, node, who);
  return k < t.node_groups.size() ? &t.node_groups[k] : nullptr;
}
}  // namespace

size_t node_group_index(const TopologySpec& t, int64_t node) {
  return group_index(t, node, "node_group_index");
}

const GpuSpec& gpu_of_node(const TopologySpec& t, int64_t node) {
  const NodeGroup* g = group_of_node(t, node, "gpu_of_node");
  return g != nullptr ? g->gpu : t.gpu;
}

const NodeSpec& node_spec_of(const TopologySpec& t, int64_t node) {
  const NodeGroup* g = group_of_node(t, node, "node_spec_of");
  return g != nullptr && g->node ? *g->node : t.node;
}

const NicSpec& nic_spec_of(const TopologySpec& t, int64_t node) {
  const NodeGroup* g = group_of_node(t, node, "nic_spec_of");
  return g != nullptr && g->nic ? *g->nic : t.nic;
}

bool has_per_node_rates(const TopologySpec& t) {
  return std::any_of(t.node_groups.begin(), t.node_groups.end(),
                     [](const NodeGroup& g) { return g.node || g.nic; });
}

bool job_on_one_node_kind(const TopologySpec& t, int64_t num_gpus) {
  if (num_gpus < 1) {
    throw InvalidArgument(fmt::format("job_on_one_node_kind: num_gpus {} < 1", num_gpus));
  }
  const int64_t last = place_rank(t, num_gpus - 1).node;
  const NodeSpec& n0 = node_spec_of(t, 0);
  const NicSpec& c0 = nic_spec_of(t, 0);
  const std::string& gpu0 = gpu_of_node(t, 0).name;
  for (int64_t node = 1; node <= last; ++node) {
    const NodeSpec& n = node_spec_of(t, node);
    const NicSpec& c = nic_spec_of(t, node);
    if (n.nvlink_bandwidth_Bps != n0.nvlink_bandwidth_Bps ||
        n.nvlink_latency_s != n0.nvlink_latency_s || n.nvls != n0.nvls ||
        c.line_rate_Bps != c0.line_rate_Bps || c.latency_s != c0.latency_s ||
        gpu_of_node(t, node).name != gpu0) {
      return false;
    }
  }
  return true;
}

JobGpus job_gpus(const TopologySpec& t, int64_t num_gpus) {
  if (num_gpus < 1) throw InvalidArgument(fmt::format("job_gpus: num_gpus {} < 1", num_gpus));
  JobGpus out;
  out.rank_type.reserve(static_cast<size_t>(num_gpus));
  for (int64_t r = 0; r < num_gpus; ++r) out.add_rank(gpu_of_node(t, place_rank(t, r).node));
  return out;
}

void JobGpus::add_rank(const GpuSpec& gpu) {
  size_t k = 0;
  while (k < types.size() && types[k].name != gpu.name) ++k;
  if (k == types.size()) {
    if (k == 255) throw InvalidArgument("JobGpus: more than 255 GPU types");
    types.push_back(gpu);
  }
  rank_type.push_back(static_cast<uint8_t>(k));
}

double smallest_gpu_memory_bytes(const TopologySpec& t) {
  double m = t.gpu.memory_bytes;
  for (const NodeGroup& g : t.node_groups) m = std::min(m, g.gpu.memory_bytes);
  return m;
}

double JobGpus::smallest_memory_bytes() const {
  double m = types.empty() ? 0.0 : types.front().memory_bytes;
  for (const GpuSpec& g : types) m = std::min(m, g.memory_bytes);
  return m;
}

double JobGpus::mean_peak_FLOPs(Precision p) const {
  if (rank_type.empty()) return types.empty() ? 0.0 : types.front().peak_FLOPs(p);
  double sum = 0;
  for (uint8_t k : rank_type) sum += types[k].peak_FLOPs(p);
  return sum / static_cast<double>(rank_type.size());
}

std::string NicPort::name() const { return fmt::format("node{}-nic{}-plane{}", node, nic, plane); }

std::string JobGpus::describe() const {
  std::vector<int64_t> count(types.size(), 0);
  for (uint8_t k : rank_type) ++count[k];
  std::string out;
  for (size_t k = 0; k < types.size(); ++k) {
    if (!out.empty()) out += " + ";
    out += fmt::format("{} x {}", count[k], types[k].name);
  }
  return out;
}

TopologySpec parse_topology(const std::string& yaml_text, const std::string& origin,
                            const std::filesystem::path& base_dir) {
  const YAML::Node root = load_single_yaml_document(yaml_text, origin, "topology file");
  try {
    return parse_root(root, origin, base_dir);
  } catch (const YAML::Exception& e) {  // defensive: yaml-cpp conversions we did not foresee
    const int line = e.mark.line >= 0 ? e.mark.line + 1 : 0;
    throw ConfigError(fmt::format("{}: {}", place(origin, line), e.msg));
  }
}

TopologySpec load_topology(const std::filesystem::path& file) {
  TopologySpec t = parse_topology(read_input_file(file, "topology file", kMaxConfigFileBytes),
                                  file.string(), file.parent_path());
  t.source = file;
  return t;
}

int64_t leaf_down_ports(const FabricSpec& f) {
  const int64_t parts = f.oversubscription_down + f.oversubscription_up;
  if (parts <= 0) return 0;
  return f.switch_radix * f.oversubscription_down / parts;
}

int64_t max_leaf_switches(const FabricSpec& f) {
  switch (f.tiers) {
    case 2:
      return f.switch_radix;
    case 3:
      return f.switch_radix * (f.switch_radix / 2);
    default:
      return 0;
  }
}

int64_t max_nodes(const TopologySpec& t) {
  // Leaves of one plane per SU (each plane has its own spines).
  const int64_t rails =
      t.fabric.leaf_switches_per_scalable_unit / std::max<int64_t>(t.fabric.planes, 1);
  if (rails <= 0) return 0;
  return max_leaf_switches(t.fabric) / rails * t.fabric.nodes_per_scalable_unit;
}

namespace {
/// The file key that sets the GPUs per node a job uses.
const char* per_node_key(const TopologySpec& t) {
  return t.node.gpus_per_node == t.node.domain_gpus() ? "gpus_per_node" : "gpus_used_per_node";
}
}  // namespace

void check_cluster_size(const TopologySpec& t, int64_t num_gpus) {
  const int64_t g = t.node.gpus_per_node;
  if (num_gpus < 1) {
    throw ConfigError(
        fmt::format("topology '{}': num_gpus = {} (allowed: a positive multiple "
                    "of {} = {})",
                    t.name, num_gpus, per_node_key(t), g));
  }
  if (g < 1 || num_gpus % g != 0) {
    const int64_t below = g >= 1 ? num_gpus / g * g : 0;
    throw ConfigError(fmt::format(
        "topology '{}': num_gpus = {} is not a multiple of {} = {} (nearest: {}{})", t.name,
        num_gpus, per_node_key(t), g, below > 0 ? fmt::format("{} or ", below) : "", below + g));
  }
  const int64_t nodes = num_gpus / g;
  const int64_t most = max_nodes(t);
  if (nodes > most) {
    const FabricSpec& f = t.fabric;
    throw ConfigError(fmt::format(
        "topology '{}': num_gpus = {} needs {} nodes, but a {}-tier fat tree of radix-{} "
        "switches ({}:{} leaves, {} rails, {} nodes per scalable unit) holds at most {} leaves "
        "= {} scalable units = {} nodes = {} GPUs",
        t.name, num_gpus, nodes, f.tiers, f.switch_radix, f.oversubscription_down,
        f.oversubscription_up, f.leaf_switches_per_scalable_unit, f.nodes_per_scalable_unit,
        max_leaf_switches(f), most / std::max<int64_t>(f.nodes_per_scalable_unit, 1), most,
        most * g));
  }
}

std::string describe_topology(const TopologySpec& t) {
  const GpuSpec& gpu = t.gpu;
  const FabricSpec& f = t.fabric;
  std::string out = t.name;
  if (!t.description.empty()) out += ": " + t.description;
  out += "\n";
  out += fmt::format(
      "  gpu     {} x {} per node: {}, {} HBM, dense {} bf16, {} fp16, {} fp32\n",
      t.node.gpus_per_node, gpu.name, format_bytes(gpu.memory_bytes),
      format_bandwidth_Bps(gpu.hbm_bandwidth_Bps), format_flop_rate_FLOPs(gpu.peak.bf16_FLOPs),
      format_flop_rate_FLOPs(gpu.peak.fp16_FLOPs), format_flop_rate_FLOPs(gpu.peak.fp32_FLOPs));
  out += fmt::format("  node    NVLink {} per GPU per direction, {} latency, NVLS {}\n",
                     format_bandwidth_Bps(t.node.nvlink_bandwidth_Bps),
                     format_time_s(t.node.nvlink_latency_s), t.node.nvls ? "on" : "off");
  if (t.node.domain_gpus() != t.node.gpus_per_node || t.node.tray_gpus() != t.node.domain_gpus()) {
    out += fmt::format(
        "  domain  NVLink domain of {} GPUs = {} trays of {}; a job uses {} per domain "
        "(trays 0..{}), {} spare\n",
        t.node.domain_gpus(), t.node.domain_gpus() / t.node.tray_gpus(), t.node.tray_gpus(),
        t.node.gpus_per_node, t.node.gpus_per_node / t.node.tray_gpus() - 1,
        t.node.domain_gpus() - t.node.gpus_per_node);
  }
  if (gpu.peak.fp4_FLOPs) {  // Blackwell: its low-precision peaks
    out += fmt::format(
        "  lowp    dense {} fp8{}\n", format_flop_rate_FLOPs(gpu.peak.fp8_FLOPs.value_or(0)),
        gpu.peak.fp4_FLOPs ? fmt::format(", {} fp4", format_flop_rate_FLOPs(*gpu.peak.fp4_FLOPs))
                           : std::string());
  }
  out += fmt::format("  nic     {} x {} per node, {} latency each\n", t.nic.nics_per_node,
                     format_line_rate_bps(t.nic.line_rate_Bps), format_time_s(t.nic.latency_s));
  const int64_t down = leaf_down_ports(f);
  out += fmt::format(
      "  fabric  {}-tier {}rail-optimized fat tree of radix-{} switches, leaves {}:{} ({} down, {} "
      "up){}, {} nodes per scalable unit, {} links, {} per hop\n",
      f.tiers,
      f.planes > 1
          ? fmt::format("dual-plane ({} ports of {} per NIC, one per plane) ", f.planes,
                        format_line_rate_bps(t.nic.line_rate_Bps / static_cast<double>(f.planes)))
          : std::string(),
      f.switch_radix, f.oversubscription_down, f.oversubscription_up, down,
      f.switch_radix - down,
      f.spine_oversubscription_down != 1 || f.spine_oversubscription_up != 1
          ? fmt::format(", spines {}:{}", f.spine_oversubscription_down,
                        f.spine_oversubscription_up)
          : std::string(),
      f.nodes_per_scalable_unit, format_line_rate_bps(f.link_rate_Bps),
      format_time_s(f.hop_latency_s));
  int64_t first = 0;
  for (const NodeGroup& g : t.node_groups) {
    std::string rates;
    if (g.node) {
      rates += fmt::format(", NVLink {} per GPU per direction, {} latency, NVLS {}",
                           format_bandwidth_Bps(g.node->nvlink_bandwidth_Bps),
                           format_time_s(g.node->nvlink_latency_s), g.node->nvls ? "on" : "off");
    }
    if (g.nic) {
      rates += fmt::format(", NICs {}, {} latency", format_line_rate_bps(g.nic->line_rate_Bps),
                           format_time_s(g.nic->latency_s));
    }
    out += fmt::format("  group   {}: nodes {} to {}: {}, {} HBM, dense {} bf16{} (from {})\n",
                       g.name, first, first + g.nodes - 1, g.gpu.name,
                       format_bytes(g.gpu.memory_bytes),
                       format_flop_rate_FLOPs(g.gpu.peak.bf16_FLOPs), rates,
                       g.node_template.filename().string());
    first += g.nodes;
  }
  if (!f.ports_down.empty()) {
    std::vector<std::string> names;
    for (const NicPort& port : f.ports_down) names.push_back(port.name());
    out += fmt::format("  down    NIC ports {}\n", fmt::join(names, ", "));
  }
  for (const LinkOverride& o : t.link_overrides) {
    std::vector<std::string> parts;
    if (o.bandwidth_Bps) parts.push_back(format_line_rate_bps(*o.bandwidth_Bps));
    if (o.latency_s) parts.push_back(format_time_s(*o.latency_s) + " latency");
    if (o.down) parts.push_back("down");
    out += fmt::format("  link    {}: {}\n", o.link, fmt::join(parts, ", "));
  }
  for (const SwitchOverride& o : t.switch_overrides) {
    out += fmt::format("  switch  {}: {}\n", o.name,
                       o.down ? std::string("down")
                              : format_time_s(*o.hop_latency_s) + " per hop");
  }
  const int64_t nodes = max_nodes(t);
  out += fmt::format("  size    up to {} leaves{} = {} scalable units = {} nodes = {} GPUs\n",
                     max_leaf_switches(f), f.planes > 1 ? " per plane" : "", nodes / std::max<int64_t>(f.nodes_per_scalable_unit, 1),
                     nodes, nodes * t.node.gpus_per_node);
  return out;
}

}  // namespace traintwin
