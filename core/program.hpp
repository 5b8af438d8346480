// The Program: for every global rank, the ordered ops of one training iteration on streams, with
// explicit dependencies. The executor (exec/) runs it; the simulator (sim/) replays it. An op's
// kernels are identified by KernelKey, the key of the measured cost database.
//
// Execution semantics, shared by both engines:
//  - An op may start once every op in its `deps` has completed. Deps always name earlier ops of
//    the same rank. The builder chains the ops of one stream (each depends on the previous op of
//    its stream), so every stream is FIFO — except the send/recv ops of one p2p batch, which
//    share their deps and progress together, as inside ncclGroupStart/End.
//  - A collective completes when all members of its group have reached it; members issue the
//    collectives of a group in the same order (as NCCL requires). `bytes` is the nccl-tests
//    "size": the whole (unsharded) buffer for all_reduce, all_gather (output) and reduce_scatter
//    (input); for all_to_all the buffer each member sends (= receives); for ring_exchange what
//    each member sends to its successor (= receives from its predecessor).
//  - A send and the recv on `peer` with the same tag form one transfer of `bytes`.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/rank_layout.hpp"
#include "core/scenario.hpp"
#include "core/schedule.hpp"

namespace traintwin {

/// Where an op runs: one compute stream and one stream per kind of communication. kEpComm
/// carries the MoE token dispatch and combine (Role kMoeDispatch / kMoeCombine). kOffload
/// carries the host ops of CPU offload (OpKind::kHost: copies over the GPU's host link and the
/// host CPU's optimizer step), in issue order beside the compute stream.
enum class Stream : uint8_t { kCompute, kTpComm, kCpComm, kPpComm, kDpComm, kEpComm, kOffload };
/// Number of streams (the size of per-stream arrays).
inline constexpr size_t kNumStreams = 7;
/// "compute" | "tp-comm" | "cp-comm" | "pp-comm" | "dp-comm" | "ep-comm" | "offload".
const char* to_string(Stream s);

/// kHost: an op of the GPU's host side (Op::host says which), timed from the topology's
/// gpu.host_link by the timing layer (sim/timed_program.hpp), never by the GPU's cost model.
enum class OpKind : uint8_t { kCompute, kCollective, kSend, kRecv, kHost };
const char* to_string(OpKind k);

/// What an OpKind::kHost op does with its Op::bytes: a copy of them over the host link, device
/// to host or host to device (one direction each; PCIe and NVLink-C2C are full duplex), or the
/// host CPU's AdamW step that reads and writes them (torch.optim.AdamW on the offloaded fp32
/// main parameters, gradients and moments: 28 bytes per parameter, 16 read and 12 written).
enum class HostOp : uint8_t { kCopyD2H, kCopyH2D, kCpuAdamW };
/// "d2h copy" | "h2d copy" | "cpu adamw".
const char* to_string(HostOp h);

/// kRingExchange: every member sends `bytes` to the next member of the group (in group order,
/// cyclically) and receives `bytes` from the previous one, as one batch of NCCL send/recv
/// (ring attention's KV exchange under context parallelism, Megatron-Core cp_comm_type p2p).
enum class CollectiveKind : uint8_t {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kAllToAll,
  kRingExchange
};
/// "all_reduce" | "all_gather" | "reduce_scatter" | "broadcast" | "all_to_all" | "ring_exchange".
const char* to_string(CollectiveKind k);

/// What part of the iteration an op belongs to.
enum class Phase : uint8_t {
  kForward,
  kBackward,
  kRecompute,     ///< forward work redone before a backward (selective or full recomputation)
  kGradSync,      ///< DP gradient reduce, embedding/LayerNorm gradient all-reduce
  kParamSync,     ///< distributed-optimizer parameter all-gather
  kOptimizer,     ///< zero grad buffer (start), grad norm, grad clip scale, AdamW step
  /// The weight-gradient GEMMs (W) of a schedule that places them apart from the input
  /// gradient (B, kBackward): the zero-bubble schedules. Under the other schedules the wgrad
  /// GEMMs stay in kBackward, right after their dgrad.
  kWeightGrad,
};
const char* to_string(Phase p);

/// Which computation of the model an op belongs to: the executor uses it to know which tensors a
/// kernel or communication op reads and writes (the simulator ignores it). A communication op has
/// the role of the computation it serves, e.g. the SP all-gather of the QKV GEMM's input and the
/// backward all-reduce of its input gradient are both kQkv (told apart by phase and collective).
enum class Role : uint8_t {
  kNone,
  // first virtual stage
  kEmbedding,         ///< vocab-parallel word-embedding lookup; its TP reduce
  kEmbeddingDropout,  ///< + position embedding, dropout (on the SP shard)
  // one transformer layer, in forward order
  kInputLayerNorm,
  kQkv,                   ///< column-parallel QKV linear
  kAttentionCore,         ///< causal softmax attention of the local heads
  kAttentionProjection,   ///< row-parallel output projection
  kAttentionResidual,     ///< bias + dropout + residual add after the projection
  kPostAttentionLayerNorm,
  kFc1,                   ///< column-parallel h -> ffn
  kGelu,                  ///< the MLP activation (GeLU, SwiGLU or squared ReLU)
  kFc2,                   ///< row-parallel ffn -> h
  kMlpResidual,           ///< bias + dropout + residual add after FC2
  // one MoE layer's MLP (build_program() gives the op order per dispatcher)
  kRouter,                ///< router GEMM h -> E (replicated over TP), top-k, capacity, aux loss
  kMoePermute,            ///< gather token copies into expert order; backward: scatter-add
  kMoeDispatch,           ///< token dispatch: all-to-all over EP (+ all-gather over ETP), or
                          ///< all-gather over ETP x EP (allgather dispatcher)
  kExpertFc1,             ///< the local experts' FC1, column-parallel over ETP (grouped GEMM)
  kExpertActivation,      ///< the local experts' activation (the model's MLP kind)
  kExpertFc2,             ///< the local experts' FC2, row-parallel over ETP (grouped GEMM)
  kMoeCombine,            ///< the reverse of kMoeDispatch (reduce-scatter over ETP, all-to-all
                          ///< back over EP; or reduce-scatter over ETP x EP)
  kMoeUnpermute,          ///< scatter expert outputs to token order, sum weighted by the probs
  // last virtual stage
  kFinalLayerNorm,
  kLmHead,                ///< LM head (tied to the word embedding), column-parallel over vocab
  kCrossEntropyMax,       ///< vocab-parallel cross-entropy: max of the logits (all-reduce MAX)
  kCrossEntropy,          ///< local sum of exponentials and target logit; backward
  kCrossEntropyTarget,    ///< all-reduce of the target logits
  kCrossEntropySumExp,    ///< all-reduce of the sums of exponentials
  // pipeline, gradient sync, optimizer
  kPipeline,              ///< send/recv of activations or their gradients
  kGradBucket,            ///< DP gradient reduce of one bucket (Op::bucket_layers)
  kParamBucket,           ///< distributed optimizer: parameter all-gather of one bucket
  kLayerNormGrads,        ///< SP: all-reduce over TP of LayerNorm and row-parallel bias grads
  kEmbeddingGrads,        ///< tied word-embedding gradient all-reduce (first and last stage)
  kMirrorGrads,           ///< DualPipe: the two parameter copies' gradient all-reduce
                          ///< (GroupKind::kPpMirror, ranks r and p - 1 - r)
  kGradNorm,              ///< global gradient norm (local sum of squares; its all-reduce)
  kOptimizerStep,         ///< AdamW
  kZeroGradBuffer,        ///< memset of the rank's gradient buffer before the first micro-batch
  kGradAccumulate,        ///< without gradient_accumulation_fusion: main_grad += param.grad of
                          ///< one layer's parameters after its (weight-)gradient backward
  kGradClipScale,         ///< grads *= min(1, clip_grad / (norm + 1e-6)) before the step
  // CPU offload (OpKind::kHost ops)
  kOffloadedOptimizer,    ///< optimizer_cpu_offload: gradients D2H, the CPU AdamW, params H2D
  kActivationOffload,     ///< cpu_offloading: a layer's saved activations D2H / reloaded H2D
};
const char* to_string(Role r);

/// The identity of a kernel: the executor times it under this key and the simulator looks it up.
/// Shapes are listed per kernel name in program.cpp (kernel catalogue), e.g.
/// gemm_fwd {m, n, k}: Y[m,n] = X[m,k] W[k,n]; attention_fwd {b, heads, s, head_dim}.
struct KernelKey {
  std::string name;
  std::vector<int64_t> shape;
  Precision dtype = Precision::kBf16;
  int64_t tp = 1;  ///< tensor-parallel size the kernel runs under
  bool operator==(const KernelKey&) const = default;
  /// e.g. "gemm_fwd[4096,4608,12288] bf16 tp8".
  std::string to_string() const;
};

struct KernelKeyHash {
  size_t operator()(const KernelKey& k) const;
};

/// A kernel with its work: FLOPs executed (GEMM/attention counted as 2 per multiply-add, full
/// s x s attention as in Narayanan et al.; elementwise ops a few per element) and bytes moved
/// to/from device memory (a lower bound: inputs read once, outputs written once).
struct Kernel {
  KernelKey key;
  double flops = 0;
  double bytes = 0;
};

/// One op of one rank's Program.
struct Op {
  uint32_t id = 0;  ///< index in RankProgram::ops
  OpKind kind = OpKind::kCompute;
  Stream stream = Stream::kCompute;
  Phase phase = Phase::kForward;
  int32_t micro_batch = -1;  ///< -1 when not tied to a micro-batch
  int32_t model_chunk = -1;
  int32_t layer = -1;        ///< global transformer layer index, -1 for embedding/head/other
  /// Compute: indices into Program::kernels, run back to back, and the role of each.
  std::vector<uint32_t> kernels;
  std::vector<Role> kernel_roles;
  /// Compute: the local expert each kernel serves (one GEMM per local expert without
  /// moe_grouped_gemm, Megatron's SequentialMLP; -1 for every other kernel), parallel to
  /// `kernels`; empty when no kernel of the op has one.
  std::vector<int32_t> kernel_targets;
  /// Communication: the role of the computation it serves.
  Role role = Role::kNone;
  /// kGradBucket / kParamBucket: the bucket's layers in backward order (global layer index;
  /// -1 = final LayerNorm and the LM-head copy of the last stage, -2 = the embeddings). The
  /// op's group tells which parameters of those layers: GroupKind::kDpCp the dense ones
  /// (attention, norms, dense MLP, router, shared expert, embeddings), GroupKind::kEdp the local
  /// routed experts' weights of MoE layers (Megatron-Core DDP's expert-parallel buffers).
  std::vector<int32_t> bucket_layers;
  /// Collective: kind and group (members: Program::layout.group(group, rank)).
  CollectiveKind collective = CollectiveKind::kAllReduce;
  GroupKind group = GroupKind::kTp;
  /// Collective size (see file comment), send/recv payload, or the bytes a kHost op copies or
  /// its CPU AdamW reads and writes.
  int64_t bytes = 0;
  /// kHost: what the op does with `bytes`.
  HostOp host = HostOp::kCopyD2H;
  /// Send/recv: the other global rank and the matching tag.
  int64_t peer = -1;
  int64_t tag = -1;
  /// What the op does, e.g. "attention", "mlp", "tp all_reduce", "send activation" (static text).
  const char* what = "";
  /// Ops of the same rank that must complete first (all with smaller ids).
  std::vector<uint32_t> deps;
};

/// The ops of one global rank.
struct RankProgram {
  int64_t rank = 0;
  RankCoord coord;
  std::vector<ScheduleStep> schedule;  ///< the pipeline schedule it was lowered from
  std::vector<Op> ops;
};

/// The Program of a scenario for a set of ranks, with the kernel table they share.
struct Program {
  Scenario scenario;
  RankLayout layout;
  std::vector<Kernel> kernels;                  ///< unique kernels, indexed by Op::kernels
  std::map<int64_t, RankProgram> ranks;         ///< by global rank

