// CPU layers of a mixture-of-experts layer (exec/cpu/moe_router, moe_permute, grouped_matmul):
// hand-worked router cases (top-k on the logits then softmax over the k, capacity with the
// "probs" drop policy and padding, the Switch aux loss equal to its coefficient under uniform
// routing), the permutation's algebra (permute is the adjoint of its backward, unpermute of a
// top-1 routing with unit probabilities restores the tokens, sort_chunks and its inverse), the
// grouped GEMM against one matmul per group, and float64 central finite differences through a
// whole MoE layer (router GEMM, top-k softmax, aux loss, permute, SwiGLU / GeLU experts as grouped
// GEMMs, unpermute) in dropless, capacity and padded modes. Selection is piecewise constant: the
// random logits have no ties, so a 1e-6 step never changes the top-k or the capacity choice.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "core/error.hpp"
#include "exec/cpu/gelu.hpp"
#include "exec/cpu/grouped_matmul.hpp"
#include "exec/cpu/matmul.hpp"
#include "exec/cpu/moe_permute.hpp"
#include "exec/cpu/moe_router.hpp"
#include "exec/cpu/swiglu.hpp"
#include "tests/exec/gradient_check.hpp"

namespace traintwin::exec::cpu {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Map = std::vector<uint8_t>;
using Counts = std::vector<int64_t>;

struct Routing {
  Vec gates, probs;
  Map topk_map, routing_map;
  Counts tokens_per_expert;
};

Routing route(const Vec& logits, int64_t n, int64_t e, int64_t k, int64_t capacity, bool pad) {
  Routing r;
  const auto ne = static_cast<size_t>(n * e);
  r.gates.assign(ne, 0);
  r.probs.assign(ne, 0);
  r.topk_map.assign(ne, 0);
  r.routing_map.assign(ne, 0);
  r.tokens_per_expert.assign(static_cast<size_t>(e), 0);
  moe_topk_softmax_forward<double>(r.gates, r.topk_map, r.routing_map, r.probs,
                                   r.tokens_per_expert, logits, n, e, k, capacity, pad);
  return r;
}

TEST(MoeRouterTest, CapacityIsMegatronsGetCapacity) {
  // ceil(num_tokens x topk / experts x factor)
  EXPECT_EQ(moe_expert_capacity(8, 2, 4, 1.0), 4);
  EXPECT_EQ(moe_expert_capacity(10, 2, 4, 1.25), 7);  // ceil(6.25)
  EXPECT_EQ(moe_expert_capacity(4, 2, 3, 0.75), 2);   // ceil(2.0)
  EXPECT_THROW(moe_expert_capacity(8, 2, 4, 0.0), InvalidArgument);
  EXPECT_THROW(moe_expert_capacity(8, 2, 4, std::nan("")), InvalidArgument);
}

TEST(MoeRouterTest, TopkOnLogitsThenSoftmaxOverTheSelected) {
  // Token 0: logits [1, 3, 2, 0], top-2 = experts 1 (3) and 2 (2): gates softmax([3, 2]).
  // Token 1: [5, 5, 0, 5] ties: the smaller indices 0 and 1 win, gates 1/2 each.
  const Vec logits = {1, 3, 2, 0, 5, 5, 0, 5};
  const Routing r = route(logits, 2, 4, 2, 0, false);
  const double g1 = 1 / (1 + std::exp(-1.0));
  EXPECT_NEAR(r.gates[1], g1, 1e-15);
  EXPECT_NEAR(r.gates[2], 1 - g1, 1e-15);
  EXPECT_EQ(r.gates[0], 0.0);
  EXPECT_EQ(r.gates[3], 0.0);
  EXPECT_NEAR(r.gates[4], 0.5, 1e-15);
  EXPECT_NEAR(r.gates[5], 0.5, 1e-15);
  EXPECT_THAT(r.topk_map, ElementsAre(0, 1, 1, 0, 1, 1, 0, 0));
  EXPECT_EQ(r.routing_map, r.topk_map);  // dropless
  EXPECT_EQ(r.probs, r.gates);
  EXPECT_THAT(r.tokens_per_expert, ElementsAre(1, 2, 1, 0));
  // Not softmax-then-top-k renormalized differently: with k = E the gates are the full softmax.
  const Routing all = route({0, std::log(3.0)}, 1, 2, 2, 0, false);
  EXPECT_NEAR(all.gates[0], 0.25, 1e-15);
  EXPECT_NEAR(all.gates[1], 0.75, 1e-15);
}

TEST(MoeRouterTest, CapacityDropsTheSmallestGatesAndPadsToCapacity) {
  // 4 tokens, 3 experts, top-2, capacity 2 (= ceil(4 x 2 / 3 x 0.75)). Every token picks expert
  // 0 and one other; expert 0's gates are largest for tokens 3 and 1, so tokens 0 and 2 are
  // dropped from expert 0 (drop policy "probs").
  const Vec logits = {
      1.0, 0.5, -9,   // token 0 -> {0, 1}, gate_0 = s(0.5)
      3.0, -9, 0.0,   // token 1 -> {0, 2}, gate_0 = s(3)
      0.2, 0.0, -9,   // token 2 -> {0, 1}, gate_0 = s(0.2)
      2.0, -9, 0.0};  // token 3 -> {0, 2}, gate_0 = s(2)
  const int64_t cap = moe_expert_capacity(4, 2, 3, 0.75);
  ASSERT_EQ(cap, 2);
  const Routing r = route(logits, 4, 3, 2, cap, false);
  EXPECT_THAT(r.tokens_per_expert, ElementsAre(4, 2, 2));  // before capacity
  EXPECT_THAT(r.routing_map, ElementsAre(0, 1, 0,  //
                                         1, 0, 1,  //
                                         0, 1, 0,  //
                                         1, 0, 1));
  EXPECT_EQ(r.probs[0], 0.0);                     // dropped
  EXPECT_NEAR(r.probs[1], r.gates[1], 0);         // kept, the gate of the softmax over both
  EXPECT_NEAR(r.gates[0] + r.gates[1], 1, 1e-15);  // the softmax still spans the dropped one

  // Padded: each expert gets exactly `capacity` rows; expert 1 and 2 had two routed tokens each,
  // so padding changes nothing there; with capacity 3 they get a zero-gate token each.
  const Routing p3 = route(logits, 4, 3, 2, 3, true);
  for (int e = 0; e < 3; ++e) {
    int rows = 0;
    for (int n = 0; n < 4; ++n) rows += p3.routing_map[static_cast<size_t>(n * 3 + e)];
    EXPECT_EQ(rows, 3) << "expert " << e;
  }
  // Expert 1's padding row is token 1 (gate 0; the smaller index of the zero-gate tokens 1, 3).
  EXPECT_EQ(p3.routing_map[1 * 3 + 1], 1);
  EXPECT_EQ(p3.probs[1 * 3 + 1], 0.0);
  EXPECT_EQ(p3.routing_map[3 * 3 + 1], 0);

  EXPECT_THAT([&] { route(logits, 4, 3, 4, 0, false); },
              ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("exceeds num_moe_experts")));
  EXPECT_THAT([&] { route(logits, 4, 3, 2, 0, true); },
              ::testing::ThrowsMessage<InvalidArgument>(HasSubstr("needs a capacity")));
}

