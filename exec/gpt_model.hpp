// The model math of the trainer executor: the forward and backward of every Role of the GPT model
// (GPT-2 / Megatron-LM's GPTModel: vocab-parallel embedding + learned positions, pre-LN
// transformer layers with column/row-parallel attention and MLP, final LayerNorm, LM head tied to
// the word embedding, vocab-parallel cross-entropy) on one micro-batch of one model chunk, with
// every kernel run through the Backend (exec/backend.hpp). The walk (exec/executor.cpp) decides
// when each Role runs and moves the tensors between ranks; this file decides what it computes,
// and reads top-down like llm.c's gpt2_forward / gpt2_backward: layer_forward lists a layer's
// Roles in forward order, layer_backward in backward order.
//
// Layouts: activations [b, s, h]; sequence-parallel regions [b, s/t, h] (Tl = s/t with SP, else
// s); Hl = h/t, F = ffn/t, V_local = padded vocabulary / t (shapes as trailing comments). Tensors
// whose last use is passed are freed at once, so the activation memory follows the schedule's
// in-flight micro-batches as the simulator's memory model counts them.
// Under context parallelism s is this CP rank's s / CP positions (Megatron-Core's load-balanced
// chunks, cp_sequence.hpp), and the attention core is ring attention (or all-gather CP) over the
// CP group, one blockwise-attention block per K/V block (see gpt_model_attention.cpp).
//
// The member functions live in files by concept, like llm.c's layers: exec/gpt_model.cpp (state,
// dispatch, embedding, head; its opening comment is the table of contents),
// exec/gpt_model_layer.cpp, exec/gpt_model_attention.cpp, exec/gpt_model_moe.cpp. Next in the
// flow: exec/gpt_model.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/pipeline_split.hpp"
#include "core/program.hpp"
#include "exec/cp_sequence.hpp"
#include "exec/backend.hpp"
#include "exec/cpu/adamw.hpp"
#include "exec/cpu/moe_permute.hpp"
#include "exec/linear.hpp"
#include "exec/lr_schedule.hpp"
#include "exec/model_shard.hpp"

