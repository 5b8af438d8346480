// One rank's lowering (build_program(), core/program.cpp): RankLowering walks the rank's
// pipeline schedule (core/schedule.hpp) and issues its ops, kernels and dependencies into a
// RankProgram. Its members live by concept: op creation, the pipeline and one schedule step in
// core/rank_lowering.cpp; the transformer layer, attention, embedding and LM head in
// core/rank_lowering_layer.cpp; the MoE layer in core/rank_lowering_moe.cpp; DP buckets, the
// gradient sync and the optimizer step in core/rank_lowering_optimizer.cpp; CPU offload's host ops
// in core/rank_lowering_offload.cpp. The kernels it issues
// come from core/lowering_kernels.hpp.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/fsdp_gather_once.hpp"
#include "core/lowering_kernels.hpp"
#include "core/pipeline_scatter_gather.hpp"
#include "core/program.hpp"
#include "core/schedule.hpp"

namespace traintwin::lowering {

/// A send or recv of one p2p batch.
struct P2P {
  bool send;
  int64_t peer;
  int64_t tag;
  int64_t bytes;
};

/// One DP gradient bucket of a model chunk: parameters and the layer whose backward completes it
/// (layer -1: the LM head copy; -2: the embeddings).
struct Bucket {
  int64_t params = 0;
  int64_t gemm_weights = 0;  // of which transformer-layer GEMM weights (FP8 with fp8_param_gather)
  int64_t trigger = 0;
  std::vector<int64_t> layers;  // layers in the bucket (embedding -2, head -1)
  GroupKind group = GroupKind::kDpCp;  // kEdp: the routed experts' parameters of the layers
  uint32_t grad_op = kNoOp;
  uint32_t param_gather_op = kNoOp;
};

/// Lowers one rank's schedule to ops.
class RankLowering {
 public:
  /// `order`: the rank's schedule steps (core/pipeline_order.hpp), or null for build_schedule's.
  RankLowering(const Scenario& sc, const RankLayout& layout, KernelTable& table, RankProgram& out,
               StepScope scope, const std::vector<ScheduleStep>* order = nullptr)
      : sc_(sc), layout_(layout), table_(table), out_(out), scope_(scope), order_(order), d_(sc),
        k_{d_} {}

  void run() {
    const RankCoord c = out_.coord;
    out_.schedule = order_ != nullptr
                        ? *order_
                        : build_schedule(sc_.parallel.pipeline_schedule, d_.p, c.pp, d_.m, d_.v);
    split_ = splits_backward(sc_.parallel.pipeline_schedule);
    plan_buckets();
    if (sc_.training.use_distributed_optimizer && sc_.training.overlap_param_gather) {
      issue_param_gathers(Phase::kParamSync);
    }
    zero_grad_buffer();
    lower_schedule();
    if (!sc_.training.overlap_grad_reduce && !reduces_every_micro_batch()) {
      for (size_t chunk = 0; chunk < buckets_.size(); ++chunk) {
        for (auto& bucket : buckets_[chunk]) issue_grad_reduce(static_cast<int64_t>(chunk), bucket);
      }
    }
    finalize_and_step();
    if (sc_.training.use_distributed_optimizer && !sc_.training.overlap_param_gather) {
      issue_param_gathers(Phase::kParamSync);
    }
  }

 private:
  // ---- op creation ---------------------------------------------------------------------------

  uint32_t new_op(OpKind kind, Stream stream, const char* what);

  void add_dep(uint32_t op, uint32_t dep);

  /// Appends a kernel to the open compute op, opening one (after the previous compute op and
  /// every pending wait) if none is open.
  /// `target`: the local expert the kernel serves (Op::kernel_targets), -1 for none.
  void kernel(const Kernel& kern, const char* what, int32_t target = -1);

  /// The role of the kernels and communication ops that follow.
  void role(Role r) { role_ = r; }

  void close_compute() { open_compute_ = kNoOp; }

  /// Sets the context of the ops that follow; a change of layer or phase starts a new op.
  void context(Phase phase, int64_t mb, int64_t chunk, int64_t layer);

