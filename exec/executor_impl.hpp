// The executor's state and steps, internal to exec/executor*.cpp (exec/executor.hpp is the public
// entry): this rank's Program, model shard, optimizer and the communication ops under way.
// exec/executor.cpp holds the walk (construction, iterations, op dispatch, pipeline send/recv);
// exec/executor_collectives.cpp the collectives (SP reorderings, TP/CP/EP exchanges, DP buckets
// and the distributed optimizer's pieces). Next in the flow: exec/gpt_model.hpp runs the kernels.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "exec/distributed_optimizer.hpp"
#include "exec/executor.hpp"

namespace traintwin::exec {

/// A communication op under way: its request, what to do once it completed, and the buffer it
/// sends from or receives into when that is not a model tensor.
struct InFlight {
  RequestPtr request;
  std::function<void()> on_complete;
  Tensor buffer;  // owned send/pack buffer
  double start_s = 0;
};

/// Executor's implementation (pimpl): one rank's walk of its Program.
class Executor::Impl {
 public:
  /// Checks what the backend executes of `program` and builds this rank's model and optimizer
  /// (Executor's constructor: exec/executor.hpp).
  Impl(const Program& program, Communicator& comm, ModelShard& shard, TrainingHyperparameters hyper,
       Backend* backend);
  /// One training iteration: every op of the rank's Program, then the optimizer step.
  IterationResult train(int64_t iteration, const MicroBatchSource& data);
  /// The forward ops only, on every micro-batch; the loss, no update.
  IterationResult evaluate(const MicroBatchSource& data);
  /// The parameters of rank DP 0 to every DP rank (Executor::synchronize_parameters).
  void synchronize_parameters();
  /// Every DP (expert-DP) rank's pieces of the parameters and AdamW moments to all of them
  /// (Executor::gather_sharded_state).
  void gather_sharded_state();
  void reset_clock() { origin_ = std::chrono::steady_clock::now(); }
  void set_kernel_timing(bool on) { time_kernels_ = on; }
 private:
  // ---- iteration bookkeeping -------------------------------------------------------------------
  /// Starts an iteration: clears the spans and in-flight ops, binds the micro-batches.
  void begin(int64_t iteration, const MicroBatchSource& data, bool training);
  /// Waits for every communication op still under way.
  void finish();
  /// The compute spans of this iteration from the backend's marks: start at the op's first mark,
  /// each kernel from the previous mark to its own (on the CPU the host clock after each kernel,
  /// as before; on a GPU the device's event times, with no synchronize in between), placed on
  /// the host timeline by mark 0, taken when the iteration began.
  void resolve_marks();
  /// The loss averaged over the global batch, the same on every rank (a reporting all-reduce
  /// over the world, outside the Program, as Megatron's loss averaging for logging).
  IterationResult report();
  double now_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count();
  }

  // ---- op dispatch -----------------------------------------------------------------------------
  /// Runs or issues one op of the Program (compute, collective or send/recv).
  void execute(const Op& op);
  /// One kernel of a compute op, through the model's layer for `role`.
  void run_kernel(const Op& op, const std::string& name, Role role, int64_t expert);
  /// Waits for communication op `id` and runs its completion.
  void complete(uint32_t id);
  /// Registers `f` as op's communication under way and returns it (its buffer stays put). Its
  /// span starts when the op was issued (issue_s_), before any packing and the communicator
  /// call: Open MPI's non-blocking collectives do work inside the call (an MPI_Iallreduce of a
  /// 204 MB bucket spends ~80 ms there on 2 Zen 5 cores), which belongs to the collective.
  InFlight& start(const Op& op, InFlight f);
  /// InvalidArgument (unexpected_program) when the LM head shares chunk 0's word embedding from
  /// another chunk (the V placement's rank 0) and a DP reduce of that embedding's bucket
  /// precedes the head's last backward in the rank's ops.
  void check_tied_head_order() const;
  [[noreturn]] void unexpected_program(const std::string& what) const;
  [[noreturn]] void unexpected(const Op& op, const std::string& what) const;
  Tensor zeros(int64_t n) { return Tensor(backend_, n); }
  const ShardGeometry& g() const { return model_->geometry(); }

