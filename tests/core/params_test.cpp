// Parameter counts: whole model (exact layout and Narayanan et al. SC'21 sec. 5.1) and per
// (TP rank, pipeline stage), with Megatron's vocab padding.
#include "core/params.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "models.hpp"

#include <string>

#include "core/error.hpp"

namespace traintwin {
namespace {

using ::testing::HasSubstr;

ModelSpec Gpt3_175B() { return testing::gpt3_175b(); }

// l = 4, h = 64, a = 8, ffn = 256, s = 32, V = 1000: small enough to count by hand.
ModelSpec TinyModel() {
  ModelSpec m;
  m.num_layers = 4;
  m.hidden_size = 64;
  m.num_attention_heads = 8;
  m.ffn_hidden_size = 256;
  m.seq_length = 32;
  m.vocab_size = 1000;
  return m;
}

Scenario MakeScenario(const ModelSpec& m, int64_t tp, int64_t pp, int64_t vpp = 1) {
  Scenario s;
  s.name = "params_test";
  s.model = m;
  s.parallel.tensor_model_parallel_size = tp;
  s.parallel.pipeline_model_parallel_size = pp;
  s.parallel.virtual_pipeline_model_parallel_size = vpp;
  s.cluster.num_gpus = tp * pp;
  return s;
}

// Expects `f` to throw InvalidArgument whose message contains `needle`.
template <typename F>
void ExpectInvalidArgument(F f, const std::string& needle) {
  try {
    f();
    FAIL() << "expected InvalidArgument mentioning " << needle;
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr(needle));
  }
}

TEST(ParamsTest, LayerParameterCountIs12hSquaredPlus13hForFfn4h) {
  const ModelSpec m = Gpt3_175B();
  const int64_t h = m.hidden_size;
  // 12 h^2 + 13 h = 12 * 150994944 + 13 * 12288 = 1811939328 + 159744 = 1812099072.
  EXPECT_EQ(layer_parameter_count(m), 12 * h * h + 13 * h);
  EXPECT_EQ(layer_parameter_count(m), 1812099072);
}

TEST(ParamsTest, LayerParameterCountWithGenericFfn) {
  // h = 64, ffn = 256: QKV 3*64*64 + 192 = 12480; projection 4096 + 64 = 4160;
  // FC1 64*256 + 256 = 16640; FC2 256*64 + 64 = 16448; 2 LNs 256. Sum 49984
  // = 4h^2 + 2h*ffn + 9h + ffn = 16384 + 32768 + 576 + 256.
  EXPECT_EQ(layer_parameter_count(TinyModel()), 49984);
  ModelSpec m = TinyModel();
  m.ffn_hidden_size = 100;  // 16384 + 12800 + 576 + 100
  EXPECT_EQ(layer_parameter_count(m), 29860);
}

TEST(ParamsTest, Gpt3_175BParameterCount) {
  // 96 * 1812099072 = 173961510912 layers; V h = 51200 * 12288 = 629145600;
  // s h = 2048 * 12288 = 25165824; final LN 2h = 24576. Sum 174615846912 ~ 174.6e9.
  const ModelSpec m = Gpt3_175B();
  EXPECT_EQ(parameter_count(m), 174615846912);
  EXPECT_NEAR(static_cast<double>(parameter_count(m)), 174.6e9, 0.1e9);
}

TEST(ParamsTest, NarayananFormulaLeavesOutTheFinalLayerNorm) {
  // 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)) = 12 l h^2 + 13 l h + (V + s) h
  // = 174615846912 - 2 * 12288 = 174615822336.
  const ModelSpec m = Gpt3_175B();
  EXPECT_EQ(parameter_count_narayanan(m),
            static_cast<double>(parameter_count(m) - 2 * m.hidden_size));
  EXPECT_EQ(parameter_count_narayanan(m), 174615822336.0);
  // The paper's factored form agrees to rounding.
  const double l = 96, h = 12288, v = 51200, s = 2048;
  const double paper = 12 * l * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * l * h));
  EXPECT_NEAR(parameter_count_narayanan(m) / paper, 1.0, 1e-14);
  const ModelSpec tiny = TinyModel();
  ModelSpec tiny4h = tiny;
  tiny4h.ffn_hidden_size = 4 * tiny.hidden_size;
  EXPECT_EQ(parameter_count_narayanan(tiny4h),
            static_cast<double>(parameter_count(tiny4h) - 2 * tiny4h.hidden_size));
}

