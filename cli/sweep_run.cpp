// Running `traintwin sweep` (cli/sweep_run.hpp): checks, enumeration, evaluation, progress.
// Next in the flow: cli/sweep_command.cpp prints the outcome.
#include "cli/sweep_run.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cli/sweep_mpi.hpp"
#include "core/error.hpp"
#include "core/posix_file.hpp"
#include "sim/cost_model.hpp"

namespace traintwin::cli {
namespace {

std::string duration(double s) {
  if (s < 60) return fmt::format("{:.0f} s", s);
  if (s < 3600) return fmt::format("{:.0f} min {:02.0f} s", std::floor(s / 60), std::fmod(s, 60));
  return fmt::format("{:.0f} h {:02.0f} min", std::floor(s / 3600), std::fmod(s / 60, 60));
}

/// Progress on stderr: a redrawn bar on a terminal, else a line per tenth of the work.
ProgressCallback progress_bar() {
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  auto last_tenth = std::make_shared<int64_t>(-1);
  return [tty, last_tenth](const SweepProgress& p) {
    const double frac =
        p.total > 0 ? static_cast<double>(p.done) / static_cast<double>(p.total) : 1.0;
    const int width = 30;
    const int filled = static_cast<int>(frac * width);
    const std::string eta = p.done > 0 && p.done < p.total ? ", ETA " + duration(p.eta_s) : "";
    const std::string line =
        fmt::format("sweep [{}{}] {}/{} configurations, {:.2f}/s, {} elapsed{}",
                    std::string(filled, '#'), std::string(width - filled, '.'), p.done, p.total,
                    p.rate_per_s, duration(p.elapsed_s), eta);
    if (tty) {
      fmt::print(stderr, "\r{:<100}{}", line, p.done == p.total ? "\n" : "");
    } else {
      const int64_t tenth = p.total > 0 ? p.done * 10 / p.total : 10;
      if (tenth == *last_tenth && p.done != p.total) return;
      *last_tenth = tenth;
      fmt::print(stderr, "{}\n", line);
    }
    std::fflush(stderr);
  };
}

/// Checks that fail before any simulation: the cluster size of every GPU count, FP8 on a GPU
/// without it (naming the GPU), and optimizer CPU offload on a topology without gpu.host_link
/// (naming the flag, the topology and the GPU).
void check_sweep(const Scenario& base, const TopologySpec& topo, const SweepAxes& axes) {
  check_cluster_size(topo, base.cluster.num_gpus);
  for (const int64_t n : axes.num_gpus) check_cluster_size(topo, n);
  if (std::find(axes.fp8.begin(), axes.fp8.end(), true) != axes.fp8.end()) {
    TrainingConfig with_fp8 = base.training;
    with_fp8.fp8_format = base.training.fp8_format.value_or(Fp8Format::kHybrid);
    check_gpu_supports(topo, with_fp8);
  }
  const auto& off = axes.optimizer_cpu_offload;
  if (std::find(off.begin(), off.end(), true) != off.end()) {
    TrainingConfig offloaded = base.training;
    offloaded.optimizer_cpu_offload = true;
    try {
      check_gpu_supports(topo, offloaded);
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("--optimizer-cpu-offload on: {}", e.what()));
    }
  }
}

/// Evaluates `share` by `mode`: the SimGrid replay in worker processes (simulate), the
/// analytical estimator in this process (analytical), or (auto) the estimator for every
/// configuration and the replay for the top K = max(top, 1), ranked again.
std::vector<SweepRow> evaluate_share(std::vector<SweepConfiguration> share,
                                     const std::string& mode, int top, const TopologySpec& topo,
                                     const std::shared_ptr<const CostModel>& costs,
                                     SweepOptions options) {
  if (mode == "simulate") {
    options.isolate = true;
    return run_sweep(std::move(share), make_simulation_evaluator(topo, costs), options);
  }
  options.isolate = false;
  const Evaluator analytical = make_analytical_evaluator(topo, costs);
  std::vector<SweepRow> rows = run_sweep(std::move(share), analytical, options);
  if (mode == "auto") {
    // Replay the top K of the analytical ranking with the simulator and rank again.
    std::vector<std::pair<double, const SweepConfiguration*>> candidates;
    for (const SweepRow& r : rows) {
      if (r.status == SweepStatus::kRanked) candidates.emplace_back(r.tokens_per_s, &r.config);
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<SweepConfiguration> best;
    for (const auto& [tokens_per_s, config] : candidates) {
      if (static_cast<int64_t>(best.size()) >= std::max<int64_t>(top, 1)) break;
      best.push_back(*config);
    }
    SweepOptions replay = options;
    replay.isolate = true;
    const std::vector<SweepRow> replayed =
        run_sweep(best, make_simulation_evaluator(topo, costs), replay);
    for (const SweepRow& r : replayed) {
      for (SweepRow& row : rows) {
        if (row.config.index == r.config.index) row = r;
      }
    }
    rows = rank_rows(std::move(rows));
  }
  return rows;
}

}  // namespace

std::optional<SweepOutcome> run_sweep_request(const SweepRequest& request) {
  Scenario base = load_scenario(request.scenario_file, request.overrides);
  // The output folder is checked before the sweep, not after it.
  if (!request.out_dir.empty()) prepare_output_directory(request.out_dir, "--out");
  TopologySpec topo = load_topology(base.cluster.topology);
  check_sweep(base, topo, request.axes);
  // The rules and memory model of every row, on as many threads as the sweep has workers.
  // Each stage against its own GPUs' memory on a mixed cluster.
  std::vector<int64_t> gpu_counts = request.axes.num_gpus;
  gpu_counts.push_back(base.cluster.num_gpus);
  const StageMemoryCapacity capacity = stage_memory_capacity(topo, gpu_counts);
  const double smallest = smallest_gpu_memory_bytes(topo);
  // With CPU offload the host memory too (the topology's gpu.host_link.host_memory, if given).
  const double host_memory = topo.gpu.host_link ? topo.gpu.host_link->host_memory_bytes : 0.0;
  auto configurations = enumerate_configurations(base, request.axes, smallest, request.jobs,
                                                 capacity, host_memory);
  // A TP group larger than the GPUs the job uses per NVLink domain is invalid, as simulate says.
  for (SweepConfiguration& c : configurations) {
    if (!c.valid) continue;
    try {
      check_layout_fits_nvlink_domain(topo, c.scenario);
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      const auto key = what.find("parallelism.");
      c.valid = false;
      c.invalid_reason = key == std::string::npos ? what : what.substr(key);
      c.peak_memory_bytes = 0;
      c.excess_memory_bytes = 0;
      c.host_memory_bytes = 0;
      c.host_excess_memory_bytes = 0;
    }
  }

  const auto db_dir = default_database_dir(base.cluster.topology);
  const std::shared_ptr<const CostModel> costs =
      make_cluster_cost_model(topo, db_dir, request.cost_db);
  // The split axis: each valid layout's searched (or listed) uneven splits beside it.
  int64_t unsearched = 0;
  configurations = add_pipeline_splits(std::move(configurations), request.pipeline_split,
                                       estimated_stage_costs(topo, costs), smallest, capacity,
                                       &unsearched);
  // Under mpirun/srun every rank evaluates its share; rank 0 gathers, ranks and prints.
  const bool mpi = launched_by_mpi();
  const bool root_process = !mpi || std::getenv("OMPI_COMM_WORLD_RANK") == nullptr ||
                            std::string(std::getenv("OMPI_COMM_WORLD_RANK")) == "0";
  SweepOptions options;
  options.jobs = request.jobs;
  options.evaluate_out_of_memory = request.simulate_oom;
  if (root_process) options.progress = progress_bar();
  const auto run_share = [&](std::vector<SweepConfiguration> share) {
    return evaluate_share(std::move(share), request.mode, request.top, topo, costs, options);
  };
  std::vector<SweepRow> rows;
  if (mpi) {
    bool is_root = false;
    rows = mpi_sweep(configurations, run_share, is_root);
    if (!is_root) return std::nullopt;
  } else {
    rows = run_share(std::move(configurations));
  }
  return SweepOutcome{std::move(base), std::move(topo), std::move(rows), unsearched};
}

}  // namespace traintwin::cli
