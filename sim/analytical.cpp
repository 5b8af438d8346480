// The step-level analytical estimator and its EstimateCache; the model and its assumptions are in
// sim/analytical.hpp.
#include "sim/analytical.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "core/error.hpp"
#include "core/fsdp_gather_once.hpp"
#include "core/pipeline_scatter_gather.hpp"
#include "core/pipeline_split.hpp"
#include "core/rank_layout.hpp"
#include "core/schedule.hpp"
#include "sim/analytical_plan.hpp"
#include "sim/attribution.hpp"
#include "sim/matching.hpp"
#include "sim/timed_program.hpp"
#include "sim/zb_v_order.hpp"

namespace traintwin {

namespace analytical_plan {

/// EstimateCache's key of a pipeline plan: kind, PP, micro-batches, VPP, and what ZB-V's
/// cost-aware order is made of (sim/zb_v_order.hpp: the pass costs f, b, w, comm in us and the
/// memory model's hidden size, attention heads and sequence length; zeros for other kinds).
using PlanKey = std::tuple<int, int64_t, int64_t, int64_t, std::array<double, 7>>;

/// EstimateCache's key of a collective's uncontended time.
struct CollectiveTimeKey {
  int collective;
  int64_t bytes;
  std::vector<int64_t> members;
  std::string algorithm;
  double nvlink_bandwidth, ib_bandwidth;  // the what-if factors of the scaled topology
  bool operator<(const CollectiveTimeKey& o) const {
    return std::tie(collective, bytes, nvlink_bandwidth, ib_bandwidth, algorithm, members) <
           std::tie(o.collective, o.bytes, o.nvlink_bandwidth, o.ib_bandwidth, o.algorithm,
                    o.members);
  }
};

/// EstimateCache's key of a p2p transfer's uncontended time: source and destination rank, bytes,
/// the what-if NVLink and IB factors.
using TransferKey = std::tuple<int64_t, int64_t, double, double, double>;

}  // namespace analytical_plan

struct EstimateCache::Impl {
  static constexpr size_t kPlans = 16;           ///< pipeline plans kept (the most recent)
  static constexpr size_t kCollectives = 4096;   ///< entries before the maps are emptied
  std::mutex mutex;
  const TopologySpec* topo = nullptr;  ///< what the cache serves (by address)
  const FabricEfficiency* eff = nullptr;
  std::vector<std::pair<analytical_plan::PlanKey,
                        std::shared_ptr<const analytical_plan::PipelinePlan>>>
      plans;  ///< oldest first
  std::map<analytical_plan::CollectiveTimeKey, double> collectives;
  std::map<analytical_plan::TransferKey, double> transfers;

  /// Checks that the cache serves `t` and `e` (binds it to them on first use).
  void bind(const TopologySpec& t, const FabricEfficiency& e) {
    const std::lock_guard<std::mutex> lock(mutex);
    if (topo == nullptr) {
      topo = &t;
      eff = &e;
    }
    if (topo != &t || eff != &e) {
      throw InvalidArgument("estimate: an EstimateCache serves one topology and one "
                            "FabricEfficiency; this call gives others");
    }
  }

  /// The plan of `key`, made once by `make`.
  std::shared_ptr<const analytical_plan::PipelinePlan> plan(
      const analytical_plan::PlanKey& key,
      const std::function<analytical_plan::PipelinePlan()>& make) {
    {
      const std::lock_guard<std::mutex> lock(mutex);
      for (const auto& [k, p] : plans) {
        if (k == key) return p;
      }
    }
    auto made = std::make_shared<const analytical_plan::PipelinePlan>(make());
    const std::lock_guard<std::mutex> lock(mutex);
    if (plans.size() >= kPlans) plans.erase(plans.begin());
    plans.emplace_back(key, made);
    return made;
  }
};

EstimateCache::EstimateCache() : impl_(std::make_unique<Impl>()) {}
EstimateCache::~EstimateCache() = default;

namespace {

using analytical_plan::Item;
using analytical_plan::P2PRef;
using analytical_plan::StagePlan;


constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();
constexpr double kUnposted = -1.0;

/// Which schedule step an op of the probe belongs to.
struct StepKey {
  Pass pass;
  int64_t micro_batch;
  int64_t model_chunk;
  bool operator<(const StepKey& o) const {
    return std::tie(pass, micro_batch, model_chunk) <
           std::tie(o.pass, o.micro_batch, o.model_chunk);
  }
  bool operator==(const StepKey&) const = default;
};

/// One (pass, micro-batch, chunk) of a probe rank, run as a local dataflow.
struct Instance {
  StepKey key;
  std::vector<uint32_t> ops;  ///< step ops, ascending ids
  double compute_end_s = 0;   ///< end of its last compute op (p2p batches post then)
  double all_end_s = 0;       ///< end of its last op (pending TP waits included)
  TimeBreakdown b;           ///< of the step alone (gaps inside it attributed, but the first)
  WaitedFor last_wait;       ///< what ends at all_end_s (the next step waits for it)
  double first_ready_s = 0;  ///< when its first compute op is ready (> 0: it waits in the step)
  WaitedFor first_wait;      ///< what that op waited for, when first_ready_s > 0
  /// Dependencies on ops outside the steps (parameter all-gathers): (op, start offset of the
  /// op that waits).
  std::vector<std::pair<uint32_t, double>> external;
  // The DP-stream queue (ZeRO-2/3, Estimator::queue_dp_): the step's ops on Stream::kDpComm, its
  // FSDP parameter all-gathers and the gradient reduce-scatters its backward triggers.
  bool has_dp = false;       ///< it issues DP-stream ops
  bool has_replica = false;  ///< among them an HSDP replica all-reduce (last micro-batch only)
  /// Ready offset of its first DP-stream op when the stream is free: while the stream frees
  /// up no later than this, the step runs as timed here.
  double dp_first_ready_s = std::numeric_limits<double>::infinity();
  double dp_end_s = 0;  ///< end offset of its last DP-stream op
  /// Its first DP-stream op waits for nothing in the step (only for the previous compute op,
  /// the recvs the step waits for and the stream), so it can start before the step.
  bool dp_first_free = false;
  /// kNone: the ops are this instance's own. Else the instance whose ops these are, less its
  /// FSDP unit all-gathers (StageTemplate::unit_gather): a chunk's later forwards when its units
  /// stay gathered for the step (core/fsdp_gather_once.hpp), made from its first forward; or
  /// less its gradient reduce-scatters: a chunk's earlier backwards when its gradients are
  /// reduce-scattered once per step, made from its last backward.
  uint32_t ops_of = std::numeric_limits<uint32_t>::max();
};

/// One run of a step's ops (the template's, or a step whose DP-stream ops queue behind earlier
/// ones), offsets from the step's start in seconds.
struct StepRun {
  double compute_end_s = 0;  ///< end of its last compute op
  double all_end_s = 0;      ///< end of its last op outside the DP stream
  double dp_end_s = 0;       ///< end of its last DP-stream op (0 when none)
  /// Its compute and the gaps between its compute ops attributed (not the gap before the
  /// first, which run_step attributes with the wait before the step).
  TimeBreakdown b;
  WaitedFor last_wait;       ///< what ends at all_end_s
  double first_ready_s = 0;  ///< when its first compute op is ready
  WaitedFor first_wait;      ///< what that op waited for last (an op of the step), if > 0
};

/// A step's run when its DP stream frees up late, as a function of that time D (offset from
/// the step's start). The step is a max-plus system: an op's end is max(a, D + b), a its end
/// with the stream free (the template), b its longest path from the stream's availability
/// (-infinity when the queue does not reach it). Past D* = max(a - b) over the ops the queue
/// reaches, each of those ends at D + b and the others at a, so one run at some D_ref > D*
/// gives every other by a shift: the reached ops move by D - D_ref, as does the one gap
/// between compute ops that opens up (before the first compute op the queue reaches).
struct Saturation {
  bool known = false;  ///< d_star and reach computed
  double d_star = 0;
  std::vector<uint8_t> reach;  ///< by position in the step's ops: the queue reaches it
  bool have_ref = false;       ///< a run at d_ref > d_star is kept
  double d_ref = 0;
  StepRun ref;
  std::vector<double> ref_end;  ///< by position: ends at d_ref
  bool first_reached = false;   ///< the first compute op is reached
  bool last_reached = false;    ///< the last compute op is reached
  TimeBreakdown gap_unit;       ///< the category of the gap that grows with D (zero: none)
  double unreached_end = -std::numeric_limits<double>::infinity();  ///< non-DP ops, not reached
  WaitedFor unreached_wait;
  double reached_end = -std::numeric_limits<double>::infinity();  ///< non-DP ops, reached, at d_ref
  WaitedFor reached_wait;
};

/// A probe rank's Program split into steps and the rest.
struct StageTemplate {
  const RankProgram* rp = nullptr;
  std::vector<uint32_t> inst_of;   ///< op -> instance index, kNone for non-step ops
  std::vector<double> local_end;   ///< step ops: end offset in their instance
  std::vector<Instance> insts;
  std::map<StepKey, uint32_t> by_key;
  std::vector<uint32_t> typical;  ///< pass x v + chunk -> an instance of that pass and chunk
  std::vector<double> op_s;       ///< compute and collective ops: duration
  /// Per chunk: instance or kNone. last_bwd is the step that triggers the chunk's DP buckets:
  /// its last backward, or its last W under a schedule that splits the backward.
  std::vector<uint32_t> first_fwd, last_bwd;
  std::vector<uint32_t> nonstep;   ///< non-step, non-p2p ops, ascending
  /// Per op: it runs on Stream::kDpComm (the DP stream queue).
  std::vector<uint8_t> on_dp;
  /// Per op: a ZeRO-3 FSDP unit's parameter all-gather inside a step (core/rank_lowering.cpp
  /// issue_fsdp_gather).
  std::vector<uint8_t> unit_gather;
  /// Per instance x 2 (+1: not its chunk's last backward, replica all-reduces left out): the
  /// shortcut of its queued runs, made when first needed.
  std::vector<Saturation> saturation;
  uint32_t first_step_op = kNone;  ///< smallest id of a step or p2p op
  std::vector<int64_t> seq;        ///< collective_sequence(rp)
};

class Estimator {
 public:
  /// `scaling`: the what-if bandwidth factors `topo` is scaled by (the cache's keys);
  /// `cache`: null, or one bound to the unscaled topology and `eff`.
  Estimator(const Scenario& s, const TopologySpec& topo, const CostModel& costs,
            const FabricEfficiency& eff, ComputeScaling compute, StepScope probe_steps,
            const PlatformScaling& scaling, EstimateCache::Impl* cache)
      : s_(s), topo_(topo), costs_(costs), eff_(eff), compute_(std::move(compute)),
        probe_steps_(probe_steps), scaling_(scaling), cache_(cache) {}

