// CudaBackend's "core" members (exec/cuda/cuda_backend.cu) against CpuBackend (needs a device;
// skips without one): memory (allocate_zeroed, copy, copy_2d with pitches and its out-of-span
// check, fill_2d by memset and by kernel, float and int32 upload/download), the vocab-parallel
// embedding (tokens inside and outside the shard, repeated tokens), the position embedding at a
// sequence offset, LayerNorm, the linear layer (with and without bias), attention (with and
// without probability dropout), GELU, bias_dropout_add (with and without bias and residual, p 0
// and 0.1), the four vocab-parallel cross-entropy steps chained as exec/gpt_model.cpp chains them
// (padded vocabulary entries at -inf included), sum_of_squares, scale_in_place and two AdamW
// steps, the bf16 storage conversions. Odd sizes throughout (B 2, T 37, C 72, NH 4, OC 100,
// V_local 203); LayerNorm, GELU, bias_dropout_add, sum_of_squares and the conversions also at
// sizes or offsets that take the scalar kernels instead of the packed ones (common.cuh: four
// elements per access, taken when sizes and alignment allow). fp32 on both sides,
// bound 1e-5; the attention backward 1e-4 (kAttentionGradBound). Outputs the kernel overwrites
// are NaN-poisoned on the GPU; outputs it accumulates into start random.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/cpu/adamw.hpp"
#include "exec/cpu/attention.hpp"
#include "exec/cpu/dropout.hpp"
#include "tests/gpu/backend_pair.hpp"

#include <cuda_runtime_api.h>

#include <chrono>
#include <utility>

namespace traintwin::exec::cuda {
namespace {

using namespace testing;

/// Attention gradients: fp32 sums over up to T keys in another order on each side, through the
/// softmax gradient's cancellation P (dP - D), as METHOD.md's long reductions.
constexpr double kAttentionGradBound = 1e-4;

constexpr int64_t kB = 2, kT = 37, kC = 72, kNH = 4, kOC = 100;

/// The CPU side of an operand as a host vector (CpuBackend memory is host memory).
std::vector<float> host(const Pair& p) {
  return std::vector<float>(p.cpu.data(), p.cpu.data() + p.cpu.size());
}

/// `values` as int32 on both backends (BackendPair::ints draws random ones; this takes given ones).
BackendPair::IntPair make_ints(BackendPair& bp, const std::vector<int32_t>& values) {
  const auto n = static_cast<int64_t>(values.size());
  BackendPair::IntPair p{DeviceBuffer<int32_t>(bp.cpu(), n), DeviceBuffer<int32_t>(bp.gpu(), n)};
  bp.cpu().upload(p.cpu.span(), values);
  bp.gpu().upload(p.gpu.span(), values);
  return p;
}

/// Calls `f` and expects InvalidArgument whose message holds `fragment`.
template <typename F>
void expect_invalid(F&& f, const std::string& fragment, const char* name) {
  try {
    f();
    ADD_FAILURE() << name << ": no InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
        << name << ": " << e.what();
  }
}

TEST(CudaBackendCore, AllocateZeroedAndUploadDownloadRoundTrip) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  // allocate_zeroed (through DeviceBuffer) gives zeros, after the pool has held other data.
  {
    const Pair dirty = bp.random(4099);
    (void)dirty;
  }
  for (const int64_t n : {int64_t{1}, int64_t{4099}}) {
    const Tensor zeros(bp.gpu(), n);
    std::vector<float> h(static_cast<size_t>(n), 1.0f);
    bp.gpu().download(h, zeros);
    EXPECT_EQ(h, std::vector<float>(static_cast<size_t>(n), 0.0f)) << "n " << n;
  }
  // float upload then download: identical bits.
  const std::vector<float> values = bp.random_floats(1001, -1e3, 1e3);
  const Pair p = bp.make(values);
  EXPECT_EQ(p.gpu_host(bp.gpu()), values);
  // int32 upload, read back through the embedding: wte[v] = v with C = 1, so out = the tokens.
  const int64_t vocab = 5003, n = 1001;
  std::vector<float> ids(static_cast<size_t>(vocab));
  for (int64_t v = 0; v < vocab; ++v) ids[static_cast<size_t>(v)] = static_cast<float>(v);
  const Pair wte = bp.make(ids);
  const BackendPair::IntPair tokens = bp.ints(static_cast<size_t>(n), 0, static_cast<int32_t>(vocab));
  Pair out = bp.output(static_cast<size_t>(n));
  bp.gpu().vocab_parallel_embedding_forward(out.gpu, tokens.gpu, wte.gpu, 1, n, 1, 0, vocab,
                                            vocab);
  const std::vector<float> got = out.gpu_host(bp.gpu());
  int64_t mismatched = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    mismatched += got[i] == static_cast<float>(tokens.cpu.data()[i]) ? 0 : 1;
  }
  EXPECT_EQ(mismatched, 0) << "int32 round trip (seed " << bp.seed() << ")";
}

