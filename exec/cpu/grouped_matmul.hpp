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

/// The grouped GEMM's shape checks, every backend's (channels and out_channels >= 1, no group
/// with negative rows, weight G x OC x C, the inputs and outputs of M = sum of rows rows);
/// returns M. Throws InvalidArgument naming the operand ("grouped_matmul: ...").
int64_t grouped_matmul_rows(std::span<const int64_t> rows_per_group, size_t weight,
                            size_t in_rows_size, const char* in_name, size_t out_rows_size,
                            const char* out_name, int64_t channels, int64_t out_channels);

/// Calls f(g, first_row, rows) for every group g with rows > 0, in group order.
template <typename F>
void for_each_group(std::span<const int64_t> rows_per_group, F f) {
  int64_t row = 0;
  for (size_t g = 0; g < rows_per_group.size(); ++g) {
    if (rows_per_group[g] > 0) f(static_cast<int64_t>(g), row, rows_per_group[g]);
    row += rows_per_group[g];
  }
}

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
