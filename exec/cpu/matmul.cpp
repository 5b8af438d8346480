// Linear layer through OpenBLAS; see matmul.hpp.
#include "exec/cpu/matmul.hpp"

#include "exec/cpu/checks.hpp"

#include "exec/cpu/gemm.hpp"

#include <string>

#include "core/checks.hpp"
#include "core/error.hpp"

namespace traintwin::exec::cpu {
namespace {

void require_size(size_t actual, int64_t expected, const char* name) {
  cpu::require_size("matmul", actual, expected, name);
}


void check_sizes(int64_t batch, int64_t seq, int64_t channels, int64_t out_channels) {
  require_at_least_one(batch, "matmul batch");
  require_at_least_one(seq, "matmul seq");
  require_at_least_one(channels, "matmul channels");
  require_at_least_one(out_channels, "matmul out_channels");
}

}  // namespace

template <typename Scalar>
void matmul_forward(std::span<Scalar> out, std::span<const Scalar> inp,
                    std::span<const Scalar> weight, std::span<const Scalar> bias, int64_t batch,
                    int64_t seq, int64_t channels, int64_t out_channels) {
  check_sizes(batch, seq, channels, out_channels);
  const int64_t bt = batch * seq;
  require_size(out.size(), bt * out_channels, "out");
  require_size(inp.size(), bt * channels, "inp");
  require_size(weight.size(), out_channels * channels, "weight");
  if (!bias.empty()) require_size(bias.size(), out_channels, "bias");
  // out[BT, OC] = inp[BT, C] x weight^T[C, OC]
  gemm(CblasNoTrans, CblasTrans, bt, out_channels, channels, Scalar{1}, inp.data(), channels,
       weight.data(), channels, Scalar{0}, out.data(), out_channels);
  if (!bias.empty()) {
    for (int64_t i = 0; i < bt; ++i) {
      Scalar* out_bt = out.data() + i * out_channels;  // [OC]
      for (int64_t o = 0; o < out_channels; ++o) out_bt[o] += bias[o];
    }
  }
}

template <typename Scalar>
void matmul_backward_data(std::span<Scalar> dinp, std::span<const Scalar> dout,
                          std::span<const Scalar> weight, int64_t batch, int64_t seq,
                          int64_t channels, int64_t out_channels) {
  check_sizes(batch, seq, channels, out_channels);
  const int64_t bt = batch * seq;
  require_size(dinp.size(), bt * channels, "dinp");
  require_size(dout.size(), bt * out_channels, "dout");
  require_size(weight.size(), out_channels * channels, "weight");
  // dinp[BT, C] += dout[BT, OC] x weight[OC, C]
  gemm(CblasNoTrans, CblasNoTrans, bt, channels, out_channels, Scalar{1}, dout.data(),
       out_channels, weight.data(), channels, Scalar{1}, dinp.data(), channels);
}

template <typename Scalar>
void matmul_backward_weight(std::span<Scalar> dweight, std::span<Scalar> dbias,
                            std::span<const Scalar> dout, std::span<const Scalar> inp,
                            int64_t batch, int64_t seq, int64_t channels, int64_t out_channels) {
  check_sizes(batch, seq, channels, out_channels);
  const int64_t bt = batch * seq;
  require_size(dweight.size(), out_channels * channels, "dweight");
  if (!dbias.empty()) require_size(dbias.size(), out_channels, "dbias");
  require_size(dout.size(), bt * out_channels, "dout");
  require_size(inp.size(), bt * channels, "inp");
  // dweight[OC, C] += dout^T[OC, BT] x inp[BT, C]
  gemm(CblasTrans, CblasNoTrans, out_channels, channels, bt, Scalar{1}, dout.data(), out_channels,
       inp.data(), channels, Scalar{1}, dweight.data(), channels);
  if (!dbias.empty()) {
    for (int64_t i = 0; i < bt; ++i) {
      const Scalar* dout_bt = dout.data() + i * out_channels;  // [OC]
      for (int64_t o = 0; o < out_channels; ++o) dbias[o] += dout_bt[o];
    }
  }
}

template <typename Scalar>
void matmul_backward(std::span<Scalar> dinp, std::span<Scalar> dweight, std::span<Scalar> dbias,
                     std::span<const Scalar> dout, std::span<const Scalar> inp,
                     std::span<const Scalar> weight, int64_t batch, int64_t seq,
                     int64_t channels, int64_t out_channels) {
  matmul_backward_data(dinp, dout, weight, batch, seq, channels, out_channels);
  matmul_backward_weight(dweight, dbias, dout, inp, batch, seq, channels, out_channels);
}

#define TRAINTWIN_MATMUL_BACKWARD_PARTS(Scalar)                                                   \
  template void matmul_backward_data<Scalar>(std::span<Scalar>, std::span<const Scalar>,          \
                                             std::span<const Scalar>, int64_t, int64_t, int64_t,  \
                                             int64_t);                                            \
  template void matmul_backward_weight<Scalar>(std::span<Scalar>, std::span<Scalar>,              \
                                               std::span<const Scalar>, std::span<const Scalar>,  \
                                               int64_t, int64_t, int64_t, int64_t);
TRAINTWIN_MATMUL_BACKWARD_PARTS(float)
TRAINTWIN_MATMUL_BACKWARD_PARTS(double)
#undef TRAINTWIN_MATMUL_BACKWARD_PARTS

void set_gemm_threads(int threads) {
  if (threads < 1) throw InvalidArgument("GEMM threads must be >= 1, got " + std::to_string(threads));
  openblas_set_num_threads(threads);
}

int gemm_threads() { return openblas_get_num_threads(); }

template void matmul_forward<float>(std::span<float>, std::span<const float>,
                                    std::span<const float>, std::span<const float>, int64_t,
                                    int64_t, int64_t, int64_t);
template void matmul_forward<double>(std::span<double>, std::span<const double>,
                                     std::span<const double>, std::span<const double>, int64_t,
                                     int64_t, int64_t, int64_t);
template void matmul_backward<float>(std::span<float>, std::span<float>, std::span<float>,
                                     std::span<const float>, std::span<const float>,
                                     std::span<const float>, int64_t, int64_t, int64_t, int64_t);
template void matmul_backward<double>(std::span<double>, std::span<double>, std::span<double>,
                                      std::span<const double>, std::span<const double>,
                                      std::span<const double>, int64_t, int64_t, int64_t,
                                      int64_t);

}  // namespace traintwin::exec::cpu
