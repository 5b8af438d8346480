// Building blocks of the tensor-parallel executor: the counter-based RNG (reference splitmix64
// values, determinism, moments of the uniforms and normals), vocab-parallel embedding and
// cross-entropy against the unsharded layers of exec/cpu/ for 1, 2 and 4 vocabulary shards (the
// TP all-reduces simulated by max/sum over shards), position embedding and dropout computed as
// shards against the whole block, and every backward against central finite differences in
// float64.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "exec/counter_rng.hpp"
#include "exec/cpu/cross_entropy.hpp"
#include "exec/cpu/dropout.hpp"
#include "exec/cpu/embedding.hpp"
#include "exec/cpu/position_embedding.hpp"
#include "exec/cpu/vocab_parallel_cross_entropy.hpp"
#include "exec/cpu/vocab_parallel_embedding.hpp"
#include "tests/exec/gradient_check.hpp"

namespace traintwin::exec {
namespace {

using ::testing::HasSubstr;


// Runs fn and expects InvalidArgument whose message contains `needle`.
void expect_invalid(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected InvalidArgument mentioning '" << needle << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr(needle));
  }
}

// Shard k of n of a vocabulary of V entries: [V k / n, V (k+1) / n) (uneven when n does not
// divide V, which the layers allow).
struct Shard {
  int64_t start;
  int64_t size;
};
std::vector<Shard> split(int64_t vocab, int64_t n) {
  std::vector<Shard> shards;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t begin = vocab * k / n;
    shards.push_back({begin, vocab * (k + 1) / n - begin});
  }
  return shards;
}

// Columns [start, start + size) of a row-major [rows, cols] matrix.
Vec columns(const Vec& m, int64_t rows, int64_t cols, int64_t start, int64_t size) {
  Vec out(static_cast<size_t>(rows * size));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < size; ++c) out[r * size + c] = m[r * cols + start + c];
  }
  return out;
}

// Rows [start, start + size) of a row-major [rows, cols] matrix.
Vec rows_of(const Vec& m, int64_t cols, int64_t start, int64_t size) {
  return Vec(m.begin() + start * cols, m.begin() + (start + size) * cols);
}

// ---------------------------------------------------------------------------------------------
// Counter-based RNG