TEST(CudaBackendCore, CopyCopy2dAndFill2d) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  const int64_t n = 1001;
  const Pair src = bp.random(n);
  Pair dst = bp.output(n);
  bp.cpu().copy(dst.cpu, src.cpu);
  bp.gpu().copy(dst.gpu, src.gpu);
  TRAINTWIN_EXPECT_CLOSE(bp, dst, 0.0);

  // 7 rows of 37 elements from rows 41 apart (from element 3) to rows 50 apart (from element 5);
  // the rest of dst keeps its (random, equal) values.
  const int64_t width = 37, height = 7, src_pitch = 41, dst_pitch = 50;
  const Pair src2 = bp.random(3 + (height - 1) * src_pitch + width + 2);
  Pair dst2 = bp.random(5 + (height - 1) * dst_pitch + width + 1);
  bp.cpu().copy_2d(dst2.cpu.span().subspan(5), dst_pitch, src2.cpu.span().subspan(3), src_pitch,
                   width, height);
  bp.gpu().copy_2d(dst2.gpu.span().subspan(5), dst_pitch, src2.gpu.span().subspan(3), src_pitch,
                   width, height);
  TRAINTWIN_EXPECT_CLOSE(bp, dst2, 0.0);

  // A last row that would leave its span: the CPU backend's check and wording on both.
  const size_t short_dst = static_cast<size_t>((height - 1) * dst_pitch + width - 1);
  expect_invalid([&] {
    bp.cpu().copy_2d(dst2.cpu.span().first(short_dst), dst_pitch, src2.cpu, src_pitch, width,
                     height);
  }, "leave a span of", "cpu copy_2d dst");
  expect_invalid([&] {
    bp.gpu().copy_2d(dst2.gpu.span().first(short_dst), dst_pitch, src2.gpu, src_pitch, width,
                     height);
  }, "leave a span of", "cuda copy_2d dst");
  const size_t short_src = static_cast<size_t>((height - 1) * src_pitch + width - 1);
  expect_invalid([&] {
    bp.cpu().copy_2d(dst2.cpu, dst_pitch, src2.cpu.span().first(short_src), src_pitch, width,
                     height);
  }, "leave a span of", "cpu copy_2d src");
  expect_invalid([&] {
    bp.gpu().copy_2d(dst2.gpu, dst_pitch, src2.gpu.span().first(short_src), src_pitch, width,
                     height);
  }, "leave a span of", "cuda copy_2d src");

  // fill_2d: 0 with pitch == width (the memset path) over a middle stretch; a non-zero value
  // with pitch > width (the kernel) over rows of a random tensor.
  Pair fill0 = bp.random(n);
  bp.cpu().fill_2d(fill0.cpu.span().subspan(7), 72, 72, 9, 0.0f);
  bp.gpu().fill_2d(fill0.gpu.span().subspan(7), 72, 72, 9, 0.0f);
  TRAINTWIN_EXPECT_CLOSE(bp, fill0, 0.0);
  Pair fill1 = bp.random(n);
  bp.cpu().fill_2d(fill1.cpu.span().subspan(3), 41, 29, 13, 2.5f);
  bp.gpu().fill_2d(fill1.gpu.span().subspan(3), 41, 29, 13, 2.5f);
  TRAINTWIN_EXPECT_CLOSE(bp, fill1, 0.0);
  // -inf into the tail columns, as the LM head pads its logits.
  Pair fill2 = bp.random(37 * 203);
  bp.cpu().fill_2d(fill2.cpu.span().subspan(150), 203, 53, 37,
                   -std::numeric_limits<float>::infinity());
  bp.gpu().fill_2d(fill2.gpu.span().subspan(150), 203, 53, 37,
                   -std::numeric_limits<float>::infinity());
  EXPECT_EQ(fill2.gpu_host(bp.gpu()), host(fill2)) << "fill_2d -inf (seed " << bp.seed() << ")";
  expect_invalid([&] { bp.gpu().fill_2d(fill1.gpu.span().first(100), 41, 29, 3, 1.0f); },
                 "leave a span of", "cuda fill_2d");
}

TEST(CudaBackendCore, VocabParallelEmbeddingForwardAndBackward) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  const int64_t vocab_start = 250, vocab_local = 203, vocab_total = 700, n = kB * kT;
  // Tokens over the whole vocabulary (in and out of the shard [250, 453)), every fourth one the
  // same in-shard token, every seventh the shard's first and every ninth its last.
  std::vector<int32_t> ids = random_ints(bp.gen(), static_cast<size_t>(n), 0,
                                         static_cast<int32_t>(vocab_total));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i % 4 == 0) ids[i] = 300;
    if (i % 7 == 0) ids[i] = static_cast<int32_t>(vocab_start);
    if (i % 9 == 0) ids[i] = static_cast<int32_t>(vocab_start + vocab_local - 1);
    if (i % 11 == 0) ids[i] = static_cast<int32_t>(vocab_start - 1);
    if (i % 13 == 0) ids[i] = static_cast<int32_t>(vocab_start + vocab_local);
  }
  const BackendPair::IntPair tokens = make_ints(bp, ids);
  const Pair wte = bp.random(vocab_local * kC);
  Pair out = bp.output(n * kC);
  bp.cpu().vocab_parallel_embedding_forward(out.cpu, tokens.cpu, wte.cpu, kB, kT, kC, vocab_start,
                                            vocab_local, vocab_total);
  bp.gpu().vocab_parallel_embedding_forward(out.gpu, tokens.gpu, wte.gpu, kB, kT, kC, vocab_start,
                                            vocab_local, vocab_total);
  TRAINTWIN_EXPECT_CLOSE(bp, out, 1e-5);

  const Pair dout = bp.random(n * kC);
  Pair dwte = bp.random(vocab_local * kC);
  bp.cpu().vocab_parallel_embedding_backward(dwte.cpu, dout.cpu, tokens.cpu, kB, kT, kC,
                                             vocab_start, vocab_local, vocab_total);
  bp.gpu().vocab_parallel_embedding_backward(dwte.gpu, dout.gpu, tokens.gpu, kB, kT, kC,
                                             vocab_start, vocab_local, vocab_total);
  TRAINTWIN_EXPECT_CLOSE(bp, dwte, 1e-5);
}

