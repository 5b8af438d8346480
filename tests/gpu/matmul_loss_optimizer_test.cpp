// GPU kernels against their CPU layers in float64 (needs a device; skips without one): the
// cuBLASLt linear layer (forward with and without the bias epilogue, dgrad with and without
// accumulation, wgrad into fp32 with the bias gradient), the vocab-parallel cross-entropy steps
// (a)-(d) on a shard, AdamW with its bf16/fp16 model copy, the sum of squares and the scaling.
// fp32, bf16 and fp16 storage, fresh random inputs, NaN-poisoned outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "exec/cpu/adamw.hpp"
#include "exec/cpu/matmul.hpp"
#include "exec/cpu/vocab_parallel_cross_entropy.hpp"
#include "exec/cuda/adamw.hpp"
#include "exec/cuda/cross_entropy.hpp"
#include "exec/cuda/gemm.hpp"
#include "tests/gpu/gpu_test_util.hpp"

namespace traintwin::exec::cuda {
namespace {

using namespace testing;
using Vec = std::vector<double>;

template <typename T>
std::span<const T> in(const std::vector<T>& v) {
  return {v.data(), v.size()};
}

TEST(CudaMatmul, ForwardDgradWgradMatchTheCpuLayer) {
  TRAINTWIN_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  CublasContext ctx;
  struct Shape { int64_t rows, c, oc; };
  for (const Shape s : {Shape{14, 48, 40}, Shape{99, 32, 72}, Shape{256, 128, 200}, Shape{7, 33, 5}}) {
    for (const DType dtype : all_dtypes()) {
      for (const bool with_bias : {true, false}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " rows " + std::to_string(s.rows) + " C " +
                     std::to_string(s.c) + " OC " + std::to_string(s.oc) +
                     (with_bias ? " bias" : ""));
        const Vec inp = round_all(dtype, random_vec(gen, s.rows * s.c));
        const Vec weight = round_all(dtype, random_vec(gen, s.oc * s.c));
        const Vec bias = with_bias ? round_all(dtype, random_vec(gen, s.oc)) : Vec{};
        Vec out(s.rows * s.oc);
        cpu::matmul_forward<double>(out, in(inp), in(weight), in(bias), 1, s.rows, s.c, s.oc);
        DeviceTensor d_inp(dtype, inp), d_weight(dtype, weight), d_out(dtype, out.size());
        DeviceTensor d_bias(dtype, with_bias ? bias : Vec(1, 0.0));
        d_out.poison();
        matmul_forward(ctx, dtype, d_out.get(), d_inp.get(), d_weight.get(),
                       with_bias ? d_bias.get() : nullptr, s.rows, s.c, s.oc, nullptr);
        expect_close(d_out.download(), out, tolerance(dtype), "out");

        // dgrad, accumulating onto random values, then overwriting a poisoned buffer.
        const Vec dout = round_all(dtype, random_vec(gen, s.rows * s.oc));
        DeviceTensor d_dout(dtype, dout);
        Vec dinp = round_all(dtype, random_vec(gen, s.rows * s.c));
        DeviceTensor d_dinp(dtype, dinp);
        cpu::matmul_backward_data<double>(dinp, in(dout), in(weight), 1, s.rows, s.c, s.oc);
        matmul_backward_data(ctx, dtype, d_dinp.get(), d_dout.get(), d_weight.get(), s.rows, s.c,
                             s.oc, /*accumulate=*/true, nullptr);
        expect_close(d_dinp.download(), dinp, tolerance(dtype), "dinp (accumulate)");
        Vec dinp0(s.rows * s.c, 0.0);
        cpu::matmul_backward_data<double>(dinp0, in(dout), in(weight), 1, s.rows, s.c, s.oc);
        d_dinp.poison();
        matmul_backward_data(ctx, dtype, d_dinp.get(), d_dout.get(), d_weight.get(), s.rows, s.c,
                             s.oc, /*accumulate=*/false, nullptr);
        expect_close(d_dinp.download(), dinp0, tolerance(dtype), "dinp (overwrite)");

        // wgrad into fp32 main grads.
        Vec dweight = round_all(DType::kFloat32, random_vec(gen, s.oc * s.c));
        Vec dbias = with_bias ? round_all(DType::kFloat32, random_vec(gen, s.oc)) : Vec{};
        DeviceTensor d_dweight(DType::kFloat32, dweight);
        DeviceTensor d_dbias(DType::kFloat32, with_bias ? dbias : Vec(1, 0.0));
        cpu::matmul_backward_weight<double>(dweight, dbias, in(dout), in(inp), 1, s.rows, s.c,
                                            s.oc);
        matmul_backward_weight(ctx, dtype, d_dweight.f32(), with_bias ? d_dbias.f32() : nullptr,
                               d_dout.get(), d_inp.get(), s.rows, s.c, s.oc, nullptr);
        expect_close(d_dweight.download(), dweight, tolerance(DType::kFloat32), "dweight");
        if (with_bias) {
          expect_close(d_dbias.download(), dbias, tolerance(DType::kFloat32), "dbias");
        }
      }
    }
  }
}

// fp32 operands under float32_matmul_precision high (TF32: 10-bit mantissas, unit roundoff
// 2^-11) and medium (bf16: 7-bit, 2^-8): the forward GEMM and the batched GEMM within the
// tolerance of that rounding of the inputs, and farther from the float64 reference than true
// fp32 (so the setting reached cuBLAS). A K of 1024 random products: the relative error of a
// rounded-input dot product is about the unit roundoff; the bounds allow 4x.
TEST(CudaMatmul, Float32MatmulPrecisionRoundsTheOperands) {
  TRAINTWIN_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  const int64_t rows = 512, c = 1024, oc = 256;
  const Vec inp = round_all(DType::kFloat32, random_vec(gen, rows * c));
  const Vec weight = round_all(DType::kFloat32, random_vec(gen, oc * c));
  Vec out(rows * oc);
  cpu::matmul_forward<double>(out, in(inp), in(weight), in(Vec{}), 1, rows, c, oc);
  DeviceTensor d_inp(DType::kFloat32, inp), d_weight(DType::kFloat32, weight);
  DeviceTensor d_out(DType::kFloat32, out.size());
  struct Case {
    Float32MatmulPrecision precision;
    double min_error, max_error;
  };
  for (const Case k : {Case{Float32MatmulPrecision::kHighest, 0.0, 1e-5},
                       Case{Float32MatmulPrecision::kHigh, 2e-5, 4.0 * std::ldexp(1.0, -11)},
                       Case{Float32MatmulPrecision::kMedium, 2e-4, 4.0 * std::ldexp(1.0, -8)}}) {
    SCOPED_TRACE(to_string(k.precision));
    CublasContext ctx;
    ctx.set_float32_matmul_precision(k.precision);
    d_out.poison();
    matmul_forward(ctx, DType::kFloat32, d_out.get(), d_inp.get(), d_weight.get(), nullptr, rows,
                   c, oc, nullptr);
    const double e = relative_error(d_out.download(), out);
    EXPECT_GE(e, k.min_error) << "forward: no rounding of the operands";
    EXPECT_LT(e, k.max_error) << "forward";
    // The same product as 2 batches of rows/2 x oc (inp [2, rows/2, c] times weight^T).
    d_out.poison();
    batched_matmul(ctx, DType::kFloat32, false, true, rows / 2, oc, c, 1.0f, d_inp.get(), c,
                   rows / 2 * c, d_weight.get(), c, 0, 0.0f, d_out.get(), oc, rows / 2 * oc, 2,
                   nullptr);
    const double eb = relative_error(d_out.download(), out);
    EXPECT_GE(eb, k.min_error) << "batched: no rounding of the operands";
    EXPECT_LT(eb, k.max_error) << "batched";
  }
}

TEST(CudaCrossEntropy, VocabParallelStepsMatchTheCpuLayer) {
  TRAINTWIN_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  struct Shape { int64_t rows, start, local, total; };
  for (const Shape s : {Shape{7, 250, 333, 1000}, Shape{65, 0, 1000, 1000}, Shape{130, 97, 3, 100}}) {
    for (const DType dtype : all_dtypes()) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " rows " + std::to_string(s.rows) +
                   " V_local " + std::to_string(s.local));
      const Vec logits = round_all(dtype, random_vec(gen, s.rows * s.local, -4.0, 4.0));
      auto targets = random_ints(gen, s.rows, 0, static_cast<int32_t>(s.total));
      for (int64_t i = 0; i < s.rows; i += 2) {  // half of them in this shard
        targets[i] = static_cast<int32_t>(s.start) + random_ints(gen, 1, 0, static_cast<int32_t>(s.local))[0];
      }
      DeviceTensor d_logits(dtype, logits);
      DeviceInts d_targets(targets);

      // (a) local max: a max of representable values, exact.
      Vec max_local(s.rows);
      cpu::vocab_parallel_logits_max<double>(max_local, in(logits), 1, s.rows, s.local);
      DeviceTensor d_max(DType::kFloat32, s.rows);
      d_max.poison();
      vocab_parallel_logits_max(dtype, d_max.f32(), d_logits.get(), s.rows, s.local, nullptr);
      EXPECT_EQ(d_max.download(), max_local);

      // (b) with a "global" max above the local one (another shard's larger logit).
      Vec max_global = max_local;
      for (double& m : max_global) m = round_to(DType::kFloat32, m + random_vec(gen, 1, 0.0, 1.0)[0]);
      Vec sum_exp(s.rows), target_logit(s.rows);
      cpu::vocab_parallel_sum_exp<double>(sum_exp, target_logit, in(logits), in(max_global),
                                          in(targets), 1, s.rows, s.start, s.local, s.total);
      DeviceTensor d_max_global(DType::kFloat32, max_global);
      DeviceTensor d_sum(DType::kFloat32, s.rows), d_target(DType::kFloat32, s.rows);
      d_sum.poison();
      d_target.poison();
      vocab_parallel_sum_exp(dtype, d_sum.f32(), d_target.f32(), d_logits.get(), d_max_global.f32(),
                             d_targets.get(), s.rows, s.start, s.local, s.total, nullptr);
      expect_close(d_sum.download(), sum_exp, tolerance(DType::kFloat32), "sum_exp_local");
      EXPECT_EQ(d_target.download(), target_logit);  // a copy or 0

      // (c) loss from positive sums and fp32 pieces.
      const Vec sum_in = round_all(DType::kFloat32, random_vec(gen, s.rows, 0.5, 50.0));
      const Vec target_in = round_all(DType::kFloat32, random_vec(gen, s.rows, -3.0, 3.0));
      Vec losses(s.rows);
      cpu::vocab_parallel_cross_entropy_loss<double>(losses, in(sum_in), in(max_global),
                                                     in(target_in), 1, s.rows);
      DeviceTensor d_sum_in(DType::kFloat32, sum_in), d_target_in(DType::kFloat32, target_in);
      DeviceTensor d_losses(DType::kFloat32, s.rows);
      d_losses.poison();
      vocab_parallel_cross_entropy_loss(d_losses.f32(), d_sum_in.f32(), d_max_global.f32(),
                                        d_target_in.f32(), s.rows, nullptr);
      expect_close(d_losses.download(), losses, tolerance(DType::kFloat32), "losses");

      // (d) backward onto random dlogits, with the global statistics of one shard (sum_exp of
      // the whole row makes the probabilities sum to 1 when the shard is the whole vocab).
      const Vec sum_global = round_all(DType::kFloat32, sum_exp);
      const Vec dlosses = round_all(DType::kFloat32, random_vec(gen, s.rows, 0.1, 1.0));
      Vec dlogits = round_all(dtype, random_vec(gen, s.rows * s.local, -0.01, 0.01));
      DeviceTensor d_sum_global(DType::kFloat32, sum_global), d_dlosses(DType::kFloat32, dlosses);
      DeviceTensor d_dlogits(dtype, dlogits);
      cpu::vocab_parallel_cross_entropy_backward<double>(dlogits, in(dlosses), in(logits),
                                                         in(max_global), in(sum_global),
                                                         in(targets), 1, s.rows, s.start, s.local,
                                                         s.total);
      vocab_parallel_cross_entropy_backward(dtype, d_dlogits.get(), d_dlosses.f32(),
                                            d_logits.get(), d_max_global.f32(),
                                            d_sum_global.f32(), d_targets.get(), s.rows, s.start,
                                            s.local, s.total, nullptr);
      expect_close(d_dlogits.download(), dlogits, tolerance(dtype), "dlogits_local");
    }
  }
}