TEST(MoeRouterTest, SwitchAuxLossIsItsCoefficientUnderUniformRouting) {
  // Fedus et al. 2021 eq. 4 with Megatron's 1/topk: all logits equal -> P_e = N / E; balanced
  // tokens_per_expert = N k / E -> aux = coeff E / (N^2 k) x E x (N / E)(N k / E) = coeff.
  const int64_t n = 6, e = 3, k = 2;
  Vec logits(static_cast<size_t>(n * e), 0.7), scores(logits.size());
  const Counts balanced = {4, 4, 4};
  EXPECT_NEAR(moe_switch_aux_loss_forward<double>(scores, logits, balanced, n, e, n, k, 0.01),
              0.01, 1e-15);
  // All tokens on expert 0 (f = [N, 0, 0] with k = 1) and all probability there: aux = coeff E.
  Vec peaked(static_cast<size_t>(n * e), -1e3);
  for (int64_t i = 0; i < n; ++i) peaked[static_cast<size_t>(i * e)] = 0;
  EXPECT_NEAR(moe_switch_aux_loss_forward<double>(scores, peaked, Counts{6, 0, 0}, n, e, n, 1, 0.01),
              0.03, 1e-12);
  // Sequence-partitioned (SP over 2 ranks): each rank's share adds up to the whole.
  Vec rnd = random_vec(n * e, 7, 2.0), s2(rnd.size());
  const Counts tpe = {5, 3, 4};
  const double whole = moe_switch_aux_loss_forward<double>(s2, rnd, tpe, n, e, n, k, 0.1);
  Vec half_scores(static_cast<size_t>(n / 2 * e));
  const double first = moe_switch_aux_loss_forward<double>(
      half_scores, std::span<const double>(rnd).first(half_scores.size()), tpe, n / 2, e, n, k, 0.1);
  const double second = moe_switch_aux_loss_forward<double>(
      half_scores, std::span<const double>(rnd).last(half_scores.size()), tpe, n / 2, e, n, k, 0.1);
  EXPECT_NEAR(first + second, whole, 1e-15);
  EXPECT_THROW(moe_switch_aux_loss_forward<double>(scores, logits, balanced, n, e, n - 1, k, 0.1),
               InvalidArgument);
}

