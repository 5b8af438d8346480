// Several jobs on one fabric; see multi_job.hpp for the flow. replay_jobs() is the engine side
// (one SimGrid engine, one platform, one flow network, one replay Engine per job bound to its
// nodes); run_cluster() prepares the jobs of a placement and runs the replays in children.
#include "sim/multi_job.hpp"

#include <simgrid/s4u/Engine.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <unordered_map>

#include "core/error.hpp"
#include "core/rank_layout.hpp"
#include "sim/flow_network.hpp"
#include "sim/isolated.hpp"
#include "sim/link_traffic.hpp"
#include "sim/platform.hpp"
#include "sim/replay_engine.hpp"
#include "sim/session.hpp"
#include "sim/summary_document.hpp"
#include "sim/timed_program.hpp"
#include "sim/zb_v_order.hpp"

namespace traintwin {
namespace {

/// FlowNetwork tags: the job's index above this bit, its Engine's flow record below.
constexpr int kJobTagShift = 40;

bool default_scaling(const PlatformScaling& s) {
  return s.nvlink_bandwidth == 1.0 && s.ib_bandwidth == 1.0 && s.degraded_links.empty();
}

/// Whether the replay of `j` alone would aggregate TP (SimulationOptions::exact_reductions /
/// aggregate_tp), and with which TP size.
int64_t aggregated_tp(const JobInput& j, const TopologySpec& topo) {
  const RankLayout& l = j.program->layout;
  const int64_t tp = l.size(GroupKind::kTp);
  if (tp <= 1) return 1;
  if (j.options.aggregate_tp) return tp;
  if (j.options.exact_reductions &&
      tp_aggregation_blocker(l, topo, j.options, j.program->scenario.model.is_moe()).empty()) {
    return tp;
  }
  return 1;
}

/// A JobsReplay through a child's pipe (doubles round-trip exactly).
std::string encode(const JobsReplay& r) {
  nlohmann::json j;
  j["wall_s"] = r.wall_s;
  j["group_flows"] = r.group_flows;
  j["solver_flows"] = r.solver_flows;
  j["max_solver_flows"] = r.max_solver_flows;
  for (const FabricLink& l : r.links) j["links"].push_back({l.name, l.tier, l.bandwidth_Bps});
  j["shared_series"] = nlohmann::json::array();
  for (const SharedLinkSeries& ls : r.shared_series) {
    j["shared_series"].push_back(
        {{"name", ls.name}, {"tier", ls.tier}, {"bin_s", ls.bin_s}, {"utilization", ls.utilization}});
  }
  for (const JobReplay& job : r.jobs) {
    nlohmann::json o;
    o["name"] = job.name;
    o["ops"] = job.ops;
    o["flows"] = job.flows;
    o["reductions"] = job.reductions;
    o["iterations"] = nlohmann::json::array();
    for (const JobIteration& it : job.iterations) {
      o["iterations"].push_back({{"start_s", it.start_s}, {"end_s", it.end_s},
                                 {"critical", nlohmann::json(breakdown_json(it.critical))}});
    }
    o["link_bytes"] = nlohmann::json::array();
    for (size_t i = 0; i < job.link_bytes.size(); ++i) {
      if (job.link_bytes[i] > 0) o["link_bytes"].push_back({i, job.link_bytes[i]});
    }
    j["jobs"].push_back(std::move(o));
  }
  return j.dump();
}

JobsReplay decode(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text);
  JobsReplay r;
  r.wall_s = j.at("wall_s").get<double>();
  r.group_flows = j.at("group_flows").get<int64_t>();
  r.solver_flows = j.at("solver_flows").get<int64_t>();
  r.max_solver_flows = j.at("max_solver_flows").get<int64_t>();
  for (const auto& l : j.at("links")) {
    r.links.push_back({l.at(0).get<std::string>(), l.at(1).get<std::string>(), l.at(2).get<double>()});
  }
  for (const auto& ls : j.at("shared_series")) {
    r.shared_series.push_back({ls.at("name").get<std::string>(), ls.at("tier").get<std::string>(),
                               ls.at("bin_s").get<double>(),
                               ls.at("utilization").get<std::vector<std::vector<double>>>()});
  }
  for (const auto& o : j.at("jobs")) {
    JobReplay job;
    job.name = o.at("name").get<std::string>();
    job.ops = o.at("ops").get<int64_t>();
    job.flows = o.at("flows").get<int64_t>();
    job.reductions = o.at("reductions").get<std::vector<std::string>>();
    for (const auto& it : o.at("iterations")) {
      job.iterations.push_back({it.at("start_s").get<double>(), it.at("end_s").get<double>(),
                                breakdown_from_json(nlohmann::ordered_json(it.at("critical")),
                                                    JsonPlace{"multi-job replay", "critical"})});
    }
    job.link_bytes.assign(r.links.size(), 0.0);
    for (const auto& lb : o.at("link_bytes")) {
      job.link_bytes.at(lb.at(0).get<size_t>()) = lb.at(1).get<double>();
    }
    r.jobs.push_back(std::move(job));
  }
  return r;
}

IterationStats stats_of(std::vector<double> t) {
  IterationStats s;
  if (t.empty()) return s;
  std::sort(t.begin(), t.end());
  s.min_s = t.front();
  s.max_s = t.back();
  const size_t n = t.size();
  s.p50_s = n % 2 == 1 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
  s.mean_s = std::accumulate(t.begin(), t.end(), 0.0) / static_cast<double>(n);
  return s;
}

/// The mean of the critical breakdowns of `its`.
TimeBreakdown mean_breakdown(const std::vector<JobIteration>& its) {
  TimeBreakdown m;
  if (its.empty()) return m;
  m.rank = its.front().critical.rank;
  for (const JobIteration& it : its) m.add(it.critical);
  const double n = static_cast<double>(its.size());
  m.compute_s /= n;
  m.optimizer_s /= n;
  m.exposed_tp_s /= n;
  m.exposed_cp_s /= n;
  m.exposed_ep_s /= n;
  m.exposed_pp_s /= n;
  m.exposed_dp_s /= n;
  m.bubble_s /= n;
  m.sync_wait_s /= n;
  return m;
}

/// A job of a placement, loaded and checked, with what its replays need.
struct PreparedJob {
  std::string where;  // "<file>:<line>: jobs[i] (name)"
  const JobPlacement* place = nullptr;
  // Shared by the jobs of one scenario and overrides (lowered once).
  std::shared_ptr<const SimulationSession> session;
  std::shared_ptr<const Program> program;
  SimulationOptions options;

