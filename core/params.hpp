// Parameter counts of a GPT model: whole model and what one (TP rank, pipeline stage) holds.
#pragma once

#include <cstdint>

#include "core/scenario.hpp"

namespace traintwin {

/// Megatron's default --make-vocab-size-divisible-by.
inline constexpr int64_t kMakeVocabSizeDivisibleBy = 128;

/// Parameters of one transformer layer (QKV, projection, FC1, FC2 weights and biases, 2 LNs):
/// 4h^2 + 2h*ffn + 9h + ffn  (= 12h^2 + 13h for ffn = 4h).
/// Every function here throws InvalidArgument, naming the field, when a model size it uses
/// (num_layers, hidden_size, num_attention_heads, ffn_hidden_size, seq_length, vocab_size) is < 1.
int64_t layer_parameter_count(const ModelSpec& m);

/// Exact parameter count of the model: l layers + word embedding V*h (tied with the LM head)
/// + position embedding s*h + final LayerNorm 2h.
int64_t parameter_count(const ModelSpec& m);

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

/// Parameters of one transformer layer on one TP rank (tp = TP size): column-parallel QKV and
/// FC1 weights and biases and row-parallel projection and FC2 weights divided by tp; the
/// row-parallel biases and both LayerNorms replicated. Throws InvalidArgument when tp does not
/// divide hidden_size or ffn_hidden_size.
int64_t layer_parameters_on_rank(const ModelSpec& m, int64_t tp);

/// Parameters one GPU holds in pipeline stage `pp_rank` (all its model chunks) under TP:
/// column-parallel weights/biases and row-parallel weights divided by TP; LayerNorms and
/// row-parallel biases replicated; vocab-parallel word embedding V/TP*h on the first stage and,
/// when PP > 1, its tied copy on the last stage; position embedding on the first stage; final LN
/// on the last stage. Per layer and rank: QKV 3h*h/t + 3h/t, projection h*h/t + h, FC1
/// h*ffn/t + ffn/t, FC2 ffn*h/t + h, 2 LayerNorms 4h. Stage r holds layers_on_stage(s, r)
/// layers (l/PP for an even split; core/pipeline_split.hpp). Unlike parameter_count(), the
/// embedding rows are those Megatron allocates: padded_vocab_size(V, TP) / TP per rank.
/// Throws InvalidArgument for pp_rank outside [0, PP), a parallel size < 1, an impossible
/// pipeline split (PipelineSplitError), or hidden_size / ffn_hidden_size not divisible by TP.
int64_t parameters_on_rank(const Scenario& s, int64_t pp_rank);

}  // namespace traintwin
