// The replay engine's state and steps, internal to sim/replay*.cpp (sim/replay.hpp is the public
// entry): the per-stage Program templates, the ranks' dataflow state, the pending collectives and
// send/recvs, and the SimGrid flow groups. sim/replay.cpp holds the set-up, the dataflow and the
// flows; sim/replay_results.cpp the completion check and the results (iteration time,
// breakdowns, link loads, timeline). Next in the flow: sim/summary.hpp.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sim/flow_network.hpp"
#include "sim/matching.hpp"
#include "sim/replay.hpp"
#include "sim/timed_program.hpp"

namespace traintwin::replay_engine {
constexpr uint32_t kNone = UINT32_MAX;

template <size_t N>
constexpr std::array<int8_t, N> filled(int8_t v) {
  std::array<int8_t, N> a{};
  a.fill(v);
  return a;
}

/// A Program shared by the ranks of one pipeline stage, with what the engine precomputes.
struct Template {
  const RankProgram* rp = nullptr;
  // TimedProgram::durations of rp, per GPU type (one on a homogeneous cluster).
  std::vector<const std::vector<double>*> duration_s;
  std::vector<uint32_t> succ_begin;   // CSR of successors (size ops + 1)
  std::vector<uint32_t> succ;
  std::vector<uint16_t> ndeps;
  std::vector<int64_t> seq;           // collective_sequence(rp)
  std::vector<uint32_t> plan;         // collectives: index in Engine::plans_ (kNone until used)
  /// Send/recv: the peer's coordinates minus the Program's rank's, per dimension (tp, cp, dp,
  /// pp), so that mapped_peer() needs no division per call.
  std::vector<std::array<int64_t, 4>> peer_offset;
  /// Send/recv op by (kind, tag): the first op of that kind and tag (breakdown's lookups).
  std::unordered_map<uint64_t, uint32_t> p2p_by_tag;
};

struct RankState {
  uint32_t tmpl = 0;
  RankCoord coord;
  std::vector<double> t;            // ready time while waiting, end time once done
  std::vector<uint16_t> remaining;  // deps not yet done
  std::vector<double> start;        // traced ranks only: start time of every op
};

/// A member's call of a collective, or one side of a send/recv, waiting for the others.
struct PendingP2P {
  int64_t rank;
  uint32_t op;
  double t;
};
/// Ops completed together when a set of SimGrid flows is done.
struct FlowGroup {
  int64_t remaining = 0;
  double start = 0;
  double min_end = 0;     // start + closed-form local part
  double latency_s = 0;
  std::vector<PendingP2P> ops;  // (rank, op); t unused
};

/// A collective plan shared by every group of one kind (Megatron layouts are uniform), with the
/// members it was planned on and each flow's endpoints as indices into them.
struct PlanEntry {
  CollectivePlan plan;
  std::vector<int64_t> members;
  std::vector<std::pair<uint32_t, uint32_t>> flow_members;  // (src, dst) index in members
  int64_t calls = 0;  // collectives completed with it
  int8_t rail_symmetric = -1;  // Engine::rail_symmetric(), -1 until asked
};

/// When the members of one collective reached it (Engine::arrival), seconds.
struct CollectiveArrival {
  double start_s;     ///< the last replayed member's arrival: the collective's start
  double own_s;       ///< the asking rank's arrival
  int64_t last_rank;  ///< the member that arrived last (the asking rank when none was later)
};

/// A flow's route, group, lifetime, bytes and rate over time (for the link utilization series).
struct FlowRecord {
  const FlowRoute* route;
  const std::vector<uint32_t>* mirrored;  // mirror_links() of the flow, or nullptr
  uint32_t group;
  double start_s, end_s, bytes;
  uint64_t steps_at = 0;  // its RateSteps in Engine::rate_steps_ (FlowNetwork::record_rates)
  uint32_t steps_n = 0;
};

/// This process's one SimGrid engine, its log threshold at critical (SimGrid prints nothing
/// else). Throws Error "simulate: SimGrid runs one simulation per process" on the second call
/// (simulate_program() and replay_jobs() start theirs with it).
std::unique_ptr<simgrid::s4u::Engine> start_simgrid_engine();

/// One job of several replayed together on one platform (sim/multi_job.hpp): the platform GPU
/// each of its ranks runs on, the flow network the jobs share, and its iterations.
struct JobBinding {
  std::vector<int64_t> gpu_of_rank;  ///< platform GPU of the job's rank r (size: its world)
  FlowNetwork* network = nullptr;    ///< shared by every job of the SimGrid engine
  uint64_t tag_base = 0;             ///< added to the job's flow record ids (FlowNetwork tags)
  int64_t iterations = 1;            ///< iterations to replay, one after the other (>= 1)
  double start_s = 0;                ///< simulated time its first iteration starts, seconds
};

/// One replayed iteration of a job: when it started (the previous one's end) and ended (its
/// last op), seconds of simulated time, and its critical rank's breakdown.
struct IterationRecord {
  double start_s = 0;
  double end_s = 0;
  TimeBreakdown critical;
};

/// Replays one iteration of a TimedProgram on a Platform (sim/replay.hpp says how time is
/// computed), or, bound to a job of several (JobBinding), its iterations on a shared platform.
class Engine {
 public:
  /// `job`: null for the single job of simulate() (ranks on GPUs 0 .. world - 1, the engine's
  /// own flow network, one iteration); else kept by reference and used by begin_job().
  Engine(const TimedProgram& timed, const TopologySpec& topo, const SimulationOptions& opts,
         Platform& platform, const JobBinding* job = nullptr)
      : prog_(timed.program()), timed_(timed), topo_(topo), opts_(opts), platform_(platform),
        job_(job) {}
  /// Replays one iteration of every replayed rank; the engine is used once.
  SimulationResult run();