TEST(CudaBackendCore, PositionEmbeddingAtASequenceOffset) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  const int64_t max_t = 60, offset = 11;  // rows [11, 48) of 60
  const Pair wpe = bp.random(max_t * kC);
  Pair out = bp.random(kB * kT * kC);  // += onto the word embeddings
  bp.cpu().position_embedding_forward(out.cpu, wpe.cpu, kB, kT, kC, offset);
  bp.gpu().position_embedding_forward(out.gpu, wpe.gpu, kB, kT, kC, offset);
  TRAINTWIN_EXPECT_CLOSE(bp, out, 1e-5);

  const Pair dout = bp.random(kB * kT * kC);
  Pair dwpe = bp.random(max_t * kC);
  bp.cpu().position_embedding_backward(dwpe.cpu, dout.cpu, kB, kT, kC, offset);
  bp.gpu().position_embedding_backward(dwpe.gpu, dout.gpu, kB, kT, kC, offset);
  TRAINTWIN_EXPECT_CLOSE(bp, dwpe, 1e-5);
}

// Channels 72 take the packed kernels (four channels per access), 75 the scalar ones.
TEST(CudaBackendCore, LayerNormForwardAndBackward) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  for (const int64_t channels : {kC, int64_t{75}}) {
    SCOPED_TRACE("channels " + std::to_string(channels));
    const int64_t n = kB * kT * channels;
    const Pair inp = bp.random(n, -2.0, 3.0), weight = bp.random(channels, 0.5, 1.5),
               bias = bp.random(channels);
    Pair out = bp.output(n), mean = bp.output(kB * kT), rstd = bp.output(kB * kT);
    bp.cpu().layernorm_forward(out.cpu, mean.cpu, rstd.cpu, inp.cpu, weight.cpu, bias.cpu, kB, kT,
                               channels);
    bp.gpu().layernorm_forward(out.gpu, mean.gpu, rstd.gpu, inp.gpu, weight.gpu, bias.gpu, kB, kT,
                               channels);
    TRAINTWIN_EXPECT_CLOSE(bp, out, 1e-5);
    TRAINTWIN_EXPECT_CLOSE(bp, mean, 1e-5);
    TRAINTWIN_EXPECT_CLOSE(bp, rstd, 1e-5);

    // The backward from the CPU's mean and rstd on both sides; dinp, dweight, dbias accumulate.
    const Pair saved_mean = bp.make(host(mean)), saved_rstd = bp.make(host(rstd));
    const Pair dout = bp.random(n);
    Pair dinp = bp.random(n), dweight = bp.random(channels), dbias = bp.random(channels);
    bp.cpu().layernorm_backward(dinp.cpu, dweight.cpu, dbias.cpu, dout.cpu, inp.cpu, weight.cpu,
                                saved_mean.cpu, saved_rstd.cpu, kB, kT, channels);
    bp.gpu().layernorm_backward(dinp.gpu, dweight.gpu, dbias.gpu, dout.gpu, inp.gpu, weight.gpu,
                                saved_mean.gpu, saved_rstd.gpu, kB, kT, channels);
    TRAINTWIN_EXPECT_CLOSE(bp, dinp, 1e-5);
    TRAINTWIN_EXPECT_CLOSE(bp, dweight, 1e-5);
    TRAINTWIN_EXPECT_CLOSE(bp, dbias, 1e-5);
  }
}

TEST(CudaBackendCore, MatmulForwardAndBackward) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  const int64_t rows = kB * kT;
  const Pair inp = bp.random(rows * kC), weight = bp.random(kOC * kC), bias = bp.random(kOC);
  for (const bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "with bias" : "without bias");
    Pair out = bp.output(rows * kOC);
    const CFSpan b_cpu = with_bias ? CFSpan(bias.cpu) : CFSpan();
    const CFSpan b_gpu = with_bias ? CFSpan(bias.gpu) : CFSpan();
    bp.cpu().matmul_forward(out.cpu, inp.cpu, weight.cpu, b_cpu, kB, kT, kC, kOC);
    bp.gpu().matmul_forward(out.gpu, inp.gpu, weight.gpu, b_gpu, kB, kT, kC, kOC);
    TRAINTWIN_EXPECT_CLOSE(bp, out, 1e-5);
  }

  const Pair dout = bp.random(rows * kOC);
  Pair dinp = bp.random(rows * kC);
  bp.cpu().matmul_backward_data(dinp.cpu, dout.cpu, weight.cpu, kB, kT, kC, kOC);
  bp.gpu().matmul_backward_data(dinp.gpu, dout.gpu, weight.gpu, kB, kT, kC, kOC);
  TRAINTWIN_EXPECT_CLOSE(bp, dinp, 1e-5);

  for (const bool with_dbias : {true, false}) {
    SCOPED_TRACE(with_dbias ? "with dbias" : "without dbias");
    Pair dweight = bp.random(kOC * kC), dbias = bp.random(kOC);
    const FSpan db_cpu = with_dbias ? FSpan(dbias.cpu) : FSpan();
    const FSpan db_gpu = with_dbias ? FSpan(dbias.gpu) : FSpan();
    bp.cpu().matmul_backward_weight(dweight.cpu, db_cpu, dout.cpu, inp.cpu, kB, kT, kC, kOC);
    bp.gpu().matmul_backward_weight(dweight.gpu, db_gpu, dout.gpu, inp.gpu, kB, kT, kC, kOC);
    TRAINTWIN_EXPECT_CLOSE(bp, dweight, 1e-5);
    TRAINTWIN_EXPECT_CLOSE(bp, dbias, 1e-5);  // untouched (equal random values) without dbias
  }
}

/// An operand rounded to bf16 on both backends (each backend's own convert_to_bf16).
struct Bf16Pair {
  Bf16Tensor cpu;
  Bf16Tensor gpu;
};