TEST(CounterRngTest, SplitMix64MatchesReferenceSequence) {
  // First outputs of Vigna's splitmix64.c seeded with 0.
  static_assert(splitmix64(0) == 0xe220a8397b1dcdafULL);
  EXPECT_EQ(splitmix64(kSplitMix64Gamma), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(splitmix64(2 * kSplitMix64Gamma), 0x06c45d188009454fULL);
  EXPECT_EQ(counter_hash(1, 2, 3), splitmix64(splitmix64(splitmix64(1) ^ 2) ^ 3));
}

TEST(CounterRngTest, IsDeterministicAndDependsOnEveryArgument) {
  EXPECT_EQ(counter_hash(42, 7, 1000), counter_hash(42, 7, 1000));
  EXPECT_EQ(counter_normal(42, 7, 1000), counter_normal(42, 7, 1000));
  EXPECT_NE(counter_hash(42, 7, 1000), counter_hash(43, 7, 1000));
  EXPECT_NE(counter_hash(42, 7, 1000), counter_hash(42, 8, 1000));
  EXPECT_NE(counter_hash(42, 7, 1000), counter_hash(42, 7, 1001));
  // Seed and stream are not interchangeable.
  EXPECT_NE(counter_hash(1, 2, 0), counter_hash(2, 1, 0));
  // A bijection of the index for fixed (seed, stream): 1e5 indices, 1e5 distinct hashes.
  std::set<uint64_t> seen;
  for (uint64_t i = 0; i < 100000; ++i) seen.insert(counter_hash(5, 9, i));
  EXPECT_EQ(seen.size(), 100000u);
}

TEST(CounterRngTest, UniformsLieInUnitIntervalWithUniformMoments) {
  constexpr int kN = 100000;
  double sum = 0, sum_sq = 0;
  std::vector<int> bins(10, 0);
  for (int i = 0; i < kN; ++i) {
    const double u = counter_uniform(123, 4, static_cast<uint64_t>(i));
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    // Multiples of 2^-53.
    ASSERT_EQ(std::ldexp(u, 53), std::floor(std::ldexp(u, 53)));
    sum += u;
    sum_sq += u * u;
    ++bins[static_cast<size_t>(u * 10)];
  }
  const double mean = sum / kN;
  const double var = sum_sq / kN - mean * mean;
  // Standard errors: mean 0.29/sqrt(N) = 9.1e-4, variance 2.4e-4; bounds ~6 sigma.
  EXPECT_NEAR(mean, 0.5, 0.0055);
  EXPECT_NEAR(var, 1.0 / 12, 0.0015);
  // Each decile 1e4 +- 6 sigma (sigma = sqrt(N 0.1 0.9) = 95).
  for (int count : bins) EXPECT_NEAR(count, kN / 10, 570);
}

TEST(CounterRngTest, NormalsHaveStandardNormalMoments) {
  constexpr int kN = 100000;
  double s1 = 0, s2 = 0, s3 = 0, s4 = 0;
  int within_one = 0;
  for (int i = 0; i < kN; ++i) {
    const double z = counter_normal(2024, stream_id({3, 1, 4}), static_cast<uint64_t>(i));
    ASSERT_TRUE(std::isfinite(z));
    ASSERT_LE(std::abs(z), 8.6);
    s1 += z;
    s2 += z * z;
    s3 += z * z * z;
    s4 += z * z * z * z;
    if (std::abs(z) < 1) ++within_one;
  }
  // Standard errors: mean 1/sqrt(N) = 0.0032, variance sqrt(2/N) = 0.0045, third moment
  // sqrt(15/N) = 0.012, fourth moment sqrt(96/N) = 0.031, P(|z| < 1) 0.0015. Bounds ~6 sigma.
  EXPECT_NEAR(s1 / kN, 0.0, 0.02);
  EXPECT_NEAR(s2 / kN, 1.0, 0.027);
  EXPECT_NEAR(s3 / kN, 0.0, 0.075);
  EXPECT_NEAR(s4 / kN, 3.0, 0.19);
  EXPECT_NEAR(static_cast<double>(within_one) / kN, 0.682689, 0.009);
}

TEST(CounterRngTest, DistinctStreamsAreUncorrelated) {
  constexpr int kN = 10000;
  const uint64_t a = stream_id({0, 0, 1});
  const uint64_t b = stream_id({0, 0, 2});
  double sab = 0, saa = 0, sbb = 0;
  int equal = 0;
  for (int i = 0; i < kN; ++i) {
    const double x = counter_uniform(7, a, static_cast<uint64_t>(i)) - 0.5;
    const double y = counter_uniform(7, b, static_cast<uint64_t>(i)) - 0.5;
    if (x == y) ++equal;
    sab += x * y;
    saa += x * x;
    sbb += y * y;
  }
  EXPECT_EQ(equal, 0);
  // Correlation: standard error 1/sqrt(N) = 0.01.
  EXPECT_LT(std::abs(sab / std::sqrt(saa * sbb)), 0.06);
}

TEST(CounterRngTest, StreamIdDependsOnOrderAndCount) {
  EXPECT_EQ(stream_id({1, 2, 3}), stream_id({1, 2, 3}));
  EXPECT_NE(stream_id({1, 2}), stream_id({2, 1}));
  EXPECT_NE(stream_id({}), stream_id({0}));
  EXPECT_NE(stream_id({0}), stream_id({0, 0}));
  EXPECT_NE(stream_id({1, 2, 3}), stream_id({1, 2, 4}));
  // A table of (iteration, layer, site) ids has no collisions.
  std::set<uint64_t> ids;
  for (uint64_t it = 0; it < 20; ++it) {
    for (uint64_t layer = 0; layer < 12; ++layer) {
      for (uint64_t site = 0; site < 3; ++site) ids.insert(stream_id({it, layer, site}));
    }
  }
  EXPECT_EQ(ids.size(), 20u * 12u * 3u);
}

}  // namespace
}  // namespace traintwin::exec