  IterationMetrics run() {
    probe();
    // ZB-V runs the authors' cost-aware order (sim/zb_v_order.hpp), made from the costs a probe
    // of StepScope::kBoundary times (also when this one lowers more: the same order either way).
    std::optional<ZbVPassCosts> zbv;
    if (kind_ == PipelineScheduleKind::kZbV) {
      zbv = probe_steps_ == StepScope::kBoundary
                ? pass_costs()
                : Estimator(s_, topo_, costs_, eff_, compute_, StepScope::kBoundary, scaling_,
                            cache_)
                      .profiled_costs();
    }
    const auto make = [&] {
      if (!zbv) return analytical_plan::make_pipeline_plan(kind_, p_, m_, v_);
      const PipelineOrder order = zb_v_order(s_, *zbv);
      return analytical_plan::make_pipeline_plan(kind_, p_, m_, v_, &order);
    };
    if (cache_ != nullptr) {
      std::array<double, 7> order_inputs{};
      if (zbv) {
        order_inputs = {zbv->f,
                        zbv->b,
                        zbv->w,
                        zbv->comm,
                        static_cast<double>(s_.model.hidden_size),
                        static_cast<double>(s_.model.num_attention_heads),
                        static_cast<double>(s_.model.seq_length)};
      }
      plan_ = cache_->plan({static_cast<int>(kind_), p_, m_, v_, order_inputs}, make);
    } else {
      plan_ = std::make_shared<const analytical_plan::PipelinePlan>(make());
    }
    for (int64_t r = 0; r < p_; ++r) prepare_stage(r);
    run_steps();
    run_tails();
    finish();
    return result_;
  }

  /// The probe's ZB-V pass costs (zb_v_profiled_costs, sim/zb_v_order.hpp).
  ZbVPassCosts profiled_costs() {
    probe();
    return pass_costs();
  }

 private:
  /// Step 2 of the file comment and what step 3 needs of the probe (its stages' ranks).
  void probe() {
    const ParallelConfig& pc = s_.parallel;
    p_ = pc.pipeline_model_parallel_size;
    v_ = pc.virtual_pipeline_model_parallel_size;
    async_sends_ = splits_backward(pc.pipeline_schedule);
    queue_dp_ = s_.training.zero_stage() >= 2;
    kind_ = pc.pipeline_schedule;
    m_ = s_.num_micro_batches();
    // The probe: the fewest micro-batches the schedule allows (ZB-V, DualPipeV: 2p, their warm-ups' forwards;
    // interleaved 1F1B: p; else 1), one rank per kind of stage.
    Scenario probe = s_;
    const int64_t fewest = v_shaped(kind_) ? 2 * p_ : v_ > 1 ? p_ : 1;
    const int64_t m_probe = std::min<int64_t>(m_, fewest);
    probe.training.global_batch_size =
        m_probe * s_.training.micro_batch_size * pc.data_parallel_size;
    const RankLayout layout = layout_of(s_);
    // One template per kind of stage (stage_kinds): the probe lowers the first stage of each.
    const std::vector<int64_t> kinds = stage_kinds(layout);
    std::vector<int64_t> reps;
    for (int64_t k : kinds) reps.push_back(layout.rank({0, 0, 0, k}));
    for (size_t i = 0; i < reps.size(); ++i) {
      rep_node_group_[reps[i]] = node_group_of_stage_[static_cast<size_t>(kinds[i])];
    }
    prog_ = build_program(probe, reps, probe_steps_);
    if (topo_.node_groups.empty()) {
      timed_.emplace(*prog_, costs_, topo_.gpu, compute_);
    } else {
      // A mixed job: every rank timed on its own GPU (the replay's timing, sim/replay.cpp).
      timed_.emplace(*prog_, costs_, job_gpus(topo_, s_.cluster.num_gpus), compute_);
    }
    for (size_t i = 0; i < kinds.size(); ++i) {
      tmpl_.push_back(make_template(prog_->ranks.at(reps[i])));
      result_.ops += static_cast<int64_t>(prog_->ranks.at(reps[i]).ops.size());
    }
    stage_rank_.resize(static_cast<size_t>(p_));
    for (int64_t r = 0; r < p_; ++r) stage_rank_[static_cast<size_t>(r)] = prog_->layout.rank({0, 0, 0, r});
    stages_.resize(static_cast<size_t>(p_));
    p2p_s_.assign(static_cast<size_t>(p_ * p_), -1.0);
  }

  /// What the authors' runtime gives ZB-V's scheduler (zb_v_profiled_costs): per pass, each
  /// stage's step duration averaged over its two chunks, in whole us, then the upper median over
  /// the stages (at least 1 us); comm the upper median of the uncontended transfers r -> r + 1.
  ZbVPassCosts pass_costs() {
    std::array<std::vector<double>, 3> per_stage;  // F, B, W
    for (int64_t r = 0; r < p_; ++r) {
      const StageTemplate& t = tmpl_[template_of(r)];
      for (size_t pass = 0; pass < 3; ++pass) {
        double sum_s = 0;
        for (int64_t c = 0; c < v_; ++c) {
          const uint32_t inst = t.typical[pass * static_cast<size_t>(v_) + static_cast<size_t>(c)];
          if (inst != kNone) sum_s += t.insts[inst].all_end_s;  // none: a step without ops
        }
        per_stage[pass].push_back(std::trunc(sum_s / static_cast<double>(v_) * 1e6));
      }
    }
    const auto mid = [](std::vector<double> a) {
      std::sort(a.begin(), a.end());
      return std::max(a[a.size() / 2], 1.0);
    };
    ZbVPassCosts c{mid(per_stage[0]), mid(per_stage[1]), mid(per_stage[2]), 0};
    if (p_ > 1) {
      std::vector<double> comm;
      for (int64_t r = 0; r + 1 < p_; ++r) comm.push_back(std::trunc(transfer_s(r, r + 1) * 1e6));
      std::sort(comm.begin(), comm.end());
      c.comm = comm[comm.size() / 2];
    }
    return c;
  }

  // ---- kinds of stage ---------------------------------------------------------------------------

  /// What makes two pipeline stages lower and time alike: being the first or the last stage
  /// (embedding, loss, the p2p ends), the order its schedule runs its chunks in (DualPipe's
  /// second half starts with chunk 1 and ends with chunk 1's W, so its DP buckets queue in the
  /// other order: runs_chunks_reversed), the transformer layers of each model chunk (with the MoE
  /// pattern of those layers) and the node group its ranks run in (GPU, NVLink, NICs).
  struct StageSignature {
    bool first = false, last = false;
    bool chunks_reversed = false;
    std::vector<int64_t> layers;  ///< per chunk: its count, then its MoE pattern bits
    size_t node_group = 0;
    bool operator==(const StageSignature&) const = default;
  };