Bf16Pair to_bf16(BackendPair& bp, const Pair& p) {
  Bf16Pair b{Bf16Tensor(bp.cpu(), static_cast<int64_t>(p.cpu.size())),
             Bf16Tensor(bp.gpu(), static_cast<int64_t>(p.gpu.size()))};
  bp.cpu().convert_to_bf16(b.cpu, p.cpu);
  bp.gpu().convert_to_bf16(b.gpu, p.gpu);
  return b;
}

/// A bf16 operand widened back to fp32 on both backends (exact).
Pair widened(BackendPair& bp, const Bf16Pair& b) {
  Pair p = bp.output(b.cpu.size());
  bp.cpu().convert_from_bf16(p.cpu, b.cpu);
  bp.gpu().convert_from_bf16(p.gpu, b.gpu);
  return p;
}

/// Every GPU element within one bf16 rounding of the CPU's: both round an fp32 sum of the same
/// exact products once, summed in another order, so they may fall on the two sides of a
/// rounding boundary (one unit in the last place, at most 2^-7 of the value) but no further.
void expect_within_one_bf16_ulp(BackendPair& bp, const Pair& p, const char* name) {
  const std::vector<float> g = p.gpu_host(bp.gpu());
  int64_t off = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double c = p.cpu.data()[i];
    if (!(std::abs(g[i] - c) <= std::ldexp(std::abs(c), -7) + 1e-30)) ++off;
  }
  EXPECT_EQ(off, 0) << name << ": elements beyond one bf16 ulp (seed " << bp.seed() << ")";
}

// The bf16 linear layer (Megatron's --bf16 GEMMs): the roundings to bf16 agree bit for bit; the
// forward and dgrad results within one bf16 rounding of the CPU reference; the fp32 wgrad
// (products of bf16 values are exact in fp32) within fp32's 1e-5. And the products really are
// of bf16 operands: the forward differs from the fp32 product of the unrounded inputs by more
// than fp32 rounding would (about 2^-9 relative).
TEST(CudaBackendCore, Bf16MatmulsMatchTheCpuReference) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  EXPECT_TRUE(bp.gpu().has_bf16_arithmetic());
  EXPECT_FALSE(bp.cpu().has_bf16_arithmetic());
  const int64_t rows = kB * kT;
  const Pair inp = bp.random(rows * kC), weight = bp.random(kOC * kC), bias = bp.random(kOC);
  const Bf16Pair inp16 = to_bf16(bp, inp), weight16 = to_bf16(bp, weight),
                 bias16 = to_bf16(bp, bias);
  const Pair inp_back = widened(bp, inp16);
  TRAINTWIN_EXPECT_CLOSE(bp, inp_back, 0.0);  // the same roundings on both sides

  for (const bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "with bias" : "without bias");
    Bf16Pair out{Bf16Tensor(bp.cpu(), rows * kOC), Bf16Tensor(bp.gpu(), rows * kOC)};
    bp.cpu().matmul_forward_bf16(out.cpu, inp16.cpu, weight16.cpu,
                                 with_bias ? CBSpan(bias16.cpu) : CBSpan(), kB, kT, kC, kOC);
    bp.gpu().matmul_forward_bf16(out.gpu, inp16.gpu, weight16.gpu,
                                 with_bias ? CBSpan(bias16.gpu) : CBSpan(), kB, kT, kC, kOC);
    const Pair y = widened(bp, out);
    expect_within_one_bf16_ulp(bp, y, "forward");
    Pair y32 = bp.output(static_cast<size_t>(rows * kOC));
    bp.cpu().matmul_forward(y32.cpu, inp.cpu, weight.cpu, with_bias ? CFSpan(bias.cpu) : CFSpan(),
                            kB, kT, kC, kOC);
    std::vector<double> a(y.cpu.data(), y.cpu.data() + y.cpu.size()),
        b(y32.cpu.data(), y32.cpu.data() + y32.cpu.size());
    EXPECT_GT(relative_error(a, b), 1e-4) << "the bf16 product equals the fp32 one";
  }

  const Pair dout = bp.random(rows * kOC);
  const Bf16Pair dout16 = to_bf16(bp, dout);
  Bf16Pair dinp{Bf16Tensor(bp.cpu(), rows * kC), Bf16Tensor(bp.gpu(), rows * kC)};
  bp.cpu().matmul_backward_data_bf16(dinp.cpu, dout16.cpu, weight16.cpu, kB, kT, kC, kOC);
  bp.gpu().matmul_backward_data_bf16(dinp.gpu, dout16.gpu, weight16.gpu, kB, kT, kC, kOC);
  expect_within_one_bf16_ulp(bp, widened(bp, dinp), "dgrad");

  for (const bool with_dbias : {true, false}) {
    SCOPED_TRACE(with_dbias ? "with dbias" : "without dbias");
    Pair dweight = bp.random(kOC * kC), dbias = bp.random(kOC);  // += into fp32 main_grad
    bp.cpu().matmul_backward_weight_bf16(dweight.cpu, with_dbias ? FSpan(dbias.cpu) : FSpan(),
                                         dout16.cpu, inp16.cpu, kB, kT, kC, kOC);
    bp.gpu().matmul_backward_weight_bf16(dweight.gpu, with_dbias ? FSpan(dbias.gpu) : FSpan(),
                                         dout16.gpu, inp16.gpu, kB, kT, kC, kOC);
    TRAINTWIN_EXPECT_CLOSE(bp, dweight, 1e-5);
    TRAINTWIN_EXPECT_CLOSE(bp, dbias, 1e-5);
  }
}

