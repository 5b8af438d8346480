// The executor end to end in one process: the untrained model's loss is ln V, the gradients it
// computes by walking the Program's backward ops match finite differences of the loss it computes
// by walking the forward ops, and training on a fixed batch drives the loss down.
#include "exec/executor.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <random>
#include <string>
#include <utility>

#include "core/error.hpp"
#include "core/program.hpp"
#include "core/schedule.hpp"
#include "exec/local_communicator.hpp"
#include "exec/model_shard.hpp"

namespace traintwin::exec {
namespace {

constexpr int64_t kVocab = 300;

Scenario tiny(RecomputeGranularity recompute = RecomputeGranularity::kNone) {
  Scenario s;
  s.name = "tiny";
  s.model = ModelSpec{"gpt", 2, 32, 4, 128, 16, kVocab};
  s.training.micro_batch_size = 2;
  s.training.global_batch_size = 4;  // 2 micro-batches
  s.training.precision = Precision::kFp32;
  s.training.recompute_granularity = recompute;
  s.cluster.num_gpus = 1;
  return s;
}

TrainingHyperparameters hyper() {
  TrainingHyperparameters h;
  h.seed = 7;
  h.clip_grad = 0;  // gradients are left unscaled for the finite-difference check
  h.lr = LearningRateSchedule{1e-2, 1e-2, 0, 100, LearningRateSchedule::kConstant};
  h.adam.weight_decay = 0;
  return h;
}

/// A fixed batch: micro-batch mb gets tokens (7 x i + 13 x mb) mod V, labels the next ones.
MicroBatchSource fixed_batch() {
  return [](int64_t mb, std::span<int32_t> tokens, std::span<int32_t> labels) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<int32_t>((7 * static_cast<int64_t>(i) + 13 * mb) % kVocab);
      labels[i] = static_cast<int32_t>((7 * static_cast<int64_t>(i + 1) + 13 * mb) % kVocab);
    }
  };
}

struct Rig {
  Scenario s;
  Program prog;
  LocalCommunicator comm;
  ModelShard shard;
  Executor exec;
  explicit Rig(Scenario sc, TrainingHyperparameters h = hyper())
      : s(std::move(sc)), prog(build_program(s)), comm(prog.layout),
        shard(s, prog.ranks.at(0).coord, 7, 0.02), exec(prog, comm, shard, h) {}
};

TEST(Executor, UntrainedLossIsLnVocab) {
  Rig x(tiny());
  const IterationResult r = x.exec.evaluate(fixed_batch());
  EXPECT_NEAR(r.lm_loss, std::log(static_cast<double>(kVocab)), 0.02);
  EXPECT_FALSE(r.spans.empty());
}

// d loss / d theta from the Program's backward ops against central differences of the forward
// loss, for elements of every kind of tensor (embeddings, LayerNorms, column- and row-parallel
// weights and biases, the tied LM head). fp32 forward: step 1e-2, tolerance 3 % + 2e-4.
TEST(Executor, GradientsMatchFiniteDifferencesOfTheLoss) {
  for (auto recompute : {RecomputeGranularity::kNone, RecomputeGranularity::kSelective,
                         RecomputeGranularity::kFull}) {
    Rig x(tiny(recompute));
    ChunkShard& c = x.shard.chunks()[0];
    const std::vector<float> theta0(c.params.data(), c.params.data() + c.params.size());
    x.exec.train_iteration(1, fixed_batch());
    const std::vector<float> grads(c.grads.data(), c.grads.data() + c.grads.size());  // of theta0 (no clipping)
    std::copy(theta0.begin(), theta0.end(), c.params.data());
    std::mt19937 rng(3);
    int checked = 0;
    for (const ShardTensor& t : c.tensors) {
      for (int k = 0; k < 3; ++k) {
        const int64_t i = t.offset + static_cast<int64_t>(rng() % static_cast<uint32_t>(t.numel));
        const double g = grads[static_cast<size_t>(i)];
        if (std::abs(g) < 1e-3) continue;  // too small to resolve in fp32
        const float eps = 1e-2f;
        c.params.data()[i] = theta0[static_cast<size_t>(i)] + eps;
        const double up = x.exec.evaluate(fixed_batch()).lm_loss;
        c.params.data()[i] = theta0[static_cast<size_t>(i)] - eps;
        const double down = x.exec.evaluate(fixed_batch()).lm_loss;
        c.params.data()[i] = theta0[static_cast<size_t>(i)];
        const double fd = (up - down) / (2.0 * eps);
        EXPECT_NEAR(fd, g, 0.03 * std::abs(g) + 2e-4) << t.name << " element " << i - t.offset;
        ++checked;
      }
    }
    EXPECT_GT(checked, 10);
  }
}

