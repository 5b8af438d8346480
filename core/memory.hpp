// Memory model per GPU: weights, gradients, optimizer states, activations, and the embedding /
// LM-head / logits buffers, per pipeline stage.
//
// Llama-style layers (GQA, SwiGLU, RMSNorm, RoPE) and FP8 extend Korthikanti's term-by-term
// method as layer_activation_bytes() states. With CP the local sequence is s/CP.
//
// Sources: bytes per parameter from Megatron-LM's distributed-optimizer documentation
// (fp16 params+grads: 20, or 4 + 16/d distributed; bf16 params with fp32 grads: 18, or 6 + 12/d;
// fp32: 16, or 8 + 8/d). Activations per transformer layer from Korthikanti et al. 2022,
// sec. 4 and Table 2: s b h (34 + 5 a s / h) bytes without parallelism or recomputation (16-bit
// activations, 1-byte dropout masks); TP without SP: s b h (10 + 24/t + 5 a s/(h t));
// TP + SP: s b h / t (34 + 5 a s / h); selective recompute drops the 5 a s^2 b terms;
// full recompute keeps the layer input, 2 s b h (/t with SP). s is the local sequence s/CP
// (also in the a s^2 b attention-score terms: an approximation, the paper has no CP).
// torchtitan's op-level selective checkpointing (selective_ac_option op) keeps what its policy
// saves instead: the layer input and the outputs of wq, wv, the SDPA kernel, w1 and w2
// (layer_activation_bytes()).
// Term breakdown (sec. 4.1, bytes for 16-bit activations):
//   outside the TP region, /t only with SP: 2 LN inputs 4sbh, QKV input 2sbh, FC1 input 2sbh,
//     attention and MLP dropout masks sbh + sbh                               -> 10 sbh;
//   inside the TP region, /t: Q, K 4sbh, V 2sbh, projection input 2sbh, GeLU input and output
//     2sb*ffn each (16sbh for ffn = 4h)                                       -> 24 sbh;
//   attention core, /t, dropped by selective recompute: softmax output 2as^2b, its dropout mask
//     as^2b, dropout output 2as^2b                                            -> 5 a s^2 b.
// fp32 precision doubles every 2-byte term; dropout masks stay 1 byte per element.
// The number of (micro-batch, chunk) activation sets in flight is taken from the stage's actual
// schedule (max_in_flight), which for the first stage is p under 1F1B, m under GPipe, and
// p v + p - 1 chunks of l/(p v) layers under interleaving, i.e. p (l/p) (1 + (p-1)/(p v))
// layers (Korthikanti sec. 4.2.3); under the zero-bubble schedules, whose sets live from F to W,
// p (ZB-H1) and 2p - 1 (ZB-H2) on every stage (Qi et al. 2024, Table 2; the whole set counts
// until W, though B frees part of it: an upper bound). Under an uneven pipeline split (core/pipeline_split.hpp) each
// in-flight set counts the layers of its own chunk (max_in_flight_weighted).
// Outside the transformer layers (sec. 4.3), per micro-batch in flight in the chunk holding them:
// first stage: the embedding dropout mask s b h (1 byte, /t with SP); last stage: the inputs of
// the final LayerNorm and of the LM head, 2sbh each (/t with SP: the LM head, a column-parallel
// linear, keeps only its sequence shard and re-gathers it in backward), and the fp32 logits of
// the vocab-parallel cross-entropy 4 s b V/t (V padded as Megatron pads it, padded_vocab_size);
// with cross_entropy_loss torch (F.cross_entropy on the logits cast to fp32, torchtitan's loss)
// 8 s b V/t more for the micro-batch in its loss backward (nll_loss's dense fp32 gradient and
// log_softmax's fp32 input gradient, beside its saved fp32 output).
// Under 1F1B and interleaved 1F1B the last chunk holds one micro-batch (as in the paper);
// under GPipe it holds m.
// Not counted here: the CUDA context, communication buffers, workspaces and the allocator's
// fragmentation (core/memory_reserve.hpp counts them as the reserve), and the transient
// workspace of the layer being recomputed under full recomputation.
#pragma once

#include <cstdint>
#include <vector>

#include "core/scenario.hpp"

