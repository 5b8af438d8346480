// CudaBackend's mixture-of-experts members against CpuBackend (needs a device; skips without
// one): the router forward in dropless and capacity modes, with and without padding, top-1 and
// top-2, on random logits and on integer logits full of ties (the maps and counts must be
// identical: the same top-k, capacity and tie choices), an expert that no token picks; its
// backward; the Switch aux loss value and gradient; permute / unpermute and their backwards on
// routings with dropped and padding rows, and their round trip; sort_chunks with empty chunks
// and its inverse; the grouped GEMM with an empty group (and no rows at all); a whole MoE layer
// forward and backward; the argument checks. fp32 on both sides, bound 1e-5.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.hpp"
#include "exec/cpu/moe_permute.hpp"
#include "exec/cpu/moe_router.hpp"
#include "tests/gpu/backend_pair.hpp"

namespace traintwin::exec::cuda {
namespace {

using namespace testing;
using Map = std::vector<uint8_t>;
using Counts = std::vector<int64_t>;

/// The host outputs of one side's router forward.
struct HostRouting {
  Map topk_map, routing_map;
  Counts tokens_per_expert;
  HostRouting(int64_t n, int64_t e)
      : topk_map(static_cast<size_t>(n * e), 7), routing_map(static_cast<size_t>(n * e), 7),
        tokens_per_expert(static_cast<size_t>(e), -1) {}
};

/// The router forward on both backends.
struct Routed {
  Pair gates, probs;
  HostRouting cpu, gpu;
};

Routed route(BackendPair& bp, const Pair& logits, int64_t n, int64_t e, int64_t k,
             int64_t capacity, bool pad) {
  const auto ne = static_cast<size_t>(n * e);
  Routed r{bp.output(ne), bp.output(ne), HostRouting(n, e), HostRouting(n, e)};
  bp.cpu().moe_topk_softmax_forward(r.gates.cpu, r.cpu.topk_map, r.cpu.routing_map, r.probs.cpu,
                                    r.cpu.tokens_per_expert, logits.cpu, n, e, k, capacity, pad);
  bp.gpu().moe_topk_softmax_forward(r.gates.gpu, r.gpu.topk_map, r.gpu.routing_map, r.probs.gpu,
                                    r.gpu.tokens_per_expert, logits.gpu, n, e, k, capacity, pad);
  return r;
}

/// Maps and counts identical, gates and probs within 1e-5.
void expect_same_routing(BackendPair& bp, Routed& r) {
  EXPECT_EQ(r.gpu.topk_map, r.cpu.topk_map) << "seed " << bp.seed();
  EXPECT_EQ(r.gpu.routing_map, r.cpu.routing_map) << "seed " << bp.seed();
  EXPECT_EQ(r.gpu.tokens_per_expert, r.cpu.tokens_per_expert) << "seed " << bp.seed();
  TRAINTWIN_EXPECT_CLOSE(bp, r.gates, 1e-5);
  TRAINTWIN_EXPECT_CLOSE(bp, r.probs, 1e-5);
}

/// Random logits in [-1, 1) with expert `cold` at -5: no token picks it while k < E.
std::vector<float> logits_with_cold_expert(BackendPair& bp, int64_t n, int64_t e, int64_t cold) {
  std::vector<float> v = bp.random_floats(static_cast<size_t>(n * e));
  for (int64_t t = 0; t < n; ++t) v[static_cast<size_t>(t * e + cold)] = -5.0f;
  return v;
}

/// Integer logits in [-2, 2]: ties in the top-k and equal gates at the capacity cut.
std::vector<float> tied_logits(BackendPair& bp, int64_t n, int64_t e) {
  const std::vector<int32_t> ints = random_ints(bp.gen(), static_cast<size_t>(n * e), -2, 3);
  return std::vector<float>(ints.begin(), ints.end());
}

TEST(CudaBackendMoe, RouterDroplessTop1AndTop2) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  // E = 6 (fewer experts than a warp's lanes) and E = 40 (lanes loop).
  for (const int64_t e : {int64_t{6}, int64_t{40}}) {
    for (const int64_t k : {int64_t{1}, int64_t{2}}) {
      SCOPED_TRACE("E " + std::to_string(e) + " k " + std::to_string(k));
      const int64_t n = 37;
      const Pair logits = bp.make(logits_with_cold_expert(bp, n, e, 3));
      Routed r = route(bp, logits, n, e, k, 0, false);
      expect_same_routing(bp, r);
      EXPECT_EQ(r.gpu.tokens_per_expert[3], 0);  // the cold expert
      EXPECT_EQ(r.gpu.routing_map, r.gpu.topk_map);
    }
  }
}

TEST(CudaBackendMoe, RouterCapacityWithAndWithoutPadding) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  const int64_t n = 50, e = 8;
  for (const int64_t k : {int64_t{1}, int64_t{2}}) {
    // Factor 0.5 drops tokens; 10 gives a capacity over N (every token kept).
    for (const double factor : {0.5, 1.0, 10.0}) {
      for (const bool pad : {false, true}) {
        const int64_t capacity = cpu::moe_expert_capacity(n, k, e, factor);
        SCOPED_TRACE("k " + std::to_string(k) + " capacity " + std::to_string(capacity) +
                     (pad ? " padded" : ""));
        const Pair logits = bp.make(logits_with_cold_expert(bp, n, e, 5));
        Routed r = route(bp, logits, n, e, k, capacity, pad);
        expect_same_routing(bp, r);
        if (pad) {
          // Each expert, the cold one included, gets exactly min(capacity, N) rows.
          for (int64_t x = 0; x < e; ++x) {
            int64_t rows = 0;
            for (int64_t t = 0; t < n; ++t) rows += r.gpu.routing_map[static_cast<size_t>(t * e + x)];
            EXPECT_EQ(rows, std::min(capacity, n)) << "expert " << x;
          }
        }
      }
    }
  }
}

