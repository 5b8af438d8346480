// The scenario schema's table: every key of a scenario file, in the file's order; see
// core/scenario_schema.hpp. The defaults are the Scenario members' initial values
// (core/scenario.hpp) unless an entry says otherwise in words (default_text).
#include "core/scenario_schema.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace traintwin::scenario_schema {

namespace {

using fs_path = std::filesystem::path;
using M = ModelSpec;
using P = ParallelConfig;
using T = TrainingConfig;
using C = ClusterConfig;
using D = DataConfig;
using V = ValueType;

constexpr auto kModel = &Scenario::model;
constexpr auto kPar = &Scenario::parallel;
constexpr auto kTrain = &Scenario::training;
constexpr auto kCluster = &Scenario::cluster;
constexpr auto kData = &Scenario::data;

/// The default of a model key that model.architecture's preset sets (its doc lists them).
constexpr std::string_view kPreset = "architecture preset";

const std::vector<KeySpec>& table() {
  static const std::vector<KeySpec> keys = {
      // ----- the top level --------------------------------------------------------------------
      {.section = "", .key = "name", .type = V::kString, .required = true,
       .doc = "the scenario's name, as reports and summary.json show it",
       .bind = field<&Scenario::name>()},
      {.section = "", .key = "model", .type = V::kMapping, .required = true,
       .doc = "the transformer (section)"},
      {.section = "", .key = "parallelism", .type = V::kMapping,
       .doc = "how the model is split over GPUs (section; optional)"},
      {.section = "", .key = "training", .type = V::kMapping, .required = true,
       .doc = "batch, precision, optimizer and live-training switches (section)"},
      {.section = "", .key = "cluster", .type = V::kMapping, .required = true,
       .doc = "the cluster and its what-if knobs (section)"},
      {.section = "", .key = "data", .type = V::kMapping,
       .doc = "the training data (section; optional, every key optional)"},

      // ----- model ----------------------------------------------------------------------------
      {.section = "model", .key = "architecture", .type = V::kEnum, .values = kArchitectures,
       .doc = "preset of the layer keys: gpt (layernorm, gelu, learned_absolute, tied, biases, "
              "unfused attention), llama (rmsnorm, swiglu, rope, untied, no biases, flash), "
              "nemotron (layernorm, squared_relu, rope, untied, no biases, flash)",
       .bind = field<kModel, &M::architecture>()},
      {.section = "model", .key = "num_layers", .type = V::kInteger, .unit = "layers",
       .required = true, .doc = "transformer layers l", .bind = field<kModel, &M::num_layers>()},
      {.section = "model", .key = "hidden_size", .type = V::kInteger, .required = true,
       .doc = "hidden size h", .bind = field<kModel, &M::hidden_size>()},
      {.section = "model", .key = "num_attention_heads", .type = V::kInteger, .required = true,
       .doc = "attention heads a", .bind = field<kModel, &M::num_attention_heads>()},
      {.section = "model", .key = "num_query_groups", .type = V::kInteger,
       .default_text = "num_attention_heads",
       .doc = "query groups g of grouped-query attention (K/V heads); divides the heads",
       .bind = field<kModel, &M::num_query_groups>()},
      {.section = "model", .key = "kv_channels", .type = V::kInteger,
       .default_text = "hidden_size / num_attention_heads",
       .doc = "channels per attention head d (QKV (a + 2g) d wide, projection input a d)",
       .flag = "--kv-channels", .bind = field<kModel, &M::kv_channels>()},
      {.section = "model", .key = "ffn_hidden_size", .type = V::kInteger,
       .default_text = "4 x hidden_size", .doc = "MLP width (SwiGLU: each of its two halves)",
       .bind = field<kModel, &M::ffn_hidden_size>()},
      {.section = "model", .key = "seq_length", .type = V::kInteger, .unit = "tokens",
       .required = true, .doc = "sequence length s, tokens per sample",
       .bind = field<kModel, &M::seq_length>()},
      {.section = "model", .key = "vocab_size", .type = V::kInteger, .unit = "tokens",
       .required = true, .doc = "vocabulary size V", .bind = field<kModel, &M::vocab_size>()},
      {.section = "model", .key = "normalization", .type = V::kEnum, .default_text = kPreset,
       .values = names_of<Normalization>(), .doc = "normalization of the layers",
       .bind = enum_field<kModel, &M::normalization>()},
      {.section = "model", .key = "activation", .type = V::kEnum, .default_text = kPreset,
       .values = names_of<Activation>(), .doc = "MLP activation (swiglu: gated, FC1 2 x ffn wide)",
       .bind = enum_field<kModel, &M::activation>()},
      {.section = "model", .key = "position_embedding_type", .type = V::kEnum,
       .default_text = kPreset, .values = names_of<PositionEmbedding>(),
       .doc = "learned position table or rotary embeddings",
       .bind = enum_field<kModel, &M::position_embedding_type>()},
      {.section = "model", .key = "rotary_base", .type = V::kNumber, .range = kPositive,
       .doc = "RoPE's base (rope only; Llama 3 uses 500000); no cost in the Program",
       .bind = field<kModel, &M::rotary_base>()},
      {.section = "model", .key = "untie_embeddings_and_output_weights", .type = V::kBoolean,
       .default_text = kPreset, .doc = "the LM head has its own V x h weight",
       .bind = field<kModel, &M::untie_embeddings_and_output_weights>()},
      {.section = "model", .key = "add_bias_linear", .type = V::kBoolean, .default_text = kPreset,
       .doc = "biases in QKV, projection, FC1 and FC2",
       .bind = field<kModel, &M::add_bias_linear>()},
      {.section = "model", .key = "num_moe_experts", .type = V::kInteger,
       .default_text = "none (a dense model)", .doc = "routed experts E per MoE layer",
       .flag = "--num-experts", .bind = field<kModel, &M::num_moe_experts>()},
      {.section = "model", .key = "moe_router_topk", .type = V::kInteger,
       .doc = "experts per token k, in [1, num_moe_experts]", .flag = "--moe-router-topk",
       .bind = field<kModel, &M::moe_router_topk>(), .needs_experts = true},
      {.section = "model", .key = "moe_ffn_hidden_size", .type = V::kInteger,
       .default_text = "ffn_hidden_size", .doc = "width of one routed expert",
       .flag = "--moe-ffn-hidden-size", .bind = field<kModel, &M::moe_ffn_hidden_size>(),
       .needs_experts = true},
      {.section = "model", .key = "moe_shared_expert_intermediate_size", .type = V::kInteger,
       .default_text = "none", .doc = "width of the shared expert that sees every token",
       .flag = "--moe-shared-expert-intermediate-size",
       .bind = field<kModel, &M::moe_shared_expert_intermediate_size>(), .needs_experts = true},
      {.section = "model", .key = "moe_layer_freq", .type = V::kIntegerOrList,
       .default_text = "1",
       .doc = "f: layer i is MoE when i % f == 0; or a list of num_layers 0 (dense) / 1 (MoE)",
       .flag = "--moe-layer-freq", .needs_experts = true},
      {.section = "model", .key = "moe_expert_capacity_factor", .type = V::kNumber,
       .default_text = "null (dropless)", .range = kPositive,
       .doc = "each expert takes at most ceil(tokens x k / E x factor) tokens, the rest drop",
       .flag = "--moe-expert-capacity-factor", .needs_experts = true},
      {.section = "model", .key = "moe_pad_expert_input_to_capacity", .type = V::kBoolean,
       .doc = "pad every expert to its capacity (needs a capacity factor)",
       .flag = "--moe-pad-expert-input-to-capacity",
       .bind = field<kModel, &M::moe_pad_expert_input_to_capacity>(), .needs_experts = true},
      {.section = "model", .key = "moe_token_dispatcher_type", .type = V::kEnum,
       .values = names_of<MoeTokenDispatcher>(),
       .doc = "how tokens reach their experts (all-to-all or all-gather over EP)",
       .flag = "--moe-token-dispatcher-type",
       .bind = enum_field<kModel, &M::moe_token_dispatcher_type>(), .needs_experts = true},
      {.section = "model", .key = "moe_router_load_balancing_type", .type = V::kEnum,
       .values = names_of<MoeLoadBalancing>(),
       .doc = "aux_loss: the Switch Transformer auxiliary loss",
       .flag = "--moe-router-load-balancing-type",
       .bind = enum_field<kModel, &M::moe_router_load_balancing_type>(), .needs_experts = true},
      {.section = "model", .key = "moe_aux_loss_coeff", .type = V::kNumber, .range = kNonNegative,
       .doc = "weight of the auxiliary loss", .flag = "--moe-aux-loss-coeff",
       .bind = field<kModel, &M::moe_aux_loss_coeff>(), .needs_experts = true},
      {.section = "model", .key = "moe_grouped_gemm", .type = V::kBoolean,
       .doc = "the local experts run as one grouped GEMM", .flag = "--moe-grouped-gemm",
       .bind = field<kModel, &M::moe_grouped_gemm>(), .needs_experts = true},
      {.section = "model", .key = "moe_permute_fusion", .type = V::kBoolean,
       .doc = "the token permute and unpermute run as Transformer Engine's fused kernels",
       .flag = "--moe-permute-fusion",
       .bind = field<kModel, &M::moe_permute_fusion>(), .needs_experts = true},
      {.section = "model", .key = "multi_latent_attention", .type = V::kBoolean,
       .doc = "DeepSeek-V3's multi-latent attention: true is refused (not supported yet)",
       .bind = field<kModel, &M::multi_latent_attention>()},

      // ----- parallelism ----------------------------------------------------------------------
      {.section = "parallelism", .key = "tensor_model_parallel_size", .type = V::kInteger,
       .unit = "GPUs", .doc = "TP: divides the heads and ffn_hidden_size",
       .flag = "--tensor-model-parallel-size",
       .bind = field<kPar, &P::tensor_model_parallel_size>()},
      {.section = "parallelism", .key = "pipeline_model_parallel_size", .type = V::kInteger,
       .unit = "stages", .doc = "PP: pipeline stages", .flag = "--pipeline-model-parallel-size",
       .bind = field<kPar, &P::pipeline_model_parallel_size>()},
      {.section = "parallelism", .key = "virtual_pipeline_model_parallel_size",
       .type = V::kInteger, .default_text = "1",
       .doc = "v: model chunks per pipeline rank (interleaved 1F1B when > 1)",
       .flag = "--virtual-pipeline-model-parallel-size"},
      {.section = "parallelism", .key = "num_layers_per_virtual_pipeline_stage",
       .type = V::kInteger, .unit = "layers", .default_text = "none",
       .doc = "N instead of v: v = num_layers / (PP x N); not both in one source",
       .flag = "--num-layers-per-virtual-pipeline-stage"},
      {.section = "parallelism", .key = "decoder_first_pipeline_num_layers", .type = V::kInteger,
       .unit = "layers", .doc = "transformer layers of pipeline stage 0 (uneven split)",
       .flag = "--decoder-first-pipeline-num-layers",
       .bind = field<kPar, &P::decoder_first_pipeline_num_layers>()},
      {.section = "parallelism", .key = "decoder_last_pipeline_num_layers", .type = V::kInteger,
       .unit = "layers", .doc = "transformer layers of the last pipeline stage (uneven split)",
       .flag = "--decoder-last-pipeline-num-layers",
       .bind = field<kPar, &P::decoder_last_pipeline_num_layers>()},
      {.section = "parallelism", .key = "account_for_embedding_in_pipeline_split",
       .type = V::kBoolean, .doc = "the embedding counts as one layer in the pipeline split",
       .flag = "--account-for-embedding-in-pipeline-split",
       .bind = field<kPar, &P::account_for_embedding_in_pipeline_split>()},
      {.section = "parallelism", .key = "account_for_loss_in_pipeline_split",
       .type = V::kBoolean, .doc = "the LM head and loss count as one layer in the split",
       .flag = "--account-for-loss-in-pipeline-split",
       .bind = field<kPar, &P::account_for_loss_in_pipeline_split>()},
      {.section = "parallelism", .key = "pipeline_model_parallel_layout", .type = V::kString,
       .default_text = "none",
       .doc = "the layers of each virtual stage, stages in order split by '|': t a transformer "
              "layer, E the embedding (first stage), L the loss (last stage), X*N and (...)*N "
              "repeats, ',' a separator (Megatron-Core's custom layout, e.g. \"Et*3|(tt|)*6,tL\"); "
              "PP x v stages; not with the other uneven-split keys",
       .flag = "--pipeline-model-parallel-layout",
       .bind = field<kPar, &P::pipeline_model_parallel_layout>()},
      {.section = "parallelism", .key = "context_parallel_size", .type = V::kInteger,
       .unit = "GPUs", .doc = "CP: > 1 needs seq_length divisible by 2 x CP",
       .flag = "--context-parallel-size", .bind = field<kPar, &P::context_parallel_size>()},
      {.section = "parallelism", .key = "cp_comm_type", .type = V::kEnum,
       .values = names_of<CpCommType>(),
       .doc = "CP attention exchange: p2p (ring attention), a2a (Ulysses), all_gather",
       .flag = "--cp-comm-type", .bind = enum_field<kPar, &P::cp_comm_type>()},
      {.section = "parallelism", .key = "expert_model_parallel_size", .type = V::kInteger,
       .unit = "GPUs", .doc = "EP: ranks the routed experts are split over",
       .flag = "--expert-model-parallel-size",
       .bind = field<kPar, &P::expert_model_parallel_size>(), .needs_experts = true},
      {.section = "parallelism", .key = "expert_tensor_parallel_size", .type = V::kInteger,
       .unit = "GPUs", .default_text = "tensor_model_parallel_size",
       .doc = "ETP: tensor parallelism inside each expert", .flag = "--expert-tensor-parallel-size",
       .bind = field<kPar, &P::expert_tensor_parallel_size>(), .needs_experts = true},
      {.section = "parallelism", .key = "sequence_parallel", .type = V::kBoolean,
       .doc = "SP: needs TP > 1", .flag = "--sequence-parallel",
       .bind = field<kPar, &P::sequence_parallel>()},
      {.section = "parallelism", .key = "scatter_gather_tensors_in_pipeline", .type = V::kBoolean,
       .doc = "Megatron-LM's pipeline scatter/gather (Narayanan et al. 2021, section 4.1; on by "
              "default in Megatron-LM before Megatron-Core): without SP each TP rank sends 1/TP of "
              "a stage's activation or gradient and the receiving TP group all-gathers it; no "
              "effect with SP or TP = 1",
       .bind = field<kPar, &P::scatter_gather_tensors_in_pipeline>()},
      {.section = "parallelism", .key = "data_parallel_size", .type = V::kInteger,
       .unit = "GPUs", .default_text = "num_gpus / (TP x CP x PP)",
       .doc = "DP: must equal num_gpus / (TP x CP x PP) when given"},
      {.section = "parallelism", .key = "pipeline_schedule", .type = V::kEnum,
       .values = names_of<PipelineScheduleKind>(),
       .doc = "pipeline schedule (1f1b is interleaved 1F1B when v > 1; zb-h1 and zb-h2 are "
              "the zero-bubble schedules, Qi et al. 2024, which need v = 1 and micro-batches >= PP; "
              "zb-v, the same paper's V schedule, and dualpipev, DeepSeek's DualPipeV, need v = 2 "
              "and micro-batches >= 2 x PP (zb-v runs the order the authors' runtime builds with "
              "their V scheduler from profiled pass costs, here the estimator's per-stage step "
              "times and the p2p time, in simulate and estimate; the executor, which profiles "
              "nothing, runs the order that scheduler gives for equal costs without "
              "communication); dualpipe, DeepSeek's bidirectional DualPipe, needs an "
              "even PP, v = 2 (two parameter copies of whole stages) and an even number of "
              "micro-batches >= 2 x PP)",
       .flag = "--pipeline-schedule",
       .bind = enum_field<kPar, &P::pipeline_schedule>()},
      {.section = "parallelism", .key = "rank_order", .type = V::kString,
       .doc = "dash-separated, fastest-varying first; ep may be left out when EP = 1",
       .bind = field<kPar, &P::rank_order>()},

      // ----- training -------------------------------------------------------------------------
      {.section = "training", .key = "micro_batch_size", .type = V::kInteger, .unit = "samples",
       .required = true, .doc = "b: samples per micro-batch", .flag = "--micro-batch-size",
       .bind = field<kTrain, &T::micro_batch_size>()},
      {.section = "training", .key = "global_batch_size", .type = V::kInteger, .unit = "samples",
       .required = true, .doc = "B: samples per iteration over all DP replicas",
       .flag = "--global-batch-size", .bind = field<kTrain, &T::global_batch_size>()},
      {.section = "training", .key = "precision", .type = V::kEnum, .required = true,
       .values = kTrainingPrecisions, .doc = "parameters and activations (Megatron --bf16/--fp16)",
       .bind = enum_field<kTrain, &T::precision>()},
      {.section = "training", .key = "float32_matmul_precision", .type = V::kEnum,
       .values = names_of<Float32MatmulPrecision>(),
       .doc = "fp32 matrix products: highest fp32, high TF32, medium bf16 (needs precision fp32)",
       .flag = "--float32-matmul-precision",
       .bind = enum_field<kTrain, &T::float32_matmul_precision>()},
      {.section = "training", .key = "recompute_granularity", .type = V::kEnum,
       .values = names_of<RecomputeGranularity>(), .doc = "activation recomputation",
       .flag = "--recompute-granularity", .bind = enum_field<kTrain, &T::recompute_granularity>()},
      {.section = "training", .key = "selective_ac_option", .type = V::kEnum,
       .values = names_of<SelectiveAcOption>(),
       .doc = "what recompute_granularity selective recomputes: core_attn the attention core "
              "(Megatron-LM's selective, --recompute-modules core_attn); op torchtitan's "
              "op-level selective activation checkpointing ([activation_checkpoint] "
              "selective_ac_option = \"op\"): each layer keeps its input and the outputs of "
              "every other matmul (wq, wv, w1, w2) and of the SDPA kernel, and recomputes the "
              "rest (wk, wo, w3 and the element-wise ops) before its backward (needs "
              "recompute_granularity selective, a dense SwiGLU layer without linear biases, "
              "attention_backend flash, no FP8, TP = CP = 1; torchtitan's integer option, every "
              "n-th layer fully, is not modelled)",
       .bind = enum_field<kTrain, &T::selective_ac_option>()},
      {.section = "training", .key = "cross_entropy_loss", .type = V::kEnum,
       .values = names_of<CrossEntropyLoss>(),
       .doc = "where the loss computes its fp32 logits: vocab_parallel Megatron-Core's "
              "vocab-parallel cross-entropy (one fp32 copy, softmax in place, kept for the "
              "backward: 4 bytes per logit); torch torch.nn.functional.cross_entropy on the "
              "logits cast to fp32, as torchtitan's cross_entropy_loss (log_softmax's fp32 "
              "output kept, 4 bytes per logit, plus 8 while the loss backward runs: nll_loss's "
              "dense fp32 gradient and log_softmax's fp32 input gradient); memory only, the loss "
              "kernels of the Program are the same",
       .bind = enum_field<kTrain, &T::cross_entropy_loss>()},
      {.section = "training", .key = "attention_backend", .type = V::kEnum,
       .default_text = "architecture preset (gpt unfused, llama and nemotron flash)",
       .values = names_of<AttentionBackend>(),
       .doc = "flash stores no s x s scores (Dao et al. 2022); fused is the same function as "
              "cuDNN's fused attention (Megatron --attention-backend fused, Transformer Engine's "
              "FusedAttention): on the cuda backend one cuDNN graph per pass, multi-head, bf16 "
              "products, no attention dropout, CP = 1 (kernels fused_attention_fwd/bwd)",
       .bind = enum_field<kTrain, &T::attention_backend>()},
      {.section = "training", .key = "use_distributed_optimizer", .type = V::kBoolean,
       .doc = "ZeRO-1: optimizer state sharded over DP", .flag = "--use-distributed-optimizer",
       .bind = field<kTrain, &T::use_distributed_optimizer>()},
      {.section = "training", .key = "use_megatron_fsdp", .type = V::kBoolean,
       .doc = "Megatron-FSDP: shard over DP as data_parallel_sharding_strategy says (needs "
              "use_distributed_optimizer)",
       .flag = "--use-megatron-fsdp", .bind = field<kTrain, &T::use_megatron_fsdp>()},
      {.section = "training", .key = "data_parallel_sharding_strategy", .type = V::kEnum,
       .values = names_of<DataParallelShardingStrategy>(),
       .doc = "Megatron-FSDP sharding: optim ZeRO-1, optim_grads ZeRO-2, optim_grads_params "
              "ZeRO-3 (Rajbhandari et al. 2020)",
       .flag = "--data-parallel-sharding-strategy",
       .bind = enum_field<kTrain, &T::data_parallel_sharding_strategy>()},
      {.section = "training", .key = "num_distributed_optimizer_instances", .type = V::kInteger,
       .unit = "replicas",
       .doc = "HSDP: DP x CP splits into this many sharding groups of DP x CP / N consecutive "
              "ranks, sharded inside, replicated across (gradient shards all-reduced over the "
              "N replicas); torchtitan data_parallel_replicate_degree = N, "
              "data_parallel_shard_degree = DP x CP / N (needs use_distributed_optimizer)",
       .flag = "--num-distributed-optimizer-instances",
       .bind = field<kTrain, &T::num_distributed_optimizer_instances>()},
      {.section = "training", .key = "reshard_after_forward", .type = V::kBoolean,
       .doc = "ZeRO-3/FSDP: free each unit's gathered parameters after its forward and "
              "all-gather them again before its backward; false keeps them from forward to "
              "backward (no backward all-gather, every unit of the stage held whole; without "
              "PP each micro-batch's forward gathers again, as FSDP2's reshard_after_backward; "
              "with PP only the first forward of each model chunk, the units kept for the step "
              "as torch.distributed.pipelining keeps them, which also accumulates the "
              "gradients unsharded and reduce-scatters them in each chunk's last backward "
              "only). "
              "Megatron-Core and PyTorch FSDP2 reshard_after_forward; torchtitan "
              "fsdp_reshard_after_forward always = true, never = false (its default: never "
              "with PP, else always); Megatron --torch-fsdp2-no-reshard-after-forward = false; "
              "FSDP1 FULL_SHARD = true, SHARD_GRAD_OP = false (needs "
              "data_parallel_sharding_strategy optim_grads_params)",
       .bind = field<kTrain, &T::reshard_after_forward>()},
      {.section = "training", .key = "fsdp_prefetch_depth", .type = V::kInteger,
       .unit = "units", .min = 0,
       .doc = "ZeRO-3/FSDP: the units (transformer layers) whose parameter all-gathers are "
              "issued ahead of the running one, in each pass's order within a model chunk; "
              "1 = Megatron-FSDP's default and FSDP1 forward_prefetch with backward_prefetch "
              "BACKWARD_PRE, N = FSDP2 set_modules_to_forward_prefetch / "
              "set_modules_to_backward_prefetch with the next N modules, 0 = none. Megatron-FSDP "
              "suggested_communication_unit_size and DeepSpeed stage3_prefetch_bucket_size give "
              "the same budget in elements (about N units' parameters) (needs "
              "data_parallel_sharding_strategy optim_grads_params)",
       .bind = field<kTrain, &T::fsdp_prefetch_depth>()},
      {.section = "training", .key = "overlap_grad_reduce", .type = V::kBoolean,
       .doc = "DP gradient reduce in buckets during backward",
       .bind = field<kTrain, &T::overlap_grad_reduce>()},
      {.section = "training", .key = "overlap_param_gather", .type = V::kBoolean,
       .doc = "parameter all-gather overlapped with forward (needs the distributed optimizer)",
       .bind = field<kTrain, &T::overlap_param_gather>()},
      {.section = "training", .key = "tp_comm_overlap", .type = V::kBoolean,
       .doc = "TP collectives pipelined with their GEMMs (needs sequence_parallel)",
       .bind = field<kTrain, &T::tp_comm_overlap>()},
      {.section = "training", .key = "async_tensor_model_parallel_allreduce", .type = V::kBoolean,
       .doc = "without SP: a column-parallel layer's input-gradient all-reduce hidden behind its "
              "weight-gradient GEMM (Megatron's default since Oct 2021); false: after the whole "
              "backward, blocking (--no-async-tensor-model-parallel-allreduce)",
       .bind = field<kTrain, &T::async_tensor_model_parallel_allreduce>()},
      {.section = "training", .key = "cross_entropy_loss_fusion", .type = V::kBoolean,
       .doc = "Megatron's fused vocab-parallel cross entropy: 32 instead of 52 bytes per logit "
              "(needs precision bf16)",
       .flag = "--cross-entropy-loss-fusion",
       .bind = field<kTrain, &T::cross_entropy_loss_fusion>()},
      {.section = "training", .key = "gradient_accumulation_fusion", .type = V::kBoolean,
       .doc = "weight-gradient GEMMs accumulate straight into main_grad (Megatron-LM since "
              "83b1e42f30, Feb 2022); false: param.grad then a hook's add per layer and "
              "micro-batch, 6 B/param fp16, 10 bf16 (Megatron of 2021, "
              "--no-gradient-accumulation-fusion; needs zero stage < 2)",
       .bind = field<kTrain, &T::gradient_accumulation_fusion>()},
      {.section = "training", .key = "fp8_format", .type = V::kEnum, .default_text = "none",
       .values = names_of<Fp8Format>(),
       .doc = "FP8 GEMMs on top of bf16/fp16: hybrid (E4M3 fwd, E5M2 grads) or e4m3",
       .flag = "--fp8-format", .bind = enum_field<kTrain, &T::fp8_format>()},
      {.section = "training", .key = "fp8_recipe", .type = V::kEnum,
       .values = names_of<Fp8Recipe>(), .doc = "FP8 scaling recipe (needs fp8_format)",
       .flag = "--fp8-recipe", .bind = enum_field<kTrain, &T::fp8_recipe>()},
      {.section = "training", .key = "fp8_param_gather", .type = V::kBoolean,
       .doc = "GEMM weights kept and all-gathered in FP8 (needs fp8_format)",
       .flag = "--fp8-param-gather", .bind = field<kTrain, &T::fp8_param_gather>()},
      {.section = "training", .key = "optimizer_cpu_offload", .type = V::kBoolean,
       .doc = "Megatron-Core's HybridDeviceOptimizer: optimizer_offload_fraction of the rank's "
              "optimizer shard (fp32 main params, Adam moments) in host memory, stepped by the "
              "host CPU's AdamW; per iteration its fp32 grads copied D2H before the step and its "
              "params H2D after (needs use_distributed_optimizer, as Megatron's "
              "--use-precision-aware-optimizer, and the topology's gpu.host_link)",
       .flag = "--optimizer-cpu-offload", .bind = field<kTrain, &T::optimizer_cpu_offload>()},
      {.section = "training", .key = "optimizer_offload_fraction", .type = V::kNumber,
       .range = Interval{0, false, 1, false},
       .doc = "share of the optimizer shard's parameters offloaded (needs "
              "optimizer_cpu_offload)",
       .flag = "--optimizer-offload-fraction",
       .bind = field<kTrain, &T::optimizer_offload_fraction>(),
       .note = "the share of the optimizer state offloaded"},
      {.section = "training", .key = "cpu_offloading", .type = V::kBoolean,
       .doc = "activation offload (Megatron-Core cpu_offloading, Transformer Engine's CPU "
              "offload): the first cpu_offloading_num_layers layers' saved activations copied "
              "to host memory after their forward and reloaded before their backward, on the "
              "offload stream (needs pipeline_model_parallel_size 1, no recomputation, and the "
              "topology's gpu.host_link)",
       .flag = "--cpu-offloading", .bind = field<kTrain, &T::cpu_offloading>()},
      {.section = "training", .key = "cpu_offloading_num_layers", .type = V::kInteger,
       .unit = "layers", .min = 0,
       .doc = "layers whose activations are offloaded, in [0, num_layers) (needs "
              "cpu_offloading)",
       .flag = "--cpu-offloading-num-layers",
       .bind = field<kTrain, &T::cpu_offloading_num_layers>()},
      {.section = "training", .key = "train_iters", .type = V::kInteger, .unit = "iterations",
       .doc = "iterations to train", .flag = "--train-iters",
       .bind = field<kTrain, &T::train_iters>(), .executor_only = true},
      {.section = "training", .key = "lr", .type = V::kNumber, .range = kPositive,
       .doc = "peak learning rate", .flag = "--lr", .bind = field<kTrain, &T::lr>(),
       .note = "the peak learning rate", .executor_only = true},
      {.section = "training", .key = "min_lr", .type = V::kNumber, .range = kNonNegative,
       .doc = "the floor the learning rate decays to (<= lr)", .flag = "--min-lr",
       .bind = field<kTrain, &T::min_lr>(), .note = "the floor the learning rate decays to",
       .executor_only = true},
      {.section = "training", .key = "lr_decay_style", .type = V::kEnum,
       .values = names_of<LrDecayStyle>(), .doc = "learning-rate decay after warm-up",
       .flag = "--lr-decay-style", .bind = enum_field<kTrain, &T::lr_decay_style>(),
       .executor_only = true},
      {.section = "training", .key = "lr_warmup_iters", .type = V::kInteger,
       .unit = "iterations", .min = 0, .doc = "linear warm-up from 0 to lr (< lr_decay_iters)",
       .flag = "--lr-warmup-iters", .bind = field<kTrain, &T::lr_warmup_iters>(),
       .executor_only = true},
      {.section = "training", .key = "lr_decay_iters", .type = V::kInteger, .unit = "iterations",
       .default_text = "train_iters", .doc = "iterations over which lr decays to min_lr",
       .flag = "--lr-decay-iters", .bind = field<kTrain, &T::lr_decay_iters>(),
       .executor_only = true},
      {.section = "training", .key = "weight_decay", .type = V::kNumber, .range = kNonNegative,
       .doc = "AdamW decoupled weight decay", .flag = "--weight-decay",
       .bind = field<kTrain, &T::weight_decay>(), .note = "AdamW weight decay",
       .executor_only = true},
      {.section = "training", .key = "clip_grad", .type = V::kNumber, .range = kNonNegative,
       .doc = "the largest global gradient L2 norm; 0 = no clipping", .flag = "--clip-grad",
       .bind = field<kTrain, &T::clip_grad>(),
       .note = "the largest global gradient norm; 0 = no clipping", .executor_only = true},
      {.section = "training", .key = "adam_beta1", .type = V::kNumber, .range = kUnitHalfOpen,
       .doc = "Adam's first-moment decay", .flag = "--adam-beta1",
       .bind = field<kTrain, &T::adam_beta1>(), .note = "Adam's first-moment decay",
       .executor_only = true},
      {.section = "training", .key = "adam_beta2", .type = V::kNumber, .range = kUnitHalfOpen,
       .doc = "Adam's second-moment decay", .flag = "--adam-beta2",
       .bind = field<kTrain, &T::adam_beta2>(), .note = "Adam's second-moment decay",
       .executor_only = true},
      {.section = "training", .key = "adam_eps", .type = V::kNumber, .range = kPositive,
       .doc = "Adam's denominator term", .flag = "--adam-eps",
       .bind = field<kTrain, &T::adam_eps>(), .note = "Adam's denominator term",
       .executor_only = true},
      {.section = "training", .key = "hidden_dropout", .type = V::kNumber,
       .range = kUnitHalfOpen, .doc = "dropout probability after the projections and FC2",
       .flag = "--hidden-dropout", .bind = field<kTrain, &T::hidden_dropout>(),
       .note = "a probability", .executor_only = true},
      {.section = "training", .key = "attention_dropout", .type = V::kNumber,
       .range = kUnitHalfOpen, .doc = "dropout probability of the attention weights",
       .flag = "--attention-dropout", .bind = field<kTrain, &T::attention_dropout>(),
       .note = "a probability", .executor_only = true},
      {.section = "training", .key = "init_method_std", .type = V::kNumber, .range = kPositive,
       .doc = "standard deviation of the normal weight initialization",
       .flag = "--init-method-std", .bind = field<kTrain, &T::init_method_std>(),
       .note = "the standard deviation of the weight initialization", .executor_only = true},
      {.section = "training", .key = "seed", .type = V::kInteger, .min = 0, .doc = "random seed",
       .flag = "--seed", .bind = field<kTrain, &T::seed>(), .executor_only = true},
      {.section = "training", .key = "log_interval", .type = V::kInteger, .unit = "iterations",
       .doc = "iterations between log lines", .flag = "--log-interval",
       .bind = field<kTrain, &T::log_interval>(), .executor_only = true},
      {.section = "training", .key = "eval_interval", .type = V::kInteger, .unit = "iterations",
       .doc = "iterations between evaluations", .flag = "--eval-interval",
       .bind = field<kTrain, &T::eval_interval>(), .executor_only = true},
      {.section = "training", .key = "eval_iters", .type = V::kInteger, .unit = "iterations",
       .min = 0, .doc = "iterations per evaluation", .flag = "--eval-iters",
       .bind = field<kTrain, &T::eval_iters>(), .executor_only = true},
      {.section = "training", .key = "save_interval", .type = V::kInteger, .unit = "iterations",
       .default_text = "none (no checkpoints)", .doc = "iterations between checkpoints",
       .flag = "--save-interval", .bind = field<kTrain, &T::save_interval>(),
       .executor_only = true},

      // ----- cluster --------------------------------------------------------------------------
      {.section = "cluster", .key = "topology", .type = V::kPath, .required = true,
       .doc = "topology file (topologies/*.yaml); need not exist yet",
       .bind = field<kCluster, &C::topology>()},
      {.section = "cluster", .key = "num_gpus", .type = V::kInteger, .unit = "GPUs",
       .required = true, .doc = "cluster size = TP x CP x PP x DP", .flag = "--num-gpus",
       .bind = field<kCluster, &C::num_gpus>()},
      {.section = "cluster", .key = "collective_algorithm", .type = V::kEnum,
       .default_text = "auto", .values = kCollectiveAlgorithms,
       .doc = "NCCL algorithm forced for every collective; auto = chosen per call"},
      {.section = "cluster", .key = "what_if", .type = V::kMapping, .default_text = "none",
       .doc = "changes to the cluster the topology file describes (a mapping)"},
      {.section = "cluster.what_if", .key = "ib_bandwidth_scale", .type = V::kNumber,
       .default_text = "1", .range = kScale,
       .doc = "NIC and switch-to-switch link bandwidths x this"},
      {.section = "cluster.what_if", .key = "nvlink_bandwidth_scale", .type = V::kNumber,
       .default_text = "1", .range = kScale,
       .doc = "NVLink bandwidth x this (links and in-node collectives)"},
      {.section = "cluster.what_if", .key = "gpu_speed_scale", .type = V::kNumber,
       .default_text = "1", .range = kScale, .doc = "every compute op's duration / this"},
      {.section = "cluster.what_if", .key = "straggler", .type = V::kMapping,
       .default_text = "none", .doc = "one rank whose compute is slower (both keys required)"},
      {.section = "cluster.what_if", .key = "degraded_link", .type = V::kMapping,
       .default_text = "none", .doc = "one platform link with less bandwidth (both keys required)"},
      {.section = "cluster.what_if", .key = "moe_load_imbalance", .type = V::kNumber,
       .default_text = "1 (balanced)", .range = Interval{1, false},
       .doc = "MoE only: the busiest expert's tokens over the mean", .needs_experts = true},
      {.section = "cluster.what_if.straggler", .key = "rank", .type = V::kInteger,
       .required = true, .min = 0, .doc = "its global rank, in [0, num_gpus)"},
      {.section = "cluster.what_if.straggler", .key = "compute_scale", .type = V::kNumber,
       .required = true, .range = kScale, .doc = "its compute ops' durations x this"},
      {.section = "cluster.what_if.degraded_link", .key = "name", .type = V::kString,
       .required = true,
       .doc = "a platform link's name, e.g. node3-nic2-up (checked when the platform is built)"},
      {.section = "cluster.what_if.degraded_link", .key = "bandwidth_scale", .type = V::kNumber,
       .required = true, .range = kScale, .doc = "its bandwidth x this"},

      {.section = "cluster",
       .key = "reliability",
       .type = V::kMapping,
       .default_text = "Llama 3's failure rates, the defaults below",
       .doc = "failures, interruptions, restart and checkpoint costs for `traintwin goodput` "
              "(core/reliability.hpp; a mapping)"},
      {.section = "cluster.reliability",
       .key = "failure_rates",
       .type = V::kMapping,
       .default_text = "Llama 3's (Dubey et al. 2024, Table 5)",
       .doc = "per component class, failures per 1000 node-days; 0 removes a class"},
      {.section = "cluster.reliability",
       .key = "weibull_shapes",
       .type = V::kMapping,
       .default_text = "1 for every class",
       .doc = "per component class, the Weibull shape of its inter-failure times (1: exponential)"},
      {.section = "cluster.reliability",
       .key = "planned_interruptions_per_1000_node_days",
       .type = V::kNumber,
       .default_text = "0.4250",
       .range = kNonNegative,
       .doc = "planned interruptions (maintenance; no progress lost), Llama 3's 47"},
      {.section = "cluster.reliability",
       .key = "detection_s",
       .type = V::kNumber,
       .unit = "s",
       .default_text = "600",
       .range = kNonNegative,
       .doc = "failure until the job is declared dead (PyTorch's NCCL timeout)"},
      {.section = "cluster.reliability",
       .key = "requeue_s",
       .type = V::kNumber,
       .unit = "s",
       .default_text = "120",
       .range = kNonNegative,
       .doc = "re-queue and node swap (an assumption)"},
      {.section = "cluster.reliability",
       .key = "process_start_s",
       .type = V::kNumber,
       .unit = "s",
       .default_text = "60",
       .range = kNonNegative,
       .doc = "process start, imports, model build (an assumption)"},
      {.section = "cluster.reliability",
       .key = "communicator_init_s",
       .type = V::kNumber,
       .unit = "s",
       .default_text = "10",
       .range = kNonNegative,
       .doc = "communicator set-up, fixed part (an assumption)"},
      {.section = "cluster.reliability",
       .key = "communicator_init_s_per_1000_gpus",
       .type = V::kNumber,
       .unit = "s",
       .default_text = "2",
       .range = kNonNegative,
       .doc = "communicator set-up per 1000 GPUs (an assumption)"},
      {.section = "cluster.reliability",
       .key = "storage_write_GBps_per_node",
       .type = V::kNumber,
       .unit = "GB/s",
       .default_text = "10",
       .range = kPositive,
       .doc = "checkpoint write rate of one node"},
      {.section = "cluster.reliability",
       .key = "storage_read_GBps_per_node",
       .type = V::kNumber,
       .unit = "GB/s",
       .default_text = "10",
       .range = kPositive,
       .doc = "checkpoint read rate of one node"},
      {.section = "cluster.reliability",
       .key = "filesystem_GBps",
       .type = V::kNumber,
       .unit = "GB/s",
       .default_text = "2000",
       .range = kPositive,
       .doc = "all nodes together at most (Llama 3's Tectonic: 2 TB/s)"},
      {.section = "cluster.reliability",
       .key = "async_save",
       .type = V::kBoolean,
       .default_text = "false",
       .doc = "stall async_save_stall_s, then write in the background"},
      {.section = "cluster.reliability",
       .key = "async_save_stall_s",
       .type = V::kNumber,
       .unit = "s",
       .default_text = "5",
       .range = kNonNegative,
       .doc = "an asynchronous save's stall"},
      {.section = "cluster.reliability",
       .key = "spare_nodes",
       .type = V::kInteger,
       .unit = "nodes",
       .default_text = "32",
       .min = 0,
       .doc = "spares that replace a failed node at once, at most the job's nodes"},
      {.section = "cluster.reliability",
       .key = "node_repair_hours",
       .type = V::kNumber,
       .unit = "h",
       .default_text = "24",
       .range = kPositive,
       .doc = "a failed node's return to the spare pool"},
      {.section = "cluster.reliability",
       .key = "straggler_rate_per_1000_node_days",
       .type = V::kNumber,
       .unit = "per 1000 node-days",
       .default_text = "0 (off)",
       .range = kNonNegative,
       .doc = "straggler episodes per node (one GPU's compute slower; sim/degraded_states.hpp)"},
      {.section = "cluster.reliability",
       .key = "straggler_duration_s",
       .type = V::kNumber,
       .unit = "s",
       .default_text = "3600",
       .range = kPositive,
       .doc = "mean straggler episode (an assumption)"},
      {.section = "cluster.reliability",
       .key = "straggler_slowdown",
       .type = V::kNumber,
       .default_text = "2",
       .range = kAtLeastOne,
       .doc = "the straggler's compute durations x this (an assumption)"},
      {.section = "cluster.reliability",
       .key = "link_down_rate_per_1000_node_days",
       .type = V::kNumber,
       .unit = "per 1000 node-days",
       .default_text = "0 (off)",
       .range = kNonNegative,
       .doc = "leaf-spine links down per node (flows spread over the leaf's other uplinks)"},
      {.section = "cluster.reliability",
       .key = "link_down_duration_s",
       .type = V::kNumber,
       .unit = "s",
       .default_text = "14400",
       .range = kPositive,
       .doc = "mean time a link stays down (an assumption)"},
      {.section = "cluster.reliability",
       .key = "nic_down_rate_per_1000_node_days",
       .type = V::kNumber,
       .unit = "per 1000 node-days",
       .default_text = "0 (off)",
       .range = kNonNegative,
       .doc = "NICs down per node (its rail over NVLink to the next NIC, PXN)"},
      {.section = "cluster.reliability",
       .key = "nic_down_duration_s",
       .type = V::kNumber,
       .unit = "s",
       .default_text = "14400",
       .range = kPositive,
       .doc = "mean time a NIC stays down (an assumption)"},
      {.section = "cluster.reliability",
       .key = "link_flap_rate_per_1000_node_days",
       .type = V::kNumber,
       .unit = "per 1000 node-days",
       .default_text = "0 (off)",
       .range = kNonNegative,
       .doc = "flapping NIC-leaf link episodes per node (reduced bandwidth)"},
      {.section = "cluster.reliability",
       .key = "link_flap_duration_s",
       .type = V::kNumber,
       .unit = "s",
       .default_text = "3600",
       .range = kPositive,
       .doc = "mean flapping episode (an assumption)"},
      {.section = "cluster.reliability",
       .key = "link_flap_bandwidth_factor",
       .type = V::kNumber,
       .default_text = "0.5",
       .range = kUnitOpenClosed,
       .doc = "a flapping link's bandwidth x this (an assumption)"},
      {.section = "cluster.reliability.failure_rates",
       .key = "gpu",
       .type = V::kNumber,
       .unit = "per 1000 node-days",
       .default_text = "1.6638",
       .range = kNonNegative,
       .doc = "faulty GPU, GPU SRAM and system processor (Llama 3: 184 of 419)"},
      {.section = "cluster.reliability.failure_rates",
       .key = "hbm",
       .type = V::kNumber,
       .unit = "per 1000 node-days",
       .default_text = "0.6510",
       .range = kNonNegative,
       .doc = "GPU HBM memory (Llama 3: 72)"},
      {.section = "cluster.reliability.failure_rates",
       .key = "nic",
       .type = V::kNumber,
       .unit = "per 1000 node-days",
       .default_text = "none",
       .range = kNonNegative,
       .doc = "network cards, when counted apart from network"},
      {.section = "cluster.reliability.failure_rates",
       .key = "network",
       .type = V::kNumber,
       .unit = "per 1000 node-days",
       .default_text = "0.3165",
       .range = kNonNegative,
       .doc = "network switches and cables (Llama 3: 35)"},
      {.section = "cluster.reliability.failure_rates",
       .key = "cpu",
       .type = V::kNumber,
       .unit = "per 1000 node-days",
       .default_text = "0.0181",
       .range = kNonNegative,
       .doc = "CPUs (Llama 3: 2)"},
      {.section = "cluster.reliability.failure_rates",
       .key = "host",
       .type = V::kNumber,
       .unit = "per 1000 node-days",
       .default_text = "none",
       .range = kNonNegative,
       .doc = "host memory, power, chassis, SSDs, maintenance, when counted apart"},
      {.section = "cluster.reliability.failure_rates",
       .key = "software",
       .type = V::kNumber,
       .unit = "per 1000 node-days",
       .default_text = "none",
       .range = kNonNegative,
       .doc = "software faults and NCCL timeouts, when counted apart"},
      {.section = "cluster.reliability.failure_rates",
       .key = "sdc",
       .type = V::kNumber,
       .unit = "per 1000 node-days",
       .default_text = "none",
       .range = kNonNegative,
       .doc = "silent data corruption, when counted apart"},
      {.section = "cluster.reliability.failure_rates",
       .key = "other",
       .type = V::kNumber,
       .unit = "per 1000 node-days",
       .default_text = "1.1393",
       .range = kNonNegative,
       .doc = "the other causes of Llama 3's table (126)"},
      {.section = "cluster.reliability.weibull_shapes",
       .key = "gpu",
       .type = V::kNumber,
       .default_text = "1",
       .range = kPositive,
       .doc = "the Weibull shape of gpu failures"},
      {.section = "cluster.reliability.weibull_shapes",
       .key = "hbm",
       .type = V::kNumber,
       .default_text = "1",
       .range = kPositive,
       .doc = "the Weibull shape of hbm failures"},
      {.section = "cluster.reliability.weibull_shapes",
       .key = "nic",
       .type = V::kNumber,
       .default_text = "1",
       .range = kPositive,
       .doc = "the Weibull shape of nic failures"},
      {.section = "cluster.reliability.weibull_shapes",
       .key = "network",
       .type = V::kNumber,
       .default_text = "1",
       .range = kPositive,
       .doc = "the Weibull shape of network failures"},
      {.section = "cluster.reliability.weibull_shapes",
       .key = "cpu",
       .type = V::kNumber,
       .default_text = "1",
       .range = kPositive,
       .doc = "the Weibull shape of cpu failures"},
      {.section = "cluster.reliability.weibull_shapes",
       .key = "host",
       .type = V::kNumber,
       .default_text = "1",
       .range = kPositive,
       .doc = "the Weibull shape of host failures"},
      {.section = "cluster.reliability.weibull_shapes",
       .key = "software",
       .type = V::kNumber,
       .default_text = "1",
       .range = kPositive,
       .doc = "the Weibull shape of software failures"},
      {.section = "cluster.reliability.weibull_shapes",
       .key = "sdc",
       .type = V::kNumber,
       .default_text = "1",
       .range = kPositive,
       .doc = "the Weibull shape of sdc failures"},
      {.section = "cluster.reliability.weibull_shapes",
       .key = "other",
       .type = V::kNumber,
       .default_text = "1",
       .range = kPositive,
       .doc = "the Weibull shape of other failures"},

      // ----- data -----------------------------------------------------------------------------
      {.section = "data", .key = "data_path", .type = V::kPath, .default_text = "none",
       .doc = "prefix of a Megatron .bin/.idx dataset; need not exist",
       .flag = "--data-path", .bind = field<kData, &D::data_path>(), .executor_only = true},
      {.section = "data", .key = "split", .type = V::kString,
       .doc = "train,validation,test weights: 1 to 3 numbers >= 0, not all zero",
       .flag = "--split", .bind = field<kData, &D::split>(), .executor_only = true},
      {.section = "data", .key = "vocab_file", .type = V::kPath, .default_text = "none",
       .doc = "tokenizer vocabulary (encoder.json)", .flag = "--vocab-file",
       .bind = field<kData, &D::vocab_file>(), .executor_only = true},
      {.section = "data", .key = "merge_file", .type = V::kPath, .default_text = "none",
       .doc = "BPE merges (vocab.bpe)", .flag = "--merge-file",
       .bind = field<kData, &D::merge_file>(), .executor_only = true},
  };
  return keys;
}

/// A number as the reference prints it: shortest round trip ("0.01", "1e-08", "10000").
std::string number_text(double v) { return fmt::format("{}", v); }

}  // namespace