  // ---- a job of several (sim/multi_job.hpp) --------------------------------------------------
  /// Prepares the job and runs its first iteration's dataflow from JobBinding::start_s up to its
  /// first flows; the caller then runs SimGrid, routing each flow's end to flow_done(). Each
  /// iteration starts when the previous one's last op ends, until JobBinding::iterations.
  void begin_job();
  /// A flow of this job (its FlowNetwork tag minus JobBinding::tag_base) ended at `now`.
  void flow_done(uint64_t record, double now) { on_flow_done(record, now); }
  /// That flow's rate over time (FlowNetwork::record_rates), before its flow_done().
  void flow_rates(uint64_t record, std::span<const RateStep> steps);
  /// After SimGrid ran: throws Error (as check_complete) when an iteration could not complete.
  void check_job_complete() { check_complete(); }
  /// The iterations completed so far, in order.
  const std::vector<IterationRecord>& iterations() const { return iteration_records_; }
  /// Bytes this job's flows put on each link (mirrored TP ranks' included), by SimGrid link.
  std::vector<std::pair<const simgrid::s4u::Link*, double>> link_bytes() const;
  /// Adds this job's flows on the links of `series_of` (SimGrid link -> index into `series`) to
  /// those series (add_to_series() of each flow's rate steps, bandwidth `bandwidth_Bps[index]`),
  /// mirrored TP ranks' too.
  void add_link_series(const std::unordered_map<const simgrid::s4u::Link*, size_t>& series_of,
                       const std::vector<double>& bandwidth_Bps,
                       std::vector<LinkSeries>& series) const;
  int64_t ops() const { return ops_; }
  int64_t flows() const { return flows_; }
  /// The reductions applied (SimulationResult::reductions).
  const std::vector<std::string>& reductions() const { return reductions_; }

