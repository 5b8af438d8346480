// CudaBackend's "modern" members (exec/cuda/cuda_backend_modern.cu) against CpuBackend (needs a
// device; skips without one): RMSNorm, RoPE (CP size 1 and 2, both ranks), SwiGLU, squared ReLU,
// add_in_place, causal grouped-query attention (G < NH, G == NH, G == 1) with and without
// attention dropout, blockwise attention with CP positions (cp 1; cp 2: every pair of q and k
// ranks, the own block's causal diagonal, a block whose first chunk sees no key, a block seen
// whole), head_dim 8, 40 and 256 (above 48 KiB of shared memory), with and without dropout, its
// merge (rows of -inf lse included) and a whole ring-attention step of cp 2 (two blocks merged,
// then both blocks' backward); the fused attention through cuDNN (bf16 bounds); the argument
// checks. Odd sizes throughout (T not a multiple of
// 32 nor of the 16-row tiles, C not a multiple of 4). fp32 on both sides, bound 1e-5; the
// attention backwards 1e-4 (see kAttentionGradBound).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "exec/cp_sequence.hpp"
#include "exec/cpu/attention.hpp"
#include "exec/cpu/block_attention.hpp"
#include "exec/cpu/dropout.hpp"
#include "tests/gpu/backend_pair.hpp"

namespace traintwin::exec::cuda {
namespace {

using namespace testing;

/// Attention gradients: fp32 sums over up to T keys (and NH/G heads) in another order on each
/// side, through the softmax gradient's cancellation P (dP - D), as METHOD.md's long reductions.
constexpr double kAttentionGradBound = 1e-4;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// The CPU side of an operand as a host vector (CpuBackend memory is host memory).
std::vector<float> host(const Pair& p) {
  return std::vector<float>(p.cpu.data(), p.cpu.data() + p.cpu.size());
}

/// A log-sum-exp operand: -inf rows must be -inf on both sides, the finite ones within `bound`
/// (||gpu - cpu|| / ||cpu|| over them).
void expect_lse_close(BackendPair& bp, const Pair& lse, double bound, const char* name) {
  const std::vector<float> gpu = lse.gpu_host(bp.gpu());
  const std::vector<float> cpu = host(lse);
  ASSERT_EQ(gpu.size(), cpu.size());
  std::vector<double> g, c;
  int64_t mismatched = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (cpu[i] == kNegInf) {
      mismatched += gpu[i] == kNegInf ? 0 : 1;
    } else {
      g.push_back(gpu[i]);
      c.push_back(cpu[i]);
    }
  }
  EXPECT_EQ(mismatched, 0) << name << ": rows -inf on the CPU only (seed " << bp.seed() << ")";
  if (!c.empty()) {
    EXPECT_LE(relative_error(g, c), bound) << name << " (seed " << bp.seed() << ")";
  }
}

/// Attention-probability dropout of a block of `batch` samples, `heads` of 8 heads from head 2,
/// sample 3 first, over `seq` positions.
cpu::AttentionProbabilityDropout attention_dropout(BackendPair& bp, double p, int64_t batch,
                                                   int64_t heads, int64_t seq) {
  return cpu::AttentionProbabilityDropout{cpu::DropoutParams{p, bp.gen()(), bp.gen()()},
                                          cpu::AttentionBlock{batch, heads, seq, 3, 2, 8}};
}

TEST(CudaBackendModern, RmsNormForwardAndBackward) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  for (const int64_t c : {int64_t{203}, int64_t{1030}}) {
    const int64_t b = 2, t = 37, n = b * t * c;
    const Pair inp = bp.random(n, -2.0, 2.0), weight = bp.random(c, 0.5, 1.5);
    Pair out = bp.output(n), rrms = bp.output(b * t);
    bp.cpu().rmsnorm_forward(out.cpu, rrms.cpu, inp.cpu, weight.cpu, b, t, c);
    bp.gpu().rmsnorm_forward(out.gpu, rrms.gpu, inp.gpu, weight.gpu, b, t, c);
    TRAINTWIN_EXPECT_CLOSE(bp, out, 1e-5);
    TRAINTWIN_EXPECT_CLOSE(bp, rrms, 1e-5);

    // The backward from the CPU's rrms on both sides; dinp and dweight accumulate.
    const Pair saved = bp.make(host(rrms)), dout = bp.random(n);
    Pair dinp = bp.random(n), dweight = bp.random(c);
    bp.cpu().rmsnorm_backward(dinp.cpu, dweight.cpu, dout.cpu, inp.cpu, weight.cpu, saved.cpu, b,
                              t, c);
    bp.gpu().rmsnorm_backward(dinp.gpu, dweight.gpu, dout.gpu, inp.gpu, weight.gpu, saved.gpu, b,
                              t, c);
    TRAINTWIN_EXPECT_CLOSE(bp, dinp, 1e-5);
    TRAINTWIN_EXPECT_CLOSE(bp, dweight, 1e-5);
  }
}

