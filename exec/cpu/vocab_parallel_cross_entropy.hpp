// Vocab-parallel softmax cross-entropy (Megatron-LM megatron/core/tensor_parallel/
// cross_entropy.py, _VocabParallelCrossEntropy), split into the steps between the TP
// all-reduces. This TP rank holds the logits of vocabulary entries [vocab_start, vocab_start +
// V_local) as logits_local[B*T, V_local] (the output of the column-parallel LM head). Per row i:
//   (a) logits_max_local[i] = max_v logits_local[i, v]
//       -> executor: all-reduce MAX over TP gives the global max m[i]
//   (b) sum_exp_local[i]      = sum_v exp(logits_local[i, v] - m[i])
//       target_logit_local[i] = logits_local[i, target[i] - vocab_start] if the target is in this
//                               rank's range, else 0
//       -> executor: all-reduce SUM over TP of both gives sum_exp[i] and target_logit[i]
//   (c) loss[i] = log(sum_exp[i]) + m[i] - target_logit[i]
//   (d) dlogits_local[i, v] += (exp(logits_local[i, v] - m[i]) / sum_exp[i]
//                               - 1[vocab_start + v == target[i]]) * dloss[i]
// With one shard (vocab_start = 0, V_local = V_total) and no all-reduces this is exactly the
// unsharded softmax cross-entropy of exec/cpu/cross_entropy.hpp. Megatron carries the max-shifted
// target logit (target_logit - m) through the all-reduce instead; the sum is the same.
// Label smoothing (Megatron --label-smoothing) is not implemented. B = batch, T = seq.
// Scalar is float or double. float computes exp with exp_approx (exec/cpu/vector_math.hpp,
// relative error <= 3e-7) in vectorized row loops, the max and the sum over 16 lanes in a fixed
// order; double uses std::exp (the reference of the float64 tests).
#pragma once

#include <cstdint>
#include <span>

namespace traintwin::exec::cpu {

/// Step (a): the max of each row of the local logits. Throws InvalidArgument for a size < 1 or a
/// span whose length does not match its shape.
template <typename Scalar>
void vocab_parallel_logits_max(std::span<Scalar> logits_max_local,    // [B, T]
                               std::span<const Scalar> logits_local,  // [B, T, V_local]
                               int64_t batch, int64_t seq, int64_t vocab_local);

/// Step (b): the local sum of exp(logit - global max) and the local target logit (0 where the
/// target is on another rank); overwrites both outputs. `logits_max` is the all-reduced (MAX)
/// global max. Throws InvalidArgument for a size < 1, a span whose length does not match its
/// shape, a shard outside [0, V_total), or a target outside [0, V_total).
template <typename Scalar>
void vocab_parallel_sum_exp(std::span<Scalar> sum_exp_local,       // [B, T]
                            std::span<Scalar> target_logit_local,  // [B, T]
                            std::span<const Scalar> logits_local,  // [B, T, V_local]
                            std::span<const Scalar> logits_max,    // [B, T] global
                            std::span<const int32_t> targets,      // [B, T] global ids
                            int64_t batch, int64_t seq, int64_t vocab_start, int64_t vocab_local,
                            int64_t vocab_total);

/// Step (c): the loss per position from the all-reduced pieces; overwrites `losses`.
/// Throws InvalidArgument for a size < 1 or a span whose length does not match its shape.
template <typename Scalar>
void vocab_parallel_cross_entropy_loss(std::span<Scalar> losses,              // [B, T]
                                       std::span<const Scalar> sum_exp,       // [B, T] global
                                       std::span<const Scalar> logits_max,    // [B, T] global
                                       std::span<const Scalar> target_logit,  // [B, T] global
                                       int64_t batch, int64_t seq);

/// Step (d): backward through softmax and cross-entropy for the local vocabulary slice;
/// accumulates (+=) into dlogits_local. `logits_max` and `sum_exp` are the global (all-reduced)
/// values of the forward; for the mean loss dlosses = 1 / (B*T) (as llm.c). No communication
/// is needed. Throws as vocab_parallel_sum_exp.
template <typename Scalar>
void vocab_parallel_cross_entropy_backward(std::span<Scalar> dlogits_local,       // [B, T, V_local]
                                           std::span<const Scalar> dlosses,       // [B, T]
                                           std::span<const Scalar> logits_local,  // [B, T, V_local]
                                           std::span<const Scalar> logits_max,    // [B, T] global
                                           std::span<const Scalar> sum_exp,       // [B, T] global
                                           std::span<const int32_t> targets,      // [B, T]
                                           int64_t batch, int64_t seq, int64_t vocab_start,
                                           int64_t vocab_local, int64_t vocab_total);

}  // namespace traintwin::exec::cpu
