// FLOP model: layer forward FLOPs, model and hardware FLOPs per recomputation granularity,
// Narayanan et al. SC'21 eq. 3, Korthikanti et al. 2022 model FLOPs, MFU; checked by hand and
// against /work/shared/validation/calibration.yaml.
#include "core/flops.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"
#include "core/params.hpp"
#include "models.hpp"

namespace traintwin {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

ModelSpec Gpt(int64_t l, int64_t h, int64_t a, int64_t s, int64_t v) {
  ModelSpec m;
  m.num_layers = l;
  m.hidden_size = h;
  m.num_attention_heads = a;
  m.ffn_hidden_size = 4 * h;
  m.seq_length = s;
  m.vocab_size = v;
  return m;
}

// l = 2, h = 64, a = 4, s = 32, V = 128; used with B = 8.
ModelSpec Small() { return Gpt(2, 64, 4, 32, 128); }
ModelSpec Gpt3_175B() { return Gpt(96, 12288, 96, 2048, 51200); }

template <typename F>
void ExpectInvalidArgument(F f, const std::string& needle) {
  try {
    f();
    FAIL() << "expected InvalidArgument mentioning " << needle;
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr(needle));
  }
}

// B s h^2 = 8 * 32 * 64^2 = 1048576; B s^2 h = 8 * 32^2 * 64 = 524288.
TEST(FlopsTest, SmallLayerForwardByHand) {
  // QKV 6 B s h^2 = 6291456; scores 2 B s^2 h = 1048576; over values 1048576;
  // projection 2 B s h^2 = 2097152; FC1 + FC2 2 * 2 B s h (4h) = 16 B s h^2 = 16777216.
  // Sum 27262976 = 24 B s h^2 + 4 B s^2 h = 25165824 + 2097152.
  EXPECT_EQ(layer_forward_flops(Small(), 8), 27262976.0);
}

TEST(FlopsTest, LayerForwardWithGenericFfn) {
  // ffn = 2h = 128: MLP 4 B s h ffn = 4 * 8 * 32 * 64 * 128 = 8388608 instead of 16777216.
  ModelSpec m = Small();
  m.ffn_hidden_size = 128;
  EXPECT_EQ(layer_forward_flops(m, 8), 27262976.0 - 16777216.0 + 8388608.0);
}

TEST(FlopsTest, SmallModelAndHardwareFlopsByHand) {
  const ModelSpec m = Small();
  // LM head 2 B s h V = 2 * 8 * 32 * 64 * 128 = 4194304.
  // Model: 3 * (2 * 27262976 + 4194304) = 3 * 58720256 = 176160768.
  EXPECT_EQ(model_flops_per_iteration(m, 8), 176160768.0);
  EXPECT_EQ(hardware_flops_per_iteration(m, 8, RecomputeGranularity::kNone), 176160768.0);
  // Selective: + l * 4 B s^2 h = 2 * 2097152 = 4194304 -> 180355072.
  EXPECT_EQ(hardware_flops_per_iteration(m, 8, RecomputeGranularity::kSelective), 180355072.0);
  // Full: + l * layer forward = 2 * 27262976 = 54525952 -> 230686720 (no LM head recomputed).
  EXPECT_EQ(hardware_flops_per_iteration(m, 8, RecomputeGranularity::kFull), 230686720.0);
  // Korthikanti: 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) = 150994944 * (1 + 1/12 + 1/12)
  //   = 150994944 * 7/6 = 176160768.
  EXPECT_DOUBLE_EQ(korthikanti_model_flops(m, 8), 176160768.0);
  // Eq. 3: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) = 201326592 * (1 + 1/12 + 1/16)
  //   = 201326592 * 55/48 = 230686720.
  EXPECT_DOUBLE_EQ(narayanan_eq3_flops(m, 8), 230686720.0);
}

TEST(FlopsTest, Gpt3_175BMatchesThePaperFormulas) {
  const ModelSpec m = Gpt3_175B();
  for (int64_t batch : {1, 64, 1536}) {
    const double korthikanti = korthikanti_model_flops(m, batch);
    const double eq3 = narayanan_eq3_flops(m, batch);
    EXPECT_NEAR(model_flops_per_iteration(m, batch) / korthikanti, 1.0, 1e-12) << batch;
    EXPECT_NEAR(hardware_flops_per_iteration(m, batch, RecomputeGranularity::kFull) / eq3, 1.0,
                1e-12)
        << batch;
  }
  // Scale check: 72 * 1536 * 2048 * 96 * 12288^2 * (1 + 1/36 + 25/6912)
  //   = 3283124128353091584 * 1.0313947 = 3.3862e18 per iteration.
  EXPECT_NEAR(model_flops_per_iteration(m, 1536) / 3.3862e18, 1.0, 1e-4);
}