// The bf16 storage conversions, the dgrad's widening accumulation and add_in_place on the packed
// kernels (4096 elements, four per access) and on the scalar ones (the same spans from their
// second element: misaligned for a pack) agree with the CPU bit for bit: roundings to nearest
// even, exact widenings, one fp32 addition each.
TEST(CudaBackendCore, Bf16ConversionsPackedAndScalar) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  constexpr int64_t n = 4096;
  for (const size_t offset : {size_t{0}, size_t{1}}) {
    SCOPED_TRACE("offset " + std::to_string(offset));
    const Pair x = bp.random(n, -3.0, 3.0);
    Bf16Pair b{Bf16Tensor(bp.cpu(), n), Bf16Tensor(bp.gpu(), n)};
    bp.cpu().convert_to_bf16(b.cpu.span().subspan(offset), CFSpan(x.cpu).subspan(offset));
    bp.gpu().convert_to_bf16(b.gpu.span().subspan(offset), CFSpan(x.gpu).subspan(offset));
    std::vector<uint16_t> g(n);
    TRAINTWIN_CUDA_CHECK(
        cudaMemcpy(g.data(), b.gpu.data(), n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    int64_t differ = 0;
    for (size_t i = offset; i < g.size(); ++i) differ += g[i] != b.cpu.data()[i];
    EXPECT_EQ(differ, 0) << "bf16 roundings that differ (seed " << bp.seed() << ")";

    Pair wide = bp.random(n);
    bp.cpu().convert_from_bf16(FSpan(wide.cpu).subspan(offset), CBSpan(b.cpu).subspan(offset));
    bp.gpu().convert_from_bf16(FSpan(wide.gpu).subspan(offset), CBSpan(b.gpu).subspan(offset));
    TRAINTWIN_EXPECT_CLOSE(bp, wide, 0.0);
    Pair acc = bp.random(n);
    bp.cpu().accumulate_from_bf16(FSpan(acc.cpu).subspan(offset), CBSpan(b.cpu).subspan(offset));
    bp.gpu().accumulate_from_bf16(FSpan(acc.gpu).subspan(offset), CBSpan(b.gpu).subspan(offset));
    TRAINTWIN_EXPECT_CLOSE(bp, acc, 0.0);
    Pair sum = bp.random(n);
    bp.cpu().add_in_place(FSpan(sum.cpu).subspan(offset), CFSpan(x.cpu).subspan(offset));
    bp.gpu().add_in_place(FSpan(sum.gpu).subspan(offset), CFSpan(x.gpu).subspan(offset));
    TRAINTWIN_EXPECT_CLOSE(bp, sum, 0.0);
  }
}

// Backend::mark on the GPU is an event on the stream, not a synchronize: four fp32 GEMMs of
// 2048^3 (17.2 GFLOP each, at least 0.26 ms at the H100's 67 TFLOP/s fp32 peak) lie between
// marks 0 and 1 at least 1 ms apart on the device clock, while the host issued them and both
// marks in less than half that; the indices start again after clear_marks().
TEST(CudaBackendCore, MarksAreEventsOnTheStream) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  CudaBackend& be = bp.gpu();
  constexpr int64_t n = 2048;
  const Pair a = bp.random(n * n), w = bp.random(n * n);
  Pair y = bp.output(n * n);
  be.synchronize();
  be.clear_marks();
  const auto host0 = std::chrono::steady_clock::now();
  EXPECT_EQ(be.mark(), 0u);
  for (int i = 0; i < 4; ++i) be.matmul_forward(y.gpu, a.gpu, w.gpu, {}, 1, n, n, n);
  EXPECT_EQ(be.mark(), 1u);
  const double host_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - host0).count();
  const std::vector<double> t = be.mark_times_s();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0], 0.0);
  EXPECT_GT(t[1], 4 * 2.0 * n * n * n / 67e12);
  EXPECT_LT(host_s, t[1] / 2) << "mark() waited for the GPU";
  be.clear_marks();
  EXPECT_EQ(be.mark(), 0u);
}

