// The scenario: model + parallelism + training + cluster, as read from scenarios/*.yaml.
// Key names are Megatron-LM's argument names in snake_case.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/reliability.hpp"

namespace traintwin {

/// Numeric precision of parameters and activations (Megatron --fp16 / --bf16, else fp32).
/// kFp8 is never a training precision: it is the dtype of the FP8 GEMM kernels (KernelKey) that
/// training.fp8_format adds on top of bf16/fp16 (Transformer Engine; 1 byte per element). Nor is
/// kTf32: it is the dtype of the matrix products of fp32 training under
/// training.float32_matmul_precision high (fp32 storage, TF32 tensor-core arithmetic); nor
/// kFp32Bf16, that of fp32 training under medium (fp32 storage, operands rounded to bf16 inside
/// the kernel, fp32 accumulation: cuBLAS's CUBLAS_COMPUTE_32F_FAST_16BF), a kernel distinct from
/// a bf16 one (it reads twice the bytes; on an H100 the 2048 x 8192 x 2048 GEMM runs at 316
/// TFLOP/s against bf16's 707), so the two never share a cost-database row.
enum class Precision { kFp32, kFp16, kBf16, kFp8, kTf32, kFp32Bf16 };

/// The arithmetic of fp32 matrix products (PyTorch's torch.set_float32_matmul_precision):
/// kHighest true fp32; kHigh TF32 tensor cores (10-bit mantissa inputs, fp32 accumulation);
/// kMedium bfloat16 tensor cores (inputs rounded to bf16, fp32 accumulation). Storage stays fp32.
enum class Float32MatmulPrecision { kHighest, kHigh, kMedium };
/// "highest" | "high" | "medium".
const char* to_string(Float32MatmulPrecision p);

/// Activation recomputation (Megatron --recompute-granularity; Korthikanti et al. 2022).
/// kSelective recomputes the attention core only, kFull the whole transformer layer.
enum class RecomputeGranularity { kNone, kSelective, kFull };

/// What recompute_granularity selective recomputes (torchtitan [activation_checkpoint]
/// selective_ac_option). kCoreAttn: Megatron-LM's selective recomputation (--recompute-modules
/// core_attn), the attention core. kOp: torchtitan's op-level selective activation checkpointing
/// (selective_ac_option = "op", torchtitan/parallelisms/parallelize_llama.py @9dec370
/// _apply_ac_to_transformer_block over torch.utils.checkpoint's
/// create_selective_checkpoint_contexts): each layer keeps its input and the outputs of the ops
/// of its save list (every other aten.mm, the first, third, ... of the layer; the SDPA kernel's
/// outputs; reduce-scatters) and recomputes every other op before its backward.
enum class SelectiveAcOption { kCoreAttn, kOp };

/// How the loss turns the LM head's logits into the cross-entropy (where its fp32 logits live).
/// kVocabParallel: Megatron-Core's vocab-parallel cross-entropy
/// (megatron/core/tensor_parallel/cross_entropy.py): one fp32 copy of the logits, turned into the
/// softmax in place and kept for the backward. kTorch: torch.nn.functional.cross_entropy on the
/// logits cast to fp32, as torchtitan's loss (train.py @9dec370 loss_fn, later
/// torchtitan/components/loss.py cross_entropy_loss): log_softmax then nll_loss, each with its
/// own fp32 tensors (core/memory.hpp counts them).
enum class CrossEntropyLoss { kVocabParallel, kTorch };

/// What Megatron-FSDP shards over the data-parallel group (Megatron --data-parallel-sharding-strategy,
/// with --use-megatron-fsdp; the stages of ZeRO, Rajbhandari et al. SC 2020): kNoShard nothing
/// (DDP), kOptim the optimizer state (ZeRO-1), kOptimGrads also the gradients (ZeRO-2),
/// kOptimGradsParams also the parameters (ZeRO-3, FSDP).
enum class DataParallelShardingStrategy { kNoShard, kOptim, kOptimGrads, kOptimGradsParams };

/// How the attention core runs (Megatron --attention-backend). kUnfused: QK^T GEMM, masked
/// softmax, dropout and attention-over-values as separate kernels that store the s x s scores
/// (Korthikanti et al.'s activation model); kFlash: one fused kernel (Dao et al. 2022) that
/// stores no s x s tensor and recomputes scores in backward; kFused: the same function as one
/// cuDNN fused-attention graph (Megatron's "fused": Transformer Engine's FusedAttention, cuDNN's
/// flash engine), also without an s x s store.
enum class AttentionBackend { kUnfused, kFlash, kFused };

/// Whether `a` keeps no s x s scores (flash and fused: only the log-sum-exp of each row).
inline bool stores_no_scores(AttentionBackend a) { return a != AttentionBackend::kUnfused; }

/// Pipeline schedule family. k1F1B becomes interleaved 1F1B when there are > 1 model chunks.
/// kZbH1 / kZbH2: the zero-bubble handcrafted schedules ZB-H1 and ZB-H2 (Qi et al., ICLR 2024),
/// which split each backward into B (input gradient) and W (weight gradient) steps. kZbV: the
/// V-shaped zero-bubble schedule ZB-V (Qi et al., arXiv:2401.10241 v2, sec. 6): two model
/// chunks per pipeline rank, chunk 0 of rank r the stage r and chunk 1 the stage 2p - 1 - r.
/// kDualPipeV: DeepSeek's DualPipeV (the "cut-in-half" DualPipe, deepseek-ai/DualPipe
/// dualpipev.py) in the same V placement, overlapping a forward chunk with a backward chunk of
/// another micro-batch. kDualPipe: DeepSeek's bidirectional DualPipe (DeepSeek-V3 Technical
/// Report sec. 3.2.1; deepseek-ai/DualPipe dualpipe.py): p stages on p ranks fed from both ends,
/// rank r holding stage r of the forward direction and stage p - 1 - r of the reverse one (two
/// parameter copies); its op order is core/schedule.hpp dualpipe_schedule, and the scenario rules
/// refuse it by name until the Program lowers its two directions (core/scenario_rules.cpp).
enum class PipelineScheduleKind { kGPipe, k1F1B, kZbH1, kZbH2, kZbV, kDualPipeV, kDualPipe };

/// How the learning rate decays after warm-up (Megatron --lr-decay-style; its
/// OptimizerParamScheduler, megatron/core/optimizer_param_scheduler.py).
enum class LrDecayStyle { kConstant, kLinear, kCosine };

/// Bytes of one element of `p`: 4 (fp32, tf32, fp32-bf16), 2 (fp16, bf16) or 1 (fp8).
int bytes_per_element(Precision p);

/// "fp32" | "fp16" | "bf16" | "fp8" | "tf32" | "fp32-bf16".
const char* to_string(Precision p);
/// The Precision spelt `text` as to_string() spells it (a kernel dtype of a cost database or a
/// live timeline); nullopt for any other text.
std::optional<Precision> precision_from_string(std::string_view text);
/// Every spelling of a Precision, comma-separated, for error messages ("fp32, fp16, ...").
std::string precision_names();

/// Normalization of the transformer layers (Megatron --normalization). LayerNorm: (x - mean) /
/// std * gamma + beta (2h parameters); RMSNorm (Zhang & Sennrich 2019): x / rms(x) * gamma (h).
enum class Normalization { kLayerNorm, kRmsNorm };
/// MLP activation. kGelu: FC1 h -> ffn, GeLU. kSwiglu (Shazeer 2020; Megatron --swiglu): FC1
/// h -> 2 ffn (gate and up projections fused), silu(gate) * up. kSquaredRelu (So et al. 2021,
/// Nemotron-4; Megatron --squared-relu): FC1 h -> ffn, relu(x)^2.
enum class Activation { kGelu, kSwiglu, kSquaredRelu };
/// Position embedding (Megatron --position-embedding-type): a learned s x h table added after
/// the word embedding, or rotary embeddings (Su et al. 2021) applied to Q and K in attention.
enum class PositionEmbedding { kLearnedAbsolute, kRope };
/// FP8 format (Megatron --fp8-format, Transformer Engine): kHybrid = E4M3 forward, E5M2 for
/// gradients; kE4m3 = E4M3 everywhere.
enum class Fp8Format { kHybrid, kE4m3 };
/// FP8 scaling recipe (Megatron --fp8-recipe): delayed (per-tensor scale from an amax history),
/// tensorwise (per-tensor current scaling), blockwise (1x128/128x128 block scales, DeepSeek-V3
/// style), mxfp8 (MX 1x32 blocks with E8M0 scales, Blackwell).
enum class Fp8Recipe { kDelayed, kTensorwise, kBlockwise, kMxfp8 };
/// How context-parallel attention exchanges K and V (Megatron --cp-comm-type): p2p = ring
/// attention, KV blocks passed around the CP ring overlapped with the attention blocks; a2a =
/// DeepSpeed-Ulysses all-to-all of Q, K, V from sequence to head sharding and of the output
/// back; all_gather = K and V all-gathered over CP before attention (reduce-scatter of dK, dV).
enum class CpCommType { kP2p, kA2a, kAllGather };
/// "none" | "selective" | "full".
const char* to_string(RecomputeGranularity r);
/// "core_attn" | "op".
const char* to_string(SelectiveAcOption o);
/// "vocab_parallel" | "torch".
const char* to_string(CrossEntropyLoss l);
/// "no_shard" | "optim" | "optim_grads" | "optim_grads_params".
const char* to_string(DataParallelShardingStrategy d);
/// "gpipe" | "1f1b" | "zb-h1" | "zb-h2" | "zb-v" | "dualpipe" | "dualpipev".
const char* to_string(PipelineScheduleKind k);
/// "unfused" | "flash" | "fused".
const char* to_string(AttentionBackend a);
/// "constant" | "linear" | "cosine".
const char* to_string(LrDecayStyle s);
/// "layernorm" | "rmsnorm".
const char* to_string(Normalization n);
/// "gelu" | "swiglu" | "squared_relu".
const char* to_string(Activation a);
/// "learned_absolute" | "rope".
const char* to_string(PositionEmbedding p);
/// "hybrid" | "e4m3".
const char* to_string(Fp8Format f);
/// "delayed" | "tensorwise" | "blockwise" | "mxfp8".
const char* to_string(Fp8Recipe r);
/// "p2p" | "a2a" | "all_gather".
const char* to_string(CpCommType c);
/// How MoE tokens reach their experts (Megatron --moe-token-dispatcher-type). kAllToAll: each
/// rank permutes its tokens by expert and exchanges them over the expert-parallel group with an
/// all-to-all (and back after the experts); kAllGather: every rank all-gathers the tokens of the
/// EP x ETP group, keeps those routed to its local experts, and reduce-scatters the outputs.
enum class MoeTokenDispatcher { kAllToAll, kAllGather };
/// "alltoall" | "allgather".
const char* to_string(MoeTokenDispatcher d);
/// MoE load balancing (Megatron --moe-router-load-balancing-type). kAuxLoss: the Switch
/// Transformer auxiliary loss (Fedus et al. 2021, eq. 4) times moe_aux_loss_coeff; kNone.
enum class MoeLoadBalancing { kAuxLoss, kNone };
/// "aux_loss" | "none".
const char* to_string(MoeLoadBalancing b);

/// The model: a pre-norm decoder-only transformer. The defaults are GPT-3's (LayerNorm, GeLU,
/// learned positions, multi-head attention, LM head tied to the word embedding, linear biases);
/// the loader's `architecture` presets set the others (llama, nemotron; see load_scenario()).
struct ModelSpec {
  std::string architecture = "gpt";  ///< gpt | llama | nemotron (the preset the file named)
  int64_t num_layers = 0;            ///< l
  int64_t hidden_size = 0;           ///< h
  int64_t num_attention_heads = 0;   ///< a
  int64_t ffn_hidden_size = 0;       ///< MLP width (of each of SwiGLU's two halves); 4h default
  int64_t seq_length = 0;            ///< s, tokens per sample
  int64_t vocab_size = 0;            ///< V
  /// Query groups g (grouped-query attention, Ainslie et al. 2023): K and V have g heads, each
  /// shared by a/g query heads. a = multi-head attention, 1 = multi-query. 0 (a ModelSpec built
  /// in code) means a; the loader always sets it.
  int64_t num_query_groups = 0;
  Normalization normalization = Normalization::kLayerNorm;
  Activation activation = Activation::kGelu;
  PositionEmbedding position_embedding_type = PositionEmbedding::kLearnedAbsolute;
  /// RoPE's base b (Megatron --rotary-base): channel pair i of a head of dimension D turns by
  /// position x b^(-2i/D) (Su et al. 2021). 10000 is Megatron's default and Llama 2's; Llama 3
  /// uses 500000. Only with position_embedding_type rope; no cost in the Program.
  double rotary_base = 10000.0;
  bool untie_embeddings_and_output_weights = false;  ///< LM head has its own V x h weight
  bool add_bias_linear = true;                        ///< biases in QKV, projection, FC1, FC2
  /// Channels per attention head d (Megatron --kv-channels); 0 = hidden_size / heads. Qwen3
  /// sets it apart from h/a (128 with h 2048, a 32): the QKV output is (a + 2g) d wide and the
  /// projection's input a d, not h.
  int64_t kv_channels = 0;

