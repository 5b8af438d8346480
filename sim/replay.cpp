#include "sim/replay.hpp"

#include "traces/op_event.hpp"

#include <simgrid/kernel/Timer.hpp>
#include <simgrid/s4u/Activity.hpp>
#include <simgrid/s4u/Comm.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Host.hpp>
#include <simgrid/s4u/Link.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <optional>
#include <map>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "core/error.hpp"
#include "sim/attribution.hpp"
#include "sim/flow_network.hpp"
#include "sim/matching.hpp"
#include "sim/timed_program.hpp"

namespace traintwin {
namespace {

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
  const std::vector<double>* duration_s = nullptr;  // TimedProgram::durations of rp
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

class Engine {
 public:
  Engine(const TimedProgram& timed, const TopologySpec& topo, const SimulationOptions& opts,
         Platform& platform)
      : prog_(timed.program()), timed_(timed), topo_(topo), opts_(opts), platform_(platform) {}

  SimulationResult run() {
    const auto wall0 = std::chrono::steady_clock::now();
    wall0_ = last_progress_ = wall0;
    prepare();
    for (int64_t r = 0; r < world_; ++r) {
      if (replayed(r)) {
        ops_total_ += static_cast<int64_t>(
            templates_[ranks_[static_cast<size_t>(r)].tmpl].ndeps.size());
      }
    }
    net_.emplace([this](uint64_t record, double end_s) { on_flow_done(record, end_s); },
                 opts_.lone_flows_in_closed_form, opts_.max_group_flows);
    for (int64_t r = 0; r < world_; ++r) {
      if (!replayed(r)) continue;
      const Template& tp = templates_[ranks_[static_cast<size_t>(r)].tmpl];
      for (uint32_t op = 0; op < tp.ndeps.size(); ++op) {
        if (tp.ndeps[op] == 0) worklist_.push_back({r, op});
      }
    }
    drain();
    simgrid::s4u::Engine::get_instance()->run();
    drain();
    check_complete();
    const auto wall1 = std::chrono::steady_clock::now();
    SimulationResult res = results();
    const auto wall2 = std::chrono::steady_clock::now();
    res.wall_phases_s = {{"replay", std::chrono::duration<double>(wall1 - wall0).count()},
                         {"results", std::chrono::duration<double>(wall2 - wall1).count()}};
    res.sim_wall_s = std::chrono::duration<double>(wall2 - wall0).count();
    return res;
  }

 private:
  // ---- set-up ---------------------------------------------------------------------------------

  void prepare() {
    world_ = prog_.layout.world_size();
    dims_ = {prog_.layout.size(GroupKind::kTp), prog_.layout.size(GroupKind::kCp),
             prog_.layout.size(GroupKind::kDp), prog_.layout.size(GroupKind::kPp)};
    collective_keys_.emplace(prog_.layout);
    const int64_t tp = prog_.layout.size(GroupKind::kTp);
    if (opts_.aggregate_tp && tp > 1) {
      if ((opts_.straggler && !opts_.straggler_tp_group) ||
          !opts_.scaling.degraded_links.empty()) {
        throw ConfigError(
            "simulate: TP aggregation (--aggregate-tp) replays TP rank 0 for its whole TP group, "
            "which needs the ranks of a TP group and the rails to behave alike; a what-if " +
            std::string(opts_.straggler ? "straggler" : "degraded link") +
            " breaks that: simulate without TP aggregation");
      }
      const std::string& order = prog_.layout.order();
      if (order.rfind("tp", 0) != 0 || topo_.node.gpus_per_node % tp != 0) {
        throw ConfigError("simulate: TP aggregation needs each TP group on consecutive GPUs of one "
                          "node (rank order starting with tp and TP dividing the " +
                          std::to_string(topo_.node.gpus_per_node) +
                          " GPUs per node); got TP " + std::to_string(tp) + ", order " + order);
      }
      tp_stride_ = tp;
    } else if (opts_.exact_reductions && tp > 1 &&
               tp_aggregation_blocker(prog_.layout, topo_, opts_, prog_.scenario.model.is_moe())
                   .empty()) {
      tp_stride_ = tp;
    }
    if (tp_stride_ > 1) {
      // One rail per GPU: TP rank k's flows are TP rank 0's moved to rail k (mirrored).
      mirror_rails_ = topo_.nic.nics_per_node == topo_.node.gpus_per_node;
      reductions_.push_back(
          "TP aggregation: TP rank 0 of each TP group replayed for its " + std::to_string(tp) +
          " TP ranks (" + (opts_.aggregate_tp ? "asked for" : "exact by symmetry") +
          ": each TP group on consecutive GPUs of one node" +
          (mirror_rails_ ? ", one rail per GPU; the other rails' links loaded as rail 0's)"
                         : "; link loads are those of rail 0)"));
    }
    // One template per RankProgram of the Program; ranks without one use their stage's.
    std::map<int64_t, uint32_t> by_stage;
    std::map<int64_t, uint32_t> by_rank;
    for (const auto& [r, rp] : prog_.ranks) {
      const auto id = static_cast<uint32_t>(templates_.size());
      templates_.push_back(make_template(rp));
      by_rank[r] = id;
      by_stage.try_emplace(rp.coord.pp, id);
    }
    ranks_.resize(static_cast<size_t>(world_));
    std::vector<bool> traced(static_cast<size_t>(world_), opts_.trace_all_ranks);
    if (!opts_.trace_all_ranks) {
      if (opts_.trace_ranks.empty()) {
        for (int64_t r = 0; r < world_; ++r) {
          const RankCoord c = prog_.layout.coord(r);
          traced[static_cast<size_t>(r)] = c.dp == 0 && c.cp == 0 && c.tp == 0;
        }
      } else {
        for (int64_t r : opts_.trace_ranks) {
          if (r < 0 || r >= world_) throw InvalidArgument("trace rank " + std::to_string(r) + " outside [0, " + std::to_string(world_) + ")");
          traced[static_cast<size_t>(r)] = true;
        }
      }
    }
    for (int64_t r = 0; r < world_; ++r) {
      RankState& st = ranks_[static_cast<size_t>(r)];
      st.coord = prog_.layout.coord(r);
      if (!replayed(r)) continue;
      auto it = by_rank.find(r);
      if (it != by_rank.end()) {
        st.tmpl = it->second;
      } else {
        auto s = by_stage.find(st.coord.pp);
        if (s == by_stage.end()) {
          throw InvalidArgument("simulate: no Program for pipeline stage " + std::to_string(st.coord.pp));
        }
        st.tmpl = s->second;
      }
      const Template& tmpl = templates_[st.tmpl];
      st.t.assign(tmpl.ndeps.size(), 0.0);
      st.remaining = tmpl.ndeps;
      if (traced[static_cast<size_t>(r)] && opts_.record_timeline && replayed(r)) {
        st.start.assign(tmpl.ndeps.size(), 0.0);
        traced_.push_back(r);
      }
    }
  }