  /// Issues a collective after the last compute op (its producer) and the previous op on its
  /// stream. Returns kNoOp when the group has one member (nothing to communicate).
  uint32_t collective(CollectiveKind kind, GroupKind group, Stream stream, int64_t bytes,
                      const char* what);

  /// The next compute op waits for `op` (no-op for kNoOp).
  void wait(uint32_t op);

  /// A blocking TP collective on the critical path.
  void tp_blocking(CollectiveKind kind, int64_t bytes, const char* what);

  /// Megatron's p2p call: every op of the batch follows the last compute op, the ops progress
  /// together, and the next compute op waits for all of them — under a schedule that splits the
  /// backward (zero bubble) for its recvs only: the sends complete on their own (the zero-bubble
  /// runtime posts them asynchronously; a blocking send would hold each extra warm-up forward of
  /// ZB-H2 until the next stage's B).
  /// Under scatter/gather (scatter_gathers()), each received chunk is all-gathered over TP
  /// (gather_split_1d_tensor, blocking) after the batch completes, and the compute waits for the
  /// gathers.
  void p2p_batch(const std::vector<P2P>& batch);

  // ---- pipeline geometry ---------------------------------------------------------------------

  int64_t num_vstages() const { return d_.p * d_.v; }
  /// This rank's chunk `chunk` as a virtual stage (core/schedule.hpp virtual_stage_of: chunk x p
  /// + rank, ZB-V's V placement under zb-v).
  int64_t vstage(int64_t chunk) const {
    return virtual_stage_of(sc_.parallel.pipeline_schedule, d_.p, out_.coord.pp, chunk);
  }
  /// The transformer layers of this rank's model chunk `chunk` (uneven under an uneven split).
  const ChunkLayers& layers_of(int64_t chunk) const;
  /// Whether virtual stage `vs` runs the embedding / the final norm, LM head and loss
  /// (core/schedule.hpp takes_embedding, computes_loss: the first and last virtual stage, and
  /// under DualPipe those of each direction).
  bool takes_embedding_vs(int64_t vs) const {
    return takes_embedding(sc_.parallel.pipeline_schedule, d_.p, d_.v, vs);
  }
  bool computes_loss_vs(int64_t vs) const {
    return computes_loss(sc_.parallel.pipeline_schedule, d_.p, d_.v, vs);
  }
  /// Whether one of this rank's model chunks runs the embedding (a tied LM head on such a rank
  /// is the embedding's weight, not a copy).
  bool rank_takes_embedding() const {
    for (int64_t c = 0; c < d_.v; ++c) {
      if (takes_embedding_vs(vstage(c))) return true;
    }
    return false;
  }
  int64_t rank_of_vstage(int64_t vs) const;
  /// The pipeline rank (coordinate pp) of virtual stage `vs` (core/schedule.hpp).
  int64_t rank_of_vstage_pp(int64_t vs) const {
    return rank_of_virtual_stage(sc_.parallel.pipeline_schedule, d_.p, vs);
  }
  /// parallelism.scatter_gather_tensors_in_pipeline applies (core/pipeline_scatter_gather.hpp):
  /// Megatron-LM's p2p_communication._communicate splits the [s, b, h] tensor into TP 1-D chunks
  /// and all-gathers them after the receive.
  bool scatter_gathers() const { return pipeline_scatter_gather(sc_.parallel); }
  /// Bytes of one pipeline send or recv: the stage's [s, b, h] output (or its gradient), [s/TP,
  /// b, h] with SP, 1/TP of it under scatter/gather.
  int64_t p2p_bytes() const {
    const int64_t bytes = d_.tokens_sp * d_.h * d_.dsize;
    return scatter_gathers() ? bytes / d_.t : bytes;
  }
  /// A transfer of this rank (core/schedule.hpp's rule) as the recv or send the lowering emits:
  /// the peer is the rank of the other virtual stage.
  P2P p2p(const PipelineTransfer& t, bool send) const;
  /// The recv of a step's input, if it has one (core/schedule.hpp rank_step_input: none when
  /// the sending stage is on this rank, ZB-V's stages p - 1 and p on rank p - 1).
  std::optional<P2P> recv_input(const ScheduleStep& st) const;
  /// The send of a step's output, if it has one.
  std::optional<P2P> send_output(const ScheduleStep& st) const;

