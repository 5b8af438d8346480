// Blockwise attention (exec/cpu/block_attention.hpp): FlashAttention's tile and ring attention's
// block under context parallelism, against the full causal attention of gqa_attention.hpp /
// attention.hpp in float64 — one block over the whole sequence, and the ring of 2 and 3 CP ranks
// with Megatron-Core's load-balanced chunks (exec/cp_sequence.hpp) merged by log-sum-exp, forward
// and backward (the dK/dV of each block summed over the ranks that visited it), with and without
// attention-probability dropout (the same global mask in every kernel); the block backward
// against central finite differences of the merged forward; attention dropout with
// grouped-query attention (gqa_attention.hpp) against finite differences and against the
// multi-head kernel's mask.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/cp_sequence.hpp"
#include "exec/cpu/attention.hpp"
#include "exec/cpu/block_attention.hpp"
#include "exec/cpu/gqa_attention.hpp"
#include "tests/exec/gradient_check.hpp"

namespace traintwin::exec::cpu {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kB = 2;

/// Attention-probability dropout p = 0.3 over `heads` heads and `seq` positions.
AttentionProbabilityDropout dropout_of(int64_t heads, int64_t seq) {
  return AttentionProbabilityDropout{DropoutParams{0.3, 7, 11},
                                     AttentionBlock{kB, heads, seq, 5, 0, heads}};
}

/// Columns [first, first + width) of the rows of fused QKV `inp` ([B, T, row]) at the positions
/// `pos` of each sample: [B, pos.size(), width].
Vec gather(const Vec& inp, int64_t seq, int64_t row, int64_t first, int64_t width,
           const std::vector<int64_t>& pos) {
  const auto n = static_cast<int64_t>(pos.size());
  Vec out(static_cast<size_t>(kB * n * width));
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t c = 0; c < width; ++c) {
        out[static_cast<size_t>((b * n + i) * width + c)] =
            inp[static_cast<size_t>((b * seq + pos[static_cast<size_t>(i)]) * row + first + c)];
      }
    }
  }
  return out;
}

/// Adds `part` ([B, pos.size(), width]) into columns [first, first + width) of `full`'s rows.
void scatter_add(Vec& full, int64_t seq, int64_t row, int64_t first, int64_t width,
                 const std::vector<int64_t>& pos, const Vec& part) {
  const auto n = static_cast<int64_t>(pos.size());
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t c = 0; c < width; ++c) {
        full[static_cast<size_t>((b * seq + pos[static_cast<size_t>(i)]) * row + first + c)] +=
            part[static_cast<size_t>((b * n + i) * width + c)];
      }
    }
  }
}

struct Dims {
  int64_t heads, groups, d, seq;
  int64_t row() const { return (heads + 2 * groups) * d; }
  int64_t qw() const { return heads * d; }
  int64_t kvw() const { return 2 * groups * d; }
};

