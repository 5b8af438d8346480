// The trainer executor's walk; see executor.hpp.
#include "exec/executor.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "exec/distributed_optimizer.hpp"

namespace traintwin::exec {
namespace {

/// A communication op under way: its request, what to do once it completed, and the buffer it
/// sends from or receives into when that is not a model tensor.
struct InFlight {
  RequestPtr request;
  std::function<void()> on_complete;
  Tensor buffer;  // owned send/pack buffer
  double start_s = 0;
};

const RankProgram& rank_program(const Program& program, int64_t rank) {
  auto it = program.ranks.find(rank);
  if (it == program.ranks.end()) {
    throw InvalidArgument("executor: the Program has no ops for rank " + std::to_string(rank));
  }
  return it->second;
}

}  // namespace

class Executor::Impl {
 public:
  Impl(const Program& program, Communicator& comm, ModelShard& shard, TrainingHyperparameters hyper,
       Backend* backend)
      : prog_(program), comm_(comm), shard_(shard), hyper_(std::move(hyper)),
        backend_(backend == nullptr ? shard.backend() : *backend),
        rp_(&rank_program(program, comm.rank())),
        origin_(std::chrono::steady_clock::now()) {
    const Scenario& sc = prog_.scenario;
    if (&backend_ != &shard_.backend() &&
        (backend_.name() != "cpu" || shard_.backend().name() != "cpu")) {
      throw InvalidArgument("executor: the model shard's buffers are in " +
                            shard_.backend().name() + " memory, but the executor runs on the " +
                            backend_.name() + " backend (build the ModelShard with it)");
    }
    if (!(shard_.coord() == rp_->coord)) {
      throw InvalidArgument("executor: the model shard belongs to another rank than " +
                            std::to_string(comm_.rank()));
    }
    auto unsupported = [&](const std::string& what) {
      throw UnsupportedError("scenario " + sc.name + ": " + what + " is not executed by the " +
                             backend_.name() + " backend yet");
    };
    if (sc.training.tp_comm_overlap) unsupported("training.tp_comm_overlap");
    // ZeRO-1 is the distributed optimizer the executor has; Megatron-FSDP's sharded gradients
    // and parameters would need their own buffers (the losses would match, the memory not).
    if (sc.training.use_megatron_fsdp) {
      unsupported("training.use_megatron_fsdp (shard the optimizer state with "
                  "use_distributed_optimizer alone)");
    }
    if (sc.training.num_distributed_optimizer_instances > 1) {
      unsupported("training.num_distributed_optimizer_instances > 1 (HSDP: set it to 1)");
    }
    if (splits_backward(sc.parallel.pipeline_schedule)) {
      // Zero-bubble: B steps run the input gradient and W steps the wgrad GEMMs later
      // (exec/gpt_model_layer.cpp keeps their inputs until then). What that does not cover yet
      // is refused by name, never run as 1F1B in its place.
      const std::string zb = "parallelism.pipeline_schedule " +
                             std::string(to_string(sc.parallel.pipeline_schedule)) + " with ";
      if (sc.parallel.pipeline_schedule == PipelineScheduleKind::kZbV) {
        throw UnsupportedError("scenario " + sc.name + ": parallelism.pipeline_schedule is zb-v; "
                               "the " + backend_.name() + " executor runs zb-h1 and zb-h2 (its "
                               "model chunks follow the interleaved placement, not ZB-V's V)");
      }
      if (sc.parallel.sequence_parallel) unsupported(zb + "parallelism.sequence_parallel");
      if (sc.model.is_moe()) unsupported(zb + "an MoE model");
    }
    if (sc.parallel.context_parallel_size > 1 && sc.parallel.cp_comm_type == CpCommType::kA2a) {
      throw UnsupportedError("scenario " + sc.name + ": parallelism.cp_comm_type is a2a " +
                             "(Ulysses); the " + backend_.name() +
                             " backend executes context parallelism with p2p (ring attention) "
                             "or all_gather only");
    }
    if (sc.model.attention_width() != sc.model.hidden_size) {
      unsupported("model.kv_channels (a head dimension other than hidden_size / "
                  "num_attention_heads)");
    }
    if (sc.training.fp8()) unsupported("training.fp8_format (FP8 needs a GPU with FP8 tensor cores)");
    // fp32, or bf16 linear layers (exec/linear.hpp: Megatron's --bf16 GEMMs with fp32 master
    // weights and main grads; activations stay fp32 between kernels). fp16 needs dynamic loss
    // scaling, which the executor does not have.
    if (sc.training.precision != Precision::kFp32 && sc.training.precision != Precision::kBf16) {
      throw UnsupportedError("scenario " + sc.name + ": training.precision is " +
                             std::string(to_string(sc.training.precision)) + "; the " +
                             backend_.name() +
                             " executor trains in fp32 or bf16 (allowed: fp32, bf16; fp16 "
                             "needs dynamic loss scaling, not implemented)");
    }
    if (sc.training.precision == Precision::kBf16) {
      if (sc.model.is_moe()) {
        unsupported("training.precision bf16 with MoE (the experts' grouped GEMMs have no bf16 "
                    "path in the executor; use precision: fp32)");
      }
      // Megatron's bf16 attention multiplies bf16 q, k, v and probabilities: on a backend with
      // bf16 arithmetic the attention core's products run in it (float32_matmul_precision
      // medium's arithmetic; its storage stays fp32). A backend without it (the cpu backend,
      // whose bf16 GEMMs are an exact emulation) keeps fp32 products there.
      if (backend_.has_bf16_arithmetic()) {
        backend_.set_float32_matmul_precision(Float32MatmulPrecision::kMedium);
      }
    } else {
      // TF32 or bf16 arithmetic of the fp32 matrix products, or UnsupportedError from a backend
      // without it (never a silent fp32).
      backend_.set_float32_matmul_precision(sc.training.float32_matmul_precision);
    }
    if (sc.model.is_moe()) {
      if (sc.model.moe_token_dispatcher_type != MoeTokenDispatcher::kAllToAll) {
        unsupported("model.moe_token_dispatcher_type: allgather (use alltoall)");
      }
      if (sc.parallel.expert_tp() != 1) {
        unsupported("parallelism.expert_tensor_parallel_size = " +
                    std::to_string(sc.parallel.expert_tp()) +
                    " (it defaults to TP; set expert_tensor_parallel_size: 1)");
      }
      if (sc.parallel.tensor_model_parallel_size > 1 && !sc.parallel.sequence_parallel) {
        throw UnsupportedError("scenario " + sc.name +
                               ": MoE with tensor_model_parallel_size > 1 needs "
                               "parallelism.sequence_parallel: true (as Megatron-LM requires)");
      }
    }
    coord_ = rp_->coord;
    // Gradients are reduced, and the distributed optimizer shards its state, over DP x CP (the
    // CP ranks of a replica hold the same weights): member dp_cp_index_ of dp_cp_size_.
    const std::vector<int64_t> dp_cp = comm_.layout().group(GroupKind::kDpCp, rp_->rank);
    dp_cp_size_ = static_cast<int64_t>(dp_cp.size());
    dp_cp_index_ = std::find(dp_cp.begin(), dp_cp.end(), rp_->rank) - dp_cp.begin();
    RankCoord zero_coord = coord_;
    zero_coord.dp = dp_cp_index_;
    model_.emplace(prog_, *rp_, shard_, backend_, hyper_);
    optimizer_.emplace(shard_, backend_, zero_coord, dp_cp_size_,
                       sc.training.use_distributed_optimizer, hyper_);
    // The grad-norm all-reduce's group (TP x PP, or every rank: the distributed optimizer, or
    // experts outside TP x PP): which replicas count their squares (ShardOptimizer).
    bool clip_op = false, zero_op = false;
    for (const Op& op : rp_->ops) {
      if (op.role == Role::kGradNorm && op.kind == OpKind::kCollective) grad_norm_group_ = op.group;
      for (Role r : op.kernel_roles) {
        clip_op = clip_op || r == Role::kGradClipScale;
        zero_op = zero_op || r == Role::kZeroGradBuffer;
      }
    }
    // Gradients are zeroed and clipped by the Program's ops (zero grad buffer, grad clip scale):
    // a Program without them would leave gradients accumulating or unclipped.
    if (!zero_op) unexpected_program("no zero grad buffer kernel");
    if (hyper_.clip_grad > 0 && !clip_op) {
      unexpected_program("clip_grad is " + std::to_string(hyper_.clip_grad) +
                         " but the Program has no grad clip scale kernel (training.clip_grad "
                         "of the scenario is " +
                         std::to_string(sc.training.clip_grad) + ")");
    }
  }

