// The parameters one rank holds (its model chunks' share under TP/PP), as flat fp32 buffers the
// executor's kernels, collectives, optimizer and checkpoints work on. The buffers live in a
// Backend's memory (host memory for the CPU backend, device memory for CUDA: exec/backend.hpp);
// they are initialized on the host and uploaded, and checkpoints download and upload them.
//
// Per model chunk c (virtual stage vs = c x PP + pp, or the V of core/schedule.hpp
// virtual_stage_of), tensors are laid out in the order their
// gradients become ready in backward — the order of Megatron's DDP buffers and of the Program's
// gradient buckets (core/rank_lowering_optimizer.cpp, plan_buckets):
//   item -1 (a stage that computes the loss: the last virtual stage, under DualPipe also
//            p - 1; core/schedule.hpp computes_loss): final_layernorm.weight [h],
//            final_layernorm.bias [h], and when PP > 1 output_layer.weight [V_local, h] (the LM
//            head's copy of the tied word embedding; PP == 1, the V and DualPipe use the word
//            embedding on the same rank itself: head_has_own_weight);
//   item l for each layer of the chunk, last layer first (global layer index l):
//            layers.l.input_layernorm.weight [h], .bias [h],
//            layers.l.self_attention.linear_qkv.weight [3h/t, h], .bias [3h/t],
//            layers.l.self_attention.linear_proj.weight [h, h/t], .bias [h],
//            layers.l.pre_mlp_layernorm.weight [h], .bias [h],
//            layers.l.mlp.linear_fc1.weight [ffn/t, h], .bias [ffn/t],
//            layers.l.mlp.linear_fc2.weight [h, ffn/t], .bias [h];
//   item -2 (a stage that takes the embedding: virtual stage 0, under DualPipe also p;
//            core/schedule.hpp takes_embedding): embedding.word_embeddings.weight [V_local, h],
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
//
// Mixture of experts (model.num_moe_experts E > 0; Megatron-Core's MoELayer names): an MoE layer
// l (ModelSpec::is_moe_layer) holds, instead of mlp.linear_fc1/fc2,
//   layers.l.mlp.router.weight [E, h] (replicated over TP; under SP its gradient joins the
//            LayerNorm-gradient all-reduce, Megatron's `sequence_parallel` attribute; std as FC1),
//   with a shared expert (moe_shared_expert_intermediate_size f_s > 0):
//   layers.l.mlp.shared_experts.linear_fc1.weight [f_s/t (x2 SwiGLU), h], .linear_fc2.weight
//            [h, f_s/t], TP-split as the dense MLP,
// and, in the chunk's EXPERT region (after every dense tensor of the chunk, own DDP buckets reduced
// over expert-DP), for each MoE layer of the chunk, last layer first, for the E/EP local experts
// of this EP rank (global expert index x = ep E/EP + j, j = 0 .. E/EP - 1):
//   layers.l.mlp.experts.linear_fc1.weight<x> [ffn_e/ETP (x2 SwiGLU), h] for every j, then
//   layers.l.mlp.experts.linear_fc2.weight<x> [h, ffn_e/ETP] for every j (TEGroupedMLP's names),
// so each layer's local FC1 (FC2) weights form one [E/EP, out, in] array for the grouped GEMM.
// ffn_e = moe_expert_ffn(); ETP = expert_tp(). Expert weights are split over ETP as the dense MLP
// over TP and initialized from their global names, so every EP/ETP layout starts from the same
// model. MoE layers have no linear biases (Megatron's grouped GEMM has none).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/rank_layout.hpp"
#include "core/scenario.hpp"
#include "exec/backend.hpp"

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
  bool shared_embedding = false; ///< output_layer.weight on the last stage (a copy: head_has_own_weight)
  /// Replicated over TP but computed from sequence-parallel shards: LayerNorm weights/biases,
  /// row-parallel biases and the MoE router weight; their gradients are all-reduced over TP when
  /// SP is on.
  bool sequence_parallel_grad = false;
  /// A routed expert's weight: in the chunk's expert region, reduced over expert-DP (GroupKind
  /// kEdp), its optimizer state sharded over expert-DP; tensor_parallel then means "split over
  /// ETP".
  bool expert = false;
};


