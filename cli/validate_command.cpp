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
#include "core/memory.hpp"
#include "core/memory_reserve.hpp"
#include "sim/calibration_refit.hpp"
#include "sim/collective_validation.hpp"
#include "sim/cost_model.hpp"
#include "traces/cost_db.hpp"
#include "sim/isolated.hpp"
#include "sim/replay.hpp"
#include "sim/summary.hpp"
#include "sim/validation.hpp"
#include "topologies/topology.hpp"

namespace traintwin::cli {

namespace {

using EfficiencyOf = std::function<RooflineEfficiency(const GpuSpec&)>;

/// Runs `work` in worker processes with a progress line on stderr ("validate: 3/10 cases").
std::vector<IsolatedOutcome> run_with_progress(const std::vector<std::function<std::string()>>& work,
                                               int jobs, const char* what) {
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  return run_isolated_concurrently(work, jobs, [tty, what](const JobProgress& p) {
    fmt::print(stderr, "{}validate: {}/{} {}, {:.0f} s elapsed{}", tty ? "\r" : "", p.done, p.total,
               what, p.elapsed_s, tty && p.done < p.total ? "" : "\n");
    std::fflush(stderr);
  });
}

bool in_sample(const ValidationCase& c) {
  const auto& ids = roofline_calibration_case_ids();
  return std::find(ids.begin(), ids.end(), c.id) != ids.end();
}

/// The table of predicted vs measured iteration times at the calibrated roofline, each case marked
/// in-sample (the roofline was fitted on it) or held out, and the MAPE of each kind. Throws Error
/// when a case fails to simulate (after printing the table).
void print_validation_table(const std::vector<ValidationCase>& cases, const EfficiencyOf& efficiency_of,
                            const std::string& topologies, int jobs) {
  // One worker process per supported case (SimGrid: one engine per process), `jobs` at once.
  std::vector<std::function<std::string()>> work;
  std::vector<size_t> job_of(cases.size(), SIZE_MAX);
  for (size_t i = 0; i < cases.size(); ++i) {
    const ValidationCase& c = cases[i];
    if (!c.unsupported.empty()) continue;
    job_of[i] = work.size();
    work.push_back([&c, &efficiency_of, &topologies] {
      return nlohmann::json(simulate_validation_case(c, efficiency_of, topologies)).dump();
    });
  }
  const auto outcomes = run_with_progress(work, jobs, "cases");
  fmt::print("{:<58} {:>9} {:>10} {:>10} {:>8} {:>7} {:>9}\n", "case", "GPUs", "measured", "predicted",
             "error", "MFU", "fit");
  double abs_in = 0, abs_out = 0;
  int n_in = 0, n_out = 0, failed = 0, unsupported = 0;
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
    (in_sample(c) ? abs_in : abs_out) += std::abs(err);
    ++(in_sample(c) ? n_in : n_out);
    fmt::print("{:<58} {:>9} {:>9.3f}s {:>9.3f}s {:>+7.1f}% {:>6.1f}% {:>9}{}\n", c.id,
               c.scenario.cluster.num_gpus, c.measured_iteration_time_s, m.iteration_time_s,
               100 * err, 100 * m.mfu, in_sample(c) ? "in-sample" : "held-out",
               c.measured_mfu ? fmt::format("  (published MFU {:.1f}%)", 100 * *c.measured_mfu)
                              : std::string());
    if (c.measured_peak_memory_gib) {
      const double gib = 1024.0 * 1024.0 * 1024.0;
      const double measured = *c.measured_peak_memory_gib;
      const double predicted_gib = m.peak_memory_bytes / gib;
      // What a caching allocator reserves beyond its tensors (torchtitan logs max reserved
      // memory): the fragmentation share of core/memory_reserve.hpp for the stage at the peak.
      const std::vector<StageMemory> stages = memory_per_stage(c.scenario);
      const auto peak = std::max_element(stages.begin(), stages.end(), [](const auto& a, const auto& b) {
        return a.total_bytes() < b.total_bytes();
      });
      const double reserved_gib =
          predicted_gib + memory_reserve(c.scenario, *peak).fragmentation_bytes / gib;
      fmt::print("{:<58} {:>9} peak memory per GPU: published {:.1f} GiB, memory model {:.1f} GiB "
                 "({:+.1f}%), {:.1f} GiB with the allocator's fragmentation ({:+.1f}%)\n",
                 "", "", measured, predicted_gib, 100 * (predicted_gib - measured) / measured,
                 reserved_gib, 100 * (reserved_gib - measured) / measured);
    }
  }
  if (n_in + n_out > 0) {
    std::string split;
    if (n_in > 0) split += fmt::format("in-sample {:.1f} % over {}", 100 * abs_in / n_in, n_in);
    if (n_out > 0) {
      split += fmt::format("{}held-out {:.1f} % over {}", split.empty() ? "" : ", ",
                           100 * abs_out / n_out, n_out);
    }
    fmt::print("MAPE over {} cases: {:.1f} % ({}){}\n", n_in + n_out,
               100 * (abs_in + abs_out) / (n_in + n_out), split,
               unsupported > 0 ? fmt::format(" ({} not supported yet, left out)", unsupported)
                               : std::string());
  }
  fmt::print("measured = the source's iteration time, or Narayanan et al.'s TFLOP/s per GPU turned into a "
             "time with their eq. 3, or NeMo's model TFLOP/s per GPU turned into a time with the model "
             "FLOPs of the summary (no causal halving), or Megatron-Bridge's tokens/s per GPU turned into a time "
             "as global batch x sequence / (tokens/s/GPU x GPUs); MFU against the dense peak of the GEMM dtype "
             "(FP8 peak for FP8 runs); peak memory: the memory model's tensors, then with the caching "
             "allocator's fragmentation of core/memory_reserve.hpp (an assumed share of the activation "
             "bytes) added, as torchtitan logs the allocator's max reserved memory; in-sample: the roofline's efficiencies were fitted on the case "
             "(the {} cases of calibration.yaml and of published-runs-2026.yaml's GB200 runs), held-out: never fitted on (--leave-one-out refits "
             "without each case); compute costs (share of compute time by source): {}\n",
             roofline_calibration_case_ids().size(), fmt::join(sources_seen, " "));
  if (failed > 0) throw Error(fmt::format("validate: {} of {} cases failed to simulate", failed, cases.size()));
}

/// The collective rows (measured bus bandwidth of tenants sharing a fabric): predicted vs
/// published busbw per tenant, the error and the MAPE; nothing fitted (computed in this process:
/// the tenant model runs no SimGrid engine).
void print_collective_table(const std::vector<CollectiveValidationCase>& cases) {
  if (cases.empty()) return;
  fmt::print("\n{:<44} {:>9} {:>10} {:>8}  {}\n", "collective case (busbw GB/s)", "measured",
             "predicted", "error", "setting");
  double abs_sum = 0;
  int n = 0, unsupported = 0;
  for (const CollectiveValidationCase& c : cases) {
    if (!c.unsupported.empty()) {
      fmt::print("{:<44} {:>9.2f} not supported yet: {}\n", c.id, c.measured_busbw_GBps,
                 c.unsupported);
      ++unsupported;
      continue;
    }
    const CollectivePrediction p = simulate_collective_validation_case(c);
    const double err = (p.busbw_GBps - c.measured_busbw_GBps) / c.measured_busbw_GBps;
    abs_sum += std::abs(err);
    ++n;
    fmt::print("{:<44} {:>9.2f} {:>10.2f} {:>+7.1f}%  {}{}\n", c.id, c.measured_busbw_GBps,
               p.busbw_GBps, 100 * err, c.setting,
               p.bottleneck.empty() ? std::string() : "; limited by " + p.bottleneck);
  }
  if (n > 0) {
    fmt::print("MAPE over {} collective cases: {:.1f} %{}\n", n, 100 * abs_sum / n,
               unsupported > 0 ? fmt::format(" ({} not supported yet, left out)", unsupported)
                               : std::string());
  }
  fmt::print("collective cases: ring all-reduce tenants run together, each ring edge routed on the "
             "topology's fabric (the mCCS testbed's Ethernet switches by ECMP: each spine equally "
             "likely per ring edge, the mean over every outcome), rates by max-min fair share "
             "(sim/collective_tenants.hpp); busbw = algbw x 2(n-1)/n as nccl-tests; nothing fitted\n");
}

std::string efficiency_text(const RooflineEfficiency& e) {
  return fmt::format("{:.2f}/{:.2f}/{:.2f}", e.gemm, e.attention, e.memory);
}

/// Leave-one-out errors of a grid refit of the roofline (sim/calibration_refit.hpp): every
/// supported case simulated at every grid point, then for each case the point fitted on the others.
void print_leave_one_out(const std::vector<ValidationCase>& all, const EfficiencyOf& efficiency_of,
                         const RefitGrid& grid, const std::string& topologies, int jobs) {
  std::vector<const ValidationCase*> cases;
  for (const ValidationCase& c : all) {
    if (c.unsupported.empty()) cases.push_back(&c);
  }
  if (cases.size() < 2) {
    throw ConfigError(fmt::format("validate --leave-one-out: needs two supported cases (got {})",
                                  cases.size()));
  }
  const std::vector<RooflineEfficiency> points = grid.points(efficiency_of(GpuSpec{}));
  std::vector<std::function<std::string()>> work;
  for (const RooflineEfficiency& p : points) {
    for (const ValidationCase* c : cases) {
      work.push_back([c, &p, &efficiency_of, &topologies] {
        // The grid point replaces the three fitted efficiencies of the case's GPU.
        const auto at_point = [&](const GpuSpec& gpu) {
          RooflineEfficiency e = efficiency_of(gpu);
          e.gemm = p.gemm;
          e.attention = p.attention;
          e.memory = p.memory;
          return e;
        };
        return fmt::format("{:.17g}", simulate_validation_case(*c, at_point, topologies).iteration_time_s);
      });
    }
  }
  const auto outcomes = run_with_progress(work, jobs, "refit simulations");
  std::vector<std::vector<double>> predicted(points.size(), std::vector<double>(cases.size()));
  std::vector<double> measured;
  for (const ValidationCase* c : cases) measured.push_back(c->measured_iteration_time_s);
  for (size_t p = 0; p < points.size(); ++p) {
    for (size_t i = 0; i < cases.size(); ++i) {
      const IsolatedOutcome& out = outcomes[p * cases.size() + i];
      if (!out.ok) {
        throw Error(fmt::format("validate --leave-one-out: {} at gemm/attention/memory {} failed: {}",
                                cases[i]->id, efficiency_text(points[p]), out.error));
      }
      predicted[p][i] = std::stod(out.output);
    }
  }
  std::vector<size_t> every(cases.size());
  for (size_t i = 0; i < every.size(); ++i) every[i] = i;
  const GridFit fit_all = fit_grid_point(predicted, measured, every);
  const std::vector<HeldOutPrediction> held = leave_one_out_refit(predicted, measured);
  fmt::print("\nleave-one-out: the roofline's gemm/attention/memory efficiencies refitted over {} grid "
             "points (gemm {}, attention {}, memory {}) on the other {} cases, then each case predicted\n",
             points.size(), fmt::join(grid.gemm, ","), fmt::join(grid.attention, ","),
             fmt::join(grid.memory, ","), cases.size() - 1);
  fmt::print("{:<58} {:>10} {:>10} {:>8} {:>15} {:>10} {:>8}\n", "case", "measured", "in-sample",
             "error", "held-out fit", "predicted", "error");
  double abs_loo = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const double t_in = predicted[fit_all.point][i];
    abs_loo += std::abs(held[i].error);
    fmt::print("{:<58} {:>9.3f}s {:>9.3f}s {:>+7.1f}% {:>15} {:>9.3f}s {:>+7.1f}%\n", cases[i]->id,
               measured[i], t_in, 100 * (t_in - measured[i]) / measured[i],
               efficiency_text(points[held[i].point]), held[i].predicted_s, 100 * held[i].error);
  }
  fmt::print("MAPE in-sample (one fit on all {} cases, gemm/attention/memory {}): {:.1f} %; "
             "leave-one-out: {:.1f} %\n",
             cases.size(), efficiency_text(points[fit_all.point]), 100 * fit_all.mape,
             100 * abs_loo / static_cast<double>(cases.size()));
}

}  // namespace