TEST(CudaAdamW, StepMatchesTheCpuOptimizerAndWritesTheModelCopy) {
  TRAINTWIN_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  const cpu::AdamWParams hyper{0.9, 0.95, 1e-8, 0.1};
  // n >= 17: with a single element the update may cancel to near 0 by chance, and the check on
  // p - p0 would then measure p's own fp32 rounding.
  for (const int64_t n : {int64_t{17}, int64_t{1000}, int64_t{100003}}) {
    for (const int64_t step : {int64_t{1}, int64_t{7}}) {
      for (const DType model : all_dtypes()) {
        SCOPED_TRACE("n " + std::to_string(n) + " step " + std::to_string(step) + " " +
                     dtype_name(model));
        const double lr = 1e-2;
        const Vec p0 = round_all(DType::kFloat32, random_vec(gen, n));
        const Vec g = round_all(DType::kFloat32, random_vec(gen, n));
        Vec m = round_all(DType::kFloat32, random_vec(gen, n, -0.1, 0.1));
        Vec v = round_all(DType::kFloat32, random_vec(gen, n, 0.0, 0.01));
        DeviceTensor d_p(DType::kFloat32, p0), d_g(DType::kFloat32, g), d_m(DType::kFloat32, m),
            d_v(DType::kFloat32, v), d_model(model, n);
        d_model.poison();
        Vec p = p0;
        cpu::adamw_step<double>(p, in(g), m, v, hyper, lr, step);
        adamw_step(d_p.f32(), d_g.f32(), d_m.f32(), d_v.f32(), n, hyper, lr, step, d_model.get(),
                   model, nullptr);
        const Vec got_p = d_p.download();
        // The update itself (p - p0), not only p, must be accurate.
        Vec delta_ref(n), delta_got(n);
        for (int64_t i = 0; i < n; ++i) {
          delta_ref[i] = p[i] - p0[i];
          delta_got[i] = got_p[i] - p0[i];
        }
        expect_close(delta_got, delta_ref, 1e-4, "params update");
        expect_close(d_m.download(), m, tolerance(DType::kFloat32), "m");
        expect_close(d_v.download(), v, tolerance(DType::kFloat32), "v");
        EXPECT_EQ(d_model.download(), round_all(model, got_p));  // the master weights, rounded
      }
    }
  }
}

