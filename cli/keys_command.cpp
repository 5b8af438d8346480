// `traintwin keys`: the scenario key reference (core/scenario_reference.hpp), generated from the
// schema, or with `--topology` the topology file's (topologies/topology_schema.hpp); `--readme
// FILE` writes it into FILE between its markers instead of printing it.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "core/input_file.hpp"
#include "core/posix_file.hpp"
#include "core/scenario_reference.hpp"
#include "topologies/topology_schema.hpp"

namespace traintwin::cli {

void register_keys_command(CLI::App& app) {
  auto readme = std::make_shared<std::string>();
  auto topology = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand(
      "keys", "Print every scenario key (type, default, allowed values, Megatron-LM flag) as "
              "markdown tables");
  cmd->add_option("--readme", *readme,
                  "Write the tables into this file between its key-reference markers "
                  "(scenarios/README.md; topologies/README.md with --topology) instead of "
                  "printing them");
  cmd->add_flag("--topology", *topology,
                "The keys of a cluster topology file (topologies/*.yaml) instead of a scenario's");
  cmd->callback([readme, topology] {
    if (readme->empty()) {
      fmt::print("{}", *topology ? topology_key_reference() : scenario_key_reference());
      return;
    }
    const std::string text = read_input_file(*readme, "README", kMaxConfigFileBytes);
    const std::string updated =
        *topology ? with_topology_key_reference(text) : with_key_reference(text);
    if (updated == text) {
      fmt::print("{}: key reference up to date\n", *readme);
      return;
    }
    AtomicFile out(*readme);
    out.write(updated);
    out.commit();
    fmt::print("{}: key reference updated\n", *readme);
  });
}

}  // namespace traintwin::cli
