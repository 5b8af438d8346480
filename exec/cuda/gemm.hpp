// Linear-layer GEMMs on the GPU through cuBLASLt (forward with the bias epilogue, dgrad,
// wgrad) and row-major strided-batched GEMMs through cuBLAS (for attention): the same functions,
// shapes and semantics as exec/cpu/matmul.hpp (llm.c matmul_forward/backward; weight [OC, C] in
// PyTorch nn.Linear layout, row-major tensors). Inputs in `dtype` (fp32, bf16 or fp16), compute
// and scaling in fp32 (CUBLAS_COMPUTE_32F; for fp32 inputs the context's
// float32_matmul_precision may ask for TF32 or bf16 tensor cores instead), weight and bias
// gradients in fp32 (Megatron's main_grad). Device pointers; asynchronous on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/scenario.hpp"
#include "exec/cpu/fp8.hpp"
#include "exec/cuda/dtype.hpp"

namespace traintwin::exec::cuda {

/// The cuBLAS and cuBLASLt handles and the cuBLASLt workspace of one device. Constructing it
/// touches no device: the handles and the workspace (`workspace_bytes`, cudaMalloc) are created
/// by the first GEMM, on the device current then, and freed by the destructor. Not thread-safe;
/// use one per host thread (and device). Throws CudaError from the first GEMM if creation fails.
class CublasContext {
 public:
  /// 32 MiB: cuBLASLt's recommended workspace for Hopper.
  static constexpr size_t kDefaultWorkspaceBytes = size_t{32} << 20;

  explicit CublasContext(size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~CublasContext();
  CublasContext(const CublasContext&) = delete;
  CublasContext& operator=(const CublasContext&) = delete;

  /// Opaque handles, defined in the .cu files (exec/cuda/cublas_context.cuh).
  struct Handles;
  /// The handles, created on first use. Throws CudaError if cuBLAS cannot be initialized.
  Handles& handles();
  size_t workspace_bytes() const { return workspace_bytes_; }
  /// The arithmetic of the GEMMs with fp32 operands issued through this context from now on
  /// (CUBLAS_COMPUTE_32F, _FAST_TF32 or _FAST_16BF; 16-bit operands always use
  /// CUBLAS_COMPUTE_32F).
  void set_float32_matmul_precision(Float32MatmulPrecision p) { float32_matmul_precision_ = p; }
  Float32MatmulPrecision float32_matmul_precision() const { return float32_matmul_precision_; }

 private:
  size_t workspace_bytes_;
  Float32MatmulPrecision float32_matmul_precision_ = Float32MatmulPrecision::kHighest;
  std::unique_ptr<Handles> handles_;
};

/// out = inp W^T + bias (overwrites out); `bias` may be null (then no epilogue). One cuBLASLt
/// matmul with CUBLASLT_EPILOGUE_BIAS; where cuBLASLt's heuristic offers no algorithm (odd
/// leading dimensions of 16-bit data, say), cublasGemmEx and a bias kernel instead (the same
/// fallback serves dgrad and wgrad). Throws InvalidArgument for a size < 1 or a null pointer
/// (bias excepted); CudaError if cuBLAS fails.
void matmul_forward(CublasContext& ctx, DType dtype,
                    void* out,           // [B*T, OC] dtype
                    const void* inp,     // [B*T, C] dtype
                    const void* weight,  // [OC, C] dtype
                    const void* bias,    // [OC] dtype or null
                    int64_t rows, int64_t channels, int64_t out_channels, cudaStream_t stream);

/// dgrad: dinp = dout W (+ dinp when `accumulate`, the CPU layer's +=; without it dinp is
/// overwritten and its old contents are not read). Throws as matmul_forward.
void matmul_backward_data(CublasContext& ctx, DType dtype,
                          void* dinp,          // [B*T, C] dtype
                          const void* dout,    // [B*T, OC] dtype
                          const void* weight,  // [OC, C] dtype
                          int64_t rows, int64_t channels, int64_t out_channels, bool accumulate,
                          cudaStream_t stream);

/// wgrad: dweight += dout^T inp (fp32 output of a bf16/fp16/fp32 GEMM, beta = 1), and
/// dbias += the column sums of dout when `dbias` is not null (a reduction kernel: 32 columns x
/// 8 row groups per block, fp32 atomicAdd of the partials). Throws as matmul_forward.
void matmul_backward_weight(CublasContext& ctx, DType dtype,
                            float* dweight,    // [OC, C] fp32
                            float* dbias,      // [OC] fp32 or null
                            const void* dout,  // [B*T, OC] dtype
                            const void* inp,   // [B*T, C] dtype
                            int64_t rows, int64_t channels, int64_t out_channels,
                            cudaStream_t stream);

/// Row-major out[M, N] = alpha a[M, K] b[N, K]^T + beta out with FP8 operands of kinds a_kind,
/// b_kind (not both E5M2), fp32 accumulation: cuBLASLt's FP8 GEMM, in the TN layout Hopper's
/// FP8 tensor cores take (Transformer Engine's every linear-layer GEMM). `out_type` kBFloat16
/// (then beta must be 0) or kFloat32; `fast_accumulation` sets CUBLASLT_MATMUL_DESC_FAST_ACCUM
/// (TE's forward). Throws InvalidArgument for M, N or K not a positive multiple of 16 (the FP8
/// kernels' alignment), both operands E5M2, a null pointer or a bf16 out with beta != 0;
/// CudaError when cuBLASLt has no algorithm (a GPU without FP8 tensor cores) or fails.
void fp8_matmul_nt(CublasContext& ctx, cpu::Fp8Kind a_kind, const void* a, cpu::Fp8Kind b_kind,
                   const void* b, DType out_type, void* out, float alpha, float beta, int64_t m,
                   int64_t n, int64_t k, bool fast_accumulation, cudaStream_t stream);

/// Row-major strided-batched GEMM: for each i in [0, batch)
///   C_i[m, n] = alpha op(A_i)[m, k] op(B_i)[k, n] + beta C_i
/// op(A) = A (stored [m, k], leading dimension lda >= k) or, with trans_a, A^T (A stored [k, m],
/// lda >= m); likewise B. A, B and C in `dtype`, fp32 compute (cublasGemmStridedBatchedEx).
/// When beta == 0, C is not read. Throws InvalidArgument for a size < 1, a leading dimension
/// too small or a null pointer; CudaError if cuBLAS fails.
void batched_matmul(CublasContext& ctx, DType dtype, bool trans_a, bool trans_b, int64_t m,
                    int64_t n, int64_t k, float alpha, const void* a, int64_t lda,
                    int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, float beta,
                    void* c, int64_t ldc, int64_t stride_c, int64_t batch, cudaStream_t stream);

}  // namespace traintwin::exec::cuda
