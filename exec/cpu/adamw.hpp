// AdamW optimizer step with decoupled weight decay (Loshchilov & Hutter, "Decoupled Weight Decay
// Regularization", ICLR 2019, Algorithm 2), in the order of torch.optim.AdamW
// (torch/optim/adamw.py, _single_tensor_adamw), and Megatron-LM's gradient clipping by global
// norm (megatron/core/optimizer/clip_grads.py, clip_grad_norm_fp32). Scalar is float or double.
#pragma once

#include <cstdint>
#include <span>

namespace traintwin::exec::cpu {

/// AdamW hyper-parameters, with the defaults of Megatron-LM's arguments (--adam-beta1 0.9,
/// --adam-beta2 0.999, --adam-eps 1e-8, --weight-decay 0.01). The learning rate is passed per
/// step (it follows the schedule, exec/lr_schedule.hpp). Megatron applies no weight decay to
/// biases and layernorm parameters: call adamw_step with weight_decay = 0 for those.
struct AdamWParams {
  double beta1 = 0.9;          ///< first-moment decay, in [0, 1)
  double beta2 = 0.999;        ///< second-moment decay, in [0, 1)
  double eps = 1e-8;           ///< denominator term, >= 0
  double weight_decay = 0.01;  ///< decoupled weight decay, >= 0
};

/// One AdamW step over a flat parameter tensor, element by element, in the order and with the
/// operations of torch's single-tensor path (the CPU default; torch >= 2.0):
///   p  = p * (1 - lr * weight_decay)              (decoupled decay, applied first: param.mul_)
///   m  = lerp(m, g, 1 - beta1)  = beta1 m + (1 - beta1) g      (exp_avg.lerp_)
///   v  = v * beta2 + (1 - beta2) g g                           (exp_avg_sq.mul_.addcmul_)
///   p  = p + (-lr / (1 - beta1^step)) m / (sqrt(v) / sqrt(1 - beta2^step) + eps)  (addcdiv_)
/// which equals p -= lr (m_hat / (sqrt(v_hat) + eps) + weight_decay p_old) with
/// m_hat = m / (1 - beta1^step), v_hat = v / (1 - beta2^step) (Apex/TE FusedAdam in AdamW
/// mode, which Megatron uses, evaluates that form; the two differ only in rounding).
/// The per-tensor constants (bias corrections, step size, decay factor) are computed in double
/// as torch computes them in Python; the per-element arithmetic is in Scalar.
/// `step` is the 1-based number of this update (the bias correction's t); `m` and `v` start at 0
/// and are updated in place. Throws InvalidArgument for step < 1, lr < 0 or not finite, a
/// hyper-parameter outside its range, or spans of different lengths.
template <typename Scalar>
void adamw_step(std::span<Scalar> params,       // [N]
                std::span<const Scalar> grads,  // [N]
                std::span<Scalar> m,            // [N] first moment
                std::span<Scalar> v,            // [N] second moment
                const AdamWParams& hyper, double lr, int64_t step);

/// Sum of squares of the elements, accumulated in double (the square of the L2 norm; the
/// executor adds the pieces of every parameter and all-reduces them, then takes the sqrt, as
/// Megatron's get_grad_norm_fp32 does with norm_type 2).
double sum_of_squares(std::span<const float> values);
double sum_of_squares(std::span<const double> values);

/// Gradient-clipping factor of Megatron clip_grad_norm_fp32:
///   min(1, max_norm / (total_norm + 1e-6)).
/// Throws InvalidArgument for max_norm <= 0 or not finite, or total_norm < 0 or not finite
/// (an inf/NaN gradient norm must be handled by the caller, e.g. by skipping the step).
double clip_coefficient(double total_norm, double max_norm);

/// values *= factor (factor rounded to the element type first, as torch's mul_ by a Python
/// float on a float32 tensor).
void scale_in_place(std::span<float> values, double factor);
void scale_in_place(std::span<double> values, double factor);

}  // namespace traintwin::exec::cpu