TEST(Executor, TrainingOnOneBatchDrivesTheLossDown) {
  Rig x(tiny());
  const double first = x.exec.train_iteration(1, fixed_batch()).lm_loss;
  double last = first;
  for (int64_t it = 2; it <= 30; ++it) last = x.exec.train_iteration(it, fixed_batch()).lm_loss;
  EXPECT_LT(last, 0.5 * first);
}

// training.precision bf16 (exec/linear.hpp) on the cpu backend's exact emulation of the bf16
// GEMMs: the losses follow fp32's within bf16's rounding (2^-8 relative per operand; 20 steps on
// one batch at lr 1e-2 stay within 2 % of fp32's and end below half the first), and they are not
// fp32's (the bf16 path runs).
TEST(Executor, Bf16TrainingTracksFp32) {
  Scenario b = tiny();
  b.training.precision = Precision::kBf16;
  Rig fp32(tiny()), bf16(b);
  double max_rel = 0, first = 0, last = 0;
  for (int64_t it = 1; it <= 20; ++it) {
    const double l32 = fp32.exec.train_iteration(it, fixed_batch()).lm_loss;
    const double l16 = bf16.exec.train_iteration(it, fixed_batch()).lm_loss;
    if (it == 1) first = l16;
    last = l16;
    max_rel = std::max(max_rel, std::abs(l16 - l32) / l32);
  }
  EXPECT_LT(max_rel, 0.02);
  EXPECT_GT(max_rel, 1e-6);
  EXPECT_LT(last, 0.5 * first);
}

// The master weights stay fp32: an AdamW step of lr 1e-6 moves weights of ~0.02 by ~1e-6, far
// below half a bf16 ulp there (2^-14 ~ 6e-5), yet every weight that had a gradient moves, and
// the next iteration's bf16 copies are rounded from the updated fp32 values.
TEST(Executor, Bf16KeepsFp32MasterWeights) {
  Scenario b = tiny();
  b.training.precision = Precision::kBf16;
  TrainingHyperparameters h = hyper();
  h.lr = LearningRateSchedule{1e-6, 1e-6, 0, 100, LearningRateSchedule::kConstant};
  Rig x(b, h);
  ChunkShard& c = x.shard.chunks()[0];
  const std::vector<float> theta0(c.params.data(), c.params.data() + c.params.size());
  x.exec.train_iteration(1, fixed_batch());
  int64_t moved = 0, tiny_moves = 0;
  for (size_t i = 0; i < theta0.size(); ++i) {
    const double d = std::abs(static_cast<double>(c.params.data()[i]) - theta0[i]);
    moved += d > 0;
    tiny_moves += d > 0 && d < 3e-6;
  }
  EXPECT_GT(moved, static_cast<int64_t>(theta0.size()) / 2);
  EXPECT_GT(tiny_moves, moved / 2);
}

// A tiny MoE model (every layer MoE, 4 experts of width 64, alltoall dispatcher, aux loss on).
// top-k = E makes routing smooth (top-k selection is piecewise constant; the kernels' own tests
// cover it with k < E), so the finite differences see every path: router GEMM, softmax gates,
// the Switch aux loss, permute, the experts, unpermute and the shared expert.
Scenario tiny_moe(bool grouped_gemm, int64_t shared) {
  Scenario s = tiny();
  s.model.add_bias_linear = false;
  s.model.num_moe_experts = 4;
  s.model.moe_router_topk = 4;
  s.model.moe_ffn_hidden_size = 64;
  s.model.moe_shared_expert_intermediate_size = shared;
  s.model.moe_token_dispatcher_type = MoeTokenDispatcher::kAllToAll;
  s.model.moe_aux_loss_coeff = 0.05;
  s.model.moe_grouped_gemm = grouped_gemm;
  return s;
}

// The objective the MoE step descends: the LM loss plus, per MoE layer, the micro-batch mean of
// its aux loss (evaluate() reports their mean over layers and micro-batches).
double moe_objective(Executor& exec, int64_t moe_layers) {
  const IterationResult r = exec.evaluate(fixed_batch());
  return r.lm_loss + static_cast<double>(moe_layers) * r.load_balancing_loss;
}

