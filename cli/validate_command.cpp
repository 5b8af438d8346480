#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <set>
#include <filesystem>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/validate_live.hpp"
#include "core/error.hpp"
#include "sim/cost_model.hpp"
#include "traces/cost_db.hpp"
#include "sim/isolated.hpp"
#include "sim/replay.hpp"
#include "sim/summary.hpp"
#include "sim/validation.hpp"
#include "topologies/topology.hpp"

namespace traintwin::cli {

void register_validate_command(CLI::App& app) {
  struct Options {
    std::string file;
    std::string topologies = "topologies";
    std::string only;
    std::optional<double> gemm, attention, memory, launch_us;
  };
  auto o = std::make_shared<Options>();
  auto live = std::make_shared<ValidateLiveOptions>();
  auto* cmd = app.add_subcommand(
      "validate",
      "Simulate published runs and compare with what they measured; --live: run a scenario here "
      "and compare with its simulation on this host's topology");
  cmd->add_option("file", o->file, "Calibration file (../shared/validation/calibration.yaml)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--live", live->scenario.file,
                  "Run this scenario live on this machine (mpirun -np N for N ranks) and compare "
                  "with its simulation on this host's topology and measured database")
      ->check(CLI::ExistingFile);
  cmd->add_option("--set", live->scenario.set, "With --live: override a scenario key (KEY=VALUE)");
  cmd->add_option("--topology", live->topology,
                  "With --live: this host's topology (traintwin profile --topology-out; default: "
                  "the scenario's cluster.topology)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--iterations", live->iterations, "With --live: timed live iterations")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--warmup", live->warmup, "With --live: untimed live iterations first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--threads", live->threads,
                  "With --live: GEMM threads per rank (default: the cores shared among the ranks, "
                  "as train)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--timeline", live->timeline,
                  "With --live: write rank 0's live ops (with kernel durations) as a Chrome/Perfetto "
                  "trace, for simulate --costs-from-timeline");
  cmd->add_option("--topologies", o->topologies, "Folder with the dgx-*-superpod.yaml files")->capture_default_str();
  cmd->add_option("--case", o->only, "Only the cases whose id contains this text");
  cmd->add_option("--gemm-efficiency", o->gemm, "Roofline: fraction of dense peak reached by GEMMs");
  cmd->add_option("--attention-efficiency", o->attention, "Roofline: fraction of dense peak reached by attention");
  cmd->add_option("--memory-efficiency", o->memory, "Roofline: fraction of HBM bandwidth reached by memory-bound kernels");
  cmd->add_option("--launch-overhead-us", o->launch_us, "Roofline: fixed time per kernel (us)");
  cmd->callback([o, live] {
    if (!live->scenario.file.empty()) return run_validate_live(*live);
    if (o->file.empty()) throw ConfigError("validate: give a calibration FILE or --live SCENARIO");
    const auto cases = load_validation_cases(o->file, o->topologies);
    fmt::print("{:<58} {:>9} {:>10} {:>10} {:>8} {:>7}\n", "case", "GPUs", "measured", "predicted", "error", "MFU");
    double sum_abs = 0;
    int n = 0;
    std::set<std::string> sources_seen;
    for (const ValidationCase& c : cases) {
      if (!o->only.empty() && c.id.find(o->only) == std::string::npos) continue;
      const TopologySpec topo = load_topology(c.scenario.cluster.topology);
      const std::string out = run_isolated([&] {
        RooflineEfficiency eff = default_roofline_efficiency(topo.gpu);
        if (o->gemm) eff.gemm = *o->gemm;
        if (o->attention) eff.attention = *o->attention;
        if (o->memory) eff.memory = *o->memory;
        if (o->launch_us) eff.launch_overhead_s = *o->launch_us * 1e-6;
        // The measured database of the case's GPU when there is one (traces/db beside the
        // topologies folder), the calibrated roofline (with the flags above) for what it lacks.
        const std::filesystem::path db_file = std::filesystem::absolute(o->topologies).parent_path() /
                                              "traces" / "db" / (topo.gpu.name + ".json");
        std::unique_ptr<CostModel> costs = make_roofline_cost_model(eff);
        if (std::filesystem::exists(db_file)) {
          costs = make_database_cost_model(
              std::make_shared<const CostDatabase>(CostDatabase::load(db_file)), topo.gpu,
              std::move(costs));
        }
        SimulationOptions opts;
        opts.record_timeline = false;
        const SimulationResult r = simulate(c.scenario, topo, *costs, opts);
        return summary_json(c.scenario, topo, r).dump();
      });
      const auto j = nlohmann::json::parse(out);
      const double predicted = j["iteration_time_s"].get<double>();
      if (j.contains("cost_sources")) sources_seen.insert(j["cost_sources"].dump());
      const double err = (predicted - c.measured_iteration_time_s) / c.measured_iteration_time_s;
      sum_abs += std::abs(err);
      ++n;
      fmt::print("{:<58} {:>9} {:>9.3f}s {:>9.3f}s {:>+7.1f}% {:>6.1f}%\n", c.id, c.scenario.cluster.num_gpus,
                 c.measured_iteration_time_s, predicted, 100 * err, 100 * j["mfu"].get<double>());
      std::fflush(stdout);
    }
    if (n > 0) fmt::print("MAPE over {} cases: {:.1f} %\n", n, 100 * sum_abs / n);
    fmt::print("measured = the paper's iteration time, or Narayanan et al.'s TFLOP/s per GPU turned into a "
               "time with their eq. 3; compute costs (share of compute time by source): {}\n",
               fmt::join(sources_seen, " "));
  });
}

}  // namespace traintwin::cli
