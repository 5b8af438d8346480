// Learning-rate schedule of Megatron-LM (megatron/core/optimizer_param_scheduler.py,
// OptimizerParamScheduler.get_lr) with linear warm-up from 0 (--lr-warmup-init 0) and the
// constant, linear and cosine decay styles.
#pragma once

#include <cstdint>

namespace traintwin::exec {

/// Megatron's --lr, --min-lr, --lr-warmup-iters, --lr-decay-iters and --lr-decay-style.
struct LearningRateSchedule {
  enum Style { kConstant, kLinear, kCosine };
  double max_lr = 0;         ///< peak learning rate, > 0
  double min_lr = 0;         ///< floor after decay, in [0, max_lr]
  int64_t warmup_iters = 0;  ///< optimizer steps of linear warm-up, >= 0
  int64_t decay_iters = 0;   ///< step at which the decay reaches min_lr, >= warmup_iters
  Style style = kConstant;
};

/// Learning rate for optimizer step `step` (1-based: the first update is step 1), Megatron's
/// get_lr with num_steps = step:
///   warmup_iters > 0 and step <= warmup_iters:  max_lr * step / warmup_iters
///   kConstant (after warm-up):                  max_lr (never decays, as in Megatron)
///   step > decay_iters:                         min_lr
///   otherwise, ratio = (step - warmup_iters) / (decay_iters - warmup_iters):
///     kLinear: min_lr + (max_lr - min_lr) (1 - ratio)
///     kCosine: min_lr + (max_lr - min_lr) 0.5 (cos(pi ratio) + 1)
/// Note: Megatron itself evaluates get_lr before an update with num_steps = the number of
/// updates already done (0 for the first, so its first warm-up update has lr 0); pass
/// step = completed updates to reproduce that. step = 0 is therefore accepted.
/// Throws InvalidArgument naming the field for max_lr <= 0 (or not finite), min_lr outside
/// [0, max_lr], warmup_iters < 0, decay_iters < warmup_iters, or step < 0.
double learning_rate(const LearningRateSchedule& schedule, int64_t step);

}  // namespace traintwin::exec
