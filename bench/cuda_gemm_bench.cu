// cuBLASLt GEMM throughput through the CUDA backend's own launcher (exec/cuda/gemm.hpp,
// matmul_forward: out = inp W^T, the linear layer's forward), as nccl-tests prints a collective:
// one line per (dtype, M, N, K) with the median time of `--iters` runs timed by CUDA events
// after warm-up, and TFLOP/s = 2 M N K / time. Inputs are random (never zeros: METHOD.md), and
// a buffer larger than L2 is rewritten between runs so each starts with a cold cache (nvbench's
// L2 flush). Rows: bf16 operands, then fp32 operands in fp32 (fp32), TF32 (tf32) and bf16
// (f32bf) arithmetic. Prints the device's name, SM count and clocks first.
//
// Usage: cuda_gemm_bench [--iters N] [MxNxK ...]   (default: 8192x8192x8192 and the GEMMs of a
// GPT of hidden 2048 at micro-batch 1, sequence 2048: QKV, projection, FC1, FC2, LM head)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "exec/cuda/cuda_check.hpp"
#include "exec/cuda/dtype.hpp"
#include "exec/cuda/gemm.hpp"

namespace {

using traintwin::exec::cuda::CublasContext;
using traintwin::exec::cuda::DType;

struct Shape {
  int64_t m, n, k;
};

__global__ void fill_random(uint16_t* bits16, float* bits32, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    const float x = (static_cast<float>(h & 0xffffff) / 16777216.0f - 0.5f) * 0.1f;
    if (bits32 != nullptr) bits32[i] = x;
    if (bits16 != nullptr) {
      uint32_t u;
      memcpy(&u, &x, 4);
      bits16[i] = static_cast<uint16_t>(u >> 16);  // bf16 by truncation: fine for timing
    }
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20;
  std::vector<Shape> shapes;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--iters" && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else {
      Shape s{};
      if (std::sscanf(a.c_str(), "%ldx%ldx%ld", &s.m, &s.n, &s.k) != 3) {
        std::fprintf(stderr, "cuda_gemm_bench: '%s' is not MxNxK\n", a.c_str());
        return 2;
      }
      shapes.push_back(s);
    }
  }
  if (shapes.empty()) {
    shapes = {{8192, 8192, 8192}, {2048, 6144, 2048}, {2048, 2048, 2048},
              {2048, 8192, 2048}, {2048, 2048, 8192}, {2048, 50304, 2048}};
  }
  try {
    cudaDeviceProp prop{};
    TRAINTWIN_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    int sm_khz = 0, mem_khz = 0;
    cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, 0);
    cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, 0);
    std::printf("# device %s, %d SMs, max SM clock %d MHz, memory clock %d MHz, L2 %d MB\n",
                prop.name, prop.multiProcessorCount, sm_khz / 1000, mem_khz / 1000,
                prop.l2CacheSize >> 20);
    std::printf("# %6s %7s %7s %7s %10s %10s\n", "dtype", "M", "N", "K", "median_us", "TFLOP/s");
    CublasContext ctx;
    cudaStream_t stream;
    TRAINTWIN_CUDA_CHECK(cudaStreamCreate(&stream));
    const size_t flush_bytes = size_t{256} << 20;
    void* flush = nullptr;
    TRAINTWIN_CUDA_CHECK(cudaMalloc(&flush, flush_bytes));
    cudaEvent_t start, stop;
    TRAINTWIN_CUDA_CHECK(cudaEventCreate(&start));
    TRAINTWIN_CUDA_CHECK(cudaEventCreate(&stop));
    // fp32 operands three ways (torch.set_float32_matmul_precision): highest fp32, high TF32,
    // medium bf16 tensor cores.
    struct Variant {
      DType dtype;
      traintwin::Float32MatmulPrecision precision;
      const char* label;
    };
    using traintwin::Float32MatmulPrecision;
    for (const Variant& v : {Variant{DType::kBFloat16, Float32MatmulPrecision::kHighest, "bf16"},
                             Variant{DType::kFloat32, Float32MatmulPrecision::kHighest, "fp32"},
                             Variant{DType::kFloat32, Float32MatmulPrecision::kHigh, "tf32"},
                             Variant{DType::kFloat32, Float32MatmulPrecision::kMedium, "f32bf"}}) {
      const DType dtype = v.dtype;
      ctx.set_float32_matmul_precision(v.precision);
      const size_t es = traintwin::exec::cuda::dtype_size_bytes(dtype);
      for (const Shape& s : shapes) {
        void *a = nullptr, *w = nullptr, *c = nullptr;
        TRAINTWIN_CUDA_CHECK(cudaMalloc(&a, s.m * s.k * es));
        TRAINTWIN_CUDA_CHECK(cudaMalloc(&w, s.n * s.k * es));
        TRAINTWIN_CUDA_CHECK(cudaMalloc(&c, s.m * s.n * es));
        const bool f32 = dtype == DType::kFloat32;
        fill_random<<<1024, 256, 0, stream>>>(f32 ? nullptr : static_cast<uint16_t*>(a),
                                               f32 ? static_cast<float*>(a) : nullptr, s.m * s.k, 1);
        fill_random<<<1024, 256, 0, stream>>>(f32 ? nullptr : static_cast<uint16_t*>(w),
                                               f32 ? static_cast<float*>(w) : nullptr, s.n * s.k, 2);
        TRAINTWIN_CUDA_CHECK_LAUNCH();
        for (int i = 0; i < 3; ++i) {
          traintwin::exec::cuda::matmul_forward(ctx, dtype, c, a, w, nullptr, s.m, s.k, s.n,
                                                stream);
        }
        std::vector<double> us;
        const bool slow = f32 && v.precision == Float32MatmulPrecision::kHighest;
        const int n = slow ? std::max(3, iters / 4) : iters;
        for (int i = 0; i < n; ++i) {
          TRAINTWIN_CUDA_CHECK(cudaMemsetAsync(flush, i, flush_bytes, stream));
          TRAINTWIN_CUDA_CHECK(cudaEventRecord(start, stream));
          traintwin::exec::cuda::matmul_forward(ctx, dtype, c, a, w, nullptr, s.m, s.k, s.n,
                                                stream);
          TRAINTWIN_CUDA_CHECK(cudaEventRecord(stop, stream));
          TRAINTWIN_CUDA_CHECK(cudaEventSynchronize(stop));
          float ms = 0;
          TRAINTWIN_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
          us.push_back(ms * 1e3);
        }
        const double t = median(us);
        std::printf("  %6s %7ld %7ld %7ld %10.1f %10.1f\n",
                    v.label, s.m, s.n, s.k, t,
                    2.0 * s.m * s.n * s.k / (t * 1e-6) / 1e12);
        cudaFree(a);
        cudaFree(w);
        cudaFree(c);
      }
    }
    TRAINTWIN_CUDA_CHECK(cudaDeviceSynchronize());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_gemm_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
