// The default reliability inputs; see reliability.hpp for their sources.
#include "core/reliability.hpp"

namespace traintwin {

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
