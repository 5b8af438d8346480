// `traintwin validate --live SCENARIO [--iterations N]` (also under mpirun): the scenario run
// live on this machine's backend, the same scenario simulated on this machine's topology with the
// measured cost database, and the two compared: iteration time and time per op class.
#include "cli/validate_live.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/sweep_mpi.hpp"
#include "core/allocator_policy.hpp"
#include "core/error.hpp"
#include "core/posix_file.hpp"
#include "core/op_class.hpp"
#include "exec/cpu/host_device.hpp"
#include "exec/cpu/matmul.hpp"
#include "exec/launch_env.hpp"
#include "exec/live_events.hpp"
#include "exec/cpu/cpu_backend.hpp"
#include "exec/live_run.hpp"
#include "cli/backend_choice.hpp"
#include "exec/local_communicator.hpp"
#include "exec/mpi_communicator.hpp"
#include "sim/cost_model.hpp"
#include "sim/isolated.hpp"
#include "sim/replay.hpp"
#include "sim/session.hpp"
#include "topologies/topology.hpp"

namespace traintwin::cli {
namespace {

/// Rank 0's time per op class in the live run, averaged over the timed iterations.
std::map<std::string, double> live_classes(const exec::LiveRun& run, int64_t rank) {
  const RankProgram& rp = run.program->ranks.at(rank);
  std::map<std::string, double> sum;
  for (size_t it = 0; it < run.spans.size(); ++it) {
    OpDurations d;
    d.op_s.assign(rp.ops.size(), 0.0);
    d.kernel_s.assign(rp.ops.size(), {});
    for (const exec::OpSpan& s : run.spans[it]) {
      d.op_s[s.op] += s.end_s - s.start_s;
      d.kernel_s[s.op] = s.kernel_s;
    }
    for (const auto& [k, v] : class_seconds(*run.program, rp, d, run.iteration_s[it])) sum[k] += v;
  }
  for (auto& [k, v] : sum) v /= static_cast<double>(run.spans.size());
  return sum;
}

/// Rank 0's time per op class in the simulated iteration: its timeline events matched to its
/// ops (the k-th event of a label is the k-th op of that label), compute ops split over their
/// kernels in proportion to the cost model's durations.
std::map<std::string, double> simulated_classes(const Scenario& s, const Timeline& timeline,
                                                const CostModel& costs, const GpuSpec& gpu,
                                                double iteration_s) {
  const Program prog = build_program(s, {0});
  const RankProgram& rp = prog.ranks.at(0);
  std::map<std::string, std::vector<double>> by_label;
  for (const TimelineEvent& e : timeline.events) {
    if (e.rank == 0) by_label[e.name].push_back(e.end_s - e.start_s);
  }
  std::map<std::string, size_t> next;
  OpDurations d;
  d.op_s.assign(rp.ops.size(), 0.0);
  d.kernel_s.assign(rp.ops.size(), {});
  for (const Op& op : rp.ops) {
    const std::string label = prog.label(op);
    auto& list = by_label[label];
    size_t& k = next[label];
    const double dur = k < list.size() ? list[k] : 0.0;
    ++k;
    d.op_s[op.id] = dur;
    if (op.kind == OpKind::kCompute && !op.kernels.empty()) {
      std::vector<double> model;
      double total = 0;
      for (uint32_t ki : op.kernels) {
        model.push_back(costs.duration(prog.kernels[ki], gpu).seconds);
        total += model.back();
      }
      for (double& m : model) m = total > 0 ? m / total * dur : dur / static_cast<double>(model.size());
      d.kernel_s[op.id] = std::move(model);
    }
  }
  return class_seconds(prog, rp, d, iteration_s);
}

/// Rank 0's kernels in the live run: per KernelKey (its to_string()), the calls per iteration
/// and the mean seconds per call over the timed iterations.
struct KernelTimes {
  double calls_per_iteration = 0;
  double mean_s = 0;
};
std::map<std::string, KernelTimes> live_kernels(const exec::LiveRun& run, int64_t rank) {
  const RankProgram& rp = run.program->ranks.at(rank);
  std::map<std::string, std::pair<int64_t, double>> sum;  // calls, seconds
  for (const auto& spans : run.spans) {
    for (const exec::OpSpan& s : spans) {
      const Op& op = rp.ops[s.op];
      for (size_t i = 0; i < s.kernel_s.size() && i < op.kernels.size(); ++i) {
        auto& [calls, seconds] = sum[run.program->kernels[op.kernels[i]].key.to_string()];
        ++calls;
        seconds += s.kernel_s[i];
      }
    }
  }
  std::map<std::string, KernelTimes> out;
  const auto iterations = static_cast<double>(run.spans.size());
  for (const auto& [key, cs] : sum) {
    out[key] = {static_cast<double>(cs.first) / iterations, cs.second / static_cast<double>(cs.first)};
  }
  return out;
}

/// The cost model's seconds per call of each kernel of rank 0's Program, by KernelKey.
std::map<std::string, double> simulated_kernels(const Scenario& s, const CostModel& costs,
                                                const GpuSpec& gpu) {
  const Program prog = build_program(s, {0});
  std::map<std::string, double> out;
  for (const Kernel& k : prog.kernels) out[k.key.to_string()] = costs.duration(k, gpu).seconds;
  return out;
}

/// `backend` runs the live iterations (the communicator's copies go through it too).
void run(const ValidateLiveOptions& o, exec::Communicator& comm, bool mpi,
         exec::Backend& backend) {
  const Scenario s = o.scenario.load();
  const bool root = comm.rank() == 0;
  // The timeline's place checked before the run, not after it (rank 0 writes it).
  if (!o.timeline.empty() && root) prepare_output_file(o.timeline, "--timeline");
  const int local_ranks =
      mpi ? static_cast<int>(std::max<int64_t>(1, exec::read_launch_environment().local_size)) : 1;
  const int threads = exec::cpu::use_gemm_threads(local_ranks, o.threads);
  const std::filesystem::path topo_file =
      o.topology.empty() ? std::filesystem::path(s.cluster.topology) : std::filesystem::path(o.topology);
  TopologySpec topo = load_topology(topo_file);
  // A run on fewer ranks than the host holds uses part of its one node.
  if (s.cluster.num_gpus < topo.node.gpus_per_node && topo.nic.nics_per_node == 1) {
    topo.node.gpus_per_node = s.cluster.num_gpus;
    topo.node.nvlink_domain_gpus = s.cluster.num_gpus;  // the part used is the whole node here
    topo.node.gpus_per_tray = 0;
  }
  const std::string device = backend_device_id(backend, backend_cost_device(backend, threads));
  if (topo.gpu.name != device) {
    throw ConfigError(fmt::format(
        "{}: gpu.name is {}, but this run's device is {} ({}); write this host's topology with "
        "traintwin profile SCENARIO --topology-out topologies/local-<host>.yaml (under the same "
        "number of ranks; CPU) or use a topology whose gpu.name is the device's "
        "(topologies/cuda-h100-1gpu.yaml for one H100 on the cuda backend) and pass it with "
        "--topology",
        topo_file.string(), topo.gpu.name, device,
        o.backend == "cpu" ? fmt::format("{} GEMM thread(s) per rank", threads)
                           : o.backend + " backend"));
  }
  check_cluster_size(topo, s.cluster.num_gpus);
  // Live first (every rank), then the simulation on rank 0 only.
  const exec::LiveRun live = exec::run_live(s, comm, o.warmup, o.iterations, &backend);
  if (!o.timeline.empty() && root) {
    Timeline t;
    t.name = s.name + " (live)";
    t.device = device;  // what simulate --costs-from-timeline charges its durations for
    for (size_t it = 0; it < live.spans.size(); ++it) {
      for (const exec::OpSpan& sp : live.spans[it]) {
        t.events.push_back(exec::live_event(*live.program, 0, comm.world_size(), sp,
                                            static_cast<int64_t>(it + 1)));
      }
    }
    // Whole or not at all, never through a planted link (core/posix_file.hpp).
    AtomicFile out(o.timeline);
    write_chrome_trace(t, out.stream());
    out.commit();
  }
  if (!root) return;
  const auto db_dir = default_database_dir(topo_file);
  const std::filesystem::path db_file = db_dir / (topo.gpu.name + ".json");
  if (!std::filesystem::exists(db_file)) {
    throw ConfigError(fmt::format("no measured cost database {} for {}: run traintwin profile {} "
                                  "first (it writes there)",
                                  db_file.string(), topo.gpu.name, o.scenario.file));
  }
  const std::string json = run_isolated([&] {
    SimulationOptions opts;
    opts.record_timeline = true;
    opts.trace_ranks = {0};
    const SimulationSession session(s, topo, topo_file, {}, std::move(opts));
    const CostModel* costs = &session.costs();
    const SimulationResult r = session.run();
    double total = 0, measured = 0;
    for (const auto& [src, sec] : r.compute_s_by_source) {
      total += sec;
      if (src == CostSource::kMeasured) measured += sec;
    }
    nlohmann::json j;
    j["iteration_time_s"] = r.iteration_time_s;
    j["measured_share"] = total > 0 ? measured / total : 0.0;
    j["classes"] = simulated_classes(s, r.timeline, *costs, topo.gpu, r.iteration_time_s);
    j["kernels"] = simulated_kernels(s, *costs, topo.gpu);
    return j.dump();
  });
  const auto sim = nlohmann::json::parse(json);
  std::vector<double> times = live.iteration_s;
  std::sort(times.begin(), times.end());
  const double live_s = times[times.size() / 2];
  const double predicted_s = sim["iteration_time_s"].get<double>();
  const double err = (predicted_s - live_s) / live_s;
  const double share = sim["measured_share"].get<double>();
  fmt::print("traintwin validate --live: {} on {} rank(s) of {} ({}), {} timed iteration(s) after {} "
             "warm-up\n",
             s.name, s.world_size(), device, topo_file.string(), o.iterations, o.warmup);
  fmt::print("cost database      {} (measured share of compute {:.1f} %)\n", db_file.string(),
             100 * share);
  const auto collectives = make_simulation_measured_collectives(topo.gpu, db_dir);
  fmt::print("collectives        {}\n",
             collectives ? fmt::format("measured rows of the database ({}), closed forms elsewhere",
                                       fmt::join(collectives->covered(), ", "))
                         : "closed forms (no collective rows: mpirun -np N traintwin profile "
                           "--collectives adds them)");
  fmt::print("iteration time     live {:.2f} ms (median; min {:.2f}, max {:.2f})   predicted "
             "{:.2f} ms   error {:+.1f} %\n",
             live_s * 1e3, times.front() * 1e3, times.back() * 1e3, predicted_s * 1e3, 100 * err);
  const auto live_cls = live_classes(live, 0);
  std::map<std::string, double> sim_cls = sim["classes"].get<std::map<std::string, double>>();
  fmt::print("\nrank 0, time per op class (communication: issue to completion, overlapping compute)\n");
  fmt::print("{:<28} {:>12} {:>12} {:>9}\n", "op class", "live ms", "simulated ms", "diff");
  std::map<std::string, bool> keys;
  for (const auto& [k, v] : live_cls) keys[k] = true;
  for (const auto& [k, v] : sim_cls) keys[k] = true;
  auto row = [&](const std::string& k) {
    const double a = live_cls.count(k) ? live_cls.at(k) : 0.0;
    const double b = sim_cls.count(k) ? sim_cls.at(k) : 0.0;
    const std::string diff = a > 0 ? fmt::format("{:+.1f} %", 100 * (b - a) / a) : "";
    fmt::print("{:<28} {:>12.3f} {:>12.3f} {:>9}\n", k, a * 1e3, b * 1e3, diff);
  };
  for (const auto& [k, unused] : keys) {
    if (k != "compute" && k != "pipeline bubble and waits") row(k);
  }
  row("compute");
  row("pipeline bubble and waits");
  // Which kernels carry the compute error: per KernelKey, live mean per call against the cost
  // model's, and the difference over one iteration's calls; the largest differences first.
  if (o.kernels > 0) {
    const auto live_k = live_kernels(live, 0);
    const auto sim_k = sim["kernels"].get<std::map<std::string, double>>();
    struct Row {
      std::string key;
      double calls, live_us, sim_us, diff_ms;
    };
    std::vector<Row> rows;
    for (const auto& [key, t] : live_k) {
      const double p = sim_k.count(key) ? sim_k.at(key) : 0.0;
      rows.push_back({key, t.calls_per_iteration, t.mean_s * 1e6, p * 1e6,
                      t.calls_per_iteration * (p - t.mean_s) * 1e3});
    }
    std::sort(rows.begin(), rows.end(),
              [](const Row& a, const Row& b) { return std::abs(a.diff_ms) > std::abs(b.diff_ms); });
    fmt::print("\nrank 0, the {} kernels with the largest difference (live: mean per call)\n",
               std::min<size_t>(rows.size(), static_cast<size_t>(o.kernels)));
    fmt::print("{:<44} {:>6} {:>12} {:>12} {:>9} {:>14}\n", "kernel", "calls", "live us",
               "simulated us", "diff", "diff ms/iter");
    for (size_t i = 0; i < rows.size() && i < static_cast<size_t>(o.kernels); ++i) {
      const Row& r = rows[i];
      fmt::print("{:<44} {:>6.0f} {:>12.1f} {:>12.1f} {:>8.1f}% {:>+14.3f}\n", r.key, r.calls,
                 r.live_us, r.sim_us, r.live_us > 0 ? 100 * (r.sim_us - r.live_us) / r.live_us : 0.0,
                 r.diff_ms);
    }
  }
  nlohmann::json summary{{"live_iteration_s", live_s},
                         {"live_fastest_iteration_s", times.front()},
                         {"predicted_iteration_s", predicted_s},
                         {"error", err},
                         {"measured_share", share}};
  fmt::print("json {}\n", summary.dump());
}

}  // namespace

void run_validate_live(const ValidateLiveOptions& o) {
  retain_freed_memory();  // as train (core/allocator_policy.hpp)
  if (!launched_by_mpi()) {
    const Scenario s = o.scenario.load();
    if (s.world_size() != 1) {
      throw ConfigError(fmt::format("{}: {} ranks: run validate --live under mpirun -np {}",
                                    o.scenario.file, s.world_size(), s.world_size()));
    }
    const RankLayout layout(1, 1, 1, 1);
    const std::unique_ptr<exec::Backend> backend = make_backend(o.backend);
    exec::LocalCommunicator comm(layout, backend.get());
    return run(o, comm, false, *backend);
  }
  if (o.backend != "cpu") {
    throw UnsupportedError("validate --live --backend " + o.backend +
                           " under mpirun: the executor runs the CUDA backend in one process "
                           "(one GPU) only so far; not falling back to cpu");
  }
  const exec::MpiEnvironment env;
  run_or_abort_all([&] {
    const Scenario s = o.scenario.load();
    if (env.size() != s.world_size()) {
      throw ConfigError(fmt::format("{}: cluster.num_gpus = {} but mpirun started {} processes",
                                    o.scenario.file, s.world_size(), env.size()));
    }
    const RankLayout layout = layout_of(s);
    exec::MpiCommunicator comm(layout);
    exec::cpu::CpuBackend backend;
    run(o, comm, true, backend);
  });
}

}  // namespace traintwin::cli
