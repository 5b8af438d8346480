// Token permutation of a mixture-of-experts layer (Megatron-Core moe_utils.permute / unpermute /
// sort_chunks_by_idxs), on rows of C channels:
//  - permute: the routed (token, expert) pairs of a routing map [N, E] in expert-major order,
//    tokens ascending inside an expert (Megatron: routing_map.T masked_select of the token
//    indices), so the rows of expert e are contiguous and the rows for the experts of one
//    expert-parallel rank form one all-to-all piece;
//  - unpermute: out[n] = sum over the rows m of token n of probs[n, expert(m)] x inp[m]
//    (Megatron multiplies by the permuted probs, then scatter_add_s back to token order);
//  - sort_chunks: reorders row chunks (the alltoall dispatcher's [source rank][local expert] to
//    [local expert][source rank] after the all-to-all, and back before it).
// M = routed rows (sum of the routing map), N = tokens, E = experts. Scalar is float or double.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace traintwin::exec::cpu {

/// The permutation of one routing map: row m of the permuted tokens is token `token[m]` for
/// expert `expert[m]`; rows_per_expert[e] = the routing map's column sums (after capacity).
struct MoePermutation {
  std::vector<int64_t> token;            ///< [M]
  std::vector<int32_t> expert;           ///< [M]
  std::vector<int64_t> rows_per_expert;  ///< [E]
  int64_t rows() const { return static_cast<int64_t>(token.size()); }
};

/// Builds the permutation of `routing_map` (0/1). InvalidArgument for sizes < 1 or a length that
/// does not match.
MoePermutation moe_make_permutation(std::span<const uint8_t> routing_map,  // [N, E]
                                    int64_t tokens, int64_t experts);

/// The permutation checks of the (un)permute kernels, every backend's: N, C >= 1, perm's token
/// and expert lists of one length M, the rows operand M x C, the tokens operand N x C, every
/// token in [0, N). InvalidArgument naming the operand.
void check_moe_permutation_rows(const MoePermutation& perm, size_t rows_size,
                                const char* rows_name, size_t tokens_size,
                                const char* tokens_name, int64_t tokens, int64_t channels);

/// The unpermute's further checks: E >= 1, probs N x E, every expert of perm in [0, E).
void check_moe_permutation_experts(const MoePermutation& perm, size_t probs_size, int64_t tokens,
                                   int64_t experts);

/// moe_sort_chunks' checks (C >= 1, one order entry per chunk, no negative chunk, inp and out of
/// rows x C, order a permutation of 0..K-1), every backend's; returns the input chunks' first
/// rows [K + 1] (the last is the row count). InvalidArgument naming what is wrong.
std::vector<int64_t> moe_sort_chunks_starts(std::span<const int64_t> chunk_rows,
                                            std::span<const int64_t> order, size_t inp_size,
                                            size_t out_size, int64_t channels);

/// out[m] = inp[perm.token[m]]. Throws InvalidArgument for lengths that do not match or a token
/// outside [0, N).
template <typename Scalar>
void moe_permute_forward(std::span<Scalar> out,        // [M, C]
                         std::span<const Scalar> inp,  // [N, C]
                         const MoePermutation& perm, int64_t tokens, int64_t channels);
/// dinp[perm.token[m]] += dout[m] (scatter-add).
template <typename Scalar>
void moe_permute_backward(std::span<Scalar> dinp,        // [N, C]
                          std::span<const Scalar> dout,  // [M, C]
                          const MoePermutation& perm, int64_t tokens, int64_t channels);

/// out[n] = sum over rows m with perm.token[m] = n of probs[n, perm.expert[m]] inp[m]; out is
/// overwritten (a token with no row, dropped everywhere, gets 0).
template <typename Scalar>
void moe_unpermute_forward(std::span<Scalar> out,          // [N, C]
                           std::span<const Scalar> inp,    // [M, C]
                           std::span<const Scalar> probs,  // [N, E]
                           const MoePermutation& perm, int64_t tokens, int64_t experts,
                           int64_t channels);
/// Its backward, accumulating: dinp[m] += probs[n, e] dout[n], dprobs[n, e] += dout[n] . inp[m]
/// (n = perm.token[m], e = perm.expert[m]).
template <typename Scalar>
void moe_unpermute_backward(std::span<Scalar> dinp,          // [M, C]
                            std::span<Scalar> dprobs,        // [N, E]
                            std::span<const Scalar> dout,    // [N, C]
                            std::span<const Scalar> inp,     // [M, C]
                            std::span<const Scalar> probs,   // [N, E]
                            const MoePermutation& perm, int64_t tokens, int64_t experts,
                            int64_t channels);

/// Chunk reordering: the input is chunks of chunk_rows[i] rows (i = 0..K-1, in order); output
/// chunk j is input chunk order[j]. `order` must be a permutation of 0..K-1. Its inverse undoes it
/// (the backward of a sort is the sort by the inverse order). InvalidArgument otherwise.
template <typename Scalar>
void moe_sort_chunks(std::span<Scalar> out,                 // [rows, C]
                     std::span<const Scalar> inp,           // [rows, C]
                     std::span<const int64_t> chunk_rows,   // [K]
                     std::span<const int64_t> order,        // [K]
                     int64_t channels);

}  // namespace traintwin::exec::cpu
