// Grouped GEMM of a mixture-of-experts layer's local experts (Megatron-Core GroupedMLP /
// TEGroupedMLP, moe_grouped_gemm), as a loop of the matmul layer over the groups: the input rows
// are the permuted tokens, expert-major (rows_per_group[g] rows for local expert g, in order), and
// group g multiplies its rows by its own weight [OC, C] (nn.Linear layout; no bias: Megatron's
// grouped GEMM has none):
//   out[rows of g] = inp[rows of g] W_g^T
// A group with 0 rows (no token routed to that expert) does nothing. G = local experts,
// M = sum of rows_per_group. Scalar is float or double.
#pragma once

#include <cstdint>
#include <span>

namespace traintwin::exec::cpu {

/// Forward. Throws InvalidArgument for channels < 1, a negative row count, or spans whose lengths
/// do not match (weight: G x OC x C, inp: M x C, out: M x OC).
template <typename Scalar>
void grouped_matmul_forward(std::span<Scalar> out,                    // [M, OC]
                            std::span<const Scalar> inp,              // [M, C]
                            std::span<const Scalar> weight,           // [G, OC, C]
                            std::span<const int64_t> rows_per_group,  // [G]
                            int64_t channels, int64_t out_channels);

/// dinp += dout W_g per group ("dgrad").
template <typename Scalar>
void grouped_matmul_backward_data(std::span<Scalar> dinp,                   // [M, C]
                                  std::span<const Scalar> dout,             // [M, OC]
                                  std::span<const Scalar> weight,           // [G, OC, C]
                                  std::span<const int64_t> rows_per_group,  // [G]
                                  int64_t channels, int64_t out_channels);

/// dweight_g += dout_g^T inp_g per group ("wgrad").
template <typename Scalar>
void grouped_matmul_backward_weight(std::span<Scalar> dweight,                // [G, OC, C]
                                    std::span<const Scalar> dout,             // [M, OC]
                                    std::span<const Scalar> inp,              // [M, C]
                                    std::span<const int64_t> rows_per_group,  // [G]
                                    int64_t channels, int64_t out_channels);

}  // namespace traintwin::exec::cpu