  IterationResult train(int64_t iteration, const MicroBatchSource& data) {
    begin(iteration, data, /*training=*/true);
    for (const Op& op : rp_->ops) execute(op);
    finish();
    IterationResult r = report();
    r.grad_norm = step_.grad_norm;
    r.learning_rate = step_.learning_rate;
    return r;
  }

  IterationResult evaluate(const MicroBatchSource& data) {
    begin(0, data, /*training=*/false);
    for (const Op& op : rp_->ops) {
      // A p2p batch may carry a forward transfer under the phase of the step it follows
      // (send_backward_recv_forward), so transfers are picked by the pass their tag names.
      const bool p2p = op.kind == OpKind::kSend || op.kind == OpKind::kRecv;
      if (p2p ? read_pipeline_tag(op.tag, g().p * g().v).pass != Pass::kForward
              : op.phase != Phase::kForward) {
        continue;
      }
      execute(op);
    }
    finish();
    model_->count_pending_losses();
    return report();
  }

  void synchronize_parameters() {
    if (!prog_.scenario.training.use_distributed_optimizer ||
        !prog_.scenario.training.overlap_param_gather) {
      return;
    }
    inflight_.clear();
    inflight_.resize(rp_->ops.size());
    for (const Op& op : rp_->ops) {
      if (op.role != Role::kParamBucket) continue;
      issue_s_ = now_s();
      param_bucket(op);
    }
    finish();
    spans_.clear();
  }

