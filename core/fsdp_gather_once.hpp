// Whether ZeRO-3 / FSDP units stay gathered for a whole step (training.reshard_after_forward
// false under pipeline parallelism): the one rule the lowering (core/rank_lowering.cpp
// lower_step), the estimator's templates (sim/analytical.cpp make_template) and the memory
// model's reading of fsdp_gathered_units (core/memory.cpp) share. Next in the flow: the lowering
// gathers each unit in its chunk's first forward only.
#pragma once

#include "core/scenario.hpp"

namespace traintwin {

/// True when every FSDP unit (transformer layer) of a rank is all-gathered once per step, in its
/// model chunk's first forward, and kept whole through every micro-batch's forward and backward:
/// ZeRO-3 (training.data_parallel_sharding_strategy optim_grads_params) with
/// training.reshard_after_forward false and PP > 1. This is how torchtitan runs FSDP2 under
/// pipeline parallelism: it turns reshard_after_forward off with PP "to avoid per-microbatch
/// all-gathers" (torchtitan/distributed/fsdp.py get_fsdp_reshard_after_forward_policy, earlier
/// torchtitan/parallelisms/parallelize_llama.py), and torch.distributed.pipelining keeps the
/// modules unsharded between a step's backwards (torch/distributed/pipelining/stage.py
/// _PipelineStageBase.backward_maybe_with_nosync: set_reshard_after_backward(False) but for the
/// last backward). Without PP (gradient accumulation with FSDP2's defaults) a unit is resharded
/// after each backward and gathered again by the next micro-batch's forward: false.
inline bool fsdp_units_gathered_once_per_step(const Scenario& s) {
  return s.training.zero_stage() >= 3 && !s.training.reshard_after_forward &&
         s.parallel.pipeline_model_parallel_size > 1;
}

}  // namespace traintwin
