// GPT dataset: Megatron's --split bounds worked by hand, windows and labels against the token
// stream, the seeded per-epoch shuffle re-derived from its documented definition, Megatron's
// micro-batch sharding over DP ranks, evaluation batches, and the errors (vocabulary mismatch,
// too-short split, bad split string, batch sizes).
#include "exec/gpt_dataset.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace traintwin {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kVocab = 1000;

/// Document d of the test datasets: `lengths[d]` tokens 100*d + p (p = position, mod 100) so that
/// every token says where it came from.
std::vector<int32_t> make_document(int64_t d, int64_t length) {
  std::vector<int32_t> doc(static_cast<size_t>(length));
  for (int64_t p = 0; p < length; ++p) {
    doc[static_cast<size_t>(p)] = static_cast<int32_t>((100 * d + p % 100) % kVocab);
  }
  return doc;
}

class GptDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("traintwin-gptds-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  /// Writes documents of the given lengths (make_document) and returns the prefix; `stream_`
  /// holds all their tokens back to back.
  std::string write(const std::vector<int64_t>& lengths, int64_t vocab = kVocab) {
    const std::string prefix = (dir_ / "ds").string();
    IndexedDatasetWriter writer(prefix, vocab);
    stream_.clear();
    doc_first_token_.clear();
    for (size_t d = 0; d < lengths.size(); ++d) {
      doc_first_token_.push_back(static_cast<int64_t>(stream_.size()));
      const auto doc = make_document(static_cast<int64_t>(d), lengths[d]);
      writer.add_document(doc);
      stream_.insert(stream_.end(), doc.begin(), doc.end());
    }
    doc_first_token_.push_back(static_cast<int64_t>(stream_.size()));
    writer.finalize();
    return prefix;
  }

  static GptDatasetConfig config(const std::string& prefix, int64_t seq, const std::string& split,
                                 uint64_t seed = 1234) {
    return GptDatasetConfig{prefix, seq, seed, split, kVocab};
  }

  fs::path dir_;
  std::vector<int32_t> stream_;
  std::vector<int64_t> doc_first_token_;
};

// --- split ------------------------------------------------------------------------------------

TEST(GptDatasetSplitTest, ParsesAndNormalizesLikeMegatron) {
  const auto w = parse_split_weights("969,30,1");
  EXPECT_DOUBLE_EQ(w[0], 0.969);
  EXPECT_DOUBLE_EQ(w[1], 0.030);
  EXPECT_DOUBLE_EQ(w[2], 0.001);
  // Missing weights are 0; spaces are allowed.
  EXPECT_THAT(parse_split_weights("1"), ElementsAre(1.0, 0.0, 0.0));
  EXPECT_THAT(parse_split_weights(" 3 , 1 "), ElementsAre(0.75, 0.25, 0.0));
  EXPECT_THAT(parse_split_weights("0.5,0.5,0"), ElementsAre(0.5, 0.5, 0.0));
}

TEST(GptDatasetSplitTest, RefusesBadSplitStringsNamingThem) {
  for (const std::string bad :
       {"", "a,b", "1,,1", "1,2,", "-1,2,1", "1,2,3,4", "0,0,0", "1;2;3", "1e999,1"}) {
    try {
      parse_split_weights(bad);
      ADD_FAILURE() << "accepted \"" << bad << "\"";
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), AllOf(HasSubstr("'" + bad + "'"), HasSubstr("969,30,1")));
    }
  }
  EXPECT_THROW(parse_split_weights("-1,2,1"), ConfigError);
  try {
    parse_split_weights("1,-2,1");
    ADD_FAILURE() << "accepted a negative weight";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'-2' is not a number >= 0"));
  }
}