  Template make_template(const RankProgram& rp) {
    Template t;
    t.rp = &rp;
    t.duration_s = &timed_.durations(rp.rank);
    t.seq = collective_sequence(rp);
    const size_t n = rp.ops.size();
    t.ndeps.assign(n, 0);
    t.plan.assign(n, kNone);
    t.peer_offset.assign(n, {});
    for (const Op& op : rp.ops) {
      if (op.kind != OpKind::kSend && op.kind != OpKind::kRecv) continue;
      const RankCoord peer = prog_.layout.coord(op.peer);
      t.peer_offset[op.id] = {peer.tp - rp.coord.tp, peer.cp - rp.coord.cp,
                              peer.dp - rp.coord.dp, peer.pp - rp.coord.pp};
      t.p2p_by_tag.try_emplace(p2p_tag_key(op.kind, op.tag), op.id);
    }
    std::vector<uint32_t> count(n + 1, 0);
    for (const Op& op : rp.ops) {
      if (op.deps.size() > UINT16_MAX) throw Error("simulate: op with too many dependencies");
      t.ndeps[op.id] = static_cast<uint16_t>(op.deps.size());
      for (uint32_t d : op.deps) {
        if (d >= op.id) {
          throw Error("simulate: rank " + std::to_string(rp.rank) + " op " + std::to_string(op.id) +
                      " (" + prog_.label(op) + ") depends on op " + std::to_string(d) +
                      ", not an earlier op (dependency cycle or forward reference)");
        }
        ++count[d + 1];
      }
    }
    for (size_t i = 1; i <= n; ++i) count[i] += count[i - 1];
    t.succ_begin = count;
    t.succ.assign(count[n], 0);
    std::vector<uint32_t> fill(count.begin(), count.end() - 1);
    for (const Op& op : rp.ops) {
      for (uint32_t d : op.deps) t.succ[fill[d]++] = op.id;
    }
    return t;
  }

