// The parameters one rank holds (its model chunks' share under TP/PP), as flat fp32 buffers the
// executor's kernels, collectives, optimizer and checkpoints work on.
//
// Per model chunk c (virtual stage vs = c x PP + pp), tensors are laid out in the order their
// gradients become ready in backward — the order of Megatron's DDP buffers and of the Program's
// gradient buckets (core/program.cpp, plan_buckets):
//   item -1 (last virtual stage only): final_layernorm.weight [h], final_layernorm.bias [h], and
//            when PP > 1 output_layer.weight [V_local, h] (the LM head's copy of the tied word
//            embedding; PP == 1 uses the word embedding itself);
//   item l for each layer of the chunk, last layer first (global layer index l):
//            layers.l.input_layernorm.weight [h], .bias [h],
//            layers.l.self_attention.linear_qkv.weight [3h/t, h], .bias [3h/t],
//            layers.l.self_attention.linear_proj.weight [h, h/t], .bias [h],
//            layers.l.pre_mlp_layernorm.weight [h], .bias [h],
//            layers.l.mlp.linear_fc1.weight [ffn/t, h], .bias [ffn/t],
//            layers.l.mlp.linear_fc2.weight [h, ffn/t], .bias [h];
//   item -2 (virtual stage 0 only): embedding.word_embeddings.weight [V_local, h],
//            embedding.position_embeddings.weight [s, h].
// t = TP, V_local = padded_vocab_size(V, t) / t (rows [tp x V_local, (tp+1) x V_local) of the
// padded table). Weights are stored [out, in] (nn.Linear layout).
//
// Tensor-parallel split (Megatron): QKV rows for this rank's heads of q, then k, then v (local
// [q | k | v], each h/t rows: global rows part x h + tp x h/t + i for part 0, 1, 2); FC1 rows
// [tp x ffn/t, (tp+1) x ffn/t); projection and FC2 columns [tp x h/t, ...) / [tp x ffn/t, ...);
// LayerNorms, row-parallel biases and the position embedding replicated.
//
// Initialization is layout independent: element (i, j) of a global tensor [rows, cols] is
// counter_normal(seed, stream_id of the tensor's global name, i x cols + j) x std, so every
// TP/PP layout starts from bitwise the same model. std = init_method_std, and
// init_method_std / sqrt(2 x num_layers) for linear_proj and linear_fc2 weights (Megatron's
// scaled_init_method_normal; Shoeybi et al. 2019); biases 0; LayerNorm weights 1, biases 0;
// padded vocabulary rows (ids >= V) 0; output_layer.weight is initialized as the word embedding
// it copies (same name stream: "embedding.word_embeddings.weight").
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/rank_layout.hpp"
#include "core/scenario.hpp"

namespace traintwin::exec {

/// One tensor of a chunk's flat buffers.
struct ShardTensor {
  std::string name;              ///< Megatron-style global name, e.g. "layers.3.mlp.linear_fc1.weight"
  int32_t item = 0;              ///< -1 head, -2 embedding, else the global layer index
  int64_t offset = 0;            ///< first element in the chunk's buffers
  std::vector<int64_t> shape;    ///< local shape
  int64_t numel = 0;
  bool tensor_parallel = false;  ///< sharded over TP (else replicated on every TP rank)
  bool weight_decay = true;      ///< false for biases and LayerNorm parameters (Megatron)
  bool shared_embedding = false; ///< output_layer.weight on the last stage (a copy; PP > 1)
  /// Replicated over TP but computed from sequence-parallel shards: LayerNorm weights/biases and
  /// row-parallel biases; their gradients are all-reduced over TP when SP is on.
  bool sequence_parallel_grad = false;
};

/// Flat buffers of one model chunk: parameters, gradients and AdamW moments, same layout.
struct ChunkShard {
  int64_t chunk = 0;
  int64_t virtual_stage = 0;
  std::vector<ShardTensor> tensors;  ///< in buffer order (backward order, see file comment)
  std::vector<float> params, grads, exp_avg, exp_avg_sq;
};

/// The parameters of one rank. Throws InvalidArgument when the scenario's layout does not divide
/// the model (as parameters_on_rank) or `coord` is outside it.
class ModelShard {
 public:
  ModelShard(const Scenario& s, const RankCoord& coord, uint64_t seed, double init_method_std);

  const Scenario& scenario() const { return scenario_; }
  const RankCoord& coord() const { return coord_; }
  int64_t vocab_local() const { return vocab_local_; }   ///< padded_vocab_size(V, t) / t
  int64_t vocab_start() const { return vocab_local_ * coord_.tp; }

  std::vector<ChunkShard>& chunks() { return chunks_; }
  const std::vector<ChunkShard>& chunks() const { return chunks_; }

  /// The tensor named `name` in chunk `chunk` (InvalidArgument naming it when absent).
  const ShardTensor& tensor(int64_t chunk, const std::string& name) const;
  /// Views of that tensor's parameters / gradients.
  std::span<float> param(int64_t chunk, const std::string& name);
  std::span<float> grad(int64_t chunk, const std::string& name);

  /// [begin, end) of the chunk's buffers covering the items `items` (as Op::bucket_layers);
  /// InvalidArgument when an item is not in the chunk or the items are not contiguous.
  std::pair<int64_t, int64_t> item_range(int64_t chunk, std::span<const int32_t> items) const;

  /// Total parameters over all chunks (= parameters_on_rank(s, pp)).
  int64_t num_parameters() const;

  /// Sets every gradient to 0.
  void zero_grads();

 private:
  Scenario scenario_;
  RankCoord coord_;
  int64_t vocab_local_ = 0;
  std::vector<ChunkShard> chunks_;
};

}  // namespace traintwin::exec
