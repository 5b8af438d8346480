#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <functional>
#include <thread>
#include <vector>
#include <set>
#include <filesystem>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/flag_checks.hpp"
#include "cli/scenario_options.hpp"
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
    int jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
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
  // --set and the Megatron-LM flags (--tensor-model-parallel-size, ...) as every command that
  // reads a scenario; they apply to the --live scenario.
  add_scenario_flags(*cmd, live->scenario);
  cmd->add_option("--topology", live->topology,
                  "With --live: this host's topology (traintwin profile --topology-out; default: "
                  "the scenario's cluster.topology)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--iterations", live->iterations, "With --live: timed live iterations")
      ->check(positive_number())
      ->capture_default_str();
  cmd->add_option("--warmup", live->warmup, "With --live: untimed live iterations first")
      ->check(non_negative_number())
      ->capture_default_str();
  cmd->add_option("--threads", live->threads,
                  "With --live: GEMM threads per rank (default: OPENBLAS_NUM_THREADS when set, else "
                  "the cores shared among the ranks on this host, as train and profile)")
      ->check(positive_number());
  cmd->add_option("--backend", live->backend,
                  "With --live: executor backend of the live run, cpu or cuda (one GPU, fp32)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--kernels", live->kernels,
                  "With --live: print the N kernels whose live and simulated times differ most "
                  "(per call and over an iteration; 0: none)")
      ->check(non_negative_number())
      ->capture_default_str();
  cmd->add_option("--timeline", live->timeline,
                  "With --live: write rank 0's live ops (with kernel durations) as a Chrome/Perfetto "
                  "trace, for simulate --costs-from-timeline");
  cmd->add_option("--topologies", o->topologies, "Folder with the dgx-*-superpod.yaml files")->capture_default_str();
  cmd->add_option("--case", o->only, "Only the cases whose id contains this text");
  cmd->add_option("--gemm-efficiency", o->gemm, "Roofline: fraction of dense peak reached by GEMMs");
  cmd->add_option("--attention-efficiency", o->attention, "Roofline: fraction of dense peak reached by attention");
  cmd->add_option("--memory-efficiency", o->memory, "Roofline: fraction of HBM bandwidth reached by memory-bound kernels");
  cmd->add_option("--launch-overhead-us", o->launch_us, "Roofline: fixed time per kernel (us)");
  cmd->add_option("--jobs", o->jobs,
                  "Cases simulated at once, each in its own worker process (default: the number of cores)")
      ->check(positive_number());
  cmd->callback([o, live] {
    if (!live->scenario.file.empty()) return run_validate_live(*live);
    if (!live->scenario.overrides().empty()) {
      throw ConfigError("validate: --set and the Megatron-LM flags apply to a --live SCENARIO; a "
                        "calibration file's cases carry their own layouts");
    }
    if (o->file.empty()) throw ConfigError("validate: give a calibration FILE or --live SCENARIO");
    std::vector<ValidationCase> cases;
    for (ValidationCase& c : load_validation_cases(o->file, o->topologies)) {
      if (o->only.empty() || c.id.find(o->only) != std::string::npos) cases.push_back(std::move(c));
    }
    // One worker process per supported case (SimGrid: one engine per process), --jobs at once.
    std::vector<std::function<std::string()>> work;
    std::vector<size_t> job_of(cases.size(), SIZE_MAX);
    for (size_t i = 0; i < cases.size(); ++i) {
      const ValidationCase& c = cases[i];
      if (!c.unsupported.empty()) continue;
      job_of[i] = work.size();
      work.push_back([&c, o] {
        const TopologySpec topo = load_topology(c.scenario.cluster.topology);
        RooflineEfficiency eff = default_roofline_efficiency(topo.gpu);
        if (o->gemm) eff.gemm = *o->gemm;
        if (o->attention) eff.attention = *o->attention;
        if (o->memory) eff.memory = *o->memory;
        if (o->launch_us) eff.launch_overhead_s = *o->launch_us * 1e-6;
        // The measured database of the case's GPU when there is one (traces/db beside the
        // topologies folder), the calibrated roofline (with the flags above) for what it lacks.
        const std::filesystem::path db_file =
            database_dir_beside(o->topologies) / (topo.gpu.name + ".json");
        std::unique_ptr<CostModel> costs = make_roofline_cost_model(eff);
        if (std::filesystem::exists(db_file)) {
          costs = make_database_cost_model(
              std::make_shared<const CostDatabase>(CostDatabase::load(db_file)), topo.gpu,
              std::move(costs));
        }
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
    int n = 0, failed = 0, unsupported = 0;
    std::set<std::string> sources_seen;
    for (size_t i = 0; i < cases.size(); ++i) {
      const ValidationCase& c = cases[i];
      if (!c.unsupported.empty()) {
        fmt::print("{:<58} {:>9} not supported yet: {}\n", c.id, "", c.unsupported);
        ++unsupported;
        continue;
      }
      const IsolatedOutcome& out = outcomes[job_of[i]];
      if (!out.ok) {
        fmt::print("{:<58} {:>9} failed: {}\n", c.id, c.scenario.cluster.num_gpus, out.error);
        ++failed;
        continue;
      }
      const auto m = nlohmann::json::parse(out.output).get<SimulationSummary>();
      sources_seen.insert(nlohmann::json(m.cost_sources).dump());
      const double err = (m.iteration_time_s - c.measured_iteration_time_s) / c.measured_iteration_time_s;
      sum_abs += std::abs(err);
      ++n;
      fmt::print("{:<58} {:>9} {:>9.3f}s {:>9.3f}s {:>+7.1f}% {:>6.1f}%\n", c.id, c.scenario.cluster.num_gpus,
                 c.measured_iteration_time_s, m.iteration_time_s, 100 * err, 100 * m.mfu);
    }
    if (n > 0) {
      fmt::print("MAPE over {} cases: {:.1f} %{}\n", n, 100 * sum_abs / n,
                 unsupported > 0 ? fmt::format(" ({} not supported yet, left out)", unsupported)
                                 : std::string());
    }
    fmt::print("measured = the source's iteration time, or Narayanan et al.'s TFLOP/s per GPU turned into a "
               "time with their eq. 3, or NeMo's model TFLOP/s per GPU turned into a time with the model "
               "FLOPs of the summary (no causal halving); MFU against the dense peak of the GEMM dtype "
               "(FP8 peak for FP8 runs); compute costs (share of compute time by source): {}\n",
               fmt::join(sources_seen, " "));
    if (failed > 0) throw Error(fmt::format("validate: {} of {} cases failed to simulate", failed, cases.size()));
  });
}

}  // namespace traintwin::cli