TEST(CudaAdamW, SumOfSquaresAccumulatesInDoubleAndScaleMultiplies) {
  TRAINTWIN_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  for (const int64_t n : {int64_t{1}, int64_t{1000}, int64_t{(1 << 20) + 3}}) {
    for (const DType dtype : all_dtypes()) {
      SCOPED_TRACE("n " + std::to_string(n) + " " + dtype_name(dtype));
      const Vec values = round_all(dtype, random_vec(gen, n));
      DeviceTensor d_values(dtype, values);
      double* d_result = nullptr;
      TRAINTWIN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d_result), sizeof(double)));
      const double start = 1.5;  // accumulates onto the previous pieces
      TRAINTWIN_CUDA_CHECK(cudaMemcpy(d_result, &start, sizeof(double), cudaMemcpyHostToDevice));
      sum_of_squares(dtype, d_values.get(), n, d_result, nullptr);
      double got = 0;
      TRAINTWIN_CUDA_CHECK(cudaDeviceSynchronize());
      TRAINTWIN_CUDA_CHECK(cudaMemcpy(&got, d_result, sizeof(double), cudaMemcpyDeviceToHost));
      TRAINTWIN_CUDA_CHECK(cudaFree(d_result));
      std::vector<float> as_float(values.begin(), values.end());
      const double ref = start + cpu::sum_of_squares(std::span<const float>(as_float));
      EXPECT_NEAR(got, ref, 1e-12 * ref);
    }
    const Vec x = round_all(DType::kFloat32, random_vec(gen, n));
    DeviceTensor d_x(DType::kFloat32, x);
    const double factor = 0.3712;
    scale_in_place(d_x.f32(), n, factor, nullptr);
    Vec ref(n);
    for (int64_t i = 0; i < n; ++i) {
      ref[i] = static_cast<float>(x[i]) * static_cast<float>(factor);  // as the CPU layer
    }
    EXPECT_EQ(d_x.download(), ref);
  }
}

}  // namespace
}  // namespace traintwin::exec::cuda