TEST(MoePermuteTest, PermuteIsExpertMajorAndUnpermuteRestoresTopOneTokens) {
  // 3 tokens, 2 experts: token 0 -> e1, token 1 -> e0 and e1, token 2 -> e0.
  const Map map = {0, 1, 1, 1, 1, 0};
  const MoePermutation p = moe_make_permutation(map, 3, 2);
  EXPECT_THAT(p.token, ElementsAre(1, 2, 0, 1));
  EXPECT_THAT(p.expert, ElementsAre(0, 0, 1, 1));
  EXPECT_THAT(p.rows_per_expert, ElementsAre(2, 2));
  const Vec x = {1, 2, 3, 4, 5, 6};  // [3, 2]
  Vec y(8);
  moe_permute_forward<double>(y, x, p, 3, 2);
  EXPECT_THAT(y, ElementsAre(3, 4, 5, 6, 1, 2, 3, 4));
  // unpermute with probs: token 1 gets 0.25 y_e0 + 0.75 y_e1.
  const Vec probs = {0, 1, 0.25, 0.75, 1, 0};
  Vec back(6);
  moe_unpermute_forward<double>(back, y, probs, p, 3, 2, 2);
  EXPECT_THAT(back, ElementsAre(1, 2, 3, 4, 5, 6));

  // Adjoint: <permute(x), g> = <x, permute_backward(g)>.
  const Vec xr = random_vec(6, 11), g = random_vec(8, 12);
  Vec px(8), dx(6);
  moe_permute_forward<double>(px, xr, p, 3, 2);
  moe_permute_backward<double>(dx, g, p, 3, 2);
  EXPECT_NEAR(dot(px, g), dot(xr, dx), 1e-14);
  EXPECT_THROW(moe_permute_forward<double>(px, xr, p, 4, 2), InvalidArgument);
}

TEST(MoePermuteTest, UnpermuteGradient) {
  const int64_t n = 5, e = 3, c = 4;
  Vec logits = random_vec(n * e, 21, 2.0);
  const Routing r = route(logits, n, e, 2, 0, false);
  const MoePermutation p = moe_make_permutation(r.routing_map, n, e);
  Vec inp = random_vec(p.rows() * c, 22);
  Vec probs = r.probs;
  const Vec dout = random_vec(n * c, 23);
  Vec out(static_cast<size_t>(n * c));
  auto loss = [&] {
    moe_unpermute_forward<double>(out, inp, probs, p, n, e, c);
    return dot(out, dout);
  };
  Vec dinp(inp.size()), dprobs(probs.size());
  moe_unpermute_backward<double>(dinp, dprobs, dout, inp, probs, p, n, e, c);
  expect_gradient(inp, dinp, loss, "dinp");
  // Only routed (token, expert) pairs have a gradient; the others do not enter the output.
  for (size_t i = 0; i < probs.size(); ++i) {
    if (!r.routing_map[i]) EXPECT_EQ(dprobs[i], 0.0);
  }
  expect_gradient(probs, dprobs, loss, "dprobs");
}

TEST(MoePermuteTest, SortChunksAndItsInverse) {
  // Chunks of 1, 2, 0, 1 rows of 1 channel: [a | b c | - | d]; order 3 1 0 2 -> d b c a.
  const Vec x = {1, 2, 3, 4};
  const Counts rows = {1, 2, 0, 1}, order = {3, 1, 0, 2};
  Vec y(4);
  moe_sort_chunks<double>(y, x, rows, order, 1);
  EXPECT_THAT(y, ElementsAre(4, 2, 3, 1));
  // The inverse: chunks of the output have rows[order[j]] rows; inverse[order[j]] = j.
  const Counts sorted_rows = {1, 2, 1, 0}, inverse = {2, 1, 3, 0};
  Vec z(4);
  moe_sort_chunks<double>(z, y, sorted_rows, inverse, 1);
  EXPECT_EQ(z, x);
  EXPECT_THROW(moe_sort_chunks<double>(y, x, rows, Counts{0, 0, 1, 2}, 1), InvalidArgument);
}

