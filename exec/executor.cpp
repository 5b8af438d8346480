// The trainer executor's walk (exec/executor.hpp; its state is exec/executor_impl.hpp): the
// constructor's checks, one iteration's bookkeeping, the dispatch of every op of the rank's
// Program, and the pipeline send/recv. The collectives are exec/executor_collectives.cpp.
#include "exec/executor.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/pipeline_scatter_gather.hpp"
#include "exec/distributed_optimizer.hpp"
#include "exec/executor_impl.hpp"
#include "exec/linear.hpp"

namespace traintwin::exec {
namespace {

const RankProgram& rank_program(const Program& program, int64_t rank) {
  auto it = program.ranks.find(rank);
  if (it == program.ranks.end()) {
    throw InvalidArgument("executor: the Program has no ops for rank " + std::to_string(rank));
  }
  return it->second;
}

}  // namespace

Executor::Impl::Impl(const Program& program, Communicator& comm, ModelShard& shard,
                     TrainingHyperparameters hyper, Backend* backend)
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
  // torchtitan's op-level selective activation checkpointing recomputes single GEMMs of the
  // layer (wk, wo, w3) that the executor's layer math does not split out: simulated only.
  if (sc.training.recompute_granularity == RecomputeGranularity::kSelective &&
      sc.training.selective_ac_option == SelectiveAcOption::kOp) {
    unsupported("training.selective_ac_option: op");
  }
  // Megatron-LM's pipeline scatter/gather (1/TP of each p2p tensor, then a TP all-gather) is
  // modelled by the simulator only; the executor sends whole tensors.
  if (pipeline_scatter_gather(sc.parallel)) {
    unsupported("parallelism.scatter_gather_tensors_in_pipeline");
  }
  // CPU offload (training.optimizer_cpu_offload, training.cpu_offloading): on the cpu backend the
  // host's memory is the device's, so there is nothing to offload to; no backend copies state
  // or activations over a host link yet. Refused by name, never run without the offload.
  for (const auto& [on, key] : {std::pair{sc.training.optimizer_cpu_offload,
                                          "training.optimizer_cpu_offload"},
                                std::pair{sc.training.cpu_offloading, "training.cpu_offloading"}}) {
    if (!on) continue;
    if (backend_.name() == "cpu") {
      throw UnsupportedError("scenario " + sc.name + ": " + key +
                             " is refused by the cpu backend: its device memory is the host's "
                             "memory, there is no host to offload to (set " + key +
                             ": false; offload is modelled by simulate and memory)");
    }
    unsupported(key);
  }
  // Megatron-FSDP: ZeRO-1 (optim, or no_shard with the distributed optimizer), ZeRO-2
  // (optim_grads: each bucket's reduce-scatter after every micro-batch's backward, only this
  // rank's reduced pieces kept) and ZeRO-3 (optim_grads_params: and each transformer layer's
  // parameters all-gathered before its forward and its backward, only this rank's pieces kept
  // between uses), with TP, SP, CP, PP (every schedule) and MoE (expert buckets over
  // expert-DP), and HSDP (sharded inside each of num_distributed_optimizer_instances groups, the
  // gradient pieces all-reduced across them). training.reshard_after_forward false and
  // training.fsdp_prefetch_depth run as the Program lowers them: no backward gathers (the
  // layer's parameters still whole from its forward), gathers issued N layers ahead; under PP
  // the units gathered and the gradients reduce-scattered once per step
  // (core/fsdp_gather_once.hpp), the earlier micro-batches' gradients accumulating whole in the
  // buffer as without sharding (a series of one reduce-scatter).
  zero_stage_ = sc.training.zero_stage();
  // Every pipeline schedule the executor walks: the Program's op order, with its model chunks in
  // the Program's placement (core/schedule.hpp virtual_stage_of: interleaved, or the V of zb-v
  // and dualpipev, whose turn on rank p - 1 hands the activation and its gradient over between
  // the rank's two chunks without a transfer). The zero-bubble schedules' B steps run the input
  // gradients and their W steps the wgrad GEMMs later (exec/gpt_model_layer.cpp and
  // gpt_model_moe.cpp keep their inputs until then: the SP shards W all-gathers again, the
  // gathered output gradients, the routed experts' rows). DualPipe's two directions: rank r's
  // chunk 0 is stage r of the forward one and chunk 1 stage p - 1 - r of the reverse one (two
  // parameter copies, exec/model_shard.hpp), the embedding and the loss run where
  // core/schedule.hpp takes_embedding / computes_loss say (both on ranks 0 and p - 1), and the
  // copies' gradients are all-reduced over the mirror pair (Role kMirrorGrads). A schedule added
  // to core/ is refused here by name until the executor runs it.
  switch (sc.parallel.pipeline_schedule) {
    case PipelineScheduleKind::kGPipe:
    case PipelineScheduleKind::k1F1B:
    case PipelineScheduleKind::kZbH1:
    case PipelineScheduleKind::kZbH2:
    case PipelineScheduleKind::kZbV:
    case PipelineScheduleKind::kDualPipeV:
    case PipelineScheduleKind::kDualPipe:
      break;
    default:
      throw UnsupportedError("scenario " + sc.name + ": parallelism.pipeline_schedule is " +
                             std::string(to_string(sc.parallel.pipeline_schedule)) + "; the " +
                             backend_.name() + " executor runs gpipe, 1f1b, zb-h1, zb-h2, zb-v, "
                             "dualpipev and dualpipe");
  }
  if (sc.parallel.context_parallel_size > 1 &&
      sc.training.attention_backend == AttentionBackend::kFused) {
    throw UnsupportedError("scenario " + sc.name + ": training.attention_backend is fused, which " +
                           "the executor runs without context parallelism " +
                           "(parallelism.context_parallel_size 1); ring attention runs with " +
                           "attention_backend flash");
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
  if (sc.training.precision == Precision::kBf16 && sc.model.is_moe()) {
    unsupported("training.precision bf16 with MoE (the experts' grouped GEMMs have no bf16 "
                "path in the executor; use precision: fp32)");
  }
  // The attention core's products in the training's arithmetic (exec/linear.hpp).
  set_matmul_arithmetic(backend_, sc.training);
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
  // CP ranks of a replica hold the same weights): member dp_cp_index_ of dp_cp_size_. HSDP
  // (num_distributed_optimizer_instances R > 1): over the rank's sharding group (DP x CP / R
  // consecutive members), the R groups holding the same pieces (replicas).
  dense_group_ = sc.training.num_distributed_optimizer_instances > 1 ? GroupKind::kDpShard
                                                                     : GroupKind::kDpCp;
  const std::vector<int64_t> dp_cp = comm_.layout().group(dense_group_, rp_->rank);
  dp_cp_size_ = static_cast<int64_t>(dp_cp.size());
  dp_cp_index_ = std::find(dp_cp.begin(), dp_cp.end(), rp_->rank) - dp_cp.begin();
  if (sc.training.num_distributed_optimizer_instances > 1) {
    const std::vector<int64_t> replicas = comm_.layout().group(GroupKind::kDpReplica, rp_->rank);
    replica_index_ = std::find(replicas.begin(), replicas.end(), rp_->rank) - replicas.begin();
  }
  RankCoord zero_coord = coord_;
  zero_coord.dp = dp_cp_index_;
  model_.emplace(prog_, *rp_, shard_, backend_, hyper_);
  check_tied_head_order();
  optimizer_.emplace(shard_, backend_, zero_coord, dp_cp_size_,
                     sc.training.use_distributed_optimizer, hyper_, replica_index_);
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
  // ZeRO-2/3: each bucket's reduce-scatters of one iteration (one per micro-batch) form a
  // series whose reduced pieces add up in one accumulator.
  if (zero_stage_ >= 2) {
    std::map<std::tuple<int64_t, GroupKind, std::vector<int32_t>>, size_t> series_of;
    grad_series_.assign(rp_->ops.size(), kNoSeries);
    for (const Op& op : rp_->ops) {
      if (op.role != Role::kGradBucket || op.collective != CollectiveKind::kReduceScatter) continue;
      auto [it, fresh] = series_of.try_emplace(
          std::make_tuple(op.model_chunk, op.group,
                          std::vector<int32_t>(op.bucket_layers.begin(), op.bucket_layers.end())),
          grad_acc_.size());
      if (fresh) grad_acc_.emplace_back();
      grad_series_[op.id] = it->second;
      ++grad_acc_[it->second].rounds;
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

void Executor::Impl::check_tied_head_order() const {
  // The LM head in another chunk than the word embedding it reads (the V placement's rank 0,
  // DualPipe's ranks 0 and p - 1) accumulates its weight gradient into that chunk's embedding,
  // which the embedding chunk's gradient buckets reduce over DP. The head's last backward must
  // come before the last of those.
  if (shard_.head_has_own_weight()) return;
  int64_t head_chunk = -1, emb_chunk = -1;
  for (int64_t c = 0; c < g().v; ++c) {
    if (model_->computes_loss(c)) head_chunk = c;
    if (model_->takes_embedding(c)) emb_chunk = c;
  }
  // Not on this rank, or in the chunk of the embedding (PP 1).
  if (head_chunk < 0 || emb_chunk < 0 || head_chunk == emb_chunk) return;
  std::optional<size_t> last_head, last_bucket;
  for (size_t i = 0; i < rp_->ops.size(); ++i) {
    const Op& op = rp_->ops[i];
    const bool head = op.model_chunk == head_chunk && op.phase != Phase::kForward &&
                      std::find(op.kernel_roles.begin(), op.kernel_roles.end(), Role::kLmHead) !=
                          op.kernel_roles.end();
    if (head) last_head = i;
    if (op.role == Role::kGradBucket && op.model_chunk == emb_chunk &&
        std::find(op.bucket_layers.begin(), op.bucket_layers.end(), -2) !=
            op.bucket_layers.end()) {
      last_bucket = i;
    }
  }
  if (last_head && last_bucket && *last_bucket < *last_head) {
    unexpected_program("the LM head's last backward (op " + std::to_string(*last_head) +
                       ", model chunk " + std::to_string(head_chunk) +
                       ") follows the DP reduce of the word embedding it shares (op " +
                       std::to_string(*last_bucket) + ")");
  }
}

IterationResult Executor::Impl::train(int64_t iteration, const MicroBatchSource& data) {
  begin(iteration, data, /*training=*/true);
  for (const Op& op : rp_->ops) execute(op);
  finish();
  IterationResult r = report();
  r.grad_norm = step_.grad_norm;
  r.learning_rate = step_.learning_rate;
  return r;
}

IterationResult Executor::Impl::evaluate(const MicroBatchSource& data) {
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

void Executor::Impl::synchronize_parameters() {
  if (!prog_.scenario.training.use_distributed_optimizer ||
      !prog_.scenario.training.overlap_param_gather) {
    return;
  }
  inflight_.clear();
  inflight_.resize(rp_->ops.size());
  for (const Op& op : rp_->ops) {
    // ZeRO-3's FSDP units are gathered by the forward that uses them (and for a checkpoint by
    // gather_sharded_state), not here.
    if (op.role != Role::kParamBucket || fsdp_unit(op)) continue;
    issue_s_ = now_s();
    param_bucket(op);
  }
  finish();
  spans_.clear();
}

void Executor::Impl::begin(int64_t iteration, const MicroBatchSource& data, bool training) {
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
  for (GradSeries& s : grad_acc_) {
    s.done = 0;
    s.acc.reset();
    s.last_issued.reset();
  }
}

void Executor::Impl::finish() {
  for (uint32_t i = 0; i < inflight_.size(); ++i) complete(i);
  resolve_marks();
}

void Executor::Impl::resolve_marks() {
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

IterationResult Executor::Impl::report() {
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

void Executor::Impl::execute(const Op& op) {
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
    case OpKind::kHost:  // refused with CPU offload in the constructor
      throw UnsupportedError("executor: host op " + prog_.label(op) + " (CPU offload)");
  }
}

void Executor::Impl::run_kernel(const Op& op, const std::string& name, Role role, int64_t expert) {
  switch (role) {
    case Role::kGradNorm:
      sum_sq_ = optimizer_->local_sum_of_squares(grad_norm_group_ == GroupKind::kWorld);
      return;
    case Role::kZeroGradBuffer: optimizer_->zero_grad_buffer(); return;
    case Role::kGradClipScale: optimizer_->clip(sum_sq_, iteration_); return;
    case Role::kOptimizerStep:
      step_ = optimizer_->step(sum_sq_, iteration_);
      // ZeRO-3: between iterations a rank keeps only its pieces of the layers' parameters.
      if (zero_stage_ >= 3) reshard_layers();
      return;
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

void Executor::Impl::complete(uint32_t id) {
  auto& slot = inflight_[id];
  if (!slot) return;
  slot->request->wait();
  if (slot->on_complete) slot->on_complete();
  spans_.push_back({id, slot->start_s, now_s(), {}});
  slot.reset();
}

InFlight& Executor::Impl::start(const Op& op, InFlight f) {
  f.start_s = issue_s_;
  inflight_[op.id] = std::move(f);
  return *inflight_[op.id];
}

[[noreturn]] void Executor::Impl::unexpected_program(const std::string& what) const {
  throw InvalidArgument("executor: rank " + std::to_string(rp_->rank) + ": " + what);
}

[[noreturn]] void Executor::Impl::unexpected(const Op& op, const std::string& what) const {
  throw InvalidArgument("executor: rank " + std::to_string(rp_->rank) + " op " +
                        std::to_string(op.id) + " (" + prog_.label(op) + "): " + what);
}

void Executor::Impl::issue_p2p(const Op& op) {
  const PipelineTransfer t = read_pipeline_tag(op.tag, g().p * g().v);
  const bool backward = t.pass == Pass::kBackward;
  const int64_t mb = t.micro_batch;
  const int64_t my_vs = op.kind == OpKind::kSend ? t.sender_vstage : t.receiver_vstage();
  const int64_t chunk = model_->chunk_of_vstage(my_vs);  // the Program's placement
  if (chunk < 0) unexpected(op, "virtual stage " + std::to_string(my_vs) + " is not on this rank");
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

void Executor::gather_sharded_state() { impl_->gather_sharded_state(); }

}  // namespace traintwin::exec