namespace traintwin::exec {

/// Training hyper-parameters the executor needs (from the scenario's training section).
struct TrainingHyperparameters {
  uint64_t seed = 1234;
  double hidden_dropout = 0;        ///< dropout after the embedding and both residual branches
  double attention_dropout = 0;     ///< dropout of the attention probabilities
  double clip_grad = 1.0;           ///< global-norm clipping threshold; 0 = no clipping
  cpu::AdamWParams adam;
  LearningRateSchedule lr;
};

/// Tokens and labels of one micro-batch of this rank's DP replica: `mb` in [0, m); both spans are
/// [b, s]. Called on the first (tokens) and last (labels) virtual stages only.
using MicroBatchSource =
    std::function<void(int64_t mb, std::span<int32_t> tokens, std::span<int32_t> labels)>;

/// Sizes of this rank's shard of the model and of one micro-batch.
struct ShardGeometry {
  int64_t b = 0;       ///< micro-batch size
  int64_t s = 0;       ///< positions held by this rank: the sequence length / CP
  int64_t s_full = 0;  ///< the whole sequence length
  int64_t cp = 1;      ///< context-parallel size (the sequence in 2 CP chunks, cp_sequence.hpp)
  /// Attention by the blockwise kernel (no s x s store): attention_backend flash, and every
  /// block of ring attention under CP; else the unfused kernels that keep the probabilities.
  bool blockwise = false;
  /// attention_backend fused (CP = 1): the Backend's fused attention over the QKV rows, one call
  /// per pass (blockwise as well: no s x s store).
  bool fused = false;
  double rotary_base = 10000.0;  ///< RoPE's base (model.rotary_base)
  int64_t h = 0;       ///< hidden size
  int64_t t = 0;       ///< tensor-parallel size
  int64_t hl = 0;      ///< h / t
  int64_t f = 0;       ///< ffn_hidden_size / t
  int64_t heads = 0;   ///< attention heads / t
  int64_t groups = 0;  ///< query groups (key/value heads) / t
  int64_t hd = 0;      ///< head_dim
  int64_t qkv = 0;     ///< local QKV width (heads + 2 groups) hd
  int64_t fc1 = 0;     ///< local FC1 width: 2 f with SwiGLU, else f
  bool rmsnorm = false;   ///< RMSNorm (no bias) instead of LayerNorm
  bool rope = false;      ///< rotary position embedding instead of learned positions
  bool gqa = false;       ///< grouped-query attention kernel (query groups < heads)
  bool untied = false;    ///< the LM head has its own weight (output_layer.weight)
  Activation activation = Activation::kGelu;
  int64_t tl = 0;      ///< positions held in SP regions: s / t with SP, else s
  bool sp = false;     ///< sequence parallelism
  int64_t p = 0;       ///< pipeline-parallel size
  int64_t v = 0;       ///< virtual pipeline stages per rank
  int64_t m = 0;       ///< micro-batches per iteration
  int64_t dp = 0;      ///< data-parallel size
  int64_t vocab = 0;   ///< real vocabulary size
  int64_t vl = 0;      ///< vocabulary entries of this TP shard (padded)
  int64_t vstart = 0;  ///< first vocabulary id of this TP shard
  int64_t vtotal = 0;  ///< padded vocabulary (vl x t)
  // mixture of experts (0 for a dense model)
  int64_t experts = 0;     ///< E routed experts per MoE layer
  int64_t topk = 0;        ///< k experts per token
  int64_t ep = 1;          ///< expert-parallel size
  int64_t el = 0;          ///< local experts E / EP
  int64_t fe = 0;          ///< one routed expert's width / ETP
  int64_t fc1e = 0;        ///< its FC1 width: 2 fe with SwiGLU, else fe
  int64_t fs = 0;          ///< shared expert width / t (0: none)
  int64_t fc1s = 0;        ///< its FC1 width
};

/// Parameter (or gradient) views of one transformer layer in the shard's memory. In an MoE layer
/// fc1_w / fc2_w are the shared expert's (empty without one), router_w the router's [E, h], and
/// experts_fc1_w / experts_fc2_w the local experts' weights as one [E/EP, out, in] array each.
struct LayerParams {
  std::span<float> ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w,
      fc2_b;
  std::span<float> router_w, experts_fc1_w, experts_fc2_w;
};
/// Every view of LayerParams, for passes over all of a layer's tensors.
inline constexpr std::array<std::span<float> LayerParams::*, 15> kLayerParamMembers = {
    &LayerParams::ln1_w,  &LayerParams::ln1_b,    &LayerParams::qkv_w,         &LayerParams::qkv_b,
    &LayerParams::proj_w, &LayerParams::proj_b,   &LayerParams::ln2_w,         &LayerParams::ln2_b,
    &LayerParams::fc1_w,  &LayerParams::fc1_b,    &LayerParams::fc2_w,         &LayerParams::fc2_b,
    &LayerParams::router_w, &LayerParams::experts_fc1_w, &LayerParams::experts_fc2_w};

/// The token exchange of one MoE layer's alltoall dispatcher for one micro-batch, in rows of h
/// (set by the walk at the dispatch, from the EP group's token counts).
struct MoeExchange {
  std::vector<int64_t> send_rows;   ///< [EP] rows this rank sends each EP member (dispatch)
  std::vector<int64_t> recv_rows;   ///< [EP] rows it receives from each
  std::vector<int64_t> chunk_rows;  ///< [EP x E/EP] received chunks, (source, local expert) order
  std::vector<int64_t> rows_per_local_expert;  ///< [E/EP] the grouped GEMM's groups
};

/// Saved activations and gradients of one layer for one micro-batch.
struct LayerState {
  Tensor in;                          // [b, Tl, H] layer input (residual stream)
  // Without training.gradient_accumulation_fusion: this micro-batch's param.grad of the layer,
  // one zeroed tensor per gradient view (param_grad_views points into them), which the backward
  // writes instead of the main gradients and grad_accumulate adds into them.
  std::vector<Tensor> param_grad;
  LayerParams param_grad_views;
  Tensor ln1, ln1_mean, ln1_rstd;     // [b, Tl, H], [b*Tl] (RMSNorm: rstd holds 1/rms, no mean)
  Tensor ln1_full;                    // [b, s, H] SP-gathered QKV input
  Tensor qkv;                         // [b, s, qkv]
  Tensor qkv_rope;                    // [b, s, qkv] with RoPE applied to q and k (RoPE only)
  Tensor preatt, att;                 // [b, a/t, s, s] (unfused attention only)
  // Blockwise attention (flash; ring attention under CP, one K/V block per ring step)
  Tensor lse;                         // [b, a/t, s] log-sum-exp of each query row
  Tensor q;                           // [b, s, a/t hd] the (rotated) queries
  std::vector<Tensor> kv_steps;       // [b, s, 2 g/t hd] K/V block of each ring step (0: local)
  Tensor block_out, block_lse;        // a ring block's partial output before its merge
  Tensor dq;                          // [b, s, a/t hd]
  Tensor dkv_own;                     // [b, s, 2 g/t hd] gradient of the local K/V (step 0)
  Tensor dkv_block, dkv_recv;         // the current block's dK/dV; the partial one received
  int64_t ring_step = 0;              // blocks done in this pass
  int64_t kv_exchanges = 0, dkv_exchanges = 0;  // ring exchanges issued in this pass
  Tensor attn;                        // [b, s, Hl]
  Tensor proj;                        // [b, s, H] partial, all-reduced in place without SP
  Tensor proj_rs;                     // [b, Tl, H] SP reduce-scatter output
  Tensor resid1;                      // [b, Tl, H]
  Tensor ln2, ln2_mean, ln2_rstd, ln2_full;
  Tensor fc1, gelu;                   // [b, s, fc1], [b, s, F] (gelu: the activation output)
  Tensor fc2, fc2_rs;                 // like proj, proj_rs
  Tensor out;                         // [b, Tl, H]
  // backward
  Tensor d_resid1;                    // [b, Tl, H]
  Tensor d_branch;                    // [b, Tl, H] gradient of the dropout input (row-parallel output)
  Tensor d_branch_mlp;                // [b, Tl, H] the MLP's d_branch kept for FC2's W step (split)
  Tensor d_branch_full;               // [b, s, H] SP-gathered d_branch
  Tensor d_gelu, d_fc1;               // [b, s, F], [b, s, fc1]
  Tensor d_attn;                      // [b, s, Hl]
  Tensor d_qkv;                       // [b, s, qkv]
  Tensor d_ln_full;                   // [b, s, H] column-parallel input gradient (partial sums)
  Tensor d_ln;                        // [b, Tl, H] after the reduce-scatter (SP)
  Tensor d_in;                        // [b, Tl, H]
  // MoE layer: the routed experts on this rank's N = b Tl rows of ln2 (the shared expert uses
  // fc1 / gelu / fc2 above). M = routed copies of this rank's tokens, R = rows of the local
  // experts (expert-major), E experts.
  Tensor logits, gates, probs, scores;         // [N, E] (scores: softmax for the aux loss)
  std::vector<uint8_t> topk_map, routing_map;  // [N, E] host
  std::vector<int64_t> tokens_per_expert;      // [E] host: top-k counts over the aux-loss group
  cpu::MoePermutation perm;                    // host
  MoeExchange exchange;
  Tensor permuted;                             // [M, H] dispatch input
  Tensor dispatched;                           // [R, H]
  Tensor expert_fc1, expert_act, expert_fc2;   // [R, fc1e], [R, fe], [R, H]
  Tensor combined;                             // [M, H] expert outputs in permuted order
  Tensor moe_out;                              // [N, H] routed output
  Tensor d_moe;                                // [N, H] its gradient
  Tensor d_combined, d_probs;                  // [M, H], [N, E]
  Tensor d_expert_fc2, d_expert_act, d_expert_fc1, d_dispatched;  // like the forward
  Tensor d_permuted;                           // [M, H]
  Tensor d_logits;                             // [N, E]
  Tensor d_moe_in;                             // [N, H] routed path's gradient of ln2
};
/// Moves `from`'s param.grad (and its views, which stay valid: the tensors keep their memory)
/// into `to`, for the backward's frees of a layer's state that come before its grad_accumulate.
inline void keep_param_grad(LayerState& to, LayerState& from) {
  to.param_grad = std::move(from.param_grad);
  to.param_grad_views = from.param_grad_views;
}

/// Everything of one micro-batch on one model chunk.
struct ChunkState {
  int64_t mb = 0;                        // the micro-batch
  DeviceBuffer<int32_t> tokens, labels;  // [b, s]
  /// [b, Tl, H] received activation (vs > 0), or under the V placement on rank p - 1 (chunk 1,
  /// vs p) a copy of chunk 0's output on the same rank (no transfer; chunk_input()).
  Tensor input;
  /// [b, Tl, H] received output gradient (not last vs), or on rank p - 1 of the V (chunk 0, vs
  /// p - 1) chunk 1's input gradient moved over (chunk_output_grad()).
  Tensor d_output;
  std::vector<LayerState> layers;        // layers of the chunk, first layer first
  // embedding (vs == 0)
  Tensor emb, emb_rs, emb_out;           // [b, s, H], [b, Tl, H], [b, Tl, H]
  Tensor d_emb_full;                     // [b, s, H]
  // head (last vs)
  Tensor lnf, lnf_mean, lnf_rstd, lnf_full, logits;  // logits [b, s, V_local]
  Tensor lmax, sum_exp, target;          // [b, s]
  Tensor d_logits, d_lnf_full, d_lnf, d_last;
  bool loss_counted = false;
};

/// What one CP collective of the attention core sends and receives (the walk issues it over the
/// CP group): a ring_exchange of a K/V block for the next ring step or of a partial dK/dV in the
/// backward (p2p); the all_gather of the K/V blocks or the reduce_scatter of their dK/dV
/// (all_gather).
struct CpTransfer {
  Tensor send;                       ///< owned copy, alive until the exchange completes
  std::span<float> recv;             ///< in the layer's state
  std::function<void()> on_complete; ///< run once it completed (may be empty)
};

/// The GPT model's math on one rank: per (model chunk, micro-batch) state and the kernels of each
/// Role. Holds references to the program, shard and backend, which must outlive it.
class GptModel {
 public:
  /// Throws InvalidArgument when the shard lacks a tensor of the Program's layers.
  GptModel(const Program& program, const RankProgram& rank, ModelShard& shard, Backend& backend,
           const TrainingHyperparameters& hyper);

