// `traintwin export --format chakra SCENARIO --out DIR`: the scenario's Program as Chakra
// execution traces, one file per rank (sim/chakra_export.hpp), with compute durations from the
// cost model simulate uses (the measured database beside topologies/, the calibrated roofline for
// the rest).
#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/scenario_options.hpp"
#include "core/posix_file.hpp"
#include "sim/chakra_export.hpp"
#include "sim/session.hpp"

namespace traintwin::cli {
namespace {

struct ExportOptions {
  ScenarioOptions scenario;
  std::string format = "chakra";
  std::string out_dir;
  std::vector<int64_t> ranks;
  std::string cost_db;
  std::string all_gather_comm_size = "input";
};

}  // namespace

void register_export_command(CLI::App& app) {
  auto o = std::make_shared<ExportOptions>();
  auto* cmd = app.add_subcommand(
      "export",
      "Write the scenario's Program in an exchange format: chakra (MLCommons Chakra execution "
      "traces, one DIR/<name>.<rank>.et per rank, and DIR/<name>.comm_groups.json, for ASTRA-sim)");
  add_scenario_options(*cmd, o->scenario);
  cmd->add_option("--format", o->format, "Trace format")
      ->capture_default_str()
      ->check(CLI::IsMember({"chakra"}));
  cmd->add_option("--out", o->out_dir, "Folder to write into (created if missing)")->required();
  cmd->add_option("--ranks", o->ranks, "Only these global ranks, e.g. 0,8,16 (default: all)")
      ->delimiter(',');
  cmd->add_option("--cost-db", o->cost_db,
                  "Measured cost database (default: traces/db/<gpu>.json beside topologies/, if "
                  "any)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--all-gather-comm-size", o->all_gather_comm_size,
                  "What an ALL_GATHER's comm_size counts: each rank's input (what ASTRA-sim "
                  "reads) or the gathered output (SimAI's workloads, nccl-tests' size); written "
                  "to each file's GlobalMetadata, which traintwin's import reads")
      ->capture_default_str()
      ->check(CLI::IsMember({"input", "output"}));
  cmd->callback([o] {
    const Scenario s = o->scenario.load();
    prepare_output_directory(o->out_dir, "--out");  // before the work, not after it
    const SimulationSession session(s, SessionCostSource{o->cost_db, {}, {}}, {});
    ChakraWriteOptions write;
    write.all_gather_size = *parse_chakra_all_gather_size(o->all_gather_comm_size);
    const ChakraExport e =
        export_chakra(s, session.costs(), session.topology(), o->out_dir, o->ranks, write);
    fmt::print("wrote {} Chakra ET files ({} nodes, schema version {}) and {} into {}\n",
               e.files.size(), e.nodes, kChakraEtVersion, e.comm_groups.filename().string(),
               o->out_dir);
  });
}

}  // namespace traintwin::cli
