// Whether ZeRO-3 / FSDP units stay gathered, and their gradients accumulate unsharded, for a
// whole step (training.reshard_after_forward false under pipeline parallelism): the one rule the
// lowering (core/rank_lowering.cpp lower_step, rank_lowering.hpp reduces_every_micro_batch), the
// estimator's templates (sim/analytical.cpp make_template) and the memory model (core/memory.cpp:
// fsdp_gathered_units, gradients_bytes) share. Next in the flow: the lowering gathers each unit in
// its chunk's first forward only and reduce-scatters its gradients in its chunk's last backward
// only.
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

/// True when the gradient reduce-scatters of ZeRO-2/3 run once per step, in each model chunk's
/// last backward (its last W under a split backward), the gradients of the earlier micro-batches
/// accumulated unsharded in the stage: the same condition as fsdp_units_gathered_once_per_step.
/// torch.distributed.pipelining does this for every FSDP2 module it runs
/// (torch/distributed/pipelining/stage.py _PipelineStageBase.backward_maybe_with_nosync:
/// set_requires_gradient_sync(False) and set_reshard_after_backward(False) before each backward,
/// then for the last one set_requires_gradient_sync(True) and the FSDP param groups'
/// post_backward, which reduce-scatters the accumulated gradients). FSDP2 has no ZeRO-2 and runs
/// reshard_after_forward true under PP only when asked (torchtitan
/// fsdp_reshard_after_forward: always); those two keep the Megatron-FSDP schedule this
/// simulator lowers for them, a reduce-scatter after every micro-batch's backward (Megatron-FSDP
/// accumulates into its sharded main_grad buffer), so the rule stays one with the gather's.
inline bool fsdp_grads_reduced_once_per_step(const Scenario& s) {
  return fsdp_units_gathered_once_per_step(s);
}

}  // namespace traintwin
