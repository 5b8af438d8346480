// The optimizer side of one rank's shard: the distributed optimizer's (ZeRO-1, and the optimizer
// side of ZeRO-2/3) partition of every tensor over the DP ranks (under HSDP, over the sharding
// group), the local part of the global gradient norm, clipping and the AdamW
// step, every kernel through the Backend.
//
// With the distributed optimizer DP rank d owns piece d of every tensor: elements
// [d x P, (d+1) x P) with P = ceil(numel / DP). It updates only those (AdamW, grad norm); the
// bucket's gradient reduce-scatter brings it the reduced pieces and the parameter all-gather
// brings every rank the others' updated pieces (the walk, exec/executor.cpp). Sharding per tensor
// (Megatron shards each bucket's flat range) makes the word embedding of the first stage and its
// LM-head copy on the last stage share one partition, so the tied-embedding all-reduce that
// follows the DP reduce-scatter adds matching pieces (Megatron gets the same by giving the shared
// embedding its own bucket).
#pragma once

#include <cstdint>
#include <utility>

#include "core/rank_layout.hpp"
#include "exec/backend.hpp"
#include "exec/gpt_model.hpp"
#include "exec/model_shard.hpp"

namespace traintwin::exec {

/// Partition, gradient norm and step of one rank's shard. Holds references to the shard,
/// backend and hyper-parameters, which must outlive it.
class ShardOptimizer {
 public:
  /// `distributed`: the distributed optimizer (ZeRO-1) over `dp` ranks, else every rank owns
  /// every element. `replica`: under HSDP this rank's index in its replica group (the ranks of
  /// the other sharding groups holding the same pieces); only replica 0 counts its dense pieces
  /// in the gradient norm.
  ShardOptimizer(ModelShard& shard, Backend& backend, const RankCoord& coord, int64_t dp,
                 bool distributed, const TrainingHyperparameters& hyper, int64_t replica = 0);

  /// The size of the group `t`'s gradients are reduced over: DP, or expert-DP for an expert
  /// weight.
  int64_t members(const ShardTensor& t) const { return t.expert ? edp_ : dp_; }
  /// This rank's position in that group: its DP or expert-DP coordinate.
  int64_t member(const ShardTensor& t) const { return t.expert ? edp_rank_ : coord_.dp; }
  /// Elements of `t` in each member's piece (ceil(numel / members(t))).
  int64_t piece(const ShardTensor& t) const { return (t.numel + members(t) - 1) / members(t); }
  /// [begin, end) of the elements of `t` member `d` of its group owns (everything without the
  /// distributed optimizer).
  std::pair<int64_t, int64_t> owned(const ShardTensor& t, int64_t d) const;

  /// Local sum of squares of the gradients this rank owns for the norm: TP-sharded tensors (ETP
  /// for experts), and replicated ones on TP rank 0 only; the LM head's copy of the word
  /// embedding not at all (counted on the first stage), as Megatron's get_grad_norm_fp32, nor
  /// DualPipe's second parameter copy (ChunkShard::mirror_copy: counted on the mirror rank's
  /// chunk 0); with the distributed optimizer only this rank's pieces. `over_world`: the norm's all-reduce spans
  /// every rank (the distributed optimizer, or MoE with experts outside TP x PP), so replicas
  /// over DP (expert-DP) count on DP (expert-DP) rank 0 only; else it spans TP x PP and every
  /// DP replica computes the whole norm.
  double local_sum_of_squares(bool over_world);

  struct Step {
    double grad_norm = 0;      ///< global L2 norm before clipping
    double learning_rate = 0;  ///< of this step
  };
  /// Megatron's zero_grad_buffer: every gradient of the shard (not only the owned pieces) set to 0.
  void zero_grad_buffer();
  /// Megatron clip_grad_norm_fp32's scale: the owned pieces' gradients (what step() reads) times
  /// min(1, hyper.clip_grad / (norm + 1e-6)) (cpu::clip_coefficient), norm =
  /// sqrt(global_sum_of_squares); 1 when hyper.clip_grad is 0. The multiply runs also when the
  /// coefficient is 1 (x * 1.0f == x: the values are unchanged), so the op costs the same on every
  /// iteration, as the Program's grad_clip_scale kernel. Throws Error, before touching anything,
  /// when the norm is not finite.
  void clip(double global_sum_of_squares, int64_t iteration);
  /// AdamW with learning_rate(hyper.lr, iteration) on the owned pieces (clip() runs before it
  /// when clipping). Throws Error, before touching anything, when the norm is not finite.
  Step step(double global_sum_of_squares, int64_t iteration);

 private:
  ModelShard& shard_;
  Backend& backend_;
  RankCoord coord_;
  int64_t dp_ = 1;
  int64_t edp_ = 1;
  int64_t edp_rank_ = 0;
  bool distributed_ = false;
  int64_t replica_ = 0;
  const TrainingHyperparameters& hyper_;

  /// sqrt(global_sum_of_squares); throws Error naming the iteration when not finite.
  static double checked_norm(double global_sum_of_squares, int64_t iteration);
  /// Calls f(params, grads, exp_avg, exp_avg_sq, tensor) on the owned piece of every tensor.
  template <typename F>
  void for_each_owned(F&& f);
};

}  // namespace traintwin::exec