TEST(ParamsTest, VocabPaddingToMultipleOf128TimesTp) {
  // GPT-2's 50257 tokens: TP 1 -> ceil(50257/128) = 393 -> 393*128 = 50304;
  // TP 2 -> multiple 256: 197*256 = 50432; TP 4 -> 512: 99*512 = 50688;
  // TP 8 -> 1024: 50*1024 = 51200.
  EXPECT_EQ(padded_vocab_size(50257, 1), 50304);
  EXPECT_EQ(padded_vocab_size(50257, 2), 50432);
  EXPECT_EQ(padded_vocab_size(50257, 4), 50688);
  EXPECT_EQ(padded_vocab_size(50257, 8), 51200);
  // 51200 = 50 * 1024 = 25 * 2048 is already a multiple for TP 1..16 (powers of 2);
  // TP 3 -> multiple 384: 51200/384 = 133.3 -> 134*384 = 51456.
  for (int64_t tp : {1, 2, 4, 8, 16}) EXPECT_EQ(padded_vocab_size(51200, tp), 51200) << tp;
  EXPECT_EQ(padded_vocab_size(51200, 3), 51456);
  EXPECT_EQ(padded_vocab_size(1, 1), 128);
  EXPECT_EQ(padded_vocab_size(100, 1, 1), 100);
}

TEST(ParamsTest, PerRankEmbeddingUsesPaddedVocab) {
  // GPT-2 small-ish: l = 2, h = 768, V = 50257, s = 1024, TP 8, PP 2.
  ModelSpec m;
  m.num_layers = 2;
  m.hidden_size = 768;
  m.num_attention_heads = 16;
  m.ffn_hidden_size = 3072;
  m.seq_length = 1024;
  m.vocab_size = 50257;
  const Scenario s = MakeScenario(m, 8, 2);
  // Per layer and rank, h = 768, t = 8: QKV 3*768*96 + 288 = 221472; projection 96*768 + 768 =
  // 74496; FC1 768*384 + 384 = 295296; FC2 384*768 + 768 = 295680; LNs 3072. One layer per
  // stage: 221472 + 74496 + 295296 + 295680 + 3072 = 890016.
  // Embedding rows per rank: padded 51200 / 8 = 6400 (not 50257/8 = 6282.1), 6400*768 = 4915200.
  // Stage 0: 890016 + 4915200 + position 1024*768 = 786432 -> 6591648.
  // Stage 1: 890016 + 4915200 + final LN 1536 -> 5806752.
  EXPECT_EQ(parameters_on_rank(s, 0), 6591648);
  EXPECT_EQ(parameters_on_rank(s, 1), 5806752);
}

TEST(ParamsTest, Tp8Pp2PerRankCountsByHand) {
  // TinyModel, TP 8, PP 2 (2 layers per stage). Per layer and rank:
  //   QKV 3*64*64/8 + 3*64/8 = 1536 + 24 = 1560; projection 64*64/8 + 64 = 576;
  //   FC1 64*256/8 + 256/8 = 2048 + 32 = 2080; FC2 256*64/8 + 64 = 2112; 2 LNs 4*64 = 256.
  //   Sum 6584; 2 layers 13168.
  // Vocab 1000 padded to a multiple of 128*8 = 1024: 1024, 128 rows per rank: 128*64 = 8192.
  // Stage 0: 13168 + 8192 + position 32*64 = 2048 -> 23408.
  // Stage 1: 13168 + 8192 (tied copy) + final LN 128 -> 21488.
  const Scenario s = MakeScenario(TinyModel(), 8, 2);
  EXPECT_EQ(parameters_on_rank(s, 0), 23408);
  EXPECT_EQ(parameters_on_rank(s, 1), 21488);

  // Back to the whole model: each stage counts t * (per rank) - (t - 1) * (replicated), with
  // replicated = 6h per layer (2 row-parallel biases + 2 LNs) + position embedding or final LN.
  //   stage 0: 8*23408 - 7*(2*384 + 2048) = 187264 - 19712 = 167552
  //   stage 1: 8*21488 - 7*(2*384 + 128) = 171904 - 6272 = 165632
  // Sum 333184 = parameter_count 266112 + tied copy 1024*64 = 65536 + padding 24*64 = 1536.
  const int64_t h = 64, t = 8;
  const int64_t stage0 = t * parameters_on_rank(s, 0) - (t - 1) * (2 * 6 * h + 32 * h);
  const int64_t stage1 = t * parameters_on_rank(s, 1) - (t - 1) * (2 * 6 * h + 2 * h);
  EXPECT_EQ(stage0, 167552);
  EXPECT_EQ(stage1, 165632);
  EXPECT_EQ(parameter_count(TinyModel()), 266112);
  EXPECT_EQ(stage0 + stage1, parameter_count(TinyModel()) + 1024 * h + (1024 - 1000) * h);
}