  static void append(std::vector<P2P>& batch, const std::optional<P2P>& x);

  /// Sets the context for the p2p ops around a step (phase and micro-batch of the step).
  void p2p_context(const ScheduleStep& st);

  /// Emits steps and p2p batches in the order Megatron-LM's schedules call them.
  void lower_schedule();

  static std::vector<P2P> to_batch(const std::optional<P2P>& x);

  // ---- one schedule step ---------------------------------------------------------------------

  void lower_step(const ScheduleStep& st);

  /// A W step of a schedule that splits the backward (splits_backward()): the weight-gradient
  /// GEMMs of the chunk's LM head, layers (descending) and the embedding's backward (which is
  /// all weight gradient), with the SP all-gather of each column-parallel linear's saved input
  /// before its wgrad; then, for the chunk's last W, the DP bucket triggers. Its first compute op
  /// follows the previous compute op and the pending TP waits but not the pending p2p batches,
  /// which stay pending for the next F or B step (W fills the wait for them).
  void lower_weight_grad(const ScheduleStep& st);

  /// Which part of a backward the layer helpers issue: all of it (every schedule but the
  /// zero-bubble ones), the input gradient only (B), or the weight gradient only (W). In kInput
  /// the wgrad kernels are left out; in kWeight only the wgrad kernels (gemm_wgrad,
  /// grouped_gemm_wgrad) and the collectives that feed them (allow_w_collective_) are issued.
  /// kWeightInputs is a W's first pass over a layer: only the SP all-gathers of the
  /// column-parallel inputs, queued in w_gathers_ for kWeight's wgrads (so that a gather runs
  /// beside the wgrad GEMM before it instead of ahead of its own).
  enum class BackwardPart { kAll, kInput, kWeight, kWeightInputs };

  /// A layer's (or the LM head's) W: kWeightInputs then kWeight over `backward`.
  template <typename F>
  void weight_grad_of(F&& backward) {
    w_gathers_.clear();
    next_w_gather_ = 0;
    part_ = BackwardPart::kWeightInputs;
    backward();
    part_ = BackwardPart::kWeight;
    backward();
    part_ = BackwardPart::kAll;
  }

  // ---- layers --------------------------------------------------------------------------------

  CollectiveKind tp_reduce() const;
  int64_t act_bytes(int64_t width) const { return d_.tokens * width * d_.dsize; }

  /// A GEMM of the transformer layers (FP8 when training.fp8_format) or of the LM head (16-bit).
  Kernel gemm_kernel(const char* name, int64_t m, int64_t n, int64_t k, bool fp8) const;

  /// Where a GEMM operand's FP8 cast happens: in its own kernel, or fused into the kernel that
  /// produces it (Transformer Engine: the norm of LayerNormLinear writes the QKV and FC1 inputs
  /// in FP8, the activation of LayerNormMLP writes FC2's input and, in backward, FC1's output
  /// gradient in FP8, with their transposes: the same bytes as the 16-bit output).
  enum class Cast { kSeparate, kFused };

  /// FP8: the cast (and transpose, for the backward's other operand) of a GEMM operand of n
  /// elements. Tensorwise (current) scaling needs the tensor's amax before the cast, so it never
  /// fuses: an amax pass and a cast kernel for every operand.
  void fp8_cast(int64_t n, const char* what, Cast where);

