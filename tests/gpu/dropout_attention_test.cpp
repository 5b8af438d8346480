// GPU kernels against their CPU layers in float64 (needs a device; skips without one): the
// device counter hash bit for bit, bias + dropout + residual and attention dropout (the same
// mask as exec/cpu/dropout), the causal softmax, and attention through cuBLAS, for fp32, bf16
// and fp16 storage, fresh random inputs, NaN-poisoned outputs and workspaces.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "exec/counter_rng.hpp"
#include "exec/cpu/attention.hpp"
#include "exec/cpu/dropout.hpp"
#include "exec/cuda/attention.hpp"
#include "exec/cuda/dropout.hpp"
#include "exec/cuda/softmax.hpp"
#include "tests/gpu/gpu_test_util.hpp"

namespace traintwin::exec::cuda {
namespace {

using namespace testing;
using Vec = std::vector<double>;

std::span<const double> in(const Vec& v) { return {v.data(), v.size()}; }

TEST(CudaDropout, DeviceCounterHashEqualsTheHostOne) {
  TRAINTWIN_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  const uint64_t run_seed = gen(), stream = gen(), first = gen();
  constexpr int64_t kN = 100003;
  uint64_t* d_out = nullptr;
  TRAINTWIN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d_out), kN * sizeof(uint64_t)));
  TRAINTWIN_CUDA_CHECK(cudaMemset(d_out, 0xff, kN * sizeof(uint64_t)));
  counter_hash_fill(d_out, run_seed, stream, first, kN, nullptr);
  std::vector<uint64_t> out(kN);
  TRAINTWIN_CUDA_CHECK(cudaDeviceSynchronize());
  TRAINTWIN_CUDA_CHECK(cudaMemcpy(out.data(), d_out, kN * sizeof(uint64_t), cudaMemcpyDeviceToHost));
  TRAINTWIN_CUDA_CHECK(cudaFree(d_out));
  for (int64_t i = 0; i < kN; ++i) {
    ASSERT_EQ(out[i], counter_hash(run_seed, stream, first + static_cast<uint64_t>(i))) << i;
  }
}

TEST(CudaDropout, BiasDropoutAddMatchesTheCpuMaskAndValues) {
  TRAINTWIN_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  for (const cpu::HiddenBlock block :
       {cpu::HiddenBlock{2, 7, 48, 3, 5, 20}, cpu::HiddenBlock{3, 33, 129, 0, 0, 33}}) {
    for (const double p : {0.0, 0.1, 0.5}) {
      for (const DType dtype : all_dtypes()) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " p " + std::to_string(p));
        const cpu::DropoutParams params{p, gen(), gen()};
        const int64_t rows = block.batch * block.seq_local;
        const int64_t n = rows * block.channels;
        const Vec inp = round_all(dtype, random_vec(gen, n));
        const Vec bias = round_all(dtype, random_vec(gen, block.channels));
        const Vec residual = round_all(dtype, random_vec(gen, n));
        DeviceTensor d_inp(dtype, inp), d_bias(dtype, bias), d_res(dtype, residual);
        DeviceTensor d_out(dtype, n);

        // Plain dropout (no bias, no residual): the mask must be the CPU's exactly.
        Vec ref(n);
        cpu::dropout_forward<double>(ref, in(inp), params, block);
        d_out.poison();
        bias_dropout_add_forward(dtype, d_out.get(), d_inp.get(), nullptr, nullptr, params, block,
                                 nullptr);
        const Vec plain = d_out.download();
        EXPECT_EQ(first_non_finite(plain), -1);
        int64_t mask_mismatch = 0;
        for (int64_t i = 0; i < n; ++i) {
          mask_mismatch += ((plain[i] == 0.0) != (ref[i] == 0.0)) ? 1 : 0;
        }
        EXPECT_EQ(mask_mismatch, 0);
        expect_close(plain, ref, tolerance(dtype), "dropout out");

        // Fused: residual + dropout(inp + bias).
        Vec biased(n);
        for (int64_t i = 0; i < n; ++i) biased[i] = inp[i] + bias[i % block.channels];
        cpu::dropout_forward<double>(ref, in(biased), params, block);
        for (int64_t i = 0; i < n; ++i) ref[i] += residual[i];
        d_out.poison();
        bias_dropout_add_forward(dtype, d_out.get(), d_inp.get(), d_bias.get(), d_res.get(),
                                 params, block, nullptr);
        expect_close(d_out.download(), ref, tolerance(dtype), "bias_dropout_add out");

        // Backward: dinp += mask dout / (1 - p), dresidual += dout, dbias += column sums.
        const Vec dout = round_all(dtype, random_vec(gen, n));
        Vec dinp = round_all(dtype, random_vec(gen, n));
        Vec dres = round_all(dtype, random_vec(gen, n));
        Vec dbias = round_all(DType::kFloat32, random_vec(gen, block.channels));
        DeviceTensor d_dout(dtype, dout), d_dinp(dtype, dinp), d_dres(dtype, dres);
        DeviceTensor d_dbias(DType::kFloat32, dbias);
        Vec contribution(n, 0.0);
        cpu::dropout_backward<double>(contribution, in(dout), params, block);
        for (int64_t i = 0; i < n; ++i) {
          dinp[i] += contribution[i];
          dres[i] += dout[i];
          dbias[i % block.channels] += contribution[i];
        }
        bias_dropout_add_backward(dtype, d_dinp.get(), d_dbias.f32(), d_dres.get(), d_dout.get(),
                                  params, block, nullptr);
        expect_close(d_dinp.download(), dinp, tolerance(dtype), "dinp");
        expect_close(d_dres.download(), dres, tolerance(dtype), "dresidual");
        expect_close(d_dbias.download(), dbias, tolerance(DType::kFloat32), "dbias");
      }
    }
  }
}