namespace traintwin::exec::cpu {
namespace {

// Shapes: B = 2, T = 3, C = 4, V = 11 (not divisible by 2 or 4, so shards are uneven).
constexpr int64_t kB = 2;
constexpr int64_t kT = 3;
constexpr int64_t kC = 4;
constexpr int64_t kV = 11;

// ---------------------------------------------------------------------------------------------
// Vocab-parallel embedding

class VocabParallelEmbeddingTest : public ::testing::TestWithParam<int64_t> {};

// The sum over shards (the TP all-reduce) equals the word part of the unsharded embedding, and
// every token is looked up on exactly one shard; the backward pieces stacked are the unsharded
// dwte.
TEST_P(VocabParallelEmbeddingTest, ShardsAddUpToTheUnshardedEmbedding) {
  const int64_t n = GetParam();
  const std::vector<int32_t> tokens = {0, 10, 5, 5, 3, 8};  // first and last ids, a repeat
  const Vec wte = random_vec(kV * kC, 1);
  const Vec wpe_zero(kT * kC, 0.0);
  const Vec dout = random_vec(kB * kT * kC, 2);
  Vec expected(kB * kT * kC);
  embedding_forward<double>(expected, tokens, wte, wpe_zero, kB, kT, kC, kV);
  Vec expected_dwte(wte.size()), dwpe(wpe_zero.size());
  embedding_backward<double>(expected_dwte, dwpe, dout, tokens, kB, kT, kC, kV);

  Vec sum(expected.size(), 0.0);
  std::vector<int> owners(tokens.size(), 0);
  Vec stacked_dwte;
  for (const Shard& s : split(kV, n)) {
    const Vec wte_local = rows_of(wte, kC, s.start, s.size);
    Vec out(expected.size(), -7.0);  // overwritten
    vocab_parallel_embedding_forward<double>(out, tokens, wte_local, kB, kT, kC, s.start, s.size,
                                             kV);
    for (size_t i = 0; i < tokens.size(); ++i) {
      const bool in_range = tokens[i] >= s.start && tokens[i] < s.start + s.size;
      owners[i] += in_range ? 1 : 0;
      for (int64_t c = 0; c < kC; ++c) {
        const double x = out[i * kC + c];
        if (!in_range) EXPECT_EQ(x, 0.0);
        sum[i * kC + c] += x;
      }
    }
    Vec dwte_local(wte_local.size(), 0.0);
    vocab_parallel_embedding_backward<double>(dwte_local, dout, tokens, kB, kT, kC, s.start, s.size,
                                              kV);
    stacked_dwte.insert(stacked_dwte.end(), dwte_local.begin(), dwte_local.end());
  }
  for (int owner_count : owners) EXPECT_EQ(owner_count, 1);
  EXPECT_EQ(sum, expected);  // exact: one nonzero term per element
  ASSERT_EQ(stacked_dwte.size(), expected_dwte.size());
  for (size_t i = 0; i < stacked_dwte.size(); ++i) {
    EXPECT_NEAR(stacked_dwte[i], expected_dwte[i], 1e-15) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Shards, VocabParallelEmbeddingTest, ::testing::Values(1, 2, 4));

TEST(VocabParallelEmbeddingGradTest, BackwardMatchesFiniteDifferences) {
  // Shard [4, 8) of 11; repeated in-range tokens accumulate, out-of-range ones contribute 0.
  const std::vector<int32_t> tokens = {4, 7, 7, 0, 10, 5};
  Vec wte_local = random_vec(4 * kC, 3);
  const Vec dout = random_vec(kB * kT * kC, 4);
  Vec out(dout.size());
  auto loss = [&] {
    vocab_parallel_embedding_forward<double>(out, tokens, wte_local, kB, kT, kC, 4, 4, kV);
    return dot(out, dout);
  };
  Vec dwte_local(wte_local.size(), 0.0);
  vocab_parallel_embedding_backward<double>(dwte_local, dout, tokens, kB, kT, kC, 4, 4, kV);
  expect_gradient(wte_local, dwte_local, loss, "dwte_local");
  // Row 6 - 4 = 2 (token 6 absent) gets no gradient.
  for (int64_t c = 0; c < kC; ++c) EXPECT_EQ(dwte_local[2 * kC + c], 0.0);
}

TEST(VocabParallelEmbeddingErrorTest, RejectsTokensAndShardsOutsideTheVocabulary) {
  Vec out(kC), wte_local(4 * kC), dwte_local(4 * kC);
  const std::vector<int32_t> too_big = {11};
  const std::vector<int32_t> negative = {-1};
  const std::vector<int32_t> elsewhere = {10};  // valid, on another shard
  expect_invalid(
      [&] {
        vocab_parallel_embedding_forward<double>(out, too_big, wte_local, 1, 1, kC, 4, 4, kV);
      },
      "token 11 at position 0 is outside [0, 11)");
  expect_invalid(
      [&] {
        vocab_parallel_embedding_backward<double>(dwte_local, out, negative, 1, 1, kC, 4, 4, kV);
      },
      "token -1");
  expect_invalid(
      [&] {
        vocab_parallel_embedding_forward<double>(out, elsewhere, wte_local, 1, 1, kC, 8, 4, kV);
      },
      "vocab_start 8");
  expect_invalid(
      [&] {
        vocab_parallel_embedding_forward<double>(out, elsewhere, Vec(3 * kC), 1, 1, kC, 4, 4, kV);
      },
      "wte_local has 12 elements, expected 16");
  vocab_parallel_embedding_forward<double>(out, elsewhere, wte_local, 1, 1, kC, 4, 4, kV);
  EXPECT_EQ(out, Vec(kC, 0.0));
}

// ---------------------------------------------------------------------------------------------
// Position embedding

// Sequence shards [0, 1) and [1, 3) with their offsets give the whole block, and the whole
// block equals the position part of the unsharded embedding.
TEST(PositionEmbeddingTest, SequenceShardsEqualTheWholeBlock) {
  constexpr int64_t kMaxT = 5;
  const Vec wpe = random_vec(kMaxT * kC, 5);
  const Vec base = random_vec(kB * kT * kC, 6);  // e.g. the word embeddings
  Vec whole = base;
  position_embedding_forward<double>(whole, wpe, kB, kT, kC, 0);

  const std::vector<int32_t> zero_tokens(kB * kT, 0);
  Vec expected(whole.size());
  embedding_forward<double>(expected, zero_tokens, Vec(kC, 0.0), wpe, kB, kT, kC, 1);
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_EQ(whole[i], base[i] + expected[i]);

  const int64_t offsets[] = {0, 1};
  const int64_t lengths[] = {1, 2};
  for (int k = 0; k < 2; ++k) {
    Vec block(kB * lengths[k] * kC);
    for (int64_t b = 0; b < kB; ++b) {
      for (int64_t t = 0; t < lengths[k]; ++t) {
        for (int64_t c = 0; c < kC; ++c) {
          block[(b * lengths[k] + t) * kC + c] = base[(b * kT + offsets[k] + t) * kC + c];
        }
      }
    }
    position_embedding_forward<double>(block, wpe, kB, lengths[k], kC, offsets[k]);
    for (int64_t b = 0; b < kB; ++b) {
      for (int64_t t = 0; t < lengths[k]; ++t) {
        for (int64_t c = 0; c < kC; ++c) {
          EXPECT_EQ(block[(b * lengths[k] + t) * kC + c],
                    whole[(b * kT + offsets[k] + t) * kC + c]);
        }
      }
    }
  }
}

TEST(PositionEmbeddingTest, BackwardMatchesFiniteDifferences) {
  constexpr int64_t kMaxT = 8;
  constexpr int64_t kOffset = 3;  // rows 3..5 are read; the others get no gradient
  Vec wpe = random_vec(kMaxT * kC, 7);
  const Vec base = random_vec(kB * kT * kC, 8);
  const Vec dout = random_vec(kB * kT * kC, 9);
  Vec out(base.size());
  auto loss = [&] {
    out = base;
    position_embedding_forward<double>(out, wpe, kB, kT, kC, kOffset);
    return dot(out, dout);
  };
  Vec dwpe(wpe.size(), 0.0);
  position_embedding_backward<double>(dwpe, dout, kB, kT, kC, kOffset);
  expect_gradient(wpe, dwpe, loss, "dwpe");
  for (int64_t c = 0; c < kC; ++c) {
    EXPECT_EQ(dwpe[2 * kC + c], 0.0);
    EXPECT_EQ(dwpe[6 * kC + c], 0.0);
    // Row 3 is position 0 of both samples.
    EXPECT_NEAR(dwpe[3 * kC + c], dout[c] + dout[kT * kC + c], 1e-15);
  }
}

TEST(PositionEmbeddingErrorTest, RejectsPositionsPastTheTable) {
  Vec out(kB * kT * kC), wpe(4 * kC);
  expect_invalid([&] { position_embedding_forward<double>(out, wpe, kB, kT, kC, 2); },
                 "at least seq_offset + seq_local = 5 rows");
  expect_invalid([&] { position_embedding_backward<double>(wpe, out, kB, kT, kC, -1); },
                 "seq_offset must be >= 0");
  position_embedding_forward<double>(out, wpe, kB, kT, kC, 1);  // rows 1..3: fits
}

// ---------------------------------------------------------------------------------------------
// Vocab-parallel cross-entropy

// Runs steps (a) to (c) on every shard, with the TP all-reduces done as max/sum over shards.
// Returns the losses (identical on every shard; the first's) and the global max and sum_exp.
struct ShardedForward {
  Vec losses, logits_max, sum_exp;
};
template <typename Scalar>
ShardedForward sharded_forward(const std::vector<std::vector<Scalar>>& logits_locals,
                               const std::vector<Shard>& shards,
                               const std::vector<int32_t>& targets, int64_t vocab) {
  const int64_t rows = static_cast<int64_t>(targets.size());
  using V = std::vector<Scalar>;
  V max_global(rows, -std::numeric_limits<Scalar>::infinity());
  for (size_t k = 0; k < shards.size(); ++k) {
    V max_local(rows);
    vocab_parallel_logits_max<Scalar>(max_local, logits_locals[k], 1, rows, shards[k].size);
    for (int64_t i = 0; i < rows; ++i) max_global[i] = std::max(max_global[i], max_local[i]);
  }
  V sum_exp(rows, 0), target_logit(rows, 0);
  for (size_t k = 0; k < shards.size(); ++k) {
    V sum_local(rows), target_local(rows);
    vocab_parallel_sum_exp<Scalar>(sum_local, target_local, logits_locals[k], max_global, targets,
                                   1, rows, shards[k].start, shards[k].size, vocab);
    for (int64_t i = 0; i < rows; ++i) {
      sum_exp[i] += sum_local[i];
      target_logit[i] += target_local[i];
    }
  }
  V losses(rows);
  vocab_parallel_cross_entropy_loss<Scalar>(losses, sum_exp, max_global, target_logit, 1, rows);
  return {Vec(losses.begin(), losses.end()), Vec(max_global.begin(), max_global.end()),
          Vec(sum_exp.begin(), sum_exp.end())};
}

class VocabParallelCrossEntropyTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(VocabParallelCrossEntropyTest, MatchesTheUnshardedCrossEntropy) {
  const int64_t n = GetParam();
  const int64_t rows = kB * kT;
  const Vec logits = random_vec(rows * kV, 11, 4.0);
  const std::vector<int32_t> targets = {0, 10, 3, 7, 7, 5};
  const Vec dlosses = random_vec(rows, 12);
  // Unsharded reference (exec/cpu/cross_entropy).
  Vec probs(logits.size()), expected_losses(rows), expected_dlogits(logits.size(), 0.0);
  softmax_forward<double>(probs, logits, kB, kT, kV);
  cross_entropy_forward<double>(expected_losses, probs, targets, kB, kT, kV);
  cross_entropy_softmax_backward<double>(expected_dlogits, dlosses, probs, targets, kB, kT, kV);

  const std::vector<Shard> shards = split(kV, n);
  std::vector<Vec> locals;
  for (const Shard& s : shards) locals.push_back(columns(logits, rows, kV, s.start, s.size));
  const ShardedForward fwd = sharded_forward<double>(locals, shards, targets, kV);
  for (int64_t i = 0; i < rows; ++i) EXPECT_NEAR(fwd.losses[i], expected_losses[i], 1e-12) << i;

  // The backward pieces, placed at their shard's columns, are the unsharded dlogits.
  Vec dlogits(logits.size(), 0.0);
  for (size_t k = 0; k < shards.size(); ++k) {
    Vec dlocal(locals[k].size(), 0.0);
    vocab_parallel_cross_entropy_backward<double>(dlocal, dlosses, locals[k], fwd.logits_max,
                                                  fwd.sum_exp, targets, kB, kT, shards[k].start,
                                                  shards[k].size, kV);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t v = 0; v < shards[k].size; ++v) {
        dlogits[i * kV + shards[k].start + v] = dlocal[i * shards[k].size + v];
      }
    }
  }
  for (size_t i = 0; i < dlogits.size(); ++i) {
    EXPECT_NEAR(dlogits[i], expected_dlogits[i], 1e-12) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Shards, VocabParallelCrossEntropyTest, ::testing::Values(1, 2, 4));

// The derivative of sum_i dlosses[i] loss[i] (the whole sharded pipeline, all-reduces included)
// with respect to every shard's logits.
TEST(VocabParallelCrossEntropyGradTest, BackwardMatchesFiniteDifferences) {
  const int64_t rows = kB * kT;
  const std::vector<Shard> shards = split(kV, 3);  // 3, 4, 4 columns
  std::vector<Vec> locals;
  for (size_t k = 0; k < shards.size(); ++k) {
    locals.push_back(random_vec(rows * shards[k].size, 20 + static_cast<uint32_t>(k), 3.0));
  }
  const std::vector<int32_t> targets = {1, 4, 10, 6, 2, 8};
  const Vec dlosses = random_vec(rows, 13);
  auto loss = [&] {
    return dot(sharded_forward<double>(locals, shards, targets, kV).losses, dlosses);
  };
  const ShardedForward fwd = sharded_forward<double>(locals, shards, targets, kV);
  for (size_t k = 0; k < shards.size(); ++k) {
    Vec dlocal(locals[k].size(), 0.0);
    vocab_parallel_cross_entropy_backward<double>(dlocal, dlosses, locals[k], fwd.logits_max,
                                                  fwd.sum_exp, targets, kB, kT, shards[k].start,
                                                  shards[k].size, kV);
    expect_gradient(locals[k], dlocal, loss, "dlogits_local of shard " + std::to_string(k));
  }
}

TEST(VocabParallelCrossEntropyTest, LossOfEqualLogitsIsLnVAndLargeLogitsAreStable) {
  // Equal logits: loss ln V whatever their value (1e4 would overflow exp without the max).
  const std::vector<Shard> shards = split(kV, 2);
  const std::vector<int32_t> targets = {0, 9};
  std::vector<Vec> locals;
  for (const Shard& s : shards) locals.push_back(Vec(2 * s.size, 1e4));
  const ShardedForward fwd = sharded_forward<double>(locals, shards, targets, kV);
  EXPECT_NEAR(fwd.losses[0], std::log(11.0), 1e-12);
  EXPECT_NEAR(fwd.losses[1], std::log(11.0), 1e-12);
  // Float instantiation against the double one.
  const Vec logits = random_vec(2 * kV, 14, 5.0);
  std::vector<Vec> dl;
  std::vector<std::vector<float>> fl;
  for (const Shard& s : shards) {
    dl.push_back(columns(logits, 2, kV, s.start, s.size));
    fl.emplace_back(dl.back().begin(), dl.back().end());
  }
  const ShardedForward d = sharded_forward<double>(dl, shards, targets, kV);
  const ShardedForward f = sharded_forward<float>(fl, shards, targets, kV);
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(f.losses[i], d.losses[i], 1e-5);
}

TEST(VocabParallelCrossEntropyErrorTest, RejectsTargetsAndShardsOutsideTheVocabulary) {
  Vec sum(1), target(1), logits(4, 0.0), max(1, 0.0), dlogits(4), dloss(1, 1.0);
  const std::vector<int32_t> bad = {11};
  const std::vector<int32_t> ok = {2};
  expect_invalid(
      [&] { vocab_parallel_sum_exp<double>(sum, target, logits, max, bad, 1, 1, 4, 4, kV); },
      "target 11 at position 0 is outside [0, 11)");
  expect_invalid(
      [&] {
        vocab_parallel_cross_entropy_backward<double>(dlogits, dloss, logits, max, Vec(1, 4.0), bad,
                                                      1, 1, 4, 4, kV);
      },
      "target 11");
  expect_invalid(
      [&] { vocab_parallel_sum_exp<double>(sum, target, logits, max, ok, 1, 1, 8, 4, kV); },
      "vocab_start 8");
  expect_invalid([&] { vocab_parallel_logits_max<double>(max, logits, 1, 1, 3); },
                 "logits_local has 4 elements, expected 3");
  // A target on another shard: target_logit_local is 0 and the indicator never fires.
  vocab_parallel_sum_exp<double>(sum, target, logits, max, ok, 1, 1, 4, 4, kV);
  EXPECT_EQ(target[0], 0.0);
  EXPECT_NEAR(sum[0], 4.0, 1e-15);
  vocab_parallel_cross_entropy_backward<double>(dlogits, dloss, logits, max, Vec(1, 8.0), ok, 1, 1,
                                                4, 4, kV);
  for (double g : dlogits) EXPECT_NEAR(g, 1.0 / 8, 1e-15);
}

// ---------------------------------------------------------------------------------------------
// Dropout

// The documented global index of each hidden-state element decides its mask.
TEST(DropoutTest, MaskFollowsTheGlobalIndex) {
  const DropoutParams params{.p = 0.3, .seed = 99, .stream = stream_id({1, 2, 0})};
  const HiddenBlock block{.batch = 2,
                          .seq_local = 3,
                          .channels = 4,
                          .first_sample = 5,
                          .seq_offset = 2,
                          .seq_total = 7};
  const Vec inp = random_vec(2 * 3 * 4, 30);
  Vec out(inp.size());
  dropout_forward<double>(out, inp, params, block);
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t t = 0; t < 3; ++t) {
      for (int64_t c = 0; c < 4; ++c) {
        const auto global = static_cast<uint64_t>(((5 + b) * 7 + 2 + t) * 4 + c);
        const bool keep = counter_uniform(99, params.stream, global) >= 0.3;
        const size_t i = static_cast<size_t>((b * 3 + t) * 4 + c);
        EXPECT_EQ(out[i], keep ? inp[i] * (1.0 / 0.7) : 0.0) << i;
      }
    }
  }
}

