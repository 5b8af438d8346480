// LinearLayers: the linear layers' GEMMs in fp32 or bf16; see linear.hpp.
#include "exec/linear.hpp"

#include <string>

#include "core/error.hpp"

namespace traintwin::exec {

void set_matmul_arithmetic(Backend& backend, const TrainingConfig& t) {
  if (t.precision == Precision::kBf16) {
    if (backend.has_bf16_arithmetic()) {
      backend.set_float32_matmul_precision(Float32MatmulPrecision::kMedium);
    }
    return;
  }
  backend.set_float32_matmul_precision(t.float32_matmul_precision);
}

LinearLayers::LinearLayers(Backend& backend, Precision precision)
    : backend_(backend), precision_(precision) {
  if (precision != Precision::kFp32 && precision != Precision::kBf16) {
    throw UnsupportedError("training.precision: " + std::string(to_string(precision)) +
                           ": the executor's linear layers compute in fp32 or bf16 (allowed: "
                           "fp32, bf16)");
  }
}

Bf16Tensor LinearLayers::rounded(CFSpan x) {
  Bf16Tensor out(backend_, x.size(), kUninitialized);
  backend_.convert_to_bf16(out, x);
  return out;
}

CBSpan LinearLayers::weight_copy(CFSpan w) {
  if (w.empty()) return {};
  Copy& c = copies_[w.data()];
  if (c.values.size() != w.size()) {
    c.values = Bf16Tensor(backend_, w.size(), kUninitialized);
    c.generation = 0;  // never rounded yet
  }
  if (c.generation != generation_) {
    backend_.convert_to_bf16(c.values, w);
    c.generation = generation_;
  }
  return c.values.span();
}

void LinearLayers::forward(FSpan out, CFSpan inp, CFSpan weight, CFSpan bias, int64_t batch,
                           int64_t seq, int64_t channels, int64_t out_channels) {
  if (precision_ == Precision::kFp32) {
    backend_.matmul_forward(out, inp, weight, bias, batch, seq, channels, out_channels);
    return;
  }
  last_dout_ = {};
  const Bf16Tensor x = rounded(inp);
  Bf16Tensor y(backend_, out.size(), kUninitialized);  // overwritten by the GEMM
  backend_.matmul_forward_bf16(y, x, weight_copy(weight), weight_copy(bias), batch, seq, channels,
                               out_channels);
  backend_.convert_from_bf16(out, y);
}

void LinearLayers::backward_data(FSpan dinp, CFSpan dout, CFSpan weight, int64_t batch,
                                 int64_t seq, int64_t channels, int64_t out_channels) {
  if (precision_ == Precision::kFp32) {
    backend_.matmul_backward_data(dinp, dout, weight, batch, seq, channels, out_channels);
    return;
  }
  last_dout_ = {};
  Bf16Tensor dy = rounded(dout);
  Bf16Tensor dx(backend_, dinp.size(), kUninitialized);
  backend_.matmul_backward_data_bf16(dx, dy, weight_copy(weight), batch, seq, channels,
                                     out_channels);
  backend_.accumulate_from_bf16(dinp, dx);
  last_dout_ = {dout.data(), dout.size(), std::move(dy)};
}

void LinearLayers::backward_weight(FSpan dweight, FSpan dbias, CFSpan dout, CFSpan inp,
                                   int64_t batch, int64_t seq, int64_t channels,
                                   int64_t out_channels) {
  if (precision_ == Precision::kFp32) {
    backend_.matmul_backward_weight(dweight, dbias, dout, inp, batch, seq, channels, out_channels);
    return;
  }
  RoundedGradient kept = std::move(last_dout_);
  last_dout_ = {};
  const bool reuse = kept.source == dout.data() && kept.size == dout.size() && !dout.empty();
  const Bf16Tensor dy = reuse ? std::move(kept.values) : rounded(dout), x = rounded(inp);
  backend_.matmul_backward_weight_bf16(dweight, dbias, dy, x, batch, seq, channels, out_channels);
}

std::string precision_summary(Precision precision, const Backend& backend) {
  if (precision != Precision::kBf16) return "";
  return std::string("precision bf16: linear layers in bf16 (bf16 copies of the fp32 master "
                     "weights, fp32 main grads and optimizer state), attention products in ") +
         (backend.has_bf16_arithmetic()
              ? "bf16 arithmetic"
              : "fp32 (this backend emulates the bf16 GEMMs exactly and has no bf16 arithmetic)") +
         "; activations stay fp32 between kernels (Megatron keeps them in bf16: the elementwise "
         "kernels move twice its bytes)";
}

}  // namespace traintwin::exec