std::string_view to_string(ValueType t) {
  switch (t) {
    case ValueType::kInteger: return "integer";
    case ValueType::kNumber: return "number";
    case ValueType::kBoolean: return "boolean";
    case ValueType::kEnum: return "enum";
    case ValueType::kString: return "string";
    case ValueType::kPath: return "path";
    case ValueType::kIntegerOrList: return "integer or list";
    case ValueType::kMapping: return "mapping";
  }
  return "?";
}

std::string KeySpec::path() const {
  return section.empty() ? std::string(key) : fmt::format("{}.{}", section, key);
}

std::span<const KeySpec> scenario_keys() { return table(); }

const KeySpec* find_key(std::string_view path) {
  for (const KeySpec& k : table()) {
    if (k.path() == path) return &k;
  }
  return nullptr;
}

const KeySpec& key(std::string_view path) {
  if (const KeySpec* k = find_key(path)) return *k;
  throw InvalidArgument(fmt::format("scenario schema: no key {}", path));
}

std::vector<std::string_view> keys_of(std::string_view path) {
  std::vector<std::string_view> out;
  const KeySpec* mapping = path.empty() ? nullptr : find_key(path);
  if (!path.empty() && (mapping == nullptr || mapping->type != ValueType::kMapping)) return out;
  for (const KeySpec& k : table()) {
    if (k.section == path) out.push_back(k.key);
  }
  return out;
}