void register_validate_command(CLI::App& app) {
  struct Options {
    std::string file;
    std::string topologies = "topologies";
    std::string only;
    std::optional<double> gemm, attention, memory, launch_us;
    bool leave_one_out = false;
    std::vector<double> refit_gemm = default_refit_grid().gemm;
    std::vector<double> refit_attention = default_refit_grid().attention;
    std::vector<double> refit_memory = default_refit_grid().memory;
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
  cmd->add_option("--gemm-efficiency", o->gemm, "Roofline: fraction of dense peak reached by GEMMs")
      ->check(number_in(0, true, 1));
  cmd->add_option("--attention-efficiency", o->attention, "Roofline: fraction of dense peak reached by attention")
      ->check(number_in(0, true, 1));
  cmd->add_option("--memory-efficiency", o->memory, "Roofline: fraction of HBM bandwidth reached by memory-bound kernels")
      ->check(number_in(0, true, 1));
  cmd->add_option("--launch-overhead-us", o->launch_us, "Roofline: fixed time per kernel (us)")
      ->check(non_negative_number());
  cmd->add_option("--jobs", o->jobs,
                  "Cases simulated at once, each in its own worker process (default: the number of cores)")
      ->check(positive_number());
  cmd->add_flag("--leave-one-out", o->leave_one_out,
                "Also refit the roofline's gemm/attention/memory efficiencies over a grid without "
                "each case and print every case's held-out error beside the in-sample one (grid "
                "points x cases simulations)");
  cmd->add_option("--refit-gemm", o->refit_gemm, "With --leave-one-out: GEMM efficiencies of the grid")
      ->delimiter(',')
      ->check(number_in(0, true, 1))
      ->capture_default_str();
  cmd->add_option("--refit-attention", o->refit_attention,
                  "With --leave-one-out: attention efficiencies of the grid")
      ->delimiter(',')
      ->check(number_in(0, true, 1))
      ->capture_default_str();
  cmd->add_option("--refit-memory", o->refit_memory, "With --leave-one-out: memory efficiencies of the grid")
      ->delimiter(',')
      ->check(number_in(0, true, 1))
      ->capture_default_str();
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
    // The calibrated roofline of each case's GPU, with the flags above.
    const auto efficiency_of = [o](const GpuSpec& gpu) {
      RooflineEfficiency eff = default_roofline_efficiency(gpu);
      if (o->gemm) eff.gemm = *o->gemm;
      if (o->attention) eff.attention = *o->attention;
      if (o->memory) eff.memory = *o->memory;
      if (o->launch_us) eff.launch_overhead_s = *o->launch_us * 1e-6;
      return eff;
    };
    print_validation_table(cases, efficiency_of, o->topologies, o->jobs);
    std::vector<CollectiveValidationCase> collectives;
    for (CollectiveValidationCase& c : load_collective_validation_cases(o->file, o->topologies)) {
      if (o->only.empty() || c.id.find(o->only) != std::string::npos) {
        collectives.push_back(std::move(c));
      }
    }
    print_collective_table(collectives);
    if (o->leave_one_out) {
      print_leave_one_out(cases, efficiency_of,
                          RefitGrid{o->refit_gemm, o->refit_attention, o->refit_memory},
                          o->topologies, o->jobs);
    }
  });
}

}  // namespace traintwin::cli