  void reset_clock() { origin_ = std::chrono::steady_clock::now(); }
  void set_kernel_timing(bool on) { time_kernels_ = on; }

 private:
  // ---- iteration bookkeeping -------------------------------------------------------------------

  void begin(int64_t iteration, const MicroBatchSource& data, bool training) {
    iteration_ = iteration;
    model_->begin(iteration, data, training);
    inflight_.clear();
    inflight_.resize(rp_->ops.size());
    spans_.clear();
    marked_.clear();
    if (time_kernels_) {
      backend_.clear_marks();
      mark0_s_ = now_s();
      (void)backend_.mark();  // mark 0: the iteration's start on the backend's clock
    }
    sum_sq_ = 0;
    step_ = {};
  }

  void finish() {
    for (uint32_t i = 0; i < inflight_.size(); ++i) complete(i);
    resolve_marks();
  }

  /// The compute spans of this iteration from the backend's marks: start at the op's first mark,
  /// each kernel from the previous mark to its own (on the CPU the host clock after each kernel,
  /// as before; on a GPU the device's event times, with no synchronize in between), placed on
  /// the host timeline by mark 0, taken when the iteration began.
  void resolve_marks() {
    if (marked_.empty()) return;
    const std::vector<double> t = backend_.mark_times_s();
    for (const MarkedSpan& m : marked_) {
      OpSpan& span = spans_[m.span];
      span.start_s = mark0_s_ + t[m.marks.front()];
      for (size_t i = 1; i < m.marks.size(); ++i) {
        span.kernel_s[i - 1] = t[m.marks[i]] - t[m.marks[i - 1]];
      }
      span.end_s = mark0_s_ + t[m.marks.back()];
    }
    marked_.clear();
  }

  /// The loss averaged over the global batch, the same on every rank (a reporting all-reduce
  /// over the world, outside the Program, as Megatron's loss averaging for logging).
  IterationResult report() {
    std::array<double, 4> totals{model_->loss_sum(), static_cast<double>(model_->loss_tokens()),
                                 model_->moe_aux_loss_sum(),
                                 static_cast<double>(model_->moe_aux_loss_terms())};
    comm_.all_reduce(GroupKind::kWorld, std::span<double>(totals), ReduceOp::kSum)->wait();
    IterationResult r;
    r.lm_loss = totals[1] > 0 ? totals[0] / totals[1] : 0.0;
    r.load_balancing_loss = totals[3] > 0 ? totals[2] / totals[3] : 0.0;
    r.spans = std::move(spans_);
    model_->clear();
    return r;
  }

  double now_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count();
  }

  // ---- op dispatch -----------------------------------------------------------------------------

  void execute(const Op& op) {
    for (uint32_t d : op.deps) complete(d);
    switch (op.kind) {
      case OpKind::kCompute: {
        // Timed: a backend mark before the op and after each kernel (resolve_marks() turns them
        // into the span when the iteration ends); else the host clock around the op.
        OpSpan span{op.id, now_s(), 0, std::vector<double>(op.kernels.size())};
        MarkedSpan marked{spans_.size(), {}};
        if (time_kernels_) marked.marks.push_back(backend_.mark());
        for (size_t i = 0; i < op.kernels.size(); ++i) {
          const std::string& name = prog_.kernels[op.kernels[i]].key.name;
          // The local expert of a per-expert GEMM, as the lowering names it (0 otherwise).
          const int64_t expert = op.kernel_targets.empty() ? 0 : std::max(0, op.kernel_targets[i]);
          run_kernel(op, name, op.kernel_roles[i], expert);
          if (time_kernels_) marked.marks.push_back(backend_.mark());
        }
        span.end_s = now_s();
        spans_.push_back(std::move(span));
        if (time_kernels_) marked_.push_back(std::move(marked));
        break;
      }
      case OpKind::kCollective:
        issue_s_ = now_s();
        issue_collective(op);
        break;
      case OpKind::kSend:
      case OpKind::kRecv:
        issue_s_ = now_s();
        issue_p2p(op);
        break;
    }
  }