TEST(ParamsTest, SumOverStagesReproducesWholeModelAtTp1) {
  // With V a multiple of 128 there is no padding at TP 1; PP > 1 adds the tied LM-head copy.
  ModelSpec m = TinyModel();
  m.num_layers = 24;
  m.vocab_size = 1024;
  for (int64_t pp : {1, 2, 3, 4, 6}) {
    for (int64_t vpp : {1, 2}) {
      if (m.num_layers % (pp * vpp) != 0) continue;
      const Scenario s = MakeScenario(m, 1, pp, vpp);
      int64_t sum = 0;
      for (int64_t r = 0; r < pp; ++r) sum += parameters_on_rank(s, r);
      const int64_t tied_copy = pp > 1 ? m.vocab_size * m.hidden_size : 0;
      EXPECT_EQ(sum - tied_copy, parameter_count(m)) << "pp " << pp << " vpp " << vpp;
    }
  }
}

TEST(ParamsTest, SumOverStagesAndTpRanksAccountsForReplication) {
  // For every TP, PP, v: sum over stages of t * per-rank minus (t - 1) * replicated parameters
  // equals the whole model plus the tied copy and the padding.
  ModelSpec m = TinyModel();
  m.num_layers = 12;
  const int64_t h = m.hidden_size;
  for (int64_t tp : {1, 2, 4, 8}) {
    for (int64_t pp : {1, 2, 3}) {
      for (int64_t vpp : {1, 2}) {
        if (m.num_layers % (pp * vpp) != 0) continue;
        const Scenario s = MakeScenario(m, tp, pp, vpp);
        const int64_t layers_per_stage = m.num_layers / pp;
        int64_t sum = 0;
        for (int64_t r = 0; r < pp; ++r) {
          int64_t replicated = layers_per_stage * 6 * h;
          if (r == 0) replicated += m.seq_length * h;
          if (r == pp - 1) replicated += 2 * h;
          sum += tp * parameters_on_rank(s, r) - (tp - 1) * replicated;
        }
        const int64_t padded = padded_vocab_size(m.vocab_size, tp);
        const int64_t expected =
            parameter_count(m) + (padded - m.vocab_size) * h + (pp > 1 ? padded * h : 0);
        EXPECT_EQ(sum, expected) << "tp " << tp << " pp " << pp << " vpp " << vpp;
      }
    }
  }
}

TEST(ParamsTest, InterleavingKeepsTheLayersPerStage) {
  // v chunks of l/(p v) layers = l/p layers per stage, whatever v.
  ModelSpec m = TinyModel();
  m.num_layers = 12;
  for (int64_t r = 0; r < 2; ++r) {
    EXPECT_EQ(parameters_on_rank(MakeScenario(m, 2, 2, 1), r),
              parameters_on_rank(MakeScenario(m, 2, 2, 3), r));
  }
}