TEST(GptDatasetSplitTest, DocumentBoundsWorkedByHand) {
  // Megatron's docstring example: [90, 9, 1] over 1000 documents -> [0, 900, 990, 1000].
  EXPECT_THAT(split_document_bounds(parse_split_weights("90,9,1"), 1000),
              ElementsAre(0, 900, 990, 1000));
  // 969,30,1 over 1000: 969, +30, +1.
  EXPECT_THAT(split_document_bounds(parse_split_weights("969,30,1"), 1000),
              ElementsAre(0, 969, 999, 1000));
  // Over 10: round(9.69) = 10, round(0.3) = 0, round(0.01) = 0 -> everything is train.
  EXPECT_THAT(split_document_bounds(parse_split_weights("969,30,1"), 10),
              ElementsAre(0, 10, 10, 10));
  // Python's round is half to even: 2.5 -> 2 twice gives 4 of 5, so every bound moves up by 1.
  EXPECT_THAT(split_document_bounds({0.5, 0.5, 0.0}, 5), ElementsAre(0, 3, 5, 5));
  // 1.5 -> 2 twice gives 4 of 3, so every bound moves down by 1.
  EXPECT_THAT(split_document_bounds({0.5, 0.5, 0.0}, 3), ElementsAre(0, 1, 3, 3));
  // 0, 1.5 -> 2, 1.5 -> 2 gives [0, 0, 2, 4]; shifted by -1 Megatron's would be [0, -1, 1, 3];
  // the clamp keeps the train split empty instead of negative.
  EXPECT_THAT(split_document_bounds({0.0, 0.5, 0.5}, 3), ElementsAre(0, 0, 1, 3));
  EXPECT_THAT(split_document_bounds(parse_split_weights("8,1,1"), 0), ElementsAre(0, 0, 0, 0));
  EXPECT_THROW(split_document_bounds({1, 0, 0}, -1), InvalidArgument);
}

TEST(GptDatasetSplitTest, DocumentBoundsInvariantsOverAGrid) {
  const std::vector<std::string> splits = {"969,30,1", "1,1,1", "8,1,1",       "1,0,0", "0,1,0",
                                           "1,2",      "7,2,1", "0.3,0.3,0.4", "99,1,0"};
  for (const auto& split : splits) {
    const auto w = parse_split_weights(split);
    for (int64_t n = 0; n <= 200; ++n) {
      const auto b = split_document_bounds(w, n);
      EXPECT_EQ(b[0], 0);
      EXPECT_EQ(b[3], n);
      for (size_t k = 0; k < 3; ++k) {
        EXPECT_LE(b[k], b[k + 1]) << split << " n=" << n;
        // Each split is within 1.5 documents of its share (rounding 0.5 plus the shift of 1).
        EXPECT_LE(std::abs(static_cast<double>(b[k + 1] - b[k]) - w[k] * static_cast<double>(n)),
                  1.5)
            << split << " n=" << n;
      }
    }
  }
}

// --- windows ----------------------------------------------------------------------------------

TEST_F(GptDatasetTest, SplitCountsAndTokenRanges) {
  // 10 documents of 10..19 tokens; "8,1,1" -> documents [0, 8), [8, 9), [9, 10).
  std::vector<int64_t> lengths(10);
  std::iota(lengths.begin(), lengths.end(), 10);
  const std::string prefix = write(lengths);
  const GptDataset ds(config(prefix, 4, "8,1,1"), {4, 2, 1});
  EXPECT_EQ(ds.document_range(DataSplit::kTrain), std::make_pair(int64_t{0}, int64_t{8}));
  EXPECT_EQ(ds.document_range(DataSplit::kValidation), std::make_pair(int64_t{8}, int64_t{9}));
  EXPECT_EQ(ds.document_range(DataSplit::kTest), std::make_pair(int64_t{9}, int64_t{10}));
  // Train tokens 10 + ... + 17 = 108, validation 18, test 19.
  EXPECT_EQ(ds.token_range(DataSplit::kTrain), std::make_pair(int64_t{0}, int64_t{108}));
  EXPECT_EQ(ds.token_range(DataSplit::kValidation), std::make_pair(int64_t{108}, int64_t{126}));
  EXPECT_EQ(ds.token_range(DataSplit::kTest), std::make_pair(int64_t{126}, int64_t{145}));
  // (T - 1) / s: 107 / 4 = 26, 17 / 4 = 4, 18 / 4 = 4.
  EXPECT_EQ(ds.num_samples(DataSplit::kTrain), 26);
  EXPECT_EQ(ds.num_samples(DataSplit::kValidation), 4);
  EXPECT_EQ(ds.num_samples(DataSplit::kTest), 4);
  EXPECT_EQ(ds.num_micro_batches(), 2);
}