  // Mixture of experts (Megatron-LM's --num-moe-experts and --moe-* arguments). A layer is an
  // MoE layer when moe_layer_pattern says so: its MLP becomes a router (h -> E GEMM, top-k),
  // E routed experts of width moe_ffn_hidden_size (each the model's MLP kind: SwiGLU experts
  // for llama) and, when moe_shared_expert_intermediate_size > 0, one shared expert that sees
  // every token. 0 experts = a dense model (every other moe_* key must then be absent).
  int64_t num_moe_experts = 0;                 ///< E; 0 = dense
  int64_t moe_router_topk = 2;                 ///< k experts per token (Megatron default 2)
  int64_t moe_ffn_hidden_size = 0;             ///< width of one routed expert; 0 = ffn_hidden_size
  int64_t moe_shared_expert_intermediate_size = 0;  ///< width of the shared expert(s); 0 = none
  /// Per layer (num_layers entries) 1 = MoE, 0 = dense: the file's moe_layer_freq, an integer f
  /// (layer i is MoE when i % f == 0, Megatron's rule) or an explicit 0/1 list. Empty = every
  /// layer MoE (f = 1) when num_moe_experts > 0.
  std::vector<int> moe_layer_pattern;
  /// Expert capacity factor (Megatron --moe-expert-capacity-factor): each expert takes at most
  /// ceil(tokens x k / E x factor) tokens, the rest are dropped; none = dropless.
  std::optional<double> moe_expert_capacity_factor;
  bool moe_pad_expert_input_to_capacity = false;  ///< pad every expert to its capacity
  MoeTokenDispatcher moe_token_dispatcher_type = MoeTokenDispatcher::kAllGather;
  MoeLoadBalancing moe_router_load_balancing_type = MoeLoadBalancing::kAuxLoss;
  double moe_aux_loss_coeff = 0.0;             ///< Megatron default 0.0
  bool moe_grouped_gemm = false;               ///< local experts in one grouped GEMM
  /// Megatron --moe-permute-fusion: the token permute / unpermute around the experts run as
  /// Transformer Engine's fused kernels (one pass over each token row) instead of Megatron-Core's
  /// unfused torch ops (core/lowering_kernels.hpp counts both).
  bool moe_permute_fusion = false;
  /// DeepSeek-V3's multi-latent attention (Megatron --multi-latent-attention): refused, not
  /// supported yet.
  bool multi_latent_attention = false;