  // ---- SP reorderings --------------------------------------------------------------------------
  // The all-gather output / reduce-scatter input is member-major [t][b][Tl][H]; activations are
  // [b][s][H] with member r holding positions [r Tl, (r+1) Tl): per member, b rows of Tl x H
  // elements, one 2-D copy.

  /// Member-major pieces to [b, s, width] (`out`).
  void member_major_to_bsh(const Tensor& pieces, Tensor& out, int64_t width);
  /// [b, s, width] to member-major pieces.
  Tensor bsh_to_member_major(const Tensor& full, int64_t width);
  /// SP all-gather of `shard` ([b, Tl, H]) into `full` ([b, s, H]) on completion.
  void gather_sp(const Op& op, const Tensor& shard, Tensor* full);
  /// TP reduce of `partial` ([b, s, H]): all-reduce in place, or (SP) reduce-scatter into `shard`.
  void reduce_tp(const Op& op, Tensor& partial, Tensor* shard);

  // ---- collectives -----------------------------------------------------------------------------
  /// Issues a collective op: TP/SP, CP, EP exchanges, DP buckets, the gradient norm.
  void issue_collective(const Op& op);

  // ---- MoE token dispatch and combine (alltoall dispatcher, ETP 1) ----------------------------
  // The permuted tokens are expert-major over the global experts, so the rows for EP member r
  // (experts [r E_l, (r+1) E_l)) are one piece; the all-to-all delivers (source, local expert)
  // chunks, sorted to (local expert, source) for the grouped GEMM, as Megatron-Core's
  // MoEAlltoAllTokenDispatcher (sort_chunks_by_idxs). The Program sizes the exchange for the
  // busiest rank; here the counts are the real ones (all_to_all_v).

  /// Dispatch forward: the EP group's token counts (an all-gather of each member's rows per
  /// expert, Megatron's gather of num_local_tokens_per_expert), then the plan of the exchange.
  void plan_exchange(const Op& op, LayerState& L);
  /// (source, local expert) chunks <-> (local expert, source) chunks of [rows, h].
  Tensor sort_chunks(const MoeExchange& x, CFSpan in, bool to_expert_major);
  /// `rows` scaled by `h` (element counts of row chunks).
  static std::vector<int64_t> times(const std::vector<int64_t>& rows, int64_t h);
  /// kMoeDispatch / kMoeCombine: an all-to-all over EP, forward or backward.
  void moe_exchange(const Op& op, bool dispatch, bool fwd);

  // ---- DP buckets and the distributed optimizer's pieces (distributed_optimizer.hpp) -----------
  /// A bucket of routed experts' weights (reduced over expert-DP) rather than dense ones.
  static bool expert_bucket(const Op& op);
  /// The tensors of a bucket op's items.
  std::vector<const ShardTensor*> bucket_tensors(const Op& op) const;
  /// Elements [lo, hi) of tensor `t` in the flat array `flat`.
  static FSpan elements(Tensor& flat, const ShardTensor& t, int64_t lo, int64_t hi);
  /// Copies piece `d` of every tensor of `tensors` between `flat` and the member-major buffer
  /// `packed` (each member's pieces zero-padded to piece()): pack when `to_packed`, else unpack.
  /// `first` is the offset of member `d`'s pieces in `packed`.
  void copy_pieces(Tensor& flat, const std::vector<const ShardTensor*>& tensors,
                   int64_t d, FSpan packed, int64_t first, bool to_packed);
  /// This rank's position in a bucket's group: its DP or expert-DP coordinate.
  int64_t bucket_member(const Op& op) const;
  /// Pieces per member of a bucket of `tensors` (the distributed optimizer's split).
  int64_t pieces_per_member(const std::vector<const ShardTensor*>& tensors) const;
  /// A DP gradient bucket: all-reduce, or (distributed optimizer) reduce-scatter of pieces;
  /// HSDP: the all-reduce of this rank's reduced pieces over the replica group.
  void grad_bucket(const Op& op);
  /// Distributed optimizer: every DP rank's updated pieces of the bucket's parameters to all.
  /// ZeRO-3's per-layer gather (an FSDP unit) first drops the other ranks' pieces of the layer
  /// (reshard), so the layer runs on what the gather brings.
  void param_bucket(const Op& op);
  /// A ZeRO-3 FSDP unit's gather: one transformer layer's bucket.
  bool fsdp_unit(const Op& op) const {
    return zero_stage_ >= 3 && op.bucket_layers.size() == 1 && op.bucket_layers[0] >= 0;
  }
  /// Zeroes every element of `tensors` in `flat` outside member `d`'s piece (ZeRO-3 reshard:
  /// the full-size buffer stays allocated; only the values of the other pieces are dropped).
  void reshard(Tensor& flat, const std::vector<const ShardTensor*>& tensors, int64_t d);
  /// ZeRO-3 after the optimizer step: every transformer layer's parameters resharded.
  void reshard_layers();
  /// DualPipe (Role kMirrorGrads): the gradients of this rank's two parameter copies summed with
  /// its mirror's (ranks r and p - 1 - r, GroupKind::kPpMirror): packed stage by stage, one
  /// all-reduce, unpacked on completion, so both copies of every stage step alike.
  void mirror_grads(const Op& op);
  /// SP: the gradients of the TP-replicated tensors computed from sequence shards (LayerNorms,
  /// row-parallel biases) summed over TP: packed, all-reduced, unpacked on completion.
  void layernorm_grads(const Op& op);