TEST(CudaBackendModern, RopeForwardAndBackwardOnCpChunks) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  const int64_t b = 2, h = 3;
  for (const CpSequence seq : {CpSequence(37, 1, 0), CpSequence(68, 2, 0), CpSequence(68, 2, 1)}) {
    for (const int64_t d : {int64_t{6}, int64_t{64}}) {
      for (const double base : {10000.0, 500000.0}) {
        SCOPED_TRACE("cp " + std::to_string(seq.cp) + " rank " + std::to_string(seq.rank) +
                     " D " + std::to_string(d) + " base " + std::to_string(base));
        const int64_t t = seq.local(), n = b * t * h * d;
        const Pair inp = bp.random(n);
        Pair out = bp.output(n);
        bp.cpu().rope_forward(out.cpu, inp.cpu, b, t, h, d, seq, base);
        bp.gpu().rope_forward(out.gpu, inp.gpu, b, t, h, d, seq, base);
        TRAINTWIN_EXPECT_CLOSE(bp, out, 1e-5);

        const Pair dout = bp.random(n);
        Pair dinp = bp.random(n);
        bp.cpu().rope_backward(dinp.cpu, dout.cpu, b, t, h, d, seq, base);
        bp.gpu().rope_backward(dinp.gpu, dout.gpu, b, t, h, d, seq, base);
        TRAINTWIN_EXPECT_CLOSE(bp, dinp, 1e-5);
      }
    }
  }
}

TEST(CudaBackendModern, SwigluSquaredReluAndAddInPlace) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  const int64_t rows = 37, width = 203;
  const Pair inp = bp.random(rows * 2 * width, -4.0, 4.0);
  Pair out = bp.output(rows * width);
  bp.cpu().swiglu_forward(out.cpu, inp.cpu, rows, width);
  bp.gpu().swiglu_forward(out.gpu, inp.gpu, rows, width);
  TRAINTWIN_EXPECT_CLOSE(bp, out, 1e-5);
  const Pair dout = bp.random(rows * width);
  Pair dinp = bp.random(rows * 2 * width);
  bp.cpu().swiglu_backward(dinp.cpu, dout.cpu, inp.cpu, rows, width);
  bp.gpu().swiglu_backward(dinp.gpu, dout.gpu, inp.gpu, rows, width);
  TRAINTWIN_EXPECT_CLOSE(bp, dinp, 1e-5);

  const int64_t n = 1001;
  const Pair x = bp.random(n, -2.0, 2.0), dy = bp.random(n);
  Pair y = bp.output(n), dx = bp.random(n);
  bp.cpu().squared_relu_forward(y.cpu, x.cpu);
  bp.gpu().squared_relu_forward(y.gpu, x.gpu);
  TRAINTWIN_EXPECT_CLOSE(bp, y, 1e-5);
  bp.cpu().squared_relu_backward(dx.cpu, x.cpu, dy.cpu);
  bp.gpu().squared_relu_backward(dx.gpu, x.gpu, dy.gpu);
  TRAINTWIN_EXPECT_CLOSE(bp, dx, 1e-5);

  Pair dst = bp.random(n);
  const Pair src = bp.random(n);
  bp.cpu().add_in_place(dst.cpu, src.cpu);
  bp.gpu().add_in_place(dst.gpu, src.gpu);
  TRAINTWIN_EXPECT_CLOSE(bp, dst, 1e-5);
}

