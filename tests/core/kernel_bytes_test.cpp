// The bytes the Program charges the memory-bound kernels, against counts worked by hand from the
// source of the kernels Megatron-LM runs (issue 24, item 1: full recomputation without sequence
// parallelism over-predicted; the bytes of the unfused attention, the residual adds and the
// optimizer's passes were under-counted, so a memory efficiency fitted on them stood for more
// than the HBM bandwidth the kernels reach). Each expected value is computed in the comment from
// the kernel's reads and writes, not from the factory.
#include <gtest/gtest.h>

#include <string>

#include "core/program.hpp"
#include "core/scenario.hpp"

namespace traintwin {
namespace {

// A small GPT: 1 layer, h 64, 8 heads (head dim 8), ffn 256, s 32, V 1024, micro-batch 1, TP 1,
// one GPU, no recomputation.
Scenario small_gpt(Precision precision) {
  Scenario s;
  s.name = "kernel-bytes";
  s.model = ModelSpec{"gpt", 1, 64, 8, 256, 32, 1024};
  s.parallel.tensor_model_parallel_size = 1;
  s.parallel.pipeline_model_parallel_size = 1;
  s.parallel.data_parallel_size = 1;
  s.training.micro_batch_size = 1;
  s.training.global_batch_size = 1;
  s.training.precision = precision;
  s.training.use_distributed_optimizer = false;
  s.cluster.num_gpus = 1;
  return s;
}

const Kernel& kernel_named(const Program& p, const std::string& name) {
  for (const Kernel& k : p.kernels) {
    if (k.key.name == name) return k;
  }
  throw std::runtime_error("no kernel " + name);
}

// Megatron-LM's unfused causal attention (CoreAttention, megatron/model/transformer.py of 2022) on
// b 1, 8 heads, s 32, head dim 8, fp16 (e = 2 bytes): 8 x 32 x 32 = 8,192 score elements.
// Forward, per score element: baddbmm writes 2; the causal fused softmax reads the lower
// triangle (1 on average) and writes 2; dropout reads 2, writes 2 and a 1-byte mask; the bmm with
// V reads 2: 12 bytes, 98,304 in all. Q, K, V read and O written: 4 x 8 x 32 x 8 x 2 = 16,384;
// O permuted and made contiguous (read + write): 8,192. Total 122,880 bytes.
// Backward: dP written (2), the saved dropped probabilities read for dV (2), dropout backward
// reads dP (2) and the mask (1) and writes (2), the softmax backward reads the gradient and the
// saved output below the diagonal (1 + 1) and writes (2), dQ and dK each read dS (2 + 2): 17
// bytes, 139,264 in all; Q, K, V, dO read and dQ, dK, dV, the O read again: twice 16,384.
// Total 172,032 bytes.
TEST(KernelBytes, UnfusedAttentionAsMegatronsCoreAttentionMovesTheScores) {
  const Program p = build_program(small_gpt(Precision::kFp16), {0});
  const Kernel& fwd = kernel_named(p, "attention_fwd");
  const Kernel& bwd = kernel_named(p, "attention_bwd");
  EXPECT_EQ(fwd.key.shape, (std::vector<int64_t>{1, 8, 32, 8}));
  EXPECT_DOUBLE_EQ(fwd.bytes, 122880.0);
  EXPECT_DOUBLE_EQ(bwd.bytes, 172032.0);
  // The FLOPs are unchanged: QK^T and AV, 4 b heads s^2 d = 4 x 8 x 32 x 32 x 8 forward.
  EXPECT_DOUBLE_EQ(fwd.flops, 4.0 * 8 * 32 * 32 * 8);
  EXPECT_DOUBLE_EQ(bwd.flops, 2 * fwd.flops);
}

// bias-dropout-add on s b h = 32 x 64 = 2,048 elements, fp16: forward reads x and the residual,
// writes the sum and the mask: 3 x 2 + 1 = 7 bytes each, 14,336. Backward reads dy and the mask
// and writes dx (2 x 2 + 1), and autograd sums the residual's gradient with the one back through
// the LayerNorm (reads 2 x 2, writes 2): 11 bytes each, 22,528.
TEST(KernelBytes, DropoutAddBackwardIncludesTheResidualGradientSum) {
  const Program p = build_program(small_gpt(Precision::kFp16), {0});
  EXPECT_DOUBLE_EQ(kernel_named(p, "dropout_add_fwd").bytes, 14336.0);
  EXPECT_DOUBLE_EQ(kernel_named(p, "dropout_add_bwd").bytes, 22528.0);
}

// The optimizer's passes per parameter (Megatron's MixedPrecisionOptimizer.step): fp16 keeps
// fp16 gradients, copied to fp32 main grads (read 2, write 4) and unscaled (read 4, write 4)
// before the norm reads them (4): grad_norm 18 bytes each. bf16 accumulates fp32 grads (no copy)
// and has no loss scaler: 4. AdamW reads grad, master, m, v and writes master, m, v (28), then the
// master is copied into the 16-bit model parameter (read 4, write 2): 34 in both; fp32 training
// has no copy: 28, and grad_norm 4.
TEST(KernelBytes, OptimizerPassesPerParameterByPrecision) {
  struct Row {
    Precision precision;
    double grad_norm, adamw;
  };
  for (const Row& r : {Row{Precision::kFp16, 18, 34}, Row{Precision::kBf16, 4, 34},
                       Row{Precision::kFp32, 4, 28}}) {
    const Program p = build_program(small_gpt(r.precision), {0});
    const Kernel& norm = kernel_named(p, "grad_norm");
    const Kernel& adam = kernel_named(p, "adamw_step");
    const double n = static_cast<double>(norm.key.shape.at(0));
    ASSERT_GT(n, 0);
    EXPECT_EQ(adam.key.shape.at(0), norm.key.shape.at(0));
    EXPECT_DOUBLE_EQ(norm.bytes, r.grad_norm * n) << to_string(r.precision);
    EXPECT_DOUBLE_EQ(adam.bytes, r.adamw * n) << to_string(r.precision);
  }
}

// Megatron's unfused vocab-parallel cross-entropy (megatron/core/tensor_parallel/cross_entropy.py,
// core_v0.10.0: _VocabParallelCrossEntropy.forward/backward) on s b = 32 tokens x V 1,024 = 32,768
// logits of one rank, worked from its passes:
//  bf16 (e = 2): calculate_logits_max casts the logits to fp32 (read 2, write 4) and takes the
//    max (read 4): 10 bytes each, 327,680. calculate_predicted_logits subtracts the max in place
//    (read 4, write 4), takes exp in place (4 + 4) and sums (4); calculate_cross_entropy_loss
//    divides in place (4 + 4): 28, 917,504. The backward's grad_input.mul_ (4 + 4) and the cast's
//    backward to bf16 (read 4, write 2): 14, 458,752. 52 bytes per logit in all.
//  fp32: `.float()` is the tensor itself, no copy and no backward cast: 4, 28 and 8 bytes each.
TEST(KernelBytes, VocabParallelCrossEntropyAsMegatronsUnfusedPasses) {
  struct Row {
    Precision precision;
    double max, fwd, bwd;
  };
  for (const Row& r : {Row{Precision::kBf16, 327680, 917504, 458752},
                       Row{Precision::kFp32, 131072, 917504, 262144}}) {
    const Program p = build_program(small_gpt(r.precision), {0});
    EXPECT_EQ(kernel_named(p, "cross_entropy_fwd").key.shape, (std::vector<int64_t>{32, 1024}));
    EXPECT_DOUBLE_EQ(kernel_named(p, "cross_entropy_max").bytes, r.max) << to_string(r.precision);
    EXPECT_DOUBLE_EQ(kernel_named(p, "cross_entropy_fwd").bytes, r.fwd) << to_string(r.precision);
    EXPECT_DOUBLE_EQ(kernel_named(p, "cross_entropy_bwd").bytes, r.bwd) << to_string(r.precision);
    // FLOPs per logit: 1 for the max, 3 forward (subtract, exp, divide), 3 backward.
    EXPECT_DOUBLE_EQ(kernel_named(p, "cross_entropy_max").flops, 32768.0);
    EXPECT_DOUBLE_EQ(kernel_named(p, "cross_entropy_bwd").flops, 3 * 32768.0);
  }
}

// Megatron's fused vocab-parallel cross-entropy (megatron/core/fusions/fused_cross_entropy.py,
// core_v0.12.0: four @jit_fuser graphs, bf16 only) on the same 32,768 logits, one pass over the
// logits per graph: calculate_logits_max reads the bf16 logits (2) and writes the fp32 copy it
// returns (4): 6 bytes each, 196,608. calculate_predicted_logits subtracts, exponentiates and sums
// in one pass (read 4, write 4) and calculate_cross_entropy_loss divides in place (4 + 4): 16,
// 524,288. calculate_gradients reads the saved softmax (4), writes the bf16 gradient (2) and
// writes back its in-place update of the softmax (4): 10, 327,680. 32 bytes per logit against the
// unfused 52.
TEST(KernelBytes, FusedCrossEntropyReadsTheLogitsOncePerGraph) {
  Scenario sc = small_gpt(Precision::kBf16);
  sc.training.cross_entropy_loss_fusion = true;
  const Program p = build_program(sc, {0});
  EXPECT_DOUBLE_EQ(kernel_named(p, "cross_entropy_max").bytes, 196608);
  EXPECT_DOUBLE_EQ(kernel_named(p, "cross_entropy_fwd").bytes, 524288);
  EXPECT_DOUBLE_EQ(kernel_named(p, "cross_entropy_bwd").bytes, 327680);
  EXPECT_DOUBLE_EQ(kernel_named(p, "cross_entropy_fwd").flops, 3 * 32768.0);
}

// Megatron without gradient accumulation fusion (before commit 83b1e42f30; the param hook of
// megatron/model/distributed.py at 50a4b5fa02: param.main_grad.add_(param.grad.data)) over the
// one layer's parameters: GPT with biases and LayerNorm, h 64, ffn 4h: 12 h^2 + 13 h = 49,152 +
// 832 = 49,984. Per parameter, fp16 (main_grad fp16, no fp32 accumulation): read param.grad 2,
// read main_grad 2, write it 2: 6 bytes, 299,904. bf16 (main_grad fp32): 2 + 4 + 4 = 10,
// 499,840. fp32: 4 + 4 + 4 = 12, 599,808. One add per parameter. With the fusion on (the
// default) the Program has no such kernel.
TEST(KernelBytes, UnfusedGradientAccumulationReadsGradAndMainGradWritesMainGrad) {
  struct Row {
    Precision precision;
    double bytes;
  };
  for (const Row& r : {Row{Precision::kFp16, 299904}, Row{Precision::kBf16, 499840},
                       Row{Precision::kFp32, 599808}}) {
    Scenario sc = small_gpt(r.precision);
    EXPECT_THROW(kernel_named(build_program(sc, {0}), "grad_accumulate"), std::runtime_error);
    sc.training.gradient_accumulation_fusion = false;
    const Program p = build_program(sc, {0});
    const Kernel& k = kernel_named(p, "grad_accumulate");
    EXPECT_EQ(k.key.shape, (std::vector<int64_t>{49984})) << to_string(r.precision);
    EXPECT_DOUBLE_EQ(k.bytes, r.bytes) << to_string(r.precision);
    EXPECT_DOUBLE_EQ(k.flops, 49984.0);
  }
}

}  // namespace
}  // namespace traintwin
