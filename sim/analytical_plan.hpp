// The pipeline plan of the analytical estimator (sim/analytical.hpp, step 3): every stage's
// schedule (core/schedule.hpp) and Megatron's p2p batches around its steps, as
// core/rank_lowering.cpp issues them. A function of (schedule kind, PP, number of micro-batches,
// VPP) and, for ZB-V, its cost-aware order (sim/zb_v_order.hpp) only, so estimates of layouts
// that share them share one plan (EstimateCache).
#pragma once

#include <cstdint>
#include <vector>

#include "core/pipeline_order.hpp"
#include "core/schedule.hpp"

namespace traintwin::analytical_plan {

/// A send or recv of a stage's p2p batch: the transfer's tag and the peer stage. 12 bytes: the
/// estimator's step-level dataflow reads every ref of every stage (a plan of PP 32 x VPP 4 x 384
/// micro-batches holds ~200,000), so the plan is kept small.
struct P2PRef {
  uint32_t tag;         ///< pipeline_tag() (core/schedule.hpp); make_pipeline_plan checks it fits
  int32_t peer_stage;
  bool send;
};

/// A schedule step or a p2p batch, in the order a stage issues them. A step carries what the
/// estimator reads of it (pass, model chunk, whether it is its chunk's first forward or DP
/// trigger), so that running the plan reads the items and refs only (16 bytes an item).
struct Item {
  static constexpr uint8_t kFirstForward = 1;  ///< flags: StagePlan::first_fwd_step of its chunk
  static constexpr uint8_t kLastBackward = 2;  ///< flags: StagePlan::last_bwd_step of its chunk
  int32_t step = -1;            ///< index into the schedule, or -1 for a p2p batch
  uint32_t begin = 0, end = 0;  ///< a batch's sends and recvs: StagePlan::refs[begin, end)
  uint16_t model_chunk = 0;     ///< a step's model chunk (schedule[step].model_chunk)
  uint8_t pass = 0;             ///< a step's Pass (schedule[step].pass)
  uint8_t flags = 0;            ///< a step's kFirstForward | kLastBackward
  Pass step_pass() const { return static_cast<Pass>(pass); }
};

/// One pipeline stage's schedule and Megatron's p2p batches around its steps.
struct StagePlan {
  std::vector<ScheduleStep> schedule;
  std::vector<Item> items;
  std::vector<P2PRef> refs;
  /// Per chunk: the schedule index of its first forward and of the step that triggers its DP
  /// buckets (its last backward, or its last W under a schedule that splits the backward); -1
  /// when the chunk has none.
  std::vector<int64_t> first_fwd_step, last_bwd_step;
};

/// Every stage's plan: a function of (schedule kind, PP, number of micro-batches, VPP) only.
struct PipelinePlan {
  std::vector<StagePlan> stages;
};

/// Every stage's plan of schedule `kind` with `p` stages, `m` micro-batches and `v` model
/// chunks; `order`: null for build_schedule's steps, else stage r runs order->ranks[r] (an order
/// check_pipeline_order accepts; ZB-V's cost-aware order). Throws what build_schedule() throws,
/// InvalidArgument when `order` has not p ranks, and when the plan's tags (2 x m x p x v) or its
/// steps do not fit the 32-bit fields of P2PRef and Item.
PipelinePlan make_pipeline_plan(PipelineScheduleKind kind, int64_t p, int64_t m, int64_t v,
                                const PipelineOrder* order = nullptr);

}  // namespace traintwin::analytical_plan
