// AdamW, sum of squares, scaling; see adamw.hpp.
#include "exec/cuda/adamw.hpp"

#include <cmath>

#include "exec/cuda/common.cuh"

namespace traintwin::exec::cuda {
namespace {

using namespace detail;

constexpr const char* kLayer = "adamw";

// The per-tensor constants, rounded to float as the CPU layer's float instantiation.
struct AdamWConstants {
  float decay, neg_step_size, bias_correction2_sqrt, beta2, one_minus_beta1, one_minus_beta2,
      eps;
};

// torch.lerp as ATen evaluates it (exact at weight 0 and 1); as exec/cpu/adamw.cpp.
__device__ __forceinline__ float lerp(float start, float end, float weight) {
  return weight < 0.5f ? start + weight * (end - start) : end - (end - start) * (1.0f - weight);
}

template <typename T>
__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, int64_t n,
                             AdamWConstants k, T* params_model) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = grads[i];
    float p = params[i] * k.decay;                                  // param.mul_
    const float mi = lerp(m[i], g, k.one_minus_beta1);              // exp_avg.lerp_
    const float vi = v[i] * k.beta2 + k.one_minus_beta2 * g * g;    // mul_, addcmul_
    const float denom = sqrtf(vi) / k.bias_correction2_sqrt + k.eps;  // sqrt, div, add_
    p = p + k.neg_step_size * mi / denom;                           // addcdiv_
    params[i] = p;
    m[i] = mi;
    v[i] = vi;
    if (params_model != nullptr) params_model[i] = from_float<T>(p);
  }
}

// V elements per access (common.cuh: packed access), `packs` = n / V; squares summed in double.
template <typename T, int V>
__global__ void sum_of_squares_kernel(const T* values, int64_t packs, double* result) {
  __shared__ double scratch[32];
  double sum = 0.0;
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < packs;
       p += int64_t{gridDim.x} * blockDim.x) {
    const Pack<T, V> x = load_pack<V>(values, p);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const double d = to_float(x.v[k]);
      sum += d * d;
    }
  }
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) atomicAdd(result, sum);
}

template <int V>
__global__ void scale_kernel(float* values, int64_t packs, float factor) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < packs;
       p += int64_t{gridDim.x} * blockDim.x) {
    Pack<float, V> x = load_pack<V>(values, p);
#pragma unroll
    for (int k = 0; k < V; ++k) x.v[k] *= factor;
    store_pack(values, p, x);
  }
}

void require(bool ok, const char* name, const char* range, double value) {
  if (!ok) {
    throw InvalidArgument(std::string("cuda ") + kLayer + ": " + name + " must be " + range +
                          ", got " + std::to_string(value));
  }
}

}  // namespace

void adamw_step(float* params, const float* grads, float* m, float* v, int64_t n,
                const cpu::AdamWParams& hyper, double lr, int64_t step, void* params_model,
                DType model_dtype, cudaStream_t stream) {
  require(hyper.beta1 >= 0.0 && hyper.beta1 < 1.0, "beta1", "in [0, 1)", hyper.beta1);
  require(hyper.beta2 >= 0.0 && hyper.beta2 < 1.0, "beta2", "in [0, 1)", hyper.beta2);
  require(hyper.eps >= 0.0 && std::isfinite(hyper.eps), "eps", ">= 0 and finite", hyper.eps);
  require(hyper.weight_decay >= 0.0 && std::isfinite(hyper.weight_decay), "weight_decay",
          ">= 0 and finite", hyper.weight_decay);
  require(lr >= 0.0 && std::isfinite(lr), "lr", ">= 0 and finite", lr);
  require_positive(kLayer, step, "step");
  require_positive(kLayer, n, "n");
  require_pointer(kLayer, params, "params");
  require_pointer(kLayer, grads, "grads");
  require_pointer(kLayer, m, "m");
  require_pointer(kLayer, v, "v");
  // Per-tensor constants in double, as torch computes them in Python (exec/cpu/adamw.cpp).
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - std::pow(hyper.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(hyper.beta2, t);
  const AdamWConstants k{static_cast<float>(1.0 - lr * hyper.weight_decay),
                         static_cast<float>(-(lr / bias_correction1)),
                         static_cast<float>(std::sqrt(bias_correction2)),
                         static_cast<float>(hyper.beta2),
                         static_cast<float>(1.0 - hyper.beta1),
                         static_cast<float>(1.0 - hyper.beta2),
                         static_cast<float>(hyper.eps)};
  dispatch(model_dtype, kLayer, [&](auto tag) {
    using T = decltype(tag);
    adamw_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(params, grads, m, v, n, k,
                                                        static_cast<T*>(params_model));
    TRAINTWIN_CUDA_CHECK_LAUNCH();
  });
}

void sum_of_squares(DType dtype, const void* values, int64_t n, double* result,
                    cudaStream_t stream) {
  require_positive("sum_of_squares", n, "n");
  require_pointer("sum_of_squares", values, "values");
  require_pointer("sum_of_squares", result, "result");
  dispatch(dtype, "sum_of_squares", [&](auto tag) {
    using T = decltype(tag);
    with_pack_width(n, {{values, sizeof(T)}}, [&](auto width) {
      constexpr int V = decltype(width)::value;
      const unsigned blocks = std::min(grid_for(n / V), 2048u);
      sum_of_squares_kernel<T, V><<<blocks, kBlock, 0, stream>>>(static_cast<const T*>(values),
                                                                 n / V, result);
      TRAINTWIN_CUDA_CHECK_LAUNCH();
    });
  });
}

void scale_in_place(float* values, int64_t n, double factor, cudaStream_t stream) {
  require_positive("scale_in_place", n, "n");
  require_pointer("scale_in_place", values, "values");
  if (!std::isfinite(factor)) {
    throw InvalidArgument("cuda scale_in_place: factor must be finite, got " +
                          std::to_string(factor));
  }
  with_pack_width(n, {{values, sizeof(float)}}, [&](auto width) {
    constexpr int V = decltype(width)::value;
    scale_kernel<V><<<grid_for(n / V), kBlock, 0, stream>>>(values, n / V,
                                                            static_cast<float>(factor));
    TRAINTWIN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace traintwin::exec::cuda