  /// True when the model has routed experts.
  bool is_moe() const { return num_moe_experts > 0; }
  /// True when global layer `layer` (0-based, in [0, num_layers)) is an MoE layer.
  bool is_moe_layer(int64_t layer) const {
    if (!is_moe()) return false;
    if (moe_layer_pattern.empty()) return true;
    return moe_layer_pattern.at(static_cast<size_t>(layer)) != 0;
  }
  /// Width of one routed expert: moe_ffn_hidden_size, or ffn_hidden_size when 0.
  int64_t moe_expert_ffn() const {
    return moe_ffn_hidden_size > 0 ? moe_ffn_hidden_size : ffn_hidden_size;
  }

  /// d: kv_channels, or hidden_size / num_attention_heads when 0.
  int64_t head_dim() const {
    return kv_channels > 0 ? kv_channels : hidden_size / num_attention_heads;
  }
  /// Width of the attention core's output (the projection's input): a x d (= h unless
  /// kv_channels says otherwise).
  int64_t attention_width() const { return num_attention_heads * head_dim(); }
  /// g: num_query_groups, or a when 0.
  int64_t query_groups() const { return num_query_groups > 0 ? num_query_groups : num_attention_heads; }
  /// Output width of the fused QKV linear: (a + 2 g) x head_dim (= 3h for MHA).
  int64_t qkv_width() const { return (num_attention_heads + 2 * query_groups()) * head_dim(); }
  /// Output width of FC1: 2 ffn for SwiGLU (gate and up), else ffn.
  int64_t fc1_width() const { return fc1_width_of(ffn_hidden_size); }
  /// Output width of an FC1 of inner width `ffn` in this model's MLP kind: 2 ffn for SwiGLU
  /// (gate and up), else ffn (also routed experts and the shared expert).
  int64_t fc1_width_of(int64_t ffn) const {
    return activation == Activation::kSwiglu ? 2 * ffn : ffn;
  }
  /// Parameters of one normalization layer: 2h (LayerNorm gamma, beta) or h (RMSNorm gamma).
  int64_t norm_parameters() const {
    return normalization == Normalization::kLayerNorm ? 2 * hidden_size : hidden_size;
  }
};

/// How the model is split over GPUs (Megatron-LM names).
struct ParallelConfig {
  int64_t tensor_model_parallel_size = 1;          ///< TP
  int64_t pipeline_model_parallel_size = 1;        ///< PP
  int64_t virtual_pipeline_model_parallel_size = 1;///< model chunks per pipeline rank (v)
  int64_t context_parallel_size = 1;               ///< CP
  CpCommType cp_comm_type = CpCommType::kP2p;      ///< how CP attention exchanges K and V
  /// EP: ranks the routed experts are split over (Megatron --expert-model-parallel-size).
  int64_t expert_model_parallel_size = 1;
  /// ETP: tensor parallelism inside each expert (Megatron --expert-tensor-parallel-size);
  /// none = TP, as Megatron defaults it.
  std::optional<int64_t> expert_tensor_parallel_size;
  int64_t data_parallel_size = 1;                  ///< DP, = num_gpus / (TP*CP*PP)
  bool sequence_parallel = false;                  ///< SP (needs TP > 1)
  /// Megatron-LM's scatter/gather of pipeline tensors (Narayanan et al. SC'21, section 4.1; the
  /// flag --no-scatter-gather-tensors-in-pipeline, on by default in Megatron-LM until
  /// Megatron-Core's p2p_communication dropped it): without SP each TP rank sends 1/TP of the
  /// [s, b, h] activation (or gradient) to its peer stage and the receiving TP group all-gathers
  /// it over NVLink. No effect with SP (the tensor is already split) or TP = 1.
  bool scatter_gather_tensors_in_pipeline = false;
  PipelineScheduleKind pipeline_schedule = PipelineScheduleKind::k1F1B;
  /// Fastest-varying first (Megatron-LM's default order; ep may be left out when EP = 1).
  std::string rank_order = "tp-cp-ep-dp-pp";
  /// Uneven pipeline split (core/pipeline_split.hpp has the rules). Transformer layers of
  /// pipeline rank 0 / rank PP-1 (Megatron --decoder-first-pipeline-num-layers /
  /// --decoder-last-pipeline-num-layers); none = the middle ranks' share.
  std::optional<int64_t> decoder_first_pipeline_num_layers;
  std::optional<int64_t> decoder_last_pipeline_num_layers;
  /// Count the embedding / the LM head + loss as one layer each in the split (Megatron
  /// --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split).
  bool account_for_embedding_in_pipeline_split = false;
  bool account_for_loss_in_pipeline_split = false;
  /// Megatron-Core's custom layout (--pipeline-model-parallel-layout): the virtual stages in
  /// order separated by '|', each its layers ('t' a transformer layer, 'E' the embedding on the
  /// first, 'L' the loss on the last, 'X*N' and '(...)*N' repeats), e.g. "Et*3|(tt|)*6,tL" for
  /// 16 layers on 8 stages; "" = none (core/pipeline_split.hpp has the rules).
  std::string pipeline_model_parallel_layout;

