// ModelShard: parameter counts per rank against parameters_on_rank (and one worked by hand),
// tensor order/offsets/shapes of model_shard.hpp, item ranges (also against the Program's DP
// buckets), layout independence (TP shards reassembled and PP stages compared bitwise with the
// single-rank model), the tied LM-head copy, padded vocabulary rows, flags, the initialization
// formula and statistics, and errors.
#include "exec/model_shard.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/params.hpp"
#include "core/program.hpp"
#include "exec/checkpoint.hpp"
#include "exec/counter_rng.hpp"
#include "exec/cpu/cpu_backend.hpp"
#include "exec/distributed_optimizer.hpp"

namespace traintwin::exec {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kSeed = 1234;
constexpr double kStd = 0.02;

struct Knobs {
  int64_t tp = 1, pp = 1, v = 1, dp = 1, layers = 4;
  bool sp = false;
  int64_t vocab = 1000;
};

// A small GPT: h 64, 8 heads, ffn 256, s 32, V 1000 (padded to 1024 for TP 1, 2, 4: a multiple
// of 128 x TP).
Scenario make(const Knobs& k) {
  Scenario s;
  s.name = "model_shard_test";
  s.model = ModelSpec{"gpt", k.layers, 64, 8, 256, 32, k.vocab};
  s.parallel.tensor_model_parallel_size = k.tp;
  s.parallel.pipeline_model_parallel_size = k.pp;
  s.parallel.virtual_pipeline_model_parallel_size = k.v;
  s.parallel.data_parallel_size = k.dp;
  s.parallel.sequence_parallel = k.sp;
  s.training.micro_batch_size = 1;
  s.training.global_batch_size = 2 * k.pp * k.dp;
  s.cluster.num_gpus = k.tp * k.pp * k.dp;
  return s;
}

ModelShard shard(const Knobs& k, int64_t tp_rank, int64_t pp_rank, uint64_t seed = kSeed) {
  RankCoord c;
  c.tp = tp_rank;
  c.pp = pp_rank;
  return ModelShard(make(k), c, seed, kStd);
}

std::vector<float> copy(std::span<const float> x) { return {x.begin(), x.end()}; }

// Bitwise equality of two float vectors.
::testing::AssertionResult same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
    }
  }
  return ::testing::AssertionSuccess();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The chunk of `m` that holds `name` (-1 when none).
int64_t chunk_of(const ModelShard& m, const std::string& name) {
  for (const ChunkShard& c : m.chunks()) {
    for (const ShardTensor& t : c.tensors) {
      if (t.name == name) return c.chunk;
    }
  }
  return -1;
}

std::vector<float> param_of(ModelShard& m, const std::string& name) {
  const int64_t c = chunk_of(m, name);
  EXPECT_GE(c, 0) << name;
  return copy(m.param(c, name));
}

TEST(ModelShard, ParameterCountWorkedByHand) {
  // Per layer (TP 1): QKV 3*64*64 + 192 = 12480, projection 64*64 + 64 = 4160,
  // FC1 256*64 + 256 = 16640, FC2 64*256 + 64 = 16448, 2 LayerNorms 256: 49984.
  // 4 layers 199936 + word embedding 1024*64 = 65536 + position 32*64 = 2048 + final LN 128.
  EXPECT_EQ(shard({}, 0, 0).num_parameters(), 267648);
  // TP 2, PP 2, last stage: 2 layers of (6240 + 2112 + 8320 + 8256 + 256 = 25184), the LM-head
  // copy 512*64 = 32768 and the final LN 128.
  EXPECT_EQ(shard({.tp = 2, .pp = 2}, 1, 1).num_parameters(), 2 * 25184 + 32768 + 128);
}

TEST(ModelShard, ParameterCountEqualsParametersOnRank) {
  for (int64_t tp : {1, 2, 4}) {
    for (int64_t pp : {1, 2, 4}) {
      for (int64_t v : {1, 2}) {
        const Knobs k{.tp = tp, .pp = pp, .v = v, .layers = 8};
        const Scenario s = make(k);
        for (int64_t p = 0; p < pp; ++p) {
          for (int64_t t = 0; t < tp; ++t) {
            const ModelShard m = shard(k, t, p);
            SCOPED_TRACE(testing::Message() << "tp " << tp << " pp " << pp << " v " << v
                                            << " rank (" << t << ", " << p << ")");
            EXPECT_EQ(m.num_parameters(), parameters_on_rank(s, p));
            EXPECT_EQ(static_cast<int64_t>(m.chunks().size()), v);
            EXPECT_EQ(m.vocab_local(), 1024 / tp);
            EXPECT_EQ(m.vocab_start(), t * 1024 / tp);
          }
        }
      }
    }
  }
}

