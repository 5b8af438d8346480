// The default reliability inputs; see reliability.hpp for their sources.
#include "core/reliability.hpp"

namespace traintwin {

std::string_view to_string(DegradedKind kind) {
  switch (kind) {
    case DegradedKind::kStraggler:
      return "straggler";
    case DegradedKind::kLinkDown:
      return "link_down";
    case DegradedKind::kNicDown:
      return "nic_down";
    case DegradedKind::kLinkFlap:
      return "link_flap";
  }
  return "?";
}

const DegradationSpec& episodes(const ReliabilitySpec& r, DegradedKind kind) {
  switch (kind) {
    case DegradedKind::kStraggler:
      return r.straggler;
    case DegradedKind::kLinkDown:
      return r.link_down;
    case DegradedKind::kNicDown:
      return r.nic_down;
    case DegradedKind::kLinkFlap:
      return r.link_flap;
  }
  return r.straggler;
}

ReliabilitySpec default_reliability() {
  // Llama 3 405B, 54 days on 2,048 nodes = 110,592 node-days (Dubey et al. 2024, Table 5).
  constexpr double kNodeDays = 2048.0 * 54.0;
  auto per_1000_node_days = [](double interruptions) { return interruptions / kNodeDays * 1000.0; };
  ReliabilitySpec r;
  r.failures = {
      {"gpu", {per_1000_node_days(148 + 19 + 17), 1.0}},
      {"hbm", {per_1000_node_days(72), 1.0}},
      {"network", {per_1000_node_days(35), 1.0}},
      {"cpu", {per_1000_node_days(2), 1.0}},
      {"other", {per_1000_node_days(419 - 148 - 19 - 17 - 72 - 35 - 2), 1.0}},
  };
  r.planned_interruptions_per_1000_node_days = per_1000_node_days(47);
  return r;
}

}  // namespace traintwin