  /// Duration of compute op `id` of `rank` (the timing layer's, every what-if applied).
  double duration(int64_t rank, const Template& tp, uint32_t id) const {
    return (*tp.duration_s)[id] * timed_.rank_factor(rank);
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

  static uint64_t p2p_tag_key(OpKind kind, int64_t tag) {
    return (static_cast<uint64_t>(tag) << 1) | (kind == OpKind::kSend ? 1u : 0u);
  }

  /// Whether `rank` is replayed (all ranks, or TP rank 0 only with aggregate_tp).
  bool replayed(int64_t rank) const { return tp_stride_ == 1 || rank % tp_stride_ == 0; }

  /// Members of a group of kind `g` that are replayed: groups spanning the TP dimension count
  /// only their TP rank 0 members under aggregation (the expert groups, formed by a second rank
  /// generator, may span it too: counted on the group of rank 0, layouts being uniform).
  int64_t replayed_size(GroupKind g) {
    if (tp_stride_ == 1) return prog_.layout.size(g);
    auto [it, inserted] = replayed_size_.try_emplace(g, 0);
    if (inserted) {
      for (int64_t r : prog_.layout.group(g, 0)) it->second += replayed(r) ? 1 : 0;
    }
    return it->second;
  }
  std::map<GroupKind, int64_t> replayed_size_;

  // ---- dataflow -------------------------------------------------------------------------------

  const Op& op_of(int64_t rank, uint32_t op) const {
    return templates_[ranks_[static_cast<size_t>(rank)].tmpl].rp->ops[op];
  }

  /// Runs every ready op whose end does not need the network, in any order (pure dataflow).
  void drain() {
    while (!worklist_.empty()) {
      auto [rank, op] = worklist_.back();
      worklist_.pop_back();
      start_op(rank, op);
    }
  }

  void start_op(int64_t rank, uint32_t id) {
    RankState& st = ranks_[static_cast<size_t>(rank)];
    const Template& tp = templates_[st.tmpl];
    const Op& op = tp.rp->ops[id];
    const double t = st.t[id];
    ++ops_;
    if (opts_.progress && ops_ % 256 == 0) report_progress(t);
    switch (op.kind) {
      case OpKind::kCompute:
        if (!st.start.empty()) st.start[id] = t;
        finish(rank, id, t + duration(rank, tp, id));
        return;
      case OpKind::kCollective: arrive(rank, id, op, t); return;
      case OpKind::kSend:
      case OpKind::kRecv: p2p(rank, id, op, tp, t); return;
    }
  }

  /// Calls opts_.progress when progress_interval_s has passed since the last call.
  void report_progress(double simulated_s) {
    const auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(now - last_progress_).count() < opts_.progress_interval_s) {
      return;
    }
    last_progress_ = now;
    opts_.progress(ReplayProgress{ops_, ops_total_, simulated_s,
                                  std::chrono::duration<double>(now - wall0_).count()});
  }

  void finish(int64_t rank, uint32_t id, double end) {
    RankState& st = ranks_[static_cast<size_t>(rank)];
    const Template& tp = templates_[st.tmpl];
    st.t[id] = end;
    st.remaining[id] = UINT16_MAX;  // done marker (ops have < UINT16_MAX deps)
    for (uint32_t i = tp.succ_begin[id]; i < tp.succ_begin[id + 1]; ++i) {
      const uint32_t s = tp.succ[i];
      st.t[s] = std::max(st.t[s], end);
      if (--st.remaining[s] == 0) worklist_.push_back({rank, s});
    }
  }

  void arrive(int64_t rank, uint32_t id, const Op& op, double t) {
    Template& tp = templates_[ranks_[static_cast<size_t>(rank)].tmpl];
    const CollectiveKey key = collective_keys_->key(rank, op, tp.seq[id]);
    auto calls = arrivals_.arrive(key, PendingP2P{rank, id, t}, replayed_size(op.group));
    if (!calls) return;
    double max_t = 0;
    for (const PendingP2P& c : *calls) max_t = std::max(max_t, c.t);
    for (const PendingP2P& c : *calls) {
      const Op& other = op_of(c.rank, c.op);
      if (other.collective != op.collective || other.bytes != op.bytes) {
        throw Error("simulate: collective mismatch in group " + std::string(to_string(op.group)) +
                    ": rank " + std::to_string(rank) + " runs " + prog_.label(op) + ", rank " +
                    std::to_string(c.rank) + " runs " + prog_.label(other));
      }
    }
    PlanEntry& entry = plan_of(tp, id, op, rank);
    const CollectivePlan& plan = entry.plan;
    // Under TP aggregation a collective of a group within one TP rank stands for TP of them.
    entry.calls += tp_stride_ > 1 && !spans_tp(op.group) ? tp_stride_ : 1;
    for (const PendingP2P& c : *calls) {
      RankState& st = ranks_[static_cast<size_t>(c.rank)];
      if (!st.start.empty()) st.start[c.op] = max_t;
    }
    if (plan.flows.empty() || !opts_.link_contention) {
      const double end = max_t + uncontended_time_s(plan, topo_);
      for (const PendingP2P& c : *calls) finish(c.rank, c.op, end);
      return;
    }
    // Flows between the members of this very group: the plan's ranks (of the group of the rank
    // it was planned for) mapped to this group's members by their index in the group.
    const std::vector<int64_t>& members = group_members(op.group, key.group_index, rank);
    // Under TP aggregation a group within one TP rank stands for its TP copies (mirrored); a
    // group spanning TP whose flows are the same on every rail launches rail 0's, mirrored.
    const bool within_tp_rank = tp_stride_ > 1 && !spans_tp(op.group);
    const bool rail0_only = !within_tp_rank && mirror_rails_ && rail_symmetric(entry);
    const uint32_t gid = new_group();
    FlowGroup& g = groups_[gid];
    g.start = max_t;
    g.min_end = max_t + plan.local_time_s;
    g.latency_s = plan.latency_s;
    g.ops = std::move(*calls);
    for (size_t i = 0; i < plan.flows.size(); ++i) {
      const auto [src, dst] = entry.flow_members[i];
      if (rail0_only && members[src] % tp_stride_ != 0) continue;
      launch(gid, members[src], members[dst], plan.flows[i].bytes, max_t,
             within_tp_rank || rail0_only);
    }
  }