TEST(CudaDropout, AttentionDropoutMatchesTheCpuLayer) {
  TRAINTWIN_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  const cpu::AttentionBlock block{2, 3, 17, 1, 2, 8};
  const int64_t n = block.batch * block.heads * block.seq * block.seq;
  for (const DType dtype : all_dtypes()) {
    SCOPED_TRACE(dtype_name(dtype));
    const cpu::DropoutParams params{0.2, gen(), gen()};
    const Vec inp = round_all(dtype, random_vec(gen, n, 0.01, 1.0));
    Vec out(n);
    cpu::attention_dropout_forward<double>(out, in(inp), params, block);
    DeviceTensor d_inp(dtype, inp), d_out(dtype, n);
    d_out.poison();
    attention_dropout_forward(dtype, d_out.get(), d_inp.get(), params, block, nullptr);
    const Vec got = d_out.download();
    int64_t mask_mismatch = 0;
    for (int64_t i = 0; i < n; ++i) mask_mismatch += ((got[i] == 0.0) != (out[i] == 0.0)) ? 1 : 0;
    EXPECT_EQ(mask_mismatch, 0);
    expect_close(got, out, tolerance(dtype), "out");

    const Vec dout = round_all(dtype, random_vec(gen, n));
    Vec dinp = round_all(dtype, random_vec(gen, n));
    DeviceTensor d_dout(dtype, dout), d_dinp(dtype, dinp);
    cpu::attention_dropout_backward<double>(dinp, in(dout), params, block);
    attention_dropout_backward(dtype, d_dinp.get(), d_dout.get(), params, block, nullptr);
    expect_close(d_dinp.download(), dinp, tolerance(dtype), "dinp");
  }
}

// Reference causal softmax and its backward in double (the formulas of softmax.hpp).
void softmax_reference(Vec& att, const Vec& x, int64_t bnh, int64_t seq, double scale) {
  for (int64_t r = 0; r < bnh * seq; ++r) {
    const int64_t t = r % seq;
    const double* row = x.data() + r * seq;
    double* y = att.data() + r * seq;
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t t2 = 0; t2 <= t; ++t2) m = std::max(m, scale * row[t2]);
    double sum = 0;
    for (int64_t t2 = 0; t2 <= t; ++t2) sum += std::exp(scale * row[t2] - m);
    for (int64_t t2 = 0; t2 < seq; ++t2) y[t2] = t2 <= t ? std::exp(scale * row[t2] - m) / sum : 0;
  }
}

void softmax_backward_reference(Vec& dx, const Vec& dy, const Vec& y, int64_t bnh, int64_t seq,
                                double scale) {
  for (int64_t r = 0; r < bnh * seq; ++r) {
    const int64_t t = r % seq;
    double dot = 0;
    for (int64_t t2 = 0; t2 <= t; ++t2) dot += y[r * seq + t2] * dy[r * seq + t2];
    for (int64_t t2 = 0; t2 < seq; ++t2) {
      dx[r * seq + t2] = t2 <= t ? scale * y[r * seq + t2] * (dy[r * seq + t2] - dot) : 0;
    }
  }
}

