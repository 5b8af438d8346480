// The degraded states' replays; see degraded_states.hpp for what each state changes.
#include "sim/degraded_states.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "core/error.hpp"
#include "sim/isolated.hpp"
#include "sim/platform.hpp"

namespace traintwin {
namespace {

/// "cluster.reliability.<kind>_rate_per_1000_node_days: <why>".
[[noreturn]] void no_place(DegradedKind kind, const std::string& why) {
  throw ConfigError(
      fmt::format("cluster.reliability.{}_rate_per_1000_node_days: {}", to_string(kind), why));
}

/// Both directions of a link named "<base>-up" / "<base>-down" at `factor`.
void both_directions(std::vector<DegradedLink>& out, const std::string& base, double factor) {
  out.push_back({base + "-up", factor});
  out.push_back({base + "-down", factor});
}

}  // namespace

std::string DegradedState::key() const {
  std::string k;
  if (straggler) {
    k += fmt::format("straggler TP group of rank {} compute x {:.17g}", straggler->rank,
                     straggler->compute_scale);
  }
  for (const DegradedLink& l : degraded_links) {
    k += fmt::format("{}{} x {:.17g}", k.empty() ? "" : "; ", l.name, l.bandwidth_scale);
  }
  return k;
}

DegradedState degraded_state(const Scenario& s, const TopologySpec& topo, const ReliabilitySpec& r,
                             DegradedKind kind) {
  DegradedState st;
  if (kind == DegradedKind::kStraggler) {
    if (s.cluster.what_if.straggler) {
      no_place(kind, "the scenario's cluster.what_if.straggler already slows a rank; remove one");
    }
    st.straggler = Straggler{0, r.straggler_slowdown};
    return st;
  }
  const std::vector<std::string> names = platform_link_names(topo, s.cluster.num_gpus);
  auto has = [&](const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  if (kind == DegradedKind::kLinkDown) {
    std::vector<std::string> uplinks;  // rail 0's leaf 0 -> every spine, every cable
    for (const std::string& n : names) {
      if (n.starts_with("rail0-leaf0-spine") && n.ends_with("-up")) uplinks.push_back(n);
    }
    const auto k = static_cast<double>(uplinks.size());
    if (uplinks.size() < 2) {
      no_place(kind, fmt::format("rail 0's leaf 0 has {} leaf-spine cable(s) on {} GPUs; a link "
                                 "down needs at least 2 (the others take its flows)",
                                 uplinks.size(), s.cluster.num_gpus));
    }
    for (const std::string& up : uplinks) {
      both_directions(st.degraded_links, up.substr(0, up.size() - 3), (k - 1.0) / k);
    }
    return st;
  }
  if (kind == DegradedKind::kNicDown) {
    if (!has("node0-nic0-up") || !has("node0-nic1-up")) {
      no_place(kind,
               "a NIC down moves its rail to the node's next NIC (PXN); the topology has "
               "one NIC per node");
    }
    both_directions(st.degraded_links, "node0-nic0", 0.5);
    both_directions(st.degraded_links, "node0-nic1", 0.5);
    return st;
  }
  if (!has("node0-nic0-up")) no_place(kind, "the platform has no NIC link node0-nic0");
  both_directions(st.degraded_links, "node0-nic0", r.link_flap_bandwidth_factor);
  return st;
}

SimulationOptions with_state(SimulationOptions opts, const DegradedState& state) {
  if (state.straggler) {
    opts.straggler = state.straggler;
    opts.straggler_tp_group = true;
  }
  for (const DegradedLink& l : state.degraded_links) opts.scaling.degraded_links.push_back(l);
  return opts;
}

IterationTimeCache::IterationTimeCache(StateReplay replay) : replay_(std::move(replay)) {}

double IterationTimeCache::iteration_s(const DegradedState& state) {
  const std::string k = state.key();
  if (const auto it = times_.find(k); it != times_.end()) return it->second;
  const double t = replay_(state);
  if (!(std::isfinite(t) && t > 0)) {
    throw InvalidArgument(
        fmt::format("degraded state '{}': the replay gave an iteration time of {} s (must be > 0)",
                    k.empty() ? "healthy" : k, t));
  }
  times_.emplace(k, t);
  return t;
}

DegradedReplays replay_degraded_states(const Scenario& s, const TopologySpec& topo,
                                       const ReliabilitySpec& r, IterationTimeCache& cache,
                                       bool with_healthy) {
  DegradedReplays out;
  bool any = false;
  for (const DegradedKind kind : kDegradedKinds) {
    if (!(episodes(r, kind).rate_per_1000_node_days > 0)) continue;
    const DegradedState st = degraded_state(s, topo, r, kind);
    const auto i = static_cast<size_t>(kind);
    out.states[i] = st.key();
    out.replayed_s[i] = cache.iteration_s(st);
    any = true;
  }
  if (any && with_healthy) out.healthy_s = cache.iteration_s(DegradedState{});
  return out;
}

void apply_degraded_replays(GoodputJob& job, const DegradedReplays& replays) {
  const double scale = replays.healthy_s > 0 ? job.iteration_s / replays.healthy_s : 1.0;
  for (size_t i = 0; i < replays.replayed_s.size(); ++i) {
    job.degraded_iteration_s[i] = replays.replayed_s[i] * scale;
  }
}

StateReplay isolated_state_replay(const Scenario& s, const TopologySpec& topo,
                                  const CostModel& costs, SimulationOptions opts) {
  opts.record_timeline = false;
  opts.timeline_sink = nullptr;
  opts.progress = nullptr;
  return [&s, &topo, &costs, opts](const DegradedState& state) {
    const SimulationOptions o = with_state(opts, state);
    const std::string text = run_isolated(
        [&] { return fmt::format("{:.17g}", simulate(s, topo, costs, o).iteration_time_s); });
    return std::stod(text);
  };
}

}  // namespace traintwin
