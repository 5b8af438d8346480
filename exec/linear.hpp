// The linear layers' three GEMMs (forward, dgrad, wgrad) in the training precision, for the model
// math (exec/gpt_model*.cpp calls them at every column- and row-parallel layer and the LM head):
//   fp32  the Backend's fp32 matmuls (true fp32, or TF32 / bf16 products under
//         training.float32_matmul_precision).
//   bf16  Megatron-LM's --bf16 linear layer: the weight in bf16, copied from the fp32 master
//         weight once per iteration (Float16OptimizerWithFloat16Params keeps the same pair), bf16
//         operands, fp32 accumulation, the output rounded to bf16 once, the weight gradient
//         accumulated in fp32 (gradient_accumulation_fusion into main_grad). The executor keeps its
//         activations in fp32 memory between kernels: each GEMM rounds its activation operand to
//         bf16 on entry and widens its bf16 result on exit (exactly), so the arithmetic is
//         Megatron's and the elementwise kernels around the GEMMs still move fp32 bytes.
// Next in the flow: the Backend's matmul kernels (exec/backend.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "core/scenario.hpp"
#include "exec/backend.hpp"

namespace traintwin::exec {

/// Sets `backend`'s arithmetic for the matrix products outside the linear layers (the attention
/// core) as `train` runs training `t` and `profile` times it: under bf16 training on a backend
/// with bf16 arithmetic, bf16 products (float32_matmul_precision medium's arithmetic; Megatron's
/// bf16 attention multiplies bf16 q, k, v and probabilities; storage stays fp32); a backend
/// without it (the cpu backend, whose bf16 GEMMs are an exact emulation) keeps fp32 products;
/// otherwise t.float32_matmul_precision. Throws UnsupportedError from a backend that lacks the
/// requested TF32 / bf16 arithmetic (never a silent fp32).
void set_matmul_arithmetic(Backend& backend, const TrainingConfig& t);

/// The linear layers of one rank's model in one training precision. Not thread-safe (one per
/// GptModel). The bf16 weight copies are cached per fp32 weight (by address) and refreshed at
/// their first use after begin_iteration(). The bf16 rounding of a dgrad's output gradient is
/// kept for the wgrad that directly follows it with the same gradient (1F1B places a layer's W
/// right after its B), so that gradient is rounded once, not twice; any other call drops it.
class LinearLayers {
 public:
  /// `precision`: fp32 or bf16 (UnsupportedError naming training.precision otherwise).
  LinearLayers(Backend& backend, Precision precision);

  Precision precision() const { return precision_; }

  /// The weights may have changed (an optimizer step, a checkpoint load, a test's edit): every
  /// bf16 copy is re-rounded from its fp32 master at its next use.
  void begin_iteration() { ++generation_; }

  /// out [B, T, OC] = inp [B, T, C] W^T + bias; W [OC, C], bias [OC] or empty. KernelKey
  /// gemm_fwd.
  void forward(FSpan out, CFSpan inp, CFSpan weight, CFSpan bias, int64_t batch, int64_t seq,
               int64_t channels, int64_t out_channels);
  /// dinp [B, T, C] += dout [B, T, OC] W (bf16: the product rounded to bf16, then added in
  /// fp32). gemm_dgrad.
  void backward_data(FSpan dinp, CFSpan dout, CFSpan weight, int64_t batch, int64_t seq,
                     int64_t channels, int64_t out_channels);
  /// dweight [OC, C] += dout^T inp and dbias [OC] += column sums of dout, in fp32 (dbias may be
  /// empty). gemm_wgrad.
  void backward_weight(FSpan dweight, FSpan dbias, CFSpan dout, CFSpan inp, int64_t batch,
                       int64_t seq, int64_t channels, int64_t out_channels);

 private:
  /// `x` rounded to bf16 into a new buffer.
  Bf16Tensor rounded(CFSpan x);
  /// The bf16 copy of weight (or bias) `w`, re-rounded once per generation.
  CBSpan weight_copy(CFSpan w);

  struct Copy {
    Bf16Tensor values;
    uint64_t generation = 0;
  };
  /// The last backward_data's rounded output gradient, by the fp32 span it was rounded from.
  struct RoundedGradient {
    const float* source = nullptr;
    size_t size = 0;
    Bf16Tensor values;
  };
  Backend& backend_;
  Precision precision_;
  uint64_t generation_ = 1;
  std::unordered_map<const float*, Copy> copies_;
  RoundedGradient last_dout_;
};

/// One line for the training log saying what `precision` computes on `backend` ("" for fp32):
/// for bf16, which products run in bf16 and that activations stay fp32 between kernels.
std::string precision_summary(Precision precision, const Backend& backend);

}  // namespace traintwin::exec