TEST(CudaBackendMoe, RouterTiesBreakAsTheCpu) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  // Integer logits: equal logits in the top-k (the smaller expert first) and equal gates at the
  // capacity cut (the smaller token first); top-1 gates are all exactly 1.
  const int64_t n = 64, e = 5;
  for (const int64_t k : {int64_t{1}, int64_t{2}, int64_t{3}}) {
    for (const int64_t capacity : {int64_t{0}, int64_t{7}, int64_t{20}}) {
      for (const bool pad : {false, true}) {
        if (pad && capacity == 0) continue;
        SCOPED_TRACE("k " + std::to_string(k) + " capacity " + std::to_string(capacity) +
                     (pad ? " padded" : ""));
        const Pair logits = bp.make(tied_logits(bp, n, e));
        Routed r = route(bp, logits, n, e, k, capacity, pad);
        expect_same_routing(bp, r);
      }
    }
  }
}

TEST(CudaBackendMoe, RouterBackward) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  const int64_t n = 45, e = 8;
  for (const int64_t k : {int64_t{1}, int64_t{2}}) {
    for (const int64_t capacity : {int64_t{0}, int64_t{9}}) {
      SCOPED_TRACE("k " + std::to_string(k) + " capacity " + std::to_string(capacity));
      const Pair logits = bp.make(logits_with_cold_expert(bp, n, e, 2));
      Routed r = route(bp, logits, n, e, k, capacity, capacity > 0);
      const Pair dprobs = bp.random(static_cast<size_t>(n * e));
      Pair dlogits = bp.random(static_cast<size_t>(n * e));  // accumulates
      bp.cpu().moe_topk_softmax_backward(dlogits.cpu, dprobs.cpu, r.gates.cpu, r.cpu.topk_map,
                                         r.cpu.routing_map, n, e);
      bp.gpu().moe_topk_softmax_backward(dlogits.gpu, dprobs.gpu, r.gates.gpu, r.gpu.topk_map,
                                         r.gpu.routing_map, n, e);
      TRAINTWIN_EXPECT_CLOSE(bp, dlogits, 1e-5);
    }
  }
}