TEST(ParamsTest, Gpt3_175BOnTp8Pp16) {
  // Per layer and rank, h = 12288, t = 8: (12 h^2 + 7 h)/8 + 6 h = 226503168 + 73728 = 226576896;
  // 6 layers per stage: 1359461376. Embedding rows 51200/8 = 6400: 6400*12288 = 78643200.
  // Stage 0: + 78643200 + 2048*12288 = 25165824 -> 1463270400.
  // Middle stages: 1359461376. Last: + 78643200 + 24576 -> 1438129152.
  const Scenario s = MakeScenario(Gpt3_175B(), 8, 16);
  EXPECT_EQ(parameters_on_rank(s, 0), 1463270400);
  for (int64_t r = 1; r < 15; ++r) EXPECT_EQ(parameters_on_rank(s, r), 1359461376) << r;
  EXPECT_EQ(parameters_on_rank(s, 15), 1438129152);
}

// Llama 3.1 as Meta's model cards count it (8.03B, 70.55B, 405.85B; unpadded vocabulary):
// 8B: layer = 4096 x 6144 (GQA QKV) + 4096^2 + 3 x 4096 x 14336 + 2 x 4096 = 218112000;
// 32 layers + 2 x 128256 x 4096 (untied) + 4096 = 8030261248.
TEST(ParamsTest, Llama31ModelCards) {
  EXPECT_EQ(layer_parameter_count(testing::llama31_8b()), 218112000);
  EXPECT_EQ(parameter_count(testing::llama31_8b()), 8030261248);
  EXPECT_NEAR(static_cast<double>(parameter_count(testing::llama31_8b())) / 8.03e9, 1.0, 5e-4);
  EXPECT_NEAR(static_cast<double>(parameter_count(testing::llama31_70b())) / 70.55e9, 1.0, 5e-4);
  EXPECT_NEAR(static_cast<double>(parameter_count(testing::llama31_405b())) / 405.85e9, 1.0,
              5e-4);
  // 70B by hand: layer 8192 x 10240 + 8192^2 + 3 x 8192 x 28672 + 2 x 8192 = 855654400.
  EXPECT_EQ(parameter_count(testing::llama31_70b()), 80 * 855654400LL + 2 * 128256LL * 8192 + 8192);
}

// A tiny Llama per rank by hand: h 64, 8 heads of 8, 2 query groups, ffn 96, V 1024, TP 2:
// QKV 64 x (8 + 4) x 8 / 2 = 3072, projection 32 x 64 = 2048, FC1 64 x 192 / 2 = 6144, FC2
// 48 x 64 = 3072, 2 RMSNorms 128: 14464 per layer; no biases, no position table; the untied
// LM head 512 x 64 on the last stage even without a pipeline.
TEST(ParamsTest, TinyLlamaPerRankByHand) {
  const ModelSpec m = testing::llama(4, 64, 96, 8, 2, 32, 1024);
  EXPECT_EQ(layer_parameters_on_rank(m, 2), 14464);
  EXPECT_EQ(layer_gemm_weights_on_rank(m, 2), 14464 - 128);
  EXPECT_EQ(layer_parameters_on_rank(m, 1), 2 * 14464 - 128);
  const int64_t emb = 512 * 64;
  EXPECT_EQ(parameters_on_rank(MakeScenario(m, 2, 1), 0), 4 * 14464 + emb + emb + 64);
  const Scenario pp2 = MakeScenario(m, 2, 2);
  EXPECT_EQ(parameters_on_rank(pp2, 0), 2 * 14464 + emb);
  EXPECT_EQ(parameters_on_rank(pp2, 1), 2 * 14464 + emb + 64);
  // TP must divide the query groups: 4 does not divide 2.
  ExpectInvalidArgument([&] { layer_parameters_on_rank(m, 4); }, "num_query_groups");
}

TEST(ParamsTest, RejectsInvalidArguments) {
  const Scenario s = MakeScenario(TinyModel(), 2, 2);
  ExpectInvalidArgument([&] { parameters_on_rank(s, 2); }, "pp_rank");
  ExpectInvalidArgument([&] { parameters_on_rank(s, -1); }, "pp_rank");
  ExpectInvalidArgument([&] { parameters_on_rank(MakeScenario(TinyModel(), 1, 3), 0); },
                        "num_layers");
  ExpectInvalidArgument([&] { parameters_on_rank(MakeScenario(TinyModel(), 3, 1), 0); },
                        "hidden_size");
  ExpectInvalidArgument([&] { parameters_on_rank(MakeScenario(TinyModel(), 0, 1), 0); },
                        "tensor_model_parallel_size");
  ModelSpec no_ffn = TinyModel();
  no_ffn.ffn_hidden_size = 0;
  ExpectInvalidArgument([&] { layer_parameter_count(no_ffn); }, "ffn_hidden_size");
  ModelSpec no_vocab = TinyModel();
  no_vocab.vocab_size = 0;
  ExpectInvalidArgument([&] { parameter_count(no_vocab); }, "vocab_size");
  ExpectInvalidArgument([&] { padded_vocab_size(50257, 0); }, "tensor_model_parallel_size");
}