TEST(CudaSoftmax, CausalForwardAndBackward) {
  TRAINTWIN_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  const int64_t bnh = 6;
  const double scale = 0.37;
  for (const int64_t seq : {int64_t{1}, int64_t{31}, int64_t{33}, int64_t{100}}) {
    for (const DType dtype : all_dtypes()) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " T " + std::to_string(seq));
      const int64_t n = bnh * seq * seq;
      const Vec x = round_all(dtype, random_vec(gen, n, -6.0, 6.0));
      Vec att(n);
      softmax_reference(att, x, bnh, seq, static_cast<float>(scale));
      DeviceTensor d_x(dtype, x), d_att(dtype, n);
      d_att.poison();
      causal_softmax_forward(dtype, d_att.get(), d_x.get(), bnh, seq, static_cast<float>(scale),
                             nullptr);
      const Vec got = d_att.download();
      expect_close(got, att, tolerance(dtype), "att");
      for (int64_t r = 0; r < bnh * seq; ++r) {
        for (int64_t t2 = r % seq + 1; t2 < seq; ++t2) ASSERT_EQ(got[r * seq + t2], 0.0);
      }
      // Backward from the rounded forward output.
      const Vec y = round_all(dtype, att);
      const Vec dy = round_all(dtype, random_vec(gen, n));
      Vec dx(n);
      softmax_backward_reference(dx, dy, y, bnh, seq, static_cast<float>(scale));
      DeviceTensor d_y(dtype, y), d_dy(dtype, dy), d_dx(dtype, n);
      d_dx.poison();
      causal_softmax_backward(dtype, d_dx.get(), d_dy.get(), d_y.get(), bnh, seq,
                              static_cast<float>(scale), nullptr);
      expect_close(d_dx.download(), dx, tolerance(dtype), "dpreatt");
      // In place (dpreatt aliases datt), as attention_backward calls it.
      causal_softmax_backward(dtype, d_dy.get(), d_dy.get(), d_y.get(), bnh, seq,
                              static_cast<float>(scale), nullptr);
      expect_close(d_dy.download(), dx, tolerance(dtype), "dpreatt in place");
    }
  }
}

TEST(CudaAttention, ForwardAndBackwardMatchTheCpuLayer) {
  TRAINTWIN_REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  CublasContext ctx;
  struct Shape { int64_t b, t, c, nh; };
  for (const Shape s : {Shape{2, 7, 48, 4}, Shape{1, 33, 96, 3}, Shape{2, 64, 128, 2}}) {
    for (const DType dtype : all_dtypes()) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " T " + std::to_string(s.t) + " C " +
                   std::to_string(s.c));
      const int64_t btc = s.b * s.t * s.c;
      const int64_t att_n = s.b * s.nh * s.t * s.t;
      const Vec inp = round_all(dtype, random_vec(gen, 3 * btc));
      Vec out(btc), preatt(att_n), att(att_n);
      cpu::attention_forward<double>(out, preatt, att, in(inp), s.b, s.t, s.c, s.nh);
      const size_t ws_bytes = attention_workspace_bytes(dtype, s.b, s.t, s.c, s.nh);
      DeviceTensor d_ws(dtype, ws_bytes / dtype_size_bytes(dtype));
      DeviceTensor d_inp(dtype, inp), d_out(dtype, btc), d_preatt(dtype, att_n),
          d_att(dtype, att_n);
      d_ws.poison();
      d_out.poison();
      d_preatt.poison();
      d_att.poison();
      attention_forward(ctx, dtype, d_out.get(), d_preatt.get(), d_att.get(), d_inp.get(),
                        d_ws.get(), ws_bytes, s.b, s.t, s.c, s.nh, nullptr);
      expect_close(d_out.download(), out, tolerance(dtype), "out");
      expect_close(d_att.download(), att, tolerance(dtype), "att");
      // preatt: compare on and below the diagonal (above it the CPU stores -inf).
      Vec got_pre = d_preatt.download();
      Vec ref_pre = preatt;
      for (int64_t r = 0; r < s.b * s.nh * s.t; ++r) {
        for (int64_t t2 = r % s.t + 1; t2 < s.t; ++t2) got_pre[r * s.t + t2] = ref_pre[r * s.t + t2] = 0;
      }
      expect_close(got_pre, ref_pre, tolerance(dtype), "preatt (causal part)");

      // Backward from the CPU's att rounded to dtype; dinp accumulates onto random values.
      const Vec att_saved = round_all(dtype, att);
      const Vec dout = round_all(dtype, random_vec(gen, btc));
      Vec dinp = round_all(dtype, random_vec(gen, 3 * btc, -0.1, 0.1));
      DeviceTensor d_att_saved(dtype, att_saved), d_dout(dtype, dout), d_dinp(dtype, dinp);
      cpu::attention_backward<double>(dinp, in(dout), in(inp), in(att_saved), s.b, s.t, s.c, s.nh);
      d_ws.poison();
      attention_backward(ctx, dtype, d_dinp.get(), d_dout.get(), d_inp.get(), d_att_saved.get(),
                         d_ws.get(), ws_bytes, s.b, s.t, s.c, s.nh, nullptr);
      expect_close(d_dinp.download(), dinp, tolerance(dtype), "dinp");
    }
  }
}

}  // namespace
}  // namespace traintwin::exec::cuda