TEST(CudaBackendMoe, SwitchAuxLossValueAndGradient) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  for (const int64_t e : {int64_t{8}, int64_t{70}}) {
    SCOPED_TRACE("E " + std::to_string(e));
    const int64_t n = 300, k = 2;
    const int64_t total = 2 * n;  // a sequence-parallel group of 2
    const double coeff = 0.01;
    const Pair logits = bp.random(static_cast<size_t>(n * e), -2.0, 2.0);
    Routed r = route(bp, logits, n, e, k, 0, false);
    ASSERT_EQ(r.gpu.tokens_per_expert, r.cpu.tokens_per_expert);
    Counts tpe = r.cpu.tokens_per_expert;
    for (int64_t& c : tpe) c *= 2;  // summed over the group
    Pair scores = bp.output(static_cast<size_t>(n * e));
    const double aux_cpu =
        bp.cpu().moe_switch_aux_loss_forward(scores.cpu, logits.cpu, tpe, n, e, total, k, coeff);
    const double aux_gpu =
        bp.gpu().moe_switch_aux_loss_forward(scores.gpu, logits.gpu, tpe, n, e, total, k, coeff);
    EXPECT_NEAR(aux_gpu, aux_cpu, 1e-5 * std::abs(aux_cpu)) << "seed " << bp.seed();
    TRAINTWIN_EXPECT_CLOSE(bp, scores, 1e-5);

    Pair dlogits = bp.random(static_cast<size_t>(n * e));  // accumulates
    bp.cpu().moe_switch_aux_loss_backward(dlogits.cpu, 0.7, scores.cpu, tpe, n, e, total, k,
                                          coeff);
    bp.gpu().moe_switch_aux_loss_backward(dlogits.gpu, 0.7, scores.gpu, tpe, n, e, total, k,
                                          coeff);
    // dlogits starts at O(1) and the aux gradient is O(coeff / N): compare the increments too.
    Pair fresh = bp.zeros(static_cast<size_t>(n * e));
    bp.cpu().moe_switch_aux_loss_backward(fresh.cpu, 0.7, scores.cpu, tpe, n, e, total, k, coeff);
    bp.gpu().moe_switch_aux_loss_backward(fresh.gpu, 0.7, scores.gpu, tpe, n, e, total, k, coeff);
    TRAINTWIN_EXPECT_CLOSE(bp, dlogits, 1e-5);
    TRAINTWIN_EXPECT_CLOSE(bp, fresh, 1e-5);
  }
}

/// The routing cases of the permutation tests: dropless top-2, capacity top-1 (tokens dropped
/// everywhere), capacity top-2 with padding (zero-gate rows).
struct RoutingCase {
  const char* name;
  int64_t k, capacity;
  bool pad;
};
constexpr RoutingCase kCases[] = {
    {"dropless top-2", 2, 0, false},
    {"capacity top-1", 1, 4, false},
    {"capacity top-2 padded", 2, 9, true},
};

