// The CUDA backend's host side, which needs no device: the dropout keep rule against
// exec/cpu/dropout's (exactly, including the boundary), launchers rejecting bad arguments with
// InvalidArgument before any CUDA call, DType helpers, and the CudaError message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>

#include "core/error.hpp"
#include "exec/counter_rng.hpp"
#include "exec/cuda/adamw.hpp"
#include "exec/cuda/attention.hpp"
#include "exec/cuda/cross_entropy.hpp"
#include "exec/cuda/cuda_backend.hpp"
#include "exec/cuda/cuda_check.hpp"
#include "exec/cuda/dropout.hpp"
#include "exec/cuda/dropout_mask.hpp"
#include "exec/cuda/dtype.hpp"
#include "exec/cuda/embedding.hpp"
#include "exec/cuda/gelu.hpp"
#include "exec/cuda/gemm.hpp"
#include "exec/cuda/layernorm.hpp"
#include "exec/cuda/softmax.hpp"

namespace traintwin::exec::cuda {
namespace {

// The CPU rule of exec/cpu/dropout.cpp.
bool cpu_keep(uint64_t seed, uint64_t stream, uint64_t index, double p) {
  return counter_uniform(seed, stream, index) >= p;
}

TEST(CudaDropoutMaskHost, IntegerThresholdEqualsTheCpuRule) {
  const uint64_t seed = 0x1234abcdULL;
  const uint64_t stream = stream_id({7, 3, 1});
  for (const double p : {0.0, 1e-300, 0x1.0p-53, 0.1, 0.25, 0.5, 0.9, 1.0 - 0x1.0p-53}) {
    const uint64_t threshold = dropout_keep_threshold(p);
    int64_t kept = 0;
    for (uint64_t i = 0; i < 200000; ++i) {
      const bool keep = dropout_keep(seed, stream, i, threshold);
      ASSERT_EQ(keep, cpu_keep(seed, stream, i, p)) << "p " << p << " index " << i;
      kept += keep ? 1 : 0;
    }
    // The kept fraction is 1 - p within 5 standard deviations.
    const double sd = std::sqrt(p * (1 - p) / 200000.0);
    EXPECT_NEAR(static_cast<double>(kept) / 200000.0, 1.0 - p, 5 * sd + 1e-12) << "p " << p;
  }
}

TEST(CudaDropoutMaskHost, BoundaryProbabilityIsKeptAndTheNextDoubleDrops) {
  // p equal to an element's own uniform: u >= p keeps it; the next double above p drops it.
  std::mt19937_64 gen(42);
  for (int trial = 0; trial < 1000; ++trial) {
    const uint64_t seed = gen();
    const uint64_t stream = gen();
    const uint64_t index = gen();
    const double u = counter_uniform(seed, stream, index);
    if (u == 0.0) continue;
    EXPECT_TRUE(dropout_keep(seed, stream, index, dropout_keep_threshold(u)));
    const double above = std::nextafter(u, 1.0);
    EXPECT_FALSE(dropout_keep(seed, stream, index, dropout_keep_threshold(above)));
    EXPECT_EQ(cpu_keep(seed, stream, index, above), false);
  }
}

TEST(CudaDropoutMaskHost, ZeroProbabilityKeepsEverything) {
  EXPECT_EQ(dropout_keep_threshold(0.0), 0u);
  for (uint64_t i = 0; i < 1000; ++i) EXPECT_TRUE(dropout_keep(1, 2, i, 0));
}

TEST(CudaDTypeHost, SizesAndNames) {
  EXPECT_EQ(dtype_size_bytes(DType::kFloat32), 4u);
  EXPECT_EQ(dtype_size_bytes(DType::kBFloat16), 2u);
  EXPECT_EQ(dtype_size_bytes(DType::kFloat16), 2u);
  EXPECT_STREQ(dtype_name(DType::kBFloat16), "bf16");
  EXPECT_THROW(dtype_size_bytes(static_cast<DType>(7)), InvalidArgument);
  EXPECT_THROW(dtype_name(static_cast<DType>(-1)), InvalidArgument);
}

TEST(CudaErrorHost, MessageNamesFileLineCallAndTheRuntimeText) {
  try {
    check_cuda(cudaErrorInvalidValue, "cudaMemcpy(a, b, n, kind)", "some/file.cu", 123);
    FAIL() << "no throw";
  } catch (const CudaError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("some/file.cu:123"), std::string::npos) << what;
    EXPECT_NE(what.find("cudaMemcpy(a, b, n, kind)"), std::string::npos) << what;
    EXPECT_NE(what.find(cudaGetErrorString(cudaErrorInvalidValue)), std::string::npos) << what;
    EXPECT_NE(what.find("cudaErrorInvalidValue"), std::string::npos) << what;
  }
  EXPECT_NO_THROW(check_cuda(cudaSuccess, "x", "f", 1));
  // CudaError is a traintwin::Error.
  EXPECT_THROW(check_cuda(cudaErrorMemoryAllocation, "x", "f", 1), Error);
}

// Bogus but non-null "device" pointers: a launcher that reached the device with them would fail
// with CudaError (or crash), so InvalidArgument proves the check came first.
void* fake() { return reinterpret_cast<void*>(uintptr_t{0x1000}); }
float* fake_f() { return reinterpret_cast<float*>(uintptr_t{0x1000}); }
const int32_t* fake_i() { return reinterpret_cast<const int32_t*>(uintptr_t{0x1000}); }
constexpr DType kF = DType::kFloat32;

// Expects InvalidArgument whose message contains `needle`.
template <typename Fn>
void expect_invalid(Fn&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no throw; expected InvalidArgument with '" << needle << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InvalidArgument, got: " << e.what();
  }
}

