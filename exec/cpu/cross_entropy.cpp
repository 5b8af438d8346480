// Softmax + cross-entropy; see cross_entropy.hpp.
#include "exec/cpu/cross_entropy.hpp"

#include "exec/cpu/checks.hpp"

#include <cmath>
#include <string>

#include "core/checks.hpp"
#include "core/error.hpp"

namespace traintwin::exec::cpu {
namespace {

void require_size(size_t actual, int64_t expected, const char* name) {
  cpu::require_size("cross_entropy", actual, expected, name);
}


void check_sizes(int64_t batch, int64_t seq, int64_t vocab) {
  require_at_least_one(batch, "cross_entropy batch");
  require_at_least_one(seq, "cross_entropy seq");
  require_at_least_one(vocab, "cross_entropy vocab");
}

void check_targets(std::span<const int32_t> targets, int64_t bt, int64_t vocab) {
  require_size(targets.size(), bt, "targets");
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i] < 0 || targets[i] >= vocab) {
      throw InvalidArgument("cross_entropy: target " + std::to_string(targets[i]) +
                            " at position " + std::to_string(i) + " is outside [0, " +
                            std::to_string(vocab) + ")");
    }
  }
}

}  // namespace

template <typename Scalar>
void softmax_forward(std::span<Scalar> probs, std::span<const Scalar> logits, int64_t batch,
                     int64_t seq, int64_t vocab) {
  check_sizes(batch, seq, vocab);
  const int64_t bt = batch * seq;
  require_size(probs.size(), bt * vocab, "probs");
  require_size(logits.size(), bt * vocab, "logits");
  for (int64_t i = 0; i < bt; ++i) {
    const Scalar* x = logits.data() + i * vocab;  // [V]
    Scalar* p = probs.data() + i * vocab;         // [V]
    Scalar maxval = x[0];
    for (int64_t v = 1; v < vocab; ++v) {
      if (x[v] > maxval) maxval = x[v];
    }
    Scalar sum = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      p[v] = std::exp(x[v] - maxval);
      sum += p[v];
    }
    for (int64_t v = 0; v < vocab; ++v) p[v] /= sum;
  }
}

template <typename Scalar>
void cross_entropy_forward(std::span<Scalar> losses, std::span<const Scalar> probs,
                           std::span<const int32_t> targets, int64_t batch, int64_t seq,
                           int64_t vocab) {
  check_sizes(batch, seq, vocab);
  const int64_t bt = batch * seq;
  require_size(losses.size(), bt, "losses");
  require_size(probs.size(), bt * vocab, "probs");
  check_targets(targets, bt, vocab);
  for (int64_t i = 0; i < bt; ++i) losses[i] = -std::log(probs[i * vocab + targets[i]]);
}

template <typename Scalar>
void cross_entropy_softmax_backward(std::span<Scalar> dlogits, std::span<const Scalar> dlosses,
                                    std::span<const Scalar> probs,
                                    std::span<const int32_t> targets, int64_t batch, int64_t seq,
                                    int64_t vocab) {
  check_sizes(batch, seq, vocab);
  const int64_t bt = batch * seq;
  require_size(dlogits.size(), bt * vocab, "dlogits");
  require_size(dlosses.size(), bt, "dlosses");
  require_size(probs.size(), bt * vocab, "probs");
  check_targets(targets, bt, vocab);
  for (int64_t i = 0; i < bt; ++i) {
    Scalar* dx = dlogits.data() + i * vocab;      // [V]
    const Scalar* p = probs.data() + i * vocab;   // [V]
    const Scalar dloss = dlosses[i];
    for (int64_t v = 0; v < vocab; ++v) {
      const Scalar indicator = v == targets[i] ? Scalar{1} : Scalar{0};
      dx[v] += (p[v] - indicator) * dloss;
    }
  }
}

template void softmax_forward<float>(std::span<float>, std::span<const float>, int64_t, int64_t,
                                     int64_t);
template void softmax_forward<double>(std::span<double>, std::span<const double>, int64_t,
                                      int64_t, int64_t);
template void cross_entropy_forward<float>(std::span<float>, std::span<const float>,
                                           std::span<const int32_t>, int64_t, int64_t, int64_t);
template void cross_entropy_forward<double>(std::span<double>, std::span<const double>,
                                            std::span<const int32_t>, int64_t, int64_t, int64_t);
template void cross_entropy_softmax_backward<float>(std::span<float>, std::span<const float>,
                                                    std::span<const float>,
                                                    std::span<const int32_t>, int64_t, int64_t,
                                                    int64_t);
template void cross_entropy_softmax_backward<double>(std::span<double>, std::span<const double>,
                                                     std::span<const double>,
                                                     std::span<const int32_t>, int64_t, int64_t,
                                                     int64_t);

}  // namespace traintwin::exec::cpu
