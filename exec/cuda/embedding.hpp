// Vocab-parallel token embedding and learned position embedding on the GPU: the same functions,
// shapes and semantics as exec/cpu/vocab_parallel_embedding.hpp and
// exec/cpu/position_embedding.hpp (Megatron-LM VocabParallelEmbedding, llm.c encoder_*), with
// activations and weights in `dtype` and the weight gradients in fp32 (Megatron's main_grad).
// All pointers are device pointers; every launch is asynchronous on `stream`.
// Token ids live on the device and are NOT validated: an id outside [0, V_total) behaves as an
// id of another shard (zeros forward, nothing backward); the CPU layer throws instead.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "exec/cuda/dtype.hpp"

namespace traintwin::exec::cuda {

/// out[b, t, :] = wte_local[tok - vocab_start, :] if tok is in this rank's shard, else 0
/// (overwrites out). Throws InvalidArgument for a size < 1, a shard outside [0, V_total) or a
/// null pointer; CudaError if the launch fails.
void vocab_parallel_embedding_forward(DType dtype,
                                      void* out,                // [B, T, C] dtype
                                      const int32_t* tokens,    // [B, T] global ids
                                      const void* wte_local,    // [V_local, C] dtype
                                      int64_t batch, int64_t seq, int64_t channels,
                                      int64_t vocab_start, int64_t vocab_local,
                                      int64_t vocab_total, cudaStream_t stream);

/// dwte_local[tok - vocab_start, :] += dout[b, t, :] for the in-shard tokens, with fp32
/// atomicAdd (a token repeated in the batch adds in an unspecified order: not bit-reproducible,
/// fp32 rounding only). Throws as vocab_parallel_embedding_forward.
void vocab_parallel_embedding_backward(DType dtype,
                                       float* dwte_local,       // [V_local, C] fp32
                                       const void* dout,        // [B, T, C] dtype
                                       const int32_t* tokens,   // [B, T]
                                       int64_t batch, int64_t seq, int64_t channels,
                                       int64_t vocab_start, int64_t vocab_local,
                                       int64_t vocab_total, cudaStream_t stream);

/// out[b, t, :] += wpe[seq_offset + t, :] (a sequence shard holds positions [seq_offset,
/// seq_offset + T_local)). Throws InvalidArgument for a size < 1, seq_offset < 0,
/// seq_offset + T_local > max_positions or a null pointer; CudaError if the launch fails.
void position_embedding_forward(DType dtype,
                                void* out,         // [B, T_local, C] dtype
                                const void* wpe,   // [max_positions, C] dtype
                                int64_t batch, int64_t seq_local, int64_t channels,
                                int64_t seq_offset, int64_t max_positions, cudaStream_t stream);

/// dwpe[seq_offset + t, :] += sum over b of dout[b, t, :] (one thread per (t, c), summing b in
/// order: deterministic, no atomics). Throws as position_embedding_forward.
void position_embedding_backward(DType dtype,
                                 float* dwpe,       // [max_positions, C] fp32
                                 const void* dout,  // [B, T_local, C] dtype
                                 int64_t batch, int64_t seq_local, int64_t channels,
                                 int64_t seq_offset, int64_t max_positions, cudaStream_t stream);

}  // namespace traintwin::exec::cuda