  /// Whether the flows of `e` (a plan of a group spanning TP, under TP aggregation with one rail
  /// per GPU) are, rail by rail, rail 0's moved to the rail: every flow stays on the rail of
  /// its source (TP rank j -> TP rank j) and the flows of TP rank j, shifted by -j, are those
  /// of TP rank 0 (same endpoints, same bytes). Then rail 0's flows stand for all (mirrored),
  /// as the rails carry the same traffic by symmetry. Decided once per plan.
  bool rail_symmetric(PlanEntry& e) {
    if (e.rail_symmetric >= 0) return e.rail_symmetric != 0;
    const int64_t S = tp_stride_;
    std::vector<std::vector<std::tuple<int64_t, int64_t, double>>> by_rail(static_cast<size_t>(S));
    bool ok = !e.plan.flows.empty();
    for (const CollectiveFlow& f : e.plan.flows) {
      const int64_t j = f.src % S;
      if (f.dst % S != j) {
        ok = false;
        break;
      }
      by_rail[static_cast<size_t>(j)].emplace_back(f.src - j, f.dst - j, f.bytes);
    }
    for (auto& rail : by_rail) std::sort(rail.begin(), rail.end());
    for (size_t j = 1; ok && j < by_rail.size(); ++j) ok = by_rail[j] == by_rail[0];
    e.rail_symmetric = ok ? 1 : 0;
    return ok;
  }

  static size_t index_of(const std::vector<int64_t>& v, int64_t x) {
    return static_cast<size_t>(std::find(v.begin(), v.end(), x) - v.begin());
  }

  std::tuple<int, int, int64_t> plan_key(const Op& op) const {
    return {static_cast<int>(op.group), static_cast<int>(op.collective), op.bytes};
  }

  /// The plan of collective `id` of `tp` (first asked by `rank`). Plans are the same for every
  /// group of a kind (Megatron layouts are uniform), so they are kept per (group kind,
  /// collective, bytes) with the members they were planned on; each op remembers its plan.
  PlanEntry& plan_of(Template& tp, uint32_t id, const Op& op, int64_t rank) {
    if (tp.plan[id] != kNone) return plans_[tp.plan[id]];
    const auto key = plan_key(op);
    auto it = plan_ids_.find(key);
    if (it == plan_ids_.end()) {
      PlanEntry e;
      e.members = prog_.layout.group(op.group, rank);
      e.plan = plan_collective(op.collective, op.bytes, e.members, topo_, opts_.fabric,
                               opts_.collective_algorithm);
      for (const CollectiveFlow& f : e.plan.flows) {
        e.flow_members.emplace_back(static_cast<uint32_t>(index_of(e.members, f.src)),
                                    static_cast<uint32_t>(index_of(e.members, f.dst)));
      }
      it = plan_ids_.emplace(key, static_cast<uint32_t>(plans_.size())).first;
      plans_.push_back(std::move(e));
    }
    tp.plan[id] = it->second;
    return plans_[it->second];
  }

  /// Members of the group of kind `g` with index `index` (RankLayout::group_index) that holds
  /// `rank`, from RankLayout::group() once per group.
  const std::vector<int64_t>& group_members(GroupKind g, int64_t index, int64_t rank) {
    auto& of_kind = group_members_[static_cast<size_t>(g)];
    if (static_cast<size_t>(index) >= of_kind.size()) of_kind.resize(static_cast<size_t>(index) + 1);
    std::vector<int64_t>& m = of_kind[static_cast<size_t>(index)];
    if (m.empty()) m = prog_.layout.group(g, rank);
    return m;
  }

