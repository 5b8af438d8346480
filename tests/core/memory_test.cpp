// Memory model: Korthikanti et al. 2022 activation formulas (sec. 4, Table 2), Megatron's
// distributed-optimizer bytes per parameter, and per-stage memory from the actual schedules.
#include "core/memory.hpp"
#include "core/memory_reserve.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "models.hpp"

#include <string>

#include "core/error.hpp"
#include "core/moe_tokens.hpp"
#include "core/params.hpp"

namespace traintwin {
namespace {

using ::testing::HasSubstr;
using R = RecomputeGranularity;

template <typename F>
void ExpectInvalidArgument(F f, const std::string& needle) {
  try {
    f();
    FAIL() << "expected InvalidArgument mentioning " << needle;
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr(needle));
  }
}

// h = 64, a = 4, s = 32, ffn = 4h; with micro-batch b = 2: s b h = 4096 and 5 a s / h = 10,
// so that every Table 2 row is an exact number of bytes.
ModelSpec Small() {
  ModelSpec m;
  m.num_layers = 8;
  m.hidden_size = 64;
  m.num_attention_heads = 4;
  m.ffn_hidden_size = 256;
  m.seq_length = 32;
  m.vocab_size = 1024;
  return m;
}

ModelSpec Gpt3_175B() { return testing::gpt3_175b(); }

// GPT-3 175B on 1024 GPUs: TP 8, PP 16, DP 8, SP, micro-batch 1, global batch 1536
// (m = 1536 / (1 * 8) = 192 micro-batches), bf16, distributed optimizer, selective recompute.
Scenario Gpt3_175BOn1024() {
  Scenario s;
  s.name = "gpt3-175b-1024";
  s.model = Gpt3_175B();
  s.parallel.tensor_model_parallel_size = 8;
  s.parallel.pipeline_model_parallel_size = 16;
  s.parallel.data_parallel_size = 8;
  s.parallel.sequence_parallel = true;
  s.parallel.pipeline_schedule = PipelineScheduleKind::k1F1B;
  s.training.micro_batch_size = 1;
  s.training.global_batch_size = 1536;
  s.training.precision = Precision::kBf16;
  s.training.recompute_granularity = R::kSelective;
  s.training.use_distributed_optimizer = true;
  s.cluster.num_gpus = 1024;
  return s;
}

// --- Korthikanti et al. 2022, Table 2, with s b h = 4096, 5as/h = 10, t = 4 ----------------

TEST(MemoryTest, Table2NoParallelism) {
  // s b h (34 + 5 a s / h) = 4096 * (34 + 10) = 180224 bytes.
  EXPECT_EQ(layer_activation_bytes(Small(), 2, 1, 1, false, R::kNone, Precision::kBf16), 180224.0);
  EXPECT_EQ(layer_activation_bytes(Small(), 2, 1, 1, false, R::kNone, Precision::kFp16), 180224.0);
}

TEST(MemoryTest, Table2TensorParallel) {
  // s b h (10 + 24/t + 5 a s/(h t)) = 4096 * (10 + 6 + 2.5) = 75776.
  EXPECT_EQ(layer_activation_bytes(Small(), 2, 4, 1, false, R::kNone, Precision::kBf16), 75776.0);
}

TEST(MemoryTest, Table2TensorPlusSequenceParallel) {
  // s b h / t (34 + 5 a s / h) = 1024 * 44 = 45056.
  EXPECT_EQ(layer_activation_bytes(Small(), 2, 4, 1, true, R::kNone, Precision::kBf16), 45056.0);
}

TEST(MemoryTest, Table2TensorParallelSelectiveRecompute) {
  // s b h (10 + 24/t) = 4096 * 16 = 65536.
  EXPECT_EQ(layer_activation_bytes(Small(), 2, 4, 1, false, R::kSelective, Precision::kBf16),
            65536.0);
}

TEST(MemoryTest, Table2TensorSequenceParallelSelectiveRecompute) {
  // 34 s b h / t = 34 * 1024 = 34816.
  EXPECT_EQ(layer_activation_bytes(Small(), 2, 4, 1, true, R::kSelective, Precision::kBf16),
            34816.0);
  // Without TP, selective alone: 34 s b h = 139264.
  EXPECT_EQ(layer_activation_bytes(Small(), 2, 1, 1, false, R::kSelective, Precision::kBf16),
            139264.0);
}

// Flash attention stores no s x s tensor: the selective-recompute terms plus the fp32 row
// log-sum-exp 4 a s b / t (a s b = 4 * 32 * 2 = 256), whatever the recompute granularity.
TEST(MemoryTest, FlashAttentionStoresNoScores) {
  const auto flash = AttentionBackend::kFlash;
  EXPECT_EQ(layer_activation_bytes(Small(), 2, 1, 1, false, R::kNone, Precision::kBf16, flash),
            139264.0 + 1024.0);
  EXPECT_EQ(layer_activation_bytes(Small(), 2, 4, 1, true, R::kNone, Precision::kBf16, flash),
            34816.0 + 256.0);
  EXPECT_EQ(layer_activation_bytes(Small(), 2, 4, 1, true, R::kSelective, Precision::kBf16, flash),
            34816.0 + 256.0);
  // Full recomputation keeps only the layer input either way.
  EXPECT_EQ(layer_activation_bytes(Small(), 2, 4, 1, true, R::kFull, Precision::kBf16, flash), 2048.0);
}

TEST(MemoryTest, Table2FullRecompute) {
  // 2 s b h = 8192 whatever TP; with SP the stored input is sharded: 2 s b h / t = 2048.
  EXPECT_EQ(layer_activation_bytes(Small(), 2, 1, 1, false, R::kFull, Precision::kBf16), 8192.0);
  EXPECT_EQ(layer_activation_bytes(Small(), 2, 4, 1, false, R::kFull, Precision::kBf16), 8192.0);
  EXPECT_EQ(layer_activation_bytes(Small(), 2, 4, 1, true, R::kFull, Precision::kBf16), 2048.0);
}

TEST(MemoryTest, Table2FormulasHoldOverAGrid) {
  // The closed forms of Table 2 against the term-by-term sum, over b, t, SP and recompute.
  const ModelSpec m = Small();
  const double h = 64, a = 4, s = 32;
  for (int64_t b : {1, 2, 4}) {
    for (int64_t tp : {1, 2, 4}) {
      const double t = static_cast<double>(tp);
      const double sbh = s * static_cast<double>(b) * h;
      const double score = 5 * a * s / h;
      EXPECT_EQ(layer_activation_bytes(m, b, tp, 1, false, R::kNone, Precision::kBf16),
                sbh * (10 + 24 / t + score / t));
      EXPECT_EQ(layer_activation_bytes(m, b, tp, 1, true, R::kNone, Precision::kBf16),
                sbh / t * (34 + score));
      EXPECT_EQ(layer_activation_bytes(m, b, tp, 1, false, R::kSelective, Precision::kBf16),
                sbh * (10 + 24 / t));
      EXPECT_EQ(layer_activation_bytes(m, b, tp, 1, true, R::kSelective, Precision::kBf16),
                34 * sbh / t);
      EXPECT_EQ(layer_activation_bytes(m, b, tp, 1, true, R::kFull, Precision::kBf16), 2 * sbh / t);
    }
  }
}

TEST(MemoryTest, Fp32DoublesTwoByteTermsButNotMasks) {
  // Of 34 s b h, 2 s b h are 1-byte dropout masks: 32 * 2 + 2 = 66 s b h. Of 5 a s^2 b, a s^2 b
  // is a mask: 4 * 2 + 1 = 9 a s^2 b -> 9 a s / h = 18. 4096 * (66 + 18) = 344064.
  EXPECT_EQ(layer_activation_bytes(Small(), 2, 1, 1, false, R::kNone, Precision::kFp32), 344064.0);
  // Full recompute: 4 s b h = 16384.
  EXPECT_EQ(layer_activation_bytes(Small(), 2, 1, 1, false, R::kFull, Precision::kFp32), 16384.0);
}

// Dropout at probability 0 keeps no mask (PyTorch's dropout returns its input): s 32, b 2, h 64
// (s b h = 4096), a 4, bf16, no TP, unfused attention. hidden_dropout 0 drops the 2 sbh masks
// after attention and MLP: 4096 x (34 - 2 + 10) = 172032 of 4096 x (34 + 10) = 180224 (5 a s / h
// = 10). attention_dropout 0 drops the score mask a s^2 b and the dropout output 2 a s^2 b, 3 of
// the 5 a s^2 b: 4096 x (34 + 4) = 155648; both: 4096 x (32 + 4) = 147456.
TEST(MemoryTest, DropoutAtZeroKeepsNoMasks) {
  const auto bytes = [](double hidden, double attention) {
    return layer_activation_bytes(Small(), 2, 1, 1, false, R::kNone, Precision::kBf16,
                                  AttentionBackend::kUnfused, false, hidden, attention);
  };
  EXPECT_EQ(bytes(0.1, 0.1), 180224.0);
  EXPECT_EQ(bytes(0.0, 0.1), 172032.0);
  EXPECT_EQ(bytes(0.1, 0.0), 155648.0);
  EXPECT_EQ(bytes(0.0, 0.0), 147456.0);
  // A whole stage: the embedding's dropout mask goes too (GPT-3 175B on 1,024 GPUs, first stage).
  Scenario sc = Gpt3_175BOn1024();
  const StageMemory with = stage_memory(sc, 0);
  sc.training.hidden_dropout = 0;
  const StageMemory without = stage_memory(sc, 0);
  EXPECT_LT(without.embedding_and_logits_bytes, with.embedding_and_logits_bytes);
  EXPECT_LT(without.activations_bytes, with.activations_bytes);
}

TEST(MemoryTest, ContextParallelUsesTheLocalSequence) {
  // CP 2: s = 16, s b h = 2048, 5 a s / h = 5; 2048 * (34 + 5) = 79872.
  EXPECT_EQ(layer_activation_bytes(Small(), 2, 1, 2, false, R::kNone, Precision::kBf16), 79872.0);
}

TEST(MemoryTest, GenericFfnScalesTheMlpTerms) {
  // ffn = 2h: the GeLU input and output are 2 s b ffn each = 8 s b h instead of 16 s b h:
  // 4096 * (34 - 8 + 10) = 147456.
  ModelSpec m = Small();
  m.ffn_hidden_size = 128;
  EXPECT_EQ(layer_activation_bytes(m, 2, 1, 1, false, R::kNone, Precision::kBf16), 147456.0);
}

// Korthikanti's term-by-term method on a Llama-style layer: h 64, a 4, g 2 query groups, ffn 256,
// s 32, b 2 (s b h = 4096), bf16, no TP. Outside the TP region 10 sbh = 40960 as GPT's (RMSNorm
// keeps its input as LayerNorm does). Inside: Q, K, V 2 sbh (1 + 2g/a) = 16384, projection input
// 2 sbh = 8192, SwiGLU input 2 x 2 s b ffn = 65536 and output 2 s b ffn = 32768 (RoPE: nothing
// extra) -> 122880. Unfused scores 5 a s^2 b = 40960: 204800 in all; flash keeps the fp32 LSE
// 4 a s b = 1024 instead: 164864. FP8: the 4 GEMM inputs 1 byte: QKV and FC1 inputs 4096 each,
// projection 4096, FC2 16384 -> 32768 + 102400 + 1024 = 136192.
TEST(MemoryTest, LlamaLayerByKorthikantisMethod) {
  const ModelSpec m = testing::llama(8, 64, 256, 4, 2, 32, 1024);
  EXPECT_EQ(layer_activation_bytes(m, 2, 1, 1, false, R::kNone, Precision::kBf16), 204800.0);
  EXPECT_EQ(layer_activation_bytes(m, 2, 1, 1, false, R::kNone, Precision::kBf16,
                                   AttentionBackend::kFlash),
            164864.0);
  EXPECT_EQ(layer_activation_bytes(m, 2, 1, 1, false, R::kNone, Precision::kBf16,
                                   AttentionBackend::kFlash, true),
            136192.0);
  // TP 2 + SP divides every term by 2; CP 2 halves s (the scores by 4).
  EXPECT_EQ(layer_activation_bytes(m, 2, 2, 1, true, R::kNone, Precision::kBf16,
                                   AttentionBackend::kFlash),
            164864.0 / 2);
  EXPECT_EQ(layer_activation_bytes(m, 2, 1, 2, false, R::kNone, Precision::kBf16,
                                   AttentionBackend::kFlash),
            164864.0 / 2);
}

// torchtitan's op-level selective activation checkpointing (selective_ac_option op), worked by
// hand from its policy (torchtitan/parallelisms/parallelize_llama.py @9dec370): per token the
// layer keeps its input h, wq's output a d, wv's output g d, the SDPA output a d and its fp32
// log-sum-exp (4 a bytes), w1's output ffn and w2's output h, in bf16 (2 bytes).
// Llama 3.1 8B (h 4096, a 32, g 8, d 128, ffn 14336): 2 (4096 + 4096 + 1024 + 4096 + 14336 +
// 4096) + 4 x 32 = 2 x 31,744 + 128 = 63,616 bytes per token; s b = 8192 x 2 = 16,384 tokens:
// 1,042,284,544 bytes a layer. Megatron's selective (the attention core recomputed) keeps, by
// Korthikanti's method with flash and no dropout: norm inputs 4h + QKV and FC1 inputs 2h + 2h +
// Q, K, V 2 (h + 2 g d) + projection input 2h + SwiGLU input 4 ffn + FC2 input 2 ffn + LSE 4a =
// 16384 + 16384 + 12288 + 8192 + 57344 + 28672 + 128 = 139,392 bytes per token.
TEST(MemoryTest, TorchtitanOpLevelSelectiveCheckpointingByHand) {
  const ModelSpec m = testing::llama31_8b();
  const auto flash = AttentionBackend::kFlash;
  const double op = layer_activation_bytes(m, 2, 1, 1, false, R::kSelective, Precision::kBf16,
                                           flash, false, 0.0, 0.0, SelectiveAcOption::kOp);
  EXPECT_EQ(op, 63616.0 * 16384);
  const double core_attn = layer_activation_bytes(m, 2, 1, 1, false, R::kSelective,
                                                  Precision::kBf16, flash, false, 0.0, 0.0);
  EXPECT_EQ(core_attn, 139392.0 * 16384);
  // Dropout masks are not on the save list: recomputed, never kept.
  EXPECT_EQ(layer_activation_bytes(m, 2, 1, 1, false, R::kSelective, Precision::kBf16, flash,
                                   false, 0.1, 0.1, SelectiveAcOption::kOp),
            op);
  // fp32 doubles the 16-bit terms: 4 x 31,744 + 128 = 127,104 bytes per token.
  EXPECT_EQ(layer_activation_bytes(m, 2, 1, 1, false, R::kSelective, Precision::kFp32, flash,
                                   false, 0.0, 0.0, SelectiveAcOption::kOp),
            127104.0 * 16384);
  // The option says what selective recomputes: none and full ignore it.
  EXPECT_EQ(layer_activation_bytes(m, 2, 1, 1, false, R::kFull, Precision::kBf16, flash, false,
                                   0.0, 0.0, SelectiveAcOption::kOp),
            2.0 * 4096 * 16384);
  // Outside what it is modelled for: refused by name.
  ExpectInvalidArgument([&] {
    layer_activation_bytes(m, 2, 2, 1, true, R::kSelective, Precision::kBf16, flash, false, 0.0,
                           0.0, SelectiveAcOption::kOp);
  }, "selective_ac_option op");
  ExpectInvalidArgument([&] {
    layer_activation_bytes(m, 2, 1, 1, false, R::kSelective, Precision::kBf16,
                           AttentionBackend::kUnfused, false, 0.0, 0.0, SelectiveAcOption::kOp);
  }, "selective_ac_option op");
}

// The loss's fp32 logits, NoPipelineHasBothEnds's scenario (s b = 64 tokens, V = 1024, one
// micro-batch in flight): vocab_parallel keeps 4 bytes a logit (262,144); torch
// (F.cross_entropy on the logits cast to fp32) keeps log_softmax's fp32 output, 4 bytes, plus 8
// for the micro-batch in its loss backward (nll_loss's dense fp32 gradient and log_softmax's
// fp32 input gradient): 12 x 64 x 1024 = 786,432, so 524,288 more.
TEST(MemoryTest, TorchCrossEntropyHoldsTwoMoreFp32LogitTensors) {
  Scenario s;
  s.model = Small();
  s.training.micro_batch_size = 2;
  s.training.global_batch_size = 8;
  s.training.precision = Precision::kBf16;
  s.cluster.num_gpus = 1;
  const double vocab_parallel = stage_memory(s, 0).embedding_and_logits_bytes;
  EXPECT_EQ(vocab_parallel, 282624.0);
  s.training.cross_entropy_loss = CrossEntropyLoss::kTorch;
  EXPECT_EQ(stage_memory(s, 0).embedding_and_logits_bytes, 282624.0 + 524288.0);
  // Under GPipe with PP 2 the last stage holds m = 4 micro-batches' log-softmax outputs but
  // only one loss backward at a time: 4 x (16384 + 262144) + 524288 (no embedding on it).
  s.model.num_layers = 8;
  s.parallel.pipeline_model_parallel_size = 2;
  s.parallel.pipeline_schedule = PipelineScheduleKind::kGPipe;
  s.cluster.num_gpus = 2;
  EXPECT_EQ(stage_memory(s, 1).embedding_and_logits_bytes, 4.0 * (16384 + 262144) + 524288.0);
}

// FP8 keeps an FP8 copy and transpose of every layer GEMM weight (2 bytes each); the untied LM
// head sits on the last stage with its own weights, gradients and optimizer state.
TEST(MemoryTest, Fp8WeightCopiesAndUntiedHead) {
  Scenario s;
  s.name = "llama";
  s.model = testing::llama(4, 64, 256, 4, 2, 32, 1024);
  s.training.micro_batch_size = 1;
  s.training.global_batch_size = 1;
  s.training.attention_backend = AttentionBackend::kFlash;
  s.cluster.num_gpus = 1;
  const StageMemory plain = stage_memory(s, 0);
  EXPECT_EQ(plain.fp8_weight_copies_bytes, 0.0);
  s.training.fp8_format = Fp8Format::kHybrid;
  const StageMemory fp8 = stage_memory(s, 0);
  EXPECT_EQ(fp8.fp8_weight_copies_bytes, 2.0 * 4 * layer_gemm_weights_on_rank(s.model, 1));
  EXPECT_LT(fp8.activations_bytes, plain.activations_bytes);
  EXPECT_EQ(fp8.total_bytes() - fp8.activations_bytes,
            plain.total_bytes() - plain.activations_bytes + fp8.fp8_weight_copies_bytes);
  // Untied: parameters include the LM head's 1024 x 64.
  EXPECT_EQ(plain.parameters, parameter_count(s.model));
  // FP8 parameters: the FP8 copies are the GEMM weights; their 2-byte bf16 copies are gone.
  s.training.fp8_param_gather = true;
  const StageMemory params8 = stage_memory(s, 0);
  EXPECT_EQ(params8.fp8_weight_copies_bytes, fp8.fp8_weight_copies_bytes);
  EXPECT_EQ(params8.weights_bytes,
            plain.weights_bytes - 2.0 * 4 * layer_gemm_weights_on_rank(s.model, 1));
}

// --- bytes per parameter (Megatron distributed-optimizer docs) -------------------------------

TEST(MemoryTest, BytesPerParameterTable) {
  auto sum = [](const BytesPerParameter& b) { return b.weights + b.gradients + b.optimizer; };
  EXPECT_EQ(sum(bytes_per_parameter(Precision::kFp16, false, 8)), 20.0);
  EXPECT_EQ(sum(bytes_per_parameter(Precision::kBf16, false, 8)), 18.0);
  EXPECT_EQ(sum(bytes_per_parameter(Precision::kFp32, false, 8)), 16.0);
  // Distributed over d = 8: 4 + 16/8 = 6; 6 + 12/8 = 7.5; 8 + 8/8 = 9.
  EXPECT_EQ(sum(bytes_per_parameter(Precision::kFp16, true, 8)), 6.0);
  EXPECT_EQ(sum(bytes_per_parameter(Precision::kBf16, true, 8)), 7.5);
  EXPECT_EQ(sum(bytes_per_parameter(Precision::kFp32, true, 8)), 9.0);
  // d = 1: same as not distributed.
  EXPECT_EQ(sum(bytes_per_parameter(Precision::kBf16, true, 1)), 18.0);
  const BytesPerParameter bf16 = bytes_per_parameter(Precision::kBf16, true, 4);
  EXPECT_EQ(bf16.weights, 2.0);
  EXPECT_EQ(bf16.gradients, 4.0);
  EXPECT_EQ(bf16.optimizer, 3.0);
}

TEST(MemoryTest, DistributedOptimizerDividesOptimizerBytesByDp) {
  Scenario dp8 = Gpt3_175BOn1024();
  Scenario dp1 = dp8;
  dp1.parallel.data_parallel_size = 1;
  dp1.training.global_batch_size = 192;  // same m = 192
  dp1.cluster.num_gpus = 128;
  const StageMemory a = stage_memory(dp1, 0);
  const StageMemory b = stage_memory(dp8, 0);
  EXPECT_EQ(a.parameters, b.parameters);
  EXPECT_EQ(a.weights_bytes, b.weights_bytes);
  EXPECT_EQ(a.gradients_bytes, b.gradients_bytes);
  EXPECT_EQ(a.activations_bytes, b.activations_bytes);
  EXPECT_EQ(a.optimizer_bytes, 8 * b.optimizer_bytes);
  EXPECT_EQ(a.optimizer_bytes, 12.0 * 1463270400);
  // Without the distributed optimizer DP does not matter.
  dp8.training.use_distributed_optimizer = false;
  EXPECT_EQ(stage_memory(dp8, 0).optimizer_bytes, a.optimizer_bytes);
}

// ZeRO (Rajbhandari et al., SC 2020), Figure 1: Psi = 7.5B parameters, N_d = 64, K = 12 (mixed
// precision Adam) -> 120 GB baseline, 31.4 GB P_os, 16.6 GB P_os+g, 1.9 GB P_os+g+p per device.
TEST(MemoryTest, ZeroStagesReproduceTheZeroPapersFigure1) {
  const BytesPerParameter full{2, 2, 12};
  const double psi = 7.5e9;
  auto gb = [&](int stage) {
    const BytesPerParameter b = shard_bytes_per_parameter(full, stage, 64);
    return psi * (b.weights + b.gradients + b.optimizer) / 1e9;
  };
  EXPECT_DOUBLE_EQ(gb(0), 120.0);                  // (2 + 2 + K) Psi
  EXPECT_NEAR(gb(1), 31.4, 0.05);                  // 2 Psi + 2 Psi + K Psi / N_d = 31.406
  EXPECT_NEAR(gb(2), 16.6, 0.05);                  // 2 Psi + (2 + K) Psi / N_d = 16.64
  EXPECT_NEAR(gb(3), 1.9, 0.05);                   // (2 + 2 + K) Psi / N_d = 1.875
  EXPECT_THROW(shard_bytes_per_parameter(full, 4, 64), InvalidArgument);
  EXPECT_THROW(shard_bytes_per_parameter(full, 1, 0), InvalidArgument);
}

// Megatron-FSDP on GPT-3 175B / 1024 (DP 8, stage 0: 1,463,270,400 parameters, bf16: weights 2,
// gradients 4, optimizer 12 bytes each): ZeRO-2 divides the gradients by 8 and holds one layer's
// full gradients (the FSDP unit before its reduce-scatter); ZeRO-3 divides the layers' weights
// too and holds two layers' full weights (the running unit and the prefetched next), the
// embeddings whole (gathered once per iteration, as the Program does). One layer on a TP-8
// rank: QKV 3h^2/8 + 3h/8, projection h^2/8 + h, FC1 4h^2/8 + 4h/8, FC2 4h^2/8 + h, two
// LayerNorms 4h, with h = 12288.
TEST(MemoryTest, MegatronFsdpShardsGradientsAndWeights) {
  Scenario s = Gpt3_175BOn1024();
  const double params = 1463270400;
  const double h = 12288;
  const double layer = 12 * h * h / 8 + 3 * h / 8 + h + 4 * h / 8 + h + 4 * h;
  ASSERT_EQ(layer, 226576896.0);
  const StageMemory zero1 = stage_memory(s, 0);
  EXPECT_EQ(s.training.zero_stage(), 1);
  EXPECT_EQ(zero1.gradients_bytes, 4 * params);
  s.training.use_megatron_fsdp = true;
  s.training.data_parallel_sharding_strategy = DataParallelShardingStrategy::kOptim;
  EXPECT_EQ(s.training.zero_stage(), 1);
  EXPECT_EQ(stage_memory(s, 0).total_bytes(), zero1.total_bytes());
  s.training.data_parallel_sharding_strategy = DataParallelShardingStrategy::kOptimGrads;
  EXPECT_EQ(s.training.zero_stage(), 2);
  const StageMemory zero2 = stage_memory(s, 0);
  EXPECT_EQ(zero2.weights_bytes, 2 * params);
  EXPECT_EQ(zero2.gradients_bytes, 4 * params / 8 + 4 * layer);
  EXPECT_EQ(zero2.optimizer_bytes, 12 * params / 8);
  EXPECT_EQ(zero2.activations_bytes, zero1.activations_bytes);
  s.training.data_parallel_sharding_strategy = DataParallelShardingStrategy::kOptimGradsParams;
  EXPECT_EQ(s.training.zero_stage(), 3);
  const StageMemory zero3 = stage_memory(s, 0);
  // The stage's 6 layers sharded, its embeddings (6400 x h vocabulary rows + 2048 x h
  // positions = params - 6 layers) whole, two layers gathered.
  const double embeddings = params - 6 * layer;
  ASSERT_EQ(embeddings, 6400 * h + 2048 * h);
  EXPECT_DOUBLE_EQ(zero3.weights_bytes, 2 * 6 * layer / 8 + 2 * embeddings + 2 * 2 * layer);
  EXPECT_EQ(zero3.gradients_bytes, zero2.gradients_bytes);
  EXPECT_EQ(zero3.optimizer_bytes, zero2.optimizer_bytes);
}

// ZeRO-3's gathered units on GPT-3 175B / 1024 stage 0 (6 layers of `layer` = 226,576,896
// parameters on a TP-8 rank, DP 8, bf16: 2 bytes a weight), worked by hand: the layers' shard
// 2 x 6 layer / 8 and the embeddings whole are held whatever the schedule; on top, the gathered
// units' full weights, 2 x layer each: 2 units by default (the running one and one prefetched),
// N + 1 with fsdp_prefetch_depth N (1 with no prefetch, 4 with 3), at most the chunk's 6 layers
// (depth 9: 6), and all 6 without reshard_after_forward (kept from forward to backward).
// Gradients and optimizer state do not change with the depth: fp32 gradients, the shard
// 4 params / 8 and one layer's full 4 layer. Without reshard_after_forward under PP (16 here) the
// gradients are reduce-scattered once per step (core/fsdp_gather_once.hpp): the shard plus the
// stage's full gradients, 4.5 x 1,463,270,400 = 6,584,716,800 bytes.
TEST(MemoryTest, Zero3GatheredUnitsFollowPrefetchDepthAndResharding) {
  Scenario s = Gpt3_175BOn1024();
  s.training.use_megatron_fsdp = true;
  s.training.data_parallel_sharding_strategy = DataParallelShardingStrategy::kOptimGradsParams;
  const double params = 1463270400;
  const double layer = 226576896;
  const double embeddings = params - 6 * layer;
  const double held = 2 * 6 * layer / 8 + 2 * embeddings;
  const StageMemory base = stage_memory(s, 0);
  EXPECT_EQ(base.fsdp_gathered_units, 2);
  EXPECT_DOUBLE_EQ(base.weights_bytes, held + 2 * 2 * layer);
  for (auto [depth, units] : {std::pair{0, 1}, {1, 2}, {3, 4}, {5, 6}, {9, 6}}) {
    s.training.fsdp_prefetch_depth = depth;
    const StageMemory m = stage_memory(s, 0);
    EXPECT_EQ(m.fsdp_gathered_units, units) << "depth " << depth;
    EXPECT_DOUBLE_EQ(m.weights_bytes, held + units * 2 * layer) << "depth " << depth;
    EXPECT_EQ(m.gradients_bytes, base.gradients_bytes);
    EXPECT_EQ(m.optimizer_bytes, base.optimizer_bytes);
  }
  s.training.fsdp_prefetch_depth = 1;
  s.training.reshard_after_forward = false;
  const StageMemory kept = stage_memory(s, 0);
  EXPECT_EQ(kept.fsdp_gathered_units, 6);
  // 339,865,344 (shard) + 207,618,048 (embeddings) + 2,718,922,752 (6 units) bytes
  EXPECT_DOUBLE_EQ(kept.weights_bytes, 3266406144.0);
  EXPECT_DOUBLE_EQ(kept.weights_bytes, held + 6 * 2 * layer);
  EXPECT_DOUBLE_EQ(base.gradients_bytes, 4 * params / 8 + 4 * layer);
  EXPECT_DOUBLE_EQ(kept.gradients_bytes, 6584716800.0);
  EXPECT_DOUBLE_EQ(kept.gradients_bytes, 4 * params / 8 + 4 * params);
  // Below ZeRO-3 nothing is gathered per unit.
  s.training.reshard_after_forward = true;
  s.training.data_parallel_sharding_strategy = DataParallelShardingStrategy::kOptimGrads;
  EXPECT_EQ(stage_memory(s, 0).fsdp_gathered_units, 0);
}

// HSDP: sharding divides by the sharding group N_d = DP x CP / instances, not by DP. GPT-3 175B
// / 1024 (DP 8, stage 0 as above) in 2 instances: N_d = 4. ZeRO-1: optimizer 12 x params / 4;
// ZeRO-3: also gradients 4 x params / 4 (+ one layer's full gradients) and the layers' weights
// 2 x 6 layers / 4 (+ two gathered layers, the embeddings whole). The ZeRO paper's formulas at
// N_d = 64 (Figure 1) come out of DP 128 in 2 instances.
TEST(MemoryTest, HsdpShardsOverTheShardingGroup) {
  Scenario s = Gpt3_175BOn1024();
  const double params = 1463270400;
  const double h = 12288;
  const double layer = 12 * h * h / 8 + 3 * h / 8 + h + 4 * h / 8 + h + 4 * h;
  const double embeddings = params - 6 * layer;
  s.training.num_distributed_optimizer_instances = 2;
  ASSERT_EQ(s.data_parallel_shard_size(), 4);
  const StageMemory zero1 = stage_memory(s, 0);
  EXPECT_EQ(zero1.weights_bytes, 2 * params);
  EXPECT_EQ(zero1.gradients_bytes, 4 * params);
  EXPECT_EQ(zero1.optimizer_bytes, 12 * params / 4);
  s.training.use_megatron_fsdp = true;
  s.training.data_parallel_sharding_strategy = DataParallelShardingStrategy::kOptimGradsParams;
  const StageMemory zero3 = stage_memory(s, 0);
  EXPECT_EQ(zero3.optimizer_bytes, 12 * params / 4);
  EXPECT_EQ(zero3.gradients_bytes, 4 * params / 4 + 4 * layer);
  EXPECT_DOUBLE_EQ(zero3.weights_bytes, 2 * 6 * layer / 4 + 2 * embeddings + 2 * 2 * layer);
  // The same state as plain ZeRO-3 over DP 4 (one instance of 4 ranks).
  Scenario dp4 = s;
  dp4.training.num_distributed_optimizer_instances = 1;
  dp4.parallel.data_parallel_size = 4;
  dp4.cluster.num_gpus = 512;
  const StageMemory plain = stage_memory(dp4, 0);
  EXPECT_EQ(plain.weights_bytes, zero3.weights_bytes);
  EXPECT_EQ(plain.gradients_bytes, zero3.gradients_bytes);
  EXPECT_EQ(plain.optimizer_bytes, zero3.optimizer_bytes);

  Scenario paper = Gpt3_175BOn1024();
  paper.parallel.data_parallel_size = 128;
  paper.training.num_distributed_optimizer_instances = 2;
  ASSERT_EQ(paper.data_parallel_shard_size(), 64);
  const double psi = 7.5e9;
  auto gb = [&](int stage) {
    const BytesPerParameter b =
        shard_bytes_per_parameter({2, 2, 12}, stage, paper.data_parallel_shard_size());
    return psi * (b.weights + b.gradients + b.optimizer) / 1e9;
  };
  EXPECT_NEAR(gb(1), 31.4, 0.05);  // 2 Psi + 2 Psi + K Psi / N_d
  EXPECT_NEAR(gb(2), 16.6, 0.05);  // 2 Psi + (2 + K) Psi / N_d
  EXPECT_NEAR(gb(3), 1.9, 0.05);   // (2 + 2 + K) Psi / N_d
}

TEST(MemoryTest, DistributedOptimizerShardsOverDpTimesCp) {
  Scenario s;
  s.model = Small();
  s.parallel.context_parallel_size = 2;
  s.parallel.data_parallel_size = 2;
  s.training.micro_batch_size = 1;
  s.training.global_batch_size = 2;
  s.training.precision = Precision::kBf16;
  s.training.use_distributed_optimizer = true;
  s.cluster.num_gpus = 4;
  const StageMemory mem = stage_memory(s, 0);
  EXPECT_EQ(mem.optimizer_bytes, 12.0 / 4 * static_cast<double>(mem.parameters));
}

// --- per-stage memory ------------------------------------------------------------------------

TEST(MemoryTest, Gpt3_175BOn1024GpusStage0) {
  const Scenario s = Gpt3_175BOn1024();
  const StageMemory m0 = stage_memory(s, 0);
  EXPECT_EQ(m0.pp_rank, 0);
  EXPECT_EQ(m0.layers, 6);  // 96 / 16
  // 1F1B: stage 0 holds p = 16 micro-batches at its peak (Korthikanti sec. 4.2.3).
  EXPECT_EQ(m0.in_flight, 16);
  // Parameters (see params_test): 1463270400; bf16 + dist opt over DP 8: 2 + 4 + 12/8 bytes.
  EXPECT_EQ(m0.parameters, 1463270400);
  EXPECT_EQ(m0.weights_bytes, 2.0 * 1463270400);    // 2926540800
  EXPECT_EQ(m0.gradients_bytes, 4.0 * 1463270400);  // 5853081600
  EXPECT_EQ(m0.optimizer_bytes, 1.5 * 1463270400);  // 2194905600
  // Activations: SP + selective = 34 s b h / t = 34 * 2048 * 12288 / 8 = 106954752 per layer;
  // 16 in flight x 6 layers = 96 layer-activations: 10267656192 (10.27 GB).
  EXPECT_EQ(m0.activations_bytes, 96.0 * 106954752);
  // Embedding dropout mask s b h / t = 3145728, 16 in flight: 50331648.
  EXPECT_EQ(m0.embedding_and_logits_bytes, 16.0 * 3145728);
  // Total 10974528000 + 10267656192 + 50331648 = 21292515840 (21.3 GB): fits in 80 GB.
  EXPECT_EQ(m0.total_bytes(), 21292515840.0);
}

// Zero-bubble schedules (Qi et al., ICLR 2024, Table 2): an activation set lives from its F to
// its W, so every stage holds p (ZB-H1) or 2p - 1 (ZB-H2) of them, against 1F1B's p - rank.
TEST(MemoryTest, Gpt3_175BOn1024GpusZeroBubbleInFlight) {
  for (auto [kind, held] :
       {std::pair{PipelineScheduleKind::kZbH1, 16}, std::pair{PipelineScheduleKind::kZbH2, 31}}) {
    Scenario s = Gpt3_175BOn1024();
    s.parallel.pipeline_schedule = kind;
    const std::vector<StageMemory> stages = memory_per_stage(s);
    ASSERT_EQ(stages.size(), 16u);
    for (int64_t r = 0; r < 16; ++r) {
      EXPECT_EQ(stages[r].in_flight, held) << to_string(kind) << " stage " << r;
      // 6 layers of 106954752 bytes each (SP + selective, as above) per set.
      EXPECT_EQ(stages[r].activations_bytes, static_cast<double>(held * 6) * 106954752);
    }
    // Stage 0 under ZB-H2: 31 x 6 x 106954752 = 19893583872 bytes of layer activations, and
    // its embedding dropout masks 31 x 3145728 = 97517568.
    if (kind == PipelineScheduleKind::kZbH2) {
      EXPECT_EQ(stages[0].activations_bytes, 19893583872.0);
      EXPECT_EQ(stages[0].embedding_and_logits_bytes, 97517568.0);
    }
  }
}

// DeepSeek-V3 Technical Report Table 2 (and the DualPipe README): per device DualPipe holds 2x
// the parameters of 1F1B (two copies: rank r stage r of the forward direction and stage 15 - r of
// the reverse one, each a whole stage of 6 layers) and PP + 1 micro-batches of a stage's
// activations, against 1F1B's PP on its first stage. GPT-3 175B, TP 8 x PP 16 x DP 8, m = 192
// (even, >= 2 x 16), v = 2 (the two copies).
TEST(MemoryTest, Gpt3_175BOn1024GpusDualPipeAsDeepSeekV3Table2) {
  Scenario s = Gpt3_175BOn1024();
  s.parallel.pipeline_schedule = PipelineScheduleKind::kDualPipe;
  s.parallel.virtual_pipeline_model_parallel_size = 2;
  const std::vector<StageMemory> one_f_one_b = memory_per_stage(Gpt3_175BOn1024());
  const std::vector<StageMemory> stages = memory_per_stage(s);
  ASSERT_EQ(stages.size(), 16u);
  for (int64_t r = 0; r < 16; ++r) {
    const StageMemory& m = stages[static_cast<size_t>(r)];
    EXPECT_EQ(m.layers, 12) << r;     // 2 x 96 / 16
    EXPECT_EQ(m.in_flight, 17) << r;  // PP + 1 chunk sets, each a whole stage
    // 17 x 6 = 102 layer-activations of 106954752 bytes (SP + selective), 1F1B's stage 0 96.
    EXPECT_EQ(m.activations_bytes, 102.0 * 106954752) << r;
    // Weights, gradients and optimizer state follow the parameters (2 + 4 + 12/8 bytes each).
    EXPECT_EQ(m.weights_bytes, 2.0 * static_cast<double>(m.parameters)) << r;
    EXPECT_EQ(m.gradients_bytes, 4.0 * static_cast<double>(m.parameters)) << r;
    EXPECT_EQ(m.optimizer_bytes, 1.5 * static_cast<double>(m.parameters)) << r;
  }
  EXPECT_EQ(one_f_one_b[0].activations_bytes, 96.0 * 106954752);  // 1F1B: PP = 16 sets of 6
  for (int64_t r = 1; r < 15; ++r) {  // the middle ranks: exactly 2x 1F1B's 1359461376
    EXPECT_EQ(stages[static_cast<size_t>(r)].parameters, int64_t{2} * 1359461376) << r;
    EXPECT_EQ(stages[static_cast<size_t>(r)].embedding_and_logits_bytes, 0.0) << r;
  }
  // The end ranks hold 1F1B's first and last stage (1463270400 + 1438129152) less the tied LM
  // head's copy (V/t x h = 6400 x 12288 = 78643200: one word embedding per rank): 2822756352.
  for (int64_t r : {0, 15}) {
    EXPECT_EQ(stages[static_cast<size_t>(r)].parameters,
              int64_t{1463270400} + 1438129152 - 78643200)
        << r;
  }
  // Both end ranks run an embedding and a loss (one direction's each): mirror images.
  EXPECT_GT(stages[0].embedding_and_logits_bytes, 0.0);
  EXPECT_EQ(stages[0].embedding_and_logits_bytes, stages[15].embedding_and_logits_bytes);
}

// ZeRO-2 and ZeRO-3 (Megatron-FSDP optim_grads, optim_grads_params) under DualPipe shard both
// parameter copies over DP like any other parameters of the rank. GPT-3 175B / 1024 (TP 8 x PP 16
// x DP 8) as above, a middle rank: 12 layers of layer = 226,576,896 parameters (two copies of a
// 6-layer stage), params = 2 x 1,359,461,376, no embedding. ZeRO-2: bf16 weights whole (2 params),
// fp32 gradients sharded (4 params / 8) plus one layer's full gradients waiting for its
// reduce-scatter (4 layer), optimizer 12 params / 8. ZeRO-3: the weights sharded too (2 params / 8)
// plus the two layers gathered at once (2 x 2 layer: the running one and one prefetched; the
// Program runs an F&B's forward and backward one after the other, so the two copies' units are
// not gathered together). Without reshard_after_forward every unit of both copies stays gathered
// (12 x 2 layer) and under PP the gradients are reduce-scattered once per step: the rank's full
// gradients (4 params) besides the shard.
TEST(MemoryTest, DualPipeZero2AndZero3ShardBothParameterCopies) {
  Scenario s = Gpt3_175BOn1024();
  s.parallel.pipeline_schedule = PipelineScheduleKind::kDualPipe;
  s.parallel.virtual_pipeline_model_parallel_size = 2;
  s.training.use_megatron_fsdp = true;
  const double layer = 226576896;
  const double params = 2.0 * 1359461376;
  ASSERT_EQ(params, 12 * layer);
  s.training.data_parallel_sharding_strategy = DataParallelShardingStrategy::kOptimGrads;
  ASSERT_EQ(s.training.zero_stage(), 2);
  const std::vector<StageMemory> zero2 = memory_per_stage(s);
  s.training.data_parallel_sharding_strategy = DataParallelShardingStrategy::kOptimGradsParams;
  const std::vector<StageMemory> zero3 = memory_per_stage(s);
  s.training.reshard_after_forward = false;
  const std::vector<StageMemory> kept = memory_per_stage(s);
  for (size_t r = 1; r < 15; ++r) {
    SCOPED_TRACE("pipeline rank " + std::to_string(r));
    EXPECT_EQ(static_cast<double>(zero2[r].parameters), params);
    EXPECT_EQ(zero2[r].weights_bytes, 2 * params);
    EXPECT_EQ(zero2[r].gradients_bytes, 4 * params / 8 + 4 * layer);
    EXPECT_EQ(zero2[r].optimizer_bytes, 12 * params / 8);
    EXPECT_EQ(zero3[r].fsdp_gathered_units, 2);
    EXPECT_DOUBLE_EQ(zero3[r].weights_bytes, 2 * params / 8 + 2 * 2 * layer);
    EXPECT_EQ(zero3[r].gradients_bytes, zero2[r].gradients_bytes);
    EXPECT_EQ(zero3[r].optimizer_bytes, zero2[r].optimizer_bytes);
    EXPECT_EQ(kept[r].fsdp_gathered_units, 12);
    EXPECT_DOUBLE_EQ(kept[r].weights_bytes, 2 * params / 8 + 12 * 2 * layer);
    EXPECT_DOUBLE_EQ(kept[r].gradients_bytes, 4 * params / 8 + 4 * params);
    // The activations are the schedule's, whatever the sharding.
    EXPECT_EQ(zero3[r].activations_bytes, zero2[r].activations_bytes);
  }
}

TEST(MemoryTest, Gpt3_175BOn1024GpusAllStages) {
  const Scenario s = Gpt3_175BOn1024();
  const std::vector<StageMemory> stages = memory_per_stage(s);
  ASSERT_EQ(stages.size(), 16u);
  for (int64_t r = 0; r < 16; ++r) {
    EXPECT_EQ(stages[r].pp_rank, r);
    EXPECT_EQ(stages[r].in_flight, 16 - r);  // 1F1B: p - rank
    EXPECT_EQ(stages[r].activations_bytes, static_cast<double>((16 - r) * 6) * 106954752);
  }
  for (int64_t r = 1; r < 15; ++r) {
    EXPECT_EQ(stages[r].parameters, 1359461376);
    EXPECT_EQ(stages[r].embedding_and_logits_bytes, 0.0);
  }
  // Last stage: 1 micro-batch in flight; final LN and LM-head inputs 2 * 2 s b h / t = 12582912;
  // fp32 logits 4 s b V / t = 4 * 2048 * 6400 = 52428800. Sum 65011712.
  const StageMemory& last = stages[15];
  EXPECT_EQ(last.parameters, 1438129152);
  EXPECT_EQ(last.embedding_and_logits_bytes, 65011712.0);
  // 7.5 * 1438129152 = 10785968640; + 6 * 106954752 = 641728512; + 65011712 = 11492708864.
  EXPECT_EQ(last.total_bytes(), 11492708864.0);
  // Stage 0 is the largest.
  for (const StageMemory& st : stages) EXPECT_LE(st.total_bytes(), stages[0].total_bytes());
}

TEST(MemoryTest, InterleavedFirstStageMatchesKorthikanti423) {
  // Interleaved 1F1B: the first stage holds p (L/p) (1 + (p - 1)/(p v)) layer-activations.
  // v = 2: 96 * (1 + 15/32) = 141 layers = 47 chunks of 3 (in flight p v + p - 1 = 47);
  // v = 3: 96 * (1 + 15/48) = 126 layers = 63 chunks of 2.
  const double per_layer =
      layer_activation_bytes(Gpt3_175B(), 1, 8, 1, true, R::kSelective, Precision::kBf16);
  EXPECT_EQ(per_layer, 106954752.0);
  const double l = 96, p = 16;
  for (int64_t v : {2, 3, 6}) {
    Scenario s = Gpt3_175BOn1024();
    s.parallel.virtual_pipeline_model_parallel_size = v;
    const StageMemory m0 = stage_memory(s, 0);
    EXPECT_EQ(m0.in_flight, 16 * v + 15) << v;
    EXPECT_EQ(m0.layers, 6) << v;
    const double layers_in_flight = p * (l / p) * (1 + (p - 1) / (p * static_cast<double>(v)));
    EXPECT_DOUBLE_EQ(m0.activations_bytes, layers_in_flight * per_layer) << v;
    EXPECT_GT(m0.activations_bytes, stage_memory(Gpt3_175BOn1024(), 0).activations_bytes);
    // Last chunk of the last stage still holds one micro-batch: same extras as 1F1B.
    EXPECT_EQ(stage_memory(s, 15).embedding_and_logits_bytes, 65011712.0) << v;
  }
}

// NVIDIA's Llama 3.1 405B split on a 126-layer GPT-3-shaped model: PP 8 x VP 8, embedding and
// loss each counted as a layer (core/pipeline_split.hpp): stage 0 chunks 1+2+...+2 = 15 layers,
// stage 7 2+...+2+1 = 15, the others 16. m = 16.
// Stage 0's peak (interleaved warm-up (p-1) 2 + (v-1) p = 70 forwards, then one more): the 71
// chunk forwards in flight are virtual micro-batches 0..70, i.e. 15 of chunk 0 (1 layer) and 8 of
// each of chunks 1..7 (2 layers): 15 + 7 x 8 x 2 = 127 layer-activation sets (an even split of
// 2 per chunk would hold 142). Stage 7: warm-up 56 = 8 micro-batches of chunks 0..6 (112 sets);
// in the steady state the forward of chunk 0 (2 layers) follows the backward of chunk 7 (1
// layer), so the peak is 114.
TEST(MemoryTest, UnevenSplitActivationsCountEachChunksLayers) {
  Scenario s = Gpt3_175BOn1024();
  s.model.num_layers = 126;
  s.parallel.pipeline_model_parallel_size = 8;
  s.parallel.virtual_pipeline_model_parallel_size = 8;
  s.parallel.data_parallel_size = 16;
  s.training.global_batch_size = 256;  // m = 16
  s.parallel.account_for_embedding_in_pipeline_split = true;
  s.parallel.account_for_loss_in_pipeline_split = true;
  const double per_layer = 106954752.0;  // SP + selective, s 2048, h 12288, t 8 (above)
  const std::vector<StageMemory> stages = memory_per_stage(s);
  ASSERT_EQ(stages.size(), 8u);
  EXPECT_EQ(stages[0].layers, 15);
  EXPECT_EQ(stages[7].layers, 15);
  for (int64_t r = 1; r < 7; ++r) EXPECT_EQ(stages[r].layers, 16) << r;
  EXPECT_EQ(stages[0].in_flight, 71);
  EXPECT_EQ(stages[0].in_flight_layers, 127);
  EXPECT_EQ(stages[0].activations_bytes, 127 * per_layer);
  EXPECT_EQ(stages[7].in_flight, 57);
  EXPECT_EQ(stages[7].in_flight_layers, 114);
  EXPECT_EQ(stages[7].activations_bytes, 114 * per_layer);
  // Weights follow the layers: stage 0 holds one layer less than stage 1 plus the embeddings.
  const int64_t layer = layer_parameters_on_rank(s.model, 8);
  const int64_t embedding_rows = 51200 / 8;
  EXPECT_EQ(stages[1].parameters, 16 * layer);
  EXPECT_EQ(stages[0].parameters, 15 * layer + embedding_rows * 12288 + 2048 * 12288);
  EXPECT_EQ(stages[7].parameters, 15 * layer + embedding_rows * 12288 + 2 * 12288);

  // Without interleaving: 30 layers + 2 on PP 4 = 7, 8, 8, 7; 1F1B holds p - rank micro-batches
  // of the stage's whole layer set: stage 0 4 x 7 = 28, stage 3 1 x 7.
  s.model.num_layers = 30;
  s.parallel.pipeline_model_parallel_size = 4;
  s.parallel.virtual_pipeline_model_parallel_size = 1;
  s.parallel.data_parallel_size = 32;
  EXPECT_EQ(stage_memory(s, 0).in_flight_layers, 28);
  EXPECT_EQ(stage_memory(s, 0).activations_bytes, 28 * per_layer);
  EXPECT_EQ(stage_memory(s, 1).in_flight_layers, 24);
  EXPECT_EQ(stage_memory(s, 3).in_flight_layers, 7);
}

TEST(MemoryTest, GpipeHoldsAllMicroBatches) {
  Scenario s = Gpt3_175BOn1024();
  s.parallel.pipeline_schedule = PipelineScheduleKind::kGPipe;
  s.training.global_batch_size = 256;  // m = 32
  for (const StageMemory& st : memory_per_stage(s)) {
    EXPECT_EQ(st.in_flight, 32) << st.pp_rank;
    EXPECT_EQ(st.activations_bytes, 32.0 * 6 * 106954752) << st.pp_rank;
  }
  // All 32 micro-batches' embedding masks on stage 0 and LM-head buffers on the last stage.
  EXPECT_EQ(stage_memory(s, 0).embedding_and_logits_bytes, 32.0 * 3145728);
  EXPECT_EQ(stage_memory(s, 15).embedding_and_logits_bytes, 32.0 * 65011712);
}

TEST(MemoryTest, NoPipelineHasBothEnds) {
  // PP 1, TP 1, b 2, bf16, no recompute, 8 layers of Small(): 1 micro-batch in flight.
  Scenario s;
  s.model = Small();
  s.training.micro_batch_size = 2;
  s.training.global_batch_size = 8;  // m = 4
  s.training.precision = Precision::kBf16;
  s.cluster.num_gpus = 1;
  const StageMemory mem = stage_memory(s, 0);
  EXPECT_EQ(mem.in_flight, 1);
  EXPECT_EQ(mem.layers, 8);
  EXPECT_EQ(mem.parameters, parameter_count(s.model));  // V = 1024: no padding, no tied copy
  EXPECT_EQ(mem.activations_bytes, 8 * 180224.0);
  // Embedding mask s b h = 4096; LN + LM-head inputs 4 s b h = 16384;
  // logits 4 s b V = 4 * 32 * 2 * 1024 = 262144. Sum 282624.
  EXPECT_EQ(mem.embedding_and_logits_bytes, 282624.0);
  EXPECT_EQ(mem.weights_bytes + mem.gradients_bytes + mem.optimizer_bytes,
            18.0 * static_cast<double>(parameter_count(s.model)));
}

// CPU offload, worked by hand on Small() (8 GPT layers, h 64, ffn 256, V 1024, s 32), PP 1,
// DP 2, b 2, bf16, the distributed optimizer. Parameters: per layer QKV 3h^2 + 3h = 12,480,
// projection h^2 + h = 4,160, FC1 4h^2 + 4h = 16,640, FC2 4h^2 + h = 16,448, two LayerNorms 4h =
// 256: 49,984; 8 layers 399,872 + word embedding V h 65,536 + positions s h 2,048 + final norm
// 2h 128 = 467,584. The optimizer shard is 467,584 / 2 = 233,792 parameters; half offloaded:
// host 0.5 x 16 x 233,792 = 1,870,336 bytes (HybridDeviceOptimizer's fp32 main parameter, two
// moments and gradient copy), the GPU keeps 0.5 x 12 x 233,792 = 1,402,752. Activations: one
// micro-batch in flight, 180,224 bytes per layer (NoPipelineHasBothEnds); the first 3 layers
// offloaded: host 540,672, GPU 5 x 180,224 = 901,120. Host total 2,411,008.
TEST(MemoryTest, CpuOffloadMovesOptimizerStateAndActivationsToTheHost) {
  Scenario s;
  s.model = Small();
  s.parallel.data_parallel_size = 2;
  s.training.micro_batch_size = 2;
  s.training.global_batch_size = 8;
  s.training.precision = Precision::kBf16;
  s.training.use_distributed_optimizer = true;
  s.cluster.num_gpus = 2;
  ASSERT_EQ(parameter_count(s.model), 467584);
  const StageMemory before = stage_memory(s, 0);
  EXPECT_EQ(before.optimizer_bytes, 12.0 * 233792);
  EXPECT_EQ(before.host_total_bytes(), 0.0);

  s.training.optimizer_cpu_offload = true;
  s.training.optimizer_offload_fraction = 0.5;
  s.training.cpu_offloading = true;
  s.training.cpu_offloading_num_layers = 3;
  const StageMemory off = stage_memory(s, 0);
  EXPECT_EQ(off.host_optimizer_bytes, 1870336.0);
  EXPECT_EQ(off.optimizer_bytes, 1402752.0);
  EXPECT_EQ(offloaded_layer_activation_bytes(s, 0), 180224.0);
  EXPECT_EQ(off.host_activations_bytes, 540672.0);
  EXPECT_EQ(off.activations_bytes, 901120.0);
  EXPECT_EQ(off.host_total_bytes(), 2411008.0);
  // What left the GPU is what the host holds, less the host's own gradient copy (4 bytes per
  // offloaded parameter: 0.5 x 233,792 x 4 = 467,584).
  EXPECT_EQ(before.total_bytes() - off.total_bytes(), off.host_total_bytes() - 467584.0);
  // Everything offloaded: no optimizer state left on the GPU, 16 bytes per shard parameter on
  // the host.
  s.training.optimizer_offload_fraction = 1.0;
  EXPECT_EQ(stage_memory(s, 0).optimizer_bytes, 0.0);
  EXPECT_EQ(stage_memory(s, 0).host_optimizer_bytes, 16.0 * 233792);

  // The host-capacity check: 2,411,008 bytes against 3e6 (80.4 %) fits, against 2.5e6 (96.4 %,
  // above the 90 % line) is at risk, against 2.4e6 does not fit.
  EXPECT_EQ(host_memory_verdict(off.host_total_bytes(), 3e6), MemoryVerdict::kFits);
  EXPECT_EQ(host_memory_verdict(off.host_total_bytes(), 2.5e6), MemoryVerdict::kAtRisk);
  EXPECT_EQ(host_memory_verdict(off.host_total_bytes(), 2.4e6), MemoryVerdict::kOutOfMemory);
  EXPECT_THROW(host_memory_verdict(1, 0), InvalidArgument);
}

TEST(MemoryTest, Gpt3_175BOnOneGpuCannotFit) {
  // TP 1, PP 1: 174615846912 parameters x 18 bytes = 3.14e12 bytes before any activation;
  // activations 96 * s b h (34 + 5 a s / h) = 96 * 25165824 * 114 = 2.75e11.
  Scenario s;
  s.model = Gpt3_175B();
  s.training.micro_batch_size = 1;
  s.training.global_batch_size = 1;
  s.training.precision = Precision::kBf16;
  s.cluster.num_gpus = 1;
  const StageMemory mem = stage_memory(s, 0);
  EXPECT_EQ(mem.activations_bytes, 96.0 * 25165824 * 114);
  EXPECT_GT(mem.total_bytes(), 3.4e12);
  EXPECT_GT(mem.total_bytes(), 40 * 80e9);  // far above an 80 GB GPU
}

TEST(MemoryTest, RejectsInvalidArguments) {
  const Scenario s = Gpt3_175BOn1024();
  ExpectInvalidArgument([&] { stage_memory(s, 16); }, "pp_rank");
  ExpectInvalidArgument([&] { stage_memory(s, -1); }, "pp_rank");
  ExpectInvalidArgument([] { bytes_per_parameter(Precision::kBf16, true, 0); }, "dp");
  ExpectInvalidArgument(
      [] { layer_activation_bytes(Small(), 0, 1, 1, false, R::kNone, Precision::kBf16); },
      "micro_batch_size");
  ExpectInvalidArgument(
      [] { layer_activation_bytes(Small(), 1, 0, 1, false, R::kNone, Precision::kBf16); },
      "tensor_model_parallel_size");
  ExpectInvalidArgument(
      [] { layer_activation_bytes(Small(), 1, 1, 3, false, R::kNone, Precision::kBf16); },
      "context_parallel_size");
  Scenario bad_batch = s;
  bad_batch.training.global_batch_size = 1537;
  ExpectInvalidArgument([&] { stage_memory(bad_batch, 0); }, "global_batch_size");
}


// ----- mixture of experts (issue 13) ----------------------------------------------------------

/// A tiny llama MoE worked by hand: l 2, h 64, a 4, g 2, ffn 128, s 32, 4 experts top-2 of width
/// 32, bf16; TP 2 with SP, EP 4, ETP 1, DP 2 on 4 GPUs (expert DP = 2 x 1 x 2 / (1 x 4) = 1),
/// micro-batch 1, global batch 4.
Scenario TinyMoeScenario() {
  Scenario s;
  s.name = "tiny-moe";
  s.model = testing::llama_moe(testing::llama(2, 64, 128, 4, 2, 32, 1000), 4, 2, 32);
  s.parallel.tensor_model_parallel_size = 2;
  s.parallel.sequence_parallel = true;
  s.parallel.expert_model_parallel_size = 4;
  s.parallel.expert_tensor_parallel_size = 1;
  s.parallel.data_parallel_size = 2;
  s.training.micro_batch_size = 1;
  s.training.global_batch_size = 4;
  s.training.precision = Precision::kBf16;
  s.cluster.num_gpus = 4;
  validate_scenario(s, "tiny-moe");
  return s;
}

TEST(MemoryMoe, MoeLayerActivationsByHand) {
  Scenario s = TinyMoeScenario();
  // T = 32 / TP 2 = 16 local tokens; T_in = ETP 1 x 16 x k 2 = 32 copies; e = 2 bytes.
  // Router 2 x 16 x 4 = 128; experts 32 x (2 x 64 + 2 x 64 + 2 x 32) = 10240 (FC1 input,
  // SwiGLU input 2 x 32 wide, FC2 input); unpermute 2 x 16 x 2 x 64 = 4096.
  EXPECT_EQ(moe_mlp_activation_bytes(s), 128 + 10240 + 4096);
  // alltoall buffers: send 16 x 2 copies + receive 32 copies, 2 x 64 bytes each.
  s.model.moe_token_dispatcher_type = MoeTokenDispatcher::kAllToAll;
  EXPECT_EQ(moe_dispatch_buffer_bytes(s), 2.0 * 64 * (32 + 32));
  // allgather: the EP x ETP = 4 ranks' 16 tokens.
  s.model.moe_token_dispatcher_type = MoeTokenDispatcher::kAllGather;
  EXPECT_EQ(moe_dispatch_buffer_bytes(s), 2.0 * 64 * 16 * 4);

  // Dropless with the busiest expert at 1.5 x the mean: 48 copies.
  s.cluster.what_if.moe_load_imbalance = 1.5;
  EXPECT_EQ(moe_mlp_activation_bytes(s), 128 + 48 * 320 + 4096);
  // Capacity factor 1: ceil(16 x 2 / 4 x 1) = 8 per expert and source, 4 x 8 = 32 copies at most.
  s.model.moe_expert_capacity_factor = 1.0;
  EXPECT_EQ(moe_expert_capacity(s), 8);
  EXPECT_EQ(moe_mlp_activation_bytes(s), 128 + 32 * 320 + 4096);
  // Padded to a capacity of factor 2: 4 x 16 = 64 copies whatever the routing.
  s.model.moe_expert_capacity_factor = 2.0;
  s.model.moe_pad_expert_input_to_capacity = true;
  EXPECT_EQ(moe_mlp_activation_bytes(s), 128 + 64 * 320 + 4096);
  // A factor of 1e6 pads to every token once, not to ceil(16 x 2 / 4 x 1e6): capacity T = 16, as
  // the executor's router keeps min(capacity, tokens) (issue 31: 3,540 GiB "does not fit").
  s.model.moe_expert_capacity_factor = 1e6;
  EXPECT_EQ(moe_expert_capacity(s), 16);
  EXPECT_EQ(moe_mlp_activation_bytes(s), 128 + 64 * 320 + 4096);
  s.model.moe_expert_capacity_factor = 2.0;
  // A shared expert of width 64 adds its MLP under TP: 32 tokens x (2 x 128 + 2 x 64) / 2.
  s.model.moe_shared_expert_intermediate_size = 64;
  EXPECT_EQ(moe_mlp_activation_bytes(s), 128 + 64 * 320 + 4096 + 32.0 * (256 + 128) / 2);
  // fp32 doubles the 2-byte terms.
  Scenario f = TinyMoeScenario();
  f.training.precision = Precision::kFp32;
  EXPECT_EQ(moe_mlp_activation_bytes(f), 2 * (128 + 10240 + 4096));
}

TEST(MemoryMoe, StageMemoryShardsExpertStateOverExpertDataParallel) {
  Scenario s = TinyMoeScenario();
  s.training.use_distributed_optimizer = true;
  const StageMemory mem = stage_memory(s, 0);
  const RankParameters held = stage_parameters_on_rank(s, 0);
  // One local expert (E 4 / EP 4), whole (ETP 1): 64 x 64 + 32 x 64 = 6144 per layer.
  EXPECT_EQ(held.expert, 2 * 6144);
  EXPECT_EQ(mem.expert_parameters, held.expert);
  EXPECT_EQ(mem.parameters, held.total());
  // bf16: weights 2, grads 4, optimizer 12 / shards: dense over DP x CP = 2, experts over expert
  // DP = 1 (each expert lives on one rank of its EP group and one expert-DP replica).
  EXPECT_EQ(mem.weights_bytes, 2.0 * static_cast<double>(held.total()));
  EXPECT_EQ(mem.gradients_bytes, 4.0 * static_cast<double>(held.total()));
  EXPECT_EQ(mem.optimizer_bytes,
            12.0 / 2 * static_cast<double>(held.dense) + 12.0 * static_cast<double>(held.expert));
  // Activations: PP 1 holds one micro-batch; each MoE layer is the dense layer with its MLP
  // terms (SwiGLU input 2 x 2 x 32 x 128 + FC2 input 2 x 32 x 128, / TP 2 = 12288) replaced by
  // the MoE terms (14464).
  const double dense_layer =
      layer_activation_bytes(s.model, 1, 2, 1, true, R::kNone, Precision::kBf16,
                             AttentionBackend::kUnfused);
  EXPECT_EQ(mem.in_flight, 1);
  EXPECT_EQ(mem.activations_bytes, 2 * (dense_layer - 12288 + 14464));
  EXPECT_EQ(mem.moe_dispatch_buffers_bytes, 2.0 * 64 * 16 * 4);  // allgather, the default
  // Full recomputation keeps only the layer input, MoE or not.
  s.training.recompute_granularity = R::kFull;
  EXPECT_EQ(stage_memory(s, 0).activations_bytes, 2 * 2.0 * 32 * 64 / 2);
  // A dense model has no dispatcher buffers and no expert parameters.
  const StageMemory dense = stage_memory(Gpt3_175BOn1024(), 0);
  EXPECT_EQ(dense.expert_parameters, 0);
  EXPECT_EQ(dense.moe_dispatch_buffers_bytes, 0);
}

// The verdict: fits while the peak and the reserve fit and the peak is within 90 % of the
// capacity; at risk inside the reserve or above 90 %; OOM above the capacity; the bounds belong
// to the lower verdict.
TEST(MemoryVerdict, FitsAtRiskAndOutOfMemory) {
  const double cap = 80.0 * (1 << 30);
  const double gib = 1 << 30;
  EXPECT_EQ(memory_verdict(0, cap, 0), MemoryVerdict::kFits);
  EXPECT_EQ(memory_verdict(0.9 * cap, cap, 0), MemoryVerdict::kFits);
  EXPECT_EQ(memory_verdict(0.9 * cap + 1, cap, 0), MemoryVerdict::kAtRisk);
  EXPECT_EQ(memory_verdict(cap, cap, 0), MemoryVerdict::kAtRisk);
  EXPECT_EQ(memory_verdict(cap + 1, cap, 0), MemoryVerdict::kOutOfMemory);
  // A 10 GiB reserve: 70 GiB fits exactly, 70 GiB + 1 byte is inside the reserve.
  EXPECT_EQ(memory_verdict(70 * gib, cap, 10 * gib), MemoryVerdict::kFits);
  EXPECT_EQ(memory_verdict(70 * gib + 1, cap, 10 * gib), MemoryVerdict::kAtRisk);
  EXPECT_STREQ(to_string(MemoryVerdict::kAtRisk), "at risk");
  EXPECT_THROW(memory_verdict(1, 0, 0), InvalidArgument);
  EXPECT_THROW(memory_verdict(1, cap, -1), InvalidArgument);
}

// The reserve of GPT-3 175B on 1024 GPUs (TP 8, PP 16, DP 8), counted by hand from the sources
// in core/memory_reserve.hpp: context 0.5 GiB, cuBLAS 2 x 32 MiB, NCCL on a middle stage TP (8
// members: 688 MB) + DP x CP (8: 688 MB) + the pipeline's send/recv (2: 544 MB) + the
// model-parallel group (TP x PP = 128: 688 MB) = 2.608 GB in 4 communicators; the first stage
// adds the embedding group (2: 544 MB); fragmentation 10 % of the activations.
TEST(MemoryReserve, CountsTheCommunicatorsOfTheLayoutFromPublishedSizes) {
  const Scenario s = Gpt3_175BOn1024();
  const StageMemory middle = stage_memory(s, 5);
  const MemoryReserve r = memory_reserve(s, middle);
  EXPECT_DOUBLE_EQ(r.cuda_context_bytes, 0.5 * (1 << 30));
  EXPECT_DOUBLE_EQ(r.cublas_workspace_bytes, 64.0 * (1 << 20));
  EXPECT_EQ(r.nccl_communicators, 4);
  EXPECT_DOUBLE_EQ(r.nccl_bytes, 688e6 + 688e6 + 544e6 + 688e6);
  EXPECT_DOUBLE_EQ(r.fragmentation_bytes,
                   0.1 * (middle.activations_bytes + middle.embedding_and_logits_bytes));
  EXPECT_DOUBLE_EQ(r.total_bytes(), r.cuda_context_bytes + r.cublas_workspace_bytes +
                                        r.nccl_bytes + r.fragmentation_bytes);
  const MemoryReserve first = memory_reserve(s, stage_memory(s, 0));
  EXPECT_EQ(first.nccl_communicators, 5);
  EXPECT_DOUBLE_EQ(first.nccl_bytes, r.nccl_bytes + 544e6);
  // One GPU: no communicator at all, only the context and workspaces (and fragmentation).
  Scenario one = s;
  one.parallel.tensor_model_parallel_size = 1;
  one.parallel.pipeline_model_parallel_size = 1;
  one.parallel.data_parallel_size = 1;
  one.parallel.sequence_parallel = false;
  one.cluster.num_gpus = 1;
  one.training.global_batch_size = 1;
  const MemoryReserve alone = memory_reserve(one, stage_memory(one, 0));
  EXPECT_EQ(alone.nccl_communicators, 0);
  EXPECT_EQ(alone.nccl_bytes, 0);
}

// An MoE layout adds the EP all-to-all (the communicator and 0.47 GB per peer, at most 7 peers)
// and the expert-DP group; a2a CP is an all-to-all too.
TEST(MemoryReserve, AllToAllsConnectEveryPeerUpToANode) {
  Scenario s = TinyMoeScenario();
  const MemoryReserve dense_part = [&] {
    Scenario d = s;
    d.model.num_moe_experts = 0;
    return memory_reserve(d, stage_memory(s, 0));
  }();
  const MemoryReserve moe = memory_reserve(s, stage_memory(s, 0));
  const int64_t ep = s.parallel.expert_model_parallel_size;
  const int64_t edp = s.parallel.expert_data_parallel_size();
  ASSERT_GT(ep, 1);
  const double a2a = 688e6 + 0.47e9 * static_cast<double>(std::min<int64_t>(ep - 1, 7));
  const double expert_dp = edp < 2 ? 0.0 : (edp == 2 ? 544e6 : 688e6);
  EXPECT_EQ(moe.nccl_communicators - dense_part.nccl_communicators, edp < 2 ? 1 : 2);
  EXPECT_NEAR(moe.nccl_bytes - dense_part.nccl_bytes, a2a + expert_dp, 1.0);
}

}  // namespace
}  // namespace traintwin