  /// The first stage of each kind of stage, ascending, and template_of_stage_ (stage -> index
  /// into them). An even split on one kind of node has at most three kinds (first, middle,
  /// last; DualPipe four: its middle stages of each half); an uneven split
  /// (core/pipeline_split.hpp) or a mixed cluster more. Also fills
  /// node_group_of_stage_. Throws UnsupportedError for a stage whose ranks lie in several node
  /// groups (its ranks would not run in lockstep).
  std::vector<int64_t> stage_kinds(const RankLayout& layout) {
    node_group_of_stage_.assign(static_cast<size_t>(p_), 0);
    if (!topo_.node_groups.empty()) {
      std::vector<int64_t> first_rank(static_cast<size_t>(p_), -1);
      for (int64_t rank = 0; rank < s_.cluster.num_gpus; ++rank) {
        const auto st = static_cast<size_t>(layout.coord(rank).pp);
        const size_t g = node_group_index(topo_, place_rank(topo_, rank).node);
        if (first_rank[st] < 0) {
          first_rank[st] = rank;
          node_group_of_stage_[st] = g;
        } else if (node_group_of_stage_[st] != g) {
          throw UnsupportedError(
              "analytical estimate: pipeline stage " + std::to_string(st) + " of this job has "
              "ranks on nodes of two node groups of topology " + topo_.name + " (rank " +
              std::to_string(first_rank[st]) + " on node " +
              std::to_string(place_rank(topo_, first_rank[st]).node) + ", rank " +
              std::to_string(rank) + " on node " + std::to_string(place_rank(topo_, rank).node) +
              "); the estimator times one rank per stage, so each stage must sit in one node "
              "group: choose PP so that the stage boundaries fall on the groups' boundaries, or "
              "use the replay (simulate, or sweep --mode simulate)");
        }
      }
    }
    const std::vector<ChunkLayers> split = pipeline_layer_split(s_.model, s_.parallel);
    std::vector<StageSignature> seen;
    std::vector<int64_t> kinds;
    template_of_stage_.assign(static_cast<size_t>(p_), 0);
    for (int64_t r = 0; r < p_; ++r) {
      StageSignature sig;
      sig.first = r == 0;
      sig.last = r == p_ - 1;
      sig.chunks_reversed = runs_chunks_reversed(kind_, p_, r);
      sig.node_group = node_group_of_stage_[static_cast<size_t>(r)];
      for (int64_t c = 0; c < v_; ++c) {
        const ChunkLayers& cl = split.at(static_cast<size_t>(c * p_ + r));
        sig.layers.push_back(cl.num_layers);
        if (!s_.model.moe_layer_pattern.empty()) {
          for (int64_t l = cl.first_layer; l < cl.end_layer(); ++l) {
            sig.layers.push_back(s_.model.is_moe_layer(l) ? 1 : 0);
          }
        }
      }
      const auto it = std::find(seen.begin(), seen.end(), sig);
      if (it != seen.end()) {
        template_of_stage_[static_cast<size_t>(r)] = static_cast<uint32_t>(it - seen.begin());
        continue;
      }
      template_of_stage_[static_cast<size_t>(r)] = static_cast<uint32_t>(seen.size());
      seen.push_back(std::move(sig));
      kinds.push_back(r);
    }
    return kinds;
  }

  // ---- costs ----------------------------------------------------------------------------------

  /// No-contention time of a collective of `rank`'s group (a probe rank; cached per node group
  /// of its stage, group kind, kind, bytes: Megatron layouts are uniform inside a node group; per
  /// group for DualPipe's mirror pairs).
  double collective_s(const Op& op, int64_t rank) {
    // (DualPipe's mirror pairs {r, p - 1 - r} are not uniform: stages far apart or adjacent,
    // so their time is kept per group.)
    const int64_t which =
        op.group == GroupKind::kPpMirror ? prog_->layout.group_index(op.group, rank) : -1;
    const auto key = std::make_tuple(rep_node_group_.at(rank), static_cast<int>(op.group),
                                     static_cast<int>(op.collective), op.bytes, which);
    auto it = coll_s_.find(key);
    if (it != coll_s_.end()) return it->second;
    std::vector<int64_t> members = prog_->layout.group(op.group, rank);
    auto time = [&] {
      const CollectivePlan plan = plan_collective(op.collective, op.bytes, members, topo_, eff_,
                                                  s_.cluster.collective_algorithm);
      return uncontended_time_s(plan, topo_);
    };
    double t = 0;
    if (cache_ != nullptr) {
      analytical_plan::CollectiveTimeKey k{static_cast<int>(op.collective), op.bytes,
                                           std::move(members), s_.cluster.collective_algorithm,
                                           scaling_.nvlink_bandwidth, scaling_.ib_bandwidth};
      std::unique_lock<std::mutex> lock(cache_->mutex);
      const auto hit = cache_->collectives.find(k);
      if (hit != cache_->collectives.end()) {
        t = hit->second;
      } else {
        lock.unlock();
        members = k.members;
        t = time();
        lock.lock();
        if (cache_->collectives.size() >= EstimateCache::Impl::kCollectives) {
          cache_->collectives.clear();
        }
        cache_->collectives.emplace(std::move(k), t);
      }
    } else {
      t = time();
    }
    coll_s_.emplace(key, t);
    return t;
  }

  /// Number of pipeline stages a group of kind `g` spans (Megatron's groups: TP, CP, DP inside a
  /// stage, and the expert groups EP, ETP, expert-DP and ETP x EP; the embedding group the first
  /// and last stage, DualPipe's mirror group stages r and p - 1 - r; PP, model-parallel and world
  /// all).
  int64_t group_stages(GroupKind g) const {
    switch (g) {
      case GroupKind::kTp:
      case GroupKind::kCp:
      case GroupKind::kDp:
      case GroupKind::kDpCp:
      case GroupKind::kDpShard:
      case GroupKind::kDpReplica:
      case GroupKind::kTpDpCp:
      case GroupKind::kEp:
      case GroupKind::kEtp:
      case GroupKind::kEdp:
      case GroupKind::kEtpEp: return 1;
      case GroupKind::kEmbedding:
      case GroupKind::kPpMirror: return std::min<int64_t>(p_, 2);
      case GroupKind::kPp:
      case GroupKind::kModelParallel:
      case GroupKind::kWorld: return p_;
    }
    return p_;
  }

  static bool in_step(const Op& op) {
    return op.micro_batch >= 0 &&
           (op.kind == OpKind::kCompute || op.kind == OpKind::kCollective ||
            op.kind == OpKind::kHost) &&
           (op.phase == Phase::kForward || op.phase == Phase::kBackward ||
            op.phase == Phase::kRecompute || op.phase == Phase::kWeightGrad);
  }

  static Pass pass_of(Phase phase) {
    if (phase == Phase::kForward) return Pass::kForward;
    return phase == Phase::kWeightGrad ? Pass::kWeightGrad : Pass::kBackward;
  }

  /// The pass whose last step of a chunk triggers its DP buckets.
  Pass trigger_pass() const {
    return splits_backward(s_.parallel.pipeline_schedule) ? Pass::kWeightGrad : Pass::kBackward;
  }

  // ---- step 2: the probe's steps as local dataflows -------------------------------------------