TEST(Executor, MoeGradientsMatchFiniteDifferencesOfTheLossAndAuxLoss) {
  for (const auto& [grouped, shared] : {std::pair<bool, int64_t>{true, 32}, {false, 0}}) {
    SCOPED_TRACE(std::string("grouped_gemm ") + (grouped ? "on" : "off") + ", shared expert " +
                 std::to_string(shared));
    Rig x(tiny_moe(grouped, shared));
    ChunkShard& c = x.shard.chunks()[0];
    const std::vector<float> theta0(c.params.data(), c.params.data() + c.params.size());
    const IterationResult first = x.exec.train_iteration(1, fixed_batch());
    EXPECT_GT(first.load_balancing_loss, 0.0);
    const std::vector<float> grads(c.grads.data(), c.grads.data() + c.grads.size());
    std::copy(theta0.begin(), theta0.end(), c.params.data());
    std::mt19937 rng(5);
    int checked = 0, expert_checked = 0;
    for (const ShardTensor& t : c.tensors) {
      for (int k = 0; k < 3; ++k) {
        const int64_t i = t.offset + static_cast<int64_t>(rng() % static_cast<uint32_t>(t.numel));
        const double g = grads[static_cast<size_t>(i)];
        if (std::abs(g) < 1e-3) continue;
        const float eps = 1e-2f;
        c.params.data()[i] = theta0[static_cast<size_t>(i)] + eps;
        const double up = moe_objective(x.exec, 2);
        c.params.data()[i] = theta0[static_cast<size_t>(i)] - eps;
        const double down = moe_objective(x.exec, 2);
        c.params.data()[i] = theta0[static_cast<size_t>(i)];
        const double fd = (up - down) / (2.0 * eps);
        EXPECT_NEAR(fd, g, 0.03 * std::abs(g) + 2e-4) << t.name << " element " << i - t.offset;
        ++checked;
        if (t.expert) ++expert_checked;
      }
    }
    EXPECT_GT(checked, 10);
    EXPECT_GT(expert_checked, 3);
  }
}

TEST(Executor, MoeRouterGradientIncludesTheAuxLoss) {
  // The router weights' gradient is the LM loss's plus coeff x the aux loss's: linear in
  // moe_aux_loss_coeff, and not constant (top-2 of 4: with k = E the aux loss is constant).
  auto router_grad = [](double coeff) {
    Scenario s = tiny_moe(true, 0);
    s.model.moe_router_topk = 2;
    s.model.moe_aux_loss_coeff = coeff;
    Rig x(s);
    x.exec.train_iteration(1, fixed_batch());
    const auto g = x.shard.grad(0, "layers.0.mlp.router.weight");
    return std::vector<float>(g.begin(), g.end());
  };
  const std::vector<float> g0 = router_grad(0.0), g1 = router_grad(1.0), g2 = router_grad(2.0);
  double diff = 0;
  for (size_t i = 0; i < g0.size(); ++i) {
    EXPECT_NEAR(g2[i] - g0[i], 2 * (g1[i] - g0[i]), 1e-5 + 1e-3 * std::abs(g2[i] - g0[i]));
    diff += std::abs(g1[i] - g0[i]);
  }
  EXPECT_GT(diff, 1e-4);
}

// Every pipeline schedule on one rank trains the model 1F1B trains: the zero-bubble schedules
// run each backward as B (input gradients) and a later W (weight gradients, from what B kept:
// the layers' GEMM inputs and output gradients; in an MoE layer the routed experts' rows, by
// grouped GEMM or one GEMM per local expert, the shared expert's and the router's), and ZB-V and
// DualPipeV put the two model chunks in their V (on one rank: chunk 1, the last virtual stage,
// takes chunk 0's output without a transfer, and its LM head adds into chunk 0's tied word
// embedding). Three steps of the same batches give 1F1B's losses to 1e-5 (relative).
TEST(Executor, EveryScheduleTrainsAs1F1BOnOneRank) {
  auto losses = [](const Scenario& s) {
    Rig x(s);
    std::vector<double> out;
    for (int64_t it = 1; it <= 3; ++it) {
      const IterationResult r = x.exec.train_iteration(it, fixed_batch());
      out.push_back(r.lm_loss);
      out.push_back(r.load_balancing_loss);
    }
    return out;
  };
  auto with = [](Scenario s, PipelineScheduleKind kind) {
    s.parallel.pipeline_schedule = kind;
    if (v_shaped(kind)) s.parallel.virtual_pipeline_model_parallel_size = 2;
    return s;
  };
  std::vector<Scenario> models{tiny(), tiny(RecomputeGranularity::kFull), tiny_moe(true, 0),
                               tiny_moe(false, 32)};
  for (const Scenario& model : models) {
    const std::vector<double> base = losses(model);
    for (const PipelineScheduleKind kind :
         {PipelineScheduleKind::kZbH1, PipelineScheduleKind::kZbH2, PipelineScheduleKind::kZbV,
          PipelineScheduleKind::kDualPipeV}) {
      SCOPED_TRACE(std::string(to_string(kind)) + (model.model.is_moe() ? " moe" : " dense") +
                   " recompute " + to_string(model.training.recompute_granularity));
      const std::vector<double> l = losses(with(model, kind));
      ASSERT_EQ(l.size(), base.size());
      for (size_t i = 0; i < l.size(); ++i) {
        EXPECT_NEAR(l[i], base[i], 1e-5 * std::abs(base[i])) << "value " << i;
      }
    }
  }
}

