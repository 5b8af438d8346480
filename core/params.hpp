// Parameter counts of a GPT model: whole model and what one (TP rank, pipeline stage) holds.
#pragma once

#include <cstdint>

#include "core/pipeline_split.hpp"
#include "core/scenario.hpp"

namespace traintwin {

/// Megatron's default --make-vocab-size-divisible-by.
inline constexpr int64_t kMakeVocabSizeDivisibleBy = 128;

/// Parameters of global transformer layer `layer` (in [0, num_layers); QKV, projection, MLP
/// weights and biases when add_bias_linear, 2 norms): QKV h (a + 2g) d [+ (a + 2g) d],
/// projection a d h [+ h] (a d = h unless kv_channels), norms 2 x (2h LayerNorm | h RMSNorm),
/// and the MLP: dense, FC1 h f1 [+ f1] with f1 = 2 ffn for SwiGLU else ffn, FC2 ffn h [+ h];
/// an MoE layer (ModelSpec::is_moe_layer), the router E h (no bias, Megatron's TopKRouter) + E
/// routed experts of width f_e = moe_expert_ffn() (each an MLP as above) + the shared expert
/// (an MLP of width moe_shared_expert_intermediate_size, when > 0).
/// GPT (MHA, biases, LayerNorm, GeLU): 4h^2 + 2h*ffn + 9h + ffn (= 12h^2 + 13h for ffn = 4h).
/// Llama: h^2 (2 + 2g/a) + 3 h ffn + 2h. Mixtral 8x7B layer: 2h^2 (1 + g/a) + 8 x 3 h f_e + 8h
/// + 2h.
/// Every function here throws InvalidArgument, naming the field, when a model size it uses
/// (num_layers, hidden_size, num_attention_heads, ffn_hidden_size, seq_length, vocab_size) is < 1
/// or `layer` is outside [0, num_layers).
int64_t layer_parameter_count(const ModelSpec& m, int64_t layer = 0);

/// Exact parameter count of the model: the l layers (layer_parameter_count of each: every
/// routed expert counted) + word embedding V*h + the LM head V*h when untied + position
/// embedding s*h when learned_absolute + the final norm (2h or h), with the unpadded V (as model
/// cards count: Llama 3.1 8B 8.03e9, 70B 70.55e9, 405B 405.85e9; Mixtral 8x7B 46.7e9).
int64_t parameter_count(const ModelSpec& m);

/// Parameters one token passes through (an MoE model's "active" parameters): parameter_count()
/// less the E - k routed experts a token is not sent to in every MoE layer (the router, the
/// shared expert, attention, embeddings and LM head all count). = parameter_count() for a
/// dense model. Mixtral 8x7B: 12.9e9 (Mistral AI 2024, "Mixtral of Experts", sec. 2: 13B
/// active); Qwen3-30B-A3B 3.3e9 (Qwen3 technical report, Table 2).
int64_t active_parameter_count(const ModelSpec& m);

/// Narayanan et al. SC'21, section 5.1: P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)).
/// Equals parameter_count() - 2h (the paper leaves out the final LayerNorm) when ffn = 4h.
/// Evaluated in the expanded form 12 l h^2 + 13 l h + (V + s) h, which is exact in a double for
/// every model below 2^53 parameters; ffn_hidden_size is not used (the paper assumes 4h).
double parameter_count_narayanan(const ModelSpec& m);

/// The vocabulary Megatron allocates (megatron/training/tokenizer: _vocab_size_with_padding):
/// `vocab_size` rounded up to a multiple of `divisible_by` * `tp`, so that each of the `tp`
/// vocab-parallel shards has the same number of rows. E.g. 50257 -> 50304 (TP 1),
/// 51200 (TP 8); 51200 stays 51200 for TP <= 8. Throws InvalidArgument if an argument is < 1.
int64_t padded_vocab_size(int64_t vocab_size, int64_t tp,
                          int64_t divisible_by = kMakeVocabSizeDivisibleBy);

/// Parameters of one dense transformer layer (MLP of ffn_hidden_size, whatever the model's MoE
/// keys say) on one TP rank (tp = TP size): column-parallel QKV and FC1 weights and biases and
/// row-parallel projection and FC2 weights divided by tp; the row-parallel biases and both
/// norms replicated. Throws InvalidArgument when tp does not divide hidden_size,
/// ffn_hidden_size, the heads or the query groups.
int64_t layer_parameters_on_rank(const ModelSpec& m, int64_t tp);

/// The GEMM weights (QKV, projection, FC1, FC2; no biases, no norms) of one dense transformer
/// layer on one TP rank: h (a + 2g) d / t + a d h / t + h f1 / t + ffn h / t. Same errors as
/// layer_parameters_on_rank().
int64_t layer_gemm_weights_on_rank(const ModelSpec& m, int64_t tp);

/// The parameters of one rank in one layer (or stage), by the group their gradients are
/// reduced over: Megatron-Core marks expert parameters (allreduce = False) and reduces them over
/// the expert-data-parallel group, everything else over DP x CP.
struct RankParameters {
  int64_t dense = 0;        ///< attention, norms, dense MLP, router, shared expert, embeddings
  int64_t expert = 0;       ///< the routed experts this rank holds (E / EP of them, / ETP)
  int64_t dense_gemm = 0;   ///< GEMM weights among `dense` (QKV, projection, MLP / shared expert)
  int64_t expert_gemm = 0;  ///< GEMM weights among `expert` (the local experts' FC1 and FC2)
  int64_t total() const { return dense + expert; }
  RankParameters& operator+=(const RankParameters& o) {
    dense += o.dense;
    expert += o.expert;
    dense_gemm += o.dense_gemm;
    expert_gemm += o.expert_gemm;
    return *this;
  }
};

/// Parameters of global transformer layer `layer` on one rank under `p`: the attention and
/// norms as layer_parameters_on_rank(); a dense layer's MLP sharded over TP; an MoE layer's
/// router E h replicated (Megatron's router weight is not TP-sharded), its shared expert
/// sharded over TP like a dense MLP, and E / EP routed experts, each column-/row-parallel over
/// ETP (FC1 h f1_e / ETP [+ f1_e / ETP], FC2 f_e / ETP h [+ h]; the FC2 bias replicated).
/// Throws InvalidArgument for `layer` outside [0, num_layers) and when TP does not divide the
/// heads, query groups, hidden_size, ffn_hidden_size or the shared expert width, EP does not
/// divide the experts or ETP the expert width.
RankParameters layer_parameters_on_rank(const ModelSpec& m, const ParallelConfig& p,
                                        int64_t layer);

/// parameters_on_rank() split into dense and expert parameters (the embedding, LM head and final
/// norm are dense). Same errors as parameters_on_rank().
RankParameters stage_parameters_on_rank(const Scenario& s, int64_t pp_rank);

/// stage_parameters_on_rank() with the pipeline split given: `split` must be
/// pipeline_layer_split(s.model, s.parallel) (size PP x v), computed once by a caller that needs
/// every stage (memory_per_stage). Same result and errors.
RankParameters stage_parameters_on_rank(const Scenario& s, int64_t pp_rank,
                                        const std::vector<ChunkLayers>& split);

/// Parameters one GPU holds in pipeline stage `pp_rank` (all its model chunks) under TP (and,
/// for the routed experts of MoE layers, EP x ETP: layer_parameters_on_rank(m, p, layer)):
/// column-parallel weights/biases and row-parallel weights divided by TP; norms and
/// row-parallel biases replicated; vocab-parallel word embedding V/TP*h on the first stage; on
/// the last stage the untied LM head V/TP*h or, tied and PP > 1, the embedding's copy; learned
/// position embedding on the first stage; final norm on the last stage. Per layer and rank
/// (GPT): QKV 3h*h/t + 3h/t, projection h*h/t + h, FC1 h*ffn/t + ffn/t, FC2 ffn*h/t + h,
/// 2 LayerNorms 4h (layer_parameters_on_rank has the general form). Stage r holds
/// layers_on_stage(s, r) layers (l/PP for an even split; core/pipeline_split.hpp). Unlike
/// parameter_count(), the embedding rows are those Megatron allocates: padded_vocab_size(V, TP)
/// / TP per rank.
/// Throws InvalidArgument for pp_rank outside [0, PP), a parallel size < 1, an impossible
/// pipeline split (PipelineSplitError), or hidden_size / ffn_hidden_size / the heads / the query
/// groups not divisible by TP.
int64_t parameters_on_rank(const Scenario& s, int64_t pp_rank);

}  // namespace traintwin