  JobInput input(int64_t iterations, double start_s) const {
    JobInput in;
    in.name = place->name;
    in.program = program.get();
    in.costs = &session->costs();
    in.options = options;
    in.nodes = place->nodes;
    in.iterations = iterations;
    in.start_s = start_s;
    return in;
  }
};

/// Rethrows a ConfigError with `where` in front (keeping its type).
[[noreturn]] void rethrow_at(const std::string& where, const std::string& key, const Error& e) {
  throw ConfigError(fmt::format("{}: {}{}", where, key.empty() ? "" : key + ": ", e.what()));
}

/// The jobs already lowered, by scenario file and overrides.
using LoweredJobs =
    std::map<std::string, std::pair<std::shared_ptr<const SimulationSession>,
                                    std::shared_ptr<const Program>>>;

PreparedJob prepare_job(const Placement& p, size_t i, const TopologySpec& topo,
                        const ClusterOptions& o, LoweredJobs& lowered) {
  const JobPlacement& jp = p.jobs[i];
  PreparedJob job;
  job.place = &jp;
  job.where = fmt::format("{}:{}: jobs[{}] ({})", p.file.empty() ? p.name : p.file.string(),
                          jp.line, i, jp.name);
  Scenario s;
  try {
    s = load_scenario(jp.scenario_file, jp.overrides);
  } catch (const ConfigError& e) {
    rethrow_at(job.where, "scenario", e);
  }
  // Every job runs on the placement's topology (its cost database beside it).
  s.cluster.topology = p.topology_file;
  const int64_t G = topo.node.gpus_per_node;
  const int64_t have = static_cast<int64_t>(jp.nodes.size()) * G;
  const int64_t need = s.cluster.num_gpus;
  if (need % G != 0) {
    throw ConfigError(fmt::format(
        "{}: scenario: cluster.num_gpus {} of {} is not a multiple of the {} GPUs a job uses per "
        "node ({}: node.gpus_per_node / gpus_used_per_node): a job takes whole nodes",
        job.where, need, jp.scenario_file.string(), G, p.topology_file.string()));
  }
  if (have < need) {
    throw ConfigError(fmt::format(
        "{}: nodes: {} nodes hold {} GPUs, fewer than the {} its scenario needs (cluster.num_gpus "
        "of {}): give {} nodes",
        job.where, jp.nodes.size(), have, need, jp.scenario_file.string(), need / G));
  }
  if (have > need) {
    throw ConfigError(fmt::format(
        "{}: nodes: {} nodes hold {} GPUs, more than the {} its scenario uses (cluster.num_gpus "
        "of {}): give {} nodes, or set cluster.num_gpus={}",
        job.where, jp.nodes.size(), have, need, jp.scenario_file.string(), need / G, have));
  }
  try {
    check_gpu_supports(topo, s.training);
    check_layout_fits_nvlink_domain(topo, s);
    check_what_if(s, topo, false);
  } catch (const ConfigError& e) {
    rethrow_at(job.where, "", e);
  }
  SimulationOptions opts;
  opts.exact_reductions = !o.full_replay;
  opts.record_timeline = false;
  opts = with_what_if(opts, s.cluster.what_if);
  if (!default_scaling(opts.scaling)) {
    throw ConfigError(fmt::format(
        "{}: scenario: cluster.what_if of {} changes the fabric (ib_bandwidth_scale, "
        "nvlink_bandwidth_scale or degraded_link), which every job of the placement shares: "
        "per-job fabric what-ifs are not supported (allowed per job: gpu_speed_scale, straggler, "
        "moe_load_imbalance)",
        job.where, jp.scenario_file.string()));
  }
  if (opts.collective_algorithm.empty()) opts.collective_algorithm = s.cluster.collective_algorithm;
  std::string key = jp.scenario_file.string();
  for (const Override& ov : jp.overrides) key += "\n" + ov.key + "=" + ov.value;
  auto& [session, program] = lowered[key];
  if (!session) {
    try {
      session = std::make_shared<const SimulationSession>(s, topo, p.topology_file,
                                                          SessionCostSource{}, opts);
    } catch (const ConfigError& e) {
      rethrow_at(job.where, "", e);
    }
    const Scenario& sc = session->scenario();
    program = std::make_shared<const Program>(
        build_replay_program(sc, session->topology(), session->costs(), opts.fabric,
                             layout_of(sc).first_rank_of_each_stage()));
  }
  job.session = session;
  job.program = program;
  job.options = session->options();
  return job;
}

/// Jobs linked by a shared link, as components: component id per job.
std::vector<size_t> sharing_components(const std::vector<JobReplay>& alone) {
  const size_t n = alone.size();
  std::vector<size_t> parent(n);
  std::iota(parent.begin(), parent.end(), 0);
  std::function<size_t(size_t)> find = [&](size_t x) {
    return parent[x] == x ? x : parent[x] = find(parent[x]);
  };
  std::unordered_map<size_t, size_t> first_user;  // link -> a job using it
  for (size_t j = 0; j < n; ++j) {
    const std::vector<double>& b = alone[j].link_bytes;
    for (size_t l = 0; l < b.size(); ++l) {
      if (b[l] <= 0) continue;
      auto [it, fresh] = first_user.try_emplace(l, j);
      if (!fresh) parent[find(j)] = find(it->second);
    }
  }
  std::vector<size_t> comp(n);
  for (size_t j = 0; j < n; ++j) comp[j] = find(j);
  return comp;
}

}  // namespace