  /// Starts an iteration (1-based; 0 for evaluation) or an evaluation pass: forgets every
  /// micro-batch's state and the loss totals.
  void begin(int64_t iteration, const MicroBatchSource& data, bool training);
  /// Frees every micro-batch's state.
  void clear() { chunks_.clear(); }

  /// Runs the kernel `kernel` ("gemm_fwd", "gemm_dgrad", "gemm_wgrad", ...) of `role` for the
  /// compute op `op` (its phase, model chunk, micro-batch and layer). `expert`: the local expert
  /// a per-expert GEMM serves (without moe_grouped_gemm, Megatron's SequentialMLP: the lowering's
  /// Op::kernel_targets), 0 for every other kernel. Throws InvalidArgument for a role or kernel
  /// this model does not have.
  void run(const Op& op, const std::string& kernel, Role role, int64_t expert = 0);

  /// The token counts the router of `op`'s layer routed per expert (after capacity), [E].
  const std::vector<int64_t>& moe_rows_per_expert(const Op& op) { return layer(op).perm.rows_per_expert; }
  /// Sum of this rank's MoE aux losses (each micro-batch's, x moe_aux_loss_coeff included) and
  /// how many (layer, micro-batch) terms it holds.
  double moe_aux_loss_sum() const { return aux_loss_sum_; }
  int64_t moe_aux_loss_terms() const { return aux_loss_terms_; }