TEST(ModelShard, TensorOrderOffsetsAndShapes) {
  // PP 2, v 2, 8 layers: 2 layers per chunk; pipeline rank 1 holds virtual stages 1 (layers 2,
  // 3) and 3 (the last: layers 6, 7 and the head); rank 0 stages 0 (layers 0, 1, embeddings)
  // and 2 (layers 4, 5).
  const Knobs k{.tp = 2, .pp = 2, .v = 2, .layers = 8};
  const ModelShard r1 = shard(k, 1, 1);
  const ModelShard r0 = shard(k, 1, 0);
  auto items = [](const ChunkShard& c) {
    std::vector<int32_t> out;
    for (const ShardTensor& t : c.tensors) {
      if (out.empty() || out.back() != t.item) out.push_back(t.item);
    }
    return out;
  };
  EXPECT_EQ(r0.chunks()[0].virtual_stage, 0);
  EXPECT_EQ(r0.chunks()[1].virtual_stage, 2);
  EXPECT_EQ(r1.chunks()[0].virtual_stage, 1);
  EXPECT_EQ(r1.chunks()[1].virtual_stage, 3);
  EXPECT_EQ(items(r0.chunks()[0]), (std::vector<int32_t>{1, 0, -2}));
  EXPECT_EQ(items(r0.chunks()[1]), (std::vector<int32_t>{5, 4}));
  EXPECT_EQ(items(r1.chunks()[0]), (std::vector<int32_t>{3, 2}));
  EXPECT_EQ(items(r1.chunks()[1]), (std::vector<int32_t>{-1, 7, 6}));

  for (const ModelShard* m : {&r0, &r1}) {
    for (const ChunkShard& c : m->chunks()) {
      int64_t offset = 0;
      for (const ShardTensor& t : c.tensors) {
        EXPECT_EQ(t.offset, offset) << t.name;
        int64_t numel = 1;
        for (int64_t d : t.shape) numel *= d;
        EXPECT_EQ(t.numel, numel) << t.name;
        offset += t.numel;
      }
      EXPECT_EQ(static_cast<int64_t>(c.params.size()), offset);
      EXPECT_EQ(copy(c.grads.span()), std::vector<float>(c.params.size(), 0.0f));
      EXPECT_EQ(copy(c.exp_avg.span()), std::vector<float>(c.params.size(), 0.0f));
      EXPECT_EQ(copy(c.exp_avg_sq.span()), std::vector<float>(c.params.size(), 0.0f));
    }
  }

  // Names and local shapes (t = 2: h/t 32, 3h/t 96, ffn/t 128, V_local 512).
  std::vector<std::pair<std::string, std::vector<int64_t>>> expected = {
      {"final_layernorm.weight", {64}},
      {"final_layernorm.bias", {64}},
      {"output_layer.weight", {512, 64}}};
  for (int l : {7, 6}) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const std::vector<std::pair<std::string, std::vector<int64_t>>> layer = {
        {p + "input_layernorm.weight", {64}},
        {p + "input_layernorm.bias", {64}},
        {p + "self_attention.linear_qkv.weight", {96, 64}},
        {p + "self_attention.linear_qkv.bias", {96}},
        {p + "self_attention.linear_proj.weight", {64, 32}},
        {p + "self_attention.linear_proj.bias", {64}},
        {p + "pre_mlp_layernorm.weight", {64}},
        {p + "pre_mlp_layernorm.bias", {64}},
        {p + "mlp.linear_fc1.weight", {128, 64}},
        {p + "mlp.linear_fc1.bias", {128}},
        {p + "mlp.linear_fc2.weight", {64, 128}},
        {p + "mlp.linear_fc2.bias", {64}}};
    expected.insert(expected.end(), layer.begin(), layer.end());
  }
  const auto& last = r1.chunks()[1].tensors;
  ASSERT_EQ(last.size(), expected.size());
  for (size_t i = 0; i < last.size(); ++i) {
    EXPECT_EQ(last[i].name, expected[i].first);
    EXPECT_EQ(last[i].shape, expected[i].second) << last[i].name;
  }
  const auto& first = r0.chunks()[0].tensors;
  ASSERT_GE(first.size(), 2u);
  EXPECT_EQ(first[first.size() - 2].name, "embedding.word_embeddings.weight");
  EXPECT_EQ(first[first.size() - 2].shape, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(first.back().name, "embedding.position_embeddings.weight");
  EXPECT_EQ(first.back().shape, (std::vector<int64_t>{32, 64}));
}