TEST_F(GptDatasetTest, EmptyDocumentsCountInTheSplit) {
  // Documents 1 and 3 are empty (no sequences). "1,1" over 4 documents -> [0, 2), [2, 4).
  const std::string prefix = write({7, 0, 9, 0});
  const GptDataset ds(config(prefix, 3, "1,1"), {1, 1, 1});
  EXPECT_EQ(ds.token_range(DataSplit::kTrain), std::make_pair(int64_t{0}, int64_t{7}));
  EXPECT_EQ(ds.token_range(DataSplit::kValidation), std::make_pair(int64_t{7}, int64_t{16}));
  EXPECT_EQ(ds.token_range(DataSplit::kTest), std::make_pair(int64_t{16}, int64_t{16}));
  EXPECT_EQ(ds.num_samples(DataSplit::kTrain), 2);       // 6 / 3
  EXPECT_EQ(ds.num_samples(DataSplit::kValidation), 2);  // 8 / 3
  EXPECT_EQ(ds.num_samples(DataSplit::kTest), 0);
}

TEST_F(GptDatasetTest, WindowsAreStridedSlicesOfTheSplitStream) {
  const std::string prefix = write({5, 3, 8, 2, 6, 4, 7, 9});
  const int64_t s = 3;
  const GptDataset ds(config(prefix, s, "3,1"), {1, 1, 1});
  for (const DataSplit split : {DataSplit::kTrain, DataSplit::kValidation}) {
    const auto [first, last] = ds.token_range(split);
    ASSERT_EQ(ds.num_samples(split), (last - first - 1) / s);
    std::vector<int32_t> window(static_cast<size_t>(s + 1));
    for (int64_t i = 0; i < ds.num_samples(split); ++i) {
      ds.read_sample(split, i, window);
      const auto begin = stream_.begin() + first + i * s;
      EXPECT_TRUE(std::equal(window.begin(), window.end(), begin)) << "sample " << i;
    }
    // The last window ends inside the split.
    EXPECT_LE(first + (ds.num_samples(split) - 1) * s + s + 1, last);
  }
  // Train = documents [0, 6) of 8: 5+3+8+2+6+4 = 28 tokens; sample 1 = tokens [3, 7): the last
  // two of document 0 (3, 4), then document 1's first two (100, 101).
  std::vector<int32_t> window(4);
  ds.read_sample(DataSplit::kTrain, 1, window);
  EXPECT_THAT(window, ElementsAre(3, 4, 100, 101));
  EXPECT_THROW(ds.read_sample(DataSplit::kTrain, ds.num_samples(DataSplit::kTrain), window),
               InvalidArgument);
  std::vector<int32_t> short_window(3);
  EXPECT_THROW(ds.read_sample(DataSplit::kTrain, 0, short_window), InvalidArgument);
}

TEST_F(GptDatasetTest, LabelsAreTokensShiftedByOne) {
  const std::string prefix = write({40, 33, 27, 50, 12});
  const int64_t s = 8, b = 3;
  const GptDataset ds(config(prefix, s, "4,1"), {6, b, 1});
  std::vector<int32_t> tokens(static_cast<size_t>(b * s)), labels(tokens.size());
  for (int64_t it = 0; it < 5; ++it) {
    for (int64_t j = 0; j < ds.num_micro_batches(); ++j) {
      ds.micro_batch(it, j, 0, tokens, labels);
      for (int64_t r = 0; r < b; ++r) {
        const int64_t sample = ds.train_sample(ds.global_sample_index(it, j, 0, r));
        const auto first = static_cast<size_t>(sample * s);  // train starts at token 0
        for (int64_t t = 0; t < s; ++t) {
          const auto k = static_cast<size_t>(r * s + t);
          EXPECT_EQ(tokens[k], stream_[first + static_cast<size_t>(t)]);
          EXPECT_EQ(labels[k], stream_[first + static_cast<size_t>(t) + 1]);
          if (t + 1 < s) EXPECT_EQ(labels[k], tokens[k + 1]);
        }
      }
    }
  }
  std::vector<int32_t> wrong(static_cast<size_t>(b * s - 1));
  EXPECT_THROW(ds.micro_batch(0, 0, 0, wrong, labels), InvalidArgument);
  EXPECT_THROW(ds.micro_batch(0, 0, 0, tokens, wrong), InvalidArgument);
}