// Sequence-parallel shards and data-parallel sample shards compute the same elements as the
// whole block, bit for bit.
TEST(DropoutTest, ShardsEqualTheWholeBlock) {
  constexpr int64_t kTotalT = 6;
  constexpr int64_t kCh = 5;
  const DropoutParams params{.p = 0.4, .seed = 7, .stream = 11};
  const Vec inp = random_vec(kB * kTotalT * kCh, 31);
  Vec whole(inp.size());
  dropout_forward<double>(whole, inp, params,
                          {.batch = kB,
                           .seq_local = kTotalT,
                           .channels = kCh,
                           .first_sample = 0,
                           .seq_offset = 0,
                           .seq_total = kTotalT});
  // Sequence shards [0, 2) and [2, 6).
  const std::pair<int64_t, int64_t> seq_shards[] = {{0, 2}, {2, 4}};  // (offset, length)
  for (const auto& [offset, len] : seq_shards) {
    Vec block_in(kB * len * kCh), block_out(block_in.size());
    for (int64_t b = 0; b < kB; ++b) {
      for (int64_t t = 0; t < len; ++t) {
        for (int64_t c = 0; c < kCh; ++c) {
          block_in[(b * len + t) * kCh + c] = inp[(b * kTotalT + offset + t) * kCh + c];
        }
      }
    }
    dropout_forward<double>(block_out, block_in, params,
                            {.batch = kB,
                             .seq_local = len,
                             .channels = kCh,
                             .first_sample = 0,
                             .seq_offset = offset,
                             .seq_total = kTotalT});
    for (int64_t b = 0; b < kB; ++b) {
      for (int64_t t = 0; t < len; ++t) {
        for (int64_t c = 0; c < kCh; ++c) {
          EXPECT_EQ(block_out[(b * len + t) * kCh + c],
                    whole[(b * kTotalT + offset + t) * kCh + c]);
        }
      }
    }
  }
  // Sample shards: sample 1 alone, as first_sample 1.
  const Vec second_in(inp.begin() + kTotalT * kCh, inp.end());
  Vec second_out(second_in.size());
  dropout_forward<double>(second_out, second_in, params,
                          {.batch = 1,
                           .seq_local = kTotalT,
                           .channels = kCh,
                           .first_sample = 1,
                           .seq_offset = 0,
                           .seq_total = kTotalT});
  EXPECT_EQ(second_out, Vec(whole.begin() + kTotalT * kCh, whole.end()));
  // Another stream draws another mask.
  Vec other(inp.size());
  dropout_forward<double>(other, inp, {.p = 0.4, .seed = 7, .stream = 12},
                          {.batch = kB,
                           .seq_local = kTotalT,
                           .channels = kCh,
                           .first_sample = 0,
                           .seq_offset = 0,
                           .seq_total = kTotalT});
  EXPECT_NE(other, whole);
}