/// Flat buffers of one model chunk: parameters, gradients and AdamW moments, same layout, in
/// the memory of the shard's Backend (never dereferenced on the host unless it is the CPU's).
struct ChunkShard {
  int64_t chunk = 0;
  int64_t virtual_stage = 0;
  /// DualPipe (core/schedule.hpp bidirectional): chunk 1, the reverse direction's copy of stage
  /// p - 1 - r, whose parameters equal chunk 0 of the mirror rank p - 1 - r (the gradients are
  /// all-reduced over the pair, so both copies take the same step); the gradient norm counts
  /// each stage once, on its chunk 0.
  bool mirror_copy = false;
  std::vector<ShardTensor> tensors;  ///< in buffer order (backward order, see file comment)
  Tensor params, grads, exp_avg, exp_avg_sq;
};

/// The parameters of one rank. An MoE model's rank takes its expert coordinates (ETP, EP and
/// expert-DP ranks) from layout_of(s).expert_coord() of its global rank (Megatron-Core's parallel
/// folding). Throws InvalidArgument when the scenario's layout does not divide the model (as
/// parameters_on_rank; for MoE also: EP must divide num_moe_experts, ETP the expert width, TP the
/// shared expert's) or `coord` is outside it; UnsupportedError for an MoE model with
/// model.add_bias_linear.
class ModelShard {
 public:
  /// Buffers in `backend`'s memory (which must outlive the shard); without one, in the memory of
  /// a process-wide CPU backend (cpu::host_backend()).
  ModelShard(const Scenario& s, const RankCoord& coord, uint64_t seed, double init_method_std);
  ModelShard(const Scenario& s, const RankCoord& coord, uint64_t seed, double init_method_std,
             Backend& backend);

  /// The backend whose memory holds the buffers.
  Backend& backend() const { return *backend_; }

  const Scenario& scenario() const { return scenario_; }
  const RankCoord& coord() const { return coord_; }
  /// This rank's coordinates in the expert groups (all 0 for a dense model).
  const ExpertCoord& expert_coord() const { return expert_; }
  /// Routed experts held by this rank per MoE layer (E / EP; 0 for a dense model) and the first
  /// one's global index.
  int64_t local_experts() const { return local_experts_; }
  int64_t first_local_expert() const { return local_experts_ * expert_.ep; }
  int64_t vocab_local() const { return vocab_local_; }   ///< padded_vocab_size(V, t) / t
  int64_t vocab_start() const { return vocab_local_ * coord_.tp; }

  /// Whether the last virtual stage holds an LM head weight of its own (output_layer.weight):
  /// untied, or tied with the last virtual stage on another pipeline rank than the embedding
  /// (Megatron's shared copy, summed by the embedding group's all-reduce). Else (PP 1, or the V
  /// placement of zb-v and dualpipev, whose last virtual stage is on rank 0, or dualpipe, whose
  /// end ranks both take the embedding and compute the loss) the head reads and accumulates into
  /// the word embedding of the rank's chunk that takes the embedding (core/params.cpp counts the
  /// same one copy).
  bool head_has_own_weight() const { return head_copy_; }

  std::vector<ChunkShard>& chunks() { return chunks_; }
  const std::vector<ChunkShard>& chunks() const { return chunks_; }

  /// The tensor named `name` in chunk `chunk` (InvalidArgument naming it when absent).
  const ShardTensor& tensor(int64_t chunk, const std::string& name) const;
  /// Views of that tensor's parameters / gradients (backend memory).
  std::span<float> param(int64_t chunk, const std::string& name);
  std::span<float> grad(int64_t chunk, const std::string& name);

  /// [begin, end) of the chunk's buffers covering the items `items` (as Op::bucket_layers): of
  /// the dense tensors, or with `experts` of the expert region (a bucket reduced over kEdp);
  /// InvalidArgument when an item is not in that part of the chunk or the items are not
  /// contiguous.
  std::pair<int64_t, int64_t> item_range(int64_t chunk, std::span<const int32_t> items,
                                         bool experts = false) const;

  /// Total parameters over all chunks (= parameters_on_rank(s, pp)).
  int64_t num_parameters() const;

 private:
  Backend* backend_ = nullptr;
  Scenario scenario_;
  RankCoord coord_;
  ExpertCoord expert_;
  int64_t local_experts_ = 0;
  int64_t vocab_local_ = 0;
  bool head_copy_ = false;
  std::vector<ChunkShard> chunks_;
};

}  // namespace traintwin::exec