  void run_kernel(const Op& op, const std::string& name, Role role, int64_t expert) {
    switch (role) {
      case Role::kGradNorm:
        sum_sq_ = optimizer_->local_sum_of_squares(grad_norm_group_ == GroupKind::kWorld);
        return;
      case Role::kZeroGradBuffer: optimizer_->zero_grad_buffer(); return;
      case Role::kGradClipScale: optimizer_->clip(sum_sq_, iteration_); return;
      case Role::kOptimizerStep: step_ = optimizer_->step(sum_sq_, iteration_); return;
      default: model_->run(op, name, role, expert);
    }
    if (role == Role::kRouter && name == "moe_router_topk_fwd" && g().sp && g().t > 1) {
      // Megatron's aux loss under SP: tokens per expert summed over the sequence-partition
      // (TP) group, inside the router (a small blocking all-reduce the Program does not list).
      std::vector<int64_t>& counts = model_->layer(op).tokens_per_expert;
      std::vector<double> c(counts.begin(), counts.end());
      comm_.all_reduce(GroupKind::kTp, std::span<double>(c), ReduceOp::kSum)->wait();
      for (size_t i = 0; i < c.size(); ++i) counts[i] = static_cast<int64_t>(c[i]);
    }
  }

  void complete(uint32_t id) {
    auto& slot = inflight_[id];
    if (!slot) return;
    slot->request->wait();
    if (slot->on_complete) slot->on_complete();
    spans_.push_back({id, slot->start_s, now_s(), {}});
    slot.reset();
  }

  /// Registers `f` as op's communication under way and returns it (its buffer stays put). Its
  /// span starts when the op was issued (issue_s_), before any packing and the communicator
  /// call: Open MPI's non-blocking collectives do work inside the call (an MPI_Iallreduce of a
  /// 204 MB bucket spends ~80 ms there on 2 Zen 5 cores), which belongs to the collective.
  InFlight& start(const Op& op, InFlight f) {
    f.start_s = issue_s_;
    inflight_[op.id] = std::move(f);
    return *inflight_[op.id];
  }

  [[noreturn]] void unexpected_program(const std::string& what) const {
    throw InvalidArgument("executor: rank " + std::to_string(rp_->rank) + ": " + what);
  }

  [[noreturn]] void unexpected(const Op& op, const std::string& what) const {
    throw InvalidArgument("executor: rank " + std::to_string(rp_->rank) + " op " +
                          std::to_string(op.id) + " (" + prog_.label(op) + "): " + what);
  }

  Tensor zeros(int64_t n) { return Tensor(backend_, n); }
  const ShardGeometry& g() const { return model_->geometry(); }

  // ---- SP reorderings --------------------------------------------------------------------------
  // The all-gather output / reduce-scatter input is member-major [t][b][Tl][H]; activations are
  // [b][s][H] with member r holding positions [r Tl, (r+1) Tl): per member, b rows of Tl x H
  // elements, one 2-D copy.

  void member_major_to_bsh(const Tensor& pieces, Tensor& out, int64_t width) {
    const int64_t block = g().tl * width;
    out = zeros(g().b * g().s * width);
    for (int64_t r = 0; r < g().t; ++r) {
      backend_.copy_2d(out.span().subspan(static_cast<size_t>(r * block)), g().s * width,
                       pieces.span().subspan(static_cast<size_t>(r * g().b * block)), block, block,
                       g().b);
    }
  }

  Tensor bsh_to_member_major(const Tensor& full, int64_t width) {
    const int64_t block = g().tl * width;
    Tensor pieces = zeros(static_cast<int64_t>(full.size()));
    for (int64_t r = 0; r < g().t; ++r) {
      backend_.copy_2d(pieces.span().subspan(static_cast<size_t>(r * g().b * block)), block,
                       full.span().subspan(static_cast<size_t>(r * block)), g().s * width, block,
                       g().b);
    }
    return pieces;
  }

  /// SP all-gather of `shard` ([b, Tl, H]) into `full` ([b, s, H]) on completion.
  void gather_sp(const Op& op, const Tensor& shard, Tensor* full) {
    if (shard.size() != static_cast<size_t>(g().b * g().tl * g().h)) {
      unexpected(op, "nothing to gather");
    }
    InFlight f;
    f.buffer = zeros(g().b * g().s * g().h);
    f.request = comm_.all_gather(GroupKind::kTp, shard, f.buffer);
    InFlight& slot = start(op, std::move(f));
    const Tensor* pieces = &slot.buffer;
    slot.on_complete = [this, pieces, full] { member_major_to_bsh(*pieces, *full, g().h); };
  }

  /// TP reduce of `partial` ([b, s, H]): all-reduce in place, or (SP) reduce-scatter into `shard`.
  void reduce_tp(const Op& op, Tensor& partial, Tensor* shard) {
    InFlight f;
    if (op.collective == CollectiveKind::kAllReduce) {
      f.request = comm_.all_reduce(GroupKind::kTp, partial.span(), ReduceOp::kSum);
    } else if (op.collective == CollectiveKind::kReduceScatter) {
      f.buffer = bsh_to_member_major(partial, g().h);
      *shard = zeros(g().b * g().tl * g().h);
      f.request = comm_.reduce_scatter(GroupKind::kTp, f.buffer, shard->span(), ReduceOp::kSum);
    } else {
      unexpected(op, "expected a TP all_reduce or reduce_scatter");
    }
    start(op, std::move(f));
  }