TEST(ModelShard, ItemRange) {
  // The last chunk of the example above: item -1 = final LN 128 + LM head 512*64 = 32896
  // elements, then layers 7 and 6 of 25184 each.
  const ModelShard m = shard({.tp = 2, .pp = 2, .v = 2, .layers = 8}, 0, 1);
  using Range = std::pair<int64_t, int64_t>;
  auto range = [&](std::vector<int32_t> items) { return m.item_range(1, items); };
  EXPECT_EQ(range({-1}), (Range{0, 32896}));
  EXPECT_EQ(range({7}), (Range{32896, 32896 + 25184}));
  EXPECT_EQ(range({7, 6}), (Range{32896, 32896 + 2 * 25184}));
  EXPECT_EQ(range({-1, 7, 6}), (Range{0, 83264}));
  EXPECT_EQ(static_cast<int64_t>(m.chunks()[1].params.size()), 83264);
  EXPECT_EQ(m.item_range(0, std::vector<int32_t>{3, 2}), (Range{0, 2 * 25184}));

  EXPECT_THROW(range({6, 7}), InvalidArgument);   // reversed
  EXPECT_THROW(range({-1, 6}), InvalidArgument);  // skips layer 7
  EXPECT_THROW(range({7, 7}), InvalidArgument);   // repeated
  EXPECT_THROW(range({}), InvalidArgument);
  try {
    range({-2});
    ADD_FAILURE() << "no throw for an item outside the chunk";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("item -2 is not in the chunk"));
  }
  try {
    range({-1, 6});
    ADD_FAILURE() << "no throw for non-contiguous items";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("not contiguous"));
  }
  EXPECT_THROW(m.item_range(2, std::vector<int32_t>{-1}), InvalidArgument);
}

TEST(ModelShard, ItemRangeOfProgramBucketsCoversEachChunk) {
  // The Program's DP gradient buckets (one per chunk for this small model) name the chunk's
  // items in buffer order, so each gives the chunk's whole buffer.
  for (int64_t v : {1, 2}) {
    const Knobs k{.tp = 2, .pp = 2, .v = v, .dp = 2, .layers = 8};
    const Scenario s = make(k);
    const Program prog = build_program(s);
    int64_t buckets = 0;
    for (const auto& [rank, rp] : prog.ranks) {
      const ModelShard m(s, rp.coord, kSeed, kStd);
      for (const Op& op : rp.ops) {
        if (op.role != Role::kGradBucket) continue;
        ++buckets;
        const auto r = m.item_range(op.model_chunk, op.bucket_layers);
        EXPECT_EQ(r.first, 0);
        EXPECT_EQ(r.second, static_cast<int64_t>(
                                m.chunks()[static_cast<size_t>(op.model_chunk)].params.size()));
      }
    }
    EXPECT_EQ(buckets, 8 * v);  // 8 ranks, one bucket per chunk
  }
}

// Reassembles the TP shards of `name` into the global tensor (row-major) as the header's split
// says, from the shards' local parameters.
std::vector<float> reassemble(std::vector<ModelShard>& ranks, const std::string& name) {
  const int64_t t = static_cast<int64_t>(ranks.size());
  const int64_t c = chunk_of(ranks[0], name);
  const ShardTensor& meta = ranks[0].tensor(c, name);
  std::vector<std::vector<float>> parts;
  for (ModelShard& r : ranks) parts.push_back(copy(r.param(c, name)));
  std::vector<float> out;
  if (!meta.tensor_parallel) return parts[0];
  const bool rows_split =
      !ends_with(name, "linear_proj.weight") && !ends_with(name, "linear_fc2.weight");
  const int64_t cols = meta.shape.size() == 2 ? meta.shape[1] : 1;
  const int64_t rows = meta.shape[0];
  if (ends_with(name, "linear_qkv.weight") || ends_with(name, "linear_qkv.bias")) {
    const int64_t part_rows = rows / 3;  // h/t rows of each of q, k, v
    for (int64_t part = 0; part < 3; ++part) {
      for (int64_t r = 0; r < t; ++r) {
        const auto& x = parts[static_cast<size_t>(r)];
        out.insert(out.end(), x.begin() + part * part_rows * cols,
                   x.begin() + (part + 1) * part_rows * cols);
      }
    }
  } else if (rows_split) {
    for (const auto& x : parts) out.insert(out.end(), x.begin(), x.end());
  } else {
    for (int64_t i = 0; i < rows; ++i) {
      for (const auto& x : parts) {
        out.insert(out.end(), x.begin() + i * cols, x.begin() + (i + 1) * cols);
      }
    }
  }
  return out;
}