  /// What a CP collective of `op`'s attention core sends and where the result arrives (ring
  /// attention, cp_comm_type p2p or all_gather; see gpt_model_attention.cpp). Throws
  /// InvalidArgument when the op does not fit the attention's state.
  CpTransfer cp_transfer(const Op& op);

  /// Evaluation: counts the loss of every micro-batch whose cross-entropy ran (the backward,
  /// which counts it in training, does not run).
  void count_pending_losses();
  /// Sum of the token losses counted on this rank (TP rank 0 of the last stage) and their count.
  double loss_sum() const { return loss_sum_; }
  int64_t loss_tokens() const { return loss_tokens_; }

  /// State of micro-batch `mb` on `chunk`, created (with its tokens and labels on a chunk that
  /// takes the embedding or computes the loss) on first use.
  ChunkState& chunk(int64_t chunk, int64_t mb);
  /// State of the layer of `op` (its model chunk, micro-batch and global layer).
  LayerState& layer(const Op& op);

  const ShardGeometry& geometry() const { return g_; }
  Backend& backend() { return backend_; }
  /// Virtual pipeline stage of this rank's `chunk`, by the Program's placement
  /// (core/schedule.hpp virtual_stage_of: chunk x p + rank, or the V of zb-v, dualpipev and
  /// dualpipe).
  int64_t vstage(int64_t chunk) const { return vstage_[static_cast<size_t>(chunk)]; }
  /// Whether this rank's `chunk` runs the embedding, and whether it runs the final LayerNorm,
  /// LM head and loss (core/schedule.hpp takes_embedding, computes_loss: the first and the last
  /// virtual stage; under DualPipe also the reverse direction's first, p, and the forward
  /// direction's last, p - 1, so that ranks 0 and p - 1 each run both).
  bool takes_embedding(int64_t chunk) const { return embeds_[static_cast<size_t>(chunk)]; }
  bool computes_loss(int64_t chunk) const { return loss_[static_cast<size_t>(chunk)]; }
  /// This rank's model chunk that holds virtual stage `vs`, or -1 when another rank holds it.
  int64_t chunk_of_vstage(int64_t vs) const;
  /// The word embedding's gradient on the first stage, the LM head's copy on the last.
  std::span<float> embedding_grad_to_reduce();
  /// The transformer layers of this rank's `chunk` (core/pipeline_split.hpp: uneven under an
  /// uneven split; none in an embedding-only or loss-only chunk).
  int64_t first_layer(int64_t chunk) const {
    return chunk_layers_[static_cast<size_t>(chunk)].first_layer;
  }
  int64_t num_layers(int64_t chunk) const {
    return chunk_layers_[static_cast<size_t>(chunk)].num_layers;
  }
  /// The activation a chunk hands on (to the next virtual stage or to the final LayerNorm): its
  /// last layer's output or, for a chunk without transformer layers, its input.
  Tensor& chunk_output(ChunkState& st, int64_t chunk);
  /// The gradient of a chunk's input: its first layer's or, for a chunk without transformer
  /// layers, the gradient of its output (from the final LayerNorm or received).
  Tensor& chunk_input_grad(ChunkState& st, int64_t chunk);
  /// The input of a chunk that does not take the embedding: st.input, which the V's turn on
  /// rank p - 1 fills on first use with a copy of the previous virtual stage's output (the
  /// rank's other chunk; the Program has no transfer there, core/schedule.hpp rank_step_input).
  /// Never across DualPipe's directions (rank p - 1's chunk 1 takes the embedding).
  Tensor& chunk_input(ChunkState& st, int64_t chunk);
  /// The gradient of the output of a chunk that does not compute the loss: st.d_output, which
  /// the V's turn on rank p - 1 fills on first use by moving the next virtual stage's input
  /// gradient over (take_chunk_input_grad of the rank's other chunk).
  Tensor& chunk_output_grad(ChunkState& st, int64_t chunk);
  /// chunk_input_grad moved out, for the backward send to the previous stage; the first layer's
  /// state is freed with it unless its W step is still to come (a zero-bubble schedule: W frees
  /// it).
  Tensor take_chunk_input_grad(ChunkState& st, int64_t chunk);

