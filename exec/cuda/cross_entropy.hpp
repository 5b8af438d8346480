// Vocab-parallel softmax cross-entropy on the GPU, in the steps (a)-(d) between the TP
// all-reduces of exec/cpu/vocab_parallel_cross_entropy.hpp (Megatron-LM
// _VocabParallelCrossEntropy): the same functions, shapes and semantics, with the logits and
// their gradient in `dtype` and every per-row statistic (max, sum of exp, target logit, loss,
// dloss) in fp32, as Megatron casts the logits to float for the loss. Rows are the B*T
// positions; one block of 256 threads per row for the reductions. Target ids live on the device
// and are NOT validated (an id outside [0, V_total) counts as another shard's: target logit 0).
// Device pointers; asynchronous on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "exec/cuda/dtype.hpp"

namespace traintwin::exec::cuda {

/// (a) logits_max_local[i] = max over v of logits_local[i, v]. Throws InvalidArgument for a size
/// < 1 or a null pointer; CudaError if the launch fails.
void vocab_parallel_logits_max(DType dtype,
                               float* logits_max_local,    // [B*T] fp32
                               const void* logits_local,   // [B*T, V_local] dtype
                               int64_t rows, int64_t vocab_local, cudaStream_t stream);

/// (b) sum_exp_local[i] = sum over v of exp(logits_local[i, v] - logits_max[i]) and
/// target_logit_local[i] = logits_local[i, target[i] - vocab_start] if the target is in this
/// shard, else 0 (both overwritten). Throws InvalidArgument for a size < 1, a shard outside
/// [0, V_total) or a null pointer; CudaError if the launch fails.
void vocab_parallel_sum_exp(DType dtype,
                            float* sum_exp_local,       // [B*T] fp32
                            float* target_logit_local,  // [B*T] fp32
                            const void* logits_local,   // [B*T, V_local] dtype
                            const float* logits_max,    // [B*T] fp32, global (all-reduced MAX)
                            const int32_t* targets,     // [B*T] global ids
                            int64_t rows, int64_t vocab_start, int64_t vocab_local,
                            int64_t vocab_total, cudaStream_t stream);

/// (c) losses[i] = log(sum_exp[i]) + (logits_max[i] - target_logit[i]) (overwritten).
/// Throws InvalidArgument for rows < 1 or a null pointer; CudaError if the launch fails.
void vocab_parallel_cross_entropy_loss(float* losses,              // [B*T] fp32
                                       const float* sum_exp,       // [B*T] fp32, global
                                       const float* logits_max,    // [B*T] fp32, global
                                       const float* target_logit,  // [B*T] fp32, global
                                       int64_t rows, cudaStream_t stream);

/// (d) dlogits_local[i, v] += (exp(logits_local[i, v] - logits_max[i]) / sum_exp[i]
///                             - 1[vocab_start + v == target[i]]) * dlosses[i].
/// Throws as vocab_parallel_sum_exp.
void vocab_parallel_cross_entropy_backward(DType dtype,
                                           void* dlogits_local,       // [B*T, V_local] dtype
                                           const float* dlosses,      // [B*T] fp32
                                           const void* logits_local,  // [B*T, V_local] dtype
                                           const float* logits_max,   // [B*T] fp32, global
                                           const float* sum_exp,      // [B*T] fp32, global
                                           const int32_t* targets,    // [B*T]
                                           int64_t rows, int64_t vocab_start,
                                           int64_t vocab_local, int64_t vocab_total,
                                           cudaStream_t stream);

}  // namespace traintwin::exec::cuda
