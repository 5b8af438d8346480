// The sweep grid of issue 10's speed target, in one place for the benchmark that times it
// (bench/sweep_bench.cpp) and the test that checks the estimator's shortcuts on it
// (tests/sim/analytical_probe_test.cpp): on scenarios/gpt3-175b-h100-1024.yaml, TP 1,2,4,8 x
// PP 1,2,4,8,16,32 x micro-batch 1,2,4,8 x VPP 1-4 x recompute none/selective/full x SP on/off x
// distributed optimizer on/off = 4,608 rows (1,692 valid: 465 fit, 1,227 out of memory).
#pragma once

#include "sim/sweep.hpp"

namespace traintwin {

/// The 4,608-row grid's axes (see the file comment).
inline SweepAxes gpt3_175b_speed_grid() {
  SweepAxes axes;
  axes.tp = {1, 2, 4, 8};
  axes.pp = {1, 2, 4, 8, 16, 32};
  axes.mbs = {1, 2, 4, 8};
  axes.vpp = {1, 2, 3, 4};
  axes.recompute = {RecomputeGranularity::kNone, RecomputeGranularity::kSelective,
                    RecomputeGranularity::kFull};
  axes.sequence_parallel = {true, false};
  axes.distributed_optimizer = {true, false};
  return axes;
}

/// The same grid with Megatron-FSDP's sharding axis added (no_shard, optim, optim_grads,
/// optim_grads_params: 18,432 rows). The distributed-optimizer axis is swept, so the FSDP values
/// with it off break the scenario rule (invalid).
inline SweepAxes gpt3_175b_sharding_grid() {
  SweepAxes axes = gpt3_175b_speed_grid();
  axes.data_parallel_sharding_strategy = {
      DataParallelShardingStrategy::kNoShard, DataParallelShardingStrategy::kOptim,
      DataParallelShardingStrategy::kOptimGrads, DataParallelShardingStrategy::kOptimGradsParams};
  return axes;
}

/// The same grid with the pipeline-schedule axis added (issue 26's speed target): 1f1b, zb-h1,
/// zb-h2, zb-v, dualpipev (23,040 rows). The zero-bubble kinds of one chunk break the rule with
/// VPP > 1, the V kinds without VPP 2 when the VPP axis is swept (invalid rows).
inline SweepAxes gpt3_175b_schedule_grid() {
  SweepAxes axes = gpt3_175b_speed_grid();
  axes.pipeline_schedule = {PipelineScheduleKind::k1F1B, PipelineScheduleKind::kZbH1,
                            PipelineScheduleKind::kZbH2, PipelineScheduleKind::kZbV,
                            PipelineScheduleKind::kDualPipeV};
  return axes;
}

}  // namespace traintwin