/// The bytes of a device buffer.
std::vector<uint8_t> device_bytes(CudaBackend& gpu, const Fp8Tensor& x) {
  std::vector<uint8_t> h(x.size());
  gpu.synchronize();
  EXPECT_EQ(cudaMemcpy(h.data(), x.data(), x.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

// Transformer Engine's FP8 GEMM (Backend::fp8_gemm_nt): the casts agree bit for bit with the CPU
// reference's (E4M3 and E5M2, scaled, values past the largest finite saturating); E4M3 x E4M3
// and E5M2 x E4M3 products, bf16 out and fp32 accumulate, against the CPU reference, whose
// fp32 sums of the (exact) FP8 products differ from the GPU's by its accumulator: Hopper's FP8
// tensor cores keep about 14 bits of the running sum between promotions to fp32 (DeepSeek-V3
// technical report, sec. 3.3.2; the first H100 run measured 5.7e-5 and 7.3e-5 relative on the
// fp32 outputs without fast accumulation), so the bound is 2^-12 on fp32 outputs and 2^-8 (one
// bf16 rounding more) on bf16 ones, and 2^-8 with fast accumulation (TE's forward), which
// promotes less often. M 48, N 32, K 64 (multiples of 16).
TEST(CudaBackendCore, Fp8GemmsMatchTheCpuReference) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  if (!bp.gpu().has_fp8_arithmetic()) GTEST_SKIP() << "no FP8 tensor cores (compute capability < 8.9)";
  constexpr int64_t m = 48, n = 32, k = 64;
  const Pair a32 = bp.random(m * k), b32 = bp.random(n * k, -600.0, 600.0);
  auto cast = [&](const Pair& x, cpu::Fp8Kind kind, float scale) {
    std::pair<Fp8Tensor, Fp8Tensor> q{Fp8Tensor(bp.cpu(), static_cast<int64_t>(x.cpu.size())),
                                      Fp8Tensor(bp.gpu(), static_cast<int64_t>(x.gpu.size()))};
    bp.cpu().quantize_fp8(q.first, x.cpu, kind, scale);
    bp.gpu().quantize_fp8(q.second, x.gpu, kind, scale);
    const std::vector<uint8_t> g = device_bytes(bp.gpu(), q.second);
    EXPECT_EQ(g, std::vector<uint8_t>(q.first.data(), q.first.data() + q.first.size()))
        << "casts differ (seed " << bp.seed() << ")";
    return q;
  };
  const auto a4 = cast(a32, cpu::Fp8Kind::kE4M3, 100.0f);  // up to 100: E4M3's range
  const auto a5 = cast(a32, cpu::Fp8Kind::kE5M2, 1000.0f);
  const auto b4 = cast(b32, cpu::Fp8Kind::kE4M3, 1.0f);    // |b| past 448 saturates
  for (const bool e5m2_a : {false, true}) {
    const auto& a = e5m2_a ? a5 : a4;
    const cpu::Fp8Kind ak = e5m2_a ? cpu::Fp8Kind::kE5M2 : cpu::Fp8Kind::kE4M3;
    for (const bool fast : {false, true}) {
      SCOPED_TRACE(std::string(e5m2_a ? "E5M2" : "E4M3") + " x E4M3" + (fast ? ", fast" : ""));
      Bf16Pair out{Bf16Tensor(bp.cpu(), m * n), Bf16Tensor(bp.gpu(), m * n)};
      bp.cpu().fp8_gemm_nt(out.cpu, a.first, ak, b4.first, cpu::Fp8Kind::kE4M3, 1e-4f, m, n, k,
                           fast);
      bp.gpu().fp8_gemm_nt(out.gpu, a.second, ak, b4.second, cpu::Fp8Kind::kE4M3, 1e-4f, m, n, k,
                           fast);
      const Pair y = widened(bp, out);
      TRAINTWIN_EXPECT_CLOSE(bp, y, 0x1p-8);
      Pair acc = bp.random(m * n);
      bp.cpu().fp8_gemm_nt_accumulate(acc.cpu, a.first, ak, b4.first, cpu::Fp8Kind::kE4M3, 1e-4f,
                                      m, n, k, fast);
      bp.gpu().fp8_gemm_nt_accumulate(acc.gpu, a.second, ak, b4.second, cpu::Fp8Kind::kE4M3,
                                      1e-4f, m, n, k, fast);
      TRAINTWIN_EXPECT_CLOSE(bp, acc, fast ? 0x1p-8 : 0x1p-12);
    }
  }
  Bf16Tensor bad(bp.gpu(), 40 * n);
  expect_invalid([&] {
    bp.gpu().fp8_gemm_nt(bad, CF8Span(a4.second).first(40 * k), cpu::Fp8Kind::kE4M3, b4.second,
                         cpu::Fp8Kind::kE4M3, 1.0f, 40, n, k, false);
  }, "multiple of 16", "M = 40");
}

/// preatt on and below the causal diagonal (above it the GPU leaves it unspecified).
void expect_causal_preatt_close(BackendPair& bp, const Pair& preatt, int64_t rows, int64_t seq) {
  const std::vector<float> gpu = preatt.gpu_host(bp.gpu());
  const std::vector<float> cpu = host(preatt);
  std::vector<double> g, c;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t t = 0; t < seq; ++t) {
      for (int64_t t2 = 0; t2 <= t; ++t2) {
        const auto i = static_cast<size_t>((r * seq + t) * seq + t2);
        g.push_back(gpu[i]);
        c.push_back(cpu[i]);
      }
    }
  }
  EXPECT_LE(relative_error(g, c), 1e-5) << "preatt on/below the diagonal (seed " << bp.seed()
                                        << ")";
}

TEST(CudaBackendCore, AttentionForwardAndBackward) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  const int64_t n = kB * kT * kC, natt = kB * kNH * kT * kT;
  for (const double p : {0.0, -1.0, 0.1}) {  // -1: no dropout object at all
    SCOPED_TRACE("dropout " + std::to_string(p));
    const cpu::AttentionProbabilityDropout dropout{
        cpu::DropoutParams{p < 0 ? 0.0 : p, bp.gen()(), bp.gen()()},
        cpu::AttentionBlock{kB, kNH, kT, 0, 0, kNH}};
    const cpu::AttentionProbabilityDropout* drop = p < 0 ? nullptr : &dropout;
    const Pair inp = bp.random(3 * n);
    Pair out = bp.output(n), preatt = bp.output(natt), att = bp.output(natt);
    bp.cpu().attention_forward(out.cpu, preatt.cpu, att.cpu, inp.cpu, kB, kT, kC, kNH, drop);
    bp.gpu().attention_forward(out.gpu, preatt.gpu, att.gpu, inp.gpu, kB, kT, kC, kNH, drop);
    TRAINTWIN_EXPECT_CLOSE(bp, out, 1e-5);
    TRAINTWIN_EXPECT_CLOSE(bp, att, 1e-5);
    expect_causal_preatt_close(bp, preatt, kB * kNH, kT);

    // The backward from the CPU's att on both sides; dinp accumulates.
    const Pair saved_att = bp.make(host(att)), dout = bp.random(n);
    Pair dinp = bp.random(3 * n);
    bp.cpu().attention_backward(dinp.cpu, dout.cpu, inp.cpu, saved_att.cpu, kB, kT, kC, kNH, drop);
    bp.gpu().attention_backward(dinp.gpu, dout.gpu, inp.gpu, saved_att.gpu, kB, kT, kC, kNH, drop);
    TRAINTWIN_EXPECT_CLOSE(bp, dinp, kAttentionGradBound);
  }
}