JobsReplay replay_jobs(const std::vector<JobInput>& jobs, const TopologySpec& topo,
                       int64_t num_nodes) {
  using Clock = std::chrono::steady_clock;
  const auto wall0 = Clock::now();
  if (jobs.empty()) throw InvalidArgument("replay_jobs: no job");
  const int64_t G = topo.node.gpus_per_node;
  if (num_nodes < 1) throw InvalidArgument("replay_jobs: num_nodes must be >= 1");
  check_cluster_size(topo, num_nodes * G);
  std::vector<int64_t> owner(static_cast<size_t>(num_nodes), -1);
  std::vector<SimulationOptions> opts;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const JobInput& in = jobs[j];
    const std::string who = "replay_jobs: job " + in.name;
    if (in.program == nullptr || in.costs == nullptr) throw InvalidArgument(who + ": no Program or costs");
    if (in.iterations < 1) throw InvalidArgument(who + ": iterations must be >= 1");
    if (!(in.start_s >= 0) || !std::isfinite(in.start_s)) throw InvalidArgument(who + ": start_s must be >= 0");
    if (static_cast<int64_t>(in.nodes.size()) * G != in.program->layout.world_size()) {
      throw InvalidArgument(fmt::format("{}: {} nodes of {} GPUs for {} ranks", who,
                                        in.nodes.size(), G, in.program->layout.world_size()));
    }
    for (int64_t n : in.nodes) {
      if (n < 0 || n >= num_nodes) {
        throw InvalidArgument(fmt::format("{}: node {} outside the fabric's {} nodes", who, n, num_nodes));
      }
      int64_t& o = owner[static_cast<size_t>(n)];
      if (o >= 0) {
        throw InvalidArgument(fmt::format("{}: node {} is job {}'s too", who, n,
                                          jobs[static_cast<size_t>(o)].name));
      }
      o = static_cast<int64_t>(j);
    }
    if (!default_scaling(in.options.scaling)) {
      throw ConfigError(who + ": a platform what-if (bandwidth scale, degraded link) would change "
                              "the fabric every job shares");
    }
    SimulationOptions x = in.options;
    x.record_timeline = false;
    x.timeline_sink = nullptr;
    x.progress = nullptr;
    opts.push_back(std::move(x));
  }
  // TP aggregation is exact across jobs only when every job's rail 0 stands for its other rails
  // alike: all aggregated, with one TP size, one rail per GPU. Else every rank is replayed.
  std::set<int64_t> agg;
  for (const JobInput& in : jobs) agg.insert(aggregated_tp(in, topo));
  const bool keep_aggregation =
      agg.size() == 1 && *agg.begin() > 1 && topo.nic.nics_per_node == topo.node.gpus_per_node;
  if (!keep_aggregation) {
    for (SimulationOptions& x : opts) {
      x.aggregate_tp = false;
      x.exact_reductions = false;
    }
  }
  // Each op's duration once per Program, cost model and GPU speed (jobs of one scenario share).
  std::vector<std::shared_ptr<TimedProgram>> timed;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const SimulationOptions& x = opts[j];
    const Program& prog = *jobs[j].program;
    // Each rank on its node's GPU (a mixed cluster's node groups).
    JobGpus gpus;
    for (int64_t r = 0; r < prog.layout.world_size(); ++r) {
      gpus.add_rank(gpu_of_node(topo, jobs[j].nodes[static_cast<size_t>(r / G)]));
    }
    bool shared = false;
    for (size_t k = 0; k < j && !x.straggler && topo.node_groups.empty(); ++k) {
      if (jobs[k].program == jobs[j].program && jobs[k].costs == jobs[j].costs &&
          !opts[k].straggler && opts[k].gpu_speed_scale == x.gpu_speed_scale) {
        timed.push_back(timed[k]);
        shared = true;
        break;
      }
    }
    if (shared) continue;
    ComputeScaling compute{x.gpu_speed_scale, x.straggler, {}};
    if (x.straggler && x.straggler_tp_group && x.straggler->rank >= 0 &&
        x.straggler->rank < prog.layout.world_size()) {
      compute.straggler_peers = prog.layout.group(GroupKind::kTp, x.straggler->rank);
      std::sort(compute.straggler_peers.begin(), compute.straggler_peers.end());
    }
    timed.push_back(std::make_shared<TimedProgram>(prog, *jobs[j].costs, gpus, std::move(compute)));
  }
  const auto engine = replay_engine::start_simgrid_engine();
  auto platform = Platform::build(*engine, topo, num_nodes * G);
  std::vector<std::unique_ptr<replay_engine::Engine>> engines;
  constexpr uint64_t kRecordMask = (uint64_t{1} << kJobTagShift) - 1;
  FlowNetwork net(
      [&engines](uint64_t tag, double end_s) {
        engines[static_cast<size_t>(tag >> kJobTagShift)]->flow_done(tag & kRecordMask, end_s);
      },
      opts.front().lone_flows_in_closed_form, opts.front().max_group_flows);
  // Each flow's rate over time: the shared links' series are the bytes each bin really carried.
  net.record_rates([&engines](uint64_t tag, std::span<const RateStep> steps) {
    engines[static_cast<size_t>(tag >> kJobTagShift)]->flow_rates(tag & kRecordMask, steps);
  });
  std::vector<replay_engine::JobBinding> bindings(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    replay_engine::JobBinding& b = bindings[j];
    const int64_t world = jobs[j].program->layout.world_size();
    b.gpu_of_rank.resize(static_cast<size_t>(world));
    for (int64_t r = 0; r < world; ++r) {
      b.gpu_of_rank[static_cast<size_t>(r)] = jobs[j].nodes[static_cast<size_t>(r / G)] * G + r % G;
    }
    b.network = &net;
    b.tag_base = static_cast<uint64_t>(j) << kJobTagShift;
    b.iterations = jobs[j].iterations;
    b.start_s = jobs[j].start_s;
    engines.push_back(
        std::make_unique<replay_engine::Engine>(*timed[j], topo, opts[j], *platform, &b));
  }
  for (size_t j = 0; j < jobs.size(); ++j) {
    try {
      engines[j]->begin_job();
    } catch (const Error& e) {
      throw Error(fmt::format("job {}: {}", jobs[j].name, e.what()));
    }
  }
  engine->run();
  JobsReplay res;
  std::unordered_map<const simgrid::s4u::Link*, size_t> link_index;
  for (const PlatformLink& l : platform->links()) {
    link_index[l.link] = res.links.size();
    res.links.push_back({l.name, l.tier, l.bandwidth_Bps});
  }
  for (size_t j = 0; j < jobs.size(); ++j) {
    replay_engine::Engine& e = *engines[j];
    try {
      e.check_job_complete();
    } catch (const Error& err) {
      throw Error(fmt::format("job {}: {}", jobs[j].name, err.what()));
    }
    if (static_cast<int64_t>(e.iterations().size()) != jobs[j].iterations) {
      throw Error(fmt::format("job {}: {} of its {} iterations completed", jobs[j].name,
                              e.iterations().size(), jobs[j].iterations));
    }
    JobReplay jr;
    jr.name = jobs[j].name;
    for (const replay_engine::IterationRecord& it : e.iterations()) {
      jr.iterations.push_back({it.start_s, it.end_s, it.critical});
    }
    jr.link_bytes.assign(res.links.size(), 0.0);
    for (const auto& [link, bytes] : e.link_bytes()) {
      auto it = link_index.find(link);
      if (it != link_index.end()) jr.link_bytes[it->second] += bytes;
    }
    jr.reductions = e.reductions();
    jr.ops = e.ops();
    jr.flows = e.flows();
    res.jobs.push_back(std::move(jr));
  }
  // The 5 links with the most bytes of two or more jobs, over time.
  std::vector<std::pair<double, size_t>> shared;
  for (size_t l = 0; l < res.links.size(); ++l) {
    int users = 0;
    double total = 0;
    for (const JobReplay& jr : res.jobs) {
      users += jr.link_bytes[l] > 0 ? 1 : 0;
      total += jr.link_bytes[l];
    }
    if (users >= 2) shared.emplace_back(-total, l);
  }
  std::sort(shared.begin(), shared.end());
  if (shared.size() > 5) shared.resize(5);
  double end_s = 0;
  for (const JobReplay& jr : res.jobs) end_s = std::max(end_s, jr.iterations.back().end_s);
  if (!shared.empty() && end_s > 0) {
    std::unordered_map<const simgrid::s4u::Link*, size_t> series_of;
    std::vector<double> bw;
    for (const auto& [neg, l] : shared) {
      series_of[platform->links()[l].link] = bw.size();
      bw.push_back(res.links[l].bandwidth_Bps);
    }
    for (size_t j = 0; j < engines.size(); ++j) {
      std::vector<LinkSeries> series(shared.size());
      for (size_t k = 0; k < shared.size(); ++k) {
        series[k].bin_s = end_s / kSharedLinkBins;
        series[k].utilization.assign(kSharedLinkBins, 0.0);
      }
      engines[j]->add_link_series(series_of, bw, series);
      for (size_t k = 0; k < shared.size(); ++k) {
        if (j == 0) {
          const FabricLink& fl = res.links[shared[k].second];
          res.shared_series.push_back({fl.name, fl.tier, end_s / kSharedLinkBins, {}});
        }
        res.shared_series[k].utilization.push_back(std::move(series[k].utilization));
      }
    }
  }
  res.group_flows = net.stats().group_flows;
  res.solver_flows = net.stats().solver_flows;
  res.max_solver_flows = net.stats().max_in_solver;
  res.wall_s = std::chrono::duration<double>(Clock::now() - wall0).count();
  return res;
}

