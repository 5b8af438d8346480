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
  return layer_parameters_on_rank(m, 1);
}

int64_t parameter_count(const ModelSpec& m) {
  const int64_t layers = m.num_layers * layer_parameter_count(m);  // validates m
  const int64_t h = m.hidden_size;
  const int64_t word_embedding = m.vocab_size * h;
  const int64_t output_layer = m.untie_embeddings_and_output_weights ? m.vocab_size * h : 0;
  const int64_t position_embedding =
      m.position_embedding_type == PositionEmbedding::kLearnedAbsolute ? m.seq_length * h : 0;
  const int64_t final_norm = m.norm_parameters();
  return layers + word_embedding + output_layer + position_embedding + final_norm;
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
  require_divisible(m.num_attention_heads, "num_attention_heads", t, "tensor_model_parallel_size");
  require_divisible(m.query_groups(), "num_query_groups", t, "tensor_model_parallel_size");
  const int64_t h = m.hidden_size;
  const int64_t ffn = m.ffn_hidden_size;
  const int64_t bias = m.add_bias_linear ? 1 : 0;
  const int64_t qkv_local = m.qkv_width() / t;  // (a + 2g) d / t: whole heads per rank
  const int64_t fc1_local = m.fc1_width() / t;  // SwiGLU: gate and up shards of ffn / t each
  // Sharded over TP: column-parallel QKV and FC1 (weights and biases), row-parallel projection
  // and FC2 weights. Replicated: row-parallel biases (projection, FC2) and the 2 norms.
  const int64_t qkv = h * qkv_local + bias * qkv_local;
  const int64_t projection = (h / t) * h + bias * h;
  const int64_t fc1 = h * fc1_local + bias * fc1_local;
  const int64_t fc2 = (ffn / t) * h + bias * h;
  const int64_t norms = 2 * m.norm_parameters();
  return qkv + projection + fc1 + fc2 + norms;
}

int64_t layer_gemm_weights_on_rank(const ModelSpec& m, int64_t t) {
  layer_parameters_on_rank(m, t);  // the same checks
  const int64_t h = m.hidden_size;
  return h * (m.qkv_width() / t) + (h / t) * h + h * (m.fc1_width() / t) +
         (m.ffn_hidden_size / t) * h;
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
  const bool learned_positions = m.position_embedding_type == PositionEmbedding::kLearnedAbsolute;
  if (first) total += word_embedding_rows * h + (learned_positions ? m.seq_length * h : 0);
  // The LM head: its own weight when untied; when tied, a copy of the word embedding on the
  // last stage when that is another stage (Megatron's shared embedding).
  if (last && (m.untie_embeddings_and_output_weights || p > 1)) total += word_embedding_rows * h;
  if (last) total += m.norm_parameters();  // final norm
  return total;
}

}  // namespace traintwin