  StageTemplate make_template(const RankProgram& rp) {
    StageTemplate t;
    t.rp = &rp;
    const size_t n = rp.ops.size();
    t.inst_of.assign(n, kNone);
    t.local_end.assign(n, 0.0);
    t.first_fwd.assign(static_cast<size_t>(v_), kNone);
    t.typical.assign(static_cast<size_t>(3 * v_), kNone);
    t.op_s.assign(n, 0.0);
    t.last_bwd.assign(static_cast<size_t>(v_), kNone);
    t.seq = collective_sequence(rp);
    t.on_dp.assign(n, 0);
    t.unit_gather.assign(n, 0);
    // On its own GPU (a mixed job's stages differ).
    const std::vector<double>& compute = timed_->durations(rp.rank, timed_->gpu_type(rp.rank));
    uint32_t last_inst = kNone;  // the instance of the last step op
    for (const Op& op : rp.ops) {
      // (Host ops: their host-link or host-CPU time, from the timing layer too.)
      if (op.kind == OpKind::kCompute || op.kind == OpKind::kHost) t.op_s[op.id] = compute[op.id];
      if (op.kind == OpKind::kCollective) t.op_s[op.id] = collective_s(op, rp.rank);
      t.on_dp[op.id] = op.stream == Stream::kDpComm;
      t.unit_gather[op.id] = in_step(op) && op.kind == OpKind::kCollective &&
                             op.collective == CollectiveKind::kAllGather &&
                             op.role == Role::kParamBucket;
      if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) {
        t.first_step_op = std::min(t.first_step_op, op.id);
        continue;
      }
      if (!in_step(op)) {
        // ZeRO-2/3: a gradient reduce-scatter (and HSDP's replica all-reduce) issued after a
        // backward compute op of a step belongs to that step's DP stream: every micro-batch
        // issues it, and the later gathers and reduce-scatters queue behind it.
        const uint32_t owner = queue_dp_ && t.on_dp[op.id] ? owner_step(t, op) : kNone;
        if (owner == kNone) {
          t.nonstep.push_back(op.id);
          continue;
        }
        t.inst_of[op.id] = owner;
        t.insts[owner].ops.push_back(op.id);
        continue;
      }
      t.first_step_op = std::min(t.first_step_op, op.id);
      const StepKey key{pass_of(op.phase), op.micro_batch, op.model_chunk};
      if (last_inst == kNone || !(key == t.insts[last_inst].key)) {
        // (A step's ops mostly follow one another: the map only when the step changes.)
        auto [it, inserted] = t.by_key.try_emplace(key, static_cast<uint32_t>(t.insts.size()));
        if (inserted) {
          t.insts.emplace_back();
          t.insts.back().key = key;
          uint32_t& typ = t.typical[static_cast<size_t>(static_cast<int64_t>(key.pass) * v_ + key.model_chunk)];
          if (typ == kNone) typ = it->second;
        }
        last_inst = it->second;
      }
      t.inst_of[op.id] = last_inst;
      t.insts[last_inst].ops.push_back(op.id);
    }
    for (const ScheduleStep& st : rp.schedule) {
      auto it = t.by_key.find({st.pass, st.micro_batch, st.model_chunk});
      if (it == t.by_key.end()) continue;
      const auto c = static_cast<size_t>(st.model_chunk);
      if (st.pass == Pass::kForward && t.first_fwd[c] == kNone) t.first_fwd[c] = it->second;
      if (st.pass == trigger_pass()) t.last_bwd[c] = it->second;
    }
    for (uint32_t i = 0; i < t.insts.size(); ++i) run_instance(t, i);
    if (fsdp_units_gathered_once_per_step(s_)) {
      // The chunk's units stay gathered after its first forward: its later forwards are that
      // step without the gathers (the Program's: core/rank_lowering.cpp lower_step), whichever
      // steps the probe lowered.
      for (int64_t c = 0; c < v_; ++c) {
        const uint32_t first = t.first_fwd[static_cast<size_t>(c)];
        if (first == kNone) continue;
        add_typical_without(t, first, static_cast<int64_t>(Pass::kForward), c,
                            [&](uint32_t id) { return t.unit_gather[id] != 0; });
      }
    }
    if (fsdp_grads_reduced_once_per_step(s_)) {
      // Only the chunk's last backward (W) reduce-scatters its gradients: where the probe
      // lowered no earlier one, the earlier ones are that step without its gradient buckets'
      // reduce-scatters and HSDP all-reduces (core/rank_lowering.hpp reduces_every_micro_batch).
      const auto pass = static_cast<int64_t>(trigger_pass());
      for (int64_t c = 0; c < v_; ++c) {
        const uint32_t last = t.last_bwd[static_cast<size_t>(c)];
        if (last == kNone || t.typical[static_cast<size_t>(pass * v_ + c)] != last) continue;
        add_typical_without(t, last, pass, c, [&](uint32_t id) {
          return t.on_dp[id] && t.rp->ops[id].role == Role::kGradBucket;
        });
      }
    }
    return t;
  }

  /// Adds the instance of step `of`'s ops less those `drop(id)` selects (Instance::ops_of = of)
  /// as the typical step of (`pass`, `chunk`) and runs it: a step the Program lowers as `of`
  /// without some of its collectives (core/fsdp_gather_once.hpp).
  template <class Drop>
  void add_typical_without(StageTemplate& t, uint32_t of, int64_t pass, int64_t chunk, Drop drop) {
    Instance in;
    in.key = t.insts[of].key;
    in.ops_of = of;
    for (uint32_t id : t.insts[of].ops) {
      if (!drop(id)) in.ops.push_back(id);
    }
    const auto idx = static_cast<uint32_t>(t.insts.size());
    t.insts.push_back(std::move(in));
    t.typical[static_cast<size_t>(pass * v_ + chunk)] = idx;
    run_instance(t, idx);
  }

  /// The step that owns DP-stream op `op` outside the steps (ZeRO-2/3's reduce-scatter): the
  /// step of the compute op it follows, or kNone.
  static uint32_t owner_step(const StageTemplate& t, const Op& op) {
    for (uint32_t d : op.deps) {
      if (t.inst_of[d] != kNone && t.rp->ops[d].kind == OpKind::kCompute) return t.inst_of[d];
    }
    return kNone;
  }

  /// Times the template's step `idx` (with the DP stream free when it starts, every op of it
  /// issued) and records its external waits and its DP-stream ops.
  void run_instance(StageTemplate& t, uint32_t idx) {
    Instance& in = t.insts[idx];
    StepRun run;
    // (An instance of another's ops keeps that one's ends: its own go to scratch.)
    std::vector<double> scratch;
    if (in.ops_of != kNone) scratch.assign(t.local_end.size(), 0.0);
    std::vector<double>& ends = in.ops_of != kNone ? scratch : t.local_end;
    run_ops(t, idx, 0.0, /*last=*/true, ends, run, &in.external);
    in.compute_end_s = run.compute_end_s;
    in.all_end_s = run.all_end_s;
    in.b = run.b;
    in.last_wait = run.last_wait;
    in.dp_end_s = run.dp_end_s;
    in.first_ready_s = run.first_ready_s;
    in.first_wait = run.first_wait;
    for (uint32_t id : in.ops) {
      if (!t.on_dp[id]) continue;
      if (!in.has_dp) {
        in.dp_first_ready_s = ends[id] - t.op_s[id];
        in.has_dp = true;
        in.dp_first_free = true;
        for (uint32_t d : t.rp->ops[id].deps) in.dp_first_free = in.dp_first_free && t.inst_of[d] != idx;
      }
      in.has_replica = in.has_replica || t.rp->ops[id].group == GroupKind::kDpReplica;
    }
  }

  /// Runs step `idx`'s ops as a local dataflow (dependencies outside the step ignored) with the
  /// DP stream free from `dp_free_s` on (offset from the step's start, seconds; its ops run in
  /// issue order, FIFO as the Program chains them). `last`: the step is its chunk's last
  /// backward (or W), which alone issues the HSDP replica all-reduces (a template step other
  /// than that leaves them out). Ends into `end` (by op id, offsets), the rest into `run`;
  /// `external`: null, or where the waits on ops outside the steps are recorded (the template).
  /// `origin`: when the ops that wait for nothing in the step are ready (0: the step's start;
  /// -infinity: only the queue starts anything, Saturation's b).
  void run_ops(const StageTemplate& t, uint32_t idx, double dp_free_s, bool last,
               std::vector<double>& end, StepRun& run,
               std::vector<std::pair<uint32_t, double>>* external, double origin = 0) const {
    const Instance& in = t.insts[idx];
    const RankProgram& rp = *t.rp;
    // The instance whose ops these are (Instance::ops_of), and whether its unit gathers are left
    // out (their dependents do not wait for them).
    const bool gathered = in.ops_of != kNone;
    const uint32_t own = gathered ? in.ops_of : idx;
    double prev_end = 0;
    bool first_compute = true;
    for (uint32_t id : in.ops) {
      const Op& op = rp.ops[id];
      if (!last && op.group == GroupKind::kDpReplica && t.on_dp[id]) {
        end[id] = origin;  // not issued by this micro-batch (dp_free_s keeps the stream's order)
        continue;
      }
      // A DP-stream op waits for the stream (dp_free_s) and its dependencies in the step only.
      double ready = t.on_dp[id] ? -std::numeric_limits<double>::infinity() : origin;
      uint32_t waited = kNone;
      double latest = -1;
      for (uint32_t d : op.deps) {
        if (t.inst_of[d] != own || (gathered && t.unit_gather[d])) {
          const Op& dop = rp.ops[d];
          // (A DP-stream op after one outside the step: the stream order, dp_free_s.)
          if (external != nullptr && t.inst_of[d] == kNone && dop.kind == OpKind::kCollective &&
              !(t.on_dp[id] && t.on_dp[d])) {
            external->emplace_back(d, -1.0);
          }
          continue;
        }
        const double e = end[d];
        ready = std::max(ready, e);
        if (e > latest) {
          latest = e;
          waited = d;
        }
      }
      // External waits: remember the start offset of the op that waits.
      if (external != nullptr) {
        for (auto& x : *external) {
          if (x.second < 0) x.second = ready;
        }
      }
      if (t.on_dp[id]) {
        ready = std::max(ready, dp_free_s);
        end[id] = ready + t.op_s[id];
        dp_free_s = end[id];
        run.dp_end_s = end[id];
        continue;
      }
      if (op.kind == OpKind::kCompute) {
        const double dur = t.op_s[id];
        const WaitedFor w = waited == kNone ? WaitedFor{} : waited_for(rp.ops[waited]);
        if (first_compute) {
          run.first_ready_s = ready;
          run.first_wait = w;
          first_compute = false;
        } else {
          attribute_gap(run.b, ready - prev_end, w);
        }
        run.b.compute_s += dur;
        if (op.phase == Phase::kOptimizer) run.b.optimizer_s += dur;
        end[id] = ready + dur;
        prev_end = ready + dur;
        run.compute_end_s = prev_end;
      } else {
        if (group_stages(op.group) > 1) {
          throw Error("analytical estimate: a collective over several pipeline stages inside a "
                      "schedule step (" + prog_->label(op) + ")");
        }
        end[id] = ready + t.op_s[id];
      }
      if (end[id] > run.all_end_s) {
        run.all_end_s = end[id];
        run.last_wait = waited_for(op);
      }
    }
  }

