// Simulation sessions; see session.hpp.
#include "sim/session.hpp"

#include <fstream>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/rank_layout.hpp"
#include "sim/isolated.hpp"
#include "traces/cost_db.hpp"
#include "traces/timeline.hpp"

namespace traintwin {
namespace {

/// A topology describes a CPU host (`traintwin profile --topology-out`: gpu.name "cpu-<model>-
/// <threads>t", exec/cpu/host_device.hpp) or a GPU.
bool is_cpu_topology(const TopologySpec& t) { return t.gpu.name.rfind("cpu-", 0) == 0; }

/// Throws ConfigError when database `file` was measured on another kind of device (a CPU for a
/// GPU's topology or the other way round): without --cost-db-topology its rows would be charged
/// as the target's own times.
void check_database_device(const std::filesystem::path& file, const TopologySpec& target) {
  const CostDbDevice device = CostDatabase::load(file).device();
  const bool db_cpu = device.kind.value_or("gpu") == "cpu";
  if (db_cpu == is_cpu_topology(target)) return;
  throw ConfigError(fmt::format(
      "--cost-db {}: measured on {} \"{}\", but topology {} is {} {}; its times would be charged "
      "as that device's own: give --cost-db-topology (the topology of the device it was measured "
      "on, e.g. the one `traintwin profile --topology-out` wrote) to scale them, or a database "
      "measured on {}",
      file.string(), db_cpu ? "the CPU" : "the GPU", device.name, target.name,
      is_cpu_topology(target) ? "the CPU host" : "a cluster of", target.gpu.name,
      target.gpu.name));
}

/// Throws ConfigError when live timeline `file` was recorded on another device than the one its
/// durations are charged for: `measured_on` (--cost-db-topology, whose times are scaled to the
/// target) when given, else the target `topology` itself (times charged unscaled). A timeline
/// that records no device (written before traintwin recorded it) needs --cost-db-topology.
void check_timeline_device(const std::string& file, const Timeline& live,
                           const TopologySpec* measured_on, const TopologySpec& topology) {
  if (measured_on == nullptr && live.device.empty()) {
    throw ConfigError(fmt::format(
        "--costs-from-timeline {}: the timeline does not record the device it ran on (otherData "
        "\"device\"; written before traintwin recorded it), so its times cannot be charged as "
        "those of {}'s {}: give --cost-db-topology with the topology of the device it ran on "
        "(its times are then scaled to {}), or record it again with train --timeline or "
        "validate --live --timeline",
        file, topology.name, topology.gpu.name, topology.gpu.name));
  }
  if (measured_on == nullptr && live.device != topology.gpu.name) {
    throw ConfigError(fmt::format(
        "--costs-from-timeline {}: recorded on {}, but topology {} is {} {}; its times would be "
        "charged as that device's own: give --cost-db-topology (the topology of {}, e.g. the one "
        "`traintwin profile --topology-out` wrote) to scale them to {}, or a timeline recorded "
        "on {}",
        file, live.device, topology.name,
        is_cpu_topology(topology) ? "the CPU host" : "a cluster of", topology.gpu.name,
        live.device, topology.gpu.name, topology.gpu.name));
  }
  if (measured_on != nullptr && !live.device.empty() && live.device != measured_on->gpu.name) {
    throw ConfigError(fmt::format(
        "--costs-from-timeline {}: recorded on {}, but --cost-db-topology {} describes {}: give "
        "the topology of {} (its gpu.name is the device the timeline records)",
        file, live.device, measured_on->name, measured_on->gpu.name, live.device));
  }
}

}  // namespace

SimulationSession::SimulationSession(Scenario s, const SessionCostSource& source,
                                     SimulationOptions options)
    : SimulationSession(s, load_topology(s.cluster.topology), s.cluster.topology, source,
                        std::move(options)) {}

SimulationSession::SimulationSession(Scenario s, TopologySpec topology,
                                     const std::filesystem::path& topology_file,
                                     const SessionCostSource& source, SimulationOptions options)
    : scenario_(std::move(s)), topology_(std::move(topology)), options_(std::move(options)) {
  check_cluster_size(topology_, scenario_.cluster.num_gpus);
  check_layout_fits_nvlink_domain(topology_, scenario_);
  std::optional<TopologySpec> db_topo;
  if (!source.cost_db_topology.empty()) db_topo = load_topology(source.cost_db_topology);
  const GpuSpec& measured_on = db_topo ? db_topo->gpu : topology_.gpu;
  if (!source.costs_from_timeline.empty()) {
    check_input_file(source.costs_from_timeline, "live timeline");  // streamed: any size
    std::ifstream in(source.costs_from_timeline);
    const std::string file = source.costs_from_timeline.string();
    const Timeline live = read_chrome_trace(in, file);
    // Its kernel durations first ("not a live timeline" says more about a simulation's
    // timeline than its missing device), then the device they were measured on.
    costs_ = make_timeline_cost_model(live, measured_on, topology_.gpu, file);
    check_timeline_device(file, live, db_topo ? &*db_topo : nullptr, topology_);
    return;
  }
  if (!source.cost_db.empty() && !db_topo) check_database_device(source.cost_db, topology_);
  const std::filesystem::path db_dir = default_database_dir(topology_file);
  // A mixed cluster's node groups: each GPU with its own database (cost_model.hpp).
  costs_ = make_cluster_cost_model(topology_, db_dir, source.cost_db,
                                   db_topo ? &db_topo->gpu : nullptr);
  // A database's collective rows time its own device's collectives, not another device's.
  if (!db_topo) {
    options_.fabric.measured =
        make_simulation_measured_collectives(topology_.gpu, db_dir, source.cost_db);
  }
}

SimulationResult SimulationSession::run() const {
  return simulate(scenario_, topology_, *costs_, options_);
}

std::optional<BaseRunMetrics> SimulationSession::run_what_if_base() const {
  if (!scenario_.cluster.what_if.any()) return std::nullopt;
  check_what_if(scenario_, topology_, options_.aggregate_tp);
  Scenario base = scenario_;
  base.cluster.what_if = WhatIf{};
  SimulationOptions base_opts = options_;
  base_opts.record_timeline = false;
  base_opts.timeline_sink = nullptr;
  const std::string text = run_isolated([&] {
    const SimulationResult b = simulate(base, topology_, *costs_, base_opts);
    return nlohmann::json(summarize(base, topology_, b)).dump();
  });
  return base_run_metrics(nlohmann::json::parse(text).get<SimulationSummary>());
}

}  // namespace traintwin
