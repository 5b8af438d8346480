// A live run for prediction checks; see live_run.hpp.
#include "exec/live_run.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <string>

#include "core/error.hpp"
#include "exec/counter_rng.hpp"
#include "exec/cpu/cpu_backend.hpp"
#include "exec/model_shard.hpp"
#include "exec/trainer.hpp"

namespace traintwin::exec {
namespace {

/// The world's maximum of `x` (also a barrier).
double world_max(Communicator& comm, double x) {
  comm.all_reduce(GroupKind::kWorld, std::span<double>(&x, 1), ReduceOp::kMax)->wait();
  return x;
}

}  // namespace

LiveRun run_live(const Scenario& s, Communicator& comm, int warmup, int iterations,
                 Backend* backend) {
  if (iterations < 1 || warmup < 0) {
    throw InvalidArgument("live run: --iterations must be >= 1 and the warm-up >= 0 (got " +
                          std::to_string(iterations) + ", " + std::to_string(warmup) + ")");
  }
  if (comm.world_size() != s.world_size()) {
    throw InvalidArgument("live run: the scenario has " + std::to_string(s.world_size()) +
                          " ranks (cluster.num_gpus) but the world has " +
                          std::to_string(comm.world_size()));
  }
  LiveRun run;
  auto prog = std::make_shared<Program>(build_program(s, {comm.rank()}));
  run.program = prog;
  const RankCoord coord = prog->ranks.at(comm.rank()).coord;
  Backend& be = backend != nullptr ? *backend : cpu::host_backend();
  ModelShard shard(s, coord, static_cast<uint64_t>(s.training.seed), s.training.init_method_std,
                   be);
  // The scenario's hyper-parameters; a scenario written for simulation only gets a learning rate
  // (the step's cost does not depend on it).
  Scenario trained = s;
  if (!trained.training.lr) trained.training.lr = 1e-4;
  if (!trained.training.train_iters) trained.training.train_iters = 1 << 20;
  trained.training.min_lr = std::min(trained.training.min_lr, *trained.training.lr);
  Executor executor(*prog, comm, shard, hyperparameters(trained), be);
  const int64_t vocab = s.model.vocab_size;
  int64_t it = 0;
  const MicroBatchSource data = [&](int64_t mb, std::span<int32_t> tokens,
                                    std::span<int32_t> labels) {
    const auto stream = static_cast<uint64_t>((it * 1000003 + mb) * 64 + coord.dp);
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<int32_t>(counter_uniform(11, stream, i) * static_cast<double>(vocab)) %
                  static_cast<int32_t>(vocab);
      labels[i] = static_cast<int32_t>(counter_uniform(13, stream, i) * static_cast<double>(vocab)) %
                  static_cast<int32_t>(vocab);
    }
  };
  for (int i = 0; i < warmup + iterations; ++i) {
    ++it;
    world_max(comm, 0.0);  // barrier: every rank starts together
    executor.reset_clock();
    const auto t0 = std::chrono::steady_clock::now();
    IterationResult r = executor.train_iteration(it, data);
    const double local = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double slowest = world_max(comm, local);
    if (i >= warmup) {
      run.iteration_s.push_back(slowest);
      run.spans.push_back(std::move(r.spans));
    }
  }
  return run;
}

}  // namespace traintwin::exec