TEST(CudaBackendMoe, PermuteUnpermuteAndBackwards) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  const int64_t n = 33, e = 6;
  for (const int64_t c : {int64_t{40}, int64_t{300}}) {  // channels under and over a block
    for (const RoutingCase& rc : kCases) {
      SCOPED_TRACE(std::string(rc.name) + " C " + std::to_string(c));
      const Pair logits = bp.make(logits_with_cold_expert(bp, n, e, 4));
      Routed r = route(bp, logits, n, e, rc.k, rc.capacity, rc.pad);
      ASSERT_EQ(r.gpu.routing_map, r.cpu.routing_map);
      const cpu::MoePermutation perm = cpu::moe_make_permutation(r.cpu.routing_map, n, e);
      const auto m = static_cast<size_t>(perm.rows());
      const auto nc = static_cast<size_t>(n * c);

      const Pair x = bp.random(nc);
      Pair permuted = bp.output(m * static_cast<size_t>(c));
      bp.cpu().moe_permute_forward(permuted.cpu, x.cpu, perm, n, c);
      bp.gpu().moe_permute_forward(permuted.gpu, x.gpu, perm, n, c);
      TRAINTWIN_EXPECT_CLOSE(bp, permuted, 1e-5);

      const Pair dpermuted = bp.random(m * static_cast<size_t>(c));
      Pair dx = bp.random(nc);  // accumulates
      bp.cpu().moe_permute_backward(dx.cpu, dpermuted.cpu, perm, n, c);
      bp.gpu().moe_permute_backward(dx.gpu, dpermuted.gpu, perm, n, c);
      TRAINTWIN_EXPECT_CLOSE(bp, dx, 1e-5);

      const Pair expert_out = bp.random(m * static_cast<size_t>(c));
      Pair y = bp.output(nc);
      bp.cpu().moe_unpermute_forward(y.cpu, expert_out.cpu, r.probs.cpu, perm, n, e, c);
      bp.gpu().moe_unpermute_forward(y.gpu, expert_out.gpu, r.probs.gpu, perm, n, e, c);
      TRAINTWIN_EXPECT_CLOSE(bp, y, 1e-5);

      const Pair dy = bp.random(nc);
      Pair dexpert_out = bp.random(m * static_cast<size_t>(c));  // accumulates
      Pair dprobs = bp.random(static_cast<size_t>(n * e));       // accumulates
      bp.cpu().moe_unpermute_backward(dexpert_out.cpu, dprobs.cpu, dy.cpu, expert_out.cpu,
                                      r.probs.cpu, perm, n, e, c);
      bp.gpu().moe_unpermute_backward(dexpert_out.gpu, dprobs.gpu, dy.gpu, expert_out.gpu,
                                      r.probs.gpu, perm, n, e, c);
      TRAINTWIN_EXPECT_CLOSE(bp, dexpert_out, 1e-5);
      TRAINTWIN_EXPECT_CLOSE(bp, dprobs, 1e-5);
    }
  }
}

TEST(CudaBackendMoe, PermuteThenUnpermuteRestoresTopOneTokens) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  // Dropless top-1 with unit weights: unpermute(permute(x)) = x exactly, on the GPU alone.
  const int64_t n = 29, e = 5, c = 70;
  const Pair logits = bp.random(static_cast<size_t>(n * e));
  Routed r = route(bp, logits, n, e, 1, 0, false);
  const cpu::MoePermutation perm = cpu::moe_make_permutation(r.gpu.routing_map, n, e);
  ASSERT_EQ(perm.rows(), n);
  std::vector<float> ones(static_cast<size_t>(n * e));
  for (size_t i = 0; i < ones.size(); ++i) ones[i] = static_cast<float>(r.gpu.routing_map[i]);
  const Pair unit = bp.make(ones);
  const std::vector<float> xs = bp.random_floats(static_cast<size_t>(n * c));
  const Pair x = bp.make(xs);
  Pair permuted = bp.output(static_cast<size_t>(n * c));
  Pair back = bp.output(static_cast<size_t>(n * c));
  bp.gpu().moe_permute_forward(permuted.gpu, x.gpu, perm, n, c);
  bp.gpu().moe_unpermute_forward(back.gpu, permuted.gpu, unit.gpu, perm, n, e, c);
  EXPECT_EQ(back.gpu_host(bp.gpu()), xs);
  // Top-2 dropless with the router's probs: the rows of a token sum to its gates' sum, 1.
  Routed r2 = route(bp, logits, n, e, 2, 0, false);
  const cpu::MoePermutation perm2 = cpu::moe_make_permutation(r2.gpu.routing_map, n, e);
  Pair permuted2 = bp.output(static_cast<size_t>(perm2.rows() * c));
  bp.gpu().moe_permute_forward(permuted2.gpu, x.gpu, perm2, n, c);
  bp.gpu().moe_unpermute_forward(back.gpu, permuted2.gpu, r2.probs.gpu, perm2, n, e, c);
  const std::vector<float> b2 = back.gpu_host(bp.gpu());
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_NEAR(b2[i], xs[i], 1e-6) << i;
}

