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

/// Forward FLOPs of the attention core (Q K^T and attention over values): 4 B s^2 h.
double attention_core_forward_flops(const ModelSpec& m, int64_t samples) {
  const double b = static_cast<double>(samples);
  const double s = static_cast<double>(m.seq_length);
  const double h = static_cast<double>(m.hidden_size);
  return 2.0 * b * s * s * h + 2.0 * b * s * s * h;
}

/// Forward FLOPs of the LM head (logits over the vocabulary): 2 B s h V.
double lm_head_forward_flops(const ModelSpec& m, int64_t samples) {
  return 2.0 * static_cast<double>(samples) * static_cast<double>(m.seq_length) *
         static_cast<double>(m.hidden_size) * static_cast<double>(m.vocab_size);
}

}  // namespace

double layer_forward_flops(const ModelSpec& m, int64_t samples) {
  require_valid_model(m);
  require_at_least_one(samples, "samples");
  const double b = static_cast<double>(samples);
  const double s = static_cast<double>(m.seq_length);
  const double h = static_cast<double>(m.hidden_size);
  const double ffn = static_cast<double>(m.ffn_hidden_size);
  const double qkv = 2.0 * b * s * h * static_cast<double>(m.qkv_width());  // 6Bsh^2 for MHA
  const double projection = 2.0 * b * s * h * h;
  // FC1 (2 ffn wide for SwiGLU's gate and up) + FC2.
  const double mlp = 2.0 * b * s * h * static_cast<double>(m.fc1_width()) + 2.0 * b * s * ffn * h;
  return qkv + attention_core_forward_flops(m, samples) + projection + mlp;
}

double model_flops_per_iteration(const ModelSpec& m, int64_t global_batch) {
  require_at_least_one(global_batch, "global_batch");
  const double forward = static_cast<double>(m.num_layers) * layer_forward_flops(m, global_batch) +
                         lm_head_forward_flops(m, global_batch);
  return 3.0 * forward;  // forward + backward (2x forward)
}

double hardware_flops_per_iteration(const ModelSpec& m, int64_t global_batch,
                                    RecomputeGranularity r) {
  const double model = model_flops_per_iteration(m, global_batch);  // validates
  const double l = static_cast<double>(m.num_layers);
  switch (r) {
    case RecomputeGranularity::kNone:
      return model;
    case RecomputeGranularity::kSelective:
      return model + l * attention_core_forward_flops(m, global_batch);
    case RecomputeGranularity::kFull:
      return model + l * layer_forward_flops(m, global_batch);
  }
  throw InvalidArgument("recompute_granularity has an unknown value");
}

std::string model_flops_formula(const ModelSpec& m) {
  const std::string attention = "12 L s h (attention, full s x s: not halved for causal masking)";
  const std::string mlp = m.activation == Activation::kSwiglu ? "18 L F h (SwiGLU MLP)"
                                                              : "12 L F h (MLP)";
  const std::string qkv = m.query_groups() == m.num_attention_heads
                              ? "24 L h^2 (QKV, projection)"
                              : "12 L h^2 (1 + G/H) (GQA QKV, projection)";
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