 private:
  [[noreturn]] void unexpected(const Op& op, const std::string& what) const;
  /// InvalidArgument: the V's turn found chunk `from`'s `what` for micro-batch `mb` missing
  /// when chunk `to` needed it (a Program whose op order does not follow the data).
  [[noreturn]] void local_handover_missing(const char* what, int64_t from, int64_t to,
                                           int64_t mb) const;
  int64_t seq_offset() const { return g_.sp ? coord_.tp * g_.tl : 0; }
  int64_t first_sample(int64_t mb) const;
  Tensor zeros(int64_t n) { return Tensor(backend_, n); }
  Tensor clone(const Tensor& x);
  cpu::DropoutParams dropout(uint64_t site, int64_t layer) const;
  const cpu::AttentionProbabilityDropout* attention_dropout(int64_t mb, int64_t layer);
  cpu::HiddenBlock block(int64_t mb, bool full) const;
  /// The pieces of a [b, Tl, H] block (`full`: [b, s, H]) of micro-batch `mb` whose global
  /// positions are consecutive, as (element offset, element count, their HiddenBlock): the
  /// whole block when CP = 1, else one per sample and run (cp_sequence.hpp).
  using HiddenPieceFn = std::function<void(int64_t, int64_t, const cpu::HiddenBlock&)>;
  void hidden_pieces(int64_t mb, bool full, const HiddenPieceFn& f) const;
  /// Megatron's bias_dropout_add over a [b, Tl, H] block (`full`: [b, s, H]) of micro-batch
  /// `mb`, with the mask on global positions: one call, or under CP one per sample and run of
  /// consecutive global positions (cp_sequence.hpp).
  void dropout_add_forward(FSpan out, CFSpan inp, CFSpan bias, CFSpan residual,
                           const cpu::DropoutParams& params, int64_t mb, bool full);
  void dropout_add_backward(FSpan dinp, FSpan dbias, FSpan dresidual, CFSpan dout,
                            const cpu::DropoutParams& params, int64_t mb, bool full);
  /// Learned positions added to (forward: the [b, Tl, H] SP block) or gradient taken from
  /// (backward: the [b, s, H] gradient) the embedding output of micro-batch `mb`, by global
  /// position (hidden_pieces).
  void positions_forward(FSpan e, int64_t chunk, int64_t mb);
  void positions_backward(CFSpan d_e, int64_t chunk, int64_t mb);
  /// Blockwise attention (flash, ring): the sequence of the CP rank whose K/V block a ring step
  /// holds, the kernel's shape, the queries and local K/V packed from the QKV rows.
  CpSequence ring_source(int64_t step) const;
  cpu::BlockAttentionShape block_shape() const;
  void pack_ring_inputs(LayerState& L);
  void blockwise_forward(const Op& op, LayerState& L, bool merge);
  void blockwise_backward(const Op& op, LayerState& L);
  void finish_blockwise_backward(LayerState& L);
  /// LayerNorm or RMSNorm (by the model) over [b, Tl, H]; allocates out, mean (LayerNorm) and
  /// rstd (1 / rms for RMSNorm). Backward accumulates into dinp, dweight, dbias.
  void norm_forward(Tensor& out, Tensor& mean, Tensor& rstd, CFSpan inp, CFSpan weight,
                    CFSpan bias);
  void norm_backward(FSpan dinp, FSpan dweight, FSpan dbias, CFSpan dout, CFSpan inp,
                     CFSpan weight, const Tensor& mean, const Tensor& rstd);
  /// RoPE on the q and k parts of [b, s, qkv] rows: forward out = rotated in (v copied by the
  /// caller), backward out = inverse rotation of in (may alias: q and k parts only).
  void rope(FSpan qkv_out, CFSpan qkv_in, bool backward);
  std::span<float> head_weight(int64_t chunk, bool grad);
  Tensor& reduced(Tensor& partial, Tensor& shard) { return g_.sp ? shard : partial; }
  Tensor take_layer_input(const Op& op);
  Tensor take_output_grad(const Op& op);
  void count_loss(ChunkState& st);