TEST(GroupedMatmulTest, EqualsOneMatmulPerGroupAndGradient) {
  const int64_t c = 3, oc = 4;
  const Counts rows = {2, 0, 3};  // expert 1 got no token
  const int64_t m = 5;
  Vec inp = random_vec(m * c, 31), weight = random_vec(3 * oc * c, 32);
  Vec out(static_cast<size_t>(m * oc));
  grouped_matmul_forward<double>(out, inp, weight, rows, c, oc);
  // Row 2 (the first of group 2) by hand: out[2, o] = sum_i inp[2, i] W_2[o, i].
  for (int64_t o = 0; o < oc; ++o) {
    double s = 0;
    for (int64_t i = 0; i < c; ++i) s += inp[static_cast<size_t>(2 * c + i)] * weight[static_cast<size_t>(2 * oc * c + o * c + i)];
    EXPECT_NEAR(out[static_cast<size_t>(2 * oc + o)], s, 1e-14);
  }
  const Vec dout = random_vec(m * oc, 33);
  auto loss = [&] {
    grouped_matmul_forward<double>(out, inp, weight, rows, c, oc);
    return dot(out, dout);
  };
  Vec dinp(inp.size()), dweight(weight.size());
  grouped_matmul_backward_data<double>(dinp, dout, weight, rows, c, oc);
  grouped_matmul_backward_weight<double>(dweight, dout, inp, rows, c, oc);
  expect_gradient(inp, dinp, loss, "dinp");
  expect_gradient(weight, dweight, loss, "dweight");
  for (int64_t i = 0; i < oc * c; ++i) EXPECT_EQ(dweight[static_cast<size_t>(oc * c + i)], 0.0);
  EXPECT_THROW(grouped_matmul_forward<double>(out, inp, weight, Counts{2, 1, 3}, c, oc),
               InvalidArgument);
}

/// A whole MoE layer on one rank from the layers above: out = unpermute(experts(permute(x))),
/// loss = <out, dout> + aux; experts are SwiGLU (FC1 [2F, h] per expert) or GeLU (FC1 [F, h]).
struct MoeLayer {
  int64_t n = 6, h = 4, e = 4, k = 2, f = 3;
  int64_t capacity = 0;
  bool pad = false, swiglu = true;
  double aux_coeff = 0.05;
  Vec x, w_router, w1, w2, dout;

  int64_t fc1_width() const { return swiglu ? 2 * f : f; }

  void init(uint32_t seed) {
    x = random_vec(n * h, seed);
    w_router = random_vec(e * h, seed + 1, 1.5);
    w1 = random_vec(e * fc1_width() * h, seed + 2);
    w2 = random_vec(e * h * f, seed + 3);
    dout = random_vec(n * h, seed + 4);
  }

  struct Saved {
    Vec logits, scores, fc1_in, fc1_out, act, fc2_out, out;
    Routing r;
    MoePermutation p;
    double aux = 0;
  };

  Saved forward() const {
    Saved s;
    s.logits.assign(static_cast<size_t>(n * e), 0);
    matmul_forward<double>(s.logits, x, w_router, {}, 1, n, h, e);
    s.r = route(s.logits, n, e, k, capacity, pad);
    s.scores.assign(s.logits.size(), 0);
    s.aux = moe_switch_aux_loss_forward<double>(s.scores, s.logits, s.r.tokens_per_expert, n, e,
                                                n, k, aux_coeff);
    s.p = moe_make_permutation(s.r.routing_map, n, e);
    const int64_t m = s.p.rows();
    s.fc1_in.assign(static_cast<size_t>(m * h), 0);
    moe_permute_forward<double>(s.fc1_in, x, s.p, n, h);
    s.fc1_out.assign(static_cast<size_t>(m * fc1_width()), 0);
    grouped_matmul_forward<double>(s.fc1_out, s.fc1_in, w1, s.p.rows_per_expert, h, fc1_width());
    s.act.assign(static_cast<size_t>(m * f), 0);
    if (swiglu) {
      swiglu_forward<double>(s.act, s.fc1_out, m, f);
    } else {
      gelu_forward<double>(s.act, s.fc1_out);
    }
    s.fc2_out.assign(static_cast<size_t>(m * h), 0);
    grouped_matmul_forward<double>(s.fc2_out, s.act, w2, s.p.rows_per_expert, f, h);
    s.out.assign(static_cast<size_t>(n * h), 0);
    moe_unpermute_forward<double>(s.out, s.fc2_out, s.r.probs, s.p, n, e, h);
    return s;
  }