  /// FP8 with the delayed recipe: Transformer Engine's amax reduction of the current model
  /// chunk's fp8_autocast region, a blocking all-reduce (MAX) of one fp32 amax per FP8 tensor
  /// over the amax reduction group (GroupKind::kTpDpCp). Megatron-Core opens one region per
  /// TransformerBlock forward (one per model chunk and micro-batch); TE reduces the forward
  /// tensors' amaxes (input, weight, output of each GEMM: 3) when the region exits and the
  /// backward ones (output and input gradients: 2) in the backward of the region's first module,
  /// the last to run (transformer_engine/pytorch fp8.py, reduce_and_update_fp8_tensors). GEMMs of
  /// a layer: QKV, projection, FC1, FC2; in an MoE layer FC1 and FC2 per local expert (and the
  /// shared expert's) instead of the dense MLP's. A chunk without layers reduces nothing. The op
  /// belongs to the step (micro-batch `mb`, phase kForward or kBackward) whatever context the
  /// ops before it left (a gradient bucket's reduce sets kGradSync).
  void fp8_amax_reduction(bool forward, int64_t mb, int64_t chunk);

  /// All-gather (SP) + GEMM, chunked into TP pieces with tp_comm_overlap: GEMM piece i waits
  /// for gather piece i only. FP8 (`fp8`): the input is cast first.
  /// FP8 (`fp8`): the input, a norm's output, is cast by the norm (Cast::kFused).
  void gathered_gemm(int64_t n, int64_t k, const char* what, bool fp8 = false);

  /// GEMM + TP all-reduce (reduce-scatter with SP), chunked with tp_comm_overlap.
  void gemm_reduced(int64_t n, int64_t k, const char* what, bool fp8 = false,
                    Cast cast = Cast::kSeparate);

  bool fp8() const { return sc_.training.fp8(); }

  /// The attention core between QKV and the projection, forward or backward, by CP and
  /// cp_comm_type (see build_program()). RoPE on Q and K before it (after it in backward).
  void attention_core(bool backward);

  /// A blocking CP collective on the critical path (cp-comm stream).
  void cp_blocking(CollectiveKind kind, int64_t bytes, const char* what);

  void layer_forward();

  /// Backward of a row-parallel linear {tokens, n, k}: (SP) all-gather of the output gradient,
  /// then dgrad and wgrad GEMMs (FP8: the output gradient cast first).
  void row_parallel_backward(int64_t n, int64_t k, const char* what, bool fp8 = false);

  /// Backward of a column-parallel linear {tokens, n, k} as Megatron's
  /// LinearWithGradAccumulationAndAsyncCommunication: (SP) all-gather of the saved input issued
  /// first, dgrad GEMM, async all-reduce (reduce-scatter with SP) of the input gradient
  /// overlapped with the wgrad GEMM, then wait. Split (part_): B is the dgrad GEMM and the
  /// all-reduce (reduce-scatter) of its output, which the next kernel waits for (no wgrad to
  /// hide it behind); W is the SP all-gather of the saved input (issued at the start of the
  /// layer's W, kWeightInputs, so that it runs beside the wgrad GEMM before) and the wgrad GEMM.
  void column_parallel_backward(int64_t n, int64_t k, const char* what, bool fp8 = false,
                                Cast cast = Cast::kSeparate);

  /// The forward ops torchtitan's op-level selective activation checkpointing
  /// (training.selective_ac_option op) recomputes at the start of a layer's backward: input norm,
  /// the wk GEMM (tokens x gd x h), RoPE, the wo GEMM, the residual add, the post-attention norm,
  /// the w3 GEMM (tokens x ffn x h) and the SwiGLU product; TP = 1 (the rules refuse more).
  void op_sac_recompute();

  void layer_backward(int64_t mb, int64_t chunk, int64_t layer);

  // ---- embedding and LM head -----------------------------------------------------------------

  void embedding_forward();

  void embedding_backward();

  void head_forward();

  void head_backward();

  // ---- MoE layer (see build_program() for the op order) ------------------------------------