TEST(ModelShard, TensorParallelShardsReassembleToTheSingleRankModel) {
  ModelShard one = shard({}, 0, 0);
  for (int64_t tp : {2, 4}) {
    std::vector<ModelShard> ranks;
    for (int64_t r = 0; r < tp; ++r) ranks.push_back(shard({.tp = tp}, r, 0));
    int64_t checked = 0;
    for (const ShardTensor& t : one.chunks()[0].tensors) {
      SCOPED_TRACE(t.name + " tp " + std::to_string(tp));
      const std::vector<float> global = copy(one.param(0, t.name));
      const ShardTensor& local = ranks[0].tensor(0, t.name);
      // (The word embedding is the same padded table of 1024 rows for TP 1, 2, 4.)
      EXPECT_TRUE(same_bits(reassemble(ranks, t.name), global));
      if (!local.tensor_parallel) {
        for (ModelShard& r : ranks) EXPECT_TRUE(same_bits(copy(r.param(0, t.name)), global));
      } else {
        EXPECT_EQ(local.numel * tp, t.numel);
      }
      ++checked;
    }
    EXPECT_EQ(checked, 4 * 12 + 2 + 2);
  }
}

TEST(ModelShard, PipelineStagesHoldTheSingleStageTensors) {
  for (int64_t tp : {1, 2}) {
    ModelShard one = shard({.tp = tp}, tp - 1, 0);
    for (int64_t pp : {2, 4}) {
      for (int64_t v : {1, 2}) {
        if (4 % (pp * v) != 0) continue;
        std::set<std::string> seen;
        for (int64_t p = 0; p < pp; ++p) {
          ModelShard m = shard({.tp = tp, .pp = pp, .v = v}, tp - 1, p);
          for (const ChunkShard& c : m.chunks()) {
            for (const ShardTensor& t : c.tensors) {
              if (t.name == "output_layer.weight") continue;
              SCOPED_TRACE(t.name + " pp " + std::to_string(pp) + " v " + std::to_string(v));
              EXPECT_TRUE(seen.insert(t.name).second) << "held twice";
              EXPECT_TRUE(same_bits(copy(m.param(c.chunk, t.name)), copy(one.param(0, t.name))));
              EXPECT_EQ(t.shape, one.tensor(0, t.name).shape);
            }
          }
        }
        EXPECT_EQ(seen.size(), one.chunks()[0].tensors.size());
      }
    }
  }
}

TEST(ModelShard, LastStageHeadCopiesTheWordEmbedding) {
  for (int64_t tp_rank : {0, 1}) {
    ModelShard first = shard({.tp = 2, .pp = 2}, tp_rank, 0);
    ModelShard last = shard({.tp = 2, .pp = 2}, tp_rank, 1);
    const ShardTensor& head = last.tensor(0, "output_layer.weight");
    EXPECT_TRUE(head.shared_embedding);
    EXPECT_TRUE(head.tensor_parallel);
    EXPECT_EQ(head.shape, (std::vector<int64_t>{512, 64}));
    EXPECT_TRUE(same_bits(copy(last.param(0, "output_layer.weight")),
                          copy(first.param(0, "embedding.word_embeddings.weight"))));
    EXPECT_THROW(last.tensor(0, "embedding.word_embeddings.weight"), InvalidArgument);
    EXPECT_THROW(first.tensor(0, "output_layer.weight"), InvalidArgument);
  }
  // PP 1 ties to the embedding itself: no copy.
  EXPECT_THROW(shard({}, 0, 0).tensor(0, "output_layer.weight"), InvalidArgument);
}

TEST(ModelShard, PaddedVocabularyRowsAreZero) {
  // V 1000 padded to 1024. TP 1: rows 1000..1023; TP 2 rank 1: rows 512..1023, local 488..511;
  // TP 4 rank 3: rows 768..1023, local 232..255; TP 4 rank 2 (rows 512..767): no padding.
  struct Case {
    int64_t tp, rank, first_padded_local;
  };
  for (const Case& c : {Case{1, 0, 1000}, Case{2, 1, 488}, Case{4, 3, 232}, Case{4, 2, 256}}) {
    ModelShard m = shard({.tp = c.tp}, c.rank, 0);
    const std::vector<float> w = param_of(m, "embedding.word_embeddings.weight");
    const int64_t rows = 1024 / c.tp;
    ASSERT_EQ(static_cast<int64_t>(w.size()), rows * 64);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t nonzero = 0;
      for (int64_t j = 0; j < 64; ++j) nonzero += w[static_cast<size_t>(r * 64 + j)] != 0.0f;
      if (r >= c.first_padded_local) {
        EXPECT_EQ(nonzero, 0) << "tp " << c.tp << " row " << r;
      } else {
        EXPECT_GT(nonzero, 60) << "tp " << c.tp << " row " << r;
      }
    }
  }
}