TEST(CudaBackendModern, GqaAttentionForwardAndBackward) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  const int64_t b = 2, t = 37, nh = 4, d = 20;
  for (const int64_t g : {int64_t{1}, int64_t{2}, int64_t{4}}) {
    for (const double p : {0.0, 0.2}) {
      SCOPED_TRACE("G " + std::to_string(g) + " p " + std::to_string(p));
      const cpu::AttentionProbabilityDropout drop = attention_dropout(bp, p, b, nh, t);
      const cpu::AttentionProbabilityDropout* dropout = p > 0 ? &drop : nullptr;
      const int64_t fused = b * t * (nh + 2 * g) * d, n = b * t * nh * d;
      const Pair inp = bp.random(fused);
      Pair out = bp.output(n), att = bp.output(b * nh * t * t);
      bp.cpu().gqa_attention_forward(out.cpu, att.cpu, inp.cpu, b, t, nh, g, d, dropout);
      bp.gpu().gqa_attention_forward(out.gpu, att.gpu, inp.gpu, b, t, nh, g, d, dropout);
      TRAINTWIN_EXPECT_CLOSE(bp, out, 1e-5);
      TRAINTWIN_EXPECT_CLOSE(bp, att, 1e-5);

      const Pair saved = bp.make(host(att)), dout = bp.random(n);
      Pair dinp = bp.random(fused);
      bp.cpu().gqa_attention_backward(dinp.cpu, dout.cpu, inp.cpu, saved.cpu, b, t, nh, g, d,
                                      dropout);
      bp.gpu().gqa_attention_backward(dinp.gpu, dout.gpu, inp.gpu, saved.gpu, b, t, nh, g, d,
                                      dropout);
      TRAINTWIN_EXPECT_CLOSE(bp, dinp, kAttentionGradBound);
    }
  }
}

/// Bounds of check_block: relative errors of out, lse and the gradients against the CPU.
struct BlockBounds {
  double out = 1e-5;
  double lse = 1e-5;
  double grad = kAttentionGradBound;
};

/// One block of blockwise attention, forward then backward (from the CPU forward's out and lse,
/// the same on both sides), compared; returns out's relative error.
double check_block(BackendPair& bp, const CpSequence& qs, const CpSequence& ks, int64_t nh,
                   int64_t g, int64_t d, double p, const BlockBounds& bounds = {}) {
  const int64_t b = 2;
  const cpu::BlockAttentionShape shape{b, qs.local(), ks.local(), nh, g, d};
  SCOPED_TRACE("cp " + std::to_string(qs.cp) + " q rank " + std::to_string(qs.rank) +
               " k rank " + std::to_string(ks.rank) + " NH " + std::to_string(nh) + " G " +
               std::to_string(g) + " D " + std::to_string(d) + " p " + std::to_string(p));
  const cpu::AttentionProbabilityDropout drop = attention_dropout(bp, p, b, nh, qs.seq_total);
  const cpu::AttentionProbabilityDropout* dropout = p > 0 ? &drop : nullptr;
  const int64_t nq = b * shape.seq_q * nh * d, nkv = b * shape.seq_k * 2 * g * d;
  const Pair q = bp.random(nq), kv = bp.random(nkv);
  Pair out = bp.output(nq), lse = bp.output(b * nh * shape.seq_q);
  bp.cpu().block_attention_forward(out.cpu, lse.cpu, q.cpu, kv.cpu, qs, ks, shape, dropout);
  bp.gpu().block_attention_forward(out.gpu, lse.gpu, q.gpu, kv.gpu, qs, ks, shape, dropout);
  TRAINTWIN_EXPECT_CLOSE(bp, out, bounds.out);
  expect_lse_close(bp, lse, bounds.lse, "lse");

  const Pair final_out = bp.make(host(out)), final_lse = bp.make(host(lse));
  const Pair dout = bp.random(nq);
  Pair dq = bp.random(nq), dkv = bp.random(nkv);
  bp.cpu().block_attention_backward(dq.cpu, dkv.cpu, dout.cpu, q.cpu, kv.cpu, final_out.cpu,
                                    final_lse.cpu, qs, ks, shape, dropout);
  bp.gpu().block_attention_backward(dq.gpu, dkv.gpu, dout.gpu, q.gpu, kv.gpu, final_out.gpu,
                                    final_lse.gpu, qs, ks, shape, dropout);
  TRAINTWIN_EXPECT_CLOSE(bp, dq, bounds.grad);
  TRAINTWIN_EXPECT_CLOSE(bp, dkv, bounds.grad);
  return bp.error(out);
}