  /// True when 1F1B runs with > 1 model chunk per pipeline rank (interleaved 1F1B).
  bool interleaved() const { return virtual_pipeline_model_parallel_size > 1; }
  /// ETP: expert_tensor_parallel_size, or TP when not given.
  int64_t expert_tp() const {
    return expert_tensor_parallel_size ? *expert_tensor_parallel_size : tensor_model_parallel_size;
  }
  /// Expert-data-parallel size under Megatron-Core's parallel folding: the ranks of one pipeline
  /// stage (TP x CP x DP) regrouped as ETP x EP x expert-DP, so = TP x CP x DP / (ETP x EP).
  int64_t expert_data_parallel_size() const {
    return tensor_model_parallel_size * context_parallel_size * data_parallel_size /
           (expert_tp() * expert_model_parallel_size);
  }
};

/// Batch, precision and optimizer/communication switches.
struct TrainingConfig {
  int64_t micro_batch_size = 1;     ///< b, samples per micro-batch
  int64_t global_batch_size = 1;    ///< B, samples per iteration over all DP replicas
  Precision precision = Precision::kBf16;
  RecomputeGranularity recompute_granularity = RecomputeGranularity::kNone;
  /// What recompute_granularity selective recomputes (no effect under none and full).
  SelectiveAcOption selective_ac_option = SelectiveAcOption::kCoreAttn;
  /// How the loss computes its fp32 logits.
  CrossEntropyLoss cross_entropy_loss = CrossEntropyLoss::kVocabParallel;
  AttentionBackend attention_backend = AttentionBackend::kUnfused;
  bool use_distributed_optimizer = false;  ///< ZeRO-1: optimizer state sharded over DP
  /// Megatron-FSDP (Megatron --use-megatron-fsdp; needs the distributed optimizer): sharding
  /// over DP x CP as data_parallel_sharding_strategy says.
  bool use_megatron_fsdp = false;
  DataParallelShardingStrategy data_parallel_sharding_strategy =
      DataParallelShardingStrategy::kNoShard;
  /// The ZeRO stage these give: 0 (replicated), 1 (optimizer state sharded: the distributed
  /// optimizer, or Megatron-FSDP optim / no_shard with it), 2 (and gradients), 3 (and
  /// parameters).
  int zero_stage() const {
    if (use_megatron_fsdp) {
      return std::max(1, static_cast<int>(data_parallel_sharding_strategy));
    }
    return use_distributed_optimizer ? 1 : 0;
  }
  /// HSDP (Megatron-Core --num-distributed-optimizer-instances R): the DP x CP ranks split into
  /// R sharding groups of DP x CP / R consecutive members each; the sharded state (optimizer,
  /// and gradients and parameters as zero_stage() says) is split inside a group and replicated
  /// across the R groups, whose gradient shards an all-reduce over the replica group sums.
  /// torchtitan's data_parallel_replicate_degree is R, data_parallel_shard_degree DP x CP / R.
  /// 1 = one group of all DP x CP ranks (plain ZeRO/FSDP).
  int64_t num_distributed_optimizer_instances = 1;
  /// ZeRO-3 / FSDP: whether a unit's gathered parameters are freed after its forward and
  /// gathered again before its backward (true, Megatron-Core TorchFullyShardedDataParallelConfig
  /// and PyTorch FSDP2 fully_shard reshard_after_forward, torchtitan fsdp_reshard_after_forward
  /// always), or kept from the forward to the backward (false: torchtitan never, FSDP1
  /// SHARD_GRAD_OP, Megatron --torch-fsdp2-no-reshard-after-forward): no backward all-gather,
  /// every unit of the stage held whole; with PP > 1 gathered once per step, by its chunk's
  /// first forward (core/fsdp_gather_once.hpp). Only with zero_stage() 3.
  bool reshard_after_forward = true;
  /// ZeRO-3 / FSDP: the units whose parameter all-gathers are issued ahead of the one that runs,
  /// in the pass's order (forward: the next layers; backward: the previous ones), within a model
  /// chunk. 1 = one unit ahead (Megatron-FSDP's default, PyTorch FSDP1 forward_prefetch with
  /// backward_prefetch BACKWARD_PRE, FSDP2's implicit prefetch); N = FSDP2
  /// set_modules_to_forward_prefetch / set_modules_to_backward_prefetch with the next N modules;
  /// 0 = none (each unit gathered when it runs). Only with zero_stage() 3.
  int64_t fsdp_prefetch_depth = 1;
  bool overlap_grad_reduce = false;        ///< DP grad reduce in buckets during backward
  bool overlap_param_gather = false;       ///< dist-opt param all-gather overlapped with forward
  bool tp_comm_overlap = false;            ///< TP collectives pipelined with their GEMMs
  /// Megatron's asynchronous TP all-reduce of a column-parallel layer's input gradient
  /// (--no-async-tensor-model-parallel-allreduce turns it off; Megatron-LM added it in Oct 2021,
  /// LinearWithGradAccumulationAndAsyncAllreduce): true = launched after the input-gradient GEMM
  /// and hidden behind the weight-gradient GEMM; false = the 2021 order, the layer's whole backward
  /// (input then weight gradient) and then the blocking all-reduce (_CopyToModelParallelRegion's
  /// backward). Only without sequence parallelism: under SP the gradient's reduce-scatter
  /// overlaps the weight gradient either way (Megatron turns this flag off under SP).
  bool async_tensor_model_parallel_allreduce = true;
  /// Megatron's fused vocab-parallel cross entropy (--cross-entropy-loss-fusion;
  /// megatron/core/fusions/fused_cross_entropy.py, torch.compile'd passes, bf16 only): the loss
  /// reads and writes the logits in fewer passes (core/lowering_kernels.hpp cross_entropy).
  bool cross_entropy_loss_fusion = false;
  /// Megatron-LM's gradient accumulation fusion (--no-gradient-accumulation-fusion turns it off;
  /// added in commit 83b1e42f30, 2022-02-13, megatron/mpu/layers.py with apex's
  /// fused_weight_gradient_mlp_cuda): true = each weight-gradient GEMM accumulates straight into
  /// the parameter's main_grad; false = Megatron before it (SC'21, megatron/model/distributed.py
  /// _make_param_hook at 50a4b5fa02): the GEMM writes param.grad in the parameter dtype and a
  /// backward hook adds it to main_grad, one elementwise pass per layer and micro-batch
  /// (core/lowering_kernels.hpp grad_accumulate).
  bool gradient_accumulation_fusion = true;
  /// The arithmetic of the matrix products of fp32 training (PyTorch
  /// torch.set_float32_matmul_precision); anything but highest needs precision fp32.
  Float32MatmulPrecision float32_matmul_precision = Float32MatmulPrecision::kHighest;
  /// FP8 GEMMs on top of `precision` (Megatron --fp8-format); none = no FP8.
  std::optional<Fp8Format> fp8_format;
  Fp8Recipe fp8_recipe = Fp8Recipe::kDelayed;  ///< Megatron --fp8-recipe (needs fp8_format)
  /// FP8 parameters (Megatron --fp8-param-gather, NeMo fp8_params): the layers' GEMM weights are
  /// kept in FP8 (no 16-bit copy) and the distributed optimizer all-gathers them in FP8.
  bool fp8_param_gather = false;

