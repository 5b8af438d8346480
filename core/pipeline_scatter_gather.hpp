// Whether Megatron-LM's scatter/gather of pipeline tensors applies to a layout
// (parallelism.scatter_gather_tensors_in_pipeline): the one rule the lowering
// (core/rank_lowering.cpp p2p_batch), the estimator's refusal (sim/analytical.cpp) and the
// executor's (exec/executor.cpp) share. Next in the flow: the lowering splits each p2p tensor
// over TP and all-gathers it after the receive.
#pragma once

#include "core/scenario.hpp"

namespace traintwin {

/// True when `p` asks for the scatter/gather and it changes anything: pipeline sends exist
/// (PP > 1), TP > 1, and no sequence parallelism (with SP the tensor is already [s/TP, b, h]).
/// Source: Megatron-LM p2p_communication._communicate; Narayanan et al. SC'21, section 4.1.
inline bool pipeline_scatter_gather(const ParallelConfig& p) {
  return p.scatter_gather_tensors_in_pipeline && !p.sequence_parallel &&
         p.tensor_model_parallel_size > 1 && p.pipeline_model_parallel_size > 1;
}

}  // namespace traintwin
