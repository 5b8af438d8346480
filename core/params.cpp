// Parameter counts of a GPT model (see params.hpp for the layout and sources).
#include "core/params.hpp"

#include <string>

#include "core/checks.hpp"
#include "core/error.hpp"
#include "core/pipeline_split.hpp"

namespace traintwin {
namespace {

void require_divisible(int64_t value, const char* value_name, int64_t divisor,
                       const char* divisor_name) {
  if (value % divisor != 0) {
    throw InvalidArgument(std::string(value_name) + " (" + std::to_string(value) +
                          ") must be divisible by " + divisor_name + " (" +
                          std::to_string(divisor) + ")");
  }
}

}  // namespace

int64_t layer_parameter_count(const ModelSpec& m) {
  require_valid_model(m);
  const int64_t h = m.hidden_size;
  const int64_t ffn = m.ffn_hidden_size;
  const int64_t qkv = 3 * h * h + 3 * h;              // fused QKV weight + bias
  const int64_t projection = h * h + h;               // attention output projection
  const int64_t fc1 = h * ffn + ffn;                  // MLP h -> ffn
  const int64_t fc2 = ffn * h + h;                    // MLP ffn -> h
  const int64_t layer_norms = 2 * (2 * h);            // 2 LayerNorms, gamma + beta
  return qkv + projection + fc1 + fc2 + layer_norms;  // 4h^2 + 2h ffn + 9h + ffn
}

int64_t parameter_count(const ModelSpec& m) {
  const int64_t layers = m.num_layers * layer_parameter_count(m);  // validates m
  const int64_t word_embedding = m.vocab_size * m.hidden_size;     // tied with the LM head
  const int64_t position_embedding = m.seq_length * m.hidden_size;
  const int64_t final_layer_norm = 2 * m.hidden_size;
  return layers + word_embedding + position_embedding + final_layer_norm;
}

double parameter_count_narayanan(const ModelSpec& m) {
  require_valid_model(m);
  const double l = static_cast<double>(m.num_layers);
  const double h = static_cast<double>(m.hidden_size);
  const double v = static_cast<double>(m.vocab_size);
  const double s = static_cast<double>(m.seq_length);
  // 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)), expanded so that every term is an exact integer.
  return 12.0 * l * h * h + 13.0 * l * h + (v + s) * h;
}

int64_t padded_vocab_size(int64_t vocab_size, int64_t tp, int64_t divisible_by) {
  require_at_least_one(vocab_size, "vocab_size");
  require_at_least_one(tp, "tensor_model_parallel_size");
  require_at_least_one(divisible_by, "make_vocab_size_divisible_by");
  const int64_t multiple = divisible_by * tp;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

int64_t layer_parameters_on_rank(const ModelSpec& m, int64_t t) {
  require_valid_model(m);
  require_at_least_one(t, "tensor_model_parallel_size");
  require_divisible(m.hidden_size, "hidden_size", t, "tensor_model_parallel_size");
  require_divisible(m.ffn_hidden_size, "ffn_hidden_size", t, "tensor_model_parallel_size");
  const int64_t h = m.hidden_size;
  const int64_t ffn = m.ffn_hidden_size;
  // Sharded over TP: column-parallel QKV and FC1 (weights and biases), row-parallel projection
  // and FC2 weights. Replicated: row-parallel biases (projection, FC2) and the 2 LayerNorms.
  const int64_t qkv = 3 * h * (h / t) + 3 * (h / t);
  const int64_t projection = (h / t) * h + h;
  const int64_t fc1 = h * (ffn / t) + ffn / t;
  const int64_t fc2 = (ffn / t) * h + h;
  const int64_t layer_norms = 4 * h;
  return qkv + projection + fc1 + fc2 + layer_norms;
}

int64_t parameters_on_rank(const Scenario& s, int64_t pp_rank) {
  const ModelSpec& m = s.model;
  require_valid_model(m);
  const int64_t t = s.parallel.tensor_model_parallel_size;
  const int64_t p = s.parallel.pipeline_model_parallel_size;
  const int64_t v = s.parallel.virtual_pipeline_model_parallel_size;
  require_at_least_one(t, "tensor_model_parallel_size");
  require_at_least_one(p, "pipeline_model_parallel_size");
  require_at_least_one(v, "virtual_pipeline_model_parallel_size");
  if (pp_rank < 0 || pp_rank >= p) {
    throw InvalidArgument("pp_rank must be in [0, pipeline_model_parallel_size = " +
                          std::to_string(p) + "), got " + std::to_string(pp_rank));
  }
  require_divisible(m.hidden_size, "hidden_size", t, "tensor_model_parallel_size");
  require_divisible(m.ffn_hidden_size, "ffn_hidden_size", t, "tensor_model_parallel_size");

  const int64_t h = m.hidden_size;
  const int64_t per_layer = layer_parameters_on_rank(m, t);
  const int64_t layers_on_rank = layers_on_stage(s, pp_rank);  // l / p when even

  int64_t total = layers_on_rank * per_layer;
  const int64_t word_embedding_rows = padded_vocab_size(m.vocab_size, t) / t;
  const bool first = pp_rank == 0;
  const bool last = pp_rank == p - 1;
  if (first) total += word_embedding_rows * h + m.seq_length * h;  // word + position embedding
  if (last && p > 1) total += word_embedding_rows * h;             // tied copy for the LM head
  if (last) total += 2 * h;                                        // final LayerNorm
  return total;
}

}  // namespace traintwin