TEST(ModelShard, Flags) {
  for (bool sp : {false, true}) {
    const ModelShard m = shard({.tp = 2, .pp = 2, .sp = sp}, 0, 1);
    const ModelShard m0 = shard({.tp = 2, .pp = 2, .sp = sp}, 0, 0);
    int64_t sp_tensors = 0;
    for (const ModelShard* shard_ptr : {&m, &m0}) {
      for (const ChunkShard& c : shard_ptr->chunks()) {
        for (const ShardTensor& t : c.tensors) {
          SCOPED_TRACE(t.name);
          const bool layer_norm = t.name.find("layernorm") != std::string::npos;
          const bool row_bias =
              ends_with(t.name, "linear_proj.bias") || ends_with(t.name, "linear_fc2.bias");
          const bool bias = ends_with(t.name, ".bias");
          const bool replicated =
              layer_norm || row_bias || t.name == "embedding.position_embeddings.weight";
          EXPECT_EQ(t.tensor_parallel, !replicated);
          EXPECT_EQ(t.weight_decay, !bias && !layer_norm);
          EXPECT_EQ(t.weight_decay, t.shape.size() == 2);
          EXPECT_EQ(t.sequence_parallel_grad, sp && (layer_norm || row_bias));
          EXPECT_EQ(t.shared_embedding, t.name == "output_layer.weight");
          sp_tensors += t.sequence_parallel_grad;
        }
      }
    }
    // Per layer 4 LayerNorm tensors + 2 row-parallel biases, 4 layers; final LayerNorm 2.
    EXPECT_EQ(sp_tensors, sp ? 4 * 6 + 2 : 0);
  }
}

TEST(ModelShard, InitializationFormula) {
  ModelShard m = shard({.tp = 2}, 1, 0);
  // FC1 on TP rank 1 holds global rows 128..255 of [256, 64].
  const std::string fc1_name = "layers.2.mlp.linear_fc1.weight";
  const uint64_t stream = stream_id({fnv1a64(fc1_name.data(), fc1_name.size())});
  const std::vector<float> fc1 = param_of(m, "layers.2.mlp.linear_fc1.weight");
  for (int64_t r : {0, 5, 127}) {
    for (int64_t j : {0, 63}) {
      const auto index = static_cast<uint64_t>((128 + r) * 64 + j);
      EXPECT_EQ(fc1[static_cast<size_t>(r * 64 + j)],
                static_cast<float>(counter_normal(kSeed, stream, index) * kStd));
    }
  }
  // Projection on rank 1 holds global columns 32..63 of [64, 64], scaled std 0.02 / sqrt(8).
  const std::string proj_name = "layers.0.self_attention.linear_proj.weight";
  const uint64_t proj_stream = stream_id({fnv1a64(proj_name.data(), proj_name.size())});
  const std::vector<float> proj = param_of(m, "layers.0.self_attention.linear_proj.weight");
  EXPECT_EQ(proj[static_cast<size_t>(3 * 32 + 4)],
            static_cast<float>(counter_normal(kSeed, proj_stream, 3 * 64 + 32 + 4) *
                               (kStd / std::sqrt(8.0))));
  // LayerNorm weights 1, biases 0.
  for (const ChunkShard& c : m.chunks()) {
    for (const ShardTensor& t : c.tensors) {
      const auto x = copy(m.param(c.chunk, t.name));
      if (t.shape.size() == 1) {
        const float want = ends_with(t.name, "layernorm.weight") ? 1.0f : 0.0f;
        EXPECT_EQ(x, std::vector<float>(x.size(), want)) << t.name;
      }
    }
  }
  // Same seed: same model; other seed: another one; layers differ from each other.
  EXPECT_TRUE(same_bits(copy(shard({.tp = 2}, 1, 0).chunks()[0].params.span()),
                        copy(m.chunks()[0].params.span())));
  ModelShard other_seed = shard({.tp = 2}, 1, 0, kSeed + 1);
  EXPECT_NE(param_of(m, fc1_name), param_of(other_seed, fc1_name));
  EXPECT_NE(param_of(m, "layers.2.mlp.linear_fc1.weight"),
            param_of(m, "layers.3.mlp.linear_fc1.weight"));
}

// Mean and standard deviation of x.
std::pair<double, double> moments(const std::vector<float>& x) {
  double sum = 0, sum_sq = 0;
  for (float f : x) {
    sum += f;
    sum_sq += static_cast<double>(f) * f;
  }
  const double n = static_cast<double>(x.size());
  const double mean = sum / n;
  return {mean, std::sqrt(sum_sq / n - mean * mean)};
}