TEST(CudaBackendCore, GeluForwardAndBackward) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  // 1001 and + 3: the scalar kernels; 4 kB kT kC: the packed ones (four elements per access).
  for (const int64_t n : {int64_t{1001}, kB * kT * 4 * kC + 3, kB * kT * 4 * kC}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const Pair inp = bp.random(n, -5.0, 5.0);
    Pair out = bp.output(n);
    bp.cpu().gelu_forward(out.cpu, inp.cpu);
    bp.gpu().gelu_forward(out.gpu, inp.gpu);
    TRAINTWIN_EXPECT_CLOSE(bp, out, 1e-5);

    const Pair dout = bp.random(n);
    Pair dinp = bp.random(n);
    bp.cpu().gelu_backward(dinp.cpu, inp.cpu, dout.cpu);
    bp.gpu().gelu_backward(dinp.gpu, inp.gpu, dout.gpu);
    TRAINTWIN_EXPECT_CLOSE(bp, dinp, 1e-5);
  }
}

// Channels 72 take the packed kernels (four channels per access), 75 the scalar ones.
TEST(CudaBackendCore, BiasDropoutAddForwardAndBackward) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  for (const int64_t channels : {kC, int64_t{75}}) {
    SCOPED_TRACE("channels " + std::to_string(channels));
    const int64_t n = kB * kT * channels;
    // Samples [3, 5) of positions [5, 42) of 50.
    const cpu::HiddenBlock block{kB, kT, channels, 3, 5, 50};
    for (const double p : {0.0, 0.1}) {
      for (const bool with_bias : {true, false}) {
        for (const bool with_residual : {true, false}) {
          SCOPED_TRACE("p " + std::to_string(p) + (with_bias ? " bias" : " no bias") +
                       (with_residual ? " residual" : " no residual"));
          const cpu::DropoutParams params{p, bp.gen()(), bp.gen()()};
          const Pair inp = bp.random(n), bias = bp.random(channels), residual = bp.random(n);
          Pair out = bp.output(n);
          bp.cpu().bias_dropout_add_forward(out.cpu, inp.cpu,
                                            with_bias ? CFSpan(bias.cpu) : CFSpan(),
                                            with_residual ? CFSpan(residual.cpu) : CFSpan(), params,
                                            block);
          bp.gpu().bias_dropout_add_forward(out.gpu, inp.gpu,
                                            with_bias ? CFSpan(bias.gpu) : CFSpan(),
                                            with_residual ? CFSpan(residual.gpu) : CFSpan(), params,
                                            block);
          TRAINTWIN_EXPECT_CLOSE(bp, out, 1e-5);

          const Pair dout = bp.random(n);
          Pair dinp = bp.random(n), dbias = bp.random(channels), dresidual = bp.random(n);
          bp.cpu().bias_dropout_add_backward(dinp.cpu, with_bias ? FSpan(dbias.cpu) : FSpan(),
                                             with_residual ? FSpan(dresidual.cpu) : FSpan(),
                                             dout.cpu, params, block);
          bp.gpu().bias_dropout_add_backward(dinp.gpu, with_bias ? FSpan(dbias.gpu) : FSpan(),
                                             with_residual ? FSpan(dresidual.gpu) : FSpan(),
                                             dout.gpu, params, block);
          TRAINTWIN_EXPECT_CLOSE(bp, dinp, 1e-5);
          TRAINTWIN_EXPECT_CLOSE(bp, dbias, 1e-5);      // untouched without bias
          TRAINTWIN_EXPECT_CLOSE(bp, dresidual, 1e-5);  // untouched without residual
        }
      }
    }
  }
}