namespace traintwin {

/// Activation bytes of one transformer layer for one micro-batch on one GPU.
/// `tp` = TP size, `cp` = CP size, `sequence_parallel` as configured; precision scales the
/// 16-bit terms (fp32 doubles them; dropout masks stay 1 byte). With the flash attention
/// backend the 5 a s^2 b terms of the attention core are never stored (Dao et al. 2022): only
/// the fp32 row log-sum-exp, 4 a s b / t. Dropout keeps a mask only when its probability is > 0
/// (PyTorch's dropout returns its input at p = 0): `hidden_dropout` = 0 drops the 2 sbh masks
/// after attention and MLP, `attention_dropout` = 0 the unfused attention core's mask and its
/// output (as^2b + 2as^2b: the softmax output is what the product reads). The defaults are
/// Megatron-LM's (0.1), the case of Korthikanti et al.'s 34 sbh + 5 as^2b. Throws
/// InvalidArgument, naming the argument, for sizes < 1 or seq_length not divisible by cp.
double layer_activation_bytes(const ModelSpec& m, int64_t micro_batch_size, int64_t tp, int64_t cp,
                              bool sequence_parallel, RecomputeGranularity r, Precision p,
                              AttentionBackend backend = AttentionBackend::kUnfused,
                              bool fp8 = false, double hidden_dropout = 0.1,
                              double attention_dropout = 0.1,
                              SelectiveAcOption selective = SelectiveAcOption::kCoreAttn);

/// Activation bytes of the MLP block of one MoE layer for one micro-batch on one rank (they
/// replace the dense MLP terms of layer_activation_bytes(); the norm output feeding the router
/// stays with the layer). Korthikanti et al.'s term-by-term method applied to Megatron-Core's
/// MoE layer, with e = bytes of an activation element (gemm inputs 1 byte under FP8), T =
/// moe_local_tokens() and T_in = moe_expert_tokens_per_rank() (top-k copies, x the what-if
/// imbalance, capped or padded by the capacity):
///   router probabilities e T E
///   + local experts T_in (e_gemm h + e f1_e / ETP + e_gemm f_e / ETP) (FC1 input, activation
///     input, FC2 input of the grouped GEMMs)
///   + unpermute's expert outputs e T k h
///   + shared expert s b (e f1_s + e_gemm f_s) / TP.
/// Throws InvalidArgument for a dense model or the sizes moe_local_tokens() refuses.
double moe_mlp_activation_bytes(const Scenario& s);

/// Transient dispatcher buffers of one MoE layer on one rank (one layer's at a time, not per
/// micro-batch): alltoall, the permuted send buffer e T k h and the all-to-all receive buffer
/// e (T_in / ETP) h; allgather, the hidden states of the EP x ETP group, e T EP ETP h.
double moe_dispatch_buffer_bytes(const Scenario& s);

/// Activation bytes one micro-batch of transformer layer `layer` saves on its GPU (the dense
/// layer's layer_activation_bytes() of the scenario's sizes; an MoE layer's with the MLP terms
/// replaced by moe_mlp_activation_bytes()): what training.cpu_offloading copies to the host after
/// the layer's forward and back before its backward (the memory model and the Program lowering
/// both use it). Throws as those do.
double offloaded_layer_activation_bytes(const Scenario& s, int64_t layer);

/// Bytes per parameter of weights, gradients and optimizer state (see file comment).
struct BytesPerParameter {
  double weights = 0, gradients = 0, optimizer = 0;
};
/// Bytes per parameter for `p` with or without the distributed optimizer over `dp` ranks
/// (the optimizer share, including the fp32 main gradients where Megatron keeps them there,
/// is divided by dp when distributed): fp16 {2, 2, 16}, bf16 {2, 4, 12}, fp32 {4, 4, 8}.
/// Throws InvalidArgument naming dp when dp < 1.
BytesPerParameter bytes_per_parameter(Precision p, bool distributed_optimizer, int64_t dp);

/// `full` (bytes per parameter unsharded) under ZeRO stage `zero_stage` over `dp` ranks
/// (Rajbhandari et al., "ZeRO", SC 2020, section 5 and Figure 1): stage 1 (P_os) divides the
/// optimizer state by dp, stage 2 (P_os+g) the gradients too, stage 3 (P_os+g+p) the weights too;
/// stage 0 changes nothing. With {2, 2, K}: (2 + 2 + K), 2 + 2 + K/dp, 2 + (2 + K)/dp and
/// (2 + 2 + K)/dp bytes. Throws InvalidArgument for a stage outside [0, 3] or dp < 1.
BytesPerParameter shard_bytes_per_parameter(BytesPerParameter full, int zero_stage, int64_t dp);

/// The memory of one GPU of pipeline stage `pp_rank`, in bytes.
struct StageMemory {
  int64_t pp_rank = 0;
  int64_t parameters = 0;  ///< parameters held (parameters_on_rank)
  int64_t expert_parameters = 0;  ///< of which routed experts' (state sharded over expert DP)
  int64_t layers = 0;      ///< transformer layers held (all chunks)
  int64_t in_flight = 0;   ///< peak (micro-batch, chunk) activation sets held
                           ///< (max_in_flight of the stage's schedule)
  /// Peak transformer-layer activation sets held: each in-flight (micro-batch, chunk) counts the
  /// chunk's layers (max_in_flight_weighted); in_flight x layers per chunk for an even split.
  int64_t in_flight_layers = 0;
  /// Weights held; under ZeRO-3 (Megatron-FSDP optim_grads_params) the rank's shard of the
  /// transformer layers plus the full weights of the fsdp_gathered_units FSDP units (transformer
  /// layers, Megatron-FSDP's default unit) gathered at once, the largest of the stage; the
  /// embedding, final norm and LM head whole (gathered once per iteration, as the Program does).
  double weights_bytes = 0;
  /// ZeRO-3: the FSDP units whose parameters are gathered at once: with
  /// training.reshard_after_forward the running one and training.fsdp_prefetch_depth N
  /// prefetched, min(N + 1, the most layers of a chunk of the stage); without it every layer of
  /// the stage (gathered from its forward to its backward; under PP for the whole step,
  /// core/fsdp_gather_once.hpp). 0 below ZeRO-3.
  int64_t fsdp_gathered_units = 0;
  /// FP8 training: the FP8 copy and transpose of the transformer layers' GEMM weights. With
  /// fp8_param_gather they replace the 16-bit GEMM weights (weights_bytes holds the rest).
  double fp8_weight_copies_bytes = 0;
  /// Gradients held; under ZeRO-2/3 the rank's shard plus one FSDP unit's (layer's) full
  /// gradients before their reduce-scatter; when they are reduce-scattered once per step
  /// (core/fsdp_gather_once.hpp fsdp_grads_reduced_once_per_step) the shard plus the full
  /// gradients of every parameter held, accumulated over the micro-batches.
  double gradients_bytes = 0;
  double optimizer_bytes = 0;
  double activations_bytes = 0;  ///< transformer layers, at the in-flight peak
  /// Outside the transformer layers: embedding dropout mask (first stage), final LN and LM-head
  /// inputs and fp32 logits (last stage).
  double embedding_and_logits_bytes = 0;
  /// MoE: one layer's token-dispatcher buffers (moe_dispatch_buffer_bytes; 0 without MoE layers).
  double moe_dispatch_buffers_bytes = 0;
  double total_bytes() const {
    return weights_bytes + fp8_weight_copies_bytes + gradients_bytes + optimizer_bytes +
           activations_bytes + embedding_and_logits_bytes + moe_dispatch_buffers_bytes;
  }
  // ---- host memory (CPU offload), not in total_bytes() ----
  /// training.optimizer_cpu_offload: the offloaded fraction f of the rank's optimizer shard of
  /// n parameters in pinned host memory, as Megatron-Core's HybridDeviceOptimizer keeps it with
  /// param_update_in_fp32: fp32 main parameters and the two fp32 Adam moments (12 bytes) plus
  /// the fp32 gradient copy it steps from (4 bytes), 16 f n bytes. optimizer_bytes holds the
  /// rest (1 - f of the device's optimizer share).
  double host_optimizer_bytes = 0;
  /// training.cpu_offloading: the saved activations of the offloaded layers of one micro-batch
  /// (pipeline parallelism is refused with it, so one micro-batch is in flight); activations_bytes
  /// holds the other layers'.
  double host_activations_bytes = 0;
  double host_total_bytes() const { return host_optimizer_bytes + host_activations_bytes; }
};

/// Memory of one GPU of stage `pp_rank` (throws InvalidArgument if out of range, or for the
/// argument rules of parameters_on_rank and build_schedule). The distributed optimizer shards
/// over the DP x CP ranks holding the same parameters (Megatron's data-parallel group with CP);
/// the routed experts' state over the expert-data-parallel ranks (TP x CP x DP / (ETP x EP)).
/// MoE layers' activations are the dense layer's with the MLP terms replaced by
/// moe_mlp_activation_bytes(); moe_dispatch_buffers_bytes holds one layer's dispatcher buffers.
StageMemory stage_memory(const Scenario& s, int64_t pp_rank);

/// stage_memory() for every pipeline stage, stage 0 first.
std::vector<StageMemory> memory_per_stage(const Scenario& s);

/// The share of a GPU's memory above which a peak is only "at risk" of fitting, whatever the
/// reserve (core/memory_reserve.hpp: the CUDA context, NCCL buffers, cuBLAS workspaces and
/// fragmentation this model's peak leaves out) says: the ~90 % warning line.
inline constexpr double kMemoryAtRiskShare = 0.90;

/// Whether a peak fits a GPU's memory.
enum class MemoryVerdict {
  kFits,         ///< peak + reserve <= capacity and peak <= kMemoryAtRiskShare x capacity
  kAtRisk,       ///< inside the reserve or above that share, up to the capacity
  kOutOfMemory,  ///< above the capacity
};
/// "fits" | "at risk" | "OOM".
const char* to_string(MemoryVerdict v);

/// The verdict of `peak_bytes` (the model's tensors) on a GPU of `capacity_bytes` (> 0;
/// InvalidArgument otherwise) that must also hold `reserve_bytes` (>= 0: MemoryReserve).
MemoryVerdict memory_verdict(double peak_bytes, double capacity_bytes, double reserve_bytes);

/// Host bytes per offloaded parameter under training.optimizer_cpu_offload (StageMemory::
/// host_optimizer_bytes): fp32 main parameter, two fp32 Adam moments, fp32 gradient copy.
inline constexpr double kHostOptimizerBytesPerParameter = 16;

/// Whether the host memory CPU offload takes (StageMemory::host_total_bytes()) fits the host
/// memory of one GPU, `host_capacity_bytes` (the topology's gpu.host_link.host_memory): kFits up
/// to kMemoryAtRiskShare of it (the rest is the host's operating system, data loader and
/// framework), kAtRisk up to the capacity, kOutOfMemory above. InvalidArgument for a capacity
/// <= 0.
MemoryVerdict host_memory_verdict(double host_bytes, double host_capacity_bytes);

}  // namespace traintwin
