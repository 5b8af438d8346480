// MoE token permutation; see moe_permute.hpp.
#include "exec/cpu/moe_permute.hpp"

#include <algorithm>
#include <string>

#include "exec/cpu/checks.hpp"

namespace traintwin::exec::cpu {
namespace {

constexpr const char* kLayer = "moe_permute";

}  // namespace

void check_moe_permutation_rows(const MoePermutation& perm, size_t rows_size,
                                const char* rows_name, size_t tokens_size,
                                const char* tokens_name, int64_t tokens, int64_t channels) {
  require_positive(kLayer, tokens, "tokens");
  require_positive(kLayer, channels, "channels");
  require_same(kLayer, perm.token.size(), perm.expert.size(), "permutation token / expert");
  require_size(kLayer, rows_size, perm.rows() * channels, rows_name);
  require_size(kLayer, tokens_size, tokens * channels, tokens_name);
  for (const int64_t t : perm.token) {
    if (t < 0 || t >= tokens) {
      throw InvalidArgument(std::string(kLayer) + ": permuted row names token " +
                            std::to_string(t) + ", outside [0, " + std::to_string(tokens) + ")");
    }
  }
}

void check_moe_permutation_experts(const MoePermutation& perm, size_t probs_size, int64_t tokens,
                                   int64_t experts) {
  require_positive(kLayer, experts, "experts");
  require_size(kLayer, probs_size, tokens * experts, "probs");
  for (const int32_t e : perm.expert) {
    if (e < 0 || e >= experts) {
      throw InvalidArgument(std::string(kLayer) + ": permuted row names expert " +
                            std::to_string(e) + ", outside [0, " + std::to_string(experts) + ")");
    }
  }
}

std::vector<int64_t> moe_sort_chunks_starts(std::span<const int64_t> chunk_rows,
                                            std::span<const int64_t> order, size_t inp_size,
                                            size_t out_size, int64_t channels) {
  require_positive(kLayer, channels, "channels");
  require_same(kLayer, chunk_rows.size(), order.size(), "sort_chunks chunk_rows / order");
  const size_t k = chunk_rows.size();
  std::vector<int64_t> start(k + 1, 0);
  for (size_t i = 0; i < k; ++i) {
    if (chunk_rows[i] < 0) {
      throw InvalidArgument(std::string(kLayer) + ": sort_chunks chunk " + std::to_string(i) +
                            " has " + std::to_string(chunk_rows[i]) + " rows");
    }
    start[i + 1] = start[i] + chunk_rows[i];
  }
  require_size(kLayer, inp_size, start[k] * channels, "sort_chunks inp");
  require_size(kLayer, out_size, start[k] * channels, "sort_chunks out");
  std::vector<uint8_t> seen(k, 0);
  for (const int64_t o : order) {
    if (o < 0 || o >= static_cast<int64_t>(k) || seen[static_cast<size_t>(o)]) {
      throw InvalidArgument(std::string(kLayer) + ": sort_chunks order is not a permutation of 0.." +
                            std::to_string(k - 1));
    }
    seen[static_cast<size_t>(o)] = 1;
  }
  return start;
}

MoePermutation moe_make_permutation(std::span<const uint8_t> routing_map, int64_t tokens,
                                    int64_t experts) {
  require_positive(kLayer, tokens, "tokens");
  require_positive(kLayer, experts, "experts");
  require_size(kLayer, routing_map.size(), tokens * experts, "routing_map");
  MoePermutation p;
  p.rows_per_expert.assign(static_cast<size_t>(experts), 0);
  const auto e_count = static_cast<size_t>(experts);
  for (size_t e = 0; e < e_count; ++e) {
    for (size_t n = 0; n < static_cast<size_t>(tokens); ++n) {
      if (!routing_map[n * e_count + e]) continue;
      p.token.push_back(static_cast<int64_t>(n));
      p.expert.push_back(static_cast<int32_t>(e));
      ++p.rows_per_expert[e];
    }
  }
  return p;
}

template <typename Scalar>
void moe_permute_forward(std::span<Scalar> out, std::span<const Scalar> inp,
                         const MoePermutation& perm, int64_t tokens, int64_t channels) {
  check_moe_permutation_rows(perm, out.size(), "out", inp.size(), "inp", tokens, channels);
  const auto c = static_cast<size_t>(channels);
  for (size_t m = 0; m < perm.token.size(); ++m) {
    const Scalar* src = inp.data() + static_cast<size_t>(perm.token[m]) * c;
    std::copy(src, src + c, out.data() + m * c);
  }
}

template <typename Scalar>
void moe_permute_backward(std::span<Scalar> dinp, std::span<const Scalar> dout,
                          const MoePermutation& perm, int64_t tokens, int64_t channels) {
  check_moe_permutation_rows(perm, dout.size(), "dout", dinp.size(), "dinp", tokens, channels);
  const auto c = static_cast<size_t>(channels);
  for (size_t m = 0; m < perm.token.size(); ++m) {
    Scalar* dst = dinp.data() + static_cast<size_t>(perm.token[m]) * c;
    const Scalar* src = dout.data() + m * c;
    for (size_t i = 0; i < c; ++i) dst[i] += src[i];
  }
}

template <typename Scalar>
void moe_unpermute_forward(std::span<Scalar> out, std::span<const Scalar> inp,
                           std::span<const Scalar> probs, const MoePermutation& perm,
                           int64_t tokens, int64_t experts, int64_t channels) {
  check_moe_permutation_rows(perm, inp.size(), "inp", out.size(), "out", tokens, channels);
  check_moe_permutation_experts(perm, probs.size(), tokens, experts);
  std::fill(out.begin(), out.end(), Scalar{0});
  const auto c = static_cast<size_t>(channels);
  const auto e_count = static_cast<size_t>(experts);
  for (size_t m = 0; m < perm.token.size(); ++m) {
    const auto n = static_cast<size_t>(perm.token[m]);
    const Scalar w = probs[n * e_count + static_cast<size_t>(perm.expert[m])];
    Scalar* dst = out.data() + n * c;
    const Scalar* src = inp.data() + m * c;
    for (size_t i = 0; i < c; ++i) dst[i] += w * src[i];
  }
}

template <typename Scalar>
void moe_unpermute_backward(std::span<Scalar> dinp, std::span<Scalar> dprobs,
                            std::span<const Scalar> dout, std::span<const Scalar> inp,
                            std::span<const Scalar> probs, const MoePermutation& perm,
                            int64_t tokens, int64_t experts, int64_t channels) {
  check_moe_permutation_rows(perm, inp.size(), "inp", dout.size(), "dout", tokens, channels);
  require_size(kLayer, dinp.size(), perm.rows() * channels, "dinp");
  check_moe_permutation_experts(perm, probs.size(), tokens, experts);
  require_size(kLayer, dprobs.size(), tokens * experts, "dprobs");
  const auto c = static_cast<size_t>(channels);
  const auto e_count = static_cast<size_t>(experts);
  for (size_t m = 0; m < perm.token.size(); ++m) {
    const auto n = static_cast<size_t>(perm.token[m]);
    const size_t ne = n * e_count + static_cast<size_t>(perm.expert[m]);
    const Scalar w = probs[ne];
    const Scalar* g = dout.data() + n * c;
    const Scalar* x = inp.data() + m * c;
    Scalar* dx = dinp.data() + m * c;
    Scalar dot{0};
    for (size_t i = 0; i < c; ++i) {
      dx[i] += w * g[i];
      dot += g[i] * x[i];
    }
    dprobs[ne] += dot;
  }
}

template <typename Scalar>
void moe_sort_chunks(std::span<Scalar> out, std::span<const Scalar> inp,
                     std::span<const int64_t> chunk_rows, std::span<const int64_t> order,
                     int64_t channels) {
  const std::vector<int64_t> start =
      moe_sort_chunks_starts(chunk_rows, order, inp.size(), out.size(), channels);
  const auto c = static_cast<size_t>(channels);
  Scalar* dst = out.data();
  for (const int64_t o : order) {
    const auto i = static_cast<size_t>(o);
    const Scalar* src = inp.data() + static_cast<size_t>(start[i]) * c;
    dst = std::copy(src, src + static_cast<size_t>(chunk_rows[i]) * c, dst);
  }
}

#define TRAINTWIN_MOE_PERMUTE(Scalar)                                                             \
  template void moe_permute_forward<Scalar>(std::span<Scalar>, std::span<const Scalar>,           \
                                            const MoePermutation&, int64_t, int64_t);             \
  template void moe_permute_backward<Scalar>(std::span<Scalar>, std::span<const Scalar>,          \
                                             const MoePermutation&, int64_t, int64_t);            \
  template void moe_unpermute_forward<Scalar>(std::span<Scalar>, std::span<const Scalar>,         \
                                              std::span<const Scalar>, const MoePermutation&,     \
                                              int64_t, int64_t, int64_t);                         \
  template void moe_unpermute_backward<Scalar>(                                                   \
      std::span<Scalar>, std::span<Scalar>, std::span<const Scalar>, std::span<const Scalar>,     \
      std::span<const Scalar>, const MoePermutation&, int64_t, int64_t, int64_t);                 \
  template void moe_sort_chunks<Scalar>(std::span<Scalar>, std::span<const Scalar>,               \
                                        std::span<const int64_t>, std::span<const int64_t>,       \
                                        int64_t);
TRAINTWIN_MOE_PERMUTE(float)
TRAINTWIN_MOE_PERMUTE(double)
#undef TRAINTWIN_MOE_PERMUTE

}  // namespace traintwin::exec::cpu
