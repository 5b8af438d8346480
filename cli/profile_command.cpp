// `traintwin profile SCENARIO`: every distinct kernel of the scenario's Program timed alone on the
// local backend into traces/db/<device>.json; `mpirun -np N traintwin profile --collectives`:
// nccl-tests' table of the communicator's collectives, stored in the same database.
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "cli/backend_choice.hpp"
#include "cli/commands.hpp"
#include "cli/flag_checks.hpp"
#include "cli/format.hpp"
#include "cli/scenario_options.hpp"
#include "cli/sweep_mpi.hpp"
#include "core/allocator_policy.hpp"
#include "core/error.hpp"
#include "core/posix_file.hpp"
#include "exec/cpu/cpu_backend.hpp"
#include "exec/cpu/host_device.hpp"
#include "exec/cpu/matmul.hpp"
#include "exec/launch_env.hpp"
#include "exec/local_topology.hpp"
#include "exec/mpi_communicator.hpp"
#include "exec/profile.hpp"
#include "sim/collective_bench.hpp"
#include "sim/collectives.hpp"
#include "sim/validation.hpp"

namespace traintwin::cli {
namespace {

struct ProfileCliOptions {
  ScenarioOptions scenario;
  std::string backend = "cpu";
  std::string out;
  int warmup = 3;
  int repeats = 20;
  double min_time_s = 0.05;
  bool bf16_activations = false;
  int threads = 0;
  bool collectives = false;
  std::string min_bytes = "8", max_bytes = "128M";
  bool max_bytes_given = false;  ///< -e on the command line (else a SCENARIO's largest collective)
  std::string topology_out;
  std::string kernels;     ///< ECMAScript regex over KernelKey::to_string(); empty: every kernel
  std::string cases;       ///< a calibration file whose cases' kernels are profiled
  std::string case_filter; ///< only the cases whose id contains it
  std::string gpu;         ///< only the cases on this calibration GPU (with --cases)
  std::string topologies = "topologies";
};

/// The scenarios whose kernels are profiled: the SCENARIO, or with --cases the supported cases
/// of a calibration file on --gpu (and --case). Throws ConfigError when none is left.
std::vector<Scenario> profiled_scenarios(const ProfileCliOptions& o) {
  if (o.cases.empty()) return {o.scenario.load()};
  if (!o.scenario.file.empty()) {
    throw ConfigError("profile: give a SCENARIO or --cases FILE, not both");
  }
  if (o.gpu.empty()) {
    throw ConfigError("profile --cases " + o.cases + ": give --gpu (the calibration GPU whose "
                      "cases are profiled, e.g. H100-SXM-80GB: a database holds one GPU's costs)");
  }
  std::vector<Scenario> out;
  std::vector<std::string> gpus;
  for (const ValidationCase& c : load_validation_cases(o.cases, o.topologies)) {
    if (std::find(gpus.begin(), gpus.end(), c.gpu) == gpus.end()) gpus.push_back(c.gpu);
    if (c.gpu != o.gpu || c.id.find(o.case_filter) == std::string::npos) continue;
    if (!c.unsupported.empty()) {
      fmt::print("# case {}: not profiled ({} is not built)\n", c.id, c.unsupported);
      continue;
    }
    out.push_back(c.scenario);
  }
  if (out.empty()) {
    std::string names;
    for (const std::string& g : gpus) names += (names.empty() ? "" : ", ") + g;
    throw ConfigError(fmt::format("profile --cases {}: no case on --gpu {}{} (its GPUs: {})",
                                  o.cases, o.gpu,
                                  o.case_filter.empty() ? "" : " with --case " + o.case_filter,
                                  names));
  }
  return out;
}

/// The distinct kernels of `scenarios` (first scenario first) whose key matches --kernels, each
/// with the scenario that gives what its key does not. Throws ConfigError for a bad regex or
/// one that matches nothing (naming a few of the kernels there are).
std::vector<std::pair<const Scenario*, exec::ProfileTarget>> selected_targets(
    const ProfileCliOptions& o, const std::vector<Scenario>& scenarios) {
  std::optional<std::regex> filter;
  if (!o.kernels.empty()) {
    try {
      filter.emplace(o.kernels, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw ConfigError("profile --kernels '" + o.kernels + "': not a regular expression (" +
                        e.what() + ")");
    }
  }
  std::vector<std::pair<const Scenario*, exec::ProfileTarget>> out;
  std::unordered_set<std::string> seen;
  std::vector<std::string> all;
  for (const Scenario& s : scenarios) {
    for (exec::ProfileTarget& t : exec::profile_targets(s)) {
      const std::string key = t.kernel.key.to_string();
      if (!seen.insert(key).second) continue;
      all.push_back(key);
      if (!filter || std::regex_search(key, *filter)) out.emplace_back(&s, std::move(t));
    }
  }
  if (out.empty()) {
    std::string some;
    for (size_t i = 0; i < std::min<size_t>(all.size(), 6); ++i) some += "\n  " + all[i];
    throw ConfigError(fmt::format("profile --kernels '{}' matches none of the {} kernels (keys "
                                  "as 'name[shape] dtype tpN'), e.g.:{}",
                                  o.kernels, all.size(), some));
  }
  return out;
}

/// The database file: --out, else traces/db/<device>.json beside the scenario's topologies/
/// folder (where simulate looks), else under the current directory.
std::filesystem::path database_path(const ProfileCliOptions& o, const std::string& device_id,
                                    const Scenario* s) {
  if (!o.out.empty()) return o.out;
  const std::filesystem::path dir =
      s != nullptr
          ? default_database_dir(s->cluster.topology)
          : std::filesystem::path("traces") / "db";
  return dir / (device_id + ".json");
}

/// "[=====>    ] 12/40  ETA 0:31  gemm_fwd[...]" on one stderr line.
void progress(size_t done, size_t total, double elapsed_s, const std::string& what) {
  constexpr int kWidth = 30;
  const int filled = total == 0 ? kWidth : static_cast<int>(kWidth * done / total);
  const double eta = done == 0 ? 0 : elapsed_s / static_cast<double>(done) *
                                         static_cast<double>(total - done);
  const auto eta_s = static_cast<int64_t>(eta + 0.5);
  fmt::print(stderr, "\r[{:=<{}}{:<{}}] {}/{}  ETA {}:{:02}  {:<60.60}", "", filled, "",
             kWidth - filled, done, total, eta_s / 60, eta_s % 60, what);
  if (done == total) fmt::print(stderr, "\n");
  std::fflush(stderr);
}

/// Collectives and mpirun are measured on the CPU backend's communicator only (the NCCL
/// communicator is not wired to the CLI yet): another backend is refused, never replaced.
void check_cpu_backend(const std::string& backend, const char* what) {
  if (backend != "cpu") {
    throw UnsupportedError("--backend " + backend + ": " + what +
                           " is measured on the cpu backend only so far; not falling back to cpu");
  }
}

/// `comm`: under mpirun, the ranks whose pipeline stage runs a kernel time it at the same time (a
/// barrier before each; the others wait), so they share the host as they do in a live run; the
/// rows average the figures of the ranks that timed them.
void profile_kernels(const ProfileCliOptions& o, exec::Communicator* comm) {
  if (comm != nullptr) check_cpu_backend(o.backend, "profiling under mpirun");
  if (!o.topology_out.empty()) check_cpu_backend(o.backend, "--topology-out (this host's topology)");
  const bool root = comm == nullptr || comm->rank() == 0;
  if (comm != nullptr && !o.cases.empty()) {
    throw UnsupportedError("profile --cases: run it without mpirun (one process times every "
                           "case's kernels)");
  }
  const std::vector<Scenario> scenarios = profiled_scenarios(o);
  const Scenario& s = scenarios.front();
  // The ranks that will share this host in the live run: the launcher's ranks on this node under
  // mpirun, else the scenario's.
  const int local_ranks =
      comm != nullptr ? static_cast<int>(std::max<int64_t>(1, exec::read_launch_environment().local_size))
                      : static_cast<int>(s.world_size());
  const int threads = exec::cpu::use_gemm_threads(local_ranks, o.threads);
  const std::unique_ptr<exec::Backend> backend = make_backend(o.backend);
  const CostDbDevice device = backend_cost_device(*backend, threads);
  const std::filesystem::path file = database_path(o, backend_device_id(*backend, device), &s);
  // Refuse a foreign or malformed database, or an output that cannot be written, before
  // measuring anything (rank 0 writes both).
  CostDatabase db = exec::open_database_for(file, device, backend_versions(*backend));
  if (root) {
    prepare_output_file(file, o.out.empty() ? "the database" : "--out");
    if (!o.topology_out.empty()) prepare_output_file(o.topology_out, "--topology-out");
  }
  const auto targets = selected_targets(o, scenarios);
  // Every kernel's dtype checked before any is timed: a refusal loses no measurement.
  for (const auto& [sc, t] : targets) exec::check_runs_dtype(*backend, *sc, t.kernel.key);
  if (root) {
    fmt::print("profiling {} kernels of {} on {} ({}), {} warm-up + {} timed runs each, more "
               "until they add up to {} s\n",
               targets.size(),
               o.cases.empty() ? s.name
                               : fmt::format("{} case(s) of {}", scenarios.size(), o.cases),
               device.name,
               backend->name() == "cpu" ? fmt::format("{} GEMM thread(s) per rank", threads)
                                        : backend->name() + " backend",
               o.warmup, o.repeats, o.min_time_s);
    if (comm != nullptr) {
      fmt::print("on {} ranks at once, each kernel on the ranks of the pipeline stages that run "
                 "it (mean of their figures)\n",
                 comm->world_size());
    }
    std::fflush(stdout);
  }
  // This rank's pipeline stage when mpirun started the scenario's ranks; -1: time every kernel.
  const int64_t my_stage = comm != nullptr && comm->world_size() == s.world_size()
                               ? layout_of(s).coord(comm->rank()).pp
                               : -1;
  exec::ProfileOptions popts;
  popts.warmup = o.warmup;
  popts.repeats = o.repeats;
  popts.min_time_s = o.min_time_s;
  popts.bf16_activations = o.bf16_activations;
  std::vector<KernelMeasurement> rows;
  std::vector<int> timed_on;  // ranks that timed each row
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < targets.size(); ++i) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto& [target_scenario, target] = targets[i];
    if (root) progress(i, targets.size(), elapsed, target.kernel.key.to_string());
    if (comm != nullptr) {  // barrier: the ranks time this kernel together
      double x = 0;
      comm->all_reduce(GroupKind::kWorld, std::span<double>(&x, 1), exec::ReduceOp::kSum)->wait();
    }
    const std::vector<int64_t>& stages = target.stages;
    const bool mine =
        my_stage < 0 || std::find(stages.begin(), stages.end(), my_stage) != stages.end();
    KernelMeasurement m;
    if (mine) m = exec::profile_kernel(*backend, *target_scenario, target, popts);
    if (comm != nullptr) {
      std::array<double, 6> t{m.median_us, m.p10_us, m.p90_us, m.expected_us(), mine ? 1.0 : 0.0,
                              static_cast<double>(m.samples)};
      comm->all_reduce(GroupKind::kWorld, std::span<double>(t), exec::ReduceOp::kSum)->wait();
      const double n = t[4];  // the ranks that timed it (>= 1: every kernel has a stage)
      if (!mine) {  // the row of the ranks that timed it
        m.key = target.kernel.key;
        m.flops = target.kernel.flops;
        m.bytes = target.kernel.bytes;
        m.samples = std::max<int64_t>(1, std::llround(t[5] / n));
      }
      m.median_us = t[0] / n;
      m.p10_us = std::min(t[1] / n, m.median_us);
      m.p90_us = std::max(t[2] / n, m.median_us);
      m.mean_us = t[3] / n;
      timed_on.push_back(static_cast<int>(n));
    } else {
      timed_on.push_back(1);
    }
    rows.push_back(std::move(m));
  }
  if (!root) return;
  progress(targets.size(), targets.size(),
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), "done");
  fmt::print("{:<44} {:>10} {:>10} {:>10} {:>10} {:>10} {:>6}\n", "kernel", "mean_us", "median_us",
             "p10_us", "p90_us", "GFLOP/s", "ranks");
  for (size_t i = 0; i < rows.size(); ++i) {
    const KernelMeasurement& m = rows[i];
    fmt::print("{:<44} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>10.2f} {:>6}\n", m.key.to_string(),
               m.expected_us(), m.median_us, m.p10_us, m.p90_us, m.flops / m.expected_us() * 1e-3,
               timed_on[i]);
  }
  exec::merge_measurements(db, rows);
  std::filesystem::create_directories(std::filesystem::absolute(file).parent_path());
  db.save(file);
  fmt::print("wrote {} kernel rows to {} ({} rows, {} collective rows in all)\n", rows.size(),
             file.string(), db.kernels().size(), db.collectives().size());
  if (!o.topology_out.empty()) {
    const exec::LocalTopology t =
        exec::local_topology(db, device, exec::cpu::device_id(device));
    exec::write_topology(o.topology_out, t);
    fmt::print("wrote {}: {} ranks of {} thread(s), {:.1f} GFLOP/s and {:.1f} GB/s measured, link "
               "{:.2f} GB/s and {:.1f} us {}\n",
               o.topology_out, t.ranks_per_node, threads, t.peak_FLOPs * 1e-9,
               t.memory_Bps * 1e-9, t.link_Bps * 1e-9, t.link_latency_s * 1e6, t.link_source);
  }
}