// --- shuffle ----------------------------------------------------------------------------------

/// The documented shuffle, written out again from the header's definition.
std::vector<int64_t> reference_order(uint64_t seed, int split, uint64_t epoch, int64_t n) {
  std::seed_seq seq{static_cast<uint32_t>(seed & 0xffffffffu), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(split), static_cast<uint32_t>(epoch & 0xffffffffu),
                    static_cast<uint32_t>(epoch >> 32)};
  std::mt19937_64 engine(seq);
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t i = n - 1; i >= 1; --i) {
    const auto bound = static_cast<uint64_t>(i + 1);
    uint64_t r = engine();
    while (r < (~bound + 1) % bound) r = engine();
    std::swap(perm[static_cast<size_t>(i)], perm[r % bound]);
  }
  return perm;
}

TEST(GptDatasetShuffleTest, FisherYatesDrivenByMt19937SeededFromSeedSplitEpoch) {
  for (const uint64_t seed : {uint64_t{0}, uint64_t{1234}, uint64_t{0x123456789abcdefULL}}) {
    for (const int64_t epoch : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1} << 33}) {
      for (const int64_t n : {0, 1, 2, 17, 1000}) {
        EXPECT_EQ(shuffled_sample_order(seed, DataSplit::kTrain, epoch, n),
                  reference_order(seed, 0, static_cast<uint64_t>(epoch), n));
      }
    }
  }
  EXPECT_EQ(shuffled_sample_order(5, DataSplit::kValidation, 2, 50), reference_order(5, 1, 2, 50));
  EXPECT_THROW(shuffled_sample_order(1, DataSplit::kTrain, -1, 10), InvalidArgument);
  EXPECT_THROW(shuffled_sample_order(1, DataSplit::kTrain, 0, -1), InvalidArgument);
}

TEST(GptDatasetShuffleTest, EachEpochIsAPermutationAndEpochsSeedsSplitsDiffer) {
  const int64_t n = 200;
  std::vector<int64_t> identity(n);
  std::iota(identity.begin(), identity.end(), 0);
  const auto e0 = shuffled_sample_order(42, DataSplit::kTrain, 0, n);
  const auto e1 = shuffled_sample_order(42, DataSplit::kTrain, 1, n);
  for (const auto* order : {&e0, &e1}) {
    auto sorted = *order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, identity);
  }
  EXPECT_NE(e0, identity);
  EXPECT_NE(e0, e1);
  EXPECT_NE(e0, shuffled_sample_order(43, DataSplit::kTrain, 0, n));
  EXPECT_NE(e0, shuffled_sample_order(42, DataSplit::kValidation, 0, n));
  EXPECT_EQ(e0, shuffled_sample_order(42, DataSplit::kTrain, 0, n));
}