 private:
  // ---- set-up ---------------------------------------------------------------------------------
  /// Templates, rank states, traced ranks and the TP aggregation choice (with its checks).
  void prepare();
  /// The successor lists, dependency counts and p2p offsets of `rp`; throws Error on a
  /// dependency that is not an earlier op.
  Template make_template(const RankProgram& rp);
  /// Duration of compute op `id` of `rank` (the timing layer's, every what-if applied).
  double duration(int64_t rank, const Template& tp, uint32_t id) const {
    return (*tp.duration_s[timed_.gpu_type(rank)])[id] * timed_.rank_factor(rank);
  }
  /// The peer of send/recv `op` of `tp` when `rank` runs it: mapped_peer() (sim/matching.hpp)
  /// with the coordinate offsets taken once per template.
  int64_t peer_of(int64_t rank, const Template& tp, const Op& op) const {
    const RankCoord& self = ranks_[static_cast<size_t>(rank)].coord;
    const std::array<int64_t, 4>& d = tp.peer_offset[op.id];
    const RankLayout& l = prog_.layout;
    auto shift = [](int64_t mine, int64_t offset, int64_t size) {
      return ((mine + offset) % size + size) % size;
    };
    RankCoord c;
    c.tp = shift(self.tp, d[0], dims_[0]);
    c.cp = shift(self.cp, d[1], dims_[1]);
    c.dp = shift(self.dp, d[2], dims_[2]);
    c.pp = shift(self.pp, d[3], dims_[3]);
    return l.rank(c);
  }
  /// Key of Template::p2p_by_tag: the tag and whether the op is a send.
  static uint64_t p2p_tag_key(OpKind kind, int64_t tag) {
    return (static_cast<uint64_t>(tag) << 1) | (kind == OpKind::kSend ? 1u : 0u);
  }
  /// Whether `rank` is replayed (all ranks, or TP rank 0 only with aggregate_tp).
  bool replayed(int64_t rank) const { return tp_stride_ == 1 || rank % tp_stride_ == 0; }
  /// Members of a group of kind `g` that are replayed: groups spanning the TP dimension count
  /// only their TP rank 0 members under aggregation (the expert groups, formed by a second rank
  /// generator, may span it too: counted on the group of rank 0, layouts being uniform).
  int64_t replayed_size(GroupKind g);

  // ---- dataflow -------------------------------------------------------------------------------
  const Op& op_of(int64_t rank, uint32_t op) const {
    return templates_[ranks_[static_cast<size_t>(rank)].tmpl].rp->ops[op];
  }
  /// Runs every ready op whose end does not need the network, in any order (pure dataflow).
  void drain();
  /// Starts ready op `id` of `rank`: a compute op ends after its duration, a collective or
  /// send/recv waits for its members or its peer.
  void start_op(int64_t rank, uint32_t id);
  /// Calls opts_.progress when progress_interval_s has passed since the last call.
  void report_progress(double simulated_s);
  /// Marks op `id` of `rank` done at `end` and queues the successors it made ready.
  void finish(int64_t rank, uint32_t id, double end);
  /// A member arrives at a collective at `t`; the last arrival times it (closed form or flows).
  void arrive(int64_t rank, uint32_t id, const Op& op, double t);
  /// Whether the flows of `e` (a plan of a group spanning TP, under TP aggregation with one rail
  /// per GPU) are, rail by rail, rail 0's moved to the rail: every flow stays on the rail of
  /// its source (TP rank j -> TP rank j) and the flows of TP rank j, shifted by -j, are those
  /// of TP rank 0 (same endpoints, same bytes). Then rail 0's flows stand for all (mirrored),
  /// as the rails carry the same traffic by symmetry. Decided once per plan.
  bool rail_symmetric(PlanEntry& e);
  /// Index of `x` in `v` (v.size() when absent).
  static size_t index_of(const std::vector<int64_t>& v, int64_t x);
  /// `node_kinds`: node_kinds() of the op's group ("" on a cluster without node groups).
  std::tuple<int, int, int64_t, std::string> plan_key(const Op& op,
                                                      const std::string& node_kinds) const {
    return {static_cast<int>(op.group), static_cast<int>(op.collective), op.bytes, node_kinds};
  }
  /// The plan of collective `id` of `tp` (first asked by `rank`, a member of the group of index
  /// `group_index`). Plans are the same for every group of a kind (Megatron layouts are
  /// uniform) whose nodes are of the same kinds, so they are kept per (group kind, collective,
  /// bytes, node_kinds) with the members they were planned on; each op remembers its plan on a
  /// cluster without node groups (on a mixed one the ranks of one template sit on nodes of
  /// several kinds: a TP group on an A100 node runs at its NVLink rate, on an H100 node at its).
  PlanEntry& plan_of(Template& tp, uint32_t id, const Op& op, int64_t rank, int64_t group_index);
  /// The node kinds of the group of kind `g` and index `index` holding `rank` on a mixed
  /// cluster: one byte per distinct node group its members' nodes are in (the nodes past the
  /// groups count as one more), ascending; "" without node groups. Cached per group.
  const std::string& node_kinds(GroupKind g, int64_t index, int64_t rank);
  /// node_kinds() of a group of `members`, not cached.
  std::string node_kinds_of(const std::vector<int64_t>& members) const;
  /// Members of the group of kind `g` with index `index` (RankLayout::group_index) that holds
  /// `rank`, from RankLayout::group() once per group.
  const std::vector<int64_t>& group_members(GroupKind g, int64_t index, int64_t rank);
  /// One side of a send/recv is posted at `t`; the matching side starts the transfer.
  void p2p(int64_t rank, uint32_t id, const Op& op, const Template& tp, double t);