TEST(CudaBackendModern, BlockAttentionWithoutContextParallelism) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  const CpSequence whole(37, 1, 0);
  for (const double p : {0.0, 0.2}) {
    check_block(bp, whole, whole, 4, 2, 40, p);
    check_block(bp, whole, whole, 3, 3, 8, p);
    check_block(bp, whole, whole, 2, 1, 256, p);  // 4 x 257 x 24 floats of shared memory
  }
}

TEST(CudaBackendModern, BlockAttentionOnCpBlocksOfEveryRankPair) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  // cp 2 over 68 positions: rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2 (17 each).
  // q rank 0 vs k rank 1: chunk 0 sees none of the block (lse -inf), chunk 3 all of it;
  // q rank 1 vs k rank 0: both chunks see chunk 0 only; equal ranks: the causal diagonal.
  for (const int64_t q_rank : {int64_t{0}, int64_t{1}}) {
    for (const int64_t k_rank : {int64_t{0}, int64_t{1}}) {
      for (const double p : {0.0, 0.1}) {
        check_block(bp, CpSequence(68, 2, q_rank), CpSequence(68, 2, k_rank), 4, 2, 40, p);
      }
    }
  }
}

// Under float32_matmul_precision high (TF32) and medium (bf16), head_dim 64 and 128 take the
// tensor-core kernels: medium without dropout the mma.sync ones (exec/cuda/
// flash_attention_mma.cuh), else the WMMA ones (flash_attention_tc.cuh); products of operands
// rounded to TF32 (unit roundoff 2^-11) or bf16 (2^-8), fp32 accumulation and softmax. Against
// the CPU's fp32 layer the error is that rounding's (out and gradients a few units of it: the
// bounds), and above the 1e-5 the fp32 kernels are held to, which shows the tensor-core path
// ran. Sequences of 150 positions (the last 64-row tile partial) and CP 2 over 260 (chunks of
// 65: tiles cross a chunk boundary, a block that sees none of the other), GQA, dropout.
TEST(CudaBackendModern, BlockAttentionOnTensorCores) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  struct Case {
    Float32MatmulPrecision precision;
    BlockBounds bounds;
  };
  for (const Case& k : {Case{Float32MatmulPrecision::kHigh, BlockBounds{2e-3, 1e-3, 4e-3}},
                        Case{Float32MatmulPrecision::kMedium, BlockBounds{1.5e-2, 5e-3, 3e-2}}}) {
    SCOPED_TRACE(to_string(k.precision));
    bp.gpu().set_float32_matmul_precision(k.precision);
    const CpSequence whole(150, 1, 0);
    for (const double p : {0.0, 0.1}) {
      EXPECT_GT(check_block(bp, whole, whole, 4, 2, 64, p, k.bounds), 1e-5);
      EXPECT_GT(check_block(bp, whole, whole, 2, 2, 128, p, k.bounds), 1e-5);
    }
    for (const int64_t q_rank : {int64_t{0}, int64_t{1}}) {
      for (const int64_t k_rank : {int64_t{0}, int64_t{1}}) {
        for (const double p : {0.0, 0.1}) {
          check_block(bp, CpSequence(260, 2, q_rank), CpSequence(260, 2, k_rank), 2, 1, 64, p,
                      k.bounds);
        }
      }
    }
  }
  // head_dim 40 has no tensor-core kernel: the fp32 one, to fp32's bound, at any precision.
  check_block(bp, CpSequence(37, 1, 0), CpSequence(37, 1, 0), 4, 2, 40, 0.0);
}

