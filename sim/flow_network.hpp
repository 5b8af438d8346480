// Flows between SimGrid hosts, with SimGrid's solver holding only the flows that share a link
// with flows it cannot time itself.
//
// Why. SimGrid 3.32 keeps every started host-to-host transfer in one list that it scans on each
// completion (CommImpl::finish removes the transfer from maestro's activity list), so a
// completion costs time in proportion to the transfers in flight; with 10^3-10^4 flows in flight
// (an all-to-all over 64 EP groups, 16,384 ranks' pipeline sends) that scan was 50 % or more of
// a replay (SIMGRID-NOTES.md). Most flows of a training iteration never meet another one on a
// link (GPT-3 175B on 1024 GPUs: 98.4 %), and a flow alone on its links is not a problem for a
// solver at all: under CM02 max-min sharing it waits its route latency L (no bandwidth used),
// then runs at the bandwidth B of its slowest link, so it ends at start + L + bytes / B. The
// flows that do meet mostly meet only each other: the flows of one all-to-all (each NIC sends
// to and receives from every other member), a ring's neighbours on one rail.
//
// How. A flow whose links (FATPIPE links aside: they share nothing) carry no other flow is a
// *lone* flow: it is timed by that closed form and ends on a SimGrid kernel timer. A flow that
// meets only lone flows or closed-form groups joins them in one *group*: flows whose links carry
// no flow outside the group, timed here by CM02's weighted max-min (sim/max_min.hpp: penalty =
// route latency, no bandwidth while the latency is paid), re-solved at each of the group's events
// (a latency paid, a flow ended, a flow joined) with one SimGrid timer for the next. A group
// holds at most max_group_flows flows. When a flow that cannot join (the group would grow past
// that, or one of its links carries a SimGrid flow) meets lone flows or groups, they are handed
// to SimGrid at that instant with what they have left: the rest of their latency (at least
// kMinHandoverLatency_s, see below) and their bytes not yet sent; from then on they share links
// as SimGrid decides (its sharing penalty is the full route latency, as for a flow started in
// SimGrid) and stay there until they end. The times are those of the all-in-SimGrid replay
// (`lone_flows_in_closed_form = false`) up to SimGrid's own precision and the handover latency;
// tests/sim/flow_network_test compares the two.
//
// Rates over time (record_rates()): each flow's sending rate as steps (sim/link_traffic.hpp
// RateStep), for link utilization in time bins. A lone flow sends at B after its latency; a
// grouped flow at the rates each re-solve gives it; a flow in SimGrid at the rate its remaining
// bytes (Comm::get_remaining) fell by between two instants at which SimGrid's rates can change:
// a transfer entering the solver, one's latency paid (a timer set for it) and one's end. So every
// step is the exact rate the flow had, and the flows on one link never sum above its bandwidth.
//
// Handover latency: CM02 gives a transfer of zero latency a sharing penalty of 1 instead of its
// route latency (network_cm02.cpp, comm_action_set_variable), which would starve it; a handed-
// over flow therefore keeps at least kMinHandoverLatency_s of latency (set through the model's
// latency-factor callback, which scales only the latency, not the penalty).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include <simgrid/s4u/Comm.hpp>

#include "sim/link_traffic.hpp"
#include "sim/max_min.hpp"

namespace simgrid::s4u {
class Activity;
class Host;
class Link;
}  // namespace simgrid::s4u
namespace simgrid::kernel::timer {
class Timer;
}

namespace traintwin {

/// The links and closed-form parameters of a route between two hosts.
struct FlowRoute {
  std::vector<simgrid::s4u::Link*> links;  ///< as Host::route_to gives them, directional
  std::vector<uint32_t> shared_links;      ///< dense ids of the links that share (not FATPIPE)
  std::vector<uint32_t> link_ids;          ///< index of each of `links` in FlowNetwork::links()
  double latency_s = 0;                    ///< sum of the links' latencies
  double bandwidth_Bps = 0;                ///< the slowest link's bandwidth
};

/// Counters of a FlowNetwork.
struct FlowNetworkStats {
  int64_t flows = 0;          ///< flows started
  int64_t lone_flows = 0;     ///< ended alone on their links (closed form)
  int64_t group_flows = 0;    ///< ended in a closed-form group (max-min solved here)
  int64_t solver_flows = 0;   ///< entered SimGrid (at start, or handed over)
  int64_t handovers = 0;      ///< lone or grouped flows handed to SimGrid when a flow met them
  int64_t max_in_solver = 0;  ///< most flows in SimGrid at once
};

/// Starts flows between hosts of the current SimGrid engine and reports each one's end. One per
/// engine (it registers SimGrid's global completion callback and the network model's latency-
/// factor callback). Create it after the platform, before Engine::run().
class FlowNetwork {
 public:
  /// Called once per flow, at its end (SimGrid's clock = end_s), with the `tag` it started with.
  using OnDone = std::function<void(uint64_t tag, double end_s)>;

  /// `lone_flows_in_closed_form` false: every flow is a SimGrid transfer from its start (the
  /// reference behaviour the closed forms must reproduce). `max_group_flows`: the most flows a
  /// closed-form group holds (1: lone flows only; each of a group's events re-solves it whole).
  explicit FlowNetwork(OnDone on_done, bool lone_flows_in_closed_form = true,
                       int64_t max_group_flows = kDefaultMaxGroupFlows);
  FlowNetwork(const FlowNetwork&) = delete;
  FlowNetwork& operator=(const FlowNetwork&) = delete;