  bool alltoall() const;
  bool aux_loss() const;
  /// Bytes of `rows` hidden-state rows.
  int64_t row_bytes(int64_t rows) const { return rows * d_.h * d_.dsize; }
  /// Rows the alltoall dispatcher sends (and receives) over EP: per_expert copies for each of
  /// the E experts (the busiest rank's share).
  int64_t a2a_rows() const { return d_.experts * d_.per_expert; }
  /// The hidden states of the ETP x EP group the allgather dispatcher gathers.
  int64_t gathered_rows() const { return d_.etp * d_.ep * d_.moe_tokens; }
  /// Rows of the local experts' GEMMs over all local experts.
  int64_t local_expert_rows() const { return d_.local_experts * d_.expert_rows; }

  /// A blocking MoE dispatch/combine collective on the ep-comm stream.
  void ep_blocking(CollectiveKind kind, GroupKind group, int64_t bytes, const char* what);

  /// The local experts' GEMM {rows per expert, n, k} (`variant` gemm_fwd/_dgrad/_wgrad): one
  /// grouped GEMM with moe_grouped_gemm, else one GEMM per local expert (Megatron's
  /// SequentialMLP); tp = ETP.
  void expert_gemm(const char* variant, int64_t n, int64_t k, bool fp8);

  /// FP8: Transformer Engine's cast-transpose of the experts' 16-bit GEMM input of `columns`
  /// per row, one per local expert (SequentialMLP) or one over all (moe_grouped_gemm).
  void expert_fp8_cast(int64_t columns);

  /// SequentialMLP (no moe_grouped_gemm) with more than one local expert: torch.cat of the
  /// local experts' rows (moe_chunk_cat over all of them).
  void sequential_mlp_cat();

  /// The alltoall dispatcher with more than one local expert: Megatron-Core's sort of the
  /// received rows by local expert (sort_chunks_by_idxs; moe_chunk_cat over all of them).
  void sort_chunks_by_local_expert(const char* what);

  /// The router and its aux loss on the T local rows.
  void router_forward();

  /// The routed experts' forward on their dispatched rows.
  void experts_forward(bool f8);

  void experts_backward(bool f8);

  /// The shared expert: a dense MLP of width moe_shared_expert_intermediate_size over TP (with
  /// its SP all-gather / reduce-scatter), on the same input as the router.
  void shared_expert_forward(bool f8);

  void shared_expert_backward(bool f8);

  /// The MoE MLP of one layer, after the post-attention norm (see build_program()).
  void moe_forward();

  /// Backward of moe_forward(), mirrored.
  void moe_backward();

  // ---- CPU offload (core/rank_lowering_offload.cpp) ------------------------------------------

  /// An OpKind::kHost op on Stream::kOffload after the last compute op and the stream's previous
  /// op (FIFO), with the current role and context.
  uint32_t host_op(HostOp h, int64_t bytes, const char* what);

  /// training.cpu_offloading offloads `layer`'s activations (one of the first
  /// cpu_offloading_num_layers; the rules keep PP = 1, so layer indices are the stage's).
  bool offloads_layer(int64_t layer) const {
    return sc_.training.cpu_offloading && layer < sc_.training.cpu_offloading_num_layers;
  }
  /// Activation sets Transformer Engine lets the GPU hold: num_layers - cpu_offloading_num_layers.
  int64_t offload_window() const {
    return sc_.model.num_layers - sc_.training.cpu_offloading_num_layers;
  }
  /// Activation offload (Transformer Engine's default scheduling, at most offload_window() sets
  /// on the GPU): before `layer`'s forward, wait for the D2H copy of layer - offload_window()
  /// (its set must have left); after it, the D2H copy of `layer`'s saved activations
  /// (offloaded_layer_activation_bytes(), core/memory.hpp) on the offload stream.
  void offload_before_forward(int64_t layer);
  void offload_after_forward(int64_t layer);
  /// Before `layer`'s backward, wait for its reload; after it (its set freed), the H2D reload of
  /// layer - offload_window(), the next offloaded layer whose set fits.
  void reload_before_backward(int64_t layer);
  void reload_after_backward(int64_t layer);

