#include <fmt/format.h>

#include <memory>

#include "cli/commands.hpp"
#include "sim/platform.hpp"
#include "topologies/graph.hpp"
#include "topologies/topology.hpp"

namespace traintwin::cli {

void register_topology_command(CLI::App& app) {
  struct Options {
    std::string file;
    std::optional<int64_t> num_gpus;
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("topology", "Describe a cluster topology file");
  cmd->add_option("file", o->file, "Topology file (topologies/*.yaml)")
      ->required();
  cmd->add_option("--num-gpus", o->num_gpus,
                  "Check that a cluster of this size fits the fabric and summarize its graph: "
                  "switches and links per tier, bandwidths, bisection, route hop counts");
  cmd->callback([o] {
    const TopologySpec t = load_topology(o->file);
    fmt::print("{}", describe_topology(t));
    if (o->num_gpus) {
      check_cluster_size(t, *o->num_gpus);
      fmt::print("{} GPUs = {} nodes: fits the fabric\n", *o->num_gpus,
                 *o->num_gpus / t.node.gpus_per_node);
      if (t.has_overrides()) {
        const OverrideSummary s = check_overrides(t, *o->num_gpus);
        fmt::print(
            "overrides at this size: {} link directions set ({} down), {} switches down, {} "
            "node pairs routed around them, {} past this size (left out); the graph below is "
            "the fabric as wired\n",
            s.links_set, s.links_down, s.switches_down, s.rerouted_pairs, s.left_out);
      }
      fmt::print("{}", describe_cluster_graph(build_cluster_graph(t, *o->num_gpus)));
    }
  });
}

}  // namespace traintwin::cli