// attention_backend fused: cuDNN's fused flash attention (exec/cuda/cudnn_attention.hpp) on bf16
// copies of the QKV rows, against the CPU backend's default (the rows packed, the blockwise
// layer in fp32). bf16 operands and output (unit roundoff 2^-8) with fp32 accumulation and
// softmax: the tensor-core bounds of BlockAttentionOnTensorCores at medium, and above fp32's
// 1e-5 (cuDNN ran, not an fp32 path). Head dims 64 and 128, sequences a multiple of 64 and not
// (150), the backward from the CPU forward's out and lse. What cuDNN's graph does not cover is
// refused by name: GQA, attention dropout, fp32 products.
TEST(CudaBackendModern, FusedAttentionThroughCudnn) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  bp.gpu().set_float32_matmul_precision(Float32MatmulPrecision::kMedium);
  const BlockBounds bounds{1.5e-2, 5e-3, 3e-2};
  struct Case {
    int64_t b, t, nh, d;
  };
  for (const Case& k : {Case{2, 150, 2, 128}, Case{2, 256, 4, 64}, Case{1, 128, 16, 128}}) {
    SCOPED_TRACE("B " + std::to_string(k.b) + " T " + std::to_string(k.t) + " NH " +
                 std::to_string(k.nh) + " D " + std::to_string(k.d));
    const cpu::BlockAttentionShape shape{k.b, k.t, k.t, k.nh, k.nh, k.d};
    const int64_t rows = k.b * k.t, nq = rows * k.nh * k.d, width = 3 * k.nh * k.d;
    const Pair qkv = bp.random(rows * width);
    Pair out = bp.output(nq), lse = bp.output(k.b * k.nh * k.t);
    bp.cpu().fused_attention_forward(out.cpu, lse.cpu, qkv.cpu, shape, nullptr);
    bp.gpu().fused_attention_forward(out.gpu, lse.gpu, qkv.gpu, shape, nullptr);
    TRAINTWIN_EXPECT_CLOSE(bp, out, bounds.out);
    EXPECT_GT(bp.error(out), 1e-5);
    expect_lse_close(bp, lse, bounds.lse, "lse");

    const Pair final_out = bp.make(host(out)), final_lse = bp.make(host(lse));
    const Pair dout = bp.random(nq);
    Pair d_qkv = bp.random(rows * width);  // overwritten
    bp.cpu().fused_attention_backward(d_qkv.cpu, dout.cpu, qkv.cpu, final_out.cpu, final_lse.cpu,
                                      shape, nullptr);
    bp.gpu().fused_attention_backward(d_qkv.gpu, dout.gpu, qkv.gpu, final_out.gpu, final_lse.gpu,
                                      shape, nullptr);
    TRAINTWIN_EXPECT_CLOSE(bp, d_qkv, bounds.grad);
  }
  // Refused by name: GQA, dropout, fp32 products.
  const cpu::BlockAttentionShape gqa{1, 64, 64, 4, 2, 64};
  Pair gout = bp.output(64 * 4 * 64), glse = bp.output(4 * 64);
  const Pair gqkv = bp.random(64 * (4 + 4) * 64);
  EXPECT_THROW(bp.gpu().fused_attention_forward(gout.gpu, glse.gpu, gqkv.gpu, gqa, nullptr),
               UnsupportedError);
  const cpu::BlockAttentionShape mha{1, 64, 64, 2, 2, 64};
  Pair mout = bp.output(64 * 2 * 64), mlse = bp.output(2 * 64);
  const Pair mqkv = bp.random(64 * 6 * 64);
  const cpu::AttentionProbabilityDropout drop = attention_dropout(bp, 0.1, 1, 2, 64);
  EXPECT_THROW(bp.gpu().fused_attention_forward(mout.gpu, mlse.gpu, mqkv.gpu, mha, &drop),
               UnsupportedError);
  bp.gpu().set_float32_matmul_precision(Float32MatmulPrecision::kHighest);
  EXPECT_THROW(bp.gpu().fused_attention_forward(mout.gpu, mlse.gpu, mqkv.gpu, mha, nullptr),
               UnsupportedError);
}