// ----- mixture of experts (issue 13) ----------------------------------------------------------

// Published totals: Mixtral 8x7B 46.7e9 total / 12.9e9 active (Mistral AI, "Mixtral of
// experts", 2023-12 release note, and Jiang et al. 2024); Qwen3-30B-A3B 30.5e9 / 3.3e9 (Qwen3
// model card and technical report, Table 2); Grok-1 314e9 (xAI's open-release announcement,
// 2024-03). Counted here from the architectures alone: every published figure is rounded to
// 3 significant digits (2 for Qwen3's active count), so the tolerance is half a unit of the last
// digit plus the terms the figures may round differently (Grok-1's 4 norms a layer, Qwen3's
// QK-norm): 0.2 % for the totals of Mixtral and Qwen3, 1 % for Grok-1, 2 % for Qwen3's 3.3e9.
TEST(ParamsMoe, PublishedTotalAndActiveCounts) {
  const ModelSpec mixtral = testing::mixtral_8x7b();
  // Hand count: attention h (a + 2g) d + a d h = 4096 x 6144 + 4096^2 = 41943040, norms 8192,
  // router 8 x 4096 = 32768, experts 8 x 3 x 4096 x 14336 = 1409286144 -> 1451270144 a layer;
  // x 32 + embedding and LM head 2 x 32000 x 4096 + final norm 4096.
  EXPECT_EQ(layer_parameter_count(mixtral, 0), 1451270144);
  EXPECT_EQ(parameter_count(mixtral), 46702792704);
  EXPECT_EQ(active_parameter_count(mixtral), 46702792704 - 32LL * 6 * 3 * 4096 * 14336);
  EXPECT_NEAR(static_cast<double>(parameter_count(mixtral)) / 46.7e9, 1.0, 2e-3);
  EXPECT_NEAR(static_cast<double>(active_parameter_count(mixtral)) / 12.9e9, 1.0, 2e-3);

  const ModelSpec qwen = testing::qwen3_30b_a3b();
  // kv_channels 128: QKV 2048 x (32 + 8) x 128, projection 4096 x 2048 (not 2048^2).
  EXPECT_EQ(layer_parameter_count(qwen, 0),
            2048LL * 40 * 128 + 4096LL * 2048 + 2 * 2048 + 128 * 2048 + 128LL * 3 * 2048 * 768);
  EXPECT_NEAR(static_cast<double>(parameter_count(qwen)) / 30.5e9, 1.0, 2e-3);
  EXPECT_NEAR(static_cast<double>(active_parameter_count(qwen)) / 3.3e9, 1.0, 2e-2);

  EXPECT_NEAR(static_cast<double>(parameter_count(testing::grok1())) / 314e9, 1.0, 1e-2);
  // A dense model is all active.
  EXPECT_EQ(active_parameter_count(testing::llama31_8b()), parameter_count(testing::llama31_8b()));
}

/// A tiny llama MoE worked by hand: l 4, h 64, a 4, g 2 (d 16), ffn 128, 4 experts top-2 of width
/// 32, a shared expert of width 64, MoE every second layer.
ModelSpec TinyMoe() {
  ModelSpec m = testing::llama_moe(testing::llama(4, 64, 128, 4, 2, 32, 1000), 4, 2, 32);
  m.moe_shared_expert_intermediate_size = 64;
  m.moe_layer_pattern = {1, 0, 1, 0};
  return m;
}

