// Megatron learning-rate schedule; see lr_schedule.hpp.
#include "exec/lr_schedule.hpp"

#include <cmath>
#include <numbers>
#include <string>

#include "core/error.hpp"

namespace traintwin::exec {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw InvalidArgument("learning rate schedule: " + what);
}

void check(const LearningRateSchedule& s, int64_t step) {
  if (!(s.max_lr > 0.0 && std::isfinite(s.max_lr))) {
    fail("max_lr must be > 0 and finite, got " + std::to_string(s.max_lr));
  }
  if (!(s.min_lr >= 0.0 && s.min_lr <= s.max_lr)) {
    fail("min_lr must be in [0, max_lr = " + std::to_string(s.max_lr) + "], got " +
         std::to_string(s.min_lr));
  }
  if (s.warmup_iters < 0) {
    fail("warmup_iters must be >= 0, got " + std::to_string(s.warmup_iters));
  }
  if (s.decay_iters < s.warmup_iters) {
    fail("decay_iters must be >= warmup_iters = " + std::to_string(s.warmup_iters) + ", got " +
         std::to_string(s.decay_iters));
  }
  if (s.style != LearningRateSchedule::kConstant && s.style != LearningRateSchedule::kLinear &&
      s.style != LearningRateSchedule::kCosine) {
    fail("style must be constant, linear or cosine, got " +
         std::to_string(static_cast<int>(s.style)));
  }
  if (step < 0) fail("step must be >= 0, got " + std::to_string(step));
}

}  // namespace

double learning_rate(const LearningRateSchedule& s, int64_t step) {
  check(s, step);
  if (s.warmup_iters > 0 && step <= s.warmup_iters) {
    return s.max_lr * static_cast<double>(step) / static_cast<double>(s.warmup_iters);
  }
  if (s.style == LearningRateSchedule::kConstant) return s.max_lr;
  if (step > s.decay_iters) return s.min_lr;
  if (step <= s.warmup_iters) return s.max_lr;  // step 0 without warm-up: ratio 0
  // warmup_iters < step <= decay_iters, hence decay_iters > warmup_iters.
  const double ratio = static_cast<double>(step - s.warmup_iters) /
                       static_cast<double>(s.decay_iters - s.warmup_iters);
  const double delta = s.max_lr - s.min_lr;
  const double coeff = s.style == LearningRateSchedule::kLinear
                           ? 1.0 - ratio
                           : 0.5 * (std::cos(std::numbers::pi * ratio) + 1.0);
  return s.min_lr + coeff * delta;
}

}  // namespace traintwin::exec
