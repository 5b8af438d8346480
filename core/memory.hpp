// Memory model per GPU: weights, gradients, optimizer states, activations, and the embedding /
// LM-head / logits buffers, per pipeline stage.
//
// Sources: bytes per parameter from Megatron-LM's distributed-optimizer documentation
// (fp16 params+grads: 20, or 4 + 16/d distributed; bf16 params with fp32 grads: 18, or 6 + 12/d;
// fp32: 16, or 8 + 8/d). Activations per transformer layer from Korthikanti et al. 2022,
// sec. 4 and Table 2: s b h (34 + 5 a s / h) bytes without parallelism or recomputation (16-bit
// activations, 1-byte dropout masks); TP without SP: s b h (10 + 24/t + 5 a s/(h t));
// TP + SP: s b h / t (34 + 5 a s / h); selective recompute drops the 5 a s^2 b terms;
// full recompute keeps the layer input, 2 s b h (/t with SP). s is the local sequence s/CP.
// The number of micro-batches in flight is taken from the stage's actual schedule
// (max_in_flight), which for the first stage is p under 1F1B and p (1 + (p-1)/(p v)) micro-batch
// equivalents of layers under interleaving (Korthikanti sec. 4.2.3).
#pragma once

#include <cstdint>
#include <vector>

#include "core/scenario.hpp"

namespace traintwin {

/// Activation bytes of one transformer layer for one micro-batch on one GPU.
/// `tp` = TP size, `sequence_parallel` as configured; precision scales the 16-bit terms
/// (fp32 doubles them; dropout masks stay 1 byte).
double layer_activation_bytes(const ModelSpec& m, int64_t micro_batch_size, int64_t tp,
                              int64_t cp, bool sequence_parallel, RecomputeGranularity r,
                              Precision p);

/// Bytes per parameter of weights, gradients and optimizer state (see file comment).
struct BytesPerParameter {
  double weights = 0, gradients = 0, optimizer = 0;
};
/// Bytes per parameter for `p` with or without the distributed optimizer over `dp` ranks
/// (the optimizer share, including the fp32 main gradients where Megatron keeps them there,
/// is divided by dp when distributed).
BytesPerParameter bytes_per_parameter(Precision p, bool distributed_optimizer, int64_t dp);

/// The memory of one GPU of pipeline stage `pp_rank`, in bytes.
struct StageMemory {
  int64_t pp_rank = 0;
  int64_t parameters = 0;          ///< parameters held (parameters_on_rank)
  int64_t layers = 0;              ///< transformer layers held (all chunks)
  int64_t in_flight = 0;           ///< peak (micro-batch, chunk) activation sets held
  double weights_bytes = 0;
  double gradients_bytes = 0;
  double optimizer_bytes = 0;
  double activations_bytes = 0;    ///< transformer layers, at the in-flight peak
  double embedding_and_logits_bytes = 0;  ///< embedding dropout mask, final LN/LM-head inputs, fp32 logits
  double total_bytes() const {
    return weights_bytes + gradients_bytes + optimizer_bytes + activations_bytes +
           embedding_and_logits_bytes;
  }
};

/// Memory of one GPU of stage `pp_rank` (throws InvalidArgument if out of range).
StageMemory stage_memory(const Scenario& s, int64_t pp_rank);

/// stage_memory() for every pipeline stage, stage 0 first.
std::vector<StageMemory> memory_per_stage(const Scenario& s);

}  // namespace traintwin