  double loss() const {
    const Saved s = forward();
    return dot(s.out, dout) + s.aux;
  }

  void backward(Vec& dx, Vec& dw_router, Vec& dw1, Vec& dw2) const {
    const Saved s = forward();
    const int64_t m = s.p.rows();
    Vec dfc2_out(s.fc2_out.size()), dprobs(s.r.probs.size());
    moe_unpermute_backward<double>(dfc2_out, dprobs, dout, s.fc2_out, s.r.probs, s.p, n, e, h);
    Vec dact(s.act.size());
    grouped_matmul_backward_data<double>(dact, dfc2_out, w2, s.p.rows_per_expert, f, h);
    grouped_matmul_backward_weight<double>(dw2, dfc2_out, s.act, s.p.rows_per_expert, f, h);
    Vec dfc1_out(s.fc1_out.size());
    if (swiglu) {
      swiglu_backward<double>(dfc1_out, dact, s.fc1_out, m, f);
    } else {
      gelu_backward<double>(dfc1_out, s.fc1_out, dact);
    }
    Vec dfc1_in(s.fc1_in.size());
    grouped_matmul_backward_data<double>(dfc1_in, dfc1_out, w1, s.p.rows_per_expert, h,
                                         fc1_width());
    grouped_matmul_backward_weight<double>(dw1, dfc1_out, s.fc1_in, s.p.rows_per_expert, h,
                                           fc1_width());
    moe_permute_backward<double>(dx, dfc1_in, s.p, n, h);
    Vec dlogits(s.logits.size());
    moe_topk_softmax_backward<double>(dlogits, dprobs, s.r.gates, s.r.topk_map, s.r.routing_map,
                                      n, e);
    moe_switch_aux_loss_backward<double>(dlogits, 1.0, s.scores, s.r.tokens_per_expert, n, e, n,
                                         k, aux_coeff);
    matmul_backward<double>(dx, dw_router, {}, dlogits, x, w_router, 1, n, h, e);
  }

  void check_gradients(const std::string& mode) {
    Vec dx(x.size()), dwr(w_router.size()), dw1(w1.size()), dw2(w2.size());
    backward(dx, dwr, dw1, dw2);
    auto l = [&] { return loss(); };
    expect_gradient(x, dx, l, mode + " dx");
    expect_gradient(w_router, dwr, l, mode + " dW_router");
    expect_gradient(w1, dw1, l, mode + " dW_fc1");
    expect_gradient(w2, dw2, l, mode + " dW_fc2");
  }
};

TEST(MoeLayerGradientTest, DroplessSwigluExperts) {
  MoeLayer layer;
  layer.init(41);
  layer.check_gradients("dropless swiglu");
}

TEST(MoeLayerGradientTest, DroplessGeluExperts) {
  MoeLayer layer;
  layer.swiglu = false;
  layer.init(51);
  layer.check_gradients("dropless gelu");
}

TEST(MoeLayerGradientTest, CapacityDropsAndPadding) {
  MoeLayer layer;
  layer.capacity = moe_expert_capacity(layer.n, layer.k, layer.e, 0.5);  // ceil(1.5) = 2: drops
  layer.init(61);
  const auto s = layer.forward();
  int routed = 0, kept = 0;
  for (size_t i = 0; i < s.r.topk_map.size(); ++i) {
    routed += s.r.topk_map[i];
    kept += s.r.routing_map[i];
  }
  EXPECT_EQ(routed, layer.n * layer.k);
  EXPECT_LT(kept, routed) << "capacity 2 x 4 experts < 12 routed slots: some tokens drop";
  layer.check_gradients("capacity");
  layer.pad = true;
  const auto padded = layer.forward();
  for (const int64_t rows : padded.p.rows_per_expert) EXPECT_EQ(rows, layer.capacity);
  layer.check_gradients("capacity padded");
}

}  // namespace
}  // namespace traintwin::exec::cpu