TEST(CudaLauncherChecksHost, EmbeddingAndLayerNorm) {
  expect_invalid([] { vocab_parallel_embedding_forward(kF, fake(), fake_i(), fake(), 0, 4, 8, 0, 10, 10, nullptr); },
                 "batch must be >= 1");
  expect_invalid([] { vocab_parallel_embedding_forward(kF, fake(), fake_i(), fake(), 2, 4, 8, 5, 10, 12, nullptr); },
                 "is not inside [0, vocab_total 12)");
  expect_invalid([] { vocab_parallel_embedding_backward(kF, fake_f(), fake(), nullptr, 2, 4, 8, 0, 10, 10, nullptr); },
                 "tokens is a null device pointer");
  expect_invalid([] { vocab_parallel_embedding_forward(static_cast<DType>(9), fake(), fake_i(), fake(), 2, 4, 8, 0, 10, 10, nullptr); },
                 "unknown DType 9");
  expect_invalid([] { position_embedding_forward(kF, fake(), fake(), 2, 4, 8, 3, 6, nullptr); },
                 "exceeds max_positions 6");
  expect_invalid([] { position_embedding_backward(kF, fake_f(), fake(), 2, 4, 8, -1, 6, nullptr); },
                 "seq_offset must be >= 0");
  expect_invalid([] { layernorm_forward(kF, fake(), fake_f(), fake_f(), fake(), fake(), fake(), 2, 3, 0, nullptr); },
                 "channels must be >= 1");
  expect_invalid([] { layernorm_backward(kF, fake(), fake_f(), nullptr, fake(), fake(), fake(), fake_f(), fake_f(), 2, 3, 4, nullptr); },
                 "dbias is a null device pointer");
  expect_invalid([] { gelu_forward(kF, fake(), fake(), 0, nullptr); }, "n must be >= 1");
  expect_invalid([] { gelu_backward(kF, fake(), nullptr, fake(), 5, nullptr); },
                 "inp is a null device pointer");
}

TEST(CudaLauncherChecksHost, DropoutSoftmaxAttention) {
  const cpu::HiddenBlock hidden{2, 4, 8, 0, 0, 4};
  expect_invalid([&] { bias_dropout_add_forward(kF, fake(), fake(), nullptr, nullptr, {1.0, 1, 2}, hidden, nullptr); },
                 "p must be in [0, 1)");
  expect_invalid([&] { bias_dropout_add_forward(kF, fake(), fake(), nullptr, nullptr, {std::nan(""), 1, 2}, hidden, nullptr); },
                 "p must be in [0, 1)");
  expect_invalid([] { bias_dropout_add_backward(kF, fake(), nullptr, nullptr, fake(), {0.1, 1, 2}, {2, 4, 8, 0, 2, 5}, nullptr); },
                 "seq_total 5 must be >= seq_offset + seq_local = 6");
  expect_invalid([] { attention_dropout_forward(kF, fake(), fake(), {0.1, 1, 2}, {2, 4, 8, 0, 5, 8}, nullptr); },
                 "heads_total 8 must be >= head_offset + heads = 9");
  expect_invalid([] { counter_hash_fill(nullptr, 1, 2, 3, 10, nullptr); }, "null device pointer");
  expect_invalid([] { causal_softmax_forward(kF, fake(), fake(), 4, 8, 0.0f, nullptr); },
                 "scale must be finite and > 0");
  expect_invalid([] { causal_softmax_backward(kF, fake(), fake(), fake(), 4, 0, 1.0f, nullptr); },
                 "seq must be >= 1");
  CublasContext ctx;  // touches no device
  expect_invalid([&] { attention_forward(ctx, kF, fake(), fake(), fake(), fake(), fake(), 1 << 30, 2, 4, 10, 3, nullptr); },
                 "heads 3 must divide channels 10");
  const size_t need = attention_workspace_bytes(kF, 2, 4, 12, 3);
  EXPECT_EQ(need, (7u * 2 * 4 * 12 + 2u * 3 * 4 * 4) * 4);
  expect_invalid([&] { attention_backward(ctx, kF, fake(), fake(), fake(), fake(), fake(), need - 1, 2, 4, 12, 3, nullptr); },
                 "workspace has");
}