// training.gradient_accumulation_fusion false (Megatron before Feb 2022): each layer's backward
// writes this micro-batch's param.grad and the Program's grad_accumulate kernel adds it into the
// main gradients. The sums are the same, only their order differs: with one micro-batch the
// losses are equal to the bit (0 + g = g), with two within the rounding of the reordered fp32
// additions; dense and MoE, with full recomputation, under 1F1B and ZB-H1 (whose B and W steps
// write the same param.grad: the norms' and biases' gradients in B, the wgrads in W).
TEST(Executor, UnfusedGradientAccumulationTrainsAsFused) {
  auto losses = [](const Scenario& s) {
    Rig x(s);
    std::vector<double> out;
    for (int64_t it = 1; it <= 3; ++it) {
      const IterationResult r = x.exec.train_iteration(it, fixed_batch());
      out.push_back(r.lm_loss);
      out.push_back(r.load_balancing_loss);
    }
    return out;
  };
  Scenario one_mb = tiny();
  one_mb.training.global_batch_size = 2;
  std::vector<Scenario> models{one_mb, tiny(), tiny(RecomputeGranularity::kFull),
                               tiny_moe(true, 0), tiny_moe(false, 32)};
  for (size_t mi = 0; mi < models.size(); ++mi) {
    for (const PipelineScheduleKind kind :
         {PipelineScheduleKind::k1F1B, PipelineScheduleKind::kZbH1}) {
      Scenario fused = models[mi];
      fused.parallel.pipeline_schedule = kind;
      Scenario unfused = fused;
      unfused.training.gradient_accumulation_fusion = false;
      SCOPED_TRACE("model " + std::to_string(mi) + " " + to_string(kind));
      const Program prog = build_program(unfused);
      const auto& kernels = prog.kernels;
      EXPECT_TRUE(std::any_of(kernels.begin(), kernels.end(),
                              [](const Kernel& k) { return k.key.name == "grad_accumulate"; }));
      const std::vector<double> a = losses(fused);
      const std::vector<double> b = losses(unfused);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        if (mi == 0) {
          EXPECT_EQ(a[i], b[i]) << "value " << i;
        } else {
          EXPECT_NEAR(a[i], b[i], 1e-5 * std::abs(a[i])) << "value " << i;
        }
      }
      // Training moved the loss: the comparison is not of three equal untrained values.
      EXPECT_NE(a[0], a[4]);
    }
  }
}

// model.moe_permute_fusion names the permutation kernels after Transformer Engine's fused ones
// (moe_permute_fused_fwd, ...) and charges their bytes; the executor runs the same permutation
// for either name (it binds the step, Role::kMoePermute / kMoeUnpermute), so training is bit for
// bit the same (the tiny MoE with grouped GEMM, and with SequentialMLP and a shared expert).
TEST(Executor, MoePermuteFusionTrainsBitForBitAsUnfused) {
  for (const Scenario& base : {tiny_moe(true, 0), tiny_moe(false, 32)}) {
    Scenario fused = base;
    fused.model.moe_permute_fusion = true;
    const Program prog = build_program(fused);
    EXPECT_TRUE(std::any_of(prog.kernels.begin(), prog.kernels.end(), [](const Kernel& k) {
      return k.key.name == "moe_unpermute_fused_bwd";
    }));
    Rig a(base), b(fused);
    for (int64_t it = 1; it <= 3; ++it) {
      const IterationResult ra = a.exec.train_iteration(it, fixed_batch());
      const IterationResult rb = b.exec.train_iteration(it, fixed_batch());
      EXPECT_EQ(ra.lm_loss, rb.lm_loss) << "iteration " << it;
      EXPECT_EQ(ra.load_balancing_loss, rb.load_balancing_loss) << "iteration " << it;
    }
  }
}

