// The executor end to end in one process: the untrained model's loss is ln V, the gradients it
// computes by walking the Program's backward ops match finite differences of the loss it computes
// by walking the forward ops, and training on a fixed batch drives the loss down.
#include "exec/executor.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.hpp"
#include "core/program.hpp"
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
    const std::vector<float> theta0 = c.params;
    x.exec.train_iteration(1, fixed_batch());
    const std::vector<float> grads = c.grads;  // of theta0 (no clipping)
    c.params = theta0;
    std::mt19937 rng(3);
    int checked = 0;
    for (const ShardTensor& t : c.tensors) {
      for (int k = 0; k < 3; ++k) {
        const int64_t i = t.offset + static_cast<int64_t>(rng() % static_cast<uint32_t>(t.numel));
        const double g = grads[static_cast<size_t>(i)];
        if (std::abs(g) < 1e-3) continue;  // too small to resolve in fp32
        const float eps = 1e-2f;
        c.params[static_cast<size_t>(i)] = theta0[static_cast<size_t>(i)] + eps;
        const double up = x.exec.evaluate(fixed_batch()).lm_loss;
        c.params[static_cast<size_t>(i)] = theta0[static_cast<size_t>(i)] - eps;
        const double down = x.exec.evaluate(fixed_batch()).lm_loss;
        c.params[static_cast<size_t>(i)] = theta0[static_cast<size_t>(i)];
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

TEST(Executor, RefusesWhatTheCpuBackendDoesNotRun) {
  Scenario s = tiny();
  s.training.precision = Precision::kBf16;
  EXPECT_THROW(Rig{s}, UnsupportedError);
}

}  // namespace
}  // namespace traintwin::exec