  void p2p(int64_t rank, uint32_t id, const Op& op, const Template& tp, double t) {
    const TransferKey key = transfer_key(rank, op, peer_of(rank, tp, op));
    std::optional<PendingP2P> matched;
    try {
      matched = transfers_.post(key, op.kind == OpKind::kSend, PendingP2P{rank, id, t},
                                [&] { return prog_.label(op); });
    } catch (const Error& e) {
      throw Error(std::string("simulate: ") + e.what());
    }
    if (!matched) return;
    const PendingP2P other = *matched;
    const Op& oop = op_of(other.rank, other.op);
    if (oop.bytes != op.bytes) {
      throw Error("simulate: send/recv size mismatch between rank " + std::to_string(rank) + " (" +
                  prog_.label(op) + ") and rank " + std::to_string(other.rank) + " (" + prog_.label(oop) + ")");
    }
    const double start = std::max(t, other.t);
    for (auto [r, o] : {std::pair{rank, id}, std::pair{other.rank, other.op}}) {
      RankState& st = ranks_[static_cast<size_t>(r)];
      if (!st.start.empty()) st.start[o] = start;
    }
    if (!opts_.link_contention) {
      const double end = start + uncontended_transfer_s(key.src, key.dst, static_cast<double>(op.bytes), topo_);
      finish(rank, id, end);
      finish(other.rank, other.op, end);
      return;
    }
    const uint32_t gid = new_group();
    FlowGroup& g = groups_[gid];
    g.start = start;
    g.min_end = start;
    g.ops.push_back({rank, id, 0.0});
    g.ops.push_back({other.rank, other.op, 0.0});
    launch(gid, key.src, key.dst, static_cast<double>(op.bytes), start, tp_stride_ > 1);
  }

  // ---- SimGrid flows ---------------------------------------------------------------------------

  /// A cleared FlowGroup (a freed one, its ops' storage kept, or a new one).
  uint32_t new_group() {
    if (free_groups_.empty()) {
      groups_.emplace_back();
      return static_cast<uint32_t>(groups_.size() - 1);
    }
    const uint32_t id = free_groups_.back();
    free_groups_.pop_back();
    FlowGroup& g = groups_[id];
    g.remaining = 0;
    g.start = g.min_end = g.latency_s = 0;
    g.ops.clear();
    return id;
  }

  /// Starts a flow of group `gid` at `start` (now or on a timer). `mirror`: under TP
  /// aggregation with one rail per GPU, the flow stands for the same flow of every TP rank, each
  /// on its own rail (the flows of groups that span TP are launched in full and not mirrored).
  void launch(uint32_t gid, int64_t src, int64_t dst, double bytes, double start, bool mirror) {
    groups_[gid].remaining += 1;
    const double now = simgrid::s4u::Engine::get_clock();
    if (start <= now) {
      start_flow(gid, src, dst, bytes, mirror);
      return;
    }
    ++timers_;
    simgrid::kernel::timer::Timer::set(start, [this, gid, src, dst, bytes, mirror] {
      start_flow(gid, src, dst, bytes, mirror);
    });
  }

  void start_flow(uint32_t gid, int64_t src, int64_t dst, double bytes, bool mirror) {
    auto [from, to] = platform_.endpoints(src, dst);
    const FlowRoute& route = net_->route(from, to);
    const std::vector<uint32_t>* mirrored =
        mirror && mirror_rails_ ? &mirror_links(src, dst, route) : nullptr;
    if (link_bytes_.size() < net_->links().size()) link_bytes_.resize(net_->links().size(), 0.0);
    for (uint32_t l : route.link_ids) link_bytes_[l] += bytes;
    if (mirrored) {
      for (uint32_t l : *mirrored) link_bytes_[l] += bytes;
    }
    const auto record = static_cast<uint64_t>(flow_records_.size());
    flow_records_.push_back({&route, mirrored, gid, simgrid::s4u::Engine::get_clock(), 0.0, bytes});
    ++flows_;
    net_->start(from, to, bytes, record);
  }

  /// The links (FlowNetwork::links() ids) of the routes of TP ranks 1 .. TP-1 for the flow of
  /// TP rank 0 `src` -> `dst` on `route` (the same route for every such pair: cached by it).
  const std::vector<uint32_t>& mirror_links(int64_t src, int64_t dst, const FlowRoute& route) {
    auto [it, fresh] = mirror_links_.try_emplace(&route);
    if (fresh) {
      for (int64_t k = 1; k < tp_stride_; ++k) {
        auto [from, to] = platform_.endpoints(src + k, dst + k);
        const FlowRoute& r = net_->route(from, to);
        it->second.insert(it->second.end(), r.link_ids.begin(), r.link_ids.end());
      }
    }
    return it->second;
  }

  /// Whether the groups of kind `g` hold ranks of several TP ranks (their collectives are
  /// launched in full under TP aggregation, not mirrored).
  bool spans_tp(GroupKind g) {
    int8_t& known = spans_tp_[static_cast<size_t>(g)];
    if (known < 0) {
      known = 0;
      for (int64_t r : prog_.layout.group(g, 0)) {
        if (prog_.layout.coord(r).tp != 0) known = 1;
      }
    }
    return known != 0;
  }

  void on_flow_done(uint64_t record, double now) {
    FlowRecord& rec = flow_records_[record];
    rec.end_s = now;
    FlowGroup& g = groups_[rec.group];
    if (--g.remaining > 0) return;
    const double end = std::max(now, g.min_end) + g.latency_s;
    // finish() only queues ops, so the group is freed (its storage kept) before any starts.
    for (const PendingP2P& o : g.ops) finish(o.rank, o.op, end);
    free_groups_.push_back(rec.group);
    drain();
  }