TEST(CudaBackendMoe, SortChunksAndItsInverse) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  // Chunks [source rank][local expert] with empty ones, a non-trivial order, then its inverse.
  const Counts rows = {3, 0, 5, 2, 1, 4, 0, 6};
  const Counts order = {4, 2, 7, 0, 6, 5, 1, 3};
  const int64_t c = 37;
  int64_t total = 0;
  for (const int64_t r : rows) total += r;
  const std::vector<float> xs = bp.random_floats(static_cast<size_t>(total * c));
  const Pair x = bp.make(xs);
  Pair y = bp.output(static_cast<size_t>(total * c));
  bp.cpu().moe_sort_chunks(y.cpu, x.cpu, rows, order, c);
  bp.gpu().moe_sort_chunks(y.gpu, x.gpu, rows, order, c);
  TRAINTWIN_EXPECT_CLOSE(bp, y, 0.0);  // a copy: exact

  Counts sorted_rows(rows.size()), inverse(rows.size());
  for (size_t j = 0; j < order.size(); ++j) {
    sorted_rows[j] = rows[static_cast<size_t>(order[j])];
    inverse[static_cast<size_t>(order[j])] = static_cast<int64_t>(j);
  }
  Pair z = bp.output(static_cast<size_t>(total * c));
  bp.gpu().moe_sort_chunks(z.gpu, y.gpu, sorted_rows, inverse, c);
  EXPECT_EQ(z.gpu_host(bp.gpu()), xs);

  EXPECT_THROW(bp.gpu().moe_sort_chunks(z.gpu, y.gpu, rows, Counts{0, 0, 1, 2, 3, 4, 5, 6}, c),
               InvalidArgument);
  EXPECT_THROW(bp.gpu().moe_sort_chunks(z.gpu, y.gpu, Counts{3, 0, 5}, Counts{0, 1, 2}, c),
               InvalidArgument);
}

