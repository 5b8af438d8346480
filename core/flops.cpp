// FLOP model of GPT training (see flops.hpp for the formulas and sources).
#include "core/flops.hpp"

#include <string>

#include "core/checks.hpp"
#include "core/error.hpp"

namespace traintwin {
namespace {

void require_positive(double value, const char* name) {
  if (!(value > 0)) {  // also rejects NaN
    throw InvalidArgument(std::string(name) + " must be > 0, got " + std::to_string(value));
  }
}

/// Forward FLOPs of the attention core (Q K^T and attention over values): 4 B s^2 a d
/// (= 4 B s^2 h unless kv_channels).
double attention_core_forward_flops(const ModelSpec& m, int64_t samples) {
  const double b = static_cast<double>(samples);
  const double s = static_cast<double>(m.seq_length);
  const double ad = static_cast<double>(m.attention_width());
  return 2.0 * b * s * s * ad + 2.0 * b * s * s * ad;
}

/// Forward FLOPs of an MLP of inner width `ffn` (the model's kind) on `tokens` tokens:
/// FC1 2 T h f1 (f1 = 2 ffn for SwiGLU) + FC2 2 T ffn h.
double mlp_flops(const ModelSpec& m, double tokens, int64_t ffn) {
  const double h = static_cast<double>(m.hidden_size);
  return 2.0 * tokens * h * static_cast<double>(m.fc1_width_of(ffn)) +
         2.0 * tokens * static_cast<double>(ffn) * h;
}

/// Forward FLOPs of the LM head (logits over the vocabulary): 2 B s h V.
double lm_head_forward_flops(const ModelSpec& m, int64_t samples) {
  return 2.0 * static_cast<double>(samples) * static_cast<double>(m.seq_length) *
         static_cast<double>(m.hidden_size) * static_cast<double>(m.vocab_size);
}

}  // namespace

double mlp_forward_flops(const ModelSpec& m, int64_t samples, int64_t layer) {
  require_valid_model(m);
  require_at_least_one(samples, "samples");
  if (layer < 0 || layer >= m.num_layers) {
    throw InvalidArgument("layer must be in [0, num_layers = " + std::to_string(m.num_layers) +
                          "), got " + std::to_string(layer));
  }
  const double tokens = static_cast<double>(samples) * static_cast<double>(m.seq_length);
  if (!m.is_moe_layer(layer)) return mlp_flops(m, tokens, m.ffn_hidden_size);
  const double h = static_cast<double>(m.hidden_size);
  const double router = 2.0 * tokens * h * static_cast<double>(m.num_moe_experts);
  const double routed =
      static_cast<double>(m.moe_router_topk) * mlp_flops(m, tokens, m.moe_expert_ffn());
  const double shared = m.moe_shared_expert_intermediate_size > 0
                            ? mlp_flops(m, tokens, m.moe_shared_expert_intermediate_size)
                            : 0.0;
  return router + routed + shared;
}

double layer_forward_flops(const ModelSpec& m, int64_t samples, int64_t layer) {
  const double mlp = mlp_forward_flops(m, samples, layer);  // validates
  const double b = static_cast<double>(samples);
  const double s = static_cast<double>(m.seq_length);
  const double h = static_cast<double>(m.hidden_size);
  const double qkv = 2.0 * b * s * h * static_cast<double>(m.qkv_width());  // 6Bsh^2 for MHA
  const double projection = 2.0 * b * s * static_cast<double>(m.attention_width()) * h;
  return qkv + attention_core_forward_flops(m, samples) + projection + mlp;
}

double layers_forward_flops(const ModelSpec& m, int64_t samples) {
  require_valid_model(m);
  if (!m.is_moe()) return static_cast<double>(m.num_layers) * layer_forward_flops(m, samples, 0);
  double total = 0;
  for (int64_t l = 0; l < m.num_layers; ++l) total += layer_forward_flops(m, samples, l);
  return total;
}

double model_flops_per_iteration(const ModelSpec& m, int64_t global_batch) {
  require_at_least_one(global_batch, "global_batch");
  const double forward =
      layers_forward_flops(m, global_batch) + lm_head_forward_flops(m, global_batch);
  return 3.0 * forward;  // forward + backward (2x forward)
}

double op_sac_recompute_forward_flops(const ModelSpec& m, int64_t samples) {
  require_valid_model(m);
  require_at_least_one(samples, "samples");
  if (m.activation != Activation::kSwiglu) {
    throw InvalidArgument("op_sac_recompute_forward_flops: needs a SwiGLU model (got activation " +
                          std::string(to_string(m.activation)) + ")");
  }
  const double tokens = static_cast<double>(samples) * static_cast<double>(m.seq_length);
  const double h = static_cast<double>(m.hidden_size);
  const double ad = static_cast<double>(m.attention_width());
  const double gd = ad * static_cast<double>(m.query_groups()) /
                    static_cast<double>(m.num_attention_heads);
  const double wk = 2.0 * tokens * h * gd;
  const double wo = 2.0 * tokens * ad * h;
  const double w3 = 2.0 * tokens * h * static_cast<double>(m.ffn_hidden_size);
  return wk + wo + w3;
}

double hardware_flops_per_iteration(const ModelSpec& m, int64_t global_batch,
                                    RecomputeGranularity r, SelectiveAcOption selective) {
  const double model = model_flops_per_iteration(m, global_batch);  // validates
  const double l = static_cast<double>(m.num_layers);
  switch (r) {
    case RecomputeGranularity::kNone:
      return model;
    case RecomputeGranularity::kSelective:
      if (selective == SelectiveAcOption::kOp) {
        return model + l * op_sac_recompute_forward_flops(m, global_batch);
      }
      return model + l * attention_core_forward_flops(m, global_batch);
    case RecomputeGranularity::kFull:
      return model + layers_forward_flops(m, global_batch);
  }
  throw InvalidArgument("recompute_granularity has an unknown value");
}

std::string model_flops_formula(const ModelSpec& m) {
  const bool kv_channels = m.attention_width() != m.hidden_size;
  const std::string attention =
      kv_channels ? "12 L s a d (attention, full s x s: not halved for causal masking)"
                  : "12 L s h (attention, full s x s: not halved for causal masking)";
  const bool swiglu = m.activation == Activation::kSwiglu;
  const std::string mlp_kind = swiglu ? "SwiGLU MLP" : "MLP";
  const std::string per_mlp = swiglu ? "18" : "12";
  std::string qkv;
  if (kv_channels) {
    qkv = "6 L h d (a + 2G) + 6 L a d h (QKV, projection; d = kv_channels)";
  } else {
    qkv = m.query_groups() == m.num_attention_heads ? "24 L h^2 (QKV, projection)"
                                                    : "12 L h^2 (1 + G/H) (GQA QKV, projection)";
  }
  std::string mlp;
  if (!m.is_moe()) {
    mlp = per_mlp + " L F h (" + mlp_kind + ")";
  } else {
    int64_t moe_layers = 0;
    for (int64_t l = 0; l < m.num_layers; ++l) moe_layers += m.is_moe_layer(l) ? 1 : 0;
    mlp = "L_moe (6 h E (router) + k " + per_mlp + " F_e h (top-k routed " + mlp_kind + " experts)";
    if (m.moe_shared_expert_intermediate_size > 0) mlp += " + " + per_mlp + " F_s h (shared expert)";
    mlp += ")";
    if (moe_layers < m.num_layers) mlp += " + (L - L_moe) " + per_mlp + " F h (dense " + mlp_kind + ")";
    mlp += " with L_moe = " + std::to_string(moe_layers) + ", E = " +
           std::to_string(m.num_moe_experts) + ", k = " + std::to_string(m.moe_router_topk) +
           " (balanced routing, no dropped tokens)";
  }
  return "model FLOPs per token = " + qkv + " + " + attention + " + " + mlp +
         " + 6 V h (LM head); fwd + bwd = 3 x fwd, no recomputation (Narayanan et al. SC'21; "
         "NVIDIA DGX Cloud recipes' formula for Llama)";
}

double narayanan_eq3_flops(const ModelSpec& m, int64_t global_batch) {
  require_valid_model(m);
  require_at_least_one(global_batch, "global_batch");
  const double b = static_cast<double>(global_batch);
  const double s = static_cast<double>(m.seq_length);
  const double l = static_cast<double>(m.num_layers);
  const double h = static_cast<double>(m.hidden_size);
  const double v = static_cast<double>(m.vocab_size);
  return 96.0 * b * s * l * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * l * h));
}

double korthikanti_model_flops(const ModelSpec& m, int64_t global_batch) {
  require_valid_model(m);
  require_at_least_one(global_batch, "global_batch");
  const double b = static_cast<double>(global_batch);
  const double s = static_cast<double>(m.seq_length);
  const double l = static_cast<double>(m.num_layers);
  const double h = static_cast<double>(m.hidden_size);
  const double v = static_cast<double>(m.vocab_size);
  return 72.0 * b * s * l * h * h * (1.0 + s / (6.0 * h) + v / (12.0 * l * h));
}

double model_flops_utilization(double model_flops, double iteration_time_s, int64_t num_gpus,
                               double peak_flops_per_gpu) {
  require_positive(iteration_time_s, "iteration_time_s");
  require_at_least_one(num_gpus, "num_gpus");
  require_positive(peak_flops_per_gpu, "peak_flops_per_gpu");
  if (!(model_flops >= 0)) {
    throw InvalidArgument("model_flops must be >= 0, got " + std::to_string(model_flops));
  }
  return model_flops / (iteration_time_s * static_cast<double>(num_gpus) * peak_flops_per_gpu);
}

}  // namespace traintwin