/// Ring attention over `cp` simulated ranks on the fused QKV `inp` of the whole sequence:
/// returns the output ([B, T, NH D], rows at their global positions) and, when `dout` is given,
/// the input gradient ([B, T, row]).
void ring_attention(const Dims& m, int64_t cp, const Vec& inp, const Vec* dout,
                    const AttentionProbabilityDropout* drop, Vec& out, Vec& dinp) {
  out.assign(static_cast<size_t>(kB * m.seq * m.qw()), 0.0);
  dinp.assign(inp.size(), 0.0);
  const int64_t local = m.seq / cp;
  std::vector<Vec> q(cp), kv(cp), o(cp), lse(cp);
  for (int64_t r = 0; r < cp; ++r) {
    const std::vector<int64_t> pos = CpSequence(m.seq, cp, r).positions(0, local);
    q[r] = gather(inp, m.seq, m.row(), 0, m.qw(), pos);
    kv[r] = gather(inp, m.seq, m.row(), m.qw(), m.kvw(), pos);
  }
  const BlockAttentionShape shape{kB, local, local, m.heads, m.groups, m.d};
  for (int64_t r = 0; r < cp; ++r) {
    const std::vector<int64_t> qpos = CpSequence(m.seq, cp, r).positions(0, local);
    o[r].assign(q[r].size(), 0.0);
    lse[r].assign(static_cast<size_t>(kB * m.heads * local), 0.0);
    for (int64_t i = 0; i < cp; ++i) {
      const int64_t src = (r - i + cp) % cp;
      const std::vector<int64_t> kpos = CpSequence(m.seq, cp, src).positions(0, local);
      if (i == 0) {
        block_attention_forward<double>(o[r], lse[r], q[r], kv[src], qpos, kpos, shape, drop);
      } else {
        Vec bo(o[r].size()), bl(lse[r].size());
        block_attention_forward<double>(bo, bl, q[r], kv[src], qpos, kpos, shape, drop);
        attention_merge<double>(o[r], lse[r], bo, bl, kB, local, m.heads, m.d);
      }
    }
    for (int64_t b = 0; b < kB; ++b) {
      for (int64_t t = 0; t < local; ++t) {
        for (int64_t c = 0; c < m.qw(); ++c) {
          out[static_cast<size_t>((b * m.seq + qpos[static_cast<size_t>(t)]) * m.qw() + c)] =
              o[r][static_cast<size_t>((b * local + t) * m.qw() + c)];
        }
      }
    }
  }
  if (dout == nullptr) return;
  for (int64_t r = 0; r < cp; ++r) {
    const std::vector<int64_t> qpos = CpSequence(m.seq, cp, r).positions(0, local);
    const Vec dor = gather(*dout, m.seq, m.qw(), 0, m.qw(), qpos);
    Vec dq(q[r].size());
    for (int64_t i = 0; i < cp; ++i) {
      const int64_t src = (r - i + cp) % cp;
      const std::vector<int64_t> kpos = CpSequence(m.seq, cp, src).positions(0, local);
      Vec dkv(kv[src].size());
      block_attention_backward<double>(dq, dkv, dor, q[r], kv[src], o[r], lse[r], qpos, kpos,
                                       shape, drop);
      scatter_add(dinp, m.seq, m.row(), m.qw(), m.kvw(), kpos, dkv);  // to the block's owner
    }
    scatter_add(dinp, m.seq, m.row(), 0, m.qw(), qpos, dq);
  }
}

/// The full causal attention of the whole sequence (gqa_attention.hpp) and its input gradient.
void full_attention(const Dims& m, const Vec& inp, const Vec& dout,
                    const AttentionProbabilityDropout* drop, Vec& out, Vec& dinp) {
  out.assign(static_cast<size_t>(kB * m.seq * m.qw()), 0.0);
  Vec att(static_cast<size_t>(kB * m.heads * m.seq * m.seq));
  gqa_attention_forward<double>(out, att, inp, kB, m.seq, m.heads, m.groups, m.d, drop);
  dinp.assign(inp.size(), 0.0);
  gqa_attention_backward<double>(dinp, dout, inp, att, kB, m.seq, m.heads, m.groups, m.d, drop);
}

void expect_close(const Vec& a, const Vec& b, double tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << what << "[" << i << "]";
}

class RingAttention : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, bool>> {};

// CP 1 is FlashAttention's single block; CP 2 and 3 the ring with load-balanced chunks, for
// multi-head (G = NH), grouped-query and multi-query attention, with and without dropout.
TEST_P(RingAttention, EqualsFullCausalAttentionForwardAndBackward) {
  const auto [cp, groups, with_dropout] = GetParam();
  const Dims m{4, groups, 3, 12};
  const Vec inp = random_vec(kB * m.seq * m.row(), 301, 1.5);
  const Vec dout = random_vec(kB * m.seq * m.qw(), 302);
  const AttentionProbabilityDropout drop = dropout_of(m.heads, m.seq);
  const AttentionProbabilityDropout* dp = with_dropout ? &drop : nullptr;
  Vec out_full, d_full, out_ring, d_ring;
  full_attention(m, inp, dout, dp, out_full, d_full);
  ring_attention(m, cp, inp, &dout, dp, out_ring, d_ring);
  expect_close(out_ring, out_full, 1e-13, "out");
  expect_close(d_ring, d_full, 1e-12, "dinp");
  if (with_dropout) {  // the mask does drop something: without it the output differs
    Vec out_plain, d_plain;
    full_attention(m, inp, dout, nullptr, out_plain, d_plain);
    double diff = 0;
    for (size_t i = 0; i < out_plain.size(); ++i) diff += std::abs(out_plain[i] - out_full[i]);
    EXPECT_GT(diff, 1e-3);
  }
}

INSTANTIATE_TEST_SUITE_P(CpGroupsDropout, RingAttention,
                         ::testing::Combine(::testing::Values<int64_t>(1, 2, 3),
                                            ::testing::Values<int64_t>(4, 2, 1),
                                            ::testing::Bool()));