TEST(CudaBackendMoe, GroupedMatmulWithAnEmptyGroup) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  const Counts rows = {5, 0, 17, 3};  // local expert 1 got no token
  const int64_t c = 24, oc = 40, g = 4, m = 25;
  const Pair inp = bp.random(static_cast<size_t>(m * c));
  const Pair weight = bp.random(static_cast<size_t>(g * oc * c));
  Pair out = bp.output(static_cast<size_t>(m * oc));
  bp.cpu().grouped_matmul_forward(out.cpu, inp.cpu, weight.cpu, rows, c, oc);
  bp.gpu().grouped_matmul_forward(out.gpu, inp.gpu, weight.gpu, rows, c, oc);
  TRAINTWIN_EXPECT_CLOSE(bp, out, 1e-5);

  const Pair dout = bp.random(static_cast<size_t>(m * oc));
  Pair dinp = bp.random(static_cast<size_t>(m * c));            // accumulates
  Pair dweight = bp.random(static_cast<size_t>(g * oc * c));    // accumulates
  bp.cpu().grouped_matmul_backward_data(dinp.cpu, dout.cpu, weight.cpu, rows, c, oc);
  bp.gpu().grouped_matmul_backward_data(dinp.gpu, dout.gpu, weight.gpu, rows, c, oc);
  bp.cpu().grouped_matmul_backward_weight(dweight.cpu, dout.cpu, inp.cpu, rows, c, oc);
  bp.gpu().grouped_matmul_backward_weight(dweight.gpu, dout.gpu, inp.gpu, rows, c, oc);
  TRAINTWIN_EXPECT_CLOSE(bp, dinp, 1e-5);
  TRAINTWIN_EXPECT_CLOSE(bp, dweight, 1e-5);

  // No rows at all (every local expert empty): nothing to do, no error.
  const Counts empty = {0, 0};
  Pair none_out = bp.output(0);
  Pair none_dw = bp.random(static_cast<size_t>(2 * oc * c));  // accumulates: stays as it is
  const Pair none_in = bp.random(0);
  const Pair none_w = bp.random(static_cast<size_t>(2 * oc * c));
  EXPECT_NO_THROW(
      bp.gpu().grouped_matmul_forward(none_out.gpu, none_in.gpu, none_w.gpu, empty, c, oc));
  bp.cpu().grouped_matmul_backward_weight(none_dw.cpu, none_out.cpu, none_in.cpu, empty, c, oc);
  bp.gpu().grouped_matmul_backward_weight(none_dw.gpu, none_out.gpu, none_in.gpu, empty, c, oc);
  TRAINTWIN_EXPECT_CLOSE(bp, none_dw, 0.0);  // untouched

  EXPECT_THROW(bp.gpu().grouped_matmul_forward(out.gpu, inp.gpu, weight.gpu, Counts{5, 1, 17, 3},
                                               c, oc),
               InvalidArgument);
  EXPECT_THROW(bp.gpu().grouped_matmul_forward(out.gpu, inp.gpu, weight.gpu, Counts{6, -1, 17, 3},
                                               c, oc),
               InvalidArgument);
}

TEST(CudaBackendMoe, WholeLayerForwardAndBackward) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  // router -> permute -> FC (grouped GEMM; the cold expert's group is empty) -> unpermute, and
  // back, each side on its own results.
  const int64_t n = 40, e = 4, k = 2, h = 16, f = 24;
  const Pair logits = bp.make(logits_with_cold_expert(bp, n, e, 1));
  Routed r = route(bp, logits, n, e, k, 0, false);
  ASSERT_EQ(r.gpu.routing_map, r.cpu.routing_map);
  const cpu::MoePermutation perm = cpu::moe_make_permutation(r.cpu.routing_map, n, e);
  ASSERT_EQ(perm.rows_per_expert[1], 0);
  const auto m = static_cast<size_t>(perm.rows());
  const Pair x = bp.random(static_cast<size_t>(n * h));
  const Pair w = bp.random(static_cast<size_t>(e * f * h));
  const auto hs = static_cast<size_t>(h);
  const auto fs = static_cast<size_t>(f);
  Pair xp = bp.output(m * hs), hidden = bp.output(m * fs), y = bp.output(static_cast<size_t>(n * f));
  for (Backend* b : {static_cast<Backend*>(&bp.cpu()), static_cast<Backend*>(&bp.gpu())}) {
    const bool gpu = b == &bp.gpu();
    auto pick = [gpu](Pair& p) -> Tensor& { return gpu ? p.gpu : p.cpu; };
    auto cpick = [gpu](const Pair& p) -> const Tensor& { return gpu ? p.gpu : p.cpu; };
    b->moe_permute_forward(pick(xp), cpick(x), perm, n, h);
    b->grouped_matmul_forward(pick(hidden), cpick(xp), cpick(w), perm.rows_per_expert, h, f);
    b->moe_unpermute_forward(pick(y), cpick(hidden), cpick(r.probs), perm, n, e, f);
  }
  TRAINTWIN_EXPECT_CLOSE(bp, y, 1e-5);

  const Pair dy = bp.random(static_cast<size_t>(n * f));
  Pair dhidden = bp.zeros(m * fs), dprobs = bp.zeros(static_cast<size_t>(n * e));
  Pair dxp = bp.zeros(m * hs), dw = bp.zeros(static_cast<size_t>(e * f * h));
  Pair dx = bp.zeros(static_cast<size_t>(n * h)), dlogits = bp.zeros(static_cast<size_t>(n * e));
  for (Backend* b : {static_cast<Backend*>(&bp.cpu()), static_cast<Backend*>(&bp.gpu())}) {
    const bool gpu = b == &bp.gpu();
    auto pick = [gpu](Pair& p) -> Tensor& { return gpu ? p.gpu : p.cpu; };
    auto cpick = [gpu](const Pair& p) -> const Tensor& { return gpu ? p.gpu : p.cpu; };
    const HostRouting& hr = gpu ? r.gpu : r.cpu;
    b->moe_unpermute_backward(pick(dhidden), pick(dprobs), cpick(dy), cpick(hidden),
                              cpick(r.probs), perm, n, e, f);
    b->grouped_matmul_backward_data(pick(dxp), cpick(dhidden), cpick(w), perm.rows_per_expert, h,
                                    f);
    b->grouped_matmul_backward_weight(pick(dw), cpick(dhidden), cpick(xp), perm.rows_per_expert,
                                      h, f);
    b->moe_permute_backward(pick(dx), cpick(dxp), perm, n, h);
    b->moe_topk_softmax_backward(pick(dlogits), cpick(dprobs), cpick(r.gates), hr.topk_map,
                                 hr.routing_map, n, e);
  }
  TRAINTWIN_EXPECT_CLOSE(bp, dhidden, 1e-5);
  TRAINTWIN_EXPECT_CLOSE(bp, dprobs, 1e-5);
  TRAINTWIN_EXPECT_CLOSE(bp, dxp, 1e-5);
  TRAINTWIN_EXPECT_CLOSE(bp, dw, 1e-5);
  TRAINTWIN_EXPECT_CLOSE(bp, dx, 1e-5);
  TRAINTWIN_EXPECT_CLOSE(bp, dlogits, 1e-5);
}