TEST(DropoutTest, KeepsAboutOneMinusPAndScalesByItsInverse) {
  constexpr int64_t kN = 100000;
  for (const double p : {0.1, 0.5}) {
    const HiddenBlock block{.batch = 1,
                            .seq_local = 1000,
                            .channels = 100,
                            .first_sample = 0,
                            .seq_offset = 0,
                            .seq_total = 1000};
    const std::vector<float> ones(kN, 1.0f);
    std::vector<float> out(kN);
    dropout_forward<float>(out, ones, {.p = p, .seed = 3, .stream = 4}, block);
    int64_t kept = 0;
    const auto scale = static_cast<float>(1.0 / (1.0 - p));
    for (const float x : out) {
      ASSERT_TRUE(x == 0.0f || x == scale) << x;
      if (x != 0.0f) ++kept;
    }
    // Standard error sqrt(p (1 - p) / N) <= 0.0016; bound ~6 sigma.
    EXPECT_NEAR(static_cast<double>(kept) / kN, 1.0 - p, 0.0095) << "p = " << p;
  }
}

TEST(DropoutTest, ZeroProbabilityCopiesExactly) {
  const HiddenBlock block{.batch = kB,
                          .seq_local = kT,
                          .channels = kC,
                          .first_sample = 0,
                          .seq_offset = 0,
                          .seq_total = kT};
  const Vec inp = random_vec(kB * kT * kC, 32);
  Vec out(inp.size());
  dropout_forward<double>(out, inp, {.p = 0.0, .seed = 1, .stream = 2}, block);
  EXPECT_EQ(out, inp);
  Vec dinp(inp.size(), 1.0);
  dropout_backward<double>(dinp, inp, {.p = 0.0, .seed = 1, .stream = 2}, block);
  for (size_t i = 0; i < inp.size(); ++i) EXPECT_EQ(dinp[i], 1.0 + inp[i]);
}