  /// Optimizer CPU offload (Megatron-Core --optimizer-cpu-offload; its HybridDeviceOptimizer,
  /// megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py): the first
  /// optimizer_offload_fraction of the rank's optimizer shard (by parameters) keeps its fp32
  /// main parameters and Adam moments in pinned host memory and is stepped there by the host
  /// CPU's AdamW (torch.optim.AdamW); each iteration copies its fp32 gradients device-to-host
  /// before the step and its updated parameters host-to-device (16-bit) after it.
  bool optimizer_cpu_offload = false;
  /// The share of the optimizer shard's parameters offloaded, in [0, 1] (Megatron
  /// --optimizer-offload-fraction, default 1.0).
  double optimizer_offload_fraction = 1.0;
  /// Activation offload (Megatron-Core TransformerConfig cpu_offloading with
  /// cpu_offloading_activations, Transformer Engine's get_cpu_offload_context): the saved
  /// activations of the first cpu_offloading_num_layers transformer layers are copied to host
  /// memory after each layer's forward and reloaded before its backward, on a copy stream.
  bool cpu_offloading = false;
  /// Layers whose activations are offloaded, in [0, num_layers) (Megatron's rule).
  int64_t cpu_offloading_num_layers = 0;

  bool fp8() const { return fp8_format.has_value(); }