  /// training.optimizer_cpu_offload (Megatron-Core's HybridDeviceOptimizer.step): of the `local`
  /// parameters this rank's optimizer steps, the offloaded n = round(f local) go D2H (fp32
  /// gradients, 4 n bytes), through the host CPU's AdamW (28 n bytes) and back H2D (the
  /// updated parameters in the parameter dtype) on the offload stream, after the gradient clip
  /// and beside the GPU's AdamW of the other local - n; returns local - n. The parameter
  /// gathers after the step wait for the H2D copy (optimizer_h2d_).
  int64_t offload_optimizer(int64_t local);

  // ---- DP buckets, finalize, optimizer -------------------------------------------------------

  /// Splits each chunk's parameters, in backward order, into Megatron DDP buckets: the dense
  /// parameters (reduced over DP x CP) and, for MoE layers, the local experts' parameters in
  /// buckets of their own (reduced over the expert-data-parallel group), as Megatron-Core's
  /// DistributedDataParallel keeps expert-parallel parameters in separate buffers with the same
  /// bucket size.
  void plan_buckets();

  /// MoE layers over this rank's model chunks.
  int64_t moe_layers_on_rank() const;

  /// Called after the last micro-batch's backward of `layer` (-1 head, -2 embedding) of a chunk
  /// (its last W when the schedule splits the backward: the gradients are complete then), and
  /// after every micro-batch's under ZeRO-2/3: with overlap_grad_reduce (always under ZeRO-2/3),
  /// starts the reduce of the buckets this completes.
  void bucket_done(int64_t chunk, int64_t layer);

  /// ZeRO-2/3 (Megatron-FSDP optim_grads, optim_grads_params): a rank keeps only its shard of
  /// the gradients, so each micro-batch's gradients are reduce-scattered as their bucket
  /// completes (Rajbhandari et al. 2020, section 5.2), not accumulated for one reduce at the end;
  /// but FSDP2 under pipeline parallelism (core/fsdp_gather_once.hpp
  /// fsdp_grads_reduced_once_per_step) accumulates them unsharded and reduce-scatters them in
  /// the chunk's last backward only, as without sharding.
  bool reduces_every_micro_batch() const {
    return sc_.training.zero_stage() >= 2 && !fsdp_grads_reduced_once_per_step(sc_);
  }

  /// ZeRO-3: before transformer layer `layer` of `chunk` runs (forward, or backward with its
  /// recomputation), its parameters are all-gathered over the sharding group (DP x CP, or its
  /// HSDP block, dense_shard_group()) (its routed experts' over expert DP), unless a prefetch
  /// issued them already, and those of `ahead` (the next training.fsdp_prefetch_depth layers of
  /// this pass inside the chunk, in pass order; fewer at the chunk's end) are prefetched:
  /// Megatron-FSDP's unit is one transformer layer, gathered again for every micro-batch and
  /// pass (parameters resharded after use; the backward gathers none with
  /// reshard_after_forward false, and under PP then only the chunk's first forward gathers,
  /// core/fsdp_gather_once.hpp). Waits for the layer's gathers.
  void fsdp_gather(int64_t chunk, int64_t layer, const std::vector<int64_t>& ahead);
  /// The layers whose gathers fsdp_gather() prefetches while `layer` runs: up to
  /// training.fsdp_prefetch_depth layers after it (forward, `step` +1) or before it (backward,
  /// `step` -1) inside [first_layer, last_layer].
  std::vector<int64_t> fsdp_ahead(int64_t layer, int64_t step, int64_t first_layer,
                                  int64_t last_layer) const;
  /// Issues the gathers of one FSDP unit (layer) on the DP stream; returns their ops.
  std::vector<uint32_t> issue_fsdp_gather(int64_t layer);