  // ---- collectives -----------------------------------------------------------------------------

  void issue_collective(const Op& op) {
    const bool fwd = op.phase == Phase::kForward || op.phase == Phase::kRecompute;
    const bool gather = op.collective == CollectiveKind::kAllGather;
    switch (op.role) {
      case Role::kEmbedding: {
        ChunkState& st = model_->chunk(op.model_chunk, op.micro_batch);
        if (fwd) return reduce_tp(op, st.emb, &st.emb_rs);
        return gather_sp(op, model_->chunk_input_grad(st, op.model_chunk), &st.d_emb_full);
      }
      case Role::kQkv:
      case Role::kFc1: {
        LayerState& L = model_->layer(op);
        const bool qkv = op.role == Role::kQkv;
        if (gather) return gather_sp(op, qkv ? L.ln1 : L.ln2, qkv ? &L.ln1_full : &L.ln2_full);
        if (fwd) unexpected(op, "unexpected forward reduce");
        return reduce_tp(op, L.d_ln_full, &L.d_ln);
      }
      case Role::kAttentionProjection:
      case Role::kFc2: {
        LayerState& L = model_->layer(op);
        const bool proj = op.role == Role::kAttentionProjection;
        if (fwd) return reduce_tp(op, proj ? L.proj : L.fc2, proj ? &L.proj_rs : &L.fc2_rs);
        return gather_sp(op, L.d_branch, &L.d_branch_full);
      }
      case Role::kLmHead: {
        ChunkState& st = model_->chunk(op.model_chunk, op.micro_batch);
        if (gather) return gather_sp(op, st.lnf, &st.lnf_full);
        return reduce_tp(op, st.d_lnf_full, &st.d_lnf);
      }
      case Role::kCrossEntropyMax:
      case Role::kCrossEntropyTarget:
      case Role::kCrossEntropySumExp: {
        ChunkState& st = model_->chunk(op.model_chunk, op.micro_batch);
        Tensor& x = op.role == Role::kCrossEntropyMax      ? st.lmax
                    : op.role == Role::kCrossEntropyTarget ? st.target
                                                           : st.sum_exp;
        InFlight f;
        f.request = comm_.all_reduce(
            GroupKind::kTp, x.span(),
            op.role == Role::kCrossEntropyMax ? ReduceOp::kMax : ReduceOp::kSum);
        start(op, std::move(f));
        return;
      }
      case Role::kMoeDispatch: return moe_exchange(op, /*dispatch=*/true, fwd);
      case Role::kMoeCombine: return moe_exchange(op, /*dispatch=*/false, fwd);
      case Role::kAttentionCore: {  // context parallelism: K/V (dK/dV) over the CP group
        CpTransfer t = model_->cp_transfer(op);
        InFlight f;
        f.buffer = std::move(t.send);
        switch (op.collective) {
          case CollectiveKind::kRingExchange:
            f.request = comm_.ring_exchange(op.group, f.buffer.span(), t.recv);
            break;
          case CollectiveKind::kAllGather:
            f.request = comm_.all_gather(op.group, f.buffer.span(), t.recv);
            break;
          case CollectiveKind::kReduceScatter:
            f.request = comm_.reduce_scatter(op.group, f.buffer.span(), t.recv, ReduceOp::kSum);
            break;
          default: unexpected(op, "unexpected CP collective");
        }
        f.on_complete = std::move(t.on_complete);
        start(op, std::move(f));
        return;
      }
      case Role::kGradBucket: return grad_bucket(op);
      case Role::kParamBucket: return param_bucket(op);
      case Role::kLayerNormGrads: return layernorm_grads(op);
      case Role::kEmbeddingGrads: {
        InFlight f;
        f.request =
            comm_.all_reduce(GroupKind::kEmbedding, model_->embedding_grad_to_reduce(), ReduceOp::kSum);
        start(op, std::move(f));
        return;
      }
      case Role::kGradNorm: {
        InFlight f;
        f.request = comm_.all_reduce(op.group, std::span<double>(&sum_sq_, 1), ReduceOp::kSum);
        start(op, std::move(f));
        return;
      }
      default: unexpected(op, std::string("no collective for role ") + to_string(op.role));
    }
  }

  // ---- MoE token dispatch and combine (alltoall dispatcher, ETP 1) ----------------------------
  // The permuted tokens are expert-major over the global experts, so the rows for EP member r
  // (experts [r E_l, (r+1) E_l)) are one piece; the all-to-all delivers (source, local expert)
  // chunks, sorted to (local expert, source) for the grouped GEMM, as Megatron-Core's
  // MoEAlltoAllTokenDispatcher (sort_chunks_by_idxs). The Program sizes the exchange for the
  // busiest rank; here the counts are the real ones (all_to_all_v).

