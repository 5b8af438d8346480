// Counter-based inverted dropout on the GPU, fused with Megatron-LM's bias add and residual add
// (megatron/core/fusions/fused_bias_dropout.py, bias_dropout_add: out = residual +
// dropout(x + bias)). The mask is exec/cpu/dropout.hpp's (same global element indices, same
// counter_hash, exec/cuda/dropout_mask.hpp), so an element is dropped on the GPU exactly when it
// is dropped on the CPU whatever the TP/SP/DP layout. Parameters and blocks are the CPU layer's
// structs. Activations in `dtype`, fp32 arithmetic, the bias gradient in fp32. Device pointers;
// asynchronous on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "exec/cpu/dropout.hpp"
#include "exec/cuda/dtype.hpp"

namespace traintwin::exec::cuda {

/// out[e] = residual[e] + keep(e) * (inp[e] + bias[c]) / (1 - p), rounded once to dtype;
/// `bias` ([C]) and `residual` may be null (then that term is absent: bias = residual = null is
/// exec/cpu/dropout's dropout_forward). keep(e) uses the global index of the HiddenBlock.
/// `out` may alias `inp` or `residual` (each element is read, then written, by one thread). Throws InvalidArgument for p outside [0, 1), a size
/// < 1, a block outside its global tensor or a null out/inp; CudaError if the launch fails.
void bias_dropout_add_forward(DType dtype,
                              void* out,             // [B, T_local, C] dtype
                              const void* inp,       // [B, T_local, C] dtype
                              const void* bias,      // [C] dtype or null
                              const void* residual,  // [B, T_local, C] dtype or null
                              const cpu::DropoutParams& params, const cpu::HiddenBlock& block,
                              cudaStream_t stream);

/// Backward of bias_dropout_add_forward, accumulating (+=):
///   dinp[e] += keep(e) dout[e] / (1 - p),  dresidual[e] += dout[e],
///   dbias[c] += sum over rows of keep(e) dout[e] / (1 - p)
/// (`dbias` fp32, and `dresidual`, may be null). dbias uses a second kernel (32 channels x 8 row
/// groups per block, fp32 atomicAdd of the partial sums: unspecified order). Throws as the
/// forward (dinp and dout must be non-null).
void bias_dropout_add_backward(DType dtype,
                               void* dinp,        // [B, T_local, C] dtype
                               float* dbias,      // [C] fp32 or null
                               void* dresidual,   // [B, T_local, C] dtype or null
                               const void* dout,  // [B, T_local, C] dtype
                               const cpu::DropoutParams& params, const cpu::HiddenBlock& block,
                               cudaStream_t stream);

/// out = keep ? inp / (1 - p) : 0 over attention probabilities with the AttentionBlock's global
/// index (exec/cpu/dropout's attention_dropout_forward); out may alias inp. Throws as
/// bias_dropout_add_forward.
void attention_dropout_forward(DType dtype,
                               void* out,        // [B, NH_local, T, T] dtype
                               const void* inp,  // [B, NH_local, T, T] dtype
                               const cpu::DropoutParams& params,
                               const cpu::AttentionBlock& block, cudaStream_t stream);

/// dinp += keep ? dout / (1 - p) : 0 (exec/cpu/dropout's attention_dropout_backward).
/// Throws as attention_dropout_forward.
void attention_dropout_backward(DType dtype,
                                void* dinp,        // [B, NH_local, T, T] dtype
                                const void* dout,  // [B, NH_local, T, T] dtype
                                const cpu::DropoutParams& params,
                                const cpu::AttentionBlock& block, cudaStream_t stream);

/// out[i] = counter_hash(seed, stream_id, first_index + i) computed on the device (for tests of
/// the device hash against exec/counter_rng.hpp). Throws InvalidArgument for n < 1 or a null
/// pointer; CudaError if the launch fails.
void counter_hash_fill(uint64_t* out, uint64_t seed, uint64_t stream_id, uint64_t first_index,
                       int64_t n, cudaStream_t stream);

}  // namespace traintwin::exec::cuda