  // ---- SimGrid flows ---------------------------------------------------------------------------
  /// A cleared FlowGroup (a freed one, its ops' storage kept, or a new one).
  uint32_t new_group();
  /// Starts a flow of group `gid` at `start` (now or on a timer). `mirror`: under TP
  /// aggregation with one rail per GPU, the flow stands for the same flow of every TP rank, each
  /// on its own rail (the flows of groups that span TP are launched in full and not mirrored).
  void launch(uint32_t gid, int64_t src, int64_t dst, double bytes, double start, bool mirror);
  /// Starts a flow now on the flow network, counting its bytes on every link it crosses.
  void start_flow(uint32_t gid, int64_t src, int64_t dst, double bytes, bool mirror);
  /// The links (FlowNetwork::links() ids) of the routes of TP ranks 1 .. TP-1 for the flow of
  /// TP rank 0 `src` -> `dst` on `route` (the same route for every such pair: cached by it).
  const std::vector<uint32_t>& mirror_links(int64_t src, int64_t dst, int64_t path,
                                            const FlowRoute& route);
  /// Whether the groups of kind `g` hold ranks of several TP ranks (their collectives are
  /// launched in full under TP aggregation, not mirrored).
  bool spans_tp(GroupKind g);
  /// A flow ended at `now`; the last of its group completes the group's ops.
  void on_flow_done(uint64_t record, double now);
  /// Platform GPU of rank `r` (r itself without a JobBinding).
  int64_t gpu(int64_t r) const {
    return job_ == nullptr ? r : job_->gpu_of_rank[static_cast<size_t>(r)];
  }
  /// A bound job's iteration has run all its ops: records it (IterationRecord) and, while
  /// iterations are left, starts the next at its end (every rank's state reset, ready ops queued).
  void end_iteration();
  /// Queues every op without dependencies of every replayed rank.
  void queue_first_ops();

