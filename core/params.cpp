// Parameter counts of a GPT model (see params.hpp for the layout and sources).
#include "core/params.hpp"

#include <optional>
#include <string>
#include <vector>

#include "core/checks.hpp"
#include "core/error.hpp"
#include "core/pipeline_split.hpp"
#include "core/schedule.hpp"

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

/// The GEMM weights and all parameters of an MLP of inner width `ffn` whose FC1 is
/// column-parallel and FC2 row-parallel over `t` ranks (FC2's bias replicated).
struct MlpParameters {
  int64_t gemm = 0;
  int64_t all = 0;
};
MlpParameters mlp_parameters(const ModelSpec& m, int64_t ffn, int64_t t) {
  const int64_t h = m.hidden_size;
  const int64_t bias = m.add_bias_linear ? 1 : 0;
  const int64_t fc1_local = m.fc1_width_of(ffn) / t;  // SwiGLU: gate and up shards of ffn / t
  const int64_t gemm = h * fc1_local + (ffn / t) * h;
  return {gemm, gemm + bias * fc1_local + bias * h};
}

/// Attention (QKV column-parallel, projection row-parallel over t) and the 2 norms of a layer.
RankParameters attention_parameters(const ModelSpec& m, int64_t t) {
  const int64_t h = m.hidden_size;
  const int64_t bias = m.add_bias_linear ? 1 : 0;
  const int64_t qkv_local = m.qkv_width() / t;         // (a + 2g) d / t: whole heads per rank
  const int64_t attention_local = m.attention_width() / t;  // a d / t, the projection's input
  RankParameters r;
  r.dense_gemm = h * qkv_local + attention_local * h;
  // Replicated: the projection's bias and the 2 norms.
  r.dense = r.dense_gemm + bias * qkv_local + bias * h + 2 * m.norm_parameters();
  return r;
}

void require_layer(const ModelSpec& m, int64_t layer) {
  if (layer < 0 || layer >= m.num_layers) {
    throw InvalidArgument("layer must be in [0, num_layers = " + std::to_string(m.num_layers) +
                          "), got " + std::to_string(layer));
  }
}

}  // namespace

int64_t layer_parameter_count(const ModelSpec& m, int64_t layer) {
  ParallelConfig one;  // TP = EP = ETP = 1
  return layer_parameters_on_rank(m, one, layer).total();
}

int64_t parameter_count(const ModelSpec& m) {
  require_valid_model(m);
  int64_t layers = 0;
  for (int64_t l = 0; l < m.num_layers; ++l) layers += layer_parameter_count(m, l);
  const int64_t h = m.hidden_size;
  const int64_t word_embedding = m.vocab_size * h;
  const int64_t output_layer = m.untie_embeddings_and_output_weights ? m.vocab_size * h : 0;
  const int64_t position_embedding =
      m.position_embedding_type == PositionEmbedding::kLearnedAbsolute ? m.seq_length * h : 0;
  const int64_t final_norm = m.norm_parameters();
  return layers + word_embedding + output_layer + position_embedding + final_norm;
}

int64_t active_parameter_count(const ModelSpec& m) {
  const int64_t total = parameter_count(m);  // validates m
  if (!m.is_moe()) return total;
  const int64_t one_expert = mlp_parameters(m, m.moe_expert_ffn(), 1).all;
  int64_t moe_layers = 0;
  for (int64_t l = 0; l < m.num_layers; ++l) moe_layers += m.is_moe_layer(l) ? 1 : 0;
  return total - moe_layers * (m.num_moe_experts - m.moe_router_topk) * one_expert;
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
  return attention_parameters(m, t).dense + mlp_parameters(m, m.ffn_hidden_size, t).all;
}

int64_t layer_gemm_weights_on_rank(const ModelSpec& m, int64_t t) {
  layer_parameters_on_rank(m, t);  // the same checks
  return attention_parameters(m, t).dense_gemm + mlp_parameters(m, m.ffn_hidden_size, t).gemm;
}

