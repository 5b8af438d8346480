// GPU kernels against their CPU layers in float64 (needs a device; skips without one):
// vocab-parallel and position embeddings, LayerNorm, GELU, for fp32, bf16 and fp16 storage, on
// fresh random inputs, several shapes (not multiples of the block sizes), outputs poisoned with
// NaN first (accumulated outputs start from random values instead).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "exec/cpu/gelu.hpp"
#include "exec/cpu/layernorm.hpp"
#include "exec/cpu/position_embedding.hpp"
#include "exec/cpu/vocab_parallel_embedding.hpp"
#include "exec/cuda/embedding.hpp"
#include "exec/cuda/gelu.hpp"
#include "exec/cuda/layernorm.hpp"
#include "tests/gpu/gpu_test_util.hpp"

namespace traintwin::exec::cuda {
namespace {

using namespace testing;
using Vec = std::vector<double>;

template <typename T>
std::span<const T> in(const std::vector<T>& v) {
  return {v.data(), v.size()};
}

TEST(CudaEmbedding, VocabParallelForwardIsAnExactCopyOfTheShardRows) {
  TRAINTWIN_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  struct Shape { int64_t b, t, c, start, local, total; };
  for (const Shape s : {Shape{2, 7, 48, 10, 13, 37}, Shape{3, 33, 200, 0, 101, 101},
                        Shape{1, 129, 77, 60, 40, 100}}) {
    for (const DType dtype : all_dtypes()) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " C " + std::to_string(s.c));
      const auto tokens = random_ints(gen, s.b * s.t, 0, static_cast<int32_t>(s.total));
      const Vec wte = round_all(dtype, random_vec(gen, s.local * s.c));
      Vec ref(s.b * s.t * s.c);
      cpu::vocab_parallel_embedding_forward<double>(ref, in(tokens), in(wte), s.b, s.t, s.c,
                                                    s.start, s.local, s.total);
      DeviceInts d_tokens(tokens);
      DeviceTensor d_wte(dtype, wte);
      DeviceTensor d_out(dtype, ref.size());
      d_out.poison();
      vocab_parallel_embedding_forward(dtype, d_out.get(), d_tokens.get(), d_wte.get(), s.b, s.t,
                                       s.c, s.start, s.local, s.total, nullptr);
      const Vec out = d_out.download();
      EXPECT_EQ(first_non_finite(out), -1);
      EXPECT_EQ(out, ref);  // a copy or zeros: exact in every type
    }
  }
}

TEST(CudaEmbedding, VocabParallelBackwardAccumulatesInFp32) {
  TRAINTWIN_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  struct Shape { int64_t b, t, c, start, local, total; };
  for (const Shape s : {Shape{2, 7, 48, 10, 13, 37}, Shape{4, 65, 96, 0, 20, 20}}) {
    for (const DType dtype : all_dtypes()) {
      SCOPED_TRACE(dtype_name(dtype));
      // Few ids so that rows repeat (atomic accumulation of the same row).
      const auto tokens = random_ints(gen, s.b * s.t, 0, static_cast<int32_t>(s.total));
      const Vec dout = round_all(dtype, random_vec(gen, s.b * s.t * s.c));
      Vec dwte = round_all(DType::kFloat32, random_vec(gen, s.local * s.c));
      DeviceInts d_tokens(tokens);
      DeviceTensor d_dout(dtype, dout);
      DeviceTensor d_dwte(DType::kFloat32, dwte);
      cpu::vocab_parallel_embedding_backward<double>(dwte, in(dout), in(tokens), s.b, s.t, s.c,
                                                     s.start, s.local, s.total);
      vocab_parallel_embedding_backward(dtype, d_dwte.f32(), d_dout.get(), d_tokens.get(), s.b,
                                        s.t, s.c, s.start, s.local, s.total, nullptr);
      expect_close(d_dwte.download(), dwte, tolerance(DType::kFloat32), "dwte_local");
    }
  }
}

TEST(CudaEmbedding, PositionForwardAndBackwardWithOffset) {
  TRAINTWIN_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  struct Shape { int64_t b, t, c, offset, max_t; };
  for (const Shape s : {Shape{2, 7, 48, 5, 20}, Shape{3, 129, 33, 0, 129}}) {
    for (const DType dtype : all_dtypes()) {
      SCOPED_TRACE(dtype_name(dtype));
      const Vec wpe = round_all(dtype, random_vec(gen, s.max_t * s.c));
      Vec out = round_all(dtype, random_vec(gen, s.b * s.t * s.c));
      DeviceTensor d_wpe(dtype, wpe);
      DeviceTensor d_out(dtype, out);
      cpu::position_embedding_forward<double>(out, in(wpe), s.b, s.t, s.c, s.offset);
      position_embedding_forward(dtype, d_out.get(), d_wpe.get(), s.b, s.t, s.c, s.offset,
                                 s.max_t, nullptr);
      expect_close(d_out.download(), out, tolerance(dtype), "out");

      const Vec dout = round_all(dtype, random_vec(gen, s.b * s.t * s.c));
      Vec dwpe = round_all(DType::kFloat32, random_vec(gen, s.max_t * s.c));
      DeviceTensor d_dout(dtype, dout);
      DeviceTensor d_dwpe(DType::kFloat32, dwpe);
      cpu::position_embedding_backward<double>(dwpe, in(dout), s.b, s.t, s.c, s.offset);
      position_embedding_backward(dtype, d_dwpe.f32(), d_dout.get(), s.b, s.t, s.c, s.offset,
                                  s.max_t, nullptr);
      expect_close(d_dwpe.download(), dwpe, tolerance(DType::kFloat32), "dwpe");
    }
  }
}