TEST(DropoutTest, BackwardMatchesFiniteDifferences) {
  const DropoutParams params{.p = 0.25, .seed = 8, .stream = 9};
  const HiddenBlock hidden{.batch = kB,
                           .seq_local = kT,
                           .channels = kC,
                           .first_sample = 3,
                           .seq_offset = 1,
                           .seq_total = 5};
  Vec inp = random_vec(kB * kT * kC, 33);
  const Vec dout = random_vec(inp.size(), 34);
  Vec out(inp.size());
  auto loss = [&] {
    dropout_forward<double>(out, inp, params, hidden);
    return dot(out, dout);
  };
  Vec dinp(inp.size(), 0.0);
  dropout_backward<double>(dinp, dout, params, hidden);
  expect_gradient(inp, dinp, loss, "dinp");

  const AttentionBlock att{
      .batch = 1, .heads = 2, .seq = 3, .first_sample = 0, .head_offset = 1, .heads_total = 4};
  Vec a = random_vec(2 * 3 * 3, 35);
  const Vec da_out = random_vec(a.size(), 36);
  Vec a_out(a.size());
  auto att_loss = [&] {
    attention_dropout_forward<double>(a_out, a, params, att);
    return dot(a_out, da_out);
  };
  Vec da(a.size(), 0.0);
  attention_dropout_backward<double>(da, da_out, params, att);
  expect_gradient(a, da, att_loss, "datt");
}

