// Vocab-parallel cross-entropy; see vocab_parallel_cross_entropy.hpp.
#include "exec/cpu/vocab_parallel_cross_entropy.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "core/checks.hpp"
#include "core/error.hpp"
#include "exec/cpu/checks.hpp"
#include "exec/cpu/vector_math.hpp"

namespace traintwin::exec::cpu {
namespace {

constexpr const char* kLayer = "vocab_parallel_cross_entropy";

void require_size(size_t actual, int64_t expected, const char* name) {
  cpu::require_size(kLayer, actual, expected, name);
}

void check_rows(int64_t batch, int64_t seq) {
  require_at_least_one(batch, "vocab_parallel_cross_entropy batch");
  require_at_least_one(seq, "vocab_parallel_cross_entropy seq");
}

// Shard inside [0, vocab_total) and every target in [0, vocab_total).
void check_shard_and_targets(std::span<const int32_t> targets, int64_t rows, int64_t vocab_start,
                             int64_t vocab_local, int64_t vocab_total) {
  require_at_least_one(vocab_local, "vocab_parallel_cross_entropy vocab_local");
  require_at_least_one(vocab_total, "vocab_parallel_cross_entropy vocab_total");
  if (vocab_start < 0 || vocab_start > vocab_total - vocab_local) {
    throw InvalidArgument(std::string(kLayer) + ": shard [vocab_start " +
                          std::to_string(vocab_start) + ", + vocab_local " +
                          std::to_string(vocab_local) + ") is not inside [0, vocab_total " +
                          std::to_string(vocab_total) + ")");
  }
  require_size(targets.size(), rows, "targets");
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i] < 0 || targets[i] >= vocab_total) {
      throw InvalidArgument(std::string(kLayer) + ": target " + std::to_string(targets[i]) +
                            " at position " + std::to_string(i) + " is outside [0, " +
                            std::to_string(vocab_total) + ")");
    }
  }
}

// fp32 row loops over the vocabulary, vectorized: the reductions keep kLanes partial results
// (element v goes to lane v % kLanes, lanes combined in order at the end), so the result does
// not depend on the vector width the CPU has; exp is exp_approx (vector_math.hpp).
constexpr size_t kLanes = 16;

TRAINTWIN_CPU_CLONES
float row_max_f32(const float* __restrict x, size_t n) {
  float lane[kLanes];
  std::fill(lane, lane + kLanes, x[0]);
  size_t v = 0;
  for (; v + kLanes <= n; v += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) lane[l] = x[v + l] > lane[l] ? x[v + l] : lane[l];
  }
  float m = lane[0];
  for (size_t l = 1; l < kLanes; ++l) m = lane[l] > m ? lane[l] : m;
  for (; v < n; ++v) m = x[v] > m ? x[v] : m;
  return m;
}

TRAINTWIN_CPU_CLONES
float row_sum_exp_f32(const float* __restrict x, float maxval, size_t n) {
  float lane[kLanes] = {};
  size_t v = 0;
  for (; v + kLanes <= n; v += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) lane[l] += exp_approx(x[v + l] - maxval);
  }
  float sum = 0;
  for (size_t l = 0; l < kLanes; ++l) sum += lane[l];
  for (; v < n; ++v) sum += exp_approx(x[v] - maxval);
  return sum;
}

// dx += (softmax(x) - onehot(target)) * dloss; target may lie outside [0, n) (another shard).
TRAINTWIN_CPU_CLONES
void row_softmax_grad_f32(float* __restrict dx, const float* __restrict x, float maxval,
                          float inv_sum, float dloss, int64_t target, size_t n) {
  for (size_t v = 0; v < n; ++v) {
    const float prob = exp_approx(x[v] - maxval) * inv_sum;
    const float indicator = static_cast<int64_t>(v) == target ? 1.0f : 0.0f;
    dx[v] += (prob - indicator) * dloss;
  }
}

}  // namespace

template <typename Scalar>
void vocab_parallel_logits_max(std::span<Scalar> logits_max_local,
                               std::span<const Scalar> logits_local, int64_t batch, int64_t seq,
                               int64_t vocab_local) {
  check_rows(batch, seq);
  require_at_least_one(vocab_local, "vocab_parallel_cross_entropy vocab_local");
  const int64_t rows = batch * seq;
  require_size(logits_max_local.size(), rows, "logits_max_local");
  require_size(logits_local.size(), rows * vocab_local, "logits_local");
  for (int64_t i = 0; i < rows; ++i) {
    const Scalar* x = logits_local.data() + i * vocab_local;  // [V_local]
    if constexpr (std::is_same_v<Scalar, float>) {
      logits_max_local[i] = row_max_f32(x, static_cast<size_t>(vocab_local));
      continue;
    }
    Scalar maxval = x[0];
    for (int64_t v = 1; v < vocab_local; ++v) {
      if (x[v] > maxval) maxval = x[v];
    }
    logits_max_local[i] = maxval;
  }
}