  /// Starts a flow of `bytes` (>= 0; rounded to whole bytes, at least 1, as SimGrid counts
  /// payloads) from `from` to `to` now (Engine::get_clock()).
  void start(simgrid::s4u::Host* from, simgrid::s4u::Host* to, double bytes, uint64_t tag);

  /// The route between two hosts (cached; Host::route_to on first use).
  const FlowRoute& route(simgrid::s4u::Host* from, simgrid::s4u::Host* to);

  const FlowNetworkStats& stats() const { return stats_; }

  /// Called once per flow, just before its OnDone, with its rate over time (RateStep, ordered;
  /// the steps' integral up to its end is its bytes, as rounded at start()).
  using OnRates = std::function<void(uint64_t tag, std::span<const RateStep> steps)>;

  /// Records each flow's rate over time and hands it to `sink` (file comment); costs one pass
  /// over the flows in SimGrid's solver at each of its events. Throws InvalidArgument after the
  /// first start() (the flows started before would have no rates).
  void record_rates(OnRates sink);

  /// Every link of the routes asked so far, in order of first use (FlowRoute::link_ids index it).
  const std::vector<simgrid::s4u::Link*>& links() const { return all_links_; }

  /// The least latency a lone flow keeps when handed to SimGrid (see the file comment).
  static constexpr double kMinHandoverLatency_s = 1e-12;

  /// Default of max_group_flows: an all-to-all of 16 nodes on one rail (240 flows) fits.
  static constexpr int64_t kDefaultMaxGroupFlows = 256;

 private:
  struct Flow {
    const FlowRoute* route = nullptr;
    simgrid::s4u::Host* from = nullptr;
    simgrid::s4u::Host* to = nullptr;
    double start_s = 0;
    double bytes = 0;
    uint64_t tag = 0;
    simgrid::kernel::timer::Timer* timer = nullptr;  // lone flows: their end
    simgrid::s4u::CommPtr comm;                      // flows in SimGrid
    // Members of a closed-form group:
    uint32_t group = UINT32_MAX;
    double latency_end_s = 0;    // when its latency is paid
    double remaining_bytes = 0;  // at the group's last_s
    double rate_Bps = 0;         // since the group's last_s (0 while paying its latency)
    double finish_s = 0;         // at that rate
    // Rates over time (record_rates()):
    std::vector<RateStep> steps;
    double sampled_s = 0;               // flows in SimGrid: when remaining_bytes was last read
    uint32_t solver_slot = UINT32_MAX;  // index in in_solver_list_
  };
  struct Group {
    std::vector<uint32_t> flows;
    double last_s = 0;  // when remaining_bytes were last brought up to date
    simgrid::kernel::timer::Timer* timer = nullptr;  // its next event
  };
  struct LinkState {
    uint32_t lone = UINT32_MAX;   // the lone flow holding it
    uint32_t in_solver = 0;       // SimGrid flows crossing it
    uint32_t group = UINT32_MAX;  // the closed-form group holding it
    uint32_t group_flows = 0;     // that group's flows crossing it
    double bandwidth_Bps = 0;
  };
  struct PairHash {
    size_t operator()(const std::pair<simgrid::s4u::Host*, simgrid::s4u::Host*>& p) const {
      return std::hash<const void*>()(p.first) * 31 + std::hash<const void*>()(p.second);
    }
  };

  uint32_t new_flow();
  void to_solver(uint32_t id, double remaining_latency_s, double remaining_bytes);
  void hand_over(uint32_t id, double now);
  void lone_done(uint32_t id);
  void solver_done(const simgrid::s4u::Activity& a);
  // Closed-form groups.
  bool try_group(uint32_t id, double now);
  void add_to_group(uint32_t g, uint32_t id);
  void advance(uint32_t g, double now);
  void solve(uint32_t g, double now);
  void group_event(uint32_t g);
  void hand_over_group(uint32_t g, double now);
  void cancel_timer(uint32_t g);
  // Rates over time.
  void step(Flow& f, double t_s, double rate_Bps);
  void sample_solver(double now, uint32_t done = UINT32_MAX);
  void emit_rates(uint32_t id);

  OnDone on_done_;
  OnRates on_rates_;
  std::vector<uint32_t> in_solver_list_;  // flows in SimGrid, when recording rates
  bool closed_form_;
  int64_t max_group_flows_;
  std::vector<Flow> flows_;
  std::vector<uint32_t> free_;
  std::vector<uint32_t> to_release_;  // SimGrid flows done, whose CommPtr can be dropped
  std::vector<LinkState> links_;
  std::vector<Group> groups_;
  std::vector<uint32_t> free_groups_;
  // Scratch of start() and solve().
  std::vector<uint32_t> met_lone_, met_groups_, done_;
  std::vector<MaxMinFlow> mm_flows_;
  std::vector<double> mm_capacity_Bps_, mm_rate_Bps_;
  std::vector<uint32_t> mm_link_of_, mm_links_, mm_active_;
  MaxMinScratch mm_scratch_;
  std::unordered_map<const simgrid::s4u::Link*, uint32_t> link_id_;
  std::vector<simgrid::s4u::Link*> all_links_;
  std::unordered_map<const simgrid::s4u::Link*, uint32_t> all_link_id_;
  std::unordered_map<std::pair<simgrid::s4u::Host*, simgrid::s4u::Host*>, FlowRoute, PairHash>
      routes_;
  double latency_factor_ = 1.0;  // read by the model's latency-factor callback
  int64_t in_solver_ = 0;
  FlowNetworkStats stats_;
};

}  // namespace traintwin