  /// Dispatch forward: the EP group's token counts (an all-gather of each member's rows per
  /// expert, Megatron's gather of num_local_tokens_per_expert), then the plan of the exchange.
  void plan_exchange(const Op& op, LayerState& L) {
    const int64_t ep = comm_.layout().size(GroupKind::kEp);
    const int64_t me = shard_.expert_coord().ep;
    const int64_t e = g().experts, el = g().el;
    const std::vector<int64_t>& mine = model_->moe_rows_per_expert(op);
    std::vector<float> local(mine.begin(), mine.end()), all(static_cast<size_t>(ep * e));
    comm_.all_gather(GroupKind::kEp, local, all)->wait();
    MoeExchange& x = L.exchange;
    x.send_rows.assign(static_cast<size_t>(ep), 0);
    x.recv_rows.assign(static_cast<size_t>(ep), 0);
    x.chunk_rows.assign(static_cast<size_t>(ep * el), 0);
    x.rows_per_local_expert.assign(static_cast<size_t>(el), 0);
    for (int64_t r = 0; r < ep; ++r) {
      for (int64_t j = 0; j < el; ++j) {
        const auto sent = mine[static_cast<size_t>(r * el + j)];
        const auto got = static_cast<int64_t>(all[static_cast<size_t>(r * e + me * el + j)]);
        x.send_rows[static_cast<size_t>(r)] += sent;
        x.recv_rows[static_cast<size_t>(r)] += got;
        x.chunk_rows[static_cast<size_t>(r * el + j)] = got;
        x.rows_per_local_expert[static_cast<size_t>(j)] += got;
      }
    }
  }

  /// (source, local expert) chunks <-> (local expert, source) chunks of [rows, h].
  Tensor sort_chunks(const MoeExchange& x, CFSpan in, bool to_expert_major) {
    const int64_t ep = static_cast<int64_t>(x.send_rows.size()), el = g().el;
    std::vector<int64_t> rows(static_cast<size_t>(ep * el)), order(rows.size());
    for (int64_t r = 0; r < ep; ++r) {
      for (int64_t j = 0; j < el; ++j) {
        const auto src = static_cast<size_t>(r * el + j), dst = static_cast<size_t>(j * ep + r);
        if (to_expert_major) {  // input (r, j)-ordered
          rows[src] = x.chunk_rows[src];
          order[dst] = static_cast<int64_t>(src);
        } else {  // input (j, r)-ordered
          rows[dst] = x.chunk_rows[src];
          order[src] = static_cast<int64_t>(dst);
        }
      }
    }
    Tensor out = zeros(static_cast<int64_t>(in.size()));
    backend_.moe_sort_chunks(out, in, rows, order, g().h);
    return out;
  }

  static std::vector<int64_t> times(const std::vector<int64_t>& rows, int64_t h) {
    std::vector<int64_t> v(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) v[i] = rows[i] * h;
    return v;
  }

  /// kMoeDispatch / kMoeCombine: an all-to-all over EP, forward or backward.
  void moe_exchange(const Op& op, bool dispatch, bool fwd) {
    if (op.collective != CollectiveKind::kAllToAll || op.group != GroupKind::kEp) {
      unexpected(op, "expected an all_to_all over ep (alltoall dispatcher, ETP 1)");
    }
    LayerState& L = model_->layer(op);
    const int64_t h = g().h;
    if (dispatch && fwd) plan_exchange(op, L);
    const MoeExchange& x = L.exchange;
    const std::vector<int64_t> sent = times(x.send_rows, h), got = times(x.recv_rows, h);
    const int64_t m_rows = L.perm.rows();
    int64_t r_rows = 0;
    for (int64_t v : x.recv_rows) r_rows += v;
    InFlight f;
    // Tokens travel to the experts (dispatch forward, combine backward) or back.
    const bool to_experts = dispatch == fwd;
    if (to_experts) {
      f.buffer = zeros(r_rows * h);
      CFSpan in = dispatch ? CFSpan(L.permuted) : CFSpan(L.d_combined);
      f.request = comm_.all_to_all_v(GroupKind::kEp, in, sent, f.buffer, got);
      InFlight& slot = start(op, std::move(f));
      Tensor* received = &slot.buffer;
      slot.on_complete = [this, &L, received, dispatch] {
        Tensor sorted = sort_chunks(L.exchange, *received, /*to_expert_major=*/true);
        if (dispatch) {
          L.dispatched = std::move(sorted);
          L.permuted.reset();
        } else {
          L.d_expert_fc2 = std::move(sorted);
          L.d_combined.reset();
        }
      };
      return;
    }
    // Back from the experts: (local expert, source) -> (source, local expert), then all-to-all.
    Tensor& from = dispatch ? L.d_dispatched : L.expert_fc2;
    f.buffer = sort_chunks(x, from, /*to_expert_major=*/false);
    from.reset();
    Tensor& into = dispatch ? L.d_permuted : L.combined;
    into = zeros(m_rows * h);
    f.request = comm_.all_to_all_v(GroupKind::kEp, f.buffer, got, into, sent);
    start(op, std::move(f));
  }