TEST(ParamsMoe, TinyMoeByHand) {
  const ModelSpec m = TinyMoe();
  // Attention: QKV 64 x (4 + 4) x 16 = 8192, projection 64 x 64 = 4096, RMSNorms 2 x 64.
  const int64_t attention = 8192 + 4096 + 128;
  // Dense layer: SwiGLU FC1 64 x 256 + FC2 128 x 64 = 24576.
  EXPECT_EQ(layer_parameter_count(m, 1), attention + 24576);
  // MoE layer: router 4 x 64 = 256, shared expert 64 x 128 + 64 x 64 = 12288, 4 experts of
  // 64 x 64 + 32 x 64 = 6144 each.
  EXPECT_EQ(layer_parameter_count(m, 0), attention + 256 + 12288 + 4 * 6144);
  EXPECT_EQ(parameter_count(m), 2 * (attention + 24576) + 2 * (attention + 256 + 12288 + 24576) +
                                    2 * 1000 * 64 + 64);
  EXPECT_EQ(active_parameter_count(m), parameter_count(m) - 2 * 2 * 6144);

  // TP 2, EP 2, ETP 1: attention / 2 (norms replicated), router replicated, shared expert / 2,
  // 2 local experts, each whole.
  ParallelConfig p;
  p.tensor_model_parallel_size = 2;
  p.expert_model_parallel_size = 2;
  p.expert_tensor_parallel_size = 1;
  const RankParameters moe = layer_parameters_on_rank(m, p, 2);
  EXPECT_EQ(moe.dense, (8192 + 4096) / 2 + 128 + 256 + 12288 / 2);
  EXPECT_EQ(moe.dense_gemm, (8192 + 4096) / 2 + 12288 / 2);
  EXPECT_EQ(moe.expert, 2 * 6144);
  EXPECT_EQ(moe.expert_gemm, 2 * 6144);
  const RankParameters dense = layer_parameters_on_rank(m, p, 3);
  EXPECT_EQ(dense.dense, (8192 + 4096) / 2 + 128 + 24576 / 2);
  EXPECT_EQ(dense.expert, 0);
  // ETP 2 (the default, = TP) with EP 2: 2 local experts, each halved.
  p.expert_tensor_parallel_size.reset();
  EXPECT_EQ(layer_parameters_on_rank(m, p, 0).expert, 2 * 6144 / 2);

  // Whole stages (PP 2: layers 0-1 and 2-3), TP 2 x EP 2: the first holds the embedding.
  Scenario s = MakeScenario(m, 2, 2);
  s.parallel.expert_model_parallel_size = 2;
  s.parallel.sequence_parallel = true;
  s.parallel.rank_order = "tp-cp-ep-dp-pp";
  const RankParameters stage0 = stage_parameters_on_rank(s, 0);
  EXPECT_EQ(stage0.expert, 2 * 6144 / 2);
  EXPECT_EQ(stage0.dense, layer_parameters_on_rank(m, s.parallel, 0).dense +
                              layer_parameters_on_rank(m, s.parallel, 1).dense + 512 * 64);
  EXPECT_EQ(parameters_on_rank(s, 0), stage0.total());
}

TEST(ParamsMoe, ExpertsShardedOverEpTimesEtpSumToTheModel) {
  // Summed over the EP x ETP ranks of an expert group, the expert parameters of a layer are the
  // E experts once (no biases in llama, so nothing is replicated).
  const ModelSpec m = testing::mixtral_8x7b();
  const int64_t all_experts = 8LL * 3 * 4096 * 14336;
  for (int64_t ep : {1, 2, 4, 8}) {
    for (int64_t etp : {1, 2, 4, 8}) {
      ParallelConfig p;
      p.tensor_model_parallel_size = 8;
      p.expert_model_parallel_size = ep;
      p.expert_tensor_parallel_size = etp;
      EXPECT_EQ(layer_parameters_on_rank(m, p, 5).expert * ep * etp, all_experts)
          << "EP " << ep << " ETP " << etp;
    }
  }
  ParallelConfig bad;
  bad.expert_model_parallel_size = 3;
  ExpectInvalidArgument([&] { layer_parameters_on_rank(m, bad, 0); }, "num_moe_experts");
  ExpectInvalidArgument([&] { layer_parameters_on_rank(m, ParallelConfig{}, 32); }, "layer");
}

}  // namespace
}  // namespace traintwin