ClusterResult run_cluster(const Placement& p, const ClusterOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto wall0 = Clock::now();
  if (o.workers < 1) throw InvalidArgument("run_cluster: workers must be >= 1");
  const std::string file = p.file.empty() ? p.name : p.file.string();
  const TopologySpec topo = load_topology(p.topology_file);
  const int64_t G = topo.node.gpus_per_node;
  try {
    check_cluster_size(topo, p.num_nodes * G);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}: num_nodes: {} nodes of {}: {}", file, p.num_nodes,
                                  p.topology_file.string(), e.what()));
  }
  std::vector<PreparedJob> jobs;
  LoweredJobs lowered;
  for (size_t i = 0; i < p.jobs.size(); ++i) jobs.push_back(prepare_job(p, i, topo, o, lowered));

  // Alone: one iteration each, on the same nodes of the same fabric. Beside them (first, as the
  // longest) the replay of every job together, given up when the alone replays show that some
  // job shares no link with another (kept with replay_independent_jobs).
  auto together_of = [&](const std::vector<size_t>& which) {
    return [&jobs, &topo, &p, which] {
      std::vector<JobInput> in;
      for (size_t j : which) in.push_back(jobs[j].input(jobs[j].place->iterations, jobs[j].place->start_s));
      return encode(replay_jobs(in, topo, p.num_nodes));
    };
  };
  std::vector<size_t> all(jobs.size());
  std::iota(all.begin(), all.end(), 0);
  const bool speculate = jobs.size() > 1 || o.replay_independent_jobs;
  const size_t first_alone = speculate ? 1 : 0;
  std::vector<std::function<std::string()>> work;
  if (speculate) work.push_back(together_of(all));
  for (const PreparedJob& j : jobs) {
    work.push_back([&j, &topo, &p] { return encode(replay_jobs({j.input(1, 0.0)}, topo, p.num_nodes)); });
  }
  // Which jobs are replayed together, from the alone replays' links.
  auto coupled_jobs = [&](const std::vector<JobReplay>& alone_runs) {
    const std::vector<size_t> comp = sharing_components(alone_runs);
    std::map<size_t, int> comp_size;
    for (size_t c : comp) comp_size[c] += 1;
    std::vector<size_t> out;
    for (size_t j = 0; j < jobs.size(); ++j) {
      if (o.replay_independent_jobs || comp_size[comp[j]] > 1) out.push_back(j);
    }
    return out;
  };
  std::vector<JobReplay> alone;
  const auto outcomes = run_isolated_concurrently(
      work, o.workers, {}, [&](const std::vector<IsolatedOutcome>& got) -> std::vector<size_t> {
        if (!speculate) return {};
        std::vector<JobReplay> runs;
        for (size_t i = first_alone; i < got.size(); ++i) {
          if (!got[i].ok && !got[i].error.empty()) return {0};  // failed: the error is thrown below
          if (!got[i].ok) return {};                            // still running
          runs.push_back(std::move(decode(got[i].output).jobs.front()));
        }
        return coupled_jobs(runs).size() == jobs.size() ? std::vector<size_t>{} : std::vector<size_t>{0};
      });
  for (size_t i = first_alone; i < outcomes.size(); ++i) {
    const std::string& where = jobs[i - first_alone].where;
    if (!outcomes[i].ok) throw Error(fmt::format("{}: alone: {}", where, outcomes[i].error));
    alone.push_back(std::move(decode(outcomes[i].output).jobs.front()));
  }
  const auto wall1 = Clock::now();
  std::vector<std::string> reductions;
  auto add_reductions = [&reductions](const std::vector<std::string>& lines) {
    for (const std::string& l : lines) {
      if (std::find(reductions.begin(), reductions.end(), l) == reductions.end()) reductions.push_back(l);
    }
  };

  // Together: the jobs that share a link with another.
  // (A together replay that ran to its end beside them holds every job: exact for all.)
  const std::vector<size_t> coupled = speculate && outcomes[0].ok ? all : coupled_jobs(alone);
  std::vector<std::string> independent;
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (std::find(coupled.begin(), coupled.end(), j) == coupled.end()) {
      independent.push_back(jobs[j].place->name);
    }
  }
  std::vector<JobReplay> together(jobs.size());
  std::vector<FabricLink> links;
  ClusterResult res;
  if (!coupled.empty()) {
    std::string text;
    if (speculate && outcomes[0].ok) {
      text = outcomes[0].output;  // every job was coupled: the replay that ran beside
    } else if (speculate && outcomes[0].error != "cancelled") {
      throw Error(fmt::format("{}: together: {}", file, outcomes[0].error));
    } else {
      try {
        text = run_isolated(together_of(coupled));
      } catch (const Error& e) {
        throw Error(fmt::format("{}: together: {}", file, e.what()));
      }
    }
    JobsReplay r = decode(text);
    links = r.links;
    for (SharedLinkSeries& ls : r.shared_series) {
      SharedLinkSeries full{ls.name, ls.tier, ls.bin_s, {}};
      full.utilization.assign(jobs.size(), std::vector<double>(ls.utilization.empty() ? 0 : ls.utilization[0].size(), 0.0));
      for (size_t k = 0; k < coupled.size() && k < ls.utilization.size(); ++k) {
        full.utilization[coupled[k]] = std::move(ls.utilization[k]);
      }
      res.shared_series.push_back(std::move(full));
    }
    for (size_t k = 0; k < coupled.size(); ++k) {
      add_reductions(r.jobs[k].reductions);
      together[coupled[k]] = std::move(r.jobs[k]);
    }
    res.flows = 0;
    for (const JobReplay& jr : r.jobs) res.flows += jr.flows;
    res.solver_flows = r.solver_flows;
  }
  const auto wall2 = Clock::now();
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (!together[j].name.empty()) continue;
    // Shares no link: its iterations are its alone one's, end to end from its start.
    add_reductions(alone[j].reductions);
    JobReplay& t = together[j];
    t.name = alone[j].name;
    const JobIteration& a = alone[j].iterations.front();
    double start = jobs[j].place->start_s;
    for (int64_t k = 0; k < jobs[j].place->iterations; ++k) {
      t.iterations.push_back({start, start + a.time_s(), a.critical});
      start += a.time_s();
    }
    t.link_bytes = alone[j].link_bytes;
    for (double& b : t.link_bytes) b *= static_cast<double>(jobs[j].place->iterations);
  }
  if (!independent.empty()) {
    reductions.push_back(fmt::format(
        "independent jobs: {} share{} no link with another job: {} iterations together are the "
        "alone iteration's, laid end to end (exact: no flow of another job meets theirs; "
        "--replay-independent replays them)",
        fmt::join(independent, ", "), independent.size() == 1 ? "s" : "",
        independent.size() == 1 ? "its" : "their"));
  }
  if (links.empty()) {
    // Every job independent: the links of the fabric from an alone replay.
    links = decode(outcomes.back().output).links;
  }

  res.name = p.name;
  res.topology = topo.name;
  res.num_nodes = p.num_nodes;
  res.gpus_per_node = G;
  double t_begin = INFINITY, t_end = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const JobPlacement& jp = *jobs[j].place;
    ClusterJobResult cj;
    cj.name = jp.name;
    cj.scenario = jp.scenario_file.string();
    cj.nodes = jp.nodes;
    cj.num_gpus = jobs[j].session->scenario().cluster.num_gpus;
    cj.iterations = jp.iterations;
    cj.start_s = jp.start_s;
    std::vector<double> alone_t, together_t;
    for (const JobIteration& it : alone[j].iterations) alone_t.push_back(it.time_s());
    for (const JobIteration& it : together[j].iterations) together_t.push_back(it.time_s());
    cj.alone = stats_of(alone_t);
    cj.together = stats_of(together_t);
    cj.slowdown = cj.alone.mean_s > 0 ? cj.together.mean_s / cj.alone.mean_s : 1.0;
    cj.alone_breakdown = mean_breakdown(alone[j].iterations);
    cj.together_breakdown = mean_breakdown(together[j].iterations);
    cj.together_iterations = together[j].iterations;
    cj.replayed_together =
        std::find(coupled.begin(), coupled.end(), j) != coupled.end();
    t_begin = std::min(t_begin, jp.start_s);
    if (!together[j].iterations.empty()) t_end = std::max(t_end, together[j].iterations.back().end_s);
    res.jobs.push_back(std::move(cj));
  }
  res.window_s = t_end > t_begin ? t_end - t_begin : 0.0;
  // Links: per tier, who uses what and what is shared.
  const size_t n = jobs.size();
  std::vector<SharedLink> shared;
  std::map<std::string, size_t> tier_index;
  for (size_t l = 0; l < links.size(); ++l) {
    const FabricLink& fl = links[l];
    auto [ti, fresh] = tier_index.try_emplace(fl.tier, res.tiers.size());
    if (fresh) {
      TierSharing ts;
      ts.tier = fl.tier;
      ts.links_per_job.assign(n, 0);
      ts.shared_utilization_mean.assign(n, 0.0);
      res.tiers.push_back(std::move(ts));
    }
    TierSharing& ts = res.tiers[ti->second];
    ts.links += 1;
    SharedLink sl{fl.name, fl.tier, fl.bandwidth_Bps, std::vector<double>(n, 0.0), 0.0};
    int users = 0;
    for (size_t j = 0; j < n; ++j) {
      const double b = l < together[j].link_bytes.size() ? together[j].link_bytes[l] : 0.0;
      if (b <= 0) continue;
      ++users;
      ts.links_per_job[j] += 1;
      sl.utilization[j] = res.window_s > 0 ? b / (fl.bandwidth_Bps * res.window_s) : 0.0;
      sl.total += sl.utilization[j];
    }
    if (users < 2) continue;
    ts.links_shared += 1;
    for (size_t j = 0; j < n; ++j) ts.shared_utilization_mean[j] += sl.utilization[j];
    ts.shared_total_mean += sl.total;
    ts.shared_total_max = std::max(ts.shared_total_max, sl.total);
    shared.push_back(std::move(sl));
  }
  std::vector<TierSharing> used;
  for (TierSharing& ts : res.tiers) {
    if (ts.links_shared > 0) {
      for (double& u : ts.shared_utilization_mean) u /= static_cast<double>(ts.links_shared);
      ts.shared_total_mean /= static_cast<double>(ts.links_shared);
    }
    bool any = false;
    for (int64_t c : ts.links_per_job) any = any || c > 0;
    if (any) used.push_back(std::move(ts));
  }
  res.tiers = std::move(used);
  std::stable_sort(shared.begin(), shared.end(), [](const SharedLink& a, const SharedLink& b) {
    return a.total > b.total;
  });
  if (shared.size() > 10) shared.resize(10);
  res.shared_links = std::move(shared);
  res.reductions = reductions;
  res.alone_wall_s = std::chrono::duration<double>(wall1 - wall0).count();
  res.together_wall_s = std::chrono::duration<double>(wall2 - wall1).count();
  res.wall_s = std::chrono::duration<double>(Clock::now() - wall0).count();
  return res;
}