  // ---- step 3: the real schedules as a step-level dataflow ------------------------------------

  struct Stage {
    uint32_t tmpl = 0;
    const StagePlan* plan = nullptr;  ///< its schedule and p2p batches (in plan_)
    std::vector<double> first_fwd_start, last_bwd_start;  ///< per chunk
    std::vector<double> pre_end;   ///< ends of the non-step ops run before the steps
    size_t pos = 0;
    double cend = 0;   ///< end of the last compute op
    double ready = 0;  ///< end of every op the next compute op waits for (pending TP included)
    WaitedFor ready_wait;  ///< the op that ends at `ready`
    std::vector<P2PRef> pending;
    /// Sends no step waits for (a schedule that splits the backward posts them asynchronously,
    /// as core/rank_lowering.cpp's p2p_batch): they end the stage when they end last.
    std::vector<P2PRef> async_sends;
    TimeBreakdown b;
    double final_batch_end = 0;
    double final_batch_transfer_s = 0;  ///< the transfer of the final batch that ends last
    double end = 0;
    // The DP stream queue (queue_dp_).
    double dp_free = 0;  ///< when its last DP-stream op issued so far ends (absolute)
    /// Absolute ends of the ops of the first forward and last backward steps that ran with
    /// their DP-stream ops queued (by op id; the others: their start + the template's offset).
    std::vector<double> queued_end;
    std::vector<uint8_t> first_fwd_queued, last_bwd_queued;  ///< per chunk: ends in queued_end
  };

  int64_t nvs() const { return p_ * v_; }

  uint32_t template_of(int64_t r) const { return template_of_stage_[static_cast<size_t>(r)]; }

  void prepare_stage(int64_t r) {
    Stage& st = stages_[static_cast<size_t>(r)];
    st.tmpl = template_of(r);
    st.plan = &plan_->stages[static_cast<size_t>(r)];
    st.b.rank = stage_rank_[static_cast<size_t>(r)];
    const auto v = static_cast<size_t>(v_);
    st.first_fwd_start.assign(v, 0.0);
    st.last_bwd_start.assign(v, 0.0);
    // Ops before the first step (the zero grad buffer kernel; parameter all-gathers with
    // overlap_param_gather): plain dataflow from time 0, inside the stage. The steps' compute
    // follows the compute ops among them (the compute stream is FIFO).
    const StageTemplate& t = tmpl_[st.tmpl];
    st.pre_end.assign(t.rp->ops.size(), 0.0);
    if (queue_dp_) {
      st.first_fwd_queued.assign(v, 0);
      st.last_bwd_queued.assign(v, 0);
    }
    for (uint32_t id : t.nonstep) {
      if (id >= t.first_step_op) break;
      const Op& op = t.rp->ops[id];
      double ready = 0;
      for (uint32_t d : op.deps) ready = std::max(ready, st.pre_end[d]);
      st.pre_end[id] = ready + t.op_s[id];
      if (t.on_dp[id]) st.dp_free = std::max(st.dp_free, st.pre_end[id]);
      if (op.kind == OpKind::kCompute) {
        attribute_gap(st.b, ready - st.cend, WaitedFor{});
        st.b.compute_s += t.op_s[id];
        if (op.phase == Phase::kOptimizer) st.b.optimizer_s += t.op_s[id];
        st.cend = st.pre_end[id];
        st.ready = std::max(st.ready, st.cend);
      }
    }
  }

  double transfer_s(int64_t src_stage, int64_t dst_stage) {
    double& cached = p2p_s_[static_cast<size_t>(src_stage * p_ + dst_stage)];
    if (cached >= 0) return cached;
    if (p2p_bytes_ < 0) {
      // The Program's own payload (core/program.cpp's rule: CP, SP and the activation dtype
      // included), taken from a send or recv of the probe (the last of the first template that
      // has one).
      double bytes = 0;
      for (const StageTemplate& t : tmpl_) {
        for (const Op& op : t.rp->ops) {
          if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) bytes = static_cast<double>(op.bytes);
        }
        if (bytes > 0) break;
      }
      p2p_bytes_ = bytes;
    }
    const int64_t src = stage_rank_[static_cast<size_t>(src_stage)];
    const int64_t dst = stage_rank_[static_cast<size_t>(dst_stage)];
    double t = 0;
    if (cache_ != nullptr) {
      const analytical_plan::TransferKey key{src, dst, p2p_bytes_, scaling_.nvlink_bandwidth,
                                             scaling_.ib_bandwidth};
      {
        const std::lock_guard<std::mutex> lock(cache_->mutex);
        const auto it = cache_->transfers.find(key);
        if (it != cache_->transfers.end()) return cached = it->second;
      }
      t = uncontended_transfer_s(src, dst, p2p_bytes_, topo_);
      const std::lock_guard<std::mutex> lock(cache_->mutex);
      if (cache_->transfers.size() >= EstimateCache::Impl::kCollectives) cache_->transfers.clear();
      cache_->transfers.emplace(key, t);
    } else {
      t = uncontended_transfer_s(src, dst, p2p_bytes_, topo_);
    }
    cached = t;
    return t;
  }

  /// End of a posted-on-both-sides transfer, or nullopt.
  std::optional<double> transfer_end(const P2PRef& x, int64_t r) {
    const TagState& ts = tags_[x.tag];
    if (ts.send_post < 0 || ts.recv_post < 0) return std::nullopt;
    const int64_t src = x.send ? r : x.peer_stage;
    const int64_t dst = x.send ? x.peer_stage : r;
    return std::max(ts.send_post, ts.recv_post) + transfer_s(src, dst);
  }

  void run_steps() {
    const auto ntags = static_cast<size_t>(m_ * nvs() * 2);
    tags_.assign(ntags, TagState{});
    // Each stage runs until a step waits for a transfer its peer has not posted yet; it then
    // waits on that tag (TagState::waiter) and runs again once the peer posts it. A step's start
    // depends only on its own stage and on the posts it waits for, so the order in which stages
    // run changes nothing.
    std::vector<int64_t> runnable;
    runnable.reserve(static_cast<size_t>(p_));
    for (int64_t r = p_ - 1; r >= 0; --r) runnable.push_back(r);
    size_t done = 0;
    while (!runnable.empty()) {
      const int64_t r = runnable.back();
      runnable.pop_back();
      Stage& st = stages_[static_cast<size_t>(r)];
      const StagePlan& plan = *st.plan;
      while (st.pos < plan.items.size()) {
        const Item& it = plan.items[st.pos];
        if (it.step < 0) {
          for (uint32_t k = it.begin; k < it.end; ++k) {
            const P2PRef& x = plan.refs[k];
            TagState& ts = tags_[x.tag];
            (x.send ? ts.send_post : ts.recv_post) = st.cend;
            (x.send && async_sends_ ? st.async_sends : st.pending).push_back(x);
            if (ts.waiter >= 0) {
              runnable.push_back(ts.waiter);
              ts.waiter = -1;
            }
          }
          ++st.pos;
          continue;
        }
        uint32_t blocked = 0;
        if (!run_step(r, st, it, blocked)) {
          tags_[blocked].waiter = static_cast<int32_t>(r);
          break;
        }
        ++st.pos;
      }
      if (st.pos == plan.items.size() && st.end == 0) {
        st.end = -1;  // marks "steps done"
        ++done;
      }
    }
    if (done != static_cast<size_t>(p_)) {
      throw Error("analytical estimate: the pipeline schedule cannot complete (a p2p transfer "
                  "never matched)");
    }
    for (int64_t r = 0; r < p_; ++r) {
      Stage& st = stages_[static_cast<size_t>(r)];
      st.end = 0;
      st.pending.insert(st.pending.end(), st.async_sends.begin(), st.async_sends.end());
      for (const P2PRef& x : st.pending) {
        const auto e = transfer_end(x, r);
        if (!e) throw Error("analytical estimate: a final p2p transfer never matched");
        if (*e > st.final_batch_end) {
          st.final_batch_end = *e;
          const TagState& ts = tags_[x.tag];
          st.final_batch_transfer_s = *e - std::max(ts.send_post, ts.recv_post);
        }
      }
    }
  }

