// AdamW step and gradient clipping; see adamw.hpp.
#include "exec/cpu/adamw.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"
#include "exec/cpu/checks.hpp"
#include "exec/cpu/vector_math.hpp"

namespace traintwin::exec::cpu {
namespace {

constexpr const char* kLayer = "adamw";

// Throws "adamw: <name> must be in <range>, got <value>" unless ok.
void require(bool ok, const char* name, const char* range, double value) {
  if (!ok) {
    throw InvalidArgument(std::string(kLayer) + ": " + name + " must be " + range + ", got " +
                          std::to_string(value));
  }
}

void check(const AdamWParams& h, double lr, int64_t step) {
  require(h.beta1 >= 0.0 && h.beta1 < 1.0, "beta1", "in [0, 1)", h.beta1);
  require(h.beta2 >= 0.0 && h.beta2 < 1.0, "beta2", "in [0, 1)", h.beta2);
  require(h.eps >= 0.0 && std::isfinite(h.eps), "eps", ">= 0 and finite", h.eps);
  require(h.weight_decay >= 0.0 && std::isfinite(h.weight_decay), "weight_decay", ">= 0 and finite",
          h.weight_decay);
  require(lr >= 0.0 && std::isfinite(lr), "lr", ">= 0 and finite", lr);
  if (step < 1) {
    throw InvalidArgument(std::string(kLayer) + ": step must be >= 1, got " + std::to_string(step));
  }
}

// torch.lerp(start, end, weight) as ATen evaluates it (the branch keeps the result exact at
// weight 0 and 1).
template <typename Scalar>
Scalar lerp(Scalar start, Scalar end, Scalar weight) {
  return weight < Scalar{0.5} ? start + weight * (end - start)
                              : end - (end - start) * (Scalar{1} - weight);
}

// Sum of x^2 in float64 over kLanes partial sums (element i goes to lane i % kLanes, the lanes
// added in order at the end): a fixed order, so the compiler vectorizes it and the result does
// not depend on the vector width.
constexpr size_t kLanes = 8;

template <typename Scalar>
TRAINTWIN_CPU_CLONES double sum_squares_lanes(const Scalar* __restrict x, size_t n) {
  double lane[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) {
      lane[l] += static_cast<double>(x[i + l]) * static_cast<double>(x[i + l]);
    }
  }
  double sum = 0;
  for (size_t l = 0; l < kLanes; ++l) sum += lane[l];
  for (; i < n; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return sum;
}

template <typename Scalar>
double sum_squares(std::span<const Scalar> values) {
  return sum_squares_lanes(values.data(), values.size());
}

// The element loop of adamw_step (constants as there).
template <typename Scalar>
TRAINTWIN_CPU_CLONES void adamw_loop(Scalar* __restrict params, const Scalar* __restrict grads,
                                     Scalar* __restrict m, Scalar* __restrict v, size_t n,
                                     Scalar decay, Scalar neg_step_size,
                                     Scalar bias_correction2_sqrt, Scalar beta2,
                                     Scalar one_minus_beta1, Scalar one_minus_beta2, Scalar eps) {
  for (size_t i = 0; i < n; ++i) {
    const Scalar g = grads[i];
    const Scalar p = params[i] * decay;                              // param.mul_
    const Scalar mi = lerp(m[i], g, one_minus_beta1);                // exp_avg.lerp_
    const Scalar vi = v[i] * beta2 + one_minus_beta2 * g * g;        // mul_, addcmul_
    const Scalar denom = std::sqrt(vi) / bias_correction2_sqrt + eps;  // sqrt, div, add_
    params[i] = p + neg_step_size * mi / denom;                      // addcdiv_
    m[i] = mi;
    v[i] = vi;
  }
}

template <typename Scalar>
void scale(std::span<Scalar> values, double factor) {
  const auto f = static_cast<Scalar>(factor);
  for (Scalar& x : values) x *= f;
}

}  // namespace

template <typename Scalar>
void adamw_step(std::span<Scalar> params, std::span<const Scalar> grads, std::span<Scalar> m,
                std::span<Scalar> v, const AdamWParams& hyper, double lr, int64_t step) {
  check(hyper, lr, step);
  require_same(kLayer, params.size(), grads.size(), "params and grads");
  require_same(kLayer, params.size(), m.size(), "params and m");
  require_same(kLayer, params.size(), v.size(), "params and v");
  // Per-tensor constants, in double as in torch's Python code.
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(hyper.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(hyper.beta2, t);
  const auto decay = static_cast<Scalar>(1.0 - lr * hyper.weight_decay);
  const auto neg_step_size = static_cast<Scalar>(-(lr / bias_correction1));
  const auto bias_correction2_sqrt = static_cast<Scalar>(std::sqrt(bias_correction2));
  const auto beta2 = static_cast<Scalar>(hyper.beta2);
  const auto one_minus_beta1 = static_cast<Scalar>(1.0 - hyper.beta1);
  const auto one_minus_beta2 = static_cast<Scalar>(1.0 - hyper.beta2);
  const auto eps = static_cast<Scalar>(hyper.eps);
  adamw_loop(params.data(), grads.data(), m.data(), v.data(), params.size(), decay,
             neg_step_size, bias_correction2_sqrt, beta2, one_minus_beta1, one_minus_beta2, eps);
}

double sum_of_squares(std::span<const float> values) { return sum_squares(values); }
double sum_of_squares(std::span<const double> values) { return sum_squares(values); }

double clip_coefficient(double total_norm, double max_norm) {
  require(max_norm > 0.0 && std::isfinite(max_norm), "max_norm", "> 0 and finite", max_norm);
  require(total_norm >= 0.0 && std::isfinite(total_norm), "total_norm", ">= 0 and finite",
          total_norm);
  return std::min(1.0, max_norm / (total_norm + 1e-6));
}

void scale_in_place(std::span<float> values, double factor) { scale(values, factor); }
void scale_in_place(std::span<double> values, double factor) { scale(values, factor); }

template void adamw_step<float>(std::span<float>, std::span<const float>, std::span<float>,
                                std::span<float>, const AdamWParams&, double, int64_t);
template void adamw_step<double>(std::span<double>, std::span<const double>, std::span<double>,
                                 std::span<double>, const AdamWParams&, double, int64_t);

}  // namespace traintwin::exec::cpu