TEST(FlopsTest, HardwareFlopsOrdering) {
  const ModelSpec m = Gpt3_175B();
  const double none = hardware_flops_per_iteration(m, 8, RecomputeGranularity::kNone);
  const double selective = hardware_flops_per_iteration(m, 8, RecomputeGranularity::kSelective);
  const double full = hardware_flops_per_iteration(m, 8, RecomputeGranularity::kFull);
  EXPECT_LT(none, selective);
  EXPECT_LT(selective, full);
  // Selective adds 4 B s^2 h per layer to 72 B s h^2 + 12 B s^2 h, i.e. s / (18h + 3s)
  //   = 2048 / 227328 = 0.90 % (a bit less with the LM head).
  EXPECT_NEAR(selective / none, 1.009, 0.001);
  // Full: eq. 3 / Korthikanti = (96/72) (1 + 1/36 + 1/368.64) / (1 + 1/36 + 1/276.48)
  //   = 1.33333 * 1.030491 / 1.031395 = 1.33216.
  EXPECT_NEAR(full / none, 1.33216, 1e-5);
}

// torchtitan's op-level selective activation checkpointing recomputes the even-numbered of the
// layer's seven matmuls (wk, wo, w3) and not the attention core. Llama 3.1 8B (h 4096, a d 4096,
// g d 1024, ffn 14336), per token: wk 2 x 4096 x 1024 = 8,388,608 + wo 2 x 4096 x 4096 =
// 33,554,432 + w3 2 x 4096 x 14336 = 117,440,512 = 159,383,552 FLOPs, against the layer's
// matmuls wq 33,554,432 + wk + wv 2 x 8,388,608 + wo 33,554,432 + w1, w3, w2 3 x 117,440,512 =
// 436,207,616 (36.5 %). One sample of 8192 tokens: 1,305,670,057,984 per layer.
TEST(FlopsTest, TorchtitanOpLevelSacRecomputesEveryOtherMatmul) {
  const ModelSpec m = testing::llama31_8b();
  EXPECT_EQ(op_sac_recompute_forward_flops(m, 1), 159383552.0 * 8192);
  const double model = model_flops_per_iteration(m, 2);
  EXPECT_EQ(hardware_flops_per_iteration(m, 2, RecomputeGranularity::kSelective,
                                         SelectiveAcOption::kOp),
            model + 32 * 2 * 159383552.0 * 8192);
  // The option says what selective recomputes: none and full ignore it.
  EXPECT_EQ(hardware_flops_per_iteration(m, 2, RecomputeGranularity::kFull, SelectiveAcOption::kOp),
            hardware_flops_per_iteration(m, 2, RecomputeGranularity::kFull));
  ModelSpec gelu = m;
  gelu.activation = Activation::kGelu;
  EXPECT_THROW(op_sac_recompute_forward_flops(gelu, 1), InvalidArgument);
}