  // ---- pipeline send/recv ----------------------------------------------------------------------
  /// A pipeline send or recv of an activation or its gradient (phase and micro-batch from the op).
  void issue_p2p(const Op& op);

  const Program& prog_;
  Communicator& comm_;
  ModelShard& shard_;
  TrainingHyperparameters hyper_;
  Backend& backend_;
  const RankProgram* rp_ = nullptr;
  bool time_kernels_ = true;  // mark each kernel's end (Backend::mark) so its span is its own
  /// A compute span waiting for its marks' times: its index in spans_, the mark before the op
  /// and the mark after each kernel.
  struct MarkedSpan {
    size_t span;
    std::vector<size_t> marks;
  };
  std::vector<MarkedSpan> marked_;
  double mark0_s_ = 0;  ///< host time (now_s()) of mark 0
  std::chrono::steady_clock::time_point origin_;
  double issue_s_ = 0;  ///< when the communication op being issued was reached (now_s())
  RankCoord coord_;
  int64_t dp_cp_size_ = 1, dp_cp_index_ = 0;  // this rank in its DP x CP group (HSDP: kDpShard)
  GroupKind dense_group_ = GroupKind::kDpCp;   // what dense state is sharded over
  int64_t replica_index_ = 0;                  // HSDP: this rank in its kDpReplica group
  std::optional<GptModel> model_;
  std::optional<ShardOptimizer> optimizer_;
  // per iteration
  int64_t iteration_ = 0;
  std::vector<std::optional<InFlight>> inflight_;
  std::vector<OpSpan> spans_;
  double sum_sq_ = 0;
  ShardOptimizer::Step step_;
  GroupKind grad_norm_group_ = GroupKind::kModelParallel;
  /// training.zero_stage(): 0 replicated, 1 the distributed optimizer, 2 and gradients sharded,
  /// 3 and parameters sharded.
  int zero_stage_ = 0;
  /// ZeRO-2/3: the reduce-scatters of one bucket in an iteration (one per micro-batch) and the
  /// sum of their reduced pieces (this rank's shard of the bucket's gradient).
  struct GradSeries {
    int64_t rounds = 0;            ///< reduce-scatters per iteration
    int64_t done = 0;              ///< completed so far this iteration
    std::shared_ptr<Tensor> acc;   ///< their reduced pieces summed (member-major piece layout)
    std::optional<uint32_t> last_issued;  ///< the op id of the latest one issued
  };
  static constexpr size_t kNoSeries = static_cast<size_t>(-1);
  std::vector<size_t> grad_series_;  ///< per op id: its series in grad_acc_, or kNoSeries
  std::vector<GradSeries> grad_acc_;
};

}  // namespace traintwin::exec