TEST(CudaBackendMoe, ArgumentChecks) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  const int64_t n = 4, e = 3;
  const Pair logits = bp.random(static_cast<size_t>(n * e));
  Pair gates = bp.output(static_cast<size_t>(n * e)), probs = bp.output(static_cast<size_t>(n * e));
  HostRouting h(n, e);
  auto call = [&](int64_t k, int64_t capacity, bool pad) {
    bp.gpu().moe_topk_softmax_forward(gates.gpu, h.topk_map, h.routing_map, probs.gpu,
                                      h.tokens_per_expert, logits.gpu, n, e, k, capacity, pad);
  };
  EXPECT_THROW(call(4, 0, false), InvalidArgument);  // topk > experts
  EXPECT_THROW(call(2, 0, true), InvalidArgument);   // padding without a capacity
  EXPECT_THROW(call(0, 0, false), InvalidArgument);
  EXPECT_THROW(bp.gpu().moe_topk_softmax_forward(gates.gpu, h.topk_map, h.routing_map, probs.gpu,
                                                 h.tokens_per_expert, logits.gpu, n + 1, e, 2, 0,
                                                 false),
               InvalidArgument);  // sizes
  Pair scores = bp.output(static_cast<size_t>(n * e));
  EXPECT_THROW(bp.gpu().moe_switch_aux_loss_forward(scores.gpu, logits.gpu, Counts(e, 1), n, e,
                                                    n - 1, 2, 0.01),
               InvalidArgument);  // total_tokens < tokens
  cpu::MoePermutation bad;
  bad.token = {0, 9};
  bad.expert = {0, 1};
  bad.rows_per_expert = {1, 1, 0};
  Pair out = bp.output(2 * 5);
  const Pair x = bp.random(static_cast<size_t>(n * 5));
  EXPECT_THROW(bp.gpu().moe_permute_forward(out.gpu, x.gpu, bad, n, 5), InvalidArgument);
}

}  // namespace
}  // namespace traintwin::exec::cuda
