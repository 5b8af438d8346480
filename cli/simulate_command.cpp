#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.hpp"
#include "cli/format.hpp"
#include "cli/memory_table.hpp"
#include "cli/replay_progress.hpp"
#include "cli/report_output.hpp"
#include "cli/scenario_options.hpp"
#include "core/error.hpp"
#include "core/flops.hpp"
#include "core/input_file.hpp"
#include "core/memory.hpp"
#include "core/memory_reserve.hpp"
#include "core/posix_file.hpp"
#include "core/rank_layout.hpp"
#include "sim/chakra_import.hpp"
#include "sim/cost_model.hpp"
#include "sim/isolated.hpp"
#include "sim/replay.hpp"
#include "sim/session.hpp"
#include "sim/summary.hpp"
#include "sim/summary_document.hpp"
#include "topologies/topology.hpp"
#include "traces/cost_db.hpp"
#include "traces/timeline.hpp"

namespace traintwin::cli {
namespace {

struct SimulateOptions {
  ScenarioOptions scenario;
  bool json = false;
  std::string out_dir;
  std::string trace_ranks;
  std::string collective_algorithm;
  bool aggregate_tp = false;
  bool full_replay = false;
  bool no_link_contention = false;
  bool quiet = false;
  std::string cost_db;
  std::string costs_from_timeline;
  std::string cost_db_topology;
  std::vector<std::string> trace;  ///< --trace FORMAT DIR
  std::string topology;            ///< --topology FILE (with --trace)
  bool cost_model = false;         ///< --cost-model (with --trace)
  std::string all_gather_comm_size;  ///< --all-gather-comm-size (with --trace)
};

std::vector<int64_t> parse_rank_list(const std::string& text) {
  std::vector<int64_t> ranks;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = text.find(',', pos);
    const std::string item =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    try {
      size_t used = 0;
      ranks.push_back(std::stoll(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw ConfigError(
          "--trace-ranks: '" + item +
          "' is not a rank (allowed: all, stages, or a comma-separated list such as 0,8,16)");
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return ranks;
}

/// The replay's options from simulate's flags (the timeline recorded only with --out; the traced
/// ranks of --trace-ranks). Throws ConfigError for a bad --trace-ranks list.
SimulationOptions simulation_options(const SimulateOptions& o, const Scenario& s) {
  SimulationOptions opts;
  opts.collective_algorithm = o.collective_algorithm;
  opts.aggregate_tp = o.aggregate_tp;
  opts.exact_reductions = !o.full_replay;
  opts.link_contention = !o.no_link_contention;
  opts.record_timeline = !o.out_dir.empty();
  if (o.trace_ranks == "all") {
    opts.trace_all_ranks = true;
  } else if (o.trace_ranks == "stages") {
    opts.trace_ranks = layout_of(s).first_rank_of_each_stage();
  } else if (!o.trace_ranks.empty()) {
    opts.trace_ranks = parse_rank_list(o.trace_ranks);
  }
  return opts;
}

/// What `simulate --out DIR` writes: timeline.json event by event as the replay hands it over,
/// then summary.json and report.html, each written whole or not at all (AtomicFile renamed into
/// place once complete). The folder is checked when this is made (before the simulation) and
/// again at finish() (it may have gone meanwhile).
class SimulationOutputs {
 public:
  SimulationOutputs(const std::filesystem::path& dir, const std::string& name)
      : dir_(dir),
        trace_file_((prepare_output_directory(dir, "--out"), dir / "timeline.json")),
        trace_(trace_file_.stream(), name) {
    kept_.name = name;
  }

  /// The replay's timeline sink: each event to timeline.json and kept for report.html (reading
  /// 100 MB of timeline.json back took longer than the simulation: a 175B/1024 replay, 1.9 s
  /// against 1.5 s).
  std::function<void(TimelineEvent&&)> timeline_sink() {
    return [this](TimelineEvent&& e) {
      trace_.write(e);
      kept_.events.push_back(std::move(e));
    };
  }

  /// Writes summary.json, commits timeline.json and writes report.html (a warning when the
  /// report cannot be written); `tell` prints the files written.
  void finish(const nlohmann::ordered_json& summary, bool tell) {
    trace_.finish();
    prepare_output_directory(dir_, "--out");
    AtomicFile file(dir_ / "summary.json");
    file.write(summary.dump(2) + "\n");
    file.commit();
    trace_file_.commit();
    if (tell) {
      fmt::print("wrote {} and {}\n", (dir_ / "summary.json").string(),
                 (dir_ / "timeline.json").string());
    }
    write_report_or_warn(dir_, tell, std::move(kept_));
  }

 private:
  std::filesystem::path dir_;
  AtomicFile trace_file_;
  ChromeTraceWriter trace_;
  Timeline kept_;
};

/// The what-if run against its base: the compared figures and their changes.
void print_what_if(const Scenario& s, const SimulationSummary& m, const BaseRunMetrics& base) {
  const BaseRunMetrics now = base_run_metrics(m);
  const auto pct = [](double value, double ref) {
    return fmt::format("{:+.1f} %", 100 * relative_change(value, ref));
  };
  fmt::print("what-if            {} (base: the scenario without cluster.what_if)\n",
             describe_what_if(s.cluster.what_if));
  fmt::print("  {:<20} {:>12} {:>12} {:>10}\n", "", "base", "what-if", "change");
  fmt::print("  {:<20} {:>10.4f} s {:>10.4f} s {:>10}\n", "iteration time", base.iteration_time_s,
             now.iteration_time_s, pct(now.iteration_time_s, base.iteration_time_s));
  fmt::print("  {:<20} {:>12.1f} {:>12.1f} {:>10}\n", "tokens/s/GPU", base.tokens_per_s_per_gpu,
             now.tokens_per_s_per_gpu, pct(now.tokens_per_s_per_gpu, base.tokens_per_s_per_gpu));
  fmt::print("  {:<20} {:>10.1f} % {:>10.1f} % {:>10}\n", "MFU", 100 * base.mfu, 100 * now.mfu,
             pct(now.mfu, base.mfu));
  fmt::print("  {:<20} {:>10.4f} s {:>10.4f} s {:>+8.4f} s\n", "exposed comm",
             base.exposed_comm_s(), now.exposed_comm_s(),
             now.exposed_comm_s() - base.exposed_comm_s());
  fmt::print("  {:<20} {:>10.4f} s {:>10.4f} s {:>+8.4f} s\n", "  of which TP", base.exposed_tp_s,
             now.exposed_tp_s, now.exposed_tp_s - base.exposed_tp_s);
  fmt::print("  {:<20} {:>10.4f} s {:>10.4f} s {:>+8.4f} s\n", "  of which CP", base.exposed_cp_s,
             now.exposed_cp_s, now.exposed_cp_s - base.exposed_cp_s);
  fmt::print("  {:<20} {:>10.4f} s {:>10.4f} s {:>+8.4f} s\n", "  of which EP", base.exposed_ep_s,
             now.exposed_ep_s, now.exposed_ep_s - base.exposed_ep_s);
  fmt::print("  {:<20} {:>10.4f} s {:>10.4f} s {:>+8.4f} s\n", "  of which PP", base.exposed_pp_s,
             now.exposed_pp_s, now.exposed_pp_s - base.exposed_pp_s);
  fmt::print("  {:<20} {:>10.4f} s {:>10.4f} s {:>+8.4f} s\n", "  of which DP", base.exposed_dp_s,
             now.exposed_dp_s, now.exposed_dp_s - base.exposed_dp_s);
  fmt::print("  {:<20} {:>10.4f} s {:>10.4f} s {:>+8.4f} s\n", "sync wait (late peer)",
             base.sync_wait_s, now.sync_wait_s, now.sync_wait_s - base.sync_wait_s);
}

void print_text(const Scenario& s, const TopologySpec& topo, const SimulationResult& r,
                const std::optional<BaseRunMetrics>& base) {
  const SimulationSummary m = summarize(s, topo, r);
  const double t = m.iteration_time_s;
  auto pct = [t](double x) { return t > 0 ? 100.0 * x / t : 0.0; };
  const JobGpus job = job_gpus(topo, s.cluster.num_gpus);
  fmt::print("traintwin simulate: {} on {} ({})\n", s.name,
             job.mixed() ? job.describe() : fmt::format("{} x {}", s.cluster.num_gpus, topo.gpu.name),
             topo.name);
  fmt::print(
      "layout             TP {} x CP {} x PP {} x DP {}{}, {} chunk(s)/stage, SP {}, "
      "micro-batch {}, global batch {} ({} micro-batches), recompute {}\n",
      s.parallel.tensor_model_parallel_size, s.parallel.context_parallel_size,
      s.parallel.pipeline_model_parallel_size, s.parallel.data_parallel_size,
      s.model.is_moe() ? fmt::format(" (experts: EP {} x ETP {} x expert DP {})",
                                     s.parallel.expert_model_parallel_size, s.parallel.expert_tp(),
                                     s.parallel.expert_data_parallel_size())
                       : "",
      s.parallel.virtual_pipeline_model_parallel_size, s.parallel.sequence_parallel ? "on" : "off",
      s.training.micro_batch_size, s.training.global_batch_size, s.num_micro_batches(),
      recompute_text(s.training));
  fmt::print("iteration time     {:.4f} s\n", t);
  fmt::print("throughput         {:.0f} tokens/s, {:.1f} tokens/s/GPU\n", m.tokens_per_s,
             m.tokens_per_s_per_gpu);
  fmt::print("model TFLOP/s/GPU  {:.1f}   MFU {:.1f} %   HFU {:.1f} %\n", m.model_tflops_per_gpu,
             100 * m.mfu, 100 * m.hfu);
  fmt::print(
      "time of rank {:<5} compute {:.4f} s ({:.1f} %, optimizer {:.4f} s), exposed TP {:.4f} s "
      "({:.1f} %), "
      "CP {:.4f} s ({:.1f} %), EP {:.4f} s ({:.1f} %), "
      "PP {:.4f} s ({:.1f} %), DP {:.4f} s ({:.1f} %), pipeline bubble {:.4f} s ({:.1f} %), "
      "sync wait {:.4f} s ({:.1f} %)\n",
      r.critical.rank, m.compute_s, pct(m.compute_s), m.optimizer_s, m.exposed_tp_s,
      pct(m.exposed_tp_s), m.exposed_cp_s, pct(m.exposed_cp_s), m.exposed_ep_s, pct(m.exposed_ep_s),
      m.exposed_pp_s, pct(m.exposed_pp_s), m.exposed_dp_s, pct(m.exposed_dp_s), r.critical.bubble_s,
      pct(r.critical.bubble_s), m.sync_wait_s, pct(m.sync_wait_s));
  if (!r.late_peers.empty()) {
    std::string who;
    for (const LatePeer& p : r.late_peers) {
      who += fmt::format("{}rank {} ({} collectives) {:.4f} s in {} wait{}, the largest {:.4f} s "
                         "at {}",
                         who.empty() ? "" : ", ", p.rank, to_string(p.group), p.wait_s, p.waits,
                         p.waits == 1 ? "" : "s", p.largest_wait_s, p.op);
    }
    fmt::print("late peers         rank {} waited at collectives for {}\n", r.critical.rank, who);
  }
  std::string fits = "fits";
  // Each stage on its own GPUs (a mixed cluster's stages may sit on different kinds).
  const std::vector<StageMemory> stages = memory_per_stage(s);
  const std::vector<double> per_stage = gpu_memory_per_stage_bytes(s, job);
  const LayoutMemoryFit fit = layout_memory_fit(s, stages, per_stage);
  const double reserve = fit.largest_reserve_bytes;
  switch (fit.verdict) {
    case MemoryVerdict::kFits:
      fits = fmt::format("fits, with the reserve of {} (CUDA context, NCCL buffers, cuBLAS "
                         "workspaces, fragmentation: `traintwin memory`)",
                         gib(reserve));
      break;
    case MemoryVerdict::kAtRisk:
      fits = fmt::format(
          "fits, at risk (inside the reserve of {} for the CUDA context, NCCL buffers, cuBLAS "
          "workspaces and fragmentation, or above {:.0f} %: `traintwin memory`)",
          gib(reserve), 100 * kMemoryAtRiskShare);
      break;
    case MemoryVerdict::kOutOfMemory:
      fits = "does NOT fit";
      break;
  }
  std::string capacity = gib(topo.gpu.memory_bytes);
  if (job.mixed()) {
    capacity.clear();
    // Consecutive stages on GPUs of one memory size as one run: "stages 0-7: peak X of Y".
    for (size_t i = 0; i < stages.size();) {
      const double cap = per_stage[static_cast<size_t>(stages[i].pp_rank)];
      size_t j = i;
      double peak = 0;
      while (j < stages.size() && per_stage[static_cast<size_t>(stages[j].pp_rank)] == cap) {
        peak = std::max(peak, stages[j].total_bytes());
        ++j;
      }
      capacity += fmt::format("{}stage{} {}: peak {} of {}", capacity.empty() ? "" : ", ",
                              j - i > 1 ? "s" : "",
                              j - i > 1 ? fmt::format("{}-{}", stages[i].pp_rank,
                                                      stages[j - 1].pp_rank)
                                        : std::to_string(stages[i].pp_rank),
                              gib(peak), gib(cap));
      i = j;
    }
  }
  fmt::print("memory             peak {} per GPU{}{}: {}\n", gib(m.peak_memory_bytes),
             job.mixed() ? " (" : " of ", job.mixed() ? capacity + ")" : capacity, fits);
  // CPU offload: its exposed time and the host memory it takes (shown only with offload on).
  if (s.training.optimizer_cpu_offload || s.training.cpu_offloading) {
    fmt::print("cpu offload        exposed {:.4f} s ({:.1f} %) of rank {} waiting for host ops "
               "(host-link copies, the host CPU's optimizer step)\n",
               r.critical.exposed_offload_s, pct(r.critical.exposed_offload_s), r.critical.rank);
    std::string lines = cli::host_memory_lines(s, topo, stages);
    for (size_t at = 0; at < lines.size();) {
      const size_t end = lines.find('\n', at);
      fmt::print("                   {}\n", lines.substr(at, end - at));
      at = end + 1;
    }
  }
  std::string sources;
  for (const auto& [name, share] : m.cost_sources) {
    if (share > 0)
      sources += fmt::format("{}{} {:.1f} %", sources.empty() ? "" : ", ", name, 100 * share);
  }
  fmt::print("compute costs      {}\n", sources);
  std::string algos;
  for (const auto& [name, n] : r.collective_algorithms)
    algos += fmt::format("{}{} {}", algos.empty() ? "" : ", ", name, n);
  fmt::print("collectives        {}\n", algos);
  if (!r.link_tiers.empty()) {
    fmt::print("links per tier     {:<11} {:>6} {:>11} {:>11} {:>8} {:>8} {:>8}\n", "tier", "links",
               "bytes mean", "bytes max", "util mean", "p99", "max");
    for (const TierTraffic& tier : r.link_tiers) {
      fmt::print("                   {:<11} {:>6} {:>10}B {:>10}B {:>7.1f}% {:>7.1f}% {:>7.1f}%\n",
                 tier.tier, tier.links, si(tier.bytes_mean), si(tier.bytes_max),
                 100 * tier.utilization_mean, 100 * tier.utilization_p99,
                 100 * tier.utilization_max);
    }
  }
  if (!r.link_tiers.empty()) {
    fmt::print(
        "                   (flows only: collectives inside a node take closed forms and are "
        "not counted on NVLink links)\n");
  }
  if (r.hot_links.empty()) {
    fmt::print("hot links          none (no link at 2x or more of its tier's mean utilization)\n");
  } else {
    fmt::print("hot links          (>= 2x their tier's mean utilization)\n");
    for (const LinkLoad& l : r.hot_links) {
      fmt::print("  {:<32} {:<10} {:>10}B  {:5.1f} % busy, {:.1f}x its tier's mean\n", l.name,
                 l.tier, si(l.bytes), 100 * l.utilization, l.vs_tier_mean);
    }
  }
  for (const std::string& line : r.reductions) fmt::print("reduction          {}\n", line);
  fmt::print(
      "simulated in {:.2f} s wall: {} of {} ranks replayed, {} ops, {} flows ({} in closed-form "
      "groups, {} in SimGrid's solver, the rest alone on their links), {} events\n",
      r.sim_wall_s, r.replayed_ranks, s.cluster.num_gpus, r.ops, r.flows, r.group_flows,
      r.solver_flows, r.events);
  std::string phases;
  for (const auto& [phase, sec] : r.wall_phases_s)
    phases += fmt::format("{}{} {:.2f} s", phases.empty() ? "" : ", ", phase, sec);
  fmt::print("wall time by phase {}\n", phases);
  // A mixed job's MFU is against its GPUs' mean peak (summarize()), and says so.
  fmt::print("MFU = model FLOPs / (iteration time x GPUs x {} dense {} peak{}); {}\n",
             si(job.mean_peak_FLOPs(gemm_precision(s.training))),
             to_string(gemm_precision(s.training)),
             job.mixed() ? ", the mean of the job's GPUs" : "", model_flops_formula(s.model));
  if (base) print_what_if(s, m, *base);
}

/// `simulate --trace chakra DIR --topology FILE`: a recorded or exported trace replayed on a
/// topology (sim/chakra_import.hpp), printed as the critical rank's breakdown.
void simulate_trace(const SimulateOptions& o) {
  if (o.trace[0] != "chakra") {
    throw ConfigError("--trace: format '" + o.trace[0] + "' (allowed: chakra)");
  }
  if (!o.scenario.file.empty()) {
    throw ConfigError("simulate: give either a SCENARIO or --trace chakra DIR, not both");
  }
  if (o.topology.empty()) throw ConfigError("simulate --trace: --topology FILE is required");
  for (const auto& [flag, given] : {std::pair{"--json", o.json},
                                    {"--out", !o.out_dir.empty()},
                                    {"--cost-db", !o.cost_db.empty() && !o.cost_model},
                                    {"--costs-from-timeline", !o.costs_from_timeline.empty()},
                                    {"--cost-db-topology", !o.cost_db_topology.empty()},
                                    {"--aggregate-tp", o.aggregate_tp}}) {
    if (given) {
      throw ConfigError(std::string("simulate --trace: ") + flag +
                        " is not supported with a trace (compute nodes take the trace's "
                        "durations, or with --cost-model the cost model --cost-db gives; the "
                        "result is printed as text)");
    }
  }
  ChakraReadOptions read;
  read.kernels = o.cost_model;
  if (!o.all_gather_comm_size.empty()) {
    read.all_gather_size = parse_chakra_all_gather_size(o.all_gather_comm_size);
  }
  const ChakraTrace trace = read_chakra_trace(o.trace[1], read);
  const TopologySpec topo = load_topology(o.topology);
  // --cost-model: the cost model a scenario on this topology gets (its GPU's database beside
  // the topologies, or --cost-db, with the calibrated roofline as fallback).
  std::unique_ptr<CostModel> kernel_costs;
  if (o.cost_model) {
    kernel_costs =
        make_simulation_cost_model(topo.gpu, default_database_dir(o.topology), o.cost_db);
  }
  SimulationOptions opts;
  opts.collective_algorithm = o.collective_algorithm;
  opts.link_contention = !o.no_link_contention;
  ReplayProgressLine progress(!o.quiet);
  opts.progress = progress.callback();
  const SimulationResult r = simulate_chakra_trace(trace, topo, opts, kernel_costs.get());
  progress.finish();
  const double t = r.iteration_time_s;
  auto pct = [t](double x) { return t > 0 ? 100.0 * x / t : 0.0; };
  fmt::print("traintwin simulate: Chakra trace {} ({} ranks, {} nodes, {}) on {} x {} ({})\n",
             o.trace[1], trace.files.size(), trace.nodes, trace.name, trace.files.size(),
             topo.gpu.name, topo.name);
  const RankLayout& l = trace.program.layout;
  fmt::print("layout             TP {} x CP {} x PP {} x DP {}, order {} ({})\n",
             l.size(GroupKind::kTp), l.size(GroupKind::kCp), l.size(GroupKind::kPp),
             l.size(GroupKind::kDp), l.order(), trace.layout_source);
  fmt::print("all-gather size    comm_size read as each rank's {} ({})\n",
             trace.all_gather_size == ChakraAllGatherSize::kInput ? "input"
                                                                  : "gathered output",
             trace.all_gather_size_source);
  if (o.cost_model) {
    fmt::print(
        "compute costs      {} of {} compute nodes priced by the cost model ({}), the rest at "
        "their trace durations (nodes without traintwin.kernels, or naming a kernel traintwin "
        "does not know)\n",
        trace.kernel_nodes, trace.compute_nodes, topo.gpu.name);
  } else {
    fmt::print("compute costs      {} compute nodes at their trace durations\n",
               trace.compute_nodes);
  }
  fmt::print("iteration time     {:.6f} s\n", t);
  const TimeBreakdown& b = r.critical;
  fmt::print(
      "time of rank {:<5} compute {:.6f} s ({:.1f} %), exposed TP {:.6f} s ({:.1f} %), CP {:.6f} s "
      "({:.1f} %), EP {:.6f} s ({:.1f} %), PP {:.6f} s ({:.1f} %), DP {:.6f} s ({:.1f} %), "
      "pipeline bubble {:.6f} s ({:.1f} %), sync wait {:.6f} s ({:.1f} %)\n",
      b.rank, b.compute_s, pct(b.compute_s), b.exposed_tp_s, pct(b.exposed_tp_s), b.exposed_cp_s,
      pct(b.exposed_cp_s), b.exposed_ep_s, pct(b.exposed_ep_s), b.exposed_pp_s, pct(b.exposed_pp_s),
      b.exposed_dp_s, pct(b.exposed_dp_s), b.bubble_s, pct(b.bubble_s), b.sync_wait_s,
      pct(b.sync_wait_s));
  std::string algos;
  for (const auto& [name, n] : r.collective_algorithms)
    algos += fmt::format("{}{} {}", algos.empty() ? "" : ", ", name, n);
  fmt::print("collectives        {}\n", algos.empty() ? "none" : algos);
  fmt::print(
      "simulated in {:.2f} s wall: {} ops, {} flows ({} in closed-form groups, {} in "
      "SimGrid's solver), {} events\n",
      r.sim_wall_s, r.ops, r.flows, r.group_flows, r.solver_flows, r.events);
}

}  // namespace

void register_simulate_command(CLI::App& app) {
  auto o = std::make_shared<SimulateOptions>();
  auto* cmd =
      app.add_subcommand("simulate", "Simulate one training iteration on the cluster (SimGrid)");
  add_scenario_options(*cmd, o->scenario);
  cmd->add_flag("--json", o->json, "Print one JSON object instead of the table");
  cmd->add_option("--out", o->out_dir, "Write summary.json and timeline.json (Perfetto) into DIR");
  cmd->add_option(
      "--trace-ranks", o->trace_ranks,
      "Ranks in timeline.json: all, stages (TP/DP rank 0 of every stage, the default), or "
      "a list 0,8,16");
  cmd->add_option(
         "--cost-db", o->cost_db,
         "Measured cost database (default: traces/db/<gpu>.json beside topologies/, if any)")
      ->check(CLI::ExistingFile);
  cmd->add_option(
         "--costs-from-timeline", o->costs_from_timeline,
         "Kernel costs from a recorded live timeline (train --timeline, validate --live "
         "--timeline) instead of the cost model: replay a recorded run on this topology or "
         "scale (measured on --cost-db-topology's GPU, default the scenario's; a timeline "
         "recorded on another device than that GPU is refused)")
      ->check(CLI::ExistingFile)
      ->excludes("--cost-db");
  cmd->add_option("--cost-db-topology", o->cost_db_topology,
                  "Topology whose GPU the database was measured on (default: the scenario's)");
  cmd->add_flag("--aggregate-tp", o->aggregate_tp,
                "Replay TP rank 0 of each TP group only (exact when TP fills a node; 8x faster)");
  cmd->add_flag("--full-replay", o->full_replay,
                "Replay every rank: no reduction, not even those exact by symmetry (by default TP "
                "rank 0 stands for its TP group when TP fills each node, one rail per GPU, dense "
                "model)")
      ->excludes("--aggregate-tp");
  cmd->add_flag("--no-link-contention", o->no_link_contention,
                "Time every transfer and collective by its uncontended closed form (the analytical "
                "estimator's rule) instead of sharing links between flows");
  cmd->add_flag("--quiet", o->quiet,
                "No progress line on stderr (shown on a terminal for replays longer than 2 s)");
  cmd->add_option("--collective-algorithm", o->collective_algorithm,
                  "Force an NCCL algorithm for every collective")
      ->check(CLI::IsMember({"ring", "tree", "nvls"}));
  cmd->get_option("scenario")->required(false);
  cmd->add_option("--trace", o->trace,
                  "Replay recorded traces instead of a scenario: --trace chakra DIR (Chakra ET "
                  "files DIR/<name>.<rank>.et, or the prefix DIR/<name>), with --topology")
      ->expected(2)
      ->type_name("FORMAT DIR");
  cmd->add_option("--topology", o->topology, "Topology file the --trace runs on")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--cost-model", o->cost_model,
                "With --trace: price the compute nodes that name traintwin kernels (our export's "
                "traintwin.kernels) with the topology GPU's cost model (or --cost-db) instead of "
                "their trace durations; the others keep their durations and are counted");
  cmd->add_option("--all-gather-comm-size", o->all_gather_comm_size,
                  "With --trace, for traces that do not say (other tools' traces): an "
                  "ALL_GATHER's comm_size counts each rank's input (ASTRA-sim's reading, the "
                  "default) or the gathered output (SimAI's, nccl-tests' size)")
      ->check(CLI::IsMember({"input", "output"}));
  cmd->callback([o] {
    if (!o->trace.empty()) {
      simulate_trace(*o);
      return;
    }
    if (o->scenario.file.empty()) {
      throw ConfigError("simulate: give a SCENARIO file, or --trace chakra DIR --topology FILE");
    }
    if (o->cost_model) {
      throw ConfigError(
          "simulate: --cost-model is for --trace (a scenario is always priced by the cost "
          "model)");
    }
    if (!o->all_gather_comm_size.empty()) {
      throw ConfigError("simulate: --all-gather-comm-size is for --trace (how a Chakra trace's "
                        "all-gathers count their bytes)");
    }
    if (!o->topology.empty()) {
      throw ConfigError(
          "simulate: --topology is for --trace; a scenario names its topology "
          "(cluster.topology)");
    }
    const Scenario s = o->scenario.load();
    // The output folder is checked before the simulation, not after it.
    std::optional<SimulationOutputs> out;
    if (!o->out_dir.empty()) out.emplace(o->out_dir, s.name);
    SimulationSession session(s, {o->cost_db, o->cost_db_topology, o->costs_from_timeline},
                              simulation_options(*o, s));
    const TopologySpec& topo = session.topology();
    const std::optional<BaseRunMetrics> base = session.run_what_if_base();
    const BaseRunMetrics* base_ptr = base ? &*base : nullptr;
    if (out) session.options().timeline_sink = out->timeline_sink();
    ReplayProgressLine progress(!o->quiet);
    session.options().progress = progress.callback();
    const SimulationResult r = session.run();
    progress.finish();
    if (o->json) {
      fmt::print("{}\n", summary_json(s, topo, r, true, base_ptr).dump(2));
    } else {
      print_text(s, topo, r, base);
    }
    if (out) out->finish(summary_json(s, topo, r, /*include_wall_time=*/false, base_ptr), !o->json);
  });
}

}  // namespace traintwin::cli