TEST_F(GptDatasetTest, DeterministicAndWrapsIntoTheNextEpoch) {
  const std::string prefix = write({30, 25, 41, 18, 33, 29, 40});
  const int64_t s = 4, b = 2, B = 6;
  const GptDataset a(config(prefix, s, "6,1", 99), {B, b, 1});
  const GptDataset again(config(prefix, s, "6,1", 99), {B, b, 1});
  const GptDataset other_seed(config(prefix, s, "6,1", 100), {B, b, 1});
  const int64_t n = a.num_samples(DataSplit::kTrain);
  ASSERT_EQ(n, (30 + 25 + 41 + 18 + 33 + 29 - 1) / s);  // 175 / 4 = 43
  // Global sample k -> epoch k / n, position k % n.
  for (int64_t k = 0; k < 3 * n; ++k) {
    EXPECT_EQ(a.train_sample(k), a.epoch_order(k / n)[static_cast<size_t>(k % n)]) << k;
  }
  // Each epoch visits every sample once; consecutive epochs are ordered differently.
  for (int64_t e = 0; e < 3; ++e) {
    std::set<int64_t> seen;
    for (int64_t k = e * n; k < (e + 1) * n; ++k) seen.insert(a.train_sample(k));
    EXPECT_EQ(static_cast<int64_t>(seen.size()), n);
    EXPECT_EQ(*seen.begin(), 0);
    EXPECT_EQ(*seen.rbegin(), n - 1);
  }
  EXPECT_NE(a.epoch_order(0), a.epoch_order(1));
  // Same config -> same batches, across the epoch boundary (iteration 7 holds global samples
  // 42..47 of which 43..47 are epoch 1); another seed -> other batches.
  std::vector<int32_t> t1(static_cast<size_t>(b * s)), l1(t1.size()), t2(t1.size()), l2(t1.size());
  bool any_differs = false;
  for (int64_t it = 0; it < 20; ++it) {
    for (int64_t j = 0; j < a.num_micro_batches(); ++j) {
      a.micro_batch(it, j, 0, t1, l1);
      again.micro_batch(it, j, 0, t2, l2);
      EXPECT_EQ(t1, t2);
      EXPECT_EQ(l1, l2);
      other_seed.micro_batch(it, j, 0, t2, l2);
      any_differs = any_differs || t1 != t2;
    }
  }
  EXPECT_TRUE(any_differs);
}

// --- sharding ---------------------------------------------------------------------------------

TEST_F(GptDatasetTest, GlobalSampleIndexFollowsMegatronPretrainingSampler) {
  const std::string prefix = write({200, 200});
  // B = 12, b = 2, D = 3 -> 2 micro-batches; micro-batch j of rank d: it*12 + j*6 + d*2 + [0, 2).
  const GptDataset ds(config(prefix, 4, "1,1"), {12, 2, 3});
  ASSERT_EQ(ds.num_micro_batches(), 2);
  EXPECT_EQ(ds.global_sample_index(0, 0, 0, 0), 0);
  EXPECT_EQ(ds.global_sample_index(0, 0, 1, 0), 2);
  EXPECT_EQ(ds.global_sample_index(0, 0, 2, 1), 5);
  EXPECT_EQ(ds.global_sample_index(0, 1, 0, 0), 6);
  EXPECT_EQ(ds.global_sample_index(3, 1, 2, 1), 36 + 6 + 4 + 1);
  for (int64_t it = 0; it < 4; ++it) {
    std::set<int64_t> all;
    for (int64_t j = 0; j < 2; ++j) {
      for (int64_t d = 0; d < 3; ++d) {
        for (int64_t r = 0; r < 2; ++r) {
          EXPECT_TRUE(all.insert(ds.global_sample_index(it, j, d, r)).second);
        }
      }
    }
    EXPECT_EQ(static_cast<int64_t>(all.size()), 12);
    EXPECT_EQ(*all.begin(), it * 12);
    EXPECT_EQ(*all.rbegin(), it * 12 + 11);
  }
  EXPECT_THROW(ds.global_sample_index(-1, 0, 0, 0), InvalidArgument);
  EXPECT_THROW(ds.global_sample_index(0, 2, 0, 0), InvalidArgument);
  EXPECT_THROW(ds.global_sample_index(0, 0, 3, 0), InvalidArgument);
  EXPECT_THROW(ds.global_sample_index(0, 0, 0, 2), InvalidArgument);
}

