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
//    (input).
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

/// Where an op runs: one compute stream and one stream per kind of communication.
enum class Stream : uint8_t { kCompute, kTpComm, kCpComm, kPpComm, kDpComm };
/// "compute" | "tp-comm" | "cp-comm" | "pp-comm" | "dp-comm".
const char* to_string(Stream s);

enum class OpKind : uint8_t { kCompute, kCollective, kSend, kRecv };
const char* to_string(OpKind k);

enum class CollectiveKind : uint8_t { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kAllToAll };
/// "all_reduce" | "all_gather" | "reduce_scatter" | "broadcast" | "all_to_all".
const char* to_string(CollectiveKind k);

/// What part of the iteration an op belongs to.
enum class Phase : uint8_t {
  kForward,
  kBackward,
  kRecompute,     ///< forward work redone before a backward (selective or full recomputation)
  kGradSync,      ///< DP gradient reduce, embedding/LayerNorm gradient all-reduce
  kParamSync,     ///< distributed-optimizer parameter all-gather
  kOptimizer,     ///< grad norm + AdamW step
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
  kGelu,
  kFc2,                   ///< row-parallel ffn -> h
  kMlpResidual,           ///< bias + dropout + residual add after FC2
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
  kGradNorm,              ///< global gradient norm (local sum of squares; its all-reduce)
  kOptimizerStep,         ///< clip + AdamW
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
  /// Communication: the role of the computation it serves.
  Role role = Role::kNone;
  /// kGradBucket / kParamBucket: the bucket's layers in backward order (global layer index;
  /// -1 = final LayerNorm and the LM-head copy of the last stage, -2 = the embeddings).
  std::vector<int32_t> bucket_layers;
  /// Collective: kind and group (members: Program::layout.group(group, rank)).
  CollectiveKind collective = CollectiveKind::kAllReduce;
  GroupKind group = GroupKind::kTp;
  /// Collective size (see file comment) or send/recv payload, in bytes.
  int64_t bytes = 0;
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
  std::array<int64_t, 5> ops{};          ///< ops per stream
  std::array<double, 5> comm_bytes{};    ///< collective/send/recv bytes per stream
  int64_t kernels = 0;                   ///< kernel launches over all compute ops
  double flops = 0;                      ///< FLOPs of all compute ops
};

/// Sums the ops of `rp` (a rank of `prog`).
RankProgramStats program_stats(const Program& prog, const RankProgram& rp);

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
/// step; distributed-optimizer parameter all-gather after the step or, with
/// overlap_param_gather, at the start of the iteration ahead of each bucket's first forward.
/// Collectives over a group of one rank are left out.
/// Throws UnsupportedError for context_parallel_size > 1 (ring attention is not lowered yet) and
/// for tp_comm_overlap without sequence_parallel; InvalidArgument for a rank outside the world;
/// PipelineSplitError for an impossible pipeline split.
Program build_program(const Scenario& s, const std::vector<int64_t>& ranks = {});

/// Megatron's DDP bucket size in parameters: max(40,000,000, 1,000,000 x DP x CP) with
/// overlap_grad_reduce; otherwise one bucket per model chunk (returns 0).
int64_t ddp_bucket_size_params(const Scenario& s);

}  // namespace traintwin