TEST(CudaLayerNorm, ForwardAndBackwardMatchTheCpuLayer) {
  TRAINTWIN_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  struct Shape { int64_t b, t, c; };
  for (const Shape s : {Shape{2, 7, 48}, Shape{3, 11, 33}, Shape{1, 65, 1000}, Shape{2, 3, 1}}) {
    for (const DType dtype : all_dtypes()) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " C " + std::to_string(s.c));
      const int64_t rows = s.b * s.t;
      const Vec inp = round_all(dtype, random_vec(gen, rows * s.c, -1.0, 2.0));  // mean != 0
      const Vec weight = round_all(dtype, random_vec(gen, s.c, 0.5, 1.5));
      const Vec bias = round_all(dtype, random_vec(gen, s.c));
      Vec out(rows * s.c), mean(rows), rstd(rows);
      cpu::layernorm_forward<double>(out, mean, rstd, in(inp), in(weight), in(bias), s.b, s.t,
                                     s.c);
      DeviceTensor d_inp(dtype, inp), d_weight(dtype, weight), d_bias(dtype, bias);
      DeviceTensor d_out(dtype, out.size()), d_mean(DType::kFloat32, rows),
          d_rstd(DType::kFloat32, rows);
      d_out.poison();
      d_mean.poison();
      d_rstd.poison();
      layernorm_forward(dtype, d_out.get(), d_mean.f32(), d_rstd.f32(), d_inp.get(),
                        d_weight.get(), d_bias.get(), s.b, s.t, s.c, nullptr);
      expect_close(d_out.download(), out, tolerance(dtype), "out");
      expect_close(d_mean.download(), mean, tolerance(DType::kFloat32), "mean");
      expect_close(d_rstd.download(), rstd, tolerance(DType::kFloat32), "rstd");

      // Backward from the same (fp32-rounded) statistics on both sides.
      const Vec mean32 = round_all(DType::kFloat32, mean);
      const Vec rstd32 = round_all(DType::kFloat32, rstd);
      const Vec dout = round_all(dtype, random_vec(gen, rows * s.c));
      Vec dinp = round_all(dtype, random_vec(gen, rows * s.c));
      Vec dweight = round_all(DType::kFloat32, random_vec(gen, s.c));
      Vec dbias = round_all(DType::kFloat32, random_vec(gen, s.c));
      DeviceTensor d_dout(dtype, dout), d_dinp(dtype, dinp);
      DeviceTensor d_dweight(DType::kFloat32, dweight), d_dbias(DType::kFloat32, dbias);
      DeviceTensor d_mean32(DType::kFloat32, mean32), d_rstd32(DType::kFloat32, rstd32);
      cpu::layernorm_backward<double>(dinp, dweight, dbias, in(dout), in(inp), in(weight),
                                      in(mean32), in(rstd32), s.b, s.t, s.c);
      layernorm_backward(dtype, d_dinp.get(), d_dweight.f32(), d_dbias.f32(), d_dout.get(),
                         d_inp.get(), d_weight.get(), d_mean32.f32(), d_rstd32.f32(), s.b, s.t,
                         s.c, nullptr);
      expect_close(d_dinp.download(), dinp, tolerance(dtype), "dinp");
      expect_close(d_dweight.download(), dweight, tolerance(DType::kFloat32), "dweight");
      expect_close(d_dbias.download(), dbias, tolerance(DType::kFloat32), "dbias");
    }
  }
}

TEST(CudaGelu, ForwardAndBackwardMatchTheCpuLayer) {
  TRAINTWIN_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  for (const int64_t n : {int64_t{1}, int64_t{255}, int64_t{257}, int64_t{100003}}) {
    for (const DType dtype : all_dtypes()) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " n " + std::to_string(n));
      const Vec inp = round_all(dtype, random_vec(gen, n, -4.0, 4.0));
      Vec out(n);
      cpu::gelu_forward<double>(out, in(inp));
      DeviceTensor d_inp(dtype, inp), d_out(dtype, n);
      d_out.poison();
      gelu_forward(dtype, d_out.get(), d_inp.get(), n, nullptr);
      // GELU(x) = x (1 + tanh(u)) / 2 cancels for x below about -2 (GELU(-4) = -1.3e-4): the
      // kernel's error is tanh's rounding times |x| / 2, not times |GELU(x)|. Measured against
      // the larger of ||ref|| and ||x|| / 2 (a lone x = -3.9 drew 2.9e-5 against ||ref||).
      const Vec got = d_out.download();
      double diff = 0, ref_norm = 0, inp_norm = 0;
      for (size_t i = 0; i < out.size(); ++i) {
        diff += (got[i] - out[i]) * (got[i] - out[i]);
        ref_norm += out[i] * out[i];
        inp_norm += 0.25 * inp[i] * inp[i];
      }
      EXPECT_EQ(first_non_finite(got), -1) << "out: an element was not written (NaN poison)";
      EXPECT_LT(std::sqrt(diff / std::max(ref_norm, inp_norm)), tolerance(dtype)) << "out";

      const Vec dout = round_all(dtype, random_vec(gen, n));
      Vec dinp = round_all(dtype, random_vec(gen, n));
      DeviceTensor d_dout(dtype, dout), d_dinp(dtype, dinp);
      cpu::gelu_backward<double>(dinp, in(inp), in(dout));
      gelu_backward(dtype, d_dinp.get(), d_inp.get(), d_dout.get(), n, nullptr);
      expect_close(d_dinp.download(), dinp, tolerance(dtype), "dinp");
    }
  }
}

}  // namespace
}  // namespace traintwin::exec::cuda