// Heads split over TP ranks (head_offset) give the same probabilities as all heads on one rank,
// and the mask follows the documented attention index.
TEST(DropoutTest, AttentionHeadShardsEqualAllHeads) {
  constexpr int64_t kNH = 4;
  constexpr int64_t kSeq = 3;
  const DropoutParams params{.p = 0.5, .seed = 21, .stream = 22};
  const Vec att = random_vec(kB * kNH * kSeq * kSeq, 37);
  Vec whole(att.size());
  attention_dropout_forward<double>(whole, att, params,
                                    {.batch = kB,
                                     .heads = kNH,
                                     .seq = kSeq,
                                     .first_sample = 4,
                                     .head_offset = 0,
                                     .heads_total = kNH});
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t h = 0; h < kNH; ++h) {
      for (int64_t t = 0; t < kSeq; ++t) {
        for (int64_t t2 = 0; t2 < kSeq; ++t2) {
          const int64_t i = ((b * kNH + h) * kSeq + t) * kSeq + t2;
          const bool keep =
              counter_uniform(
                  21, 22,
                  static_cast<uint64_t>(((4 + b) * kNH + h) * kSeq * kSeq + t * kSeq + t2)) >= 0.5;
          EXPECT_EQ(whole[i], keep ? 2.0 * att[i] : 0.0) << i;
        }
      }
    }
  }
  // Two TP ranks with two heads each.
  constexpr int64_t kLocal = 2;
  for (int64_t rank = 0; rank < 2; ++rank) {
    Vec in(kB * kLocal * kSeq * kSeq), out(in.size());
    for (int64_t b = 0; b < kB; ++b) {
      for (int64_t h = 0; h < kLocal; ++h) {
        for (int64_t e = 0; e < kSeq * kSeq; ++e) {
          in[(b * kLocal + h) * kSeq * kSeq + e] =
              att[(b * kNH + rank * kLocal + h) * kSeq * kSeq + e];
        }
      }
    }
    attention_dropout_forward<double>(out, in, params,
                                      {.batch = kB,
                                       .heads = kLocal,
                                       .seq = kSeq,
                                       .first_sample = 4,
                                       .head_offset = rank * kLocal,
                                       .heads_total = kNH});
    for (int64_t b = 0; b < kB; ++b) {
      for (int64_t h = 0; h < kLocal; ++h) {
        for (int64_t e = 0; e < kSeq * kSeq; ++e) {
          EXPECT_EQ(out[(b * kLocal + h) * kSeq * kSeq + e],
                    whole[(b * kNH + rank * kLocal + h) * kSeq * kSeq + e]);
        }
      }
    }
  }
}