nlohmann::ordered_json to_json(const ClusterResult& r) {
  auto bd = [](const TimeBreakdown& b) {
    return nlohmann::ordered_json{{"iteration_s", b.total_s()},
                                  {"compute_s", b.compute_s},
                                  {"exposed_comm_s",
                                   {{"tp", b.exposed_tp_s},
                                    {"cp", b.exposed_cp_s},
                                    {"ep", b.exposed_ep_s},
                                    {"pp", b.exposed_pp_s},
                                    {"dp", b.exposed_dp_s}}},
                                  {"bubble_s", b.bubble_s},
                                  {"sync_wait_s", b.sync_wait_s}};
  };
  auto st = [](const IterationStats& s) {
    return nlohmann::ordered_json{
        {"mean_s", s.mean_s}, {"min_s", s.min_s}, {"p50_s", s.p50_s}, {"max_s", s.max_s}};
  };
  nlohmann::ordered_json j;
  j["name"] = r.name;
  j["topology"] = r.topology;
  j["num_nodes"] = r.num_nodes;
  j["gpus_per_node"] = r.gpus_per_node;
  j["window_s"] = r.window_s;
  j["jobs"] = nlohmann::ordered_json::array();
  for (const ClusterJobResult& c : r.jobs) {
    nlohmann::ordered_json o;
    o["name"] = c.name;
    o["scenario"] = c.scenario;
    o["nodes"] = c.nodes;
    o["num_gpus"] = c.num_gpus;
    o["iterations"] = c.iterations;
    o["start_s"] = c.start_s;
    o["replayed_together"] = c.replayed_together;
    o["iteration_time_alone"] = st(c.alone);
    o["iteration_time_together"] = st(c.together);
    o["slowdown"] = c.slowdown;
    o["alone"] = bd(c.alone_breakdown);
    o["together"] = bd(c.together_breakdown);
    o["together_iterations"] = nlohmann::ordered_json::array();
    for (const JobIteration& it : c.together_iterations) {
      o["together_iterations"].push_back({{"start_s", it.start_s}, {"end_s", it.end_s}});
    }
    j["jobs"].push_back(std::move(o));
  }
  j["tiers"] = nlohmann::ordered_json::array();
  for (const TierSharing& t : r.tiers) {
    j["tiers"].push_back({{"tier", t.tier},
                          {"links", t.links},
                          {"links_per_job", t.links_per_job},
                          {"links_shared", t.links_shared},
                          {"shared_utilization_mean_per_job", t.shared_utilization_mean},
                          {"shared_utilization_total_mean", t.shared_total_mean},
                          {"shared_utilization_total_max", t.shared_total_max}});
  }
  j["shared_links"] = nlohmann::ordered_json::array();
  for (const SharedLink& l : r.shared_links) {
    j["shared_links"].push_back({{"name", l.name},
                                 {"tier", l.tier},
                                 {"bandwidth_Bps", l.bandwidth_Bps},
                                 {"utilization_per_job", l.utilization},
                                 {"utilization_total", l.total}});
  }
  j["shared_link_series"] = nlohmann::ordered_json::array();
  for (const SharedLinkSeries& ls : r.shared_series) {
    j["shared_link_series"].push_back({{"name", ls.name},
                                       {"tier", ls.tier},
                                       {"bin_s", ls.bin_s},
                                       {"utilization_per_job", ls.utilization}});
  }
  j["reductions"] = r.reductions;
  j["flows"] = r.flows;
  j["solver_flows"] = r.solver_flows;
  j["wall_s"] = {{"alone", r.alone_wall_s}, {"together", r.together_wall_s}, {"total", r.wall_s}};
  return j;
}

}  // namespace traintwin
