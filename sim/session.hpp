// A simulation session: one scenario on one topology with the cost model and measured collectives
// chosen for it, the replay's options, and the what-if base run, so that a command is parse ->
// session -> print. The rules it owns: where kernel costs come from (a recorded live timeline, a
// given database, traces/db/<gpu>.json beside the topologies folder, else the calibrated
// roofline), that a database's collective rows time only its own GPU's collectives, and that a
// what-if is compared with the same scenario without cluster.what_if simulated in a child process
// (SimGrid allows one engine per process). Next in the flow: sim/replay.hpp's simulate(), then
// sim/summary.hpp for what the command prints.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "core/scenario.hpp"
#include "sim/cost_model.hpp"
#include "sim/replay.hpp"
#include "sim/summary.hpp"
#include "topologies/topology.hpp"

namespace traintwin {

/// Where a session's kernel costs come from (simulate's --cost-db, --cost-db-topology and
/// --costs-from-timeline; all empty: the measured database beside the topologies folder if any,
/// else the roofline).
struct SessionCostSource {
  std::filesystem::path cost_db;              ///< a measured database to use
  std::filesystem::path cost_db_topology;     ///< the topology whose GPU it (or the timeline)
                                              ///< was measured on; empty: the scenario's
  std::filesystem::path costs_from_timeline;  ///< kernel costs from a recorded live run instead
};

/// One scenario ready to simulate. Holds the scenario, its topology, the cost model and the
/// options; run() and run_what_if_base() may each be called more than once.
class SimulationSession {
 public:
  /// The scenario on its cluster.topology (loaded; the cluster size and the TP groups' fit in an
  /// NVLink domain checked against it: check_layout_fits_nvlink_domain). Throws
  /// what load_topology, check_cluster_size and the cost models throw (ConfigError,
  /// CostDatabaseError, TimelineError), and ConfigError for a --cost-db measured on a CPU used
  /// for a GPU's topology, or the other way round, without the cost_db_topology it was measured
  /// on (its costs would be charged as the target's own, unscaled); likewise for a
  /// costs_from_timeline recorded on another device than the topology's gpu.name (or, with
  /// cost_db_topology, than its gpu.name), or one that records no device, without
  /// cost_db_topology.
  SimulationSession(Scenario s, const SessionCostSource& source, SimulationOptions options);
  /// The scenario on `topology`, read from `topology_file` (which places traces/db): for a
  /// topology the caller adjusted (validate --live on part of a node).
  SimulationSession(Scenario s, TopologySpec topology, const std::filesystem::path& topology_file,
                    const SessionCostSource& source, SimulationOptions options);

  const Scenario& scenario() const { return scenario_; }
  const TopologySpec& topology() const { return topology_; }
  const CostModel& costs() const { return *costs_; }
  SimulationOptions& options() { return options_; }
  const SimulationOptions& options() const { return options_; }

  /// Simulates the scenario with options() (timeline events to its timeline_sink, if set).
  SimulationResult run() const;

  /// The base of a what-if: the scenario without cluster.what_if, simulated in a child process
  /// with the same costs and options (no timeline); nothing when the scenario has no what-if.
  /// Throws ConfigError when the what-if cannot be applied to this layout (check_what_if).
  std::optional<BaseRunMetrics> run_what_if_base() const;

 private:
  Scenario scenario_;
  TopologySpec topology_;
  std::unique_ptr<CostModel> costs_;
  SimulationOptions options_;
};

}  // namespace traintwin
