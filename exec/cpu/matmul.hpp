// Linear layer (llm.c matmul_forward/backward) on the CPU through OpenBLAS:
//   out[B*T, OC] = inp[B*T, C] x weight^T[C, OC] + bias[OC]
// weight is stored [OC, C] (PyTorch nn.Linear layout). B = batch, T = seq, C = channels,
// OC = out_channels. Scalar is float (cblas_sgemm) or double (cblas_dgemm).
#pragma once

#include <cstdint>
#include <span>

namespace traintwin::exec::cpu {

/// Forward: out = inp W^T + bias. `bias` may be empty (no bias, e.g. the tied LM head).
/// Throws InvalidArgument for a size < 1 or a span whose length does not match its shape.
template <typename Scalar>
void matmul_forward(std::span<Scalar> out,          // [B, T, OC]
                    std::span<const Scalar> inp,     // [B, T, C]
                    std::span<const Scalar> weight,  // [OC, C]
                    std::span<const Scalar> bias,    // [OC] or empty
                    int64_t batch, int64_t seq, int64_t channels, int64_t out_channels);

/// Backward; accumulates (+=) into the gradients, as llm.c does:
///   dinp += dout W,  dweight += dout^T inp,  dbias += sum over B*T of dout.
/// `dbias` may be empty (no bias). Throws InvalidArgument as matmul_forward.
template <typename Scalar>
void matmul_backward(std::span<Scalar> dinp,           // [B, T, C]
                     std::span<Scalar> dweight,        // [OC, C]
                     std::span<Scalar> dbias,          // [OC] or empty
                     std::span<const Scalar> dout,     // [B, T, OC]
                     std::span<const Scalar> inp,      // [B, T, C]
                     std::span<const Scalar> weight,   // [OC, C]
                     int64_t batch, int64_t seq, int64_t channels, int64_t out_channels);

/// The input-gradient half of matmul_backward (Megatron's "dgrad" GEMM): dinp += dout W.
/// Throws InvalidArgument as matmul_forward.
template <typename Scalar>
void matmul_backward_data(std::span<Scalar> dinp,          // [B, T, C]
                          std::span<const Scalar> dout,    // [B, T, OC]
                          std::span<const Scalar> weight,  // [OC, C]
                          int64_t batch, int64_t seq, int64_t channels, int64_t out_channels);

/// The weight-gradient half ("wgrad" GEMM): dweight += dout^T inp, dbias += sum of dout
/// (`dbias` may be empty). Throws InvalidArgument as matmul_forward.
template <typename Scalar>
void matmul_backward_weight(std::span<Scalar> dweight,      // [OC, C]
                            std::span<Scalar> dbias,        // [OC] or empty
                            std::span<const Scalar> dout,   // [B, T, OC]
                            std::span<const Scalar> inp,    // [B, T, C]
                            int64_t batch, int64_t seq, int64_t channels, int64_t out_channels);

/// Threads OpenBLAS uses for the GEMMs of this process (openblas_set_num_threads); >= 1 else
/// InvalidArgument.
void set_gemm_threads(int threads);
/// The number of threads OpenBLAS currently uses.
int gemm_threads();

}  // namespace traintwin::exec::cpu