TEST(ModelShard, WeightStatisticsMatchTheInitStd) {
  ModelShard m = shard({}, 0, 0);
  // n elements of N(0, std^2): the sample mean has sd std / sqrt(n), the sample sd has relative
  // sd 1 / sqrt(2n) (1.1% for n = 4096); bounds of 5 sd on the mean and 6% on the sd.
  struct Case {
    std::string name;
    double std;
  };
  const double scaled = kStd / std::sqrt(2.0 * 4);
  for (const Case& c : {Case{"layers.1.mlp.linear_fc1.weight", kStd},
                        Case{"layers.1.self_attention.linear_qkv.weight", kStd},
                        Case{"embedding.position_embeddings.weight", kStd},
                        Case{"layers.1.self_attention.linear_proj.weight", scaled},
                        Case{"layers.1.mlp.linear_fc2.weight", scaled}}) {
    const std::vector<float> x = param_of(m, c.name);
    const auto [mean, sd] = moments(x);
    EXPECT_LT(std::abs(mean), 5 * c.std / std::sqrt(static_cast<double>(x.size()))) << c.name;
    EXPECT_NEAR(sd / c.std, 1.0, 0.06) << c.name;
  }
  // Word embedding: the 1000 real rows only.
  std::vector<float> emb = param_of(m, "embedding.word_embeddings.weight");
  emb.resize(1000 * 64);
  const auto [mean, sd] = moments(emb);
  EXPECT_LT(std::abs(mean), 5 * kStd / std::sqrt(64000.0));
  EXPECT_NEAR(sd / kStd, 1.0, 0.02);
}

TEST(ModelShard, Views) {
  ModelShard m = shard({.pp = 2}, 0, 1);
  const ShardTensor& t = m.tensor(0, "layers.3.mlp.linear_fc2.bias");
  std::span<float> g = m.grad(0, "layers.3.mlp.linear_fc2.bias");
  std::span<float> p = m.param(0, "layers.3.mlp.linear_fc2.bias");
  ASSERT_EQ(static_cast<int64_t>(g.size()), t.numel);
  EXPECT_EQ(g.data(), m.chunks()[0].grads.data() + t.offset);
  EXPECT_EQ(p.data(), m.chunks()[0].params.data() + t.offset);
  for (float& x : g) x = 3.0f;
  EXPECT_EQ(m.chunks()[0].grads.data()[t.offset + 1], 3.0f);
}

// The Program's zero grad buffer and grad clip scale ops (ShardOptimizer): every gradient to 0;
// grads times min(1, clip / (norm + 1e-6)) rounded to float, and exactly unchanged below the
// threshold.
TEST(ModelShard, OptimizerZeroesAndClipsTheGradients) {
  ModelShard m = shard({.pp = 2}, 0, 1);
  cpu::CpuBackend backend;
  TrainingHyperparameters hyper;
  hyper.clip_grad = 1.0;
  ShardOptimizer opt(m, backend, m.coord(), 1, false, hyper);
  std::span<float> grads = m.chunks()[0].grads.span();
  ASSERT_GT(grads.size(), 2u);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  const std::vector<float> before(grads.begin(), grads.end());
  opt.clip(0.25, 1);  // norm 0.5 < 1: coefficient 1, bit-identical
  EXPECT_EQ(0, std::memcmp(grads.data(), before.data(), grads.size() * sizeof(float)));
  opt.clip(16.0, 1);  // norm 4: coefficient 1 / (4 + 1e-6)
  const auto coef = static_cast<float>(1.0 / (4.0 + 1e-6));
  for (size_t i = 0; i < grads.size(); ++i) ASSERT_EQ(grads[i], before[i] * coef) << i;
  opt.zero_grad_buffer();
  EXPECT_EQ(copy(grads), std::vector<float>(grads.size(), 0.0f));
  EXPECT_THROW(opt.clip(std::numeric_limits<double>::infinity(), 3), Error);
}

TEST(ModelShard, Errors) {
  const ModelShard m = shard({.pp = 2}, 0, 0);
  try {
    m.tensor(0, "layers.3.mlp.linear_fc1.weight");  // layer 3 is on stage 1
    ADD_FAILURE() << "no throw";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("exec/model_shard"));
    EXPECT_THAT(e.what(), HasSubstr("'layers.3.mlp.linear_fc1.weight'"));
  }
  EXPECT_THROW(m.tensor(1, "layers.0.mlp.linear_fc1.weight"), InvalidArgument);  // no chunk 1
  EXPECT_THROW(m.tensor(-1, "layers.0.mlp.linear_fc1.weight"), InvalidArgument);

  const Scenario s = make({.tp = 2, .pp = 2});
  auto build = [](const Scenario& sc, RankCoord c, double std = kStd) {
    return ModelShard(sc, c, kSeed, std);
  };
  EXPECT_THROW(build(s, RankCoord{.tp = 2}), InvalidArgument);
  EXPECT_THROW(build(s, RankCoord{.pp = 2}), InvalidArgument);
  EXPECT_THROW(build(s, RankCoord{.dp = 1}), InvalidArgument);
  EXPECT_THROW(build(s, RankCoord{.tp = -1}), InvalidArgument);
  EXPECT_THROW(build(s, RankCoord{}, -0.1), InvalidArgument);
  EXPECT_THROW(build(s, RankCoord{}, std::nan("")), InvalidArgument);
  // 4 layers over PP 2 x v 4.
  EXPECT_THROW(build(make({.pp = 2, .v = 4}), RankCoord{}), InvalidArgument);
  // 8 heads over TP 16 (h 64 and ffn 256 divide).
  EXPECT_THROW(build(make({.tp = 16}), RankCoord{}), InvalidArgument);
  try {
    build(make({.tp = 16}), RankCoord{});
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("num_attention_heads"));
  }
}