  // ---- DP buckets and the distributed optimizer's pieces (distributed_optimizer.hpp) -----------

  /// A bucket of routed experts' weights (reduced over expert-DP) rather than dense ones.
  static bool expert_bucket(const Op& op) { return op.group == GroupKind::kEdp; }
  /// The tensors of a bucket op's items.
  std::vector<const ShardTensor*> bucket_tensors(const Op& op) const {
    const auto [begin, end] =
        shard_.item_range(op.model_chunk, op.bucket_layers, expert_bucket(op));
    std::vector<const ShardTensor*> out;
    for (const ShardTensor& t : shard_.chunks()[static_cast<size_t>(op.model_chunk)].tensors) {
      if (t.offset >= begin && t.offset < end) out.push_back(&t);
    }
    return out;
  }

  /// Elements [lo, hi) of tensor `t` in the flat array `flat`.
  static FSpan elements(Tensor& flat, const ShardTensor& t, int64_t lo, int64_t hi) {
    return FSpan(flat.data() + t.offset + lo, static_cast<size_t>(hi - lo));
  }

  /// Copies piece `d` of every tensor of `tensors` between `flat` and the member-major buffer
  /// `packed` (each member's pieces zero-padded to piece()): pack when `to_packed`, else unpack.
  /// `first` is the offset of member `d`'s pieces in `packed`.
  void copy_pieces(Tensor& flat, const std::vector<const ShardTensor*>& tensors,
                   int64_t d, FSpan packed, int64_t first, bool to_packed) {
    int64_t k = first;
    for (const ShardTensor* t : tensors) {
      const auto [lo, hi] = optimizer_->owned(*t, d);
      FSpan dst = packed.subspan(static_cast<size_t>(k), static_cast<size_t>(hi - lo));
      if (to_packed) {
        backend_.copy(dst, elements(flat, *t, lo, hi));
      } else {
        backend_.copy(elements(flat, *t, lo, hi), dst);
      }
      k += optimizer_->piece(*t);
    }
  }

  /// This rank's position in a bucket's group: its DP or expert-DP coordinate.
  int64_t bucket_member(const Op& op) const {
    return expert_bucket(op) ? shard_.expert_coord().edp : dp_cp_index_;
  }
  int64_t pieces_per_member(const std::vector<const ShardTensor*>& tensors) const {
    int64_t n = 0;
    for (const ShardTensor* t : tensors) n += optimizer_->piece(*t);
    return n;
  }

  void grad_bucket(const Op& op) {
    auto& grads = shard_.chunks()[static_cast<size_t>(op.model_chunk)].grads;
    InFlight f;
    if (op.collective == CollectiveKind::kAllReduce) {
      const auto [begin, end] =
          shard_.item_range(op.model_chunk, op.bucket_layers, expert_bucket(op));
      f.request = comm_.all_reduce(
          op.group, FSpan(grads.data() + begin, static_cast<size_t>(end - begin)), ReduceOp::kSum);
      start(op, std::move(f));
      return;
    }
    if (op.collective != CollectiveKind::kReduceScatter) unexpected(op, "unexpected bucket collective");
    // Member-major input: for each member d of the group (DP, or expert-DP for an expert
    // bucket), piece d of every tensor (zero-padded).
    const std::vector<const ShardTensor*> tensors = bucket_tensors(op);
    const int64_t per_member = pieces_per_member(tensors);
    const int64_t dp = expert_bucket(op) ? comm_.layout().size(op.group) : dp_cp_size_;
    const int64_t me = bucket_member(op);
    f.buffer = zeros(per_member * dp);
    for (int64_t d = 0; d < dp; ++d) copy_pieces(grads, tensors, d, f.buffer, d * per_member, true);
    auto out = std::make_shared<Tensor>(zeros(per_member));
    f.request = comm_.reduce_scatter(op.group, f.buffer, out->span(), ReduceOp::kSum);
    f.on_complete = [this, tensors, out, &grads, me] {
      copy_pieces(grads, tensors, me, out->span(), 0, false);
    };
    start(op, std::move(f));
  }