template <typename Scalar>
void vocab_parallel_sum_exp(std::span<Scalar> sum_exp_local, std::span<Scalar> target_logit_local,
                            std::span<const Scalar> logits_local,
                            std::span<const Scalar> logits_max, std::span<const int32_t> targets,
                            int64_t batch, int64_t seq, int64_t vocab_start, int64_t vocab_local,
                            int64_t vocab_total) {
  check_rows(batch, seq);
  const int64_t rows = batch * seq;
  check_shard_and_targets(targets, rows, vocab_start, vocab_local, vocab_total);
  require_size(sum_exp_local.size(), rows, "sum_exp_local");
  require_size(target_logit_local.size(), rows, "target_logit_local");
  require_size(logits_local.size(), rows * vocab_local, "logits_local");
  require_size(logits_max.size(), rows, "logits_max");
  for (int64_t i = 0; i < rows; ++i) {
    const Scalar* x = logits_local.data() + i * vocab_local;  // [V_local]
    const Scalar maxval = logits_max[i];
    Scalar sum = 0;
    if constexpr (std::is_same_v<Scalar, float>) {
      sum = row_sum_exp_f32(x, maxval, static_cast<size_t>(vocab_local));
    } else {
      for (int64_t v = 0; v < vocab_local; ++v) sum += std::exp(x[v] - maxval);
    }
    sum_exp_local[i] = sum;
    const int64_t local = int64_t{targets[i]} - vocab_start;
    target_logit_local[i] = local >= 0 && local < vocab_local ? x[local] : Scalar{0};
  }
}

template <typename Scalar>
void vocab_parallel_cross_entropy_loss(std::span<Scalar> losses, std::span<const Scalar> sum_exp,
                                       std::span<const Scalar> logits_max,
                                       std::span<const Scalar> target_logit, int64_t batch,
                                       int64_t seq) {
  check_rows(batch, seq);
  const int64_t rows = batch * seq;
  require_size(losses.size(), rows, "losses");
  require_size(sum_exp.size(), rows, "sum_exp");
  require_size(logits_max.size(), rows, "logits_max");
  require_size(target_logit.size(), rows, "target_logit");
  for (int64_t i = 0; i < rows; ++i) {
    losses[i] = std::log(sum_exp[i]) + (logits_max[i] - target_logit[i]);
  }
}

template <typename Scalar>
void vocab_parallel_cross_entropy_backward(
    std::span<Scalar> dlogits_local, std::span<const Scalar> dlosses,
    std::span<const Scalar> logits_local, std::span<const Scalar> logits_max,
    std::span<const Scalar> sum_exp, std::span<const int32_t> targets, int64_t batch, int64_t seq,
    int64_t vocab_start, int64_t vocab_local, int64_t vocab_total) {
  check_rows(batch, seq);
  const int64_t rows = batch * seq;
  check_shard_and_targets(targets, rows, vocab_start, vocab_local, vocab_total);
  require_size(dlogits_local.size(), rows * vocab_local, "dlogits_local");
  require_size(dlosses.size(), rows, "dlosses");
  require_size(logits_local.size(), rows * vocab_local, "logits_local");
  require_size(logits_max.size(), rows, "logits_max");
  require_size(sum_exp.size(), rows, "sum_exp");
  for (int64_t i = 0; i < rows; ++i) {
    Scalar* dx = dlogits_local.data() + i * vocab_local;      // [V_local]
    const Scalar* x = logits_local.data() + i * vocab_local;  // [V_local]
    const Scalar maxval = logits_max[i];
    const Scalar inv_sum = Scalar{1} / sum_exp[i];
    const Scalar dloss = dlosses[i];
    const int64_t local_target = int64_t{targets[i]} - vocab_start;  // may be out of [0, V_local)
    if constexpr (std::is_same_v<Scalar, float>) {
      row_softmax_grad_f32(dx, x, maxval, inv_sum, dloss, local_target,
                           static_cast<size_t>(vocab_local));
      continue;
    }
    for (int64_t v = 0; v < vocab_local; ++v) {
      const Scalar prob = std::exp(x[v] - maxval) * inv_sum;
      const Scalar indicator = v == local_target ? Scalar{1} : Scalar{0};
      dx[v] += (prob - indicator) * dloss;
    }
  }
}

template void vocab_parallel_logits_max<float>(std::span<float>, std::span<const float>, int64_t,
                                               int64_t, int64_t);
template void vocab_parallel_logits_max<double>(std::span<double>, std::span<const double>, int64_t,
                                                int64_t, int64_t);
template void vocab_parallel_sum_exp<float>(std::span<float>, std::span<float>,
                                            std::span<const float>, std::span<const float>,
                                            std::span<const int32_t>, int64_t, int64_t, int64_t,
                                            int64_t, int64_t);
template void vocab_parallel_sum_exp<double>(std::span<double>, std::span<double>,
                                             std::span<const double>, std::span<const double>,
                                             std::span<const int32_t>, int64_t, int64_t, int64_t,
                                             int64_t, int64_t);
template void vocab_parallel_cross_entropy_loss<float>(std::span<float>, std::span<const float>,
                                                       std::span<const float>,
                                                       std::span<const float>, int64_t, int64_t);
template void vocab_parallel_cross_entropy_loss<double>(std::span<double>, std::span<const double>,
                                                        std::span<const double>,
                                                        std::span<const double>, int64_t, int64_t);
template void vocab_parallel_cross_entropy_backward<float>(
    std::span<float>, std::span<const float>, std::span<const float>, std::span<const float>,
    std::span<const float>, std::span<const int32_t>, int64_t, int64_t, int64_t, int64_t, int64_t);
template void vocab_parallel_cross_entropy_backward<double>(
    std::span<double>, std::span<const double>, std::span<const double>, std::span<const double>,
    std::span<const double>, std::span<const int32_t>, int64_t, int64_t, int64_t, int64_t, int64_t);

}  // namespace traintwin::exec::cpu