// attention_backend fused is flash's function as one Backend call on the QKV rows (the CPU
// backend's default packs the rows and runs the blockwise layer, as flash does): the same losses
// bit for bit, with and without recomputation (selective recomputes the attention core).
TEST(Executor, FusedAttentionTrainsBitForBitAsFlash) {
  for (const RecomputeGranularity r :
       {RecomputeGranularity::kNone, RecomputeGranularity::kSelective}) {
    Scenario flash = tiny(r);
    flash.training.attention_backend = AttentionBackend::kFlash;
    Scenario fused = flash;
    fused.training.attention_backend = AttentionBackend::kFused;
    const Program prog = build_program(fused);
    EXPECT_TRUE(std::any_of(prog.kernels.begin(), prog.kernels.end(), [](const Kernel& k) {
      return k.key.name == "fused_attention_bwd";
    }));
    Rig a(flash), b(fused);
    for (int64_t it = 1; it <= 3; ++it) {
      const IterationResult ra = a.exec.train_iteration(it, fixed_batch());
      const IterationResult rb = b.exec.train_iteration(it, fixed_batch());
      EXPECT_EQ(ra.lm_loss, rb.lm_loss) << "iteration " << it << " " << to_string(r);
    }
  }
}

/// The UnsupportedError text building an executor for `s` throws; a failure (and "") when it
/// builds.
std::string unsupported_error_of(const Scenario& s, const std::string& what) {
  try {
    Rig x(s);
  } catch (const UnsupportedError& e) {
    return e.what();
  }
  ADD_FAILURE() << what << " was accepted by the cpu executor";
  return "";
}

/// `text` holds `part`.
void expect_has(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << text;
}

TEST(Executor, RefusesWhatTheCpuBackendDoesNotRun) {
  Scenario s = tiny();
  s.training.precision = Precision::kFp16;  // dynamic loss scaling is not implemented
  expect_has(unsupported_error_of(s, "fp16"), "allowed: fp32, bf16");
  Scenario moe_bf16 = tiny_moe(true, 0);
  moe_bf16.training.precision = Precision::kBf16;
  EXPECT_THROW(Rig{moe_bf16}, UnsupportedError);
  // TF32 / bf16 tensor-core products are never replaced by fp32 ones without a word.
  for (const Float32MatmulPrecision p :
       {Float32MatmulPrecision::kHigh, Float32MatmulPrecision::kMedium}) {
    Scenario f = tiny();
    f.training.float32_matmul_precision = p;
    expect_has(unsupported_error_of(f, to_string(p)),
               "training.float32_matmul_precision: " + std::string(to_string(p)) +
                   ": the cpu backend");
  }
  // (Every schedule of core/schedule.hpp is run, none refused: EveryScheduleTrainsAs1F1BOnOneRank
  // and tests/cli/train_cli_test.cpp train them; a schedule added to core/ is refused by name.)
  Scenario moe = tiny_moe(true, 0);
  moe.model.moe_token_dispatcher_type = MoeTokenDispatcher::kAllGather;
  expect_has(unsupported_error_of(moe, "the allgather dispatcher"), "moe_token_dispatcher_type");
}

// CPU offload has nowhere to go on the cpu backend (its device memory is the host's memory): both
// offloads are refused by name, never trained without the offload.
TEST(Executor, RefusesCpuOffloadByName) {
  Scenario opt = tiny();
  opt.training.use_distributed_optimizer = true;
  opt.training.optimizer_cpu_offload = true;
  const std::string e = unsupported_error_of(opt, "optimizer_cpu_offload");
  expect_has(e, "training.optimizer_cpu_offload is refused by the cpu backend");
  expect_has(e, "its device memory is the host's memory");
  Scenario act = tiny();
  act.training.cpu_offloading = true;
  act.training.cpu_offloading_num_layers = 1;
  expect_has(unsupported_error_of(act, "cpu_offloading"),
             "training.cpu_offloading is refused by the cpu backend");
}

}  // namespace
}  // namespace traintwin::exec
