#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <thread>
#include <vector>
#include <filesystem>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "sim/cost_model.hpp"
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
    int jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  };
  auto o = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("validate", "Simulate published runs and compare with what they measured");
  cmd->add_option("file", o->file, "Calibration file (../shared/validation/calibration.yaml)")
      ->required()->check(CLI::ExistingFile);
  cmd->add_option("--topologies", o->topologies, "Folder with the dgx-*-superpod.yaml files")->capture_default_str();
  cmd->add_option("--case", o->only, "Only the cases whose id contains this text");
  cmd->add_option("--gemm-efficiency", o->gemm, "Roofline: fraction of dense peak reached by GEMMs");
  cmd->add_option("--attention-efficiency", o->attention, "Roofline: fraction of dense peak reached by attention");
  cmd->add_option("--memory-efficiency", o->memory, "Roofline: fraction of HBM bandwidth reached by memory-bound kernels");
  cmd->add_option("--launch-overhead-us", o->launch_us, "Roofline: fixed time per kernel (us)");
  cmd->add_option("--jobs", o->jobs, "Cases simulated at once, each in its own worker process (default: the number of cores)")
      ->check(CLI::PositiveNumber);
  cmd->callback([o] {
    std::vector<ValidationCase> cases;
    for (ValidationCase& c : load_validation_cases(o->file, o->topologies)) {
      if (o->only.empty() || c.id.find(o->only) != std::string::npos) cases.push_back(std::move(c));
    }
    // One worker process per case (SimGrid: one engine per process), --jobs at once.
    std::vector<std::function<std::string()>> work;
    for (const ValidationCase& c : cases) {
      work.push_back([&c, o] {
        const TopologySpec topo = load_topology(c.scenario.cluster.topology);
        RooflineEfficiency eff = default_roofline_efficiency(topo.gpu);
        if (o->gemm) eff.gemm = *o->gemm;
        if (o->attention) eff.attention = *o->attention;
        if (o->memory) eff.memory = *o->memory;
        if (o->launch_us) eff.launch_overhead_s = *o->launch_us * 1e-6;
        const auto costs = make_roofline_cost_model(eff);
        SimulationOptions opts;
        opts.record_timeline = false;
        const SimulationResult r = simulate(c.scenario, topo, *costs, opts);
        return nlohmann::json(summarize(c.scenario, topo, r)).dump();
      });
    }
    const bool tty = ::isatty(STDERR_FILENO) != 0;
    const auto outcomes = run_isolated_concurrently(work, o->jobs, [tty](const JobProgress& p) {
      fmt::print(stderr, "{}validate: {}/{} cases, {:.0f} s elapsed{}", tty ? "\r" : "", p.done,
                 p.total, p.elapsed_s, tty && p.done < p.total ? "" : "\n");
      std::fflush(stderr);
    });
    fmt::print("{:<58} {:>9} {:>10} {:>10} {:>8} {:>7}\n", "case", "GPUs", "measured", "predicted", "error", "MFU");
    double sum_abs = 0;
    int n = 0, failed = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const ValidationCase& c = cases[i];
      if (!outcomes[i].ok) {
        fmt::print("{:<58} {:>9} failed: {}\n", c.id, c.scenario.cluster.num_gpus, outcomes[i].error);
        ++failed;
        continue;
      }
      const auto m = nlohmann::json::parse(outcomes[i].output).get<SimulationSummary>();
      const double err = (m.iteration_time_s - c.measured_iteration_time_s) / c.measured_iteration_time_s;
      sum_abs += std::abs(err);
      ++n;
      fmt::print("{:<58} {:>9} {:>9.3f}s {:>9.3f}s {:>+7.1f}% {:>6.1f}%\n", c.id, c.scenario.cluster.num_gpus,
                 c.measured_iteration_time_s, m.iteration_time_s, 100 * err, 100 * m.mfu);
    }
    if (n > 0) fmt::print("MAPE over {} cases: {:.1f} %\n", n, 100 * sum_abs / n);
    fmt::print("measured = the paper's iteration time, or Narayanan et al.'s TFLOP/s per GPU turned into a "
               "time with their eq. 3; compute costs: roofline (no measured database yet)\n");
    if (failed > 0) throw Error(fmt::format("validate: {} of {} cases failed to simulate", failed, cases.size()));
  });
}

}  // namespace traintwin::cli