  // Live training (the executor). Megatron-LM's arguments and defaults
  // (megatron/training/arguments.py); the simulator ignores them.
  std::optional<int64_t> train_iters;      ///< iterations to run (>= 1); no default
  std::optional<double> lr;                ///< peak learning rate (> 0); no default
  double min_lr = 0.0;                     ///< floor of the decay, in [0, lr]
  LrDecayStyle lr_decay_style = LrDecayStyle::kLinear;
  int64_t lr_warmup_iters = 0;             ///< linear warm-up from 0 to lr (>= 0)
  /// Iterations over which lr decays to min_lr (>= 1); train_iters when not given.
  std::optional<int64_t> lr_decay_iters;
  double weight_decay = 0.01;              ///< AdamW decoupled weight decay (>= 0)
  double clip_grad = 1.0;                  ///< max global grad L2 norm; 0 = no clipping
  double adam_beta1 = 0.9;                 ///< in [0, 1)
  double adam_beta2 = 0.999;               ///< in [0, 1)
  double adam_eps = 1e-8;                  ///< > 0
  double hidden_dropout = 0.1;             ///< in [0, 1)
  double attention_dropout = 0.1;          ///< in [0, 1)
  double init_method_std = 0.02;           ///< std of the normal weight init (> 0)
  int64_t seed = 1234;                     ///< random seed (>= 0)
  int64_t log_interval = 100;              ///< iterations between log lines (>= 1)
  int64_t eval_interval = 1000;            ///< iterations between evaluations (>= 1)
  int64_t eval_iters = 100;                ///< iterations per evaluation (>= 0)
  std::optional<int64_t> save_interval;    ///< iterations between checkpoints (>= 1); none = never
};

/// The dtype every matrix product (GEMMs, grouped GEMMs, the attention core) runs in without
/// FP8: training.precision, except fp32 training under float32_matmul_precision high (kTf32) or
/// medium (kFp32Bf16).
inline Precision matmul_precision(const TrainingConfig& t) {
  if (t.precision != Precision::kFp32) return t.precision;
  switch (t.float32_matmul_precision) {
    case Float32MatmulPrecision::kHigh: return Precision::kTf32;
    case Float32MatmulPrecision::kMedium: return Precision::kFp32Bf16;
    case Float32MatmulPrecision::kHighest: break;
  }
  return Precision::kFp32;
}

/// The dtype the GEMMs of the transformer layers run in: kFp8 with training.fp8_format, else
/// matmul_precision(). MFU is taken against this dtype's dense peak (as NVIDIA's DGX Cloud
/// recipes report FP8 runs against the FP8 peak).
inline Precision gemm_precision(const TrainingConfig& t) {
  return t.fp8() ? Precision::kFp8 : matmul_precision(t);
}

/// The training data (the `data:` section; Megatron-LM's data arguments). Every key is optional.
struct DataConfig {
  /// Prefix of a Megatron indexed dataset: data_path + ".bin" / ".idx". Resolved against the
  /// scenario file's folder (given by override: against the current directory); need not exist.
  std::optional<std::filesystem::path> data_path;
  /// Train/validation/test weights, 1 to 3 comma-separated non-negative numbers, not all zero
  /// (Megatron --split; split_fractions() normalizes them).
  std::string split = "969,30,1";
  std::optional<std::filesystem::path> vocab_file;  ///< tokenizer vocabulary (encoder.json)
  std::optional<std::filesystem::path> merge_file;  ///< BPE merges (vocab.bpe)
};

/// The train, validation and test fractions of a --split string such as "969,30,1" or "0.9,0.1":
/// the weights padded with zeros to three and divided by their sum, as Megatron-LM's
/// parse_and_normalize_split (megatron/core/datasets/utils.py). Spaces around a number are
/// allowed. Throws InvalidArgument (naming the text and the rule) for an empty field, a field
/// that is not a finite non-negative decimal number, more than 3 fields, or all zeros.
std::array<double, 3> split_fractions(const std::string& split);

/// One rank whose compute runs slower (or faster) than the others (cluster.what_if.straggler).
struct Straggler {
  int64_t rank = 0;           ///< global rank in [0, num_gpus)
  double compute_scale = 1;   ///< its compute ops' durations are multiplied by this (> 0)
};

/// One platform link with a changed bandwidth (cluster.what_if.degraded_link).
struct DegradedLink {
  std::string name;             ///< a link as Platform::links() names it, e.g. "node3-nic2-up"
  double bandwidth_scale = 1;   ///< its bandwidth is multiplied by this (> 0)
};

/// What-if knobs (cluster.what_if): the cluster as the topology file describes it, changed by
/// these factors. A knob left out is neutral (1.0, no straggler, no degraded link).
struct WhatIf {
  /// NIC and switch-to-switch (InfiniBand) link bandwidths x this.
  std::optional<double> ib_bandwidth_scale;
  /// NVLink bandwidth x this (SimGrid links and the closed forms of collectives inside a node).
  std::optional<double> nvlink_bandwidth_scale;
  /// Every compute op's duration / this (2.0 = a GPU twice as fast).
  std::optional<double> gpu_speed_scale;
  std::optional<Straggler> straggler;
  std::optional<DegradedLink> degraded_link;
  /// MoE routing imbalance: tokens of the busiest expert over the mean (>= 1; 1 = balanced).
  /// Dropless MoE layers take the busiest expert's time, so the expert GEMMs and the dispatch
  /// all-to-all of every rank are scaled by it (capped by the capacity when one is set).
  std::optional<double> moe_load_imbalance;

