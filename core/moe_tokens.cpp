// Tokens of an MoE layer per rank (see moe_tokens.hpp for the dispatchers and the sources).
#include "core/moe_tokens.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"

namespace traintwin {

int64_t moe_local_tokens(const Scenario& s) {
  const int64_t cp = s.parallel.context_parallel_size;
  const int64_t tp = s.parallel.tensor_model_parallel_size;
  if (cp < 1 || s.model.seq_length % cp != 0) {
    throw InvalidArgument("seq_length (" + std::to_string(s.model.seq_length) +
                          ") must be divisible by context_parallel_size (" + std::to_string(cp) +
                          ")");
  }
  const int64_t tokens = s.training.micro_batch_size * (s.model.seq_length / cp);
  if (!s.parallel.sequence_parallel) return tokens;
  if (tp < 1 || tokens % tp != 0) {
    throw InvalidArgument("the tokens of a micro-batch (" + std::to_string(tokens) +
                          ") must be divisible by tensor_model_parallel_size (" +
                          std::to_string(tp) + ") under sequence parallelism");
  }
  return tokens / tp;
}

int64_t moe_expert_capacity(const Scenario& s) {
  const ModelSpec& m = s.model;
  if (!m.moe_expert_capacity_factor) return 0;
  const int64_t tokens = moe_local_tokens(s);
  const double copies = static_cast<double>(tokens * m.moe_router_topk);
  const double capacity =
      std::ceil(copies / static_cast<double>(m.num_moe_experts) * *m.moe_expert_capacity_factor);
  // An expert keeps each token at most once: the top `capacity` of the tokens' gates.
  return capacity >= static_cast<double>(tokens) ? tokens : static_cast<int64_t>(capacity);
}

double moe_expert_tokens_per_rank(const Scenario& s) {
  const ModelSpec& m = s.model;
  if (!m.is_moe()) {
    throw InvalidArgument("moe_expert_tokens_per_rank: the model has no routed experts "
                          "(num_moe_experts = 0)");
  }
  const double etp = static_cast<double>(s.parallel.expert_tp());
  const double mean = etp * static_cast<double>(moe_local_tokens(s) * m.moe_router_topk);
  const double busiest = mean * s.cluster.what_if.moe_load_imbalance.value_or(1.0);
  if (!m.moe_expert_capacity_factor) return busiest;
  const double cap = etp * static_cast<double>(m.num_moe_experts * moe_expert_capacity(s));
  return m.moe_pad_expert_input_to_capacity ? cap : std::min(busiest, cap);
}

}  // namespace traintwin