TEST(CudaBackendModern, AttentionMergeWithEmptyRows) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  const int64_t b = 2, t = 19, nh = 3, d = 40;
  std::vector<float> l1 = bp.random_floats(b * nh * t, -3.0, 3.0);
  std::vector<float> l2 = bp.random_floats(b * nh * t, -3.0, 3.0);
  for (size_t i = 0; i < l1.size(); i += 5) l1[i] = kNegInf;      // the running block saw none
  for (size_t i = 0; i < l2.size(); i += 7) l2[i] = kNegInf;      // the new block sees none
  for (size_t i = 0; i < l1.size(); i += 35) l2[i] = kNegInf;     // neither: left as it is
  Pair out = bp.random(b * t * nh * d), lse = bp.make(l1);
  const Pair block_out = bp.random(b * t * nh * d), block_lse = bp.make(l2);
  bp.cpu().attention_merge(out.cpu, lse.cpu, block_out.cpu, block_lse.cpu, b, t, nh, d);
  bp.gpu().attention_merge(out.gpu, lse.gpu, block_out.gpu, block_lse.gpu, b, t, nh, d);
  TRAINTWIN_EXPECT_CLOSE(bp, out, 1e-5);
  expect_lse_close(bp, lse, 1e-5, "lse");
}

TEST(CudaBackendModern, RingAttentionStepOfCp2) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  const int64_t b = 2, nh = 4, g = 2, d = 24, total = 100;  // chunks of 25
  for (const int64_t rank : {int64_t{0}, int64_t{1}}) {
    for (const double p : {0.0, 0.15}) {
      SCOPED_TRACE("rank " + std::to_string(rank) + " p " + std::to_string(p));
      const CpSequence mine(total, 2, rank), other(total, 2, 1 - rank);
      const int64_t t = mine.local();
      const cpu::BlockAttentionShape shape{b, t, t, nh, g, d};
      const cpu::AttentionProbabilityDropout drop = attention_dropout(bp, p, b, nh, total);
      const cpu::AttentionProbabilityDropout* dropout = p > 0 ? &drop : nullptr;
      const int64_t nq = b * t * nh * d, nkv = b * t * 2 * g * d;
      const Pair q = bp.random(nq), kv_mine = bp.random(nkv), kv_other = bp.random(nkv);
      Pair out = bp.output(nq), lse = bp.output(b * nh * t);
      Pair block_out = bp.output(nq), block_lse = bp.output(b * nh * t);
      for (Backend* be : {static_cast<Backend*>(&bp.cpu()), static_cast<Backend*>(&bp.gpu())}) {
        const bool gpu = be == &bp.gpu();
        auto side = [gpu](Pair& x) -> FSpan { return gpu ? x.gpu.span() : x.cpu.span(); };
        auto cside = [gpu](const Pair& x) -> CFSpan { return gpu ? x.gpu.span() : x.cpu.span(); };
        be->block_attention_forward(side(out), side(lse), cside(q), cside(kv_mine), mine, mine,
                                    shape, dropout);
        be->block_attention_forward(side(block_out), side(block_lse), cside(q), cside(kv_other),
                                    mine, other, shape, dropout);
        be->attention_merge(side(out), side(lse), cside(block_out), cside(block_lse), b, t, nh,
                            d);
      }
      TRAINTWIN_EXPECT_CLOSE(bp, out, 1e-5);
      TRAINTWIN_EXPECT_CLOSE(bp, lse, 1e-5);  // every row sees at least its own position

      // Both blocks' backward from each side's own merged out and lse.
      const Pair dout = bp.random(nq);
      Pair dq = bp.zeros(nq), dkv_mine = bp.zeros(nkv), dkv_other = bp.zeros(nkv);
      for (Backend* be : {static_cast<Backend*>(&bp.cpu()), static_cast<Backend*>(&bp.gpu())}) {
        const bool gpu = be == &bp.gpu();
        auto side = [gpu](Pair& x) -> FSpan { return gpu ? x.gpu.span() : x.cpu.span(); };
        auto cside = [gpu](const Pair& x) -> CFSpan { return gpu ? x.gpu.span() : x.cpu.span(); };
        be->block_attention_backward(side(dq), side(dkv_mine), cside(dout), cside(q),
                                     cside(kv_mine), cside(out), cside(lse), mine, mine, shape,
                                     dropout);
        be->block_attention_backward(side(dq), side(dkv_other), cside(dout), cside(q),
                                     cside(kv_other), cside(out), cside(lse), mine, other, shape,
                                     dropout);
      }
      TRAINTWIN_EXPECT_CLOSE(bp, dq, kAttentionGradBound);
      TRAINTWIN_EXPECT_CLOSE(bp, dkv_mine, kAttentionGradBound);
      TRAINTWIN_EXPECT_CLOSE(bp, dkv_other, kAttentionGradBound);
    }
  }
}

