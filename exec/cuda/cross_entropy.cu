// Vocab-parallel cross-entropy; see cross_entropy.hpp.
#include "exec/cuda/cross_entropy.hpp"

#include "exec/cuda/common.cuh"

namespace traintwin::exec::cuda {
namespace {

using namespace detail;

constexpr const char* kLayer = "vocab_parallel_cross_entropy";
constexpr int kRowThreads = 256;

// One block per row (grid-stride over rows).
template <typename T>
__global__ void logits_max_kernel(float* logits_max, const T* logits, int64_t rows,
                                  int64_t vocab_local) {
  __shared__ float scratch[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* x = logits + row * vocab_local;
    float m = -INFINITY;
    for (int64_t v = threadIdx.x; v < vocab_local; v += blockDim.x) m = fmaxf(m, to_float(x[v]));
    m = block_max(m, scratch);
    if (threadIdx.x == 0) logits_max[row] = m;
  }
}

template <typename T>
__global__ void sum_exp_kernel(float* sum_exp, float* target_logit, const T* logits,
                               const float* logits_max, const int32_t* targets, int64_t rows,
                               int64_t vocab_start, int64_t vocab_local) {
  __shared__ float scratch[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* x = logits + row * vocab_local;
    const float m = logits_max[row];
    float sum = 0.0f;
    for (int64_t v = threadIdx.x; v < vocab_local; v += blockDim.x) sum += expf(to_float(x[v]) - m);
    sum = block_sum(sum, scratch);
    if (threadIdx.x == 0) {
      sum_exp[row] = sum;
      const int64_t local = int64_t{targets[row]} - vocab_start;
      target_logit[row] = local >= 0 && local < vocab_local ? to_float(x[local]) : 0.0f;
    }
  }
}

__global__ void loss_kernel(float* losses, const float* sum_exp, const float* logits_max,
                            const float* target_logit, int64_t rows) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < rows;
       i += int64_t{gridDim.x} * blockDim.x) {
    losses[i] = logf(sum_exp[i]) + (logits_max[i] - target_logit[i]);
  }
}

template <typename T>
__global__ void cross_entropy_backward_kernel(T* dlogits, const float* dlosses, const T* logits,
                                              const float* logits_max, const float* sum_exp,
                                              const int32_t* targets, int64_t rows,
                                              int64_t vocab_start, int64_t vocab_local) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* x = logits + row * vocab_local;
    T* dx = dlogits + row * vocab_local;
    const float m = logits_max[row];
    const float inv_sum = 1.0f / sum_exp[row];
    const float dloss = dlosses[row];
    const int64_t local_target = int64_t{targets[row]} - vocab_start;
    for (int64_t v = threadIdx.x; v < vocab_local; v += blockDim.x) {
      const float prob = expf(to_float(x[v]) - m) * inv_sum;
      const float indicator = v == local_target ? 1.0f : 0.0f;
      dx[v] = from_float<T>(to_float(dx[v]) + (prob - indicator) * dloss);
    }
  }
}

unsigned row_grid(int64_t rows) {
  return static_cast<unsigned>(std::min<int64_t>(rows, 65535));
}

void check_rows(int64_t rows, int64_t vocab_local) {
  require_positive(kLayer, rows, "rows");
  require_positive(kLayer, vocab_local, "vocab_local");
  require_product_fits(kLayer, rows, vocab_local, "rows * vocab_local");
}

}  // namespace

void vocab_parallel_logits_max(DType dtype, float* logits_max_local, const void* logits_local,
                               int64_t rows, int64_t vocab_local, cudaStream_t stream) {
  check_rows(rows, vocab_local);
  require_pointer(kLayer, logits_max_local, "logits_max_local");
  require_pointer(kLayer, logits_local, "logits_local");
  dispatch(dtype, kLayer, [&](auto tag) {
    using T = decltype(tag);
    logits_max_kernel<T><<<row_grid(rows), kRowThreads, 0, stream>>>(
        logits_max_local, static_cast<const T*>(logits_local), rows, vocab_local);
    TRAINTWIN_CUDA_CHECK_LAUNCH();
  });
}

void vocab_parallel_sum_exp(DType dtype, float* sum_exp_local, float* target_logit_local,
                            const void* logits_local, const float* logits_max,
                            const int32_t* targets, int64_t rows, int64_t vocab_start,
                            int64_t vocab_local, int64_t vocab_total, cudaStream_t stream) {
  check_rows(rows, vocab_local);
  require_vocab_shard(kLayer, vocab_start, vocab_local, vocab_total);
  require_pointer(kLayer, sum_exp_local, "sum_exp_local");
  require_pointer(kLayer, target_logit_local, "target_logit_local");
  require_pointer(kLayer, logits_local, "logits_local");
  require_pointer(kLayer, logits_max, "logits_max");
  require_pointer(kLayer, targets, "targets");
  dispatch(dtype, kLayer, [&](auto tag) {
    using T = decltype(tag);
    sum_exp_kernel<T><<<row_grid(rows), kRowThreads, 0, stream>>>(
        sum_exp_local, target_logit_local, static_cast<const T*>(logits_local), logits_max,
        targets, rows, vocab_start, vocab_local);
    TRAINTWIN_CUDA_CHECK_LAUNCH();
  });
}

void vocab_parallel_cross_entropy_loss(float* losses, const float* sum_exp,
                                       const float* logits_max, const float* target_logit,
                                       int64_t rows, cudaStream_t stream) {
  require_positive(kLayer, rows, "rows");
  require_pointer(kLayer, losses, "losses");
  require_pointer(kLayer, sum_exp, "sum_exp");
  require_pointer(kLayer, logits_max, "logits_max");
  require_pointer(kLayer, target_logit, "target_logit");
  loss_kernel<<<grid_for(rows), kBlock, 0, stream>>>(losses, sum_exp, logits_max, target_logit,
                                                      rows);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

void vocab_parallel_cross_entropy_backward(DType dtype, void* dlogits_local, const float* dlosses,
                                           const void* logits_local, const float* logits_max,
                                           const float* sum_exp, const int32_t* targets,
                                           int64_t rows, int64_t vocab_start, int64_t vocab_local,
                                           int64_t vocab_total, cudaStream_t stream) {
  check_rows(rows, vocab_local);
  require_vocab_shard(kLayer, vocab_start, vocab_local, vocab_total);
  require_pointer(kLayer, dlogits_local, "dlogits_local");
  require_pointer(kLayer, dlosses, "dlosses");
  require_pointer(kLayer, logits_local, "logits_local");
  require_pointer(kLayer, logits_max, "logits_max");
  require_pointer(kLayer, sum_exp, "sum_exp");
  require_pointer(kLayer, targets, "targets");
  dispatch(dtype, kLayer, [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_backward_kernel<T><<<row_grid(rows), kRowThreads, 0, stream>>>(
        static_cast<T*>(dlogits_local), dlosses, static_cast<const T*>(logits_local), logits_max,
        sum_exp, targets, rows, vocab_start, vocab_local);
    TRAINTWIN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace traintwin::exec::cuda