  // ---- completion check and results -----------------------------------------------------------
  /// Throws Error naming the first waiting ops when some op never ran (a deadlock).
  void check_complete();
  /// Iteration time, breakdowns, compute by source, link loads and counters.
  SimulationResult results();
  /// Link loads of every platform link (idle ones included), per tier, hot links, the busiest
  /// by bytes, and the utilization over time of the 5 busiest by utilization.
  void link_results(SimulationResult& res) const;
  /// Ready time of op `id` of `rank`: the latest end among its deps.
  double ready_time(int64_t rank, uint32_t id) const;
  /// The send (or recv) matching `op` of `rank` on its peer: (peer rank, op id).
  std::pair<int64_t, uint32_t> matching_p2p(int64_t rank, uint32_t id) const;
  /// The arrivals at collective `id` of `rank`: when its last replayed member arrived (the
  /// collective's start), when `rank` did, and which member was last.
  CollectiveArrival arrival(int64_t rank, uint32_t id) const;
  /// Walks the compute stream of `rank` and attributes every idle gap to the op it waited for
  /// (sim/attribution.hpp). `late`: when given, the sync wait is added up per (late member,
  /// group kind).
  TimeBreakdown breakdown(int64_t rank, double iteration_s,
                          std::map<std::pair<int64_t, GroupKind>, LatePeer>* late = nullptr) const;
  /// The traced ranks' ops as timeline events (or handed to SimulationOptions::timeline_sink).
  Timeline timeline() const;

  std::map<GroupKind, int64_t> replayed_size_;
  /// arrival()'s groups: RankLayout::group(kind, rank) by rank x kNumGroupKinds + kind.
  mutable std::unordered_map<uint64_t, std::vector<int64_t>> arrival_groups_;
  const Program& prog_;
  const TimedProgram& timed_;
  const TopologySpec& topo_;
  const SimulationOptions& opts_;
  Platform& platform_;
  int64_t world_ = 0;
  std::array<int64_t, 4> dims_{};  // TP, CP, DP, PP sizes
  int64_t tp_stride_ = 1;  // > 1: only ranks with tp == 0 are replayed
  bool mirror_rails_ = false;  // tp_stride_ > 1 and one rail per GPU: flows stand for TP ranks'
  std::unordered_map<const FlowRoute*, std::vector<uint32_t>> mirror_links_;
  std::array<int8_t, kNumGroupKinds> spans_tp_ = filled<kNumGroupKinds>(-1);
  std::vector<std::string> reductions_;
  std::vector<Template> templates_;
  std::vector<RankState> ranks_;
  std::vector<int64_t> traced_;
  std::vector<std::pair<int64_t, uint32_t>> worklist_;
  std::optional<CollectiveKeys> collective_keys_;
  CollectiveRendezvous<PendingP2P> arrivals_;
  TransferMatcher<PendingP2P> transfers_;
  std::vector<PlanEntry> plans_;
  std::map<std::tuple<int, int, int64_t, std::string>, uint32_t> plan_ids_;  // plan_key -> plans_
  std::array<std::vector<std::string>, kNumGroupKinds> group_node_kinds_;  // node_kinds() cache
  std::array<std::vector<std::vector<int64_t>>, kNumGroupKinds> group_members_;
  std::vector<FlowGroup> groups_;
  std::vector<uint32_t> free_groups_;
  const JobBinding* job_ = nullptr;
  double t0_ = 0;          // start of the current iteration (0 without a JobBinding)
  int64_t done_ops_ = 0;   // ops finished in the current iteration
  std::vector<IterationRecord> iteration_records_;
  std::optional<FlowNetwork> own_net_;  // the single job's flow network
  FlowNetwork* net_ = nullptr;          // own_net_, or JobBinding::network
  std::vector<FlowRecord> flow_records_;
  std::vector<RateStep> rate_steps_;  // every flow's, FlowRecord::steps_at/steps_n
  std::span<const RateStep> steps_of(const FlowRecord& f) const {
    return {rate_steps_.data() + f.steps_at, f.steps_n};
  }
  std::vector<double> link_bytes_;  // by FlowNetwork::links() index
  int64_t ops_ = 0, flows_ = 0, timers_ = 0;
  int64_t ops_total_ = 0;  // ops of the replayed ranks (ReplayProgress::ops_total)
  std::chrono::steady_clock::time_point wall0_, last_progress_;
};

}  // namespace traintwin::replay_engine