TEST(CudaBackendModern, ArgumentSizesAreChecked) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  CudaBackend& gpu = bp.gpu();
  Pair out = bp.output(2 * 3 * 5), rrms = bp.output(2 * 3);
  const Pair inp = bp.random(2 * 3 * 5), short_weight = bp.random(4);
  EXPECT_THROW(gpu.rmsnorm_forward(out.gpu, rrms.gpu, inp.gpu, short_weight.gpu, 2, 3, 5),
               InvalidArgument);
  Pair sw = bp.output(3 * 4);
  const Pair sw_in = bp.random(3 * 4);  // not [R, 2F]
  EXPECT_THROW(gpu.swiglu_forward(sw.gpu, sw_in.gpu, 3, 4), InvalidArgument);
  Pair dst = bp.random(7);
  const Pair src = bp.random(8);
  EXPECT_THROW(gpu.add_in_place(dst.gpu, src.gpu), InvalidArgument);
  // seq_q is not the local length of the query positions (17 of cp 2 over 68 is 34).
  const CpSequence cp(68, 2, 0);
  const cpu::BlockAttentionShape shape{1, 17, 34, 2, 1, 8};
  Pair bo = bp.output(17 * 2 * 8), bl = bp.output(2 * 17);
  const Pair q = bp.random(17 * 2 * 8), kv = bp.random(34 * 2 * 8);
  EXPECT_THROW(gpu.block_attention_forward(bo.gpu, bl.gpu, q.gpu, kv.gpu, cp, cp, shape, nullptr),
               InvalidArgument);
  // GQA: 3 query groups do not divide 4 heads.
  Pair gout = bp.output(1 * 5 * 4 * 8), gatt = bp.output(4 * 5 * 5);
  const Pair ginp = bp.random(1 * 5 * (4 + 6) * 8);
  EXPECT_THROW(gpu.gqa_attention_forward(gout.gpu, gatt.gpu, ginp.gpu, 1, 5, 4, 3, 8, nullptr),
               InvalidArgument);
  // RoPE: an odd head_dim.
  Pair rout = bp.output(1 * 5 * 2 * 3);
  const Pair rinp = bp.random(1 * 5 * 2 * 3);
  EXPECT_THROW(gpu.rope_forward(rout.gpu, rinp.gpu, 1, 5, 2, 3, CpSequence(5, 1, 0), 10000.0),
               InvalidArgument);
}

}  // namespace
}  // namespace traintwin::exec::cuda