// ---- mixture of experts -------------------------------------------------------------------------

// A Llama-style MoE (RMSNorm, SwiGLU, no biases): 2 layers, the second dense (moe_layer_freq
// [1, 0]), 4 experts of width 96, a shared expert of width 64.
Scenario make_moe(int64_t tp, int64_t ep, int64_t etp, bool sp) {
  Scenario s = make({.tp = tp, .dp = 4 / tp, .layers = 2, .sp = sp});
  s.model.normalization = Normalization::kRmsNorm;
  s.model.activation = Activation::kSwiglu;
  s.model.add_bias_linear = false;
  s.model.num_moe_experts = 4;
  s.model.moe_router_topk = 2;
  s.model.moe_ffn_hidden_size = 96;
  s.model.moe_shared_expert_intermediate_size = 64;
  s.model.moe_layer_pattern = {1, 0};
  s.parallel.expert_model_parallel_size = ep;
  s.parallel.expert_tensor_parallel_size = etp;
  s.parallel.rank_order = "tp-cp-ep-dp-pp";
  return s;
}

RankCoord at(int64_t tp, int64_t dp) {
  RankCoord c;
  c.tp = tp;
  c.dp = dp;
  return c;
}

TEST(ModelShardMoe, RouterSharedExpertAndLocalExpertsInTheirOwnRegion) {
  // EP 2, ETP 1 on 4 ranks (TP 1, DP 4): expert-DP 2; the expert generator (order
  // tp-cp-ep-dp-pp, sizes etp 1, ep 2, edp 2) puts rank 3 (DP rank 3) at ep 1, edp 1: it holds
  // experts 2 and 3.
  const Scenario s = make_moe(1, 2, 1, false);
  const ModelShard m(s, at(0, 3), kSeed, kStd);
  EXPECT_EQ(m.expert_coord(), (ExpertCoord{0, 1, 1, 0}));
  EXPECT_EQ(m.local_experts(), 2);
  EXPECT_EQ(m.first_local_expert(), 2);
  const auto& ts = m.chunks()[0].tensors;
  std::vector<std::string> expert_names;
  bool in_expert_region = false;
  for (const ShardTensor& t : ts) {
    if (t.expert) in_expert_region = true;
    EXPECT_EQ(t.expert, in_expert_region) << t.name << ": a dense tensor after the expert region";
    if (t.expert) expert_names.push_back(t.name);
  }
  EXPECT_THAT(expert_names, ::testing::ElementsAre("layers.0.mlp.experts.linear_fc1.weight2",
                                                   "layers.0.mlp.experts.linear_fc1.weight3",
                                                   "layers.0.mlp.experts.linear_fc2.weight2",
                                                   "layers.0.mlp.experts.linear_fc2.weight3"));
  EXPECT_EQ(m.tensor(0, "layers.0.mlp.router.weight").shape, (std::vector<int64_t>{4, 64}));
  EXPECT_FALSE(m.tensor(0, "layers.0.mlp.router.weight").tensor_parallel);
  EXPECT_EQ(m.tensor(0, "layers.0.mlp.shared_experts.linear_fc1.weight").shape,
            (std::vector<int64_t>{128, 64}));  // [gate | up] of 64
  EXPECT_EQ(m.tensor(0, "layers.0.mlp.experts.linear_fc1.weight3").shape,
            (std::vector<int64_t>{192, 64}));
  EXPECT_EQ(m.tensor(0, "layers.0.mlp.experts.linear_fc2.weight2").shape,
            (std::vector<int64_t>{64, 96}));
  // The dense layer 1 keeps its MLP; the MoE layer 0 has none.
  EXPECT_NO_THROW(m.tensor(0, "layers.1.mlp.linear_fc1.weight"));
  EXPECT_THROW(m.tensor(0, "layers.0.mlp.linear_fc1.weight"), InvalidArgument);
  // Item ranges: the dense part of layer 0 excludes its experts; the expert range is exactly
  // the expert region.
  const std::vector<int32_t> l0 = {0};
  const auto [eb, ee] = m.item_range(0, l0, /*experts=*/true);
  EXPECT_EQ(eb, m.tensor(0, "layers.0.mlp.experts.linear_fc1.weight2").offset);
  EXPECT_EQ(ee, static_cast<int64_t>(m.chunks()[0].params.size()));
  const auto [db, de] = m.item_range(0, l0);
  EXPECT_LE(de, eb);
  EXPECT_EQ(db, m.tensor(0, "layers.0.input_layernorm.weight").offset);
  const std::vector<int32_t> l1 = {1};
  EXPECT_THROW(m.item_range(0, l1, /*experts=*/true), InvalidArgument);  // dense layer
}

