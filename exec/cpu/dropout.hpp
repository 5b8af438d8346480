// Inverted dropout (Srivastava et al., JMLR 2014; torch.nn.functional.dropout) with a
// counter-based mask (exec/counter_rng.hpp), so that whether an element is dropped depends only
// on its global coordinates, never on the parallel layout (TP/SP/DP shard) that computes it:
//   keep(e) = counter_uniform(seed, stream, global_index(e)) >= p
//   out = keep ? inp / (1 - p) : 0,   dinp += keep ? dout / (1 - p) : 0
// The backward recomputes the mask from the counter, so nothing is stored between the passes.
// Hidden states: a block [B, T_local, C] holding positions [seq_offset, seq_offset + T_local) of
// the samples [first_sample, first_sample + B), each of T_total positions:
//   global_index(b, t, c) = ((first_sample + b) * T_total + seq_offset + t) * C + c
// Attention probabilities: att[B, NH_local, T, T] where local head h is global head
// head_offset + h of NH_total (tensor parallelism splits the heads):
//   global_index(b, h, t, t2) = (((first_sample + b) * NH_total + head_offset + h) * T + t) * T +
//   t2
// The executor picks `stream` (e.g. stream_id({iteration, layer, site})) so that every dropout
// site of every iteration draws its own mask; `first_sample` is the global index of the sample
// within the iteration (data-parallel rank and micro-batch included). Scalar is float or double.
#pragma once

#include <cstdint>
#include <span>

#include "exec/counter_rng.hpp"

namespace traintwin::exec::cpu {

/// Probability and random stream of one dropout site.
struct DropoutParams {
  double p = 0;         ///< drop probability, in [0, 1)
  uint64_t seed = 0;    ///< run seed
  uint64_t stream = 0;  ///< stream of this site and iteration (exec::stream_id)
};

/// Where a [B, T_local, C] block of hidden states lies in the global [samples, T_total, C].
struct HiddenBlock {
  int64_t batch = 0;         ///< B, samples in the block (>= 1)
  int64_t seq_local = 0;     ///< T_local, positions in the block (>= 1)
  int64_t channels = 0;      ///< C (>= 1)
  int64_t first_sample = 0;  ///< global index of the block's first sample (>= 0)
  int64_t seq_offset = 0;    ///< first position of the block (>= 0)
  int64_t seq_total = 0;     ///< T_total, positions per sample (>= seq_offset + seq_local)
};

/// Where att[B, NH_local, T, T] lies in the global [samples, NH_total, T, T].
struct AttentionBlock {
  int64_t batch = 0;         ///< B (>= 1)
  int64_t heads = 0;         ///< NH_local, heads in the block (>= 1)
  int64_t seq = 0;           ///< T (>= 1)
  int64_t first_sample = 0;  ///< global index of the block's first sample (>= 0)
  int64_t head_offset = 0;   ///< global index of the block's first head (>= 0)
  int64_t heads_total = 0;   ///< NH_total (>= head_offset + heads)
};

/// Forward on hidden states; overwrites `out` (which may not alias `inp`). p == 0 copies `inp`
/// exactly. Throws InvalidArgument for p outside [0, 1), a size < 1, a block outside its global
/// tensor, or a span whose length does not match B * T_local * C.
template <typename Scalar>
void dropout_forward(std::span<Scalar> out,        // [B, T_local, C]
                     std::span<const Scalar> inp,  // [B, T_local, C]
                     const DropoutParams& params, const HiddenBlock& block);

/// Backward on hidden states: dinp += dout * keep / (1 - p), with the forward's mask.
/// Throws as dropout_forward.
template <typename Scalar>
void dropout_backward(std::span<Scalar> dinp,        // [B, T_local, C]
                      std::span<const Scalar> dout,  // [B, T_local, C]
                      const DropoutParams& params, const HiddenBlock& block);

/// Forward on attention probabilities; as dropout_forward with the attention index.
template <typename Scalar>
void attention_dropout_forward(std::span<Scalar> out,        // [B, NH_local, T, T]
                               std::span<const Scalar> inp,  // [B, NH_local, T, T]
                               const DropoutParams& params, const AttentionBlock& block);

/// Backward on attention probabilities; as dropout_backward with the attention index.
template <typename Scalar>
void attention_dropout_backward(std::span<Scalar> dinp,        // [B, NH_local, T, T]
                                std::span<const Scalar> dout,  // [B, NH_local, T, T]
                                const DropoutParams& params, const AttentionBlock& block);

/// Megatron's bias_dropout_add on hidden states (exec/cuda/dropout.hpp has the same contract):
///   out = residual + keep ? (inp + bias[c]) / (1 - p) : 0
/// `bias` ([C]) and `residual` may be empty (then that term is absent); `out` must not alias
/// `inp` or `residual`. The sum inp + bias is rounded to Scalar before the scale, as the unfused
/// sequence (bias add, dropout_forward, residual add) does, so both give identical bits.
/// Throws InvalidArgument as dropout_forward, or for a bias of other than C elements.
template <typename Scalar>
void bias_dropout_add_forward(std::span<Scalar> out,             // [B, T_local, C]
                              std::span<const Scalar> inp,       // [B, T_local, C]
                              std::span<const Scalar> bias,      // [C] or empty
                              std::span<const Scalar> residual,  // [B, T_local, C] or empty
                              const DropoutParams& params, const HiddenBlock& block);

/// Backward of bias_dropout_add_forward, accumulating:
///   dinp += g,  dresidual += dout,  dbias[c] += sum over rows of g,  g = keep dout / (1 - p)
/// with the rows summed in memory order. dbias and dresidual may be empty.
template <typename Scalar>
void bias_dropout_add_backward(std::span<Scalar> dinp,       // [B, T_local, C]
                               std::span<Scalar> dbias,      // [C] or empty
                               std::span<Scalar> dresidual,  // [B, T_local, C] or empty
                               std::span<const Scalar> dout, // [B, T_local, C]
                               const DropoutParams& params, const HiddenBlock& block);

/// Mask index of element (b, h, t, t2) of an AttentionBlock:
/// (((first_sample + b) x NH_total + head_offset + h) x T + t) x T + t2.
inline uint64_t attention_dropout_index(const AttentionBlock& k, int64_t b, int64_t h, int64_t t,
                                        int64_t t2) {
  return static_cast<uint64_t>(
      (((k.first_sample + b) * k.heads_total + k.head_offset + h) * k.seq + t) * k.seq + t2);
}

/// True when the element with mask index `index` survives: counter_uniform(seed, stream, index)
/// >= p.
inline bool dropout_keep(const DropoutParams& params, uint64_t index) {
  return counter_uniform(params.seed, params.stream, index) >= params.p;
}

}  // namespace traintwin::exec::cpu