  /// Distributed optimizer: every DP rank's updated pieces of the bucket's parameters to all.
  void param_bucket(const Op& op) {
    if (op.collective != CollectiveKind::kAllGather) unexpected(op, "expected an all-gather");
    auto& params = shard_.chunks()[static_cast<size_t>(op.model_chunk)].params;
    const std::vector<const ShardTensor*> tensors = bucket_tensors(op);
    const int64_t per_member = pieces_per_member(tensors);
    const int64_t dp = expert_bucket(op) ? comm_.layout().size(op.group) : dp_cp_size_;
    auto mine = std::make_shared<Tensor>(zeros(per_member));
    copy_pieces(params, tensors, bucket_member(op), mine->span(), 0, true);
    InFlight f;
    f.buffer = zeros(per_member * dp);
    f.request = comm_.all_gather(op.group, mine->span(), f.buffer.span());
    InFlight& slot = start(op, std::move(f));
    Tensor* gathered = &slot.buffer;  // owned by the in-flight slot until completion
    slot.on_complete = [this, tensors, mine, gathered, &params, per_member, dp] {
      for (int64_t d = 0; d < dp; ++d) {
        copy_pieces(params, tensors, d, gathered->span(), d * per_member, false);
      }
    };
  }

  /// SP: the gradients of the TP-replicated tensors computed from sequence shards (LayerNorms,
  /// row-parallel biases) summed over TP: packed, all-reduced, unpacked on completion.
  void layernorm_grads(const Op& op) {
    int64_t total = 0;
    for (const auto& c : shard_.chunks()) {
      for (const auto& t : c.tensors) {
        if (t.sequence_parallel_grad) total += t.numel;
      }
    }
    InFlight f;
    f.buffer = zeros(total);
    auto for_each_piece = [this](FSpan packed, bool to_packed) {
      int64_t k = 0;
      for (auto& c : shard_.chunks()) {
        for (const auto& t : c.tensors) {
          if (!t.sequence_parallel_grad) continue;
          FSpan piece = packed.subspan(static_cast<size_t>(k), static_cast<size_t>(t.numel));
          if (to_packed) {
            backend_.copy(piece, elements(c.grads, t, 0, t.numel));
          } else {
            backend_.copy(elements(c.grads, t, 0, t.numel), piece);
          }
          k += t.numel;
        }
      }
    };
    for_each_piece(f.buffer, true);
    f.request = comm_.all_reduce(GroupKind::kTp, f.buffer.span(), ReduceOp::kSum);
    InFlight& slot = start(op, std::move(f));
    Tensor* packed = &slot.buffer;
    slot.on_complete = [packed, for_each_piece] { for_each_piece(packed->span(), false); };
  }

  // ---- pipeline send/recv ----------------------------------------------------------------------

  void issue_p2p(const Op& op) {
    const PipelineTransfer t = read_pipeline_tag(op.tag, g().p * g().v);
    const bool backward = t.pass == Pass::kBackward;
    const int64_t mb = t.micro_batch;
    const int64_t my_vs = op.kind == OpKind::kSend ? t.sender_vstage : t.receiver_vstage();
    const int64_t chunk = my_vs / g().p;
    ChunkState& st = model_->chunk(chunk, mb);
    InFlight f;
    if (op.kind == OpKind::kSend) {
      if (backward) {
        f.buffer = model_->take_chunk_input_grad(st, chunk);
      } else {
        const Tensor& out = model_->chunk_output(st, chunk);
        f.buffer = zeros(static_cast<int64_t>(out.size()));
        backend_.copy(f.buffer, out);
      }
      f.request = comm_.send(op.peer, op.tag, f.buffer.span());
    } else {
      Tensor& dst = backward ? st.d_output : st.input;
      dst = zeros(g().b * g().tl * g().h);
      f.request = comm_.recv(op.peer, op.tag, dst.span());
    }
    start(op, std::move(f));
  }

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
  int64_t dp_cp_size_ = 1, dp_cp_index_ = 0;  // this rank in its DP x CP group
  std::optional<GptModel> model_;
  std::optional<ShardOptimizer> optimizer_;

  // per iteration
  int64_t iteration_ = 0;
  std::vector<std::optional<InFlight>> inflight_;
  std::vector<OpSpan> spans_;
  double sum_sq_ = 0;
  ShardOptimizer::Step step_;
  GroupKind grad_norm_group_ = GroupKind::kModelParallel;
};

Executor::Executor(const Program& program, Communicator& comm, ModelShard& shard,
                   TrainingHyperparameters hyper)
    : impl_(std::make_unique<Impl>(program, comm, shard, std::move(hyper), nullptr)) {}
Executor::Executor(const Program& program, Communicator& comm, ModelShard& shard,
                   TrainingHyperparameters hyper, Backend& backend)
    : impl_(std::make_unique<Impl>(program, comm, shard, std::move(hyper), &backend)) {}
Executor::~Executor() = default;

IterationResult Executor::train_iteration(int64_t iteration, const MicroBatchSource& data) {
  if (iteration < 1) throw InvalidArgument("executor: iteration must be >= 1");
  return impl_->train(iteration, data);
}

IterationResult Executor::evaluate(const MicroBatchSource& data) { return impl_->evaluate(data); }

void Executor::reset_clock() { impl_->reset_clock(); }

void Executor::set_kernel_timing(bool on) { impl_->set_kernel_timing(on); }

void Executor::synchronize_parameters() { impl_->synchronize_parameters(); }

}  // namespace traintwin::exec