  /// Runs schedule step `step` (an item of its plan) of stage `r` if its inputs are there; else
  /// false, with the tag of a transfer it waits for in `blocked`.
  bool run_step(int64_t r, Stage& st, const Item& step, uint32_t& blocked) {
    // Wait for every op of the pending batch(es); a W step waits for none (they stay pending
    // for the next F or B step, as core/rank_lowering.cpp's lower_weight_grad holds them).
    const bool weight_grad = step.step_pass() == Pass::kWeightGrad;
    double start = st.ready;
    WaitedFor waited = st.ready > st.cend ? st.ready_wait : WaitedFor{};
    for (const P2PRef& x : st.pending) {
      if (weight_grad) break;
      const auto e = transfer_end(x, r);
      if (!e) {
        blocked = x.tag;
        return false;
      }
      if (*e > start) {
        start = *e;
        const TagState& ts = tags_[x.tag];
        waited = {WaitedFor::Kind::kTransfer, *e - std::max(ts.send_post, ts.recv_post)};
      }
    }
    const StageTemplate& t = tmpl_[st.tmpl];
    const auto c = static_cast<size_t>(step.model_chunk);
    const bool first_fwd = (step.flags & Item::kFirstForward) != 0;
    const bool last_bwd = (step.flags & Item::kLastBackward) != 0;
    uint32_t inst = t.typical[static_cast<size_t>(step.pass) * static_cast<size_t>(v_) + c];
    if (first_fwd && t.first_fwd[c] != kNone) inst = t.first_fwd[c];
    if (last_bwd && t.last_bwd[c] != kNone) inst = t.last_bwd[c];
    if (inst == kNone) {
      // A step without ops (under a split backward, the B of a chunk that holds only the
      // embedding): what it waited for is waited by the next op (core/rank_lowering.cpp's
      // lower_weight_grad keeps that recv for the W); no compute starts, no gap is attributed.
      if (start > st.ready) {
        st.ready = start;
        st.ready_wait = waited;
      }
      if (!weight_grad) st.pending.clear();
      return true;
    }
    const Instance& in = t.insts[inst];
    if (first_fwd) {
      for (const auto& [dep, offset] : in.external) {
        const double need = st.pre_end[dep] - offset;
        if (need > start) {
          start = need;
          waited = waited_for(t.rp->ops[dep]);
        }
      }
    }
    // When the DP stream can start the step's first DP-stream op (offset from the step's start):
    // a first op that waits for nothing in the step waits only for the previous compute op, the
    // recvs of the batches the step waits for (core/rank_lowering.cpp's collective()) and the
    // stream, not for the sends and TP collectives the step itself waits for.
    double d_s = st.dp_free - start;
    if (in.has_dp && in.dp_first_free) {
      double anchor = st.cend;
      if (!weight_grad) {
        for (const P2PRef& x : st.pending) {
          if (x.send) continue;
          if (const auto e = transfer_end(x, r)) anchor = std::max(anchor, *e);
        }
      }
      d_s = std::max(st.dp_free, anchor) - start;
    }
    if (!weight_grad) st.pending.clear();
    if (first_fwd) st.first_fwd_start[c] = start;
    if (last_bwd) st.last_bwd_start[c] = start;
    const bool as_timed = in.dp_first_free ? d_s == 0 : d_s <= in.dp_first_ready_s;
    if (in.has_dp && (!as_timed || (in.has_replica && !last_bwd))) {
      // Its DP-stream ops queue behind earlier ones (or it leaves out the replica all-reduces
      // of the last micro-batch): run again from the stream's state.
      StepRun run;
      queued_run(tmpl_[st.tmpl], inst, d_s, last_bwd, first_fwd || last_bwd, as_timed, run);
      attribute_first_gap(st, start, waited, run.first_ready_s, run.first_wait);
      if (first_fwd || last_bwd) {
        st.queued_end.resize(t.rp->ops.size());
        for (uint32_t id : in.ops) st.queued_end[id] = start + queued_end_[id];
        (first_fwd ? st.first_fwd_queued : st.last_bwd_queued)[c] = 1;
      }
      st.b.add(run.b);
      st.cend = start + run.compute_end_s;
      st.ready = start + run.all_end_s;
      st.ready_wait = run.last_wait;
      st.dp_free = start + run.dp_end_s;
      return true;
    }
    attribute_first_gap(st, start, waited, in.first_ready_s, in.first_wait);
    st.b.add(in.b);
    st.cend = start + in.compute_end_s;
    st.ready = start + in.all_end_s;
    st.ready_wait = in.last_wait;
    if (in.has_dp) st.dp_free = start + in.dp_end_s;
    return true;
  }

  /// Step `idx` of template `t` run with its DP stream free from `d_s` on (offset from its
  /// start, s): into `run`, and when `ends` the ends of its ops (offsets, by op id) into
  /// queued_end_. `last`: its chunk's last backward (run_ops). `as_timed`: the stream does not
  /// hold it up (it runs again only to leave out the replica all-reduces): by run_ops, as the
  /// template of a step without them would give. Past the step's saturation point by a shift
  /// of the run kept there (Saturation), else by run_ops.
  void queued_run(StageTemplate& t, uint32_t idx, double d_s, bool last, bool ends, bool as_timed,
                  StepRun& run) {
    const Instance& in = t.insts[idx];
    queued_end_.resize(t.rp->ops.size());
    const bool replica_out = in.has_replica && !last;
    if (t.saturation.empty()) t.saturation.resize(2 * t.insts.size());
    Saturation& sat = t.saturation[2 * idx + (replica_out ? 1 : 0)];
    if (!sat.known) saturation_point(t, idx, last, sat);
    if (as_timed || !(d_s > sat.d_star)) {
      run_ops(t, idx, d_s, last, queued_end_, run, nullptr);
      return;
    }
    if (!sat.have_ref) {
      // The reference one second past the saturation point: any point past it gives the same
      // shifts, and one fixed by the step alone gives every probe (StepScope) the same result.
      const double d_ref = sat.d_star + 1.0;
      run_ops(t, idx, d_ref, last, queued_end_, run, nullptr);
      keep_reference(t, idx, d_ref, replica_out, run, sat);
    }
    const double delta = d_s - sat.d_ref;
    run = sat.ref;
    if (sat.last_reached) run.compute_end_s += delta;
    run.dp_end_s += delta;
    if (sat.first_reached) run.first_ready_s += delta;
    add_scaled(run.b, sat.gap_unit, delta);
    const double reached = sat.reached_end + delta;
    if (reached > sat.unreached_end) {
      run.all_end_s = reached;
      run.last_wait = sat.reached_wait;
    } else {
      run.all_end_s = sat.unreached_end;
      run.last_wait = sat.unreached_wait;
    }
    if (ends) {
      for (size_t k = 0; k < in.ops.size(); ++k) {
        queued_end_[in.ops[k]] = sat.ref_end[k] + (sat.reach[k] ? delta : 0.0);
      }
    }
  }

  /// Saturation::d_star and reach of step `idx` (`last`: as run_ops).
  void saturation_point(const StageTemplate& t, uint32_t idx, bool last, Saturation& sat) {
    const Instance& in = t.insts[idx];
    const size_t n = t.rp->ops.size();
    constexpr double kInf = std::numeric_limits<double>::infinity();
    StepRun scratch;
    sat_a_.resize(n);  // ends without the stream (its ops that wait for nothing else: never)
    run_ops(t, idx, -kInf, last, sat_a_, scratch, nullptr);
    const std::vector<double>* a = &sat_a_;
    sat_b_.resize(n);
    run_ops(t, idx, 0.0, last, sat_b_, scratch, nullptr, -kInf);
    sat.reach.assign(in.ops.size(), 0);
    sat.d_star = -kInf;
    for (size_t k = 0; k < in.ops.size(); ++k) {
      const uint32_t id = in.ops[k];
      if (!(sat_b_[id] > -kInf)) continue;
      sat.reach[k] = 1;
      sat.d_star = std::max(sat.d_star, (*a)[id] - sat_b_[id]);
    }
    sat.known = true;
  }