TEST(ModelShardMoe, ExpertParallelShardsHoldTheSingleRankExperts) {
  // EP 1 (every expert on one rank) against EP 2 and EP 4, and ETP 2 (rows of [gate | up] and
  // columns of FC2 split as the dense MLP's): bitwise the same weights.
  const ModelShard one(make_moe(1, 1, 1, false), RankCoord{}, kSeed, kStd);
  for (int64_t ep : {2, 4}) {
    for (int64_t e = 0; e < ep; ++e) {
      // DP rank e is EP rank e (TP 1, order tp-cp-ep-dp-pp).
      const ModelShard m(make_moe(1, ep, 1, false), at(0, e), kSeed, kStd);
      ASSERT_EQ(m.expert_coord().ep, e);
      for (const ShardTensor& t : m.chunks()[0].tensors) {
        SCOPED_TRACE(t.name + " ep " + std::to_string(ep));
        EXPECT_TRUE(same_bits(copy(const_cast<ModelShard&>(m).param(0, t.name)),
                              copy(const_cast<ModelShard&>(one).param(0, t.name))));
      }
    }
  }
  // ETP 2 with TP 2 (SP): expert 1's FC1 rows [gate | up] and FC2 columns from two ETP ranks.
  std::vector<ModelShard> etp;
  for (int64_t r = 0; r < 2; ++r) {
    etp.emplace_back(make_moe(2, 2, 2, true), at(r, 0), kSeed, kStd);
    ASSERT_EQ(etp.back().expert_coord().etp, r);
  }
  const std::vector<float> fc1 = copy(const_cast<ModelShard&>(one).param(0, "layers.0.mlp.experts.linear_fc1.weight1"));
  const std::vector<float> fc2 = copy(const_cast<ModelShard&>(one).param(0, "layers.0.mlp.experts.linear_fc2.weight1"));
  std::vector<float> fc1_back(fc1.size()), fc2_back(fc2.size());
  for (int64_t r = 0; r < 2; ++r) {
    const auto a = etp[static_cast<size_t>(r)].param(0, "layers.0.mlp.experts.linear_fc1.weight1");
    const auto b = etp[static_cast<size_t>(r)].param(0, "layers.0.mlp.experts.linear_fc2.weight1");
    ASSERT_EQ(a.size(), 96u * 64u);
    // local [gate 48 | up 48] rows -> global gate rows [48 r, ...), up rows [96 + 48 r, ...)
    std::copy(a.begin(), a.begin() + 48 * 64, fc1_back.begin() + 48 * 64 * r);
    std::copy(a.begin() + 48 * 64, a.end(), fc1_back.begin() + (96 + 48 * r) * 64);
    for (int64_t row = 0; row < 64; ++row) {
      std::copy(b.begin() + row * 48, b.begin() + (row + 1) * 48,
                fc2_back.begin() + row * 96 + 48 * r);
    }
  }
  EXPECT_TRUE(same_bits(fc1_back, fc1));
  EXPECT_TRUE(same_bits(fc2_back, fc2));
  EXPECT_TRUE(etp[0].tensor(0, "layers.0.mlp.router.weight").sequence_parallel_grad);
}

TEST(ModelShardMoe, Errors) {
  Scenario s = make_moe(1, 4, 1, false);
  s.model.num_moe_experts = 6;  // 6 experts over EP 4
  EXPECT_THAT([&] { ModelShard(s, RankCoord{}, kSeed, kStd); },
              ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("num_moe_experts (6)")));
  s = make_moe(1, 2, 1, false);
  s.model.add_bias_linear = true;
  EXPECT_THAT([&] { ModelShard(s, RankCoord{}, kSeed, kStd); },
              ::testing::ThrowsMessage<UnsupportedError>(HasSubstr("add_bias_linear")));
}

}  // namespace
}  // namespace traintwin::exec