TEST(FlopsTest, Narayanan145_6BImpliedIterationTime) {
  // calibration.yaml narayanan2021-145.6B: l 80, h 12288, s 2048, V 51200, B 2304,
  // 1536 GPUs, measured 148 TFLOP/s/GPU, with throughput = F / (T * GPUs).
  // F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))
  //   = 96 * 2304 * 2048 * 80 * 12288^2 * (1 + 2048/73728 + 51200/15728640)
  //   = 5471873547255152640 * (1 + 1/36 + 5/1536) = 5.4718735e18 * 4751/4608 = 5.641682e18.
  // T = F / (1536 * 148e12) = 5.641682e18 / 2.27328e17 = 24.817 s per iteration.
  const ModelSpec m = Gpt(80, 12288, 96, 2048, 51200);
  const double f = narayanan_eq3_flops(m, 2304);
  EXPECT_NEAR(f / 5.641682123048878e18, 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(hardware_flops_per_iteration(m, 2304, RecomputeGranularity::kFull), f);
  const double iteration_time_s = f / (1536 * 148e12);
  EXPECT_NEAR(iteration_time_s, 24.817, 0.001);
  EXPECT_GT(iteration_time_s, 10.0);  // plausible for ~2300 x 2048 tokens on 1536 A100s
  EXPECT_LT(iteration_time_s, 60.0);
  // HFU = 148/312 = 0.4744 by construction; MFU uses the 72-coefficient model FLOPs:
  // 72 * ... * (1 + 1/36 + 5/1152) = 4.2357146e18; MFU = 4.2357146e18 / (24.817 * 1536 * 312e12)
  // = 0.3561.
  EXPECT_NEAR(model_flops_utilization(f, iteration_time_s, 1536, 312e12), 148.0 / 312.0, 1e-12);
  EXPECT_NEAR(
      model_flops_utilization(model_flops_per_iteration(m, 2304), iteration_time_s, 1536, 312e12),
      0.3561, 1e-4);
}

TEST(FlopsTest, DgxcGpt3_175BH100Mfu) {
  // calibration.yaml dgxc-gpt3-175B-h100-128: B 256, 128 GPUs, 8.309 s, measured MFU 53.54 %.
  // Model FLOPs 72 * 256 * 2048 * 96 * 12288^2 * (1 + 1/36 + 25/6912)
  //   = 547187354725515264 * 1.0313947 = 5.643661e17;
  // MFU = 5.643661e17 / (8.309 * 128 * 989e12) = 5.643661e17 / 1.05187e18 = 0.5365
  // (0.2 % above the published 53.54 %).
  const double mfu =
      model_flops_utilization(model_flops_per_iteration(Gpt3_175B(), 256), 8.309, 128, 989e12);
  EXPECT_NEAR(mfu, 0.53654, 1e-4);
  EXPECT_NEAR(mfu, 0.5354, 0.005);
}

// NVIDIA's DGX Cloud recipe formula for Llama (dgxc-benchmarking llama3.1 README), per sample:
// s [12 L h^2 (1 + G/H + s/h) + 18 L F h + 6 V h], no causal halving. Ours equals it exactly, and
// with calibration-modern.yaml's dgxc-llama3.1-8B-bf16-8 (B 128, 8 GPUs, 12.78 s, 989 TFLOP/s)
// it gives the published MFU: 474422087516160 x 128 / (12.78 x 8 x 989e12) = 0.60056 (59.99 %
// printed), and the FP8 case (9.44 s, 1979 TFLOP/s) 0.40632 (40.59 %).
TEST(FlopsTest, LlamaMatchesTheDgxCloudFormula) {
  for (const ModelSpec& m : {testing::llama31_8b(), testing::llama31_70b(), testing::llama31_405b()}) {
    const double s = static_cast<double>(m.seq_length), L = static_cast<double>(m.num_layers),
                 h = static_cast<double>(m.hidden_size), F = static_cast<double>(m.ffn_hidden_size),
                 V = static_cast<double>(m.vocab_size),
                 gh = static_cast<double>(m.num_query_groups) /
                      static_cast<double>(m.num_attention_heads);
    const double per_sample = s * (12 * L * h * h * (1 + gh + s / h) + 18 * L * F * h + 6 * V * h);
    EXPECT_NEAR(model_flops_per_iteration(m, 128) / (128 * per_sample), 1.0, 1e-12);
  }
  const double f8b = model_flops_per_iteration(testing::llama31_8b(), 128);
  EXPECT_NEAR(f8b / 128, 474422087516160.0, 1.0);
  EXPECT_NEAR(model_flops_utilization(f8b, 12.78, 8, 989e12), 0.5999, 0.001);
  EXPECT_NEAR(model_flops_utilization(f8b, 9.44, 8, 1979e12), 0.4059, 0.001);
  // 70B, 64 GPUs, 14.61 s: 54.52 % printed.
  EXPECT_NEAR(model_flops_utilization(model_flops_per_iteration(testing::llama31_70b(), 128), 14.61,
                                      64, 989e12),
              0.5452, 0.001);
  EXPECT_THAT(model_flops_formula(testing::llama31_8b()),
              AllOf(HasSubstr("not halved"), HasSubstr("18 L F h"), HasSubstr("1 + G/H")));
}

// Squared ReLU (Nemotron) has no gate: FC1 is h x ffn, as GeLU's.
TEST(FlopsTest, SquaredReluHasNoGate) {
  ModelSpec m = testing::llama(2, 64, 256, 8, 8, 32, 1024);
  m.activation = Activation::kSquaredRelu;
  ModelSpec gelu = m;
  gelu.activation = Activation::kGelu;
  EXPECT_DOUBLE_EQ(layer_forward_flops(m, 1), layer_forward_flops(gelu, 1));
  ModelSpec swiglu = m;
  swiglu.activation = Activation::kSwiglu;
  // SwiGLU adds one h x ffn GEMM: 2 s h ffn = 2 x 32 x 64 x 256.
  EXPECT_DOUBLE_EQ(layer_forward_flops(swiglu, 1) - layer_forward_flops(m, 1), 2.0 * 32 * 64 * 256);
}

TEST(FlopsTest, MfuArithmetic) {
  // 3.12e14 FLOPs in 1 s on 2 GPUs of 312 TFLOP/s peak: 3.12e14 / (1 * 2 * 3.12e14) = 0.5.
  EXPECT_DOUBLE_EQ(model_flops_utilization(3.12e14, 1.0, 2, 312e12), 0.5);
  // 1e18 FLOPs in 10 s on 100 GPUs of 1e15 peak: 1e18 / 1e18 = 1.
  EXPECT_DOUBLE_EQ(model_flops_utilization(1e18, 10.0, 100, 1e15), 1.0);
  EXPECT_DOUBLE_EQ(model_flops_utilization(0.0, 10.0, 100, 1e15), 0.0);
}

TEST(FlopsTest, RejectsInvalidArguments) {
  ExpectInvalidArgument([] { model_flops_utilization(1.0, 0.0, 1, 1.0); }, "iteration_time_s");
  ExpectInvalidArgument([] { model_flops_utilization(1.0, 1.0, 0, 1.0); }, "num_gpus");
  ExpectInvalidArgument([] { model_flops_utilization(1.0, 1.0, 1, -1.0); }, "peak_flops_per_gpu");
  ExpectInvalidArgument([] { model_flops_utilization(-1.0, 1.0, 1, 1.0); }, "model_flops");
  ExpectInvalidArgument([] { layer_forward_flops(Small(), 0); }, "samples");
  ExpectInvalidArgument([] { model_flops_per_iteration(Small(), 0); }, "global_batch");
  ExpectInvalidArgument([] { narayanan_eq3_flops(Small(), -1); }, "global_batch");
  ModelSpec m = Small();
  m.seq_length = 0;
  ExpectInvalidArgument([&] { korthikanti_model_flops(m, 1); }, "seq_length");
}


// ----- mixture of experts (issue 13) ----------------------------------------------------------

TEST(FlopsMoe, MoeLayerCountsRouterTopKExpertsAndSharedExpert) {
  // llama MoE: h 64, 4 experts top-2 of width 32, shared expert 64, MoE every second layer.
  ModelSpec m = testing::llama_moe(testing::llama(4, 64, 128, 4, 2, 32, 1000), 4, 2, 32);
  m.moe_shared_expert_intermediate_size = 64;
  m.moe_layer_pattern = {1, 0, 1, 0};
  const double t = 3.0 * 32;  // 3 samples of 32 tokens
  const double router = 2 * t * 64 * 4;
  const double expert = 2 * t * 64 * 64 + 2 * t * 32 * 64;  // SwiGLU FC1 64 -> 2 x 32, FC2
  const double shared = 2 * t * 64 * 128 + 2 * t * 64 * 64;
  EXPECT_EQ(mlp_forward_flops(m, 3, 0), router + 2 * expert + shared);
  EXPECT_EQ(mlp_forward_flops(m, 3, 1), 2 * t * 64 * 256 + 2 * t * 128 * 64);  // dense
  EXPECT_EQ(layer_forward_flops(m, 3, 0) - layer_forward_flops(m, 3, 1),
            mlp_forward_flops(m, 3, 0) - mlp_forward_flops(m, 3, 1));
  EXPECT_EQ(layers_forward_flops(m, 3), 2 * layer_forward_flops(m, 3, 0) +
                                            2 * layer_forward_flops(m, 3, 1));
  ExpectInvalidArgument([&] { mlp_forward_flops(m, 3, 4); }, "layer");
  EXPECT_THAT(model_flops_formula(m),
              AllOf(HasSubstr("6 h E (router)"), HasSubstr("k 18 F_e h"),
                    HasSubstr("18 F_s h (shared expert)"), HasSubstr("L_moe = 2, E = 4, k = 2")));
}

TEST(FlopsMoe, MixtralModelFlopsAreSixTimesActiveGemmWeightsPlusAttention) {
  // Per token, fwd + bwd model FLOPs = 6 x the GEMM weights a token passes through (active
  // parameters less the input embedding, which is a lookup, and the norms) + the attention core
  // 12 L s a d (full s x s).
  const ModelSpec m = testing::mixtral_8x7b();
  const double tokens = 16.0 * 4096;
  const double gemm_active = static_cast<double>(active_parameter_count(m)) - 32000.0 * 4096 -
                             32.0 * 2 * 4096 - 4096;
  const double expected = 6.0 * gemm_active + 12.0 * 32 * 4096 * 4096;
  EXPECT_NEAR(model_flops_per_iteration(m, 16) / (tokens * expected), 1.0, 1e-12);
  // Qwen3-30B-A3B: kv_channels 128 makes the attention width a d = 4096 (not h = 2048).
  const ModelSpec q = testing::qwen3_30b_a3b();
  const double q_gemm = static_cast<double>(active_parameter_count(q)) - 151936.0 * 2048 -
                        48.0 * 2 * 2048 - 2048;
  EXPECT_NEAR(model_flops_per_iteration(q, 4) / (4.0 * 4096 * (6.0 * q_gemm + 12.0 * 48 * 4096 *
                                                                                 4096)),
              1.0, 1e-12);
  EXPECT_THAT(model_flops_formula(q), HasSubstr("d = kv_channels"));
}

}  // namespace
}  // namespace traintwin
