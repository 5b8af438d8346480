// Parameter counts of a GPT model: whole model and what one (TP rank, pipeline stage) holds.
#pragma once

#include <cstdint>

#include "core/scenario.hpp"

namespace traintwin {

/// Parameters of one transformer layer (QKV, projection, FC1, FC2 weights and biases, 2 LNs):
/// 4h^2 + 2h*ffn + 9h + ffn  (= 12h^2 + 13h for ffn = 4h).
int64_t layer_parameter_count(const ModelSpec& m);

/// Exact parameter count of the model: l layers + word embedding V*h (tied with the LM head)
/// + position embedding s*h + final LayerNorm 2h.
int64_t parameter_count(const ModelSpec& m);

/// Narayanan et al. SC'21, section 5.1: P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)).
/// Equals parameter_count() - 2h (the paper leaves out the final LayerNorm) when ffn = 4h.
double parameter_count_narayanan(const ModelSpec& m);

/// Parameters one GPU holds in pipeline stage `pp_rank` (all its model chunks) under TP:
/// column-parallel weights/biases and row-parallel weights divided by TP; LayerNorms and
/// row-parallel biases replicated; vocab-parallel word embedding V/TP*h on the first stage and,
/// when PP > 1, its tied copy on the last stage; position embedding on the first stage; final LN
/// on the last stage. Throws InvalidArgument for pp_rank outside [0, PP).
int64_t parameters_on_rank(const Scenario& s, int64_t pp_rank);

}  // namespace traintwin
