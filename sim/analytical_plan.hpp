// The pipeline plan of the analytical estimator (sim/analytical.hpp, step 3): every stage's
// schedule (core/schedule.hpp) and Megatron's p2p batches around its steps, as
// core/rank_lowering.cpp issues them. A function of (schedule kind, PP, number of micro-batches,
// VPP) only, so estimates of layouts that share them share one plan (EstimateCache).
#pragma once

#include <cstdint>
#include <vector>

#include "core/schedule.hpp"

namespace traintwin::analytical_plan {

/// A send or recv of a stage's p2p batch: the peer stage and the transfer's tag.
struct P2PRef {
  bool send;
  int64_t peer_stage;
  int64_t tag;
};

/// A schedule step or a p2p batch, in the order a stage issues them.
struct Item {
  int64_t step = -1;            ///< index into the schedule, or -1 for a p2p batch
  uint32_t begin = 0, end = 0;  ///< a batch's sends and recvs: StagePlan::refs[begin, end)
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
/// chunks. Throws what build_schedule() throws.
PipelinePlan make_pipeline_plan(PipelineScheduleKind kind, int64_t p, int64_t m, int64_t v);

}  // namespace traintwin::analytical_plan
