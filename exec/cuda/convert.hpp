// Storage conversion on the GPU: a tensor of one DType rewritten in another, elementwise, as
// exec/cpu/bf16.hpp's to_bf16 / from_bf16 (round to nearest even on narrowing: cuda_bf16.h's
// __float2bfloat16_rn, __float2half_rn; widening is exact). Megatron-LM's bf16 model weights
// are such a copy of the fp32 main weights. Device pointers; asynchronous on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "exec/cpu/fp8.hpp"
#include "exec/cuda/dtype.hpp"

namespace traintwin::exec::cuda {

/// dst[i] = src[i] converted from `src_type` to `dst_type`, i < n (dst and src must not overlap
/// unless equal types; then a copy). NaN stays NaN (its payload may change). Throws
/// InvalidArgument for n < 1 or a null pointer; CudaError if the launch fails.
void convert(DType dst_type, void* dst, DType src_type, const void* src, int64_t n,
             cudaStream_t stream);

/// dst[i] += src[i] widened from bf16 (exact) to fp32, i < n: the bf16 dgrad's result added to
/// the fp32 gradient it accumulates into, in one pass. Throws as convert.
void accumulate_widened_bf16(float* dst, const uint16_t* src, int64_t n, cudaStream_t stream);

/// dst[i] = the FP8 `kind` bits of scale * src[i], i < n: Transformer Engine's cast
/// (__nv_cvt_float_to_fp8 with __NV_SATFINITE: ties to even, saturating to the largest finite
/// value; exec/cpu/fp8.hpp's float_to_fp8 bit for bit but for NaN payloads). Throws as convert.
void quantize_fp8(cpu::Fp8Kind kind, uint8_t* dst, const float* src, int64_t n, float scale,
                  cudaStream_t stream);

}  // namespace traintwin::exec::cuda
