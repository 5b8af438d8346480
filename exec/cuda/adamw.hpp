// AdamW step, gradient-norm reduction and gradient scaling on the GPU: the same functions and
// semantics as exec/cpu/adamw.hpp (torch.optim.AdamW single-tensor order; Megatron-LM
// clip_grad_norm_fp32), on fp32 master parameters, fp32 gradients and fp32 moments (Megatron
// mixed precision); the step can also write the updated parameters rounded to the model's
// storage type (bf16/fp16 copy of the master weights). Device pointers; asynchronous on
// `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "exec/cpu/adamw.hpp"
#include "exec/cuda/dtype.hpp"

namespace traintwin::exec::cuda {

/// One AdamW step over n elements, element by element in exec/cpu/adamw.hpp's order (decay,
/// lerp of m, v, sqrt(v) / sqrt(bias_correction2) + eps, addcdiv), in fp32, with the per-tensor
/// constants computed in double on the host as the CPU layer does. When `params_model` is not
/// null it also receives the updated params rounded to `model_dtype`. Throws InvalidArgument for
/// n < 1, step < 1, lr < 0 or not finite, a hyper-parameter outside its range (as the CPU layer)
/// or a null pointer; CudaError if the launch fails.
void adamw_step(float* params,        // [n] fp32 master weights
                const float* grads,   // [n] fp32
                float* m,             // [n] fp32 first moment
                float* v,             // [n] fp32 second moment
                int64_t n, const cpu::AdamWParams& hyper, double lr, int64_t step,
                void* params_model,   // [n] model_dtype or null
                DType model_dtype, cudaStream_t stream);

/// *result += sum of values[i]^2, accumulated in fp64 (each block reduces its part in double,
/// then one fp64 atomicAdd per block: the order of the blocks' additions is unspecified). The
/// executor adds the pieces of every parameter into one device double, all-reduces it and takes
/// the sqrt (Megatron get_grad_norm_fp32, norm_type 2). Throws InvalidArgument for n < 1 or a
/// null pointer; CudaError if the launch fails.
void sum_of_squares(DType dtype, const void* values,  // [n] dtype
                    int64_t n, double* result,        // device scalar, accumulated
                    cudaStream_t stream);

/// values *= float(factor) (the clipping coefficient of cpu::clip_coefficient). Throws
/// InvalidArgument for n < 1, a factor that is not finite or a null pointer; CudaError if the
/// launch fails.
void scale_in_place(float* values, int64_t n, double factor, cudaStream_t stream);

}  // namespace traintwin::exec::cuda
