// Tests of the pipeline split (core/pipeline_split.hpp): hand-worked layouts of Megatron-Core's
// rules (even, first/last stage counts, embedding/loss accounted), invariants over a grid, and
// every rule's error naming the key.
#include "core/pipeline_split.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "core/error.hpp"

namespace traintwin {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

ModelSpec model(int64_t layers) {
  ModelSpec m;
  m.num_layers = layers;
  m.hidden_size = 64;
  m.num_attention_heads = 4;
  m.ffn_hidden_size = 256;
  m.seq_length = 32;
  m.vocab_size = 100;
  return m;
}

ParallelConfig parallel(int64_t pp, int64_t v) {
  ParallelConfig p;
  p.pipeline_model_parallel_size = pp;
  p.virtual_pipeline_model_parallel_size = v;
  return p;
}

/// The layer counts of the virtual stages, in virtual-stage order.
std::vector<int64_t> counts(const std::vector<ChunkLayers>& split) {
  std::vector<int64_t> n;
  for (const ChunkLayers& c : split) n.push_back(c.num_layers);
  return n;
}

/// The split of `layers` over (pp, v) with `p`'s uneven keys; checks the invariants every split
/// has: contiguous layer ranges in virtual-stage order covering [0, layers) exactly.
std::vector<ChunkLayers> checked_split(int64_t layers, const ParallelConfig& p) {
  const std::vector<ChunkLayers> split = pipeline_layer_split(model(layers), p);
  EXPECT_EQ(split.size(),
            static_cast<size_t>(p.pipeline_model_parallel_size * p.virtual_pipeline_model_parallel_size));
  int64_t next = 0;
  for (const ChunkLayers& c : split) {
    EXPECT_EQ(c.first_layer, next);
    EXPECT_GE(c.num_layers, 0);
    next = c.end_layer();
  }
  EXPECT_EQ(next, layers);
  return split;
}

TEST(PipelineSplit, EvenSplitIsLayersOverPpTimesV) {
  // 8 layers, PP 2, v 2: Megatron's docstring example, stage 0 [0,1] [4,5], stage 1 [2,3] [6,7].
  const auto split = checked_split(8, parallel(2, 2));
  EXPECT_EQ(split[0], (ChunkLayers{0, 2}));  // stage 0 chunk 0
  EXPECT_EQ(split[1], (ChunkLayers{2, 2}));  // stage 1 chunk 0
  EXPECT_EQ(split[2], (ChunkLayers{4, 2}));  // stage 0 chunk 1
  EXPECT_EQ(split[3], (ChunkLayers{6, 2}));  // stage 1 chunk 1
  EXPECT_FALSE(uneven_pipeline_split(parallel(2, 2)));
}

// NVIDIA's Llama 3.1 405B recipe: 126 layers on PP 8 x VP 8 with the embedding and the loss
// each counted as a layer: 128 = 8 x 8 x 2. Worked by hand: every virtual stage holds 2 "layers";
// virtual stage 0 (stage 0, chunk 0) spends one on the embedding, virtual stage 63 (stage 7,
// chunk 7) one on the loss.
TEST(PipelineSplit, Llama405bRecipe126LayersPp8Vp8BothAccountFlags) {
  ParallelConfig p = parallel(8, 8);
  p.account_for_embedding_in_pipeline_split = true;
  p.account_for_loss_in_pipeline_split = true;
  EXPECT_TRUE(uneven_pipeline_split(p));
  const auto split = checked_split(126, p);
  EXPECT_EQ(split.front(), (ChunkLayers{0, 1}));   // embedding + layer 0
  EXPECT_EQ(split[1], (ChunkLayers{1, 2}));        // stage 1 chunk 0: layers 1, 2
  EXPECT_EQ(split[8], (ChunkLayers{15, 2}));       // stage 0 chunk 1: layers 15, 16
  EXPECT_EQ(split[62], (ChunkLayers{123, 2}));     // stage 6 chunk 7
  EXPECT_EQ(split.back(), (ChunkLayers{125, 1}));  // layer 125 + the loss
  for (size_t vs = 1; vs + 1 < split.size(); ++vs) EXPECT_EQ(split[vs].num_layers, 2) << vs;

  Scenario s;
  s.model = model(126);
  s.parallel = p;
  EXPECT_EQ(chunk_layers(s, 0, 0), (ChunkLayers{0, 1}));
  EXPECT_EQ(chunk_layers(s, 7, 7), (ChunkLayers{125, 1}));
  EXPECT_EQ(chunk_layers(s, 3, 2), (ChunkLayers{2 * 16 - 1 + 3 * 2, 2}));  // vs 19: 37, 38
  EXPECT_EQ(layers_on_stage(s, 0), 15);
  EXPECT_EQ(layers_on_stage(s, 7), 15);
  for (int64_t r = 1; r < 7; ++r) EXPECT_EQ(layers_on_stage(s, r), 16) << r;
  EXPECT_EQ(layers_per_stage_text(s), "15/16/16/16/16/16/16/15");
}

TEST(PipelineSplit, AccountFlagsWithoutInterleaving) {
  // 30 layers + embedding + loss = 32 on PP 4: 8 each; stage 0 holds 7, stage 3 holds 7.
  ParallelConfig p = parallel(4, 1);
  p.account_for_embedding_in_pipeline_split = true;
  p.account_for_loss_in_pipeline_split = true;
  EXPECT_EQ(counts(checked_split(30, p)), (std::vector<int64_t>{7, 8, 8, 7}));
  // Only the embedding: 31 + 1 = 32 -> 7, 8, 8, 8.
  p.account_for_loss_in_pipeline_split = false;
  EXPECT_EQ(counts(checked_split(31, p)), (std::vector<int64_t>{7, 8, 8, 8}));
  // Only the loss: 8, 8, 8, 7.
  p.account_for_embedding_in_pipeline_split = false;
  p.account_for_loss_in_pipeline_split = true;
  EXPECT_EQ(counts(checked_split(31, p)), (std::vector<int64_t>{8, 8, 8, 7}));
}

TEST(PipelineSplit, AccountFlagsCanLeaveAChunkWithOnlyTheEmbeddingOrTheLoss) {
  // 2 layers + 2 on PP 2 x v 2: one per virtual stage; vs 0 holds only the embedding, vs 3 only
  // the loss (Megatron-Core asserts >= 0 layers, so 0 is allowed).
  ParallelConfig p = parallel(2, 2);
  p.account_for_embedding_in_pipeline_split = true;
  p.account_for_loss_in_pipeline_split = true;
  const auto split = checked_split(2, p);
  EXPECT_EQ(counts(split), (std::vector<int64_t>{0, 1, 1, 0}));
  EXPECT_EQ(split[1], (ChunkLayers{0, 1}));
  EXPECT_EQ(split[2], (ChunkLayers{1, 1}));
  // One stage: the flags add and remove the same layers.
  EXPECT_EQ(counts(checked_split(5, parallel(1, 1))), (std::vector<int64_t>{5}));
  ParallelConfig one = parallel(1, 1);
  one.account_for_embedding_in_pipeline_split = true;
  one.account_for_loss_in_pipeline_split = true;
  EXPECT_EQ(counts(checked_split(5, one)), (std::vector<int64_t>{5}));
}

TEST(PipelineSplit, FirstAndLastStageCounts) {
  // 30 layers on PP 4 with 6 on the first and 6 on the last: the middle two hold 9 each.
  ParallelConfig p = parallel(4, 1);
  p.decoder_first_pipeline_num_layers = 6;
  p.decoder_last_pipeline_num_layers = 6;
  EXPECT_TRUE(uneven_pipeline_split(p));
  EXPECT_EQ(checked_split(30, p),
            (std::vector<ChunkLayers>{{0, 6}, {6, 9}, {15, 9}, {24, 6}}));
  // Only the first: (30 - 3) / 3 = 9 on the others.
  p.decoder_last_pipeline_num_layers.reset();
  p.decoder_first_pipeline_num_layers = 3;
  EXPECT_EQ(counts(checked_split(30, p)), (std::vector<int64_t>{3, 9, 9, 9}));
  // Only the last.
  p.decoder_first_pipeline_num_layers.reset();
  p.decoder_last_pipeline_num_layers = 3;
  EXPECT_EQ(counts(checked_split(30, p)), (std::vector<int64_t>{9, 9, 9, 3}));
  // PP 2 with both: they must add up.
  ParallelConfig two = parallel(2, 1);
  two.decoder_first_pipeline_num_layers = 5;
  two.decoder_last_pipeline_num_layers = 7;
  EXPECT_EQ(counts(checked_split(12, two)), (std::vector<int64_t>{5, 7}));
}

TEST(PipelineSplit, FirstAndLastStageCountsWithInterleaving) {
  // 28 layers on PP 4 x v 2, first 4 and last 4: middle stages (28 - 8) / 2 = 10 each, 5 per
  // chunk. Virtual stages: chunk 0 = 2, 5, 5, 2 (layers 0-13), chunk 1 = 2, 5, 5, 2 (14-27), as
  // Megatron-Core's offset vp_stage x 14 + first/v + middle_rank x 5.
  ParallelConfig p = parallel(4, 2);
  p.decoder_first_pipeline_num_layers = 4;
  p.decoder_last_pipeline_num_layers = 4;
  EXPECT_EQ(checked_split(28, p), (std::vector<ChunkLayers>{{0, 2},
                                                           {2, 5},
                                                           {7, 5},
                                                           {12, 2},
                                                           {14, 2},
                                                           {16, 5},
                                                           {21, 5},
                                                           {26, 2}}));
}

TEST(PipelineSplit, EvenGridInvariants) {
  // Without the keys the split is l / (p v) per chunk, chunk c of stage r starting at
  // (c p + r) l / (p v), for every divisible (l, p, v).
  for (int64_t l : {1, 2, 6, 12, 24, 96}) {
    for (int64_t pp : {1, 2, 3, 4, 8}) {
      for (int64_t v : {1, 2, 3, 4}) {
        if (l % (pp * v) != 0) continue;
        const auto split = checked_split(l, parallel(pp, v));
        for (size_t vs = 0; vs < split.size(); ++vs) {
          EXPECT_EQ(split[vs].num_layers, l / (pp * v));
          EXPECT_EQ(split[vs].first_layer, static_cast<int64_t>(vs) * l / (pp * v));
        }
      }
    }
  }
}

/// The error of an impossible split: its key and problem.
PipelineSplitError split_error(int64_t layers, const ParallelConfig& p) {
  try {
    pipeline_layer_split(model(layers), p);
  } catch (const PipelineSplitError& e) {
    return e;
  }
  ADD_FAILURE() << "no PipelineSplitError for " << layers << " layers";
  return PipelineSplitError("", "");
}

TEST(PipelineSplit, EvenRuleNamesNumLayers) {
  const PipelineSplitError e = split_error(126, parallel(8, 8));
  EXPECT_EQ(e.key(), "model.num_layers");
  EXPECT_THAT(e.problem(), AllOf(HasSubstr("126 is not divisible by pipeline_model_parallel_size x "
                                           "virtual_pipeline_model_parallel_size = 8 x 8 = 64"),
                                 HasSubstr("account_for_embedding/loss_in_pipeline_split")));
}

TEST(PipelineSplit, AccountRulesNameTheFlag) {
  ParallelConfig p = parallel(8, 1);
  p.account_for_embedding_in_pipeline_split = true;
  PipelineSplitError e = split_error(126, p);  // 127 % 8
  EXPECT_EQ(e.key(), "parallelism.account_for_embedding_in_pipeline_split");
  EXPECT_THAT(e.problem(), HasSubstr("model.num_layers + 1 (embedding) = 126 + 1 = 127 is not "
                                     "divisible by pipeline_model_parallel_size = 8"));
  p = parallel(8, 3);
  p.account_for_loss_in_pipeline_split = true;
  e = split_error(127, p);  // 128 / 8 = 16 per stage, not divisible by 3
  EXPECT_EQ(e.key(), "parallelism.account_for_loss_in_pipeline_split");
  EXPECT_THAT(e.problem(), HasSubstr("16 layers per pipeline stage, not divisible by "
                                     "virtual_pipeline_model_parallel_size = 3"));
}

TEST(PipelineSplit, FirstLastRulesNameTheKey) {
  const std::string first = "parallelism.decoder_first_pipeline_num_layers";
  const std::string last = "parallelism.decoder_last_pipeline_num_layers";
  ParallelConfig p = parallel(4, 1);
  p.decoder_first_pipeline_num_layers = 6;
  p.account_for_loss_in_pipeline_split = true;
  PipelineSplitError e = split_error(30, p);
  EXPECT_EQ(e.key(), first);
  EXPECT_THAT(e.problem(), HasSubstr("cannot be combined with "
                                     "parallelism.account_for_loss_in_pipeline_split"));

  p = parallel(1, 1);
  p.decoder_last_pipeline_num_layers = 4;
  e = split_error(30, p);
  EXPECT_EQ(e.key(), last);
  EXPECT_THAT(e.problem(), HasSubstr("needs parallelism.pipeline_model_parallel_size > 1, got 1"));

  p = parallel(4, 2);
  p.decoder_first_pipeline_num_layers = 3;  // odd on v = 2
  e = split_error(27, p);
  EXPECT_EQ(e.key(), first);
  EXPECT_THAT(e.problem(), HasSubstr("3 is not divisible by virtual_pipeline_model_parallel_size = 2"));

  p = parallel(4, 1);
  p.decoder_first_pipeline_num_layers = 20;
  p.decoder_last_pipeline_num_layers = 20;
  e = split_error(30, p);
  EXPECT_EQ(e.key(), first);
  EXPECT_THAT(e.problem(), HasSubstr("decoder_first_pipeline_num_layers + "
                                     "decoder_last_pipeline_num_layers = 20 + 20 exceeds "
                                     "model.num_layers = 30"));

  p.decoder_first_pipeline_num_layers = 15;
  p.decoder_last_pipeline_num_layers = 15;
  e = split_error(30, p);  // nothing left for 2 middle stages
  EXPECT_THAT(e.problem(), HasSubstr("leaves no layers for the 2 middle pipeline stage(s)"));

  p = parallel(2, 1);
  p.decoder_first_pipeline_num_layers = 5;
  p.decoder_last_pipeline_num_layers = 5;
  e = split_error(12, p);  // 2 layers for no stage
  EXPECT_THAT(e.problem(), HasSubstr("leaves 2 of model.num_layers = 12 layers for no stage"));

  p = parallel(4, 1);
  p.decoder_first_pipeline_num_layers = 4;
  e = split_error(30, p);  // 26 over 3 middle stages
  EXPECT_THAT(e.problem(), HasSubstr("the 26 layers left by decoder_first_pipeline_num_layers = 4 "
                                     "(of model.num_layers = 30) are not divisible by the 3 middle "
                                     "pipeline stage(s)"));

  p = parallel(4, 2);
  p.decoder_last_pipeline_num_layers = 2;
  e = split_error(29, p);  // 27 / 3 = 9 per middle stage, odd on v = 2
  EXPECT_EQ(e.key(), last);
  EXPECT_THAT(e.problem(), HasSubstr("the middle pipeline stages hold 9 layers each"));

  p = parallel(4, 1);
  p.decoder_first_pipeline_num_layers = 0;
  e = split_error(30, p);
  EXPECT_THAT(e.problem(), HasSubstr("must be >= 1, got 0"));
}

TEST(PipelineSplit, ChunkLayersChecksItsArguments) {
  Scenario s;
  s.model = model(8);
  s.parallel = parallel(2, 2);
  EXPECT_THROW(chunk_layers(s, 2, 0), InvalidArgument);
  EXPECT_THROW(chunk_layers(s, 0, 2), InvalidArgument);
  EXPECT_THROW(chunk_layers(s, -1, 0), InvalidArgument);
  s.parallel = parallel(3, 1);
  EXPECT_THROW(chunk_layers(s, 0, 0), PipelineSplitError);
}

}  // namespace
}  // namespace traintwin