  // ---- completion check and results -----------------------------------------------------------

  void check_complete() {
    std::ostringstream msg;
    int shown = 0;
    for (int64_t r = 0; r < world_ && shown < 10; ++r) {
      if (!replayed(r)) continue;
      const RankState& st = ranks_[static_cast<size_t>(r)];
      for (uint32_t o = 0; o < st.remaining.size(); ++o) {
        if (st.remaining[o] == UINT16_MAX) continue;
        if (st.remaining[o] != 0) continue;  // blocked behind another unfinished op
        msg << "\n  rank " << r << " op " << o << " (" << prog_.label(op_of(r, o)) << ") waits";
        const Op& op = op_of(r, o);
        if (op.kind == OpKind::kSend) msg << " for the recv on rank " << op.peer << " (tag " << op.tag << ")";
        if (op.kind == OpKind::kRecv) msg << " for the send from rank " << op.peer << " (tag " << op.tag << ")";
        if (op.kind == OpKind::kCollective) msg << " for the other members of its " << to_string(op.group) << " group";
        if (++shown == 10) break;
      }
    }
    if (shown > 0) {
      int64_t left = 0;
      for (const auto& st : ranks_) {
        for (uint16_t x : st.remaining) left += x != UINT16_MAX;
      }
      throw Error("simulate: the iteration cannot complete, " + std::to_string(left) +
                  " ops never ran; first waiting ops:" + msg.str());
    }
  }

  SimulationResult results() {
    SimulationResult res;
    int64_t last_rank = 0;
    for (int64_t r = 0; r < world_; ++r) {
      const RankState& st = ranks_[static_cast<size_t>(r)];
      if (!replayed(r)) continue;
      for (double t : st.t) {
        if (t > res.iteration_time_s) {
          res.iteration_time_s = t;
          last_rank = r;
        }
      }
    }
    res.critical = breakdown(last_rank, res.iteration_time_s);
    for (int64_t pp = 0; pp < prog_.layout.size(GroupKind::kPp); ++pp) {
      res.per_stage.push_back(breakdown(prog_.layout.rank(RankCoord{0, 0, 0, pp}), res.iteration_time_s));
    }
    // Compute seconds per cost source over all ranks (a replayed rank stands for tp_stride_),
    // with the what-if GPU speed and straggler factors.
    for (int64_t r = 0; r < world_; ++r) {
      if (!replayed(r)) continue;
      timed_.add_compute_by_source(r, templates_[ranks_[static_cast<size_t>(r)].tmpl].rp->rank,
                                   static_cast<double>(tp_stride_), res.compute_s_by_source);
    }
    link_results(res);
    res.ops = ops_;
    res.flows = flows_;
    if (net_) {
      res.group_flows = net_->stats().group_flows;
      res.solver_flows = net_->stats().solver_flows;
      res.max_solver_flows = net_->stats().max_in_solver;
    }
    res.replayed_ranks = world_ / tp_stride_;
    res.reductions = reductions_;
    res.events = ops_ + flows_ + timers_;
    for (const PlanEntry& e : plans_) {
      if (e.calls > 0) res.collective_algorithms[to_string(e.plan.algorithm)] += e.calls;
    }
    if (opts_.record_timeline) res.timeline = timeline();
    return res;
  }