  /// The gradient reduce of one bucket on the DP stream: an all-reduce over DP x CP without the
  /// distributed optimizer, else a reduce-scatter over the sharding group (kDpShard: DP x CP, or
  /// DP x CP / R under HSDP). Under HSDP (R > 1), on the micro-batch that completes the
  /// gradients (`last_micro_batch`), the shard's all-reduce across the R replicas (kDpReplica,
  /// ceil(params / shard size) gradients) follows it on the same stream. Expert buckets keep
  /// expert DP.
  void issue_grad_reduce(int64_t chunk, Bucket& bucket, bool last_micro_batch = true);
  /// The group dense parameters are sharded over: kDpShard under HSDP, else kDpCp.
  GroupKind dense_shard_group() const {
    return sc_.training.num_distributed_optimizer_instances > 1 ? GroupKind::kDpShard
                                                                : GroupKind::kDpCp;
  }

  void issue_param_gathers(Phase phase);

  /// With overlap_param_gather, the first forward through `layer` waits for its buckets' gathers.
  void wait_param_gather(int64_t chunk, int64_t layer);

  /// Megatron's train_step start: model_chunk.zero_grad_buffer() + optimizer.zero_grad(), a memset
  /// of the whole local gradient buffer (every parameter this rank holds, also with the
  /// distributed optimizer), as the first compute op (after the overlapped parameter gathers are
  /// issued, which it does not delay).
  void zero_grad_buffer();

  /// Megatron's finalize_model_grads (DP grad sync done, then the SP LayerNorm-gradient
  /// all-reduce over TP, then the tied-embedding all-reduce over the first and last stage),
  /// then clip-by-global-norm and the optimizer step.
  void finalize_and_step();

  const Scenario& sc_;
  const RankLayout& layout_;
  KernelTable& table_;
  RankProgram& out_;
  StepScope scope_;
  const std::vector<ScheduleStep>* order_;
  Dims d_;
  KernelFactory k_;

  Phase phase_ = Phase::kForward;
  int64_t mb_ = -1, chunk_ = -1, layer_ = -1;
  Role role_ = Role::kNone;
  uint32_t open_compute_ = kNoOp;
  uint32_t last_compute_ = kNoOp;
  std::vector<uint32_t> waits_;
  std::array<uint32_t, kNumStreams> last_on_stream_ = [] {
    std::array<uint32_t, kNumStreams> a{};
    a.fill(kNoOp);
    return a;
  }();
  // CPU offload: per offloaded layer, its activations' D2H copy and H2D reload of the step being
  // lowered; the H2D copy of the offloaded optimizer's parameters (the parameter gathers wait).
  std::vector<uint32_t> offload_d2h_, offload_h2d_;
  uint32_t optimizer_h2d_ = kNoOp;

  std::vector<std::vector<Bucket>> buckets_;  // per model chunk
  // Per model chunk: the bucket index of each layer id, and of each bucket's trigger id (so that
  // the lowering stays linear in layers and micro-batches: no bucket list is rescanned).
  std::vector<std::unordered_map<int64_t, std::vector<size_t>>> bucket_of_layer_;
  std::vector<std::unordered_map<int64_t, std::vector<size_t>>> bucket_of_trigger_;
  std::vector<bool> forwarded_chunk_;
  std::vector<int64_t> last_backward_mb_;
  std::vector<int64_t> last_weight_grad_mb_;  // per chunk: the micro-batch of its last W step
  bool split_ = false;                        // the schedule has W steps (splits_backward())
  BackwardPart part_ = BackwardPart::kAll;
  bool allow_w_collective_ = false;  // kWeight: the next collective feeds a wgrad GEMM
  std::vector<uint32_t> w_gathers_;  // kWeightInputs' gathers, in the order kWeight uses them
  // ZeRO-3: the FSDP units (chunk, layer) gathered ahead of use, with their gather ops.
  std::map<std::pair<int64_t, int64_t>, std::vector<uint32_t>> fsdp_prefetched_;
  size_t next_w_gather_ = 0;
  // Ops before this id were issued up to the end of the last F or B step: a p2p op among them
  // that no kernel consumed (the input of a B with no ops, in a chunk that holds only the
  // embedding) is waited by the W that follows, not held for the next step.
  size_t step_ops_end_ = 0;
  std::vector<uint32_t> grad_syncs_;
};

}  // namespace traintwin::lowering