// The block backward is the gradient of the merged forward: central differences of
// L = sum out . dout over q and both K/V blocks, for two blocks of a CP 2 ring (rank 1: its own
// block, then rank 0's), with dropout.
TEST(BlockAttentionTest, BackwardMatchesFiniteDifferencesOfTheMergedForward) {
  const Dims m{4, 2, 3, 8};
  const int64_t cp = 2, local = m.seq / cp;
  const CpSequence mine(m.seq, cp, 1), other(m.seq, cp, 0);
  const std::vector<int64_t> qpos = mine.positions(0, local), kpos0 = other.positions(0, local);
  const BlockAttentionShape shape{kB, local, local, m.heads, m.groups, m.d};
  const AttentionProbabilityDropout drop = dropout_of(m.heads, m.seq);
  Vec q = random_vec(kB * local * m.qw(), 311, 1.5);
  Vec kv_own = random_vec(kB * local * m.kvw(), 312, 1.5);
  Vec kv_other = random_vec(kB * local * m.kvw(), 313, 1.5);
  const Vec dout = random_vec(kB * local * m.qw(), 314);
  Vec out(q.size()), lse(static_cast<size_t>(kB * m.heads * local));
  auto loss = [&] {
    Vec bo(out.size()), bl(lse.size());
    block_attention_forward<double>(out, lse, q, kv_own, qpos, qpos, shape, &drop);
    block_attention_forward<double>(bo, bl, q, kv_other, qpos, kpos0, shape, &drop);
    attention_merge<double>(out, lse, bo, bl, kB, local, m.heads, m.d);
    return dot(out, dout);
  };
  loss();
  Vec dq(q.size()), dkv_own(kv_own.size()), dkv_other(kv_other.size());
  block_attention_backward<double>(dq, dkv_own, dout, q, kv_own, out, lse, qpos, qpos, shape, &drop);
  block_attention_backward<double>(dq, dkv_other, dout, q, kv_other, out, lse, qpos, kpos0, shape,
                                   &drop);
  expect_gradient(q, dq, loss, "dq");
  expect_gradient(kv_own, dkv_own, loss, "dkv (own block)");
  expect_gradient(kv_other, dkv_other, loss, "dkv (rank 0's block)");
}

// A query row that sees no key of a block (rank 0's first chunk against rank 1's block) gets
// out 0 and lse -inf, and merging it changes nothing.
TEST(BlockAttentionTest, RowsWithoutVisibleKeysAreEmptyAndMergeAsNothing) {
  const Dims m{2, 2, 2, 8};
  const int64_t local = 4;
  const std::vector<int64_t> qpos = CpSequence(m.seq, 2, 0).positions(0, local);  // 0 1 | 6 7
  const std::vector<int64_t> kpos = CpSequence(m.seq, 2, 1).positions(0, local);  // 2 3 | 4 5
  const BlockAttentionShape shape{kB, local, local, m.heads, m.groups, m.d};
  const Vec q = random_vec(kB * local * m.qw(), 321), kv = random_vec(kB * local * m.kvw(), 322);
  Vec out(q.size()), lse(static_cast<size_t>(kB * m.heads * local));
  block_attention_forward<double>(out, lse, q, kv, qpos, kpos, shape);
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t h = 0; h < m.heads; ++h) {
      for (int64_t t = 0; t < local; ++t) {
        const double l = lse[static_cast<size_t>((b * m.heads + h) * local + t)];
        if (t < 2) {
          EXPECT_EQ(l, -inf);
          for (int64_t i = 0; i < m.d; ++i) {
            EXPECT_EQ(out[static_cast<size_t>((b * local + t) * m.qw() + h * m.d + i)], 0.0);
          }
        } else {
          EXPECT_TRUE(std::isfinite(l));
        }
      }
    }
  }
  Vec run = random_vec(static_cast<int64_t>(out.size()), 323), run_lse = lse;
  for (double& x : run_lse) x = 0.5;
  const Vec before = run;
  Vec empty_out(out.size()), empty_lse(lse.size(), -inf);
  attention_merge<double>(run, run_lse, empty_out, empty_lse, kB, local, m.heads, m.d);
  expect_close(run, before, 1e-15, "merge with an empty block");
}