bool is_nested_mapping(std::string_view path) {
  const KeySpec* k = find_key(path);
  return k != nullptr && !k->section.empty() && k->type == ValueType::kMapping;
}

bool is_section(std::string_view key) {
  const KeySpec* k = find_key(key);
  return k != nullptr && k->section.empty() && k->type == ValueType::kMapping;
}

std::string default_of(const KeySpec& k) {
  if (!k.default_text.empty()) return std::string(k.default_text);
  if (k.required) return "";
  Scenario defaults;
  return std::visit(
      [&defaults](const auto& bind) -> std::string {
        using B = std::decay_t<decltype(bind)>;
        if constexpr (std::is_same_v<B, std::monostate>) {
          return "";
        } else if constexpr (std::is_same_v<B, EnumField>) {
          const std::string_view name = bind.get(defaults);
          return name.empty() ? "none" : std::string(name);
        } else {
          const auto& value = bind(defaults);
          using F = std::decay_t<decltype(value)>;
          if constexpr (std::is_same_v<F, bool>) {
            return value ? "true" : "false";
          } else if constexpr (std::is_same_v<F, double>) {
            return number_text(value);
          } else if constexpr (std::is_same_v<F, int64_t>) {
            return std::to_string(value);
          } else if constexpr (std::is_same_v<F, std::string>) {
            return value;
          } else if constexpr (std::is_same_v<F, std::filesystem::path>) {
            return value.string();
          } else if constexpr (std::is_same_v<F, std::optional<std::filesystem::path>>) {
            return value ? value->string() : "none";
          } else {
            return value ? fmt::format("{}", *value) : "none";
          }
        }
      },
      k.bind);
}

std::string allowed_of(const KeySpec& k) {
  switch (k.type) {
    case ValueType::kInteger: return fmt::format(">= {}", k.min);
    case ValueType::kNumber: return k.range.text();
    case ValueType::kBoolean: return "true, false";
    case ValueType::kEnum: return join(k.values, ", ");
    case ValueType::kString:
    case ValueType::kPath:
    case ValueType::kMapping: return "";
    case ValueType::kIntegerOrList: return ">= 1, or a list of 0/1";
  }
  return "";
}

}  // namespace traintwin::scenario_schema