TEST_F(GptDatasetTest, TwoDataParallelRanksSeeTheSameSamplesAsOne) {
  const std::string prefix = write({60, 45, 70, 38, 52, 20});
  const int64_t s = 5, b = 2, B = 8;
  const GptDataset dp1(config(prefix, s, "5,1"), {B, b, 1});  // 4 micro-batches
  const GptDataset dp2(config(prefix, s, "5,1"), {B, b, 2});  // 2 micro-batches per rank
  ASSERT_EQ(dp1.num_micro_batches(), 4);
  ASSERT_EQ(dp2.num_micro_batches(), 2);
  const auto row = static_cast<size_t>(b * s);
  std::vector<int32_t> t1(row), l1(row), t2(row), l2(row);
  for (int64_t it = 0; it < 12; ++it) {  // 12 * 8 = 96 > 264 / 5 = 52 samples
    std::multiset<std::vector<int32_t>> rows1, rows2;
    for (int64_t j = 0; j < 2; ++j) {
      for (int64_t d = 0; d < 2; ++d) {
        // DP=2 micro-batch j of rank d holds it*8 + 4j + 2d + [0, 2) = DP=1 micro-batch 2j + d.
        dp2.micro_batch(it, j, d, t2, l2);
        dp1.micro_batch(it, 2 * j + d, 0, t1, l1);
        EXPECT_EQ(t1, t2);
        EXPECT_EQ(l1, l2);
        for (int64_t r = 0; r < b; ++r) {
          rows2.insert(std::vector<int32_t>(t2.begin() + r * s, t2.begin() + (r + 1) * s));
        }
      }
    }
    for (int64_t j = 0; j < 4; ++j) {
      dp1.micro_batch(it, j, 0, t1, l1);
      for (int64_t r = 0; r < b; ++r) {
        rows1.insert(std::vector<int32_t>(t1.begin() + r * s, t1.begin() + (r + 1) * s));
      }
    }
    EXPECT_EQ(rows1, rows2);
    // And the union is the iteration's B consecutive global samples.
    std::multiset<std::vector<int32_t>> expected;
    std::vector<int32_t> window(static_cast<size_t>(s + 1));
    for (int64_t k = it * B; k < (it + 1) * B; ++k) {
      dp1.read_sample(DataSplit::kTrain, dp1.train_sample(k), window);
      expected.insert(std::vector<int32_t>(window.begin(), window.end() - 1));
    }
    EXPECT_EQ(rows1, expected);
  }
}

TEST_F(GptDatasetTest, EvalBatchesReadValidationInOrderAndWrap) {
  // "1,1" over 4 documents: validation = documents 2, 3 = 20 + 13 = 33 tokens, 32 / 4 = 8 samples.
  const std::string prefix = write({30, 30, 20, 13});
  const int64_t s = 4, b = 1, B = 6;
  const GptDataset ds(config(prefix, s, "1,1"), {B, b, 2});
  ASSERT_EQ(ds.num_samples(DataSplit::kValidation), 8);
  // Batch 1: validation samples 6, 7, 0, 1, 2, 3; rank 1 of micro-batch 1 holds 6+2+1 = 9 -> 1.
  EXPECT_EQ(ds.eval_sample_index(1, 1, 1, 0), 1);
  EXPECT_EQ(ds.eval_sample_index(1, 0, 0, 0), 6);
  EXPECT_EQ(ds.eval_sample_index(2, 0, 1, 0), (12 + 1) % 8);
  std::vector<int32_t> tokens(static_cast<size_t>(b * s)), labels(tokens.size());
  const int64_t first = ds.token_range(DataSplit::kValidation).first;
  ASSERT_EQ(first, 60);
  for (int64_t k = 0; k < 4; ++k) {
    for (int64_t j = 0; j < ds.num_micro_batches(); ++j) {
      for (int64_t d = 0; d < 2; ++d) {
        ds.eval_micro_batch(k, j, d, tokens, labels);
        const int64_t v = (k * B + j * b * 2 + d * b) % 8;
        const auto begin = stream_.begin() + first + v * s;
        EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), begin));
        EXPECT_TRUE(std::equal(labels.begin(), labels.end(), begin + 1));
      }
    }
  }
  // Validation sample 0 starts with document 2's first token.
  ds.eval_micro_batch(0, 0, 0, tokens, labels);
  EXPECT_THAT(tokens, ElementsAre(200, 201, 202, 203));
}