TEST(BlockAttentionTest, BadArgumentsAreRefused) {
  const BlockAttentionShape shape{1, 2, 2, 2, 1, 2};
  Vec q(8), kv(8), out(8), lse(4);
  const std::vector<int64_t> pos{0, 1}, decreasing{1, 0};
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_THAT(message([&] {
                block_attention_forward<double>(out, lse, q, kv, pos, decreasing, shape);
              }),
              HasSubstr("k_positions must be non-negative and non-decreasing"));
  EXPECT_THAT(message([&] {
                block_attention_forward<double>(out, lse, q, Vec(6), pos, pos, shape);
              }),
              HasSubstr("kv has 6 elements, expected 8"));
  const AttentionProbabilityDropout small{DropoutParams{0.1, 1, 1}, AttentionBlock{1, 2, 1, 0, 0, 2}};
  EXPECT_THAT(message([&] {
                block_attention_forward<double>(out, lse, q, kv, pos, pos, shape, &small);
              }),
              HasSubstr("outside the dropout block"));
  EXPECT_THROW(CpSequence(10, 2, 0), InvalidArgument);  // 2 x CP does not divide 10
}

// Megatron-Core's load balance: CP rank r holds chunks r and 2 CP - 1 - r.
TEST(BlockAttentionTest, CpSequenceHoldsChunksRAnd2CpMinus1MinusR) {
  EXPECT_EQ(CpSequence(16, 4, 1).positions(0, 4), (std::vector<int64_t>{2, 3, 12, 13}));
  EXPECT_EQ(CpSequence(16, 4, 3).positions(0, 4), (std::vector<int64_t>{6, 7, 8, 9}));
  EXPECT_EQ(CpSequence(8, 1, 0).positions(2, 3), (std::vector<int64_t>{2, 3, 4}));
  const auto runs = CpSequence(16, 2, 0).runs(2, 4);  // local 2..5 = global 2 3 | 12 13
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].global, 2);
  EXPECT_EQ(runs[0].length, 2);
  EXPECT_EQ(runs[1].local, 4);
  EXPECT_EQ(runs[1].global, 12);
  const std::vector<int32_t> whole{0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15, 16, 17};
  std::vector<int32_t> local(8);
  CpSequence(8, 2, 1).slice<int32_t>(local, whole, 2);  // chunks 1 and 2 of each sample
  EXPECT_EQ(local, (std::vector<int32_t>{2, 3, 4, 5, 12, 13, 14, 15}));
}

// Attention dropout with grouped-query attention: the gradient under the mask, and the same
// mask as the multi-head kernel (G = NH gives attention.hpp's output and gradient).
TEST(GqaAttentionDropoutTest, GradientUnderTheMask) {
  const int64_t heads = 4, groups = 2, d = 3, seq = 5;
  Vec inp = random_vec(kB * seq * (heads + 2 * groups) * d, 331, 1.5);
  const Vec dout = random_vec(kB * seq * heads * d, 332);
  const AttentionProbabilityDropout drop = dropout_of(heads, seq);
  Vec out(dout.size()), att(static_cast<size_t>(kB * heads * seq * seq));
  auto loss = [&] {
    gqa_attention_forward<double>(out, att, inp, kB, seq, heads, groups, d, &drop);
    return dot(out, dout);
  };
  loss();
  Vec dinp(inp.size());
  gqa_attention_backward<double>(dinp, dout, inp, att, kB, seq, heads, groups, d, &drop);
  expect_gradient(inp, dinp, loss, "dinp under dropout");
}

TEST(GqaAttentionDropoutTest, SameMaskAsMultiHeadAttention) {
  const int64_t heads = 2, d = 4, seq = 6, c = heads * d;
  const Vec inp = random_vec(kB * seq * 3 * c, 341, 1.5);
  const Vec dout = random_vec(kB * seq * c, 342);
  const AttentionProbabilityDropout drop = dropout_of(heads, seq);
  Vec out_mha(dout.size()), pre(static_cast<size_t>(kB * heads * seq * seq)), att_mha(pre.size());
  attention_forward<double>(out_mha, pre, att_mha, inp, kB, seq, c, heads, &drop);
  Vec out_gqa(dout.size()), att_gqa(pre.size());
  gqa_attention_forward<double>(out_gqa, att_gqa, inp, kB, seq, heads, heads, d, &drop);
  expect_close(out_gqa, out_mha, 1e-14, "out");
  Vec d_mha(inp.size()), d_gqa(inp.size());
  attention_backward<double>(d_mha, dout, inp, att_mha, kB, seq, c, heads, &drop);
  gqa_attention_backward<double>(d_gqa, dout, inp, att_gqa, kB, seq, heads, heads, d, &drop);
  expect_close(d_gqa, d_mha, 1e-13, "dinp");
}

}  // namespace
}  // namespace traintwin::exec::cpu