TEST(CudaBackendCore, VocabParallelCrossEntropyChain) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  const int64_t rows = kB * kT, vocab_start = 250, vocab_local = 203, vocab_total = 700;
  // valid < vocab_local: the shard's last entries are vocabulary padding (ids >= the real
  // vocabulary), set to -inf as GptModel's LM head sets them.
  for (const int64_t valid : {vocab_local, int64_t{150}}) {
    SCOPED_TRACE("valid " + std::to_string(valid));
    const int64_t vocab = valid < vocab_local ? vocab_start + valid : vocab_total;
    // Targets over the whole (real) vocabulary: in and out of the shard [250, 453).
    std::vector<int32_t> ids = random_ints(bp.gen(), static_cast<size_t>(rows), 0,
                                           static_cast<int32_t>(vocab));
    for (size_t i = 0; i < ids.size(); i += 5) ids[i] = static_cast<int32_t>(vocab_start + i % 37);
    const BackendPair::IntPair targets = make_ints(bp, ids);
    Pair logits = bp.random(rows * vocab_local, -4.0, 4.0);
    if (valid < vocab_local) {
      const float ninf = -std::numeric_limits<float>::infinity();
      bp.cpu().fill_2d(logits.cpu.span().subspan(static_cast<size_t>(valid)), vocab_local,
                       vocab_local - valid, rows, ninf);
      bp.gpu().fill_2d(logits.gpu.span().subspan(static_cast<size_t>(valid)), vocab_local,
                       vocab_local - valid, rows, ninf);
    }

    // (a) the max; with one TP rank the local values are the global ones.
    Pair lmax = bp.output(rows);
    bp.cpu().vocab_parallel_logits_max(lmax.cpu, logits.cpu, kB, kT, vocab_local);
    bp.gpu().vocab_parallel_logits_max(lmax.gpu, logits.gpu, kB, kT, vocab_local);
    TRAINTWIN_EXPECT_CLOSE(bp, lmax, 1e-5);

    // (b) from each side's own max (the chain as GptModel runs it).
    Pair sum_exp = bp.output(rows), target = bp.output(rows);
    bp.cpu().vocab_parallel_sum_exp(sum_exp.cpu, target.cpu, logits.cpu, lmax.cpu, targets.cpu,
                                    kB, kT, vocab_start, vocab_local, vocab_total);
    bp.gpu().vocab_parallel_sum_exp(sum_exp.gpu, target.gpu, logits.gpu, lmax.gpu, targets.gpu,
                                    kB, kT, vocab_start, vocab_local, vocab_total);
    TRAINTWIN_EXPECT_CLOSE(bp, sum_exp, 1e-5);
    TRAINTWIN_EXPECT_CLOSE(bp, target, 1e-5);

    // (c)
    Pair losses = bp.output(rows);
    bp.cpu().vocab_parallel_cross_entropy_loss(losses.cpu, sum_exp.cpu, lmax.cpu, target.cpu, kB,
                                               kT);
    bp.gpu().vocab_parallel_cross_entropy_loss(losses.gpu, sum_exp.gpu, lmax.gpu, target.gpu, kB,
                                               kT);
    TRAINTWIN_EXPECT_CLOSE(bp, losses, 1e-5);

    // (d) dlosses = 1 / (B T) by fill_2d, as GptModel; dlogits accumulates into random values.
    const auto w = static_cast<float>(1.0 / static_cast<double>(rows));
    Pair dlosses = bp.output(rows);
    bp.cpu().fill_2d(dlosses.cpu, rows, rows, 1, w);
    bp.gpu().fill_2d(dlosses.gpu, rows, rows, 1, w);
    Pair dlogits = bp.random(rows * vocab_local, -0.01, 0.01);
    bp.cpu().vocab_parallel_cross_entropy_backward(dlogits.cpu, dlosses.cpu, logits.cpu, lmax.cpu,
                                                   sum_exp.cpu, targets.cpu, kB, kT, vocab_start,
                                                   vocab_local, vocab_total);
    bp.gpu().vocab_parallel_cross_entropy_backward(dlogits.gpu, dlosses.gpu, logits.gpu, lmax.gpu,
                                                   sum_exp.gpu, targets.gpu, kB, kT, vocab_start,
                                                   vocab_local, vocab_total);
    TRAINTWIN_EXPECT_CLOSE(bp, dlogits, 1e-5);
  }
}

TEST(CudaBackendCore, SumOfSquaresAndScaleInPlace) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  for (const int64_t n : {int64_t{1}, int64_t{1001}, int64_t{100003}, int64_t{100000}}) {
    SCOPED_TRACE("n " + std::to_string(n));
    Pair v = bp.random(n, -2.0, 2.0);
    const double cpu_sum = bp.cpu().sum_of_squares(v.cpu);
    const double gpu_sum = bp.gpu().sum_of_squares(v.gpu);
    EXPECT_LE(std::abs(gpu_sum - cpu_sum), 1e-6 * std::abs(cpu_sum))
        << "sum_of_squares " << gpu_sum << " vs " << cpu_sum << " (seed " << bp.seed() << ")";

    bp.cpu().scale_in_place(v.cpu, 0.3712345);
    bp.gpu().scale_in_place(v.gpu, 0.3712345);
    TRAINTWIN_EXPECT_CLOSE(bp, v, 1e-5);
  }
  EXPECT_EQ(bp.gpu().sum_of_squares(CFSpan()), 0.0);

  // total_sum_of_squares over pieces (two adjacent, one apart, one empty) in one wait.
  const Pair v = bp.random(30001, -2.0, 2.0);
  auto pieces = [](const Tensor& t) {
    const CFSpan s(t);
    return std::vector<CFSpan>{s.subspan(0, 1000), s.subspan(1000, 9000), s.subspan(20000, 10001),
                               s.subspan(12, 0)};
  };
  const double cpu_total = bp.cpu().total_sum_of_squares(pieces(v.cpu));
  const double gpu_total = bp.gpu().total_sum_of_squares(pieces(v.gpu));
  EXPECT_LE(std::abs(gpu_total - cpu_total), 1e-6 * cpu_total)
      << "total_sum_of_squares " << gpu_total << " vs " << cpu_total << " (seed " << bp.seed()
      << ")";
  EXPECT_EQ(bp.gpu().total_sum_of_squares({}), 0.0);
}

TEST(CudaBackendCore, AdamWTwoSteps) {
  TRAINTWIN_REQUIRE_GPU();
  BackendPair bp;
  const int64_t n = 10007;
  for (const double weight_decay : {0.01, 0.0}) {
    SCOPED_TRACE("weight_decay " + std::to_string(weight_decay));
    cpu::AdamWParams hyper;
    hyper.weight_decay = weight_decay;
    Pair params = bp.random(n), m = bp.zeros(n), v = bp.zeros(n);
    for (const int64_t step : {int64_t{1}, int64_t{2}}) {
      SCOPED_TRACE("step " + std::to_string(step));
      const Pair grads = bp.random(n, -0.1, 0.1);
      const double lr = step == 1 ? 1e-2 : 6e-3;
      bp.cpu().adamw_step(params.cpu, grads.cpu, m.cpu, v.cpu, hyper, lr, step);
      bp.gpu().adamw_step(params.gpu, grads.gpu, m.gpu, v.gpu, hyper, lr, step);
      TRAINTWIN_EXPECT_CLOSE(bp, params, 1e-5);
      TRAINTWIN_EXPECT_CLOSE(bp, m, 1e-5);
      TRAINTWIN_EXPECT_CLOSE(bp, v, 1e-5);
    }
  }
}

}  // namespace
}  // namespace traintwin::exec::cuda
