#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "cli/commands.hpp"
#include "cli/format.hpp"
#include "cli/memory_table.hpp"
#include "cli/scenario_options.hpp"
#include "core/memory.hpp"
#include "topologies/topology.hpp"

namespace traintwin::cli {

void register_memory_command(CLI::App& app) {
  auto opts = std::make_shared<ScenarioOptions>();
  auto* cmd = app.add_subcommand("memory", "Per-stage memory of one GPU and whether it fits");
  add_scenario_options(*cmd, *opts);
  cmd->callback([opts] {
    const Scenario s = opts->load();
    const TopologySpec topo = load_scenario_topology(s);
    fmt::print("{}", memory_table(s, topo));
  });
}

}  // namespace traintwin::cli
