// MoE router: top-k softmax with capacity, Switch aux loss; see moe_router.hpp.
#include "exec/cpu/moe_router.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "exec/cpu/checks.hpp"

namespace traintwin::exec::cpu {
namespace {

constexpr const char* kLayer = "moe_router";

void check_shape(int64_t tokens, int64_t experts) {
  require_positive(kLayer, tokens, "tokens");
  require_positive(kLayer, experts, "experts");
}

}  // namespace

int64_t moe_expert_capacity(int64_t tokens, int64_t topk, int64_t experts,
                            double capacity_factor) {
  check_shape(tokens, experts);
  require_positive(kLayer, topk, "topk");
  if (!std::isfinite(capacity_factor) || capacity_factor <= 0) {
    throw InvalidArgument(std::string(kLayer) + ": moe_expert_capacity_factor must be finite and > 0, got " +
                          std::to_string(capacity_factor));
  }
  return static_cast<int64_t>(std::ceil(static_cast<double>(tokens * topk) /
                                        static_cast<double>(experts) * capacity_factor));
}

void check_moe_router_forward(size_t logits, size_t gates, size_t topk_map, size_t routing_map,
                              size_t probs, size_t tokens_per_expert, int64_t tokens,
                              int64_t experts, int64_t topk, int64_t capacity,
                              bool pad_to_capacity) {
  check_shape(tokens, experts);
  require_positive(kLayer, topk, "topk");
  if (topk > experts) {
    throw InvalidArgument(std::string(kLayer) + ": moe_router_topk " + std::to_string(topk) +
                          " exceeds num_moe_experts " + std::to_string(experts));
  }
  if (pad_to_capacity && capacity < 1) {
    throw InvalidArgument(std::string(kLayer) +
                          ": moe_pad_expert_input_to_capacity needs a capacity "
                          "(moe_expert_capacity_factor), the router is dropless");
  }
  const int64_t ne = tokens * experts;
  require_size(kLayer, logits, ne, "logits");
  require_size(kLayer, gates, ne, "gates");
  require_size(kLayer, topk_map, ne, "topk_map");
  require_size(kLayer, routing_map, ne, "routing_map");
  require_size(kLayer, probs, ne, "probs");
  require_size(kLayer, tokens_per_expert, experts, "tokens_per_expert");
}

void check_moe_router_backward(size_t dlogits, size_t dprobs, size_t gates, size_t topk_map,
                               size_t routing_map, int64_t tokens, int64_t experts) {
  check_shape(tokens, experts);
  const int64_t ne = tokens * experts;
  require_size(kLayer, dlogits, ne, "dlogits");
  require_size(kLayer, dprobs, ne, "dprobs");
  require_size(kLayer, gates, ne, "gates");
  require_size(kLayer, topk_map, ne, "topk_map");
  require_size(kLayer, routing_map, ne, "routing_map");
}

template <typename Scalar>
void moe_topk_softmax_forward(std::span<Scalar> gates, std::span<uint8_t> topk_map,
                              std::span<uint8_t> routing_map, std::span<Scalar> probs,
                              std::span<int64_t> tokens_per_expert,
                              std::span<const Scalar> logits, int64_t tokens, int64_t experts,
                              int64_t topk, int64_t capacity, bool pad_to_capacity) {
  check_moe_router_forward(logits.size(), gates.size(), topk_map.size(), routing_map.size(),
                           probs.size(), tokens_per_expert.size(), tokens, experts, topk,
                           capacity, pad_to_capacity);
  const int64_t ne = tokens * experts;

  const auto e_count = static_cast<size_t>(experts);
  std::fill(gates.begin(), gates.end(), Scalar{0});
  std::fill(topk_map.begin(), topk_map.end(), uint8_t{0});
  std::fill(tokens_per_expert.begin(), tokens_per_expert.end(), int64_t{0});
  std::vector<int32_t> order(e_count);
  for (size_t n = 0; n < static_cast<size_t>(tokens); ++n) {
    const Scalar* row = logits.data() + n * e_count;
    std::iota(order.begin(), order.end(), 0);
    // Largest logits first, the smaller expert index on ties.
    std::partial_sort(order.begin(), order.begin() + topk, order.end(),
                      [row](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    const Scalar max = row[order[0]];
    Scalar sum{0};
    for (int64_t j = 0; j < topk; ++j) sum += std::exp(row[order[j]] - max);
    for (int64_t j = 0; j < topk; ++j) {
      const auto e = static_cast<size_t>(order[j]);
      gates[n * e_count + e] = std::exp(row[e] - max) / sum;
      topk_map[n * e_count + e] = 1;
      ++tokens_per_expert[e];
    }
  }

  if (capacity < 1) {
    std::copy(topk_map.begin(), topk_map.end(), routing_map.begin());
  } else {
    // Drop policy "probs": each expert keeps the `capacity` tokens with the largest gates (the
    // smaller token index on ties); at most all tokens.
    std::fill(routing_map.begin(), routing_map.end(), uint8_t{0});
    const int64_t keep = std::min(capacity, tokens);
    std::vector<int64_t> tok(static_cast<size_t>(tokens));
    for (size_t e = 0; e < e_count; ++e) {
      std::iota(tok.begin(), tok.end(), 0);
      auto gate = [&](int64_t n) { return gates[static_cast<size_t>(n) * e_count + e]; };
      std::partial_sort(tok.begin(), tok.begin() + keep, tok.end(), [&](int64_t a, int64_t b) {
        return gate(a) > gate(b) || (gate(a) == gate(b) && a < b);
      });
      for (int64_t j = 0; j < keep; ++j) {
        const size_t i = static_cast<size_t>(tok[static_cast<size_t>(j)]) * e_count + e;
        // Without padding only routed tokens stay (logical_and with the top-k map).
        routing_map[i] = pad_to_capacity ? uint8_t{1} : topk_map[i];
      }
    }
  }
  for (size_t i = 0; i < static_cast<size_t>(ne); ++i) {
    probs[i] = routing_map[i] ? gates[i] : Scalar{0};
  }
}

template <typename Scalar>
void moe_topk_softmax_backward(std::span<Scalar> dlogits, std::span<const Scalar> dprobs,
                               std::span<const Scalar> gates, std::span<const uint8_t> topk_map,
                               std::span<const uint8_t> routing_map, int64_t tokens,
                               int64_t experts) {
  check_moe_router_backward(dlogits.size(), dprobs.size(), gates.size(), topk_map.size(),
                            routing_map.size(), tokens, experts);
  const auto e_count = static_cast<size_t>(experts);
  for (size_t n = 0; n < static_cast<size_t>(tokens); ++n) {
    const size_t base = n * e_count;
    Scalar dot{0};
    for (size_t e = 0; e < e_count; ++e) {
      if (topk_map[base + e] && routing_map[base + e]) dot += gates[base + e] * dprobs[base + e];
    }
    for (size_t e = 0; e < e_count; ++e) {
      if (!topk_map[base + e]) continue;
      const Scalar d = routing_map[base + e] ? dprobs[base + e] : Scalar{0};
      dlogits[base + e] += gates[base + e] * (d - dot);
    }
  }
}

void check_moe_aux_loss(size_t scores, size_t logits, size_t tokens_per_expert, int64_t tokens,
                        int64_t experts, int64_t total_tokens, int64_t topk) {
  check_shape(tokens, experts);
  require_positive(kLayer, topk, "topk");
  if (total_tokens < tokens) {
    throw InvalidArgument(std::string(kLayer) + ": aux loss total_tokens " +
                          std::to_string(total_tokens) + " is less than this rank's tokens " +
                          std::to_string(tokens));
  }
  require_size(kLayer, scores, tokens * experts, "scores");
  require_size(kLayer, logits, tokens * experts, "logits");
  require_size(kLayer, tokens_per_expert, experts, "tokens_per_expert");
}

double moe_aux_loss_scale(int64_t experts, int64_t total_tokens, int64_t topk, double coeff) {
  const auto t = static_cast<double>(total_tokens);
  return coeff * static_cast<double>(experts) / (t * t * static_cast<double>(topk));
}

template <typename Scalar>
Scalar moe_switch_aux_loss_forward(std::span<Scalar> scores, std::span<const Scalar> logits,
                                   std::span<const int64_t> tokens_per_expert, int64_t tokens,
                                   int64_t experts, int64_t total_tokens, int64_t topk,
                                   double coeff) {
  check_moe_aux_loss(scores.size(), logits.size(), tokens_per_expert.size(), tokens, experts, total_tokens,
            topk);
  const auto e_count = static_cast<size_t>(experts);
  std::vector<double> per_expert(e_count, 0.0);
  for (size_t n = 0; n < static_cast<size_t>(tokens); ++n) {
    const Scalar* row = logits.data() + n * e_count;
    Scalar* s = scores.data() + n * e_count;
    const Scalar max = *std::max_element(row, row + e_count);
    Scalar sum{0};
    for (size_t e = 0; e < e_count; ++e) sum += (s[e] = std::exp(row[e] - max));
    for (size_t e = 0; e < e_count; ++e) {
      s[e] /= sum;
      per_expert[e] += static_cast<double>(s[e]);
    }
  }
  double total = 0;
  for (size_t e = 0; e < e_count; ++e) {
    total += per_expert[e] * static_cast<double>(tokens_per_expert[e]);
  }
  return static_cast<Scalar>(total * moe_aux_loss_scale(experts, total_tokens, topk, coeff));
}

template <typename Scalar>
void moe_switch_aux_loss_backward(std::span<Scalar> dlogits, Scalar daux,
                                  std::span<const Scalar> scores,
                                  std::span<const int64_t> tokens_per_expert, int64_t tokens,
                                  int64_t experts, int64_t total_tokens, int64_t topk,
                                  double coeff) {
  check_moe_aux_loss(scores.size(), dlogits.size(), tokens_per_expert.size(), tokens, experts, total_tokens,
            topk);
  const auto e_count = static_cast<size_t>(experts);
  const double scale = moe_aux_loss_scale(experts, total_tokens, topk, coeff);
  std::vector<Scalar> c(e_count);
  for (size_t e = 0; e < e_count; ++e) {
    c[e] = static_cast<Scalar>(scale * static_cast<double>(tokens_per_expert[e]));
  }
  for (size_t n = 0; n < static_cast<size_t>(tokens); ++n) {
    const Scalar* s = scores.data() + n * e_count;
    Scalar dot{0};
    for (size_t e = 0; e < e_count; ++e) dot += s[e] * c[e];
    for (size_t e = 0; e < e_count; ++e) dlogits[n * e_count + e] += daux * s[e] * (c[e] - dot);
  }
}

#define TRAINTWIN_MOE_ROUTER(Scalar)                                                              \
  template void moe_topk_softmax_forward<Scalar>(                                                 \
      std::span<Scalar>, std::span<uint8_t>, std::span<uint8_t>, std::span<Scalar>,               \
      std::span<int64_t>, std::span<const Scalar>, int64_t, int64_t, int64_t, int64_t, bool);     \
  template void moe_topk_softmax_backward<Scalar>(                                                \
      std::span<Scalar>, std::span<const Scalar>, std::span<const Scalar>,                        \
      std::span<const uint8_t>, std::span<const uint8_t>, int64_t, int64_t);                      \
  template Scalar moe_switch_aux_loss_forward<Scalar>(std::span<Scalar>, std::span<const Scalar>, \
                                                      std::span<const int64_t>, int64_t, int64_t, \
                                                      int64_t, int64_t, double);                  \
  template void moe_switch_aux_loss_backward<Scalar>(std::span<Scalar>, Scalar,                   \
                                                     std::span<const Scalar>,                     \
                                                     std::span<const int64_t>, int64_t, int64_t,  \
                                                     int64_t, int64_t, double);
TRAINTWIN_MOE_ROUTER(float)
TRAINTWIN_MOE_ROUTER(double)
#undef TRAINTWIN_MOE_ROUTER

}  // namespace traintwin::exec::cpu
