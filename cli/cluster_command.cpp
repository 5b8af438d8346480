// `traintwin cluster PLACEMENT [--json]`: several jobs on one shared fabric (sim/multi_job.hpp):
// per job its iteration time alone and together (mean, min / p50 / max), slowdown and exposed
// communication per kind; per tier the links the jobs use and share and how busy they are; with
// --out, cluster.json, a Perfetto timeline and report.html (viz/cluster_charts.hpp).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "cli/commands.hpp"
#include "cli/report_output.hpp"
#include "core/posix_file.hpp"
#include "sim/multi_job.hpp"
#include "sim/placement.hpp"

namespace traintwin::cli {
namespace {

struct ClusterCommandOptions {
  std::string placement;
  bool json = false;
  bool full_replay = false;
  bool replay_independent = false;
  int workers = 0;
  std::string out_dir;
};

/// The result as a Chrome trace (ui.perfetto.dev): one process per job with its iterations
/// together as slices (alone time and slowdown in their args), and one counter track per busiest
/// shared link with each job's utilization over time (percent).
nlohmann::ordered_json cluster_trace(const ClusterResult& r) {
  nlohmann::ordered_json ev = nlohmann::ordered_json::array();
  const auto us = [](double s) { return s * 1e6; };
  for (size_t j = 0; j < r.jobs.size(); ++j) {
    const ClusterJobResult& job = r.jobs[j];
    const auto pid = static_cast<int64_t>(j);
    ev.push_back({{"ph", "M"}, {"pid", pid}, {"name", "process_name"},
                  {"args", {{"name", "job " + job.name}}}});
    ev.push_back({{"ph", "M"}, {"pid", pid}, {"tid", 0}, {"name", "thread_name"},
                  {"args", {{"name", "iterations"}}}});
    for (size_t k = 0; k < job.together_iterations.size(); ++k) {
      const JobIteration& it = job.together_iterations[k];
      ev.push_back({{"ph", "X"}, {"pid", pid}, {"tid", 0}, {"name", fmt::format("iteration {}", k + 1)},
                    {"ts", us(it.start_s)}, {"dur", us(it.time_s())},
                    {"args", {{"time_ms", it.time_s() * 1e3},
                              {"alone_ms", job.alone.mean_s * 1e3},
                              {"slowdown", job.alone.mean_s > 0 ? it.time_s() / job.alone.mean_s : 1.0},
                              {"exposed_comm_ms", it.critical.exposed_comm_s() * 1e3}}}});
    }
  }
  const auto links_pid = static_cast<int64_t>(r.jobs.size());
  if (!r.shared_series.empty()) {
    ev.push_back({{"ph", "M"}, {"pid", links_pid}, {"name", "process_name"},
                  {"args", {{"name", "shared links (utilization %)"}}}});
  }
  for (const SharedLinkSeries& ls : r.shared_series) {
    const size_t bins = ls.utilization.empty() ? 0 : ls.utilization[0].size();
    for (size_t b = 0; b <= bins; ++b) {
      nlohmann::ordered_json args;
      for (size_t j = 0; j < r.jobs.size() && j < ls.utilization.size(); ++j) {
        args[r.jobs[j].name] = b < bins ? 100 * ls.utilization[j][b] : 0.0;
      }
      ev.push_back({{"ph", "C"}, {"pid", links_pid}, {"name", ls.name},
                    {"ts", us(static_cast<double>(b) * ls.bin_s)}, {"args", args}});
    }
  }
  return {{"traceEvents", ev}, {"displayTimeUnit", "ms"}, {"otherData", {{"name", r.name}}}};
}

std::string ms(double s) { return fmt::format("{:.3f}", s * 1e3); }

void print_text(const ClusterResult& r) {
  fmt::print("cluster {}: {} jobs on {} nodes of {} ({} GPUs per node)\n", r.name, r.jobs.size(),
             r.num_nodes, r.topology, r.gpus_per_node);
  size_t w = 4;
  for (const ClusterJobResult& j : r.jobs) w = std::max(w, j.name.size());
  fmt::print("\niteration time (ms): alone on its nodes, together with the other jobs\n");
  fmt::print("{:<{}}  {:>6}  {:>6}  {:>5}  {:>12}  {:>12}  {:>12}  {:>12}  {:>12}  {:>8}\n", "job",
             w, "GPUs", "nodes", "iters", "alone", "together", "min", "p50", "max", "slowdown");
  for (const ClusterJobResult& j : r.jobs) {
    fmt::print("{:<{}}  {:>6}  {:>6}  {:>5}  {:>12}  {:>12}  {:>12}  {:>12}  {:>12}  {:>7.4f}x\n",
               j.name, w, j.num_gpus, j.nodes.size(), j.iterations, ms(j.alone.mean_s),
               ms(j.together.mean_s), ms(j.together.min_s), ms(j.together.p50_s),
               ms(j.together.max_s), j.slowdown);
  }
  fmt::print("\nexposed communication per iteration (ms, critical rank), alone -> together\n");
  fmt::print("{:<{}}  {:>19}  {:>19}  {:>19}  {:>19}  {:>19}  {:>19}\n", "job", w, "TP", "CP",
             "EP", "PP", "DP", "sync wait");
  auto pair = [](double a, double t) { return fmt::format("{} -> {}", ms(a), ms(t)); };
  for (const ClusterJobResult& j : r.jobs) {
    const TimeBreakdown& a = j.alone_breakdown;
    const TimeBreakdown& t = j.together_breakdown;
    fmt::print("{:<{}}  {:>19}  {:>19}  {:>19}  {:>19}  {:>19}  {:>19}\n", j.name, w,
               pair(a.exposed_tp_s, t.exposed_tp_s), pair(a.exposed_cp_s, t.exposed_cp_s),
               pair(a.exposed_ep_s, t.exposed_ep_s), pair(a.exposed_pp_s, t.exposed_pp_s),
               pair(a.exposed_dp_s, t.exposed_dp_s), pair(a.sync_wait_s, t.sync_wait_s));
  }
  fmt::print("\nlinks per tier, utilization over the {} ms window (bytes / (bandwidth x window))\n",
             ms(r.window_s));
  std::string header = fmt::format("{:<12}  {:>6}", "tier", "links");
  for (const ClusterJobResult& j : r.jobs) header += fmt::format("  {:>{}}", "used " + j.name, w + 5);
  header += fmt::format("  {:>6}", "shared");
  for (const ClusterJobResult& j : r.jobs) header += fmt::format("  {:>{}}", "util " + j.name, w + 5);
  header += fmt::format("  {:>10}  {:>10}", "util total", "max total");
  fmt::print("{}\n", header);
  for (const TierSharing& t : r.tiers) {
    std::string line = fmt::format("{:<12}  {:>6}", t.tier, t.links);
    for (int64_t c : t.links_per_job) line += fmt::format("  {:>{}}", c, w + 5);
    line += fmt::format("  {:>6}", t.links_shared);
    for (double u : t.shared_utilization_mean) line += fmt::format("  {:>{}.1f}%", 100 * u, w + 4);
    line += fmt::format("  {:>9.1f}%  {:>9.1f}%", 100 * t.shared_total_mean, 100 * t.shared_total_max);
    fmt::print("{}\n", line);
  }
  fmt::print("(util: mean over the tier's shared links)\n");
  if (r.shared_links.empty()) {
    fmt::print("\nno link carries traffic of two jobs\n");
  } else {
    fmt::print("\nbusiest shared links\n");
    for (const SharedLink& l : r.shared_links) {
      std::string line = fmt::format("{:<32}  {:<10}", l.name, l.tier);
      for (size_t k = 0; k < l.utilization.size(); ++k) {
        line += fmt::format("  {} {:.1f}%", r.jobs[k].name, 100 * l.utilization[k]);
      }
      line += fmt::format("  total {:.1f}%", 100 * l.total);
      fmt::print("{}\n", line);
    }
  }
  for (const std::string& red : r.reductions) fmt::print("reduction  {}\n", red);
  fmt::print("simulated in {:.2f} s (lowering, alone replays and every job together beside them {:.2f} "
             "s, then together {:.2f} s; "
             "{} flows together, {} in SimGrid's solver)\n",
             r.wall_s, r.alone_wall_s, r.together_wall_s, r.flows, r.solver_flows);
}

}  // namespace

void register_cluster_command(CLI::App& app) {
  auto o = std::make_shared<ClusterCommandOptions>();
  auto* cmd = app.add_subcommand(
      "cluster",
      "Several jobs on one shared fabric (a placement file): each job's iteration time alone and "
      "together, slowdown, exposed communication, shared links per tier");
  cmd->add_option("PLACEMENT", o->placement,
                  "Placement file: topology and jobs (scenario, nodes, iterations, start); format "
                  "in scenarios/README.md")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_flag("--json", o->json, "Print one JSON object instead of the tables");
  cmd->add_option("--out", o->out_dir,
                  "Write cluster.json (as --json), timeline.json (Perfetto: each job's "
                  "iterations, the busiest shared links' utilization per job) and report.html "
                  "(the tables, the iterations together and the shared links over time) into DIR");
  cmd->add_flag("--full-replay", o->full_replay,
                "Replay every rank of every job (no TP aggregation)");
  cmd->add_flag("--replay-independent", o->replay_independent,
                "Also replay together the jobs that share no link with another (by default their "
                "iterations are their alone one's, which is exact)");
  cmd->add_option("--workers", o->workers,
                  "Child processes at once for the replays (default: the cores)")
      ->check(CLI::PositiveNumber);
  cmd->callback([o] {
    const Placement p = load_placement(o->placement);
    // The output folder is checked before the replays, not after them.
    if (!o->out_dir.empty()) prepare_output_directory(o->out_dir, "--out");
    ClusterOptions opts;
    opts.full_replay = o->full_replay;
    opts.replay_independent_jobs = o->replay_independent;
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    opts.workers = o->workers > 0 ? o->workers : cores;
    const ClusterResult r = run_cluster(p, opts);
    if (o->json) {
      fmt::print("{}\n", to_json(r).dump(2));
    } else {
      print_text(r);
    }
    if (!o->out_dir.empty()) {
      const std::filesystem::path dir = o->out_dir;
      prepare_output_directory(dir, "--out");
      AtomicFile summary(dir / "cluster.json");
      summary.write(to_json(r).dump(2) + "\n");
      summary.commit();
      AtomicFile trace(dir / "timeline.json");
      trace.write(cluster_trace(r).dump() + "\n");
      trace.commit();
      if (!o->json) {
        fmt::print("wrote {} and {} (open it in ui.perfetto.dev)\n", (dir / "cluster.json").string(),
                   (dir / "timeline.json").string());
      }
      write_cluster_report_or_warn(dir, !o->json, r);
    }
  });
}

}  // namespace traintwin::cli