  /// Keeps `run` (step `idx` run at `d_s` > Saturation::d_star, its ends in queued_end_) as
  /// the reference later queued runs of the step are shifted from.
  void keep_reference(const StageTemplate& t, uint32_t idx, double d_s, bool replica_out,
                      const StepRun& run, Saturation& sat) const {
    const Instance& in = t.insts[idx];
    const RankProgram& rp = *t.rp;
    sat.have_ref = true;
    sat.d_ref = d_s;
    sat.ref = run;
    sat.ref_end.resize(in.ops.size());
    sat.unreached_end = 0;  // run_ops' all_end_s starts at 0
    sat.unreached_wait = {};
    bool seen_compute = false, prev_reached = false;
    for (size_t k = 0; k < in.ops.size(); ++k) {
      const uint32_t id = in.ops[k];
      const Op& op = rp.ops[id];
      const double e = queued_end_[id];
      sat.ref_end[k] = e;
      if (t.on_dp[id]) continue;  // (a left-out replica all-reduce is a DP-stream op)
      const bool reached = sat.reach[k] != 0;
      if (op.kind == OpKind::kCompute) {
        if (!seen_compute) {
          sat.first_reached = reached;
        } else if (reached && !prev_reached) {
          // The gap before the first compute op the queue reaches grows with D: its category.
          uint32_t waited = kNone;
          double latest = -1;
          for (uint32_t d : op.deps) {
            if (t.inst_of[d] != idx || (replica_out && t.on_dp[d] &&
                                        rp.ops[d].group == GroupKind::kDpReplica)) {
              continue;
            }
            if (queued_end_[d] > latest) {
              latest = queued_end_[d];
              waited = d;
            }
          }
          attribute_gap(sat.gap_unit, 1.0,
                        waited == kNone ? WaitedFor{} : waited_for(rp.ops[waited]));
        }
        seen_compute = true;
        prev_reached = reached;
        sat.last_reached = reached;
      }
      double& part = reached ? sat.reached_end : sat.unreached_end;
      if (e > part) {
        part = e;
        (reached ? sat.reached_wait : sat.unreached_wait) = waited_for(op);
      }
    }
  }

  /// b += k x unit, category by category (the exposed and idle ones).
  static void add_scaled(TimeBreakdown& b, const TimeBreakdown& unit, double k) {
    b.exposed_tp_s += k * unit.exposed_tp_s;
    b.exposed_cp_s += k * unit.exposed_cp_s;
    b.exposed_ep_s += k * unit.exposed_ep_s;
    b.exposed_pp_s += k * unit.exposed_pp_s;
    b.exposed_dp_s += k * unit.exposed_dp_s;
    b.bubble_s += k * unit.bubble_s;
    b.sync_wait_s += k * unit.sync_wait_s;
    b.exposed_offload_s += k * unit.exposed_offload_s;
  }

  /// Attributes the idle gap of stage `st`'s compute stream before the first compute op of a
  /// step that starts at `start` (absolute, s) after waiting for `waited`, the op being ready
  /// `first_ready_s` after `start` when it waits for an op of its step (`first_wait`): as the
  /// replay does, the whole gap goes to the dependency that ended last, so to that op when
  /// first_ready_s > 0 (a ZeRO-3 gather that queued behind reduce-scatters, a TP gather), else to
  /// `waited`.
  static void attribute_first_gap(Stage& st, double start, const WaitedFor& waited,
                                  double first_ready_s, const WaitedFor& first_wait) {
    if (first_ready_s > 0) {
      attribute_gap(st.b, start + first_ready_s - st.cend, first_wait);
    } else {
      attribute_gap(st.b, start - st.cend, waited);
    }
  }

  // ---- step 4: the ops outside the steps ------------------------------------------------------

  /// Absolute time of op `d` (a dependency of a non-step op) of stage `r`.
  double dep_time(int64_t r, uint32_t d, const std::vector<double>& tail_end) {
    const Stage& st = stages_[static_cast<size_t>(r)];
    const StageTemplate& t = tmpl_[st.tmpl];
    const Op& op = t.rp->ops[d];
    if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) return st.final_batch_end;
    const uint32_t inst = t.inst_of[d];
    if (inst == kNone) return tail_end[d];
    for (size_t c = 0; c < t.last_bwd.size(); ++c) {
      if (t.last_bwd[c] == inst) {
        return queue_dp_ && st.last_bwd_queued[c] ? st.queued_end[d]
                                                 : st.last_bwd_start[c] + t.local_end[d];
      }
      if (t.first_fwd[c] == inst) {
        return queue_dp_ && st.first_fwd_queued[c] ? st.queued_end[d]
                                                  : st.first_fwd_start[c] + t.local_end[d];
      }
    }
    // ZeRO-2/3 with every micro-batch of the probe lowered (StepScope::kAll): the optimizer
    // waits for every micro-batch's reduce-scatters, and the DP stream ends them in issue order,
    // so the last, of the stage's last backward (a chunk's last), ends last.
    if (queue_dp_ && t.on_dp[d]) return 0;
    throw Error("analytical estimate: an op outside the steps depends on a step that is neither "
                "the first forward nor the last backward of its chunk (" + prog_->label(op) + ")");
  }

  struct Tail {
    std::vector<double> end;  ///< per op of the template (non-step ops only)
    std::vector<double> ready;
    /// Collectives spanning stages: when their last stage arrived (their start); others 0.
    std::vector<double> start;
    size_t pos = 0;           ///< into the template's nonstep list
    bool waiting = false;
  };

  void run_tails() {
    std::vector<Tail> tails(static_cast<size_t>(p_));
    for (int64_t r = 0; r < p_; ++r) {
      Tail& tl = tails[static_cast<size_t>(r)];
      const Stage& st = stages_[static_cast<size_t>(r)];
      const StageTemplate& t = tmpl_[st.tmpl];
      tl.end = st.pre_end;
      tl.ready.assign(t.rp->ops.size(), 0.0);
      tl.start.assign(t.rp->ops.size(), 0.0);
      while (tl.pos < t.nonstep.size() && t.nonstep[tl.pos] < t.first_step_op) ++tl.pos;
    }
    // Collectives spanning stages: the stages' calls meet (matching rules), then all end at
    // the last arrival + the collective's time.
    CollectiveRendezvous<double> rendezvous;
    std::unordered_map<CollectiveKey, double, CollectiveKeyHash> met;  // key -> last arrival
    bool progress = true;
    while (progress) {
      progress = false;
      for (int64_t r = 0; r < p_; ++r) {
        Tail& tl = tails[static_cast<size_t>(r)];
        const StageTemplate& t = tmpl_[stages_[static_cast<size_t>(r)].tmpl];
        while (tl.pos < t.nonstep.size()) {
          const uint32_t id = t.nonstep[tl.pos];
          const Op& op = t.rp->ops[id];
          double ready = 0;
          for (uint32_t d : op.deps) ready = std::max(ready, dep_time(r, d, tl.end));
          tl.ready[id] = ready;
          if (op.kind == OpKind::kCollective) {
            const int64_t gs = group_stages(op.group);
            if (gs > 1) {
              const CollectiveKey key =
                  collective_key(prog_->layout, stage_rank_[static_cast<size_t>(r)], op, t.seq[id]);
              if (!tl.waiting) {
                tl.waiting = true;
                if (auto calls = rendezvous.arrive(key, ready, gs)) {
                  met[key] = *std::max_element(calls->begin(), calls->end());
                }
                progress = true;
              }
              auto m = met.find(key);
              if (m == met.end()) break;
              tl.waiting = false;
              tl.start[id] = m->second;
              tl.end[id] = m->second + t.op_s[id];
              ++tl.pos;
              progress = true;
              continue;
            }
          }
          tl.end[id] = ready + t.op_s[id];
          ++tl.pos;
          progress = true;
        }
      }
    }
    for (int64_t r = 0; r < p_; ++r) {
      Tail& tl = tails[static_cast<size_t>(r)];
      const StageTemplate& t = tmpl_[stages_[static_cast<size_t>(r)].tmpl];
      if (tl.pos != t.nonstep.size()) {
        throw Error("analytical estimate: stage " + std::to_string(r) + " waits forever for " +
                    prog_->label(t.rp->ops[t.nonstep[tl.pos]]));
      }
      tail_breakdown(r, tl);
    }
  }

  /// Attributes the idle interval [lo, hi] of stage `r`'s tail to `waited` (a final send/recv:
  /// the final batch's transfer that ended last). A collective of the tail and the tail's
  /// collectives it waited for in turn: the part spent before the other stages arrived at one
  /// spanning stages is sync wait (the groups within a stage arrive together here).
  void attribute(int64_t r, double lo, double hi, const Op* waited, const Tail& tl) {
    Stage& st = stages_[static_cast<size_t>(r)];
    const double gap = hi - lo;
    if (waited == nullptr) {
      attribute_gap(st.b, gap, WaitedFor{});
      return;
    }
    if (waited->kind != OpKind::kCollective) {
      attribute_gap(st.b, gap, waited_for(*waited, st.final_batch_transfer_s));
      return;
    }
    const StageTemplate& t = tmpl_[st.tmpl];
    double sync = 0;
    double until = hi;
    for (const Op* c = waited; c != nullptr && until > lo && c->kind == OpKind::kCollective &&
                               t.inst_of[c->id] == kNone;) {
      const double arrival = tl.ready[c->id];
      sync += late_member_wait_s(lo, until, arrival, std::max(arrival, tl.start[c->id]));
      until = std::min(until, arrival);
      const Op* next = nullptr;
      double latest = -1;
      for (uint32_t d : c->deps) {
        const double e = dep_time(r, d, tl.end);
        if (e > latest) {
          latest = e;
          next = &t.rp->ops[d];
        }
      }
      c = next;
    }
    attribute_gap(st.b, gap, waited_for(*waited, 0, sync));
  }

  void tail_breakdown(int64_t r, const Tail& tl) {
    Stage& st = stages_[static_cast<size_t>(r)];
    const StageTemplate& t = tmpl_[st.tmpl];
    double prev_end = st.cend;
    double last_end = std::max(st.ready, st.final_batch_end);
    const Op* last_op = nullptr;
    for (uint32_t id : t.nonstep) {
      const Op& op = t.rp->ops[id];
      if (id < t.first_step_op) continue;
      if (op.kind == OpKind::kCompute) {
        const double dur = tl.end[id] - tl.ready[id];
        const Op* waited = nullptr;
        double latest = -1;
        for (uint32_t d : op.deps) {
          const double e = dep_time(r, d, tl.end);
          if (e > latest) {
            latest = e;
            waited = &t.rp->ops[d];
          }
        }
        attribute(r, prev_end, tl.ready[id], waited, tl);
        st.b.compute_s += dur;
        if (op.phase == Phase::kOptimizer) st.b.optimizer_s += dur;
        prev_end = tl.end[id];
      }
    }
    for (uint32_t id : t.nonstep) {
      if (tl.end[id] > last_end) {
        last_end = tl.end[id];
        last_op = &t.rp->ops[id];
      }
    }
    attribute(r, prev_end, last_end, last_op, tl);
    st.end = std::max(last_end, prev_end);
  }

  void finish() {
    double it = 0;
    size_t crit = 0;
    for (size_t r = 0; r < stages_.size(); ++r) {
      if (stages_[r].end > it) {
        it = stages_[r].end;
        crit = r;
      }
    }
    result_.iteration_time_s = it;
    for (Stage& st : stages_) {
      attribute_gap(st.b, it - st.end, WaitedFor{});
      result_.per_stage.push_back(st.b);
    }
    result_.critical = result_.per_stage[crit];
  }

  const Scenario& s_;
  const TopologySpec& topo_;
  const CostModel& costs_;
  const FabricEfficiency& eff_;
  const ComputeScaling compute_;  // cluster.what_if.gpu_speed_scale
  const StepScope probe_steps_;
  int64_t p_ = 1, v_ = 1, m_ = 1;
  PipelineScheduleKind kind_ = PipelineScheduleKind::k1F1B;  ///< for the stage placement
  bool async_sends_ = false;  ///< sends that no step waits for (splits_backward())
  /// ZeRO-2/3 (every micro-batch reduce-scatters its gradients; ZeRO-3 gathers every FSDP
  /// unit's parameters in every step): the DP stream is followed as a queue across the steps.
  bool queue_dp_ = false;
  std::vector<double> queued_end_;  ///< run_ops' scratch for a queued step
  std::vector<double> sat_a_, sat_b_;  ///< saturation_point's scratch
  std::optional<Program> prog_;
  std::optional<TimedProgram> timed_;
  std::map<std::tuple<size_t, int, int, int64_t, int64_t>, double> coll_s_;
  std::vector<uint32_t> template_of_stage_;   ///< stage -> template (stage_kinds)
  std::vector<size_t> node_group_of_stage_;   ///< stage -> node_group_index of its ranks
  std::map<int64_t, size_t> rep_node_group_;  ///< probe rank -> its stage's node group
  std::vector<double> p2p_s_;  ///< by src stage x p + dst stage, < 0 until computed
  double p2p_bytes_ = -1;      ///< the probe's p2p payload, < 0 until looked up
  const PlatformScaling scaling_;
  EstimateCache::Impl* const cache_;
  std::shared_ptr<const analytical_plan::PipelinePlan> plan_;
  std::vector<StageTemplate> tmpl_;
  std::vector<int64_t> stage_rank_;
  std::vector<Stage> stages_;
  /// A p2p transfer's two posts (absolute times, kUnposted until made) and the stage waiting
  /// for its other side (-1: none), by tag: one record, as run_steps reads them together.
  struct TagState {
    double send_post = kUnposted, recv_post = kUnposted;
    int32_t waiter = -1;
  };
  std::vector<TagState> tags_;
  IterationMetrics result_;
};

}  // namespace