namespace traintwin {
namespace {

ParallelConfig with_layout(int64_t pp, int64_t v, const std::string& layout) {
  ParallelConfig p = parallel(pp, v);
  p.pipeline_model_parallel_layout = layout;
  return p;
}

// Megatron-Core's documented example: DeepSeek-V3's 61 decoder layers on PP 16 x v 2 as
// "Et*3|(tt|)*29,m|L" (with its MTP layer m, which traintwin does not model): without the m,
// stage 0 holds the embedding and 3 layers, stages 1-29 hold 2 each, stage 30 none, stage 31 the
// loss alone: 3 + 29 x 2 = 61.
TEST(PipelineSplit, CustomLayoutOfDeepSeekV3WithoutItsMtpLayer) {
  EXPECT_TRUE(uneven_pipeline_split(with_layout(16, 2, "Et*3|(tt|)*29,|L")));
  const std::vector<ChunkLayers> split = checked_split(61, with_layout(16, 2, "Et*3|(tt|)*29,|L"));
  std::vector<int64_t> expected(32, 2);
  expected[0] = 3;
  expected[30] = 0;
  expected[31] = 0;
  EXPECT_EQ(counts(split), expected);
  // Virtual stage 17 = chunk 1 of pipeline rank 1: layers after 3 + 16 x 2.
  EXPECT_EQ(split[17], (ChunkLayers{3 + 16 * 2, 2}));
}

// A pipeline balanced by hand for unequal GPUs: fewer layers on the last two stages.
TEST(PipelineSplit, CustomLayoutSetsEachStage) {
  EXPECT_EQ(counts(checked_split(16, with_layout(4, 1, "Et*5|t*5|t*3|t*3L"))),
            (std::vector<int64_t>{5, 5, 3, 3}));
  EXPECT_EQ(counts(checked_split(12, with_layout(2, 2, "E, tt | t*4 | (t)*3 | ttt, L"))),
            (std::vector<int64_t>{2, 4, 3, 3}));
  EXPECT_EQ(counts(checked_split(4, with_layout(1, 1, "Et*4L"))), (std::vector<int64_t>{4}));
}

TEST(PipelineSplit, CustomLayoutRulesNameTheKey) {
  const std::string key = "parallelism.pipeline_model_parallel_layout";
  auto problem = [&](int64_t layers, const ParallelConfig& p) {
    const PipelineSplitError e = split_error(layers, p);
    EXPECT_EQ(e.key(), key);
    return e.problem();
  };
  EXPECT_THAT(problem(8, with_layout(2, 1, "Et*4|t*3L")),
              HasSubstr("places 7 transformer layers, but model.num_layers = 8"));
  EXPECT_THAT(problem(8, with_layout(4, 1, "Et*4|t*4L")),
              HasSubstr("gives 2 virtual stages, but pipeline_model_parallel_size x "
                        "virtual_pipeline_model_parallel_size = 4 x 1 = 4"));
  EXPECT_THAT(problem(8, with_layout(2, 1, "t*4|Et*4L")),
              HasSubstr("'E' in stage 1 (rule: the embedding E is in the first stage"));
  EXPECT_THAT(problem(8, with_layout(2, 1, "Et*4L|t*4")), HasSubstr("'L' in stage 0"));
  EXPECT_THAT(problem(8, with_layout(2, 1, "t*4|t*4L")), HasSubstr("must hold one E"));
  EXPECT_THAT(problem(8, with_layout(2, 1, "Et*4|t*3mL")),
              HasSubstr("stage 1 holds an MTP layer (m)"));
  EXPECT_THAT(problem(8, with_layout(2, 1, "Et*4|tx*3L")),
              AllOf(HasSubstr("unexpected 'x' at position 7"), HasSubstr("allowed: t, E, L")));
  EXPECT_THAT(problem(8, with_layout(2, 1, "E(t*4|t*4L")), HasSubstr("a '(' without its ')'"));
  EXPECT_THAT(problem(8, with_layout(2, 1, "Et*4)|t*4L")), HasSubstr("a ')' without its '('"));
  EXPECT_THAT(problem(8, with_layout(2, 1, "Et*|t*4L")), HasSubstr("a '*' without a count"));
  EXPECT_THAT(problem(8, with_layout(2, 1, "Et*99999999|L")),
              HasSubstr("a repeat count above 1000000"));
  ParallelConfig both = with_layout(2, 1, "Et*4|t*4L");
  both.decoder_first_pipeline_num_layers = 4;
  EXPECT_THAT(problem(8, both),
              HasSubstr("cannot be combined with parallelism.decoder_first_pipeline_num_layers"));
}

}  // namespace
}  // namespace traintwin