  /// Link loads of every platform link (idle ones included), per tier, hot links, the busiest
  /// by bytes, and the utilization over time of the 5 busiest by utilization.
  void link_results(SimulationResult& res) const {
    const double T = res.iteration_time_s;
    std::vector<LinkLoad> all;
    std::unordered_map<const simgrid::s4u::Link*, double> link_bytes;
    if (net_) {
      for (size_t i = 0; i < link_bytes_.size(); ++i) link_bytes[net_->links()[i]] = link_bytes_[i];
    }
    for (const PlatformLink& l : platform_.links()) {
      LinkLoad ll;
      ll.name = l.name;
      ll.tier = l.tier;
      ll.bandwidth_Bps = l.bandwidth_Bps;
      auto it = link_bytes.find(l.link);
      ll.bytes = it == link_bytes.end() ? 0.0 : it->second;
      ll.utilization = T > 0 ? ll.bytes / (l.bandwidth_Bps * T) : 0;
      all.push_back(ll);
    }
    res.link_tiers = tier_traffic(all);
    res.hot_links = hot_links(all, res.link_tiers);
    std::vector<size_t> order;
    for (size_t i = 0; i < all.size(); ++i) {
      if (all[i].bytes > 0 && all[i].tier != "loopback") order.push_back(i);
    }
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return all[a].bytes != all[b].bytes ? all[a].bytes > all[b].bytes : all[a].name < all[b].name;
    });
    for (size_t k = 0; k < order.size() && k < 10; ++k) res.busiest_links.push_back(all[order[k]]);
    // Series of the 5 busiest by utilization, from the flows that crossed them.
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return all[a].utilization > all[b].utilization;
    });
    if (order.size() > 5) order.resize(5);
    if (order.empty() || !(T > 0)) return;
    constexpr int kBins = 100;
    // Series index and bandwidth by FlowNetwork link id (-1: no series).
    std::unordered_map<const simgrid::s4u::Link*, uint32_t> net_id;
    for (size_t id = 0; id < net_->links().size(); ++id) {
      net_id[net_->links()[id]] = static_cast<uint32_t>(id);
    }
    std::vector<int32_t> series_of(net_->links().size(), -1);
    std::vector<double> series_bw;
    for (size_t i : order) {
      LinkSeries ls;
      ls.name = all[i].name;
      ls.tier = all[i].tier;
      ls.bin_s = T / kBins;
      ls.utilization.assign(kBins, 0.0);
      auto id = net_id.find(platform_.links()[i].link);  // found: the link carried bytes
      if (id != net_id.end()) series_of[id->second] = static_cast<int32_t>(res.link_series.size());
      series_bw.push_back(all[i].bandwidth_Bps);
      res.link_series.push_back(std::move(ls));
    }
    auto add = [&](const FlowRecord& f, uint32_t l) {
      const int32_t s = series_of[l];
      if (s < 0) return;
      add_to_series(res.link_series[static_cast<size_t>(s)], series_bw[static_cast<size_t>(s)],
                    f.start_s, f.end_s, f.bytes);
    };
    for (const FlowRecord& f : flow_records_) {
      for (uint32_t l : f.route->link_ids) add(f, l);
      if (f.mirrored) {
        for (uint32_t l : *f.mirrored) add(f, l);
      }
    }
  }

  /// Ready time of op `id` of `rank`: the latest end among its deps.
  double ready_time(int64_t rank, uint32_t id) const {
    const RankState& st = ranks_[static_cast<size_t>(rank)];
    double t = 0;
    for (uint32_t d : op_of(rank, id).deps) t = std::max(t, st.t[d]);
    return t;
  }

  /// The send (or recv) matching `op` of `rank` on its peer: (peer rank, op id).
  std::pair<int64_t, uint32_t> matching_p2p(int64_t rank, uint32_t id) const {
    const RankState& st = ranks_[static_cast<size_t>(rank)];
    const Op& op = op_of(rank, id);
    const int64_t peer = peer_of(rank, templates_[st.tmpl], op);
    const OpKind want = op.kind == OpKind::kSend ? OpKind::kRecv : OpKind::kSend;
    const Template& peer_tp = templates_[ranks_[static_cast<size_t>(peer)].tmpl];
    auto it = peer_tp.p2p_by_tag.find(p2p_tag_key(want, op.tag));
    return {peer, it == peer_tp.p2p_by_tag.end() ? kNone : it->second};
  }

  /// Walks the compute stream of `rank` and attributes every idle gap to the op it waited for.
  TimeBreakdown breakdown(int64_t rank, double iteration_s) const {
    TimeBreakdown b;
    b.rank = rank;
    const RankState& st = ranks_[static_cast<size_t>(rank)];
    const Template& tp = templates_[st.tmpl];
    double prev_end = 0;
    auto attribute = [&](double gap, uint32_t waited) {
      if (gap <= 0) return;
      if (waited == kNone) {
        attribute_gap(b, gap, WaitedFor{});
        return;
      }
      const Op& w = tp.rp->ops[waited];
      double transfer = 0;
      if (w.kind == OpKind::kSend || w.kind == OpKind::kRecv) {
        auto [peer, other] = matching_p2p(rank, waited);
        const double start = std::max(ready_time(rank, waited),
                                      other == kNone ? 0.0 : ready_time(peer, other));
        transfer = st.t[waited] - start;
      }
      attribute_gap(b, gap, waited_for(w, transfer));
    };
    for (const Op& op : tp.rp->ops) {
      if (op.kind != OpKind::kCompute) continue;
      const double dur = duration(rank, tp, op.id);
      const double start = st.t[op.id] - dur;
      uint32_t waited = kNone;
      double latest = -1;
      for (uint32_t d : op.deps) {
        if (st.t[d] > latest) {
          latest = st.t[d];
          waited = d;
        }
      }
      attribute(start - prev_end, waited);
      b.compute_s += dur;
      if (op.phase == Phase::kOptimizer) b.optimizer_s += dur;
      prev_end = st.t[op.id];
    }
    // The tail: after the last compute op, until the iteration ends.
    uint32_t last = kNone;
    double last_end = prev_end;
    for (const Op& op : tp.rp->ops) {
      if (st.t[op.id] > last_end) {
        last_end = st.t[op.id];
        last = op.id;
      }
    }
    attribute(last_end - prev_end, last);
    attribute_gap(b, iteration_s - std::max(last_end, prev_end), WaitedFor{});
    return b;
  }

  Timeline timeline() const {
    Timeline tl;
    tl.name = prog_.scenario.name;
    for (int64_t r : traced_) {
      const RankState& st = ranks_[static_cast<size_t>(r)];
      const Template& tp = templates_[st.tmpl];
      for (const Op& op : tp.rp->ops) {
        int64_t peer = -1;
        if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) peer = peer_of(r, tp, op);
        TimelineEvent e = op_event(prog_, op, r, peer, world_, st.start[op.id], st.t[op.id]);
        if (op.kind == OpKind::kCollective) {
          auto it = plan_ids_.find(plan_key(op));
          if (it != plan_ids_.end()) e.args["algorithm"] = to_string(plans_[it->second].plan.algorithm);
        }
        if (opts_.timeline_sink) {
          opts_.timeline_sink(std::move(e));
        } else {
          tl.events.push_back(std::move(e));
        }
      }
    }
    return tl;
  }

  /// A flow's route, group, lifetime and bytes (for the link utilization series).
  struct FlowRecord {
    const FlowRoute* route;
    const std::vector<uint32_t>* mirrored;  // mirror_links() of the flow, or nullptr
    uint32_t group;
    double start_s, end_s, bytes;
  };

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
  std::map<std::tuple<int, int, int64_t>, uint32_t> plan_ids_;  // plan_key -> plans_ index
  std::array<std::vector<std::vector<int64_t>>, kNumGroupKinds> group_members_;
  std::vector<FlowGroup> groups_;
  std::vector<uint32_t> free_groups_;
  std::optional<FlowNetwork> net_;
  std::vector<FlowRecord> flow_records_;
  std::vector<double> link_bytes_;  // by FlowNetwork::links() index
  int64_t ops_ = 0, flows_ = 0, timers_ = 0;
  int64_t ops_total_ = 0;  // ops of the replayed ranks (ReplayProgress::ops_total)
  std::chrono::steady_clock::time_point wall0_, last_progress_;
};

}  // namespace