namespace {

/// The topology the estimator sees for `s` on `topo_in`, unscaled: `topo_in`, or, for a job on
/// one node kind of a mixed cluster, that kind's, made in `one_kind`.
const TopologySpec& estimator_topology(const Scenario& s, const TopologySpec& topo_in,
                                       TopologySpec& one_kind) {
  // A job on nodes of one kind inside one node group of a mixed cluster sees that group's GPU,
  // NVLink domain and NICs only (those of its first node: all its nodes have them). A job across
  // node kinds keeps the whole topology, as the replay does: each stage's ranks on their own
  // GPU (the timing layer's JobGpus), each collective and transfer at its nodes' rates
  // (group_topology), each stage inside one node group (stage_kinds).
  const bool across_kinds = !topo_in.node_groups.empty() &&
                            !job_on_one_node_kind(topo_in, s.cluster.num_gpus);
  if (!topo_in.node_groups.empty() && !across_kinds) {
    one_kind = topo_in;
    one_kind.gpu = gpu_of_node(topo_in, 0);
    one_kind.node = node_spec_of(topo_in, 0);
    one_kind.nic = nic_spec_of(topo_in, 0);
    one_kind.node_groups.clear();
  }
  return topo_in.node_groups.empty() || across_kinds ? topo_in : one_kind;
}

}  // namespace

ZbVPassCosts zb_v_profiled_costs(const Scenario& s, const TopologySpec& topo_in,
                                 const CostModel& costs, const FabricEfficiency& eff) {
  if (s.parallel.pipeline_schedule != PipelineScheduleKind::kZbV) {
    throw InvalidArgument("zb_v_profiled_costs: parallelism.pipeline_schedule of scenario " +
                          s.name + " is not zb-v");
  }
  TopologySpec one_kind;
  const TopologySpec& topo = estimator_topology(s, topo_in, one_kind);
  check_gpu_supports(topo, s.training);
  const SimulationOptions o = with_what_if(SimulationOptions{}, s.cluster.what_if);
  return Estimator(s, scaled_topology(topo, o.scaling), costs, eff,
                   ComputeScaling{o.gpu_speed_scale, std::nullopt, {}}, StepScope::kBoundary,
                   o.scaling, nullptr)
      .profiled_costs();
}

IterationMetrics estimate(const Scenario& s, const TopologySpec& topo_in, const CostModel& costs,
                          const FabricEfficiency& eff, StepScope probe_steps,
                          EstimateCache* cache) {
  TopologySpec one_kind;
  const TopologySpec& topo = estimator_topology(s, topo_in, one_kind);
  check_gpu_supports(topo, s.training);
  const WhatIf& w = s.cluster.what_if;
  if (w.straggler || w.degraded_link) {
    throw UnsupportedError(
        "analytical estimate: cluster.what_if." +
        std::string(w.straggler ? "straggler" : "degraded_link") +
        " breaks the symmetry the estimator relies on (one rank per stage); use the replay "
        "(simulate, or sweep --mode simulate)");
  }
  if (!topo.fabric.ports_down.empty()) {
    throw UnsupportedError(
        "analytical estimate: fabric.ports_down of topology '" + topo.name +
        "' (a NIC port down) breaks the symmetry the estimator relies on (every rail alike); use "
        "the replay (simulate, or sweep --mode simulate)");
  }
  if (topo.has_overrides()) {
    throw UnsupportedError(
        "analytical estimate: link_overrides / switch_overrides of topology '" + topo.name +
        "' (single links or switches slower or down, routes around them) break the symmetry "
        "the estimator relies on (every rail and every route of a tier alike); use the replay "
        "(simulate, or sweep --mode simulate)");
  }
  // The what-ifs folded as for the replay: bandwidth factors scale the links the closed forms
  // use, gpu_speed_scale the compute (in the timing layer).
  if (pipeline_scatter_gather(s.parallel)) {
    // The TP all-gather after each pipeline recv sits between the schedule steps, where the
    // step-level model has no place for it (core/rank_lowering.cpp p2p_batch).
    throw UnsupportedError(
        "analytical estimate: parallelism.scatter_gather_tensors_in_pipeline (without SP) is not "
        "modelled by the estimator; use the replay (simulate, or sweep --mode simulate)");
  }
  const SimulationOptions o = with_what_if(SimulationOptions{}, w);
  EstimateCache::Impl* c = nullptr;
  if (cache != nullptr) {
    c = &cache->impl();
    c->bind(topo_in, eff);  // the caller's object: the cache checks its address
  }
  return Estimator(s, scaled_topology(topo, o.scaling), costs, eff,
                   ComputeScaling{o.gpu_speed_scale, std::nullopt, {}}, probe_steps, o.scaling,
                   c).run();
}

}  // namespace traintwin