  /// Sum over the kernels of `op` of their FLOPs (0 for communication ops).
  double op_flops(const Op& op) const;
  /// Label as in a timeline: "fwd mb3 chunk1 L12 mlp", "tp all_reduce 50331648 B", ...
  std::string label(const Op& op) const;
};

/// Totals of one rank's Program, per stream (indexed by Stream).
struct RankProgramStats {
  std::array<int64_t, kNumStreams> ops{};        ///< ops per stream
  std::array<double, kNumStreams> comm_bytes{};  ///< collective/send/recv bytes per stream
  int64_t kernels = 0;                   ///< kernel launches over all compute ops
  double flops = 0;                      ///< FLOPs of all compute ops
};

/// Sums the ops of `rp` (a rank of `prog`).
RankProgramStats program_stats(const Program& prog, const RankProgram& rp);

/// Which schedule steps build_program() lowers to ops.
enum class StepScope : uint8_t {
  kAll,  ///< every step: the Program the replay and the executor run
  /// Per model chunk, only its first forward step and its last backward step (the ones that
  /// carry the parameter-gather waits and the DP gradient-bucket triggers); the other steps get
  /// no ops, their p2p send/recv batches are kept. Every op outside the steps (gradient sync,
  /// optimizer, parameter gathers) is lowered as with kAll. Only for a reader that takes the ops
  /// of one step as those of every step of its (pass, model chunk) — the analytical estimator's
  /// probe (sim/analytical.hpp); nothing can run such a Program.
  kBoundary,
};

/// Lowers the scenario to the Programs of `ranks` (all ranks when empty), Megatron-LM style,
/// each model chunk over the transformer layers the pipeline split gives it
/// (pipeline_layer_split(), core/pipeline_split.hpp; possibly none beside the embedding or head):
/// per layer, LN -> QKV -> attention core -> projection -> TP all-reduce (reduce-scatter with SP,
/// all-gather before the next LN) -> LN -> FC1 -> GELU -> FC2 -> TP all-reduce/reduce-scatter;
/// backward mirrored with the column-parallel backward's async dgrad all-reduce/reduce-scatter
/// overlapped with the weight-gradient GEMM; recomputation before backward; vocab-parallel
/// embedding and LM head + cross-entropy on the first/last virtual stage; PP send/recv batched as
/// Megatron's schedules issue them; DP gradient reduce per bucket (all-reduce, or reduce-scatter
/// with the distributed optimizer) during the last micro-batch's backward when
/// overlap_grad_reduce; tied-embedding and (SP) LayerNorm gradient all-reduces; the optimizer
/// (Megatron's train_step and clip_grad_norm_fp32): zero_grad_buffer {n_rank} (a memset of the
/// rank's whole gradient buffer, grad dtype bytes each) as the first compute op, then after the
/// gradient sync grad_norm {n_opt}, its all-reduce, grad_clip_scale {n_opt} (when
/// training.clip_grad > 0: 8 bytes per element) and adamw_step {n_opt} in one compute op (n_opt:
/// the parameters this rank's optimizer steps, a DP x CP shard with the distributed optimizer); distributed-optimizer parameter all-gather after the step or, with
/// overlap_param_gather, at the start of the iteration ahead of each bucket's first forward.
/// Collectives over a group of one rank are left out.
/// Llama-style layers (Megatron-Core with Transformer Engine): RMSNorm kernels, the fused QKV
/// GEMM of width (a + 2g) d / t under grouped-query attention, RoPE on Q and K, SwiGLU's 2 ffn
/// wide FC1 or squared ReLU, an untied LM head with its own gradient (no embedding-gradient
/// all-reduce), no biases. FP8 (training.fp8_format): the transformer layers' GEMMs have dtype
/// fp8 (costed at the FP8 peak), preceded by casts of their inputs (E4M3) and of the output
/// gradients (E5M2 in hybrid) — separate kernels for the projection input and the QKV, projection
/// and FC2 output gradients, fused into the norm / activation that produces the others as
/// Transformer Engine does (tensorwise scaling never fuses: an amax pass and a cast each), the
/// weights cast once per iteration after the optimizer step (Megatron's FP8 parameters; without them Transformer Engine does the same work on the first
/// micro-batch), the delayed recipe's amax-history/scale update per layer and micro-batch and its
/// blocking amax all-reduce over TP x DP x CP (GroupKind::kTpDpCp) per model chunk and
/// micro-batch after the chunk's layers in forward and in backward, the
/// tensorwise recipe's extra amax pass per cast; the embedding and LM head stay 16-bit; with
/// fp8_param_gather the distributed optimizer all-gathers the GEMM weights in FP8.
/// Context parallelism (CP > 1): every op runs on s/CP tokens (the 2 x CP chunks of the causal
/// load balance); attention by parallel.cp_comm_type — p2p: CP blocks of s/CP queries x s/CP keys
/// (the same FLOPs each, full count) with the KV block for the next one exchanged around the CP
/// ring on the cp-comm stream while the current one computes (ring_exchange collectives over
/// the CP group), the block partial outputs merged; backward: KV exchanged ahead of each block
/// and the accumulated dKV passed on after it; all_gather: K, V all-gathered over CP before
/// attention and dK, dV reduce-scattered after its backward; a2a (Ulysses): all-to-all of Q, K, V
/// to a/(t CP) heads of the whole sequence before attention and of its output after (and the
/// reverse in backward). The DP gradient reduce and distributed optimizer run over DP x CP.
/// Mixture of experts (model.num_moe_experts E > 0; Megatron-Core's MoELayer): in an MoE layer
/// (ModelSpec::is_moe_layer) the MLP after the post-attention norm becomes, on T = the norm's
/// output rows of this rank (moe_local_tokens(): s b / t under SP, s the CP-local sequence),
/// with k = topk, P = ceil(moe_expert_tokens_per_rank() / (ETP E)) token copies this rank sends
/// to each expert (core/moe_tokens.hpp: the busiest rank, T k / E x moe_load_imbalance when
/// dropless, capped at — or, padded, equal to — the capacity ceil(T k / E x factor)), E_l = E / EP local
/// experts, R = ETP x EP x P rows per local expert, h the hidden size, all in the activation dtype:
///   kRouter       compute: router GEMM gemm_fwd {T, E, h} (replicated over TP, 16-bit),
///                 moe_router_topk_fwd {T, E, k}, moe_aux_loss_fwd {T, E} (aux_loss balancing).
///   alltoall dispatcher (moe_token_dispatcher_type: alltoall):
///   kMoePermute   compute: moe_permute_fwd {E P, T, h} (gather into expert order)
///   kMoeDispatch  all_to_all over GroupKind::kEp of E P h bytes (what each member sends); then,
///                 ETP > 1, all_gather over kEtp of ETP E P h bytes (output); then, E_l > 1,
///                 moe_chunk_cat {E_l R, h} (Megatron's sort_chunks_by_idxs by local expert)
///   allgather dispatcher (allgather):
///   kMoeDispatch  all_gather over kEtpEp of ETP EP T h bytes (output)
///   kMoePermute   compute: moe_permute_fwd {E_l R, ETP EP T, h}
///   (with moe_permute_fusion the permute and unpermute kernels are moe_permute_fused_fwd /
///   moe_unpermute_fused_fwd, same keys: Transformer Engine's fused kernels)
///   then, both:
///   kExpertFc1    the local experts' FC1 {R, fc1_e / ETP, h} (fc1_e = 2 ffn_e for SwiGLU):
///                 one grouped_gemm_fwd {E_l, R, n, k} with moe_grouped_gemm, else E_l gemm_fwd
///                 {R, n, k} kernels (Megatron's SequentialMLP); KernelKey::tp = ETP; FP8:
///                 Transformer Engine casts each GEMM's 16-bit input (fp8_cast_transpose: one
///                 per local expert in SequentialMLP, one over all with moe_grouped_gemm), the
///                 activation's output and, backward, its input gradient included
///   kExpertActivation  the activation over E_l R ffn_e / ETP elements
///   kExpertFc2    {R, h, ffn_e / ETP} as FC1 (row-parallel: partial sums over ETP); then
///                 SequentialMLP with E_l > 1: moe_chunk_cat {E_l R, h} (torch.cat of the
///                 experts' outputs; backward, of the input gradients after kExpertFc1)
///   alltoall: kMoeCombine: E_l > 1: moe_chunk_cat {E_l R, h} (the inverse sort); ETP > 1:
///                 reduce_scatter over kEtp of ETP E P h bytes (input, sums the
///                 ETP partial outputs); all_to_all back over kEp of E P h bytes;
///             kMoeUnpermute: moe_unpermute_fwd {E P, T, h}
///   allgather: kMoeUnpermute: moe_unpermute_fwd {E_l R, ETP EP T, h};
///             kMoeCombine: reduce_scatter over kEtpEp of ETP EP T h bytes (input)
///   shared expert (moe_shared_expert_intermediate_size f_s > 0): kFc1, kGelu, kFc2 as the
///                 dense MLP (TP, SP all-gather / reduce-scatter) of width f_s, after the
///                 routed experts; its output is added to theirs in kMlpResidual's kernel.
/// Dispatch and combine run on Stream::kEpComm and block the compute stream (the next kernel
/// waits for them). Backward, after kMlpResidual: the shared expert (kFc2, kGelu, kFc1
/// backward), then the routed path mirrored: alltoall: moe_unpermute_bwd, all_to_all over kEp
/// (kMoeCombine), ETP > 1 all_gather over kEtp (kMoeCombine); allgather: all_gather over kEtpEp
/// (kMoeCombine), moe_unpermute_bwd; alltoall with E_l > 1: moe_chunk_cat (kMoeCombine); then
/// kExpertFc2 dgrad + wgrad, kExpertActivation backward, kExpertFc1 dgrad + wgrad (SequentialMLP
/// with E_l > 1: moe_chunk_cat); alltoall: E_l > 1 moe_chunk_cat (kMoeDispatch), ETP > 1
/// reduce_scatter over kEtp (kMoeDispatch),
/// all_to_all over kEp (kMoeDispatch), moe_permute_bwd (scatter-add); allgather:
/// moe_permute_bwd, reduce_scatter over kEtpEp (kMoeDispatch); then kRouter: moe_aux_loss_bwd,
/// moe_router_topk_bwd, router gemm_dgrad and gemm_wgrad; the post-attention norm's backward.
/// Sizes are those of the busiest rank (the executor exchanges the real, variable counts at the
/// same ops, all-to-all-v). Selective recomputation redoes attention only; full recomputation
/// the whole layer, dispatch and combine included (as Megatron's). FP8: expert GEMMs in FP8 with
/// all four 16-bit inputs (permuted tokens, activation output, FC2 output gradient, activation
/// input gradient) cast by Transformer Engine's own kernels, per local expert without
/// moe_grouped_gemm (Megatron-Core's expert activation writes 16-bit); the router stays 16-bit.
/// Gradients: the local experts' parameters (E_l MLPs of width ffn_e over ETP) go to DDP buckets
/// of their own, reduced over GroupKind::kEdp (op group kEdp, Role kGradBucket; distributed
/// optimizer: reduce_scatter over kEdp and kParamBucket all_gather over kEdp); dense parameters
/// (attention, norms, router, shared expert) over kDpCp as before. Under SP the router weight's
/// gradient joins the LayerNorm-gradient all-reduce over TP. The optimizer shards dense state
/// over DP x CP and expert state over expert-DP; the grad-norm all-reduce spans every rank when
/// EP > 1 or ETP != TP (the expert shards live outside TP x PP).
/// Not modelled: the dispatcher's sort of received chunks by local expert after the all-to-all
/// (when E_l > 1), the all-gather of routing maps/probabilities (allgather dispatcher), the
/// shared-expert gate and overlap.
/// Zero-bubble schedules (ZB-H1, ZB-H2: splits_backward(), core/schedule.hpp): each backward
/// step B lowers to the input gradient alone (the kernels above less the wgrad GEMMs; a
/// column-parallel linear's dgrad all-reduce / reduce-scatter is waited by the next kernel, with
/// no wgrad to hide it), and each W step (Phase::kWeightGrad) to the wgrad GEMMs of the chunk's LM
/// head and layers (descending; per layer the SP all-gathers of the column-parallel inputs issued
/// first) and the embedding's backward; the DP bucket triggers follow the chunk's last W. A W
/// step waits for no p2p op, and the next F or B step for the recvs of its batches only (the
/// sends complete on their own, as the zero-bubble runtime posts them). Under every other
/// schedule the Program is as above (W right after B, inside the backward).
/// DualPipe (bidirectional(), core/schedule.hpp; DeepSeek-V3 report sec. 3.2.1,
/// deepseek-ai/DualPipe dualpipe.py): rank r lowers two parameter copies as its model chunks,
/// chunk 0 = stage r of the forward direction (virtual stage r) and chunk 1 = stage p - 1 - r of
/// the reverse one (virtual stage 2p - 1 - r), each a whole stage of the pipeline split over p
/// stages (pipeline_layer_split(): virtual stages p + s and s hold the same layers); the
/// embedding runs on virtual stages 0 and p and the final norm, LM head and loss on p - 1 and
/// 2p - 1 (takes_embedding(), computes_loss()), so ranks 0 and p - 1 each hold both, one word
/// embedding when tied; each chunk's DP buckets reduce as any chunk's, then, after the DP
/// gradient sync, the rank's gradients (the optimizer's DP x CP shard of them with the
/// distributed optimizer; the buckets of stage s are the same on both copies, so are the shards)
/// are all-reduced over GroupKind::kPpMirror (Role kMirrorGrads, on the pp-comm stream), which
/// also sums the tied embedding's copies (no kEmbeddingGrads all-reduce); B/W split, F&B pairs
/// and p2p as under DualPipeV.
/// CPU offload (host ops, OpKind::kHost on Stream::kOffload, FIFO): training.cpu_offloading
/// (Megatron-Core cpu_offloading with Transformer Engine's default scheduling; PP = 1): after the
/// forward of each of the first cpu_offloading_num_layers layers a D2H copy of its saved
/// activations (offloaded_layer_activation_bytes(), core/memory.hpp); the forward of layer
/// l + W (W = num_layers - cpu_offloading_num_layers, the sets the GPU may hold) waits for layer
/// l's copy; after the backward of layer l + W the H2D reload of layer l, which layer l's
/// backward waits for. training.optimizer_cpu_offload: after the gradient clip, of the n_opt
/// parameters the rank's optimizer steps, round(f n_opt) (f = optimizer_offload_fraction) go
/// D2H as fp32 gradients (4 bytes each), through the host CPU's AdamW (28 bytes each) and back H2D
/// in the parameter dtype, beside the GPU's adamw_step of the rest; the parameter all-gathers
/// after the step wait for the H2D copy (Megatron-Core's HybridDeviceOptimizer.step; its
/// overlap_cpu_optimizer_d2h_h2d, which pipelines the three per parameter, is not modelled).
/// Throws UnsupportedError for tp_comm_overlap without sequence_parallel; InvalidArgument for a
/// rank outside the world; PipelineSplitError for an impossible pipeline split.
/// `scope` (default kAll) chooses the steps that are lowered (StepScope::kBoundary: the
/// estimator's probe).
Program build_program(const Scenario& s, const std::vector<int64_t>& ranks = {},
                      StepScope scope = StepScope::kAll);

/// Megatron's DDP bucket size in parameters: max(40,000,000, 1,000,000 x DP x CP) with
/// overlap_grad_reduce; otherwise one bucket per model chunk (returns 0).
int64_t ddp_bucket_size_params(const Scenario& s);

}  // namespace traintwin
