// The router of a mixture-of-experts layer (Megatron-Core TopKRouter with
// moe_router_load_balancing_type aux_loss | none), after its GEMM (logits = x W_router^T, the
// ordinary matmul layer; W_router [E, h], no bias):
//
//  1. top-k selection and gates, Megatron-Core's default order (moe_router_pre_softmax off,
//     megatron/core/transformer/moe/moe_utils.py topk_softmax_with_capacity): top-k on the LOGITS,
//     then softmax over the k selected logits only; gates[n, e] = that softmax for the selected
//     experts e of token n, 0 elsewhere (Megatron's topk_masked_gates).
//  2. capacity (moe_expert_capacity_factor set): capacity C = ceil(N k / E x factor)
//     (get_capacity(num_tokens x topk, E, factor)); each expert keeps the C tokens with the largest
//     gates (drop policy "probs", Megatron's default), the rest of its tokens are dropped. With
//     moe_pad_expert_input_to_capacity each expert gets exactly C tokens: its routing map is those C
//     tokens, routed or not (a token that is not routed to it has gate 0: padding). Dropless
//     (capacity < 1 here): the routing map is the top-k map.
//  3. probs = gates x routing_map: the weights of unpermute's weighted sum.
//  4. the Switch Transformer load-balancing loss (Fedus et al. 2021 eq. 4, Megatron's
//     switch_load_balancing_loss_func): aux = coeff x E / (T^2 k) x sum_e P_e f_e, where
//     P_e = sum over this rank's tokens of softmax(logits)[n, e] (softmax over ALL E experts),
//     f_e = tokens routed to e by the top-k (before capacity), summed over the sequence-partition
//     group (TP under sequence parallelism), T = tokens of that group. The 1/k normalizes f to
//     fractions of the N k routed slots, so uniform routing gives aux = coeff.
//
// Ties: top-k prefers the smaller expert index, the capacity top-k the smaller token index
// (torch.topk leaves ties unspecified; selection is piecewise constant, so only the order of
// equal logits matters and the gradients do not). N = tokens, E = experts, k = topk.
// Scalar is float or double.
#pragma once

#include <cstdint>
#include <span>

namespace traintwin::exec::cpu {

/// Megatron's get_capacity(num_tokens x topk, num_experts, capacity_factor):
/// ceil(tokens x topk / experts x capacity_factor). InvalidArgument for sizes < 1 or a factor
/// that is not finite and > 0.
int64_t moe_expert_capacity(int64_t tokens, int64_t topk, int64_t experts,
                            double capacity_factor);

/// The checks of moe_topk_softmax_forward, every backend's (sizes of its operands): InvalidArgument
/// for sizes < 1, topk > E, pad_to_capacity without a capacity, or a length other than N x E
/// (E for tokens_per_expert).
void check_moe_router_forward(size_t logits, size_t gates, size_t topk_map, size_t routing_map,
                              size_t probs, size_t tokens_per_expert, int64_t tokens,
                              int64_t experts, int64_t topk, int64_t capacity,
                              bool pad_to_capacity);

/// The checks of moe_topk_softmax_backward (sizes of its operands), every backend's.
void check_moe_router_backward(size_t dlogits, size_t dprobs, size_t gates, size_t topk_map,
                               size_t routing_map, int64_t tokens, int64_t experts);

/// The checks of the Switch aux loss's forward and backward (`logits` is dlogits' size in the
/// backward), every backend's: sizes >= 1, total_tokens >= N, lengths N x E and E.
void check_moe_aux_loss(size_t scores, size_t logits, size_t tokens_per_expert, int64_t tokens,
                        int64_t experts, int64_t total_tokens, int64_t topk);

/// The Switch loss's scale coeff x E / (total_tokens^2 x topk) (Fedus et al. 2021 eq. 4 with
/// Megatron's normalization), every backend's.
double moe_aux_loss_scale(int64_t experts, int64_t total_tokens, int64_t topk, double coeff);

/// Forward of steps 1-3. `capacity` <= 0: dropless; else the per-expert capacity
/// (moe_expert_capacity), `pad_to_capacity` as moe_pad_expert_input_to_capacity (requires a
/// capacity). Writes gates, topk_map (0/1), routing_map (0/1), probs = gates x routing_map, and
/// tokens_per_expert[e] = column sums of topk_map (before capacity, as Megatron's
/// tokens_per_expert that the aux loss uses). Throws InvalidArgument for sizes < 1, topk > E,
/// pad_to_capacity without a capacity, or span lengths that do not match.
template <typename Scalar>
void moe_topk_softmax_forward(std::span<Scalar> gates,               // [N, E]
                              std::span<uint8_t> topk_map,           // [N, E]
                              std::span<uint8_t> routing_map,        // [N, E]
                              std::span<Scalar> probs,               // [N, E]
                              std::span<int64_t> tokens_per_expert,  // [E]
                              std::span<const Scalar> logits,        // [N, E]
                              int64_t tokens, int64_t experts, int64_t topk, int64_t capacity,
                              bool pad_to_capacity);

/// Backward of probs = (softmax over the top-k of logits) x routing_map; accumulates (+=) into
/// dlogits: for the selected experts S of token n, with d_e = dprobs[n, e] routing_map[n, e],
/// dlogits[n, e] += gates[n, e] (d_e - sum_{j in S} gates[n, j] d_j); 0 for e outside S (top-k
/// selection is piecewise constant). Throws InvalidArgument as the forward.
template <typename Scalar>
void moe_topk_softmax_backward(std::span<Scalar> dlogits,              // [N, E]
                               std::span<const Scalar> dprobs,         // [N, E]
                               std::span<const Scalar> gates,          // [N, E]
                               std::span<const uint8_t> topk_map,      // [N, E]
                               std::span<const uint8_t> routing_map,   // [N, E]
                               int64_t tokens, int64_t experts);

/// The Switch load-balancing loss of step 4 on this rank's tokens. Writes scores = softmax(logits)
/// over all experts (saved for the backward) and returns
///   coeff x E / (total_tokens^2 x topk) x sum_e (sum_n scores[n, e]) x tokens_per_expert[e].
/// `tokens_per_expert` is already summed over the sequence-partition group and `total_tokens`
/// counts that group's tokens (N x its size). Throws InvalidArgument for sizes < 1,
/// total_tokens < N, or lengths that do not match.
template <typename Scalar>
Scalar moe_switch_aux_loss_forward(std::span<Scalar> scores,                    // [N, E]
                                   std::span<const Scalar> logits,              // [N, E]
                                   std::span<const int64_t> tokens_per_expert,  // [E]
                                   int64_t tokens, int64_t experts, int64_t total_tokens,
                                   int64_t topk, double coeff);

/// Its backward: dlogits += daux x d aux / d logits (tokens_per_expert is constant):
/// with c_e = coeff E / (T^2 k) tokens_per_expert[e],
/// dlogits[n, e] += daux scores[n, e] (c_e - sum_j scores[n, j] c_j).
template <typename Scalar>
void moe_switch_aux_loss_backward(std::span<Scalar> dlogits,                   // [N, E]
                                  Scalar daux,
                                  std::span<const Scalar> scores,              // [N, E]
                                  std::span<const int64_t> tokens_per_expert,  // [E]
                                  int64_t tokens, int64_t experts, int64_t total_tokens,
                                  int64_t topk, double coeff);

}  // namespace traintwin::exec::cpu
