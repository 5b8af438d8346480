// A live run for prediction checks: the scenario's Program executed for a few iterations on
// this rank (through the same Executor and Backend as `train`), on synthetic tokens so no data
// set is needed (Megatron-LM's --mock-data), timed per iteration and per op.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/program.hpp"
#include "core/scenario.hpp"
#include "exec/backend.hpp"
#include "exec/communicator.hpp"
#include "exec/executor.hpp"

namespace traintwin::exec {

/// What a live run measured on this rank.
struct LiveRun {
  std::shared_ptr<const Program> program;  ///< this rank's Program
  /// Wall time of each timed iteration, the slowest rank's (every rank starts it after a
  /// barrier): what the simulator's iteration time predicts.
  std::vector<double> iteration_s;
  /// Every op of this rank in each timed iteration, times since that iteration's start.
  std::vector<std::vector<OpSpan>> spans;
};

/// Runs `warmup` untimed and then `iterations` timed training iterations of `s` on this rank of
/// `comm` (a world of s.world_size() ranks; collective: every rank calls it). Tokens are a
/// counter-based random stream over the vocabulary; the learning rate is the scenario's
/// (training.lr, else 1e-4). Throws InvalidArgument for iterations < 1, warmup < 0 or a world
/// of another size, and what the Executor throws. `backend` (null: the CPU backend) runs the
/// kernels and holds the model; it must outlive the call.
LiveRun run_live(const Scenario& s, Communicator& comm, int warmup, int iterations,
                 Backend* backend = nullptr);

}  // namespace traintwin::exec
