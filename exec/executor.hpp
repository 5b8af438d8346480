// The trainer executor's walk: runs one rank's Program (core/program.hpp) for real — the very
// ops, in the very order, that the simulator replays. Three parts: this walk (issue order,
// dependencies, communication and its completion, the SP reorderings around TP collectives, the
// DP buckets), the model math (exec/gpt_model.hpp: what each Role computes) and the Backend
// (exec/backend.hpp: cpu today, cuda in the GPU issue) through which every kernel runs.
//
// Execution model (Megatron-LM's: one host thread issues the work in program order, the
// communication library progresses in the background):
//  - ops are issued in id order; a compute op first waits for every op in its deps, then runs its
//    kernels back to back on this thread (fp32, OpenBLAS GEMMs);
//  - collectives and send/recv are started non-blocking when reached and completed when an op
//    that depends on them is reached (or at the end of the iteration), so the Program's overlap
//    of DP gradient reduces with backward and of async TP reduces with weight-gradient GEMMs is
//    kept;
//  - what a kernel or communication op computes comes from its Role, phase, micro-batch, model
//    chunk and layer: there is no second, hand-written schedule.
//
// Activations use the [b, s, h] layout; sequence-parallel regions hold [b, s/t, h] (positions
// [tp x s/t, (tp+1) x s/t) of every sample) and are reordered around the SP all-gather and
// reduce-scatter, whose pieces are member-major.
//
// Numerics are layout independent by construction: parameters are initialized per global element
// (ModelShard), dropout masks are counter-based on global (sample, position, channel)
// coordinates, padded vocabulary entries are masked out of the softmax, and the loss of every
// token is weighted 1 / (global batch x seq_length). Different TP/PP/DP layouts therefore train
// the same model and differ only by floating-point summation order.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/program.hpp"
#include "exec/backend.hpp"
#include "exec/communicator.hpp"
#include "exec/gpt_model.hpp"
#include "exec/model_shard.hpp"

namespace traintwin::exec {

/// When one op ran on this rank (seconds since the executor's clock origin). Communication ops:
/// from issue to observed completion.
struct OpSpan {
  uint32_t op = 0;
  double start_s = 0;
  double end_s = 0;
  /// Compute ops: the duration of each of its kernels (Op::kernels order), from Backend::mark
  /// (the CPU: the host clock after each kernel; a GPU: CUDA events, no synchronize in between).
  std::vector<double> kernel_s;
};

/// What one iteration (or evaluation pass) produced, the same on every rank.
struct IterationResult {
  double lm_loss = 0;        ///< mean cross-entropy over the global batch's tokens (nats)
  double grad_norm = 0;      ///< global L2 norm of the gradients before clipping (training only)
  double learning_rate = 0;  ///< of this step (training only)
  /// MoE: the Switch load-balancing loss (x moe_aux_loss_coeff) averaged over the MoE layers and
  /// micro-batches of the global batch (Megatron logs it as load_balancing_loss); 0 for a dense
  /// model. Not part of lm_loss; its gradient is part of the step.
  double load_balancing_loss = 0;
  std::vector<OpSpan> spans; ///< every op executed on this rank, in issue order
};

/// Runs one rank's Program. Holds references to the program, communicator and shard, which must
/// outlive it.
///
/// Throws UnsupportedError for Program features the CPU backend does not execute yet:
/// tp_comm_overlap, cp_comm_type a2a, FP8, attention dropout with
/// grouped-query attention, a precision other than fp32 and bf16 (bf16: exec/linear.hpp; never
/// silently), a pipeline schedule of core/schedule.hpp it does not run (none today: gpipe, 1f1b
/// and interleaved, zb-h1, zb-h2, zb-v, dualpipev and dualpipe all run; zb-v in the fixed order
/// of core/schedule.hpp zb_v_schedule, the cost-aware V scheduler's for equal pass costs: the
/// executor profiles no costs, and any valid order gives the same losses); for MoE: bf16,
/// the allgather token dispatcher, expert_tensor_parallel_size > 1, and TP > 1 without
/// sequence_parallel (Megatron requires SP there); and
/// InvalidArgument when the program has no ops for `comm.rank()` or the shard belongs to
/// another rank.
class Executor {
 public:
  /// On the backend whose memory holds `shard` (ModelShard::backend()).
  Executor(const Program& program, Communicator& comm, ModelShard& shard,
           TrainingHyperparameters hyper);
  /// On `backend`, which must outlive the executor; InvalidArgument unless the shard's buffers
  /// are in its memory (both CPU backends count as one memory).
  Executor(const Program& program, Communicator& comm, ModelShard& shard,
           TrainingHyperparameters hyper, Backend& backend);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  /// One training iteration: forward/backward of every micro-batch as the schedule orders them,
  /// gradient reduction, clipping and the AdamW step with learning_rate(lr, iteration).
  /// `iteration` is 1-based and keys the dropout masks. Throws Error when the gradient norm is
  /// not finite (the step is not applied).
  IterationResult train_iteration(int64_t iteration, const MicroBatchSource& data);

  /// Forward only (the Program's forward ops and activation sends/recvs), no dropout, no state
  /// change: the loss of the micro-batches `data` gives.
  IterationResult evaluate(const MicroBatchSource& data);

  /// With the distributed optimizer and overlap_param_gather, the parameter all-gathers that the
  /// next iteration would start (each DP rank holds only its own updated pieces until then), done
  /// now — Megatron's forced param sync before evaluation and checkpointing (ZeRO-3's per-layer
  /// gathers excepted: the forward that uses a layer gathers it). No-op otherwise.
  /// Collective over the DP groups: every rank calls it at the same point.
  void synchronize_parameters();

  /// With the optimizer state sharded (the distributed optimizer, Megatron-FSDP's ZeRO-1/2/3):
  /// every DP (expert-DP for routed experts) rank's pieces of the parameters and AdamW moments
  /// all-gathered into every rank's full-size buffers, so that each rank holds the whole state of
  /// its TP/PP shard, as an unsharded run does — what a checkpoint saves, so that it resumes under
  /// any sharding strategy. Training state is unchanged (a rank still updates only its pieces;
  /// ZeRO-3 reshards the layers at their next gather). No-op without sharding. Collective over
  /// the DP groups: every rank calls it at the same point.
  void gather_sharded_state();

  /// Restarts the clock OpSpan times are measured from.
  void reset_clock();

  /// Whether each kernel is synchronized before the next starts (default on), so that an OpSpan
  /// measures its kernels on an asynchronous (device) backend. Off, a device backend's kernels
  /// queue back to back as in a production trainer and spans hold issue times only (the CPU
  /// backend runs synchronously either way).
  void set_kernel_timing(bool on);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace traintwin::exec