// --- errors -----------------------------------------------------------------------------------

TEST_F(GptDatasetTest, VocabularyMismatchNamesTheFile) {
  // Token 999 (document 9, position 99) is beyond a 950-entry vocabulary.
  const std::string prefix = write(std::vector<int64_t>(10, 100));
  GptDatasetConfig c = config(prefix, 8, "9,1");
  c.vocab_size = 950;
  try {
    GptDataset ds(c, {1, 1, 1});
    ADD_FAILURE() << "opened with a too-small vocabulary";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("vocabulary mismatch"), HasSubstr(prefix + ".bin"),
                                HasSubstr("token id 950"), HasSubstr("[0, 950)")));
  }
  c.vocab_size = 1000;
  EXPECT_NO_THROW(GptDataset(c, {1, 1, 1}));
}

TEST_F(GptDatasetTest, TooShortSplitIsRefusedWithNumbers) {
  // Train = documents [0, 2) = 6 tokens < seq_length + 1 = 8.
  const std::string prefix = write({3, 3, 50, 50});
  try {
    GptDataset ds(config(prefix, 7, "1,1"), {1, 1, 1});
    ADD_FAILURE() << "opened a too-short train split";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(prefix), HasSubstr("\"1,1\""), HasSubstr("train"),
                                HasSubstr("documents [0, 2) of 4"), HasSubstr("has 6 tokens"),
                                HasSubstr("seq_length + 1 = 8")));
  }
  // With {50, 50, 3, 3} train [0, 2) has 100 tokens, validation [2, 4) 6: too short only when
  // evaluation needs it.
  const std::string prefix2 = write({50, 50, 3, 3});
  try {
    GptDataset ds(config(prefix2, 7, "1,1"), {1, 1, 1});
    ADD_FAILURE() << "opened a too-short validation split";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("validation"), HasSubstr("documents [2, 4) of 4"),
                                HasSubstr("has 6 tokens")));
  }
  const GptDataset no_eval(config(prefix2, 7, "1,1"), {1, 1, 1}, /*need_validation=*/false);
  EXPECT_EQ(no_eval.num_samples(DataSplit::kValidation), 0);
  std::vector<int32_t> tokens(7), labels(7);
  EXPECT_THROW(no_eval.eval_micro_batch(0, 0, 0, tokens, labels), DataError);
  EXPECT_NO_THROW(no_eval.micro_batch(0, 0, 0, tokens, labels));
}

TEST_F(GptDatasetTest, ConfigErrors) {
  const std::string prefix = write({50, 50, 50});
  auto expect_config_error = [&](const GptDatasetConfig& c, const GptBatchConfig& batch,
                                 const std::string& needle, bool need_validation = true) {
    try {
      GptDataset ds(c, batch, need_validation);
      ADD_FAILURE() << "accepted; expected " << needle;
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr(needle));
    }
  };
  expect_config_error(config(prefix, 4, "2,1"), {10, 2, 2}, "not divisible");
  expect_config_error(config(prefix, 4, "2,1"), {0, 1, 1}, "global_batch_size");
  expect_config_error(config(prefix, 4, "2,1"), {4, 0, 1}, "micro_batch_size");
  expect_config_error(config(prefix, 4, "2,1"), {4, 1, 0}, "data_parallel_size");
  expect_config_error(config(prefix, 0, "2,1"), {1, 1, 1}, "seq_length");
  expect_config_error(config(prefix, 4, "2;1"), {1, 1, 1}, "'2;1'");
  expect_config_error(config(prefix, 4, "0,1,1"), {1, 1, 1}, "train split weight 0");
  expect_config_error(config(prefix, 4, "1,0,1"), {1, 1, 1}, "validation split weight 0");
  EXPECT_NO_THROW(GptDataset(config(prefix, 4, "1,0,1"), {1, 1, 1}, false));
  EXPECT_THROW(GptDataset(config((dir_ / "missing").string(), 4, "1"), {1, 1, 1}, false), Error);
}

}  // namespace
}  // namespace traintwin