TEST(CudaLauncherChecksHost, GemmCrossEntropyAdamW) {
  CublasContext ctx;
  expect_invalid([&] { matmul_forward(ctx, kF, fake(), fake(), fake(), nullptr, 0, 4, 4, nullptr); },
                 "rows must be >= 1");
  expect_invalid([&] { matmul_backward_data(ctx, kF, fake(), fake(), nullptr, 3, 4, 4, true, nullptr); },
                 "weight is a null device pointer");
  expect_invalid([&] { matmul_backward_weight(ctx, kF, nullptr, nullptr, fake(), fake(), 3, 4, 4, nullptr); },
                 "dweight is a null device pointer");
  expect_invalid([&] { batched_matmul(ctx, kF, false, true, 4, 4, 8, 1.0f, fake(), 7, 32, fake(), 8, 32, 0.0f, fake(), 4, 16, 2, nullptr); },
                 "lda 7 must be in [8, 2^31)");
  expect_invalid([] { vocab_parallel_logits_max(kF, fake_f(), fake(), 4, 0, nullptr); },
                 "vocab_local must be >= 1");
  expect_invalid([] { vocab_parallel_sum_exp(kF, fake_f(), fake_f(), fake(), fake_f(), fake_i(), 4, 90, 20, 100, nullptr); },
                 "is not inside [0, vocab_total 100)");
  expect_invalid([] { vocab_parallel_cross_entropy_loss(fake_f(), fake_f(), nullptr, fake_f(), 4, nullptr); },
                 "logits_max is a null device pointer");
  expect_invalid([] { vocab_parallel_cross_entropy_backward(kF, fake(), fake_f(), fake(), fake_f(), fake_f(), fake_i(), 4, -1, 20, 100, nullptr); },
                 "is not inside");
  const cpu::AdamWParams hyper;
  expect_invalid([&] { adamw_step(fake_f(), fake_f(), fake_f(), fake_f(), 10, hyper, 1e-3, 0, nullptr, kF, nullptr); },
                 "step must be >= 1");
  expect_invalid([&] { adamw_step(fake_f(), fake_f(), fake_f(), fake_f(), 10, {0.9, 1.0, 1e-8, 0.0}, 1e-3, 1, nullptr, kF, nullptr); },
                 "beta2 must be in [0, 1)");
  expect_invalid([&] { adamw_step(fake_f(), fake_f(), fake_f(), fake_f(), 10, hyper, -1.0, 1, nullptr, kF, nullptr); },
                 "lr must be >= 0 and finite");
  expect_invalid([] { sum_of_squares(kF, fake(), 10, nullptr, nullptr); },
                 "result is a null device pointer");
  expect_invalid([] { scale_in_place(fake_f(), 10, INFINITY, nullptr); }, "factor must be finite");
}

}  // namespace
}  // namespace traintwin::exec::cuda

// The driver release of the cost database's versions block, read from /proc/driver/nvidia/version.
TEST(CudaBackendHost, ReadsTheDriverReleaseFromProcText) {
  using traintwin::exec::cuda::nvidia_driver_release;
  EXPECT_EQ(nvidia_driver_release("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
                                  "580.159.04  Release Build  (dvs-builder@U16-I2-C03-11-4)\n"),
            "580.159.04");  // the open kernel module's wording
  EXPECT_EQ(nvidia_driver_release("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  "
                                  "Thu Oct 30 2025\nGCC version:  gcc version 13\n"),
            "580.159.04");
  EXPECT_EQ(nvidia_driver_release(""), "");
  EXPECT_EQ(nvidia_driver_release("NVRM version: NVIDIA UNIX x86_64 Kernel Module  unknown\n1.2"),
            "");  // nothing on its line
}