TEST(DropoutTest, FloatMaskMatchesDoubleMask) {
  const DropoutParams params{.p = 0.2, .seed = 5, .stream = 6};
  const HiddenBlock block{.batch = kB,
                          .seq_local = kT,
                          .channels = kC,
                          .first_sample = 0,
                          .seq_offset = 0,
                          .seq_total = kT};
  const Vec inp = random_vec(kB * kT * kC, 38);
  const std::vector<float> inp_f(inp.begin(), inp.end());
  Vec out(inp.size());
  std::vector<float> out_f(inp.size());
  dropout_forward<double>(out, inp, params, block);
  dropout_forward<float>(out_f, inp_f, params, block);
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i] == 0.0, out_f[i] == 0.0f) << i;
    EXPECT_NEAR(out_f[i], out[i], 1e-6) << i;
  }
}

TEST(DropoutErrorTest, RejectsBadProbabilityAndBlocks) {
  const HiddenBlock block{.batch = 1,
                          .seq_local = 2,
                          .channels = 2,
                          .first_sample = 0,
                          .seq_offset = 0,
                          .seq_total = 2};
  Vec a(4), b(4);
  for (const double p : {1.0, -0.1, 1.5, std::nan("")}) {
    expect_invalid([&] { dropout_forward<double>(a, b, {.p = p}, block); }, "p must be in [0, 1)");
    expect_invalid([&] { dropout_backward<double>(a, b, {.p = p}, block); }, "p must be in [0, 1)");
  }
  HiddenBlock past_end = block;
  past_end.seq_offset = 1;
  expect_invalid([&] { dropout_forward<double>(a, b, {.p = 0.1}, past_end); },
                 "seq_total 2 must be >= seq_offset + seq_local = 3");
  expect_invalid([&] { dropout_forward<double>(a, Vec(3), {.p = 0.1}, block); },
                 "inp has 3 elements, expected 4");
  expect_invalid(
      [&] {
        attention_dropout_forward<double>(a, b, {.p = 0.1},
                                          {.batch = 1,
                                           .heads = 1,
                                           .seq = 2,
                                           .first_sample = 0,
                                           .head_offset = 2,
                                           .heads_total = 2});
      },
      "heads_total 2 must be >= head_offset + heads = 3");
}

}  // namespace
}  // namespace traintwin::exec::cpu