  void embedding_forward(const Op& op);
  void embedding_dropout(const Op& op);
  void embedding_backward(const Op& op);
  void layer_forward(const Op& op, const std::string& kernel, Role role);
  void layer_backward(const Op& op, const std::string& kernel, Role role);
  /// The gradient views `op`'s layer backward writes: the main gradients (fused), or without
  /// gradient_accumulation_fusion this micro-batch's param.grad (LayerState::param_grad, made
  /// zeroed at the layer's first backward kernel).
  const LayerParams& grads_of(const Op& op);
  /// Megatron's param hook without gradient_accumulation_fusion (megatron/model/distributed.py
  /// _make_param_hook, 50a4b5fa02): main_grad += param.grad over the layer's parameters, then
  /// param.grad freed. Kernel grad_accumulate.
  void grad_accumulate(const Op& op);
  void moe_forward(const Op& op, const std::string& kernel, Role role, int64_t expert);
  void moe_backward(const Op& op, const std::string& kernel, Role role, int64_t expert);
  /// Shared expert / dense MLP widths of `layer` (F and the FC1 width).
  int64_t mlp_width(int64_t layer) const;
  int64_t fc1_width(int64_t layer) const;
  bool moe_layer(int64_t layer) const { return prog_.scenario.model.is_moe_layer(layer); }
  /// The span of local expert j's weight in a [E/EP, out, in] array, or all of it (j < 0).
  static std::span<float> expert_slice(std::span<float> all, int64_t experts, int64_t j);
  void head_forward(const Op& op, const std::string& kernel, Role role);
  void head_backward(const Op& op, const std::string& kernel, Role role);