void profile_collectives(const ProfileCliOptions& o) {
  check_cpu_backend(o.backend, "--collectives");
  if (!launched_by_mpi()) {
    throw ConfigError("profile --collectives measures the communicator between processes: run "
                      "it under mpirun -np N (N >= 2)");
  }
  const exec::MpiEnvironment env;
  run_or_abort_all([&] {
    const int threads = exec::cpu::use_gemm_threads(
        static_cast<int>(std::max<int64_t>(1, exec::read_launch_environment().local_size)),
        o.threads);
    const RankLayout layout(1, 1, env.size(), 1);
    exec::MpiCommunicator comm(layout);
    const bool root = comm.rank() == 0;
    // With a SCENARIO, the database beside its topologies folder (where its kernels go).
    std::optional<Scenario> s;
    if (!o.scenario.file.empty()) s = o.scenario.load();
    std::vector<int64_t> sizes;
    const int64_t unit = 4 * env.size();
    const auto [min_bytes, max_bytes] = parse_nccl_size_range(o.min_bytes, o.max_bytes);
    std::vector<int64_t> wanted = nccl_tests_sizes(min_bytes, max_bytes);
    if (s && !o.max_bytes_given && s->world_size() == env.size()) {
      // Doubled on up to the largest collective of the scenario that runs on these ranks, so
      // that the simulator reads it off a measured row (its live run holds a buffer that large
      // anyway).
      const int64_t largest = exec::largest_collective_bytes(*s);
      while (wanted.back() < largest) wanted.push_back(wanted.back() * 2);
      if (root && wanted.back() > max_bytes) {
        fmt::print("# sizes up to {} bytes: the largest collective of {} moves {} bytes (-e "
                   "sets the largest size)\n",
                   wanted.back(), o.scenario.file, largest);
      }
    }
    for (int64_t b : wanted) {
      const int64_t r = std::max(unit, b / unit * unit);
      if (sizes.empty() || sizes.back() != r) sizes.push_back(r);
    }
    // Before any buffer: each rank holds ~3x the largest size, and every rank of this host
    // at once (a size past the host's memory grew the ranks until the kernel killed them).
    exec::check_collective_sizes_fit_host(
        sizes.back(), std::max<int64_t>(1, exec::read_launch_environment().local_size),
        exec::cpu::host_memory_bytes());
    // The database rank 0 writes: a foreign or malformed one, or a place that cannot be
    // written, refused before anything is measured.
    const CostDbDevice device = exec::cpu::host_device(threads);
    const std::filesystem::path file = database_path(o, exec::cpu::device_id(device), s ? &*s : nullptr);
    std::optional<CostDatabase> opened;
    if (root) {
      opened = exec::open_database_for(file, device, exec::cpu::host_versions());
      prepare_output_file(file, o.out.empty() ? "the database" : "--out");
    }
    const auto timings = exec::profile_collectives(comm, sizes, o.warmup, o.repeats);
    if (!root) return;
    CostDatabase& db = *opened;
    std::vector<CollectiveMeasurement> rows;
    std::string last_op;
    for (const exec::CollectiveTiming& t : timings) {
      if (t.op != last_op) {
        fmt::print("# traintwin profile --collectives: {} over {} MPI ranks ({})\n#\n{}", t.op,
                   t.ranks, device.name, nccl_tests_header());
        last_op = t.op;
      }
      double factor = 1.0;  // send_recv
      if (t.op == "all_reduce") factor = busbw_factor(CollectiveKind::kAllReduce, t.ranks);
      if (t.op == "all_gather") factor = busbw_factor(CollectiveKind::kAllGather, t.ranks);
      if (t.op == "reduce_scatter") factor = busbw_factor(CollectiveKind::kReduceScatter, t.ranks);
      CollectiveMeasurement m;
      m.op = t.op;
      m.bytes = t.bytes;
      m.ranks = t.ranks;
      m.nodes = 1;
      m.algorithm = "mpi";
      m.time_us = t.time_us;
      m.algbw_GBps = static_cast<double>(t.bytes) / (t.time_us * 1e-6) * 1e-9;
      m.busbw_GBps = m.algbw_GBps * factor;
      fmt::print("{}", nccl_tests_row(t.bytes, t.count, t.op == "all_gather" || t.op == "send_recv" ? "none" : "sum",
                                      t.time_us, m.algbw_GBps, m.busbw_GBps));
      rows.push_back(std::move(m));
    }
    exec::merge_measurements(db, rows);
    std::filesystem::create_directories(std::filesystem::absolute(file).parent_path());
    db.save(file);
    fmt::print("wrote {} collective rows to {}\n", rows.size(), file.string());
  });
}

}  // namespace