  /// True when any knob is given (even at its neutral value).
  bool any() const {
    return ib_bandwidth_scale || nvlink_bandwidth_scale || gpu_speed_scale || straggler ||
           degraded_link || moe_load_imbalance;
  }
};

/// The cluster the scenario runs on.
struct ClusterConfig {
  std::filesystem::path topology;  ///< resolved against the scenario file's folder
  int64_t num_gpus = 0;
  /// NCCL algorithm forced for every collective ("ring" | "tree" | "nvls"); "" = chosen per call
  /// like NCCL's tuner (the file's `auto`, the default).
  std::string collective_algorithm;
  WhatIf what_if;  ///< cluster.what_if; empty = the cluster as described
  /// cluster.reliability (`traintwin goodput`): default_reliability() with the file's keys
  /// applied; nullopt when the file has none (the defaults then).
  std::optional<ReliabilitySpec> reliability;
};

/// One complete, validated scenario.
struct Scenario {
  std::string name;
  std::filesystem::path source;  ///< the file it was read from ("" when built in code)
  ModelSpec model;
  ParallelConfig parallel;
  TrainingConfig training;
  ClusterConfig cluster;
  DataConfig data;  ///< the data: section (all defaults when absent)

  /// Micro-batches per pipeline per iteration: B / (b * DP).
  int64_t num_micro_batches() const {
    return training.global_batch_size /
           (training.micro_batch_size * parallel.data_parallel_size);
  }
  int64_t world_size() const { return cluster.num_gpus; }
  /// Ranks a dense parameter's sharded state is split over: DP x CP /
  /// training.num_distributed_optimizer_instances (the sharding group; DP x CP without HSDP).
  int64_t data_parallel_shard_size() const {
    return parallel.data_parallel_size * parallel.context_parallel_size /
           std::max<int64_t>(1, training.num_distributed_optimizer_instances);
  }
};

/// A `key.path=value` override, as given by `--set` (value in YAML syntax).
struct Override {
  std::string key;    ///< dotted path, e.g. "parallelism.tensor_model_parallel_size"
  std::string value;  ///< e.g. "4", "true", "selective"
};

/// Reads, overrides and validates a scenario file.
///
/// File format: the sections and keys are core/scenario_schema.hpp's table (every key's type,
/// unit, default, allowed values and Megatron-LM flag); scenarios/README.md has the reference
/// generated from it (`traintwin keys`). Sections model, training and cluster and the keys marked
/// required must be given; the others default as the table says (Megatron-LM's defaults).
/// Integers are plain YAML integers (not quoted, no 1.5 / 1e3 / 0x10), >= 1 unless said;
/// numbers are plain finite YAML numbers (2, 0.5, 1e-8; not quoted, not .inf); booleans are
/// true/false (also True/TRUE/False/FALSE; not yes/no/on/off); enums are spelt exactly as listed.
/// Unknown and duplicate keys are errors.
///
/// Overrides ("section.key" such as "data.data_path", "name", or a dotted path inside
/// cluster.what_if such as "cluster.what_if.straggler.rank"; the value is a YAML scalar)
/// replace the file's value before validation, and their messages say "--set" instead of
/// file:line. Setting one of virtual_pipeline_model_parallel_size /
/// num_layers_per_virtual_pipeline_stage removes the other from the file. A null value
/// ("KEY=null", "KEY=~" or "KEY=") removes the key, back to its default or derived value. A
/// data_parallel_size given in the file is not re-derived: after an override of TP/CP/PP or
/// num_gpus it must be overridden too (a number, or null to derive it).
/// A relative cluster.topology or data path given by override is relative to the current
/// directory. When the same key is overridden twice, the last one wins.
/// Unknown keys, wrong types, values without the allowed spelling and every rule of
/// validate_scenario() raise ConfigError naming the file, line (when from the file), key and rule.
/// Overrides are applied to the parsed YAML before validation; an override of an unknown key is
/// an error, as in the file.
Scenario load_scenario(const std::filesystem::path& file, const std::vector<Override>& overrides = {});

/// Same as load_scenario() but from YAML text; `origin` names it in messages, and relative
/// `cluster.topology` paths resolve against `base_dir`.
Scenario parse_scenario(const std::string& yaml_text, const std::string& origin,
                        const std::filesystem::path& base_dir,
                        const std::vector<Override>& overrides = {});

/// Sets the keys that `s.model.architecture`'s preset decides (gpt: GPT-3 / Megatron's
/// defaults; llama; nemotron): normalization, activation, position embedding, untied embeddings,
/// linear biases and training.attention_backend. The reader (core/scenario_reader.cpp) applies it
/// before reading the file's keys, so that a key the file gives wins.
void apply_architecture_preset(Scenario& s);

/// The most layer passes (micro-batches x layers per pipeline stage) one rank's Program may hold
/// per iteration: 2^17, about 100x the largest shipped scenario. Memory grows ~14 KB per layer
/// pass (`summary` of gpt-tiny-brown: 2^16 passes, 0.93 GB peak and 2.5 s; 2^20, 14 GB): at the
/// bound about 2 GB, beyond it a machine would run out of memory or time. Context parallelism
/// counts (1 + (CP - 1) / 5) per pass, and every size has an upper bound of its own
/// (core/scenario_rules.hpp).
inline constexpr int64_t kMaxLayerPassesPerRank = int64_t{1} << 17;

/// Checks the cross-key rules (throws ConfigError naming the key(s) and the rule):
/// TP divides heads and ffn_hidden_size; the pipeline split possible (pipeline_layer_split():
/// num_layers divisible by PP x v, or Megatron-Core's uneven rules); num_gpus = TP x CP x PP x DP;
/// global batch divisible by micro batch x DP; interleaving needs micro-batches divisible by PP;
/// GPipe has no model chunks; sequence_parallel needs TP > 1; 2 x CP divides seq_length when
/// CP > 1; query groups divide heads and TP divides query groups; rope needs an even head_dim;
/// cp_comm_type a2a needs CP to divide the heads and query groups per TP rank; fp8_format needs
/// bf16 or fp16; fp8_param_gather needs fp8_format; sizes >= 1;
/// the mixture-of-experts rules (every moe_* setting, EP > 1, ETP and moe_load_imbalance need
/// num_moe_experts >= 1; 1 <= topk <= E; EP divides E; moe_layer_pattern num_layers 0/1 entries
/// with a 1; capacity factor > 0 and needed by padding; ETP divides the expert width, TP the
/// shared expert; ETP x EP divides TP x CP x DP; TP > 1 needs sequence_parallel; EP > 1 needs ep
/// in rank_order; multi_latent_attention refused; moe_load_imbalance >= 1); kv_channels >= 1
/// when set (then hidden_size need not be a multiple of the heads);
/// rank_order is a permutation of tp, cp, dp, pp (and ep); what-if scales positive and finite, the
/// straggler rank in [0, num_gpus), a degraded link named; the live-training keys in their
/// ranges, min_lr <= lr, lr_warmup_iters < lr_decay_iters (or train_iters when lr_decay_iters
/// is not set; Megatron's OptimizerParamScheduler asserts it), data.split well formed;
/// micro-batches x num_layers / PP <= kMaxLayerPassesPerRank.
/// `origin` prefixes the messages.
void validate_scenario(const Scenario& s, const std::string& origin);

/// Parses "KEY=VALUE" (as given to --set). Throws ConfigError when there is no '='.
Override parse_override(const std::string& text);

}  // namespace traintwin