SimulationResult simulate_program(const Program& prog, const TopologySpec& topo,
                                  const CostModel& costs, const SimulationOptions& opts) {
  // The timing layer first: its checks (what-if factors) and the cost model's errors come
  // before a SimGrid engine exists.
  using Clock = std::chrono::steady_clock;
  const auto wall0 = Clock::now();
  ComputeScaling compute{opts.gpu_speed_scale, opts.straggler, {}};
  if (opts.straggler && opts.straggler_tp_group && opts.straggler->rank >= 0 &&
      opts.straggler->rank < prog.layout.world_size()) {
    compute.straggler_peers = prog.layout.group(GroupKind::kTp, opts.straggler->rank);
    std::sort(compute.straggler_peers.begin(), compute.straggler_peers.end());
  }
  const TimedProgram timed(prog, costs, topo.gpu, std::move(compute));
  const auto wall1 = Clock::now();
  static bool used = false;
  if (used) throw Error("simulate: SimGrid runs one simulation per process");
  used = true;
  int argc = 2;
  char arg0[] = "traintwin";
  char arg1[] = "--log=root.thresh:critical";
  char* argv[] = {arg0, arg1, nullptr};
  simgrid::s4u::Engine engine(&argc, argv);
  auto platform = Platform::build(engine, topo, prog.layout.world_size(), opts.scaling);
  // Closed forms (collectives inside a node, algorithm choice) see the scaled tiers.
  const TopologySpec scaled = scaled_topology(topo, opts.scaling);
  const auto wall2 = Clock::now();
  Engine eng(timed, scaled, opts, *platform);
  SimulationResult res = eng.run();
  res.wall_phases_s.insert(res.wall_phases_s.begin(),
                           {{"timing", std::chrono::duration<double>(wall1 - wall0).count()},
                            {"platform", std::chrono::duration<double>(wall2 - wall1).count()}});
  return res;
}

SimulationResult simulate(const Scenario& s, const TopologySpec& topo, const CostModel& costs,
                          const SimulationOptions& opts) {
  check_gpu_supports(topo, s.training);
  const ParallelConfig& p = s.parallel;
  const RankLayout layout = layout_of(s);
  std::vector<int64_t> reps;
  for (int64_t pp = 0; pp < p.pipeline_model_parallel_size; ++pp) reps.push_back(layout.rank({0, 0, 0, pp}));
  check_what_if(s, topo, opts.aggregate_tp);
  const auto wall0 = std::chrono::steady_clock::now();
  const Program prog = build_program(s, reps);
  const double lowering_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  SimulationOptions o = with_what_if(opts, s.cluster.what_if);
  if (o.collective_algorithm.empty()) o.collective_algorithm = s.cluster.collective_algorithm;
  SimulationResult res = simulate_program(prog, topo, costs, o);
  res.wall_phases_s.insert(res.wall_phases_s.begin(), {"lowering", lowering_s});
  return res;
}

}  // namespace traintwin