void register_profile_command(CLI::App& app) {
  auto o = std::make_shared<ProfileCliOptions>();
  auto* cmd = app.add_subcommand(
      "profile",
      "Time every kernel of the scenario's Program on this machine's backend into "
      "traces/db/<device>.json; under mpirun with --collectives, the communicator's collectives");
  add_scenario_options(*cmd, o->scenario);
  cmd->get_option("scenario")->required(false);
  cmd->add_option("--backend", o->backend,
                  "Executor backend: cpu (OpenBLAS) or cuda (one GPU: fp32 kernels, bf16 and FP8 "
                  "GEMMs, CUDA-event timing; database traces/db/cuda-<gpu>.json)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--out", o->out,
                  "Database to write and merge into (default: traces/db/<device>.json beside "
                  "the scenario's topologies/ folder)");
  cmd->add_option("--warmup", o->warmup, "Untimed runs per kernel (collectives: nccl-tests -w)")
      ->check(non_negative_number())
      ->capture_default_str();
  cmd->add_option("--repeats", o->repeats, "Timed runs per kernel (collectives: nccl-tests -n)")
      ->check(positive_number())
      ->capture_default_str();
  cmd->add_option("--min-time", o->min_time_s,
                  "Kernels: more timed runs until they add up to this many seconds (Google "
                  "Benchmark's and nvbench's min-time), so short kernels are sampled as long; at "
                  "most 600 per kernel")
      ->check(number_in(0, false, 600))
      ->capture_default_str();
  cmd->add_flag("--bf16-activations", o->bf16_activations,
               "bf16 linear-layer GEMMs alone on bf16 operands in memory, as Megatron-LM runs them "
               "(activations kept in bf16 between kernels): rows for a database that simulates "
               "Megatron clusters (traces/db/<GPU>.json). Default: as train runs them, with the "
               "executor's roundings of its fp32 activations to bf16 and widenings of the results "
               "(the rows validate --live predicts this executor with)");
  cmd->add_option("--threads", o->threads,
                  "GEMM threads per rank (default: OPENBLAS_NUM_THREADS when set, else this "
                  "host's cores shared among the ranks on it, as train)")
      ->check(positive_number());
  cmd->add_flag("--collectives", o->collectives,
                "Measure all_reduce, all_gather, reduce_scatter and send/recv over the MPI world "
                "(mpirun -np N) at nccl-tests' sizes instead of kernels");
  cmd->add_option("-b,--minbytes", o->min_bytes, "Smallest collective size (nccl-tests -b)")
      ->capture_default_str();
  cmd->add_option("-e,--maxbytes", o->max_bytes,
                  "Largest collective size (nccl-tests -e); with a SCENARIO of as many ranks as "
                  "mpirun started and no -e, doubled until it covers the scenario's largest "
                  "collective")
      ->capture_default_str();
  cmd->add_option("--kernels", o->kernels,
                  "Only the kernels whose key ('name[shape] dtype tpN', as the table prints it) "
                  "matches this ECMAScript regular expression (nvbench's --benchmark), e.g. "
                  "'^gemm_(fwd|dgrad|wgrad)\\[.*\\] bf16 '");
  cmd->add_option("--cases", o->cases,
                  "Instead of a SCENARIO: the kernels of every case of this calibration file "
                  "(../shared/validation/*.yaml) on --gpu, once per distinct kernel")
      ->check(CLI::ExistingFile);
  cmd->add_option("--case", o->case_filter, "With --cases: only the cases whose id contains this");
  cmd->add_option("--gpu", o->gpu,
                  "With --cases: the calibration GPU whose cases are profiled (e.g. "
                  "H100-SXM-80GB)");
  cmd->add_option("--topologies", o->topologies,
                  "With --cases: folder with the dgx-*-superpod.yaml files")
      ->capture_default_str();
  cmd->add_option("--topology-out", o->topology_out,
                  "Also write this host as a topology (ranks pinned to cores, measured peak "
                  "FLOP/s and memory bandwidth, intra-node link fitted from the database's "
                  "collective rows), e.g. topologies/local-<host>.yaml");
  cmd->callback([o, cmd] {
    o->max_bytes_given = cmd->get_option("--maxbytes")->count() > 0;
    retain_freed_memory();  // as train: what it times runs under the trainer's policy
    if (o->collectives) return profile_collectives(*o);
    if (o->scenario.file.empty() && o->cases.empty()) {
      throw ConfigError(
          "profile: give a SCENARIO (its kernels are profiled), --cases FILE or --collectives");
    }
    if (o->cases.empty() && (!o->gpu.empty() || !o->case_filter.empty())) {
      throw ConfigError("profile: --gpu and --case select cases of --cases FILE; give it");
    }
    if (!launched_by_mpi()) return profile_kernels(*o, nullptr);
    const exec::MpiEnvironment env;
    run_or_abort_all([&] {
      exec::MpiCommunicator comm(RankLayout(1, 1, env.size(), 1));
      profile_kernels(*o, &comm);
    });
  });
}

}  // namespace traintwin::cli