  const Program& prog_;
  int64_t rank_ = 0;
  RankCoord coord_;
  ModelShard& shard_;
  Backend& backend_;
  LinearLayers linear_;  // the linear layers' GEMMs in the training precision
  const TrainingHyperparameters& hyper_;
  ShardGeometry g_;
  CpSequence seq_;  // this rank's positions of the sequence
  bool all_gather_ = false;  // CP attention by all-gathered K/V (else the p2p ring)
  std::vector<ChunkLayers> chunk_layers_;  // per model chunk of this rank
  std::vector<int64_t> vstage_;             // virtual stage of each model chunk of this rank
  std::vector<bool> embeds_, loss_;         // takes_embedding / computes_loss of each chunk
  int64_t embedding_chunk_ = -1;            // this rank's chunk holding the word embedding
  RecomputeGranularity recompute_ = RecomputeGranularity::kNone;
  /// A zero-bubble schedule (core/schedule.hpp splits_backward): B steps run the input gradient
  /// alone and keep what the W step's wgrad GEMMs read (the layer's GEMM inputs and output
  /// gradients, the final LayerNorm's output) until the W step frees it.
  bool split_ = false;
  bool grad_fusion_ = true;  // training.gradient_accumulation_fusion
  std::map<int64_t, LayerParams> layer_params_, layer_grads_;

  int64_t iteration_ = 0;
  const MicroBatchSource* data_ = nullptr;
  bool training_ = false;
  std::map<std::pair<int64_t, int64_t>, ChunkState> chunks_;  // (chunk, mb)
  double loss_sum_ = 0;
  int64_t loss_tokens_ = 0;
  double aux_loss_sum_ = 0;
  int64_t aux_loss_terms_ = 0;
  cpu::AttentionProbabilityDropout att_dropout_;
  std::vector<int32_t> host_tokens_, host_labels_;
  std::vector<float> host_losses_;
};

}  // namespace traintwin::exec