RankParameters layer_parameters_on_rank(const ModelSpec& m, const ParallelConfig& p,
                                        int64_t layer) {
  const int64_t t = p.tensor_model_parallel_size;
  layer_parameters_on_rank(m, t);  // the dense layer's checks
  require_layer(m, layer);
  RankParameters r = attention_parameters(m, t);
  if (!m.is_moe_layer(layer)) {
    const MlpParameters mlp = mlp_parameters(m, m.ffn_hidden_size, t);
    r.dense += mlp.all;
    r.dense_gemm += mlp.gemm;
    return r;
  }
  const int64_t ep = p.expert_model_parallel_size;
  const int64_t etp = p.expert_tp();
  require_at_least_one(ep, "expert_model_parallel_size");
  require_at_least_one(etp, "expert_tensor_parallel_size");
  require_divisible(m.num_moe_experts, "num_moe_experts", ep, "expert_model_parallel_size");
  require_divisible(m.moe_expert_ffn(), "moe_ffn_hidden_size", etp,
                    "expert_tensor_parallel_size");
  require_divisible(m.moe_shared_expert_intermediate_size, "moe_shared_expert_intermediate_size",
                    t, "tensor_model_parallel_size");
  r.dense += m.num_moe_experts * m.hidden_size;  // the router, replicated over TP
  if (m.moe_shared_expert_intermediate_size > 0) {
    const MlpParameters shared = mlp_parameters(m, m.moe_shared_expert_intermediate_size, t);
    r.dense += shared.all;
    r.dense_gemm += shared.gemm;
  }
  const MlpParameters expert = mlp_parameters(m, m.moe_expert_ffn(), etp);
  const int64_t local_experts = m.num_moe_experts / ep;
  r.expert = local_experts * expert.all;
  r.expert_gemm = local_experts * expert.gemm;
  return r;
}

namespace {

/// stage_parameters_on_rank() with the pipeline split `given`, or computed where chunk_layers()
/// would compute it (after the argument checks) when null.
RankParameters stage_parameters(const Scenario& s, int64_t pp_rank,
                                const std::vector<ChunkLayers>* given) {
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

  std::vector<ChunkLayers> own;
  if (given == nullptr) own = pipeline_layer_split(m, s.parallel);
  const std::vector<ChunkLayers>& split = given != nullptr ? *given : own;
  RankParameters total;
  // A dense layer's parameters do not depend on its index: computed once.
  std::optional<RankParameters> dense_layer;
  for (int64_t c = 0; c < v; ++c) {
    // chunk_layers(s, pp_rank, c): l / (p v) layers when even.
    const ChunkLayers chunk = split.at(
        static_cast<size_t>(virtual_stage_of(s.parallel.pipeline_schedule, p, pp_rank, c)));
    for (int64_t l = chunk.first_layer; l < chunk.end_layer(); ++l) {
      if (m.is_moe_layer(l)) {
        total += layer_parameters_on_rank(m, s.parallel, l);
      } else {
        if (!dense_layer) dense_layer = layer_parameters_on_rank(m, s.parallel, l);
        total += *dense_layer;
      }
    }
  }
  const int64_t h = m.hidden_size;
  const int64_t word_embedding_rows = padded_vocab_size(m.vocab_size, t) / t;
  // Whether a chunk of this rank runs the embedding / the loss (core/schedule.hpp): the first
  // and last virtual stage, on ranks 0 and p - 1 (rank 0 both under ZB-V's V placement, whose LM
  // head then sits beside the word embedding, so a tied embedding needs no copy); under DualPipe
  // ranks 0 and p - 1 each hold an embedding and a loss (one word embedding when tied).
  const PipelineScheduleKind kind = s.parallel.pipeline_schedule;
  bool first = false, last = false;
  for (int64_t c = 0; c < v; ++c) {
    const int64_t vs = virtual_stage_of(kind, p, pp_rank, c);
    first = first || takes_embedding(kind, p, v, vs);
    last = last || computes_loss(kind, p, v, vs);
  }
  const bool learned_positions = m.position_embedding_type == PositionEmbedding::kLearnedAbsolute;
  if (first) total.dense += word_embedding_rows * h + (learned_positions ? m.seq_length * h : 0);
  // The LM head: its own weight when untied; when tied, a copy of the word embedding on the
  // last stage when that is another stage (Megatron's shared embedding).
  if (last && (m.untie_embeddings_and_output_weights || !first)) {
    total.dense += word_embedding_rows * h;
  }
  if (last) total.dense += m.norm_parameters();  // final norm
  return total;
}

}  // namespace

RankParameters stage_parameters_on_rank(const Scenario& s, int64_t pp_rank) {
  return stage_parameters(s, pp_rank, nullptr);
}

RankParameters stage_parameters_on_rank(const Scenario& s, int64_t pp_rank,
                                        const std::vector<ChunkLayers>& split) {
  return stage_parameters(s, pp_rank, &split);
}

int64_t parameters_on_rank(const Scenario& s, int64_t pp_rank) {
  return stage_parameters_on_rank(s, pp_rank).total();
}

}  // namespace traintwin
