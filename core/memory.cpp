// Memory model per GPU (see memory.hpp for the sources and the breakdown).
#include "core/memory.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/checks.hpp"
#include "core/error.hpp"
#include "core/fsdp_gather_once.hpp"
#include "core/moe_tokens.hpp"
#include "core/params.hpp"
#include "core/pipeline_split.hpp"
#include "core/schedule.hpp"

namespace traintwin {
namespace {

/// Bytes of one element of the "16-bit" activation terms of Korthikanti et al.: 2 for fp16 and
/// bf16, 4 for fp32.
double activation_element_bytes(Precision p) {
  switch (p) {
    case Precision::kFp16:
    case Precision::kBf16:
      return 2.0;
    case Precision::kFp32:
      return 4.0;
    case Precision::kFp8:
    case Precision::kTf32:
    case Precision::kFp32Bf16:
      break;
  }
  throw InvalidArgument(std::string("precision: ") + to_string(p) +
                        " is not a training precision (allowed: fp32, fp16, bf16)");
}

/// Dropout masks are stored as 1 byte per element whatever the precision.
constexpr double kMaskBytes = 1.0;
/// The cross-entropy loss keeps the logits (softmax) in fp32 whatever the precision.
constexpr double kLogitsBytes = 4.0;
/// Bytes per logit that CrossEntropyLoss::kTorch holds besides the saved fp32 log-softmax, for
/// the micro-batch whose loss backward runs: aten::nll_loss_backward's input gradient (fp32, dense:
/// zero-filled, then the targets' entries set) and log_softmax_backward's output (fp32), both
/// alive while LogSoftmaxBackward runs. Its forward holds less besides the saved output: the bf16
/// logits (2) and their fp32 copy (4) while log_softmax runs.
constexpr double kTorchLossTransientBytes = 8.0;

/// Local sequence length s / CP; checks CP >= 1 and CP divides seq_length.
int64_t local_seq_length(const ModelSpec& m, int64_t cp) {
  require_at_least_one(m.seq_length, "seq_length");
  require_at_least_one(cp, "context_parallel_size");
  if (m.seq_length % cp != 0) {
    throw InvalidArgument("seq_length (" + std::to_string(m.seq_length) +
                          ") must be divisible by context_parallel_size (" + std::to_string(cp) +
                          ")");
  }
  return m.seq_length / cp;
}

/// The MLP terms of layer_activation_bytes() inside the TP region, before the division by TP:
/// the activation's input (2 ffn wide for SwiGLU) and the FC2 input, s b ffn each.
double dense_mlp_activation_bytes(const ModelSpec& m, int64_t micro_batch_size, int64_t tp,
                                  int64_t cp, Precision p, bool fp8) {
  const double e = activation_element_bytes(p);
  const double gemm_in = fp8 ? 1.0 : e;
  const double sb = static_cast<double>(local_seq_length(m, cp)) *
                    static_cast<double>(micro_batch_size);
  const double ffn = static_cast<double>(m.ffn_hidden_size);
  const double act_input = (m.activation == Activation::kSwiglu ? 2.0 : 1.0) * e * sb * ffn;
  return (act_input + gemm_in * sb * ffn) / static_cast<double>(tp);
}

/// Saved bytes of one dense layer under torchtitan's op-level selective activation checkpointing
/// (SelectiveAcOption::kOp) for `tokens` = s b tokens. The checkpoint keeps the layer's input and
/// the outputs of the ops its policy must save (torchtitan/parallelisms/parallelize_llama.py
/// @9dec370 _save_list: aten.mm except every second one, the SDPA flash/efficient kernels,
/// reduce_scatter_tensor), whether the backward reads them or not (torch.utils.checkpoint's
/// _CachingTorchDispatchMode stores every MUST_SAVE output); everything else is recomputed. The
/// layer's mm in order are wq, wk, wv, wo, w1, w3, w2 (torchtitan/models/llama/model.py), so per
/// token, e bytes an element: input h + wq output ad + wv output gd + the SDPA output ad and its
/// fp32 log-sum-exp 4a + w1 output ffn + w2 output h (ad = attention width, gd the K/V width):
/// 63,616 bytes for Llama 3.1 8B in bf16. Dropout masks are recomputed (native_dropout is not on
/// the list). Modelled for TP = 1 (under TP the list also saves reduce-scatter outputs and the
/// recompute repeats the SP all-gathers), a SwiGLU MLP and the flash backend, without FP8 (the
/// policy counts aten.mm, which Float8Linear replaces): throws InvalidArgument otherwise (the
/// scenario rules refuse those combinations by name first).
double op_sac_layer_activation_bytes(const ModelSpec& m, double tokens, Precision p,
                                     AttentionBackend backend, int64_t tp, bool fp8) {
  if (tp != 1 || fp8 || !stores_no_scores(backend) ||
      m.activation != Activation::kSwiglu) {
    throw InvalidArgument(
        "selective_ac_option op is modelled for TP = 1, a SwiGLU MLP, the flash attention "
        "backend and no FP8");
  }
  const double e = activation_element_bytes(p);
  const double h = static_cast<double>(m.hidden_size);
  const double ad = static_cast<double>(m.attention_width());
  const double a = static_cast<double>(m.num_attention_heads);
  const double gd = ad * static_cast<double>(m.query_groups()) / a;
  const double ffn = static_cast<double>(m.ffn_hidden_size);
  const double saved_16bit = h + ad + gd + ad + ffn + h;
  return tokens * (e * saved_16bit + 4.0 * a);
}

}  // namespace

double layer_activation_bytes(const ModelSpec& m, int64_t micro_batch_size, int64_t tp, int64_t cp,
                              bool sequence_parallel, RecomputeGranularity r, Precision p,
                              AttentionBackend backend, bool fp8, double hidden_dropout,
                              double attention_dropout, SelectiveAcOption selective) {
  require_at_least_one(m.hidden_size, "hidden_size");
  require_at_least_one(m.num_attention_heads, "num_attention_heads");
  require_at_least_one(m.ffn_hidden_size, "ffn_hidden_size");
  require_at_least_one(micro_batch_size, "micro_batch_size");
  require_at_least_one(tp, "tensor_model_parallel_size");
  const double s = static_cast<double>(local_seq_length(m, cp));
  const double b = static_cast<double>(micro_batch_size);
  const double h = static_cast<double>(m.hidden_size);
  const double a = static_cast<double>(m.num_attention_heads);
  const double g = static_cast<double>(m.query_groups());
  const double ffn = static_cast<double>(m.ffn_hidden_size);
  const double t = static_cast<double>(tp);
  const double e = activation_element_bytes(p);
  const double sbh = s * b * h;
  // Terms outside the TP region (full size on every TP rank), split over TP only with SP.
  const double sp_divisor = sequence_parallel ? t : 1.0;

  if (r == RecomputeGranularity::kFull) {
    return e * sbh / sp_divisor;  // only the layer input is kept (2sbh in 16 bits)
  }
  if (r == RecomputeGranularity::kSelective && selective == SelectiveAcOption::kOp) {
    return op_sac_layer_activation_bytes(m, s * b, p, backend, tp, fp8);
  }

  // Korthikanti et al. 2022, sec. 4.1 (bytes, with e = 2: 34 sbh + 5 a s^2 b in all for GPT).
  // GEMM inputs saved for the weight gradient are FP8 (1 byte) under FP8 training: Transformer
  // Engine's Linear/LayerNormLinear keep the cast input, not the 16-bit one.
  const double gemm_in = fp8 ? 1.0 : e;
  // Outside the TP region (/t only with SP), 10 sbh:
  const double layer_norm_inputs = 2.0 * e * sbh;       // inputs of the 2 norms: 4sbh
  const double qkv_input = gemm_in * sbh;               // norm output, input of QKV: 2sbh
  const double fc1_input = gemm_in * sbh;               // norm output, input of FC1: 2sbh
  // After attention and MLP: 2 x sbh (none at hidden_dropout 0).
  const double dropout_masks = hidden_dropout > 0 ? 2.0 * kMaskBytes * sbh : 0.0;
  const double outside_tp_region = layer_norm_inputs + qkv_input + fc1_input + dropout_masks;
  // Inside the TP region (/t), 24 sbh for GPT with ffn = 4h. The same method applied to the
  // Llama-style layer: Q is sbh, K and V are sbh g/a each under grouped-query attention; RoPE
  // rotates Q and K in place (the rotated ones are what attention saves; its backward is the
  // inverse rotation and needs no input); SwiGLU keeps its 2 ffn-wide input (gate and up) and
  // its ffn-wide output, squared ReLU and GeLU their ffn-wide input and output.
  const double q_k_v = e * sbh * (1.0 + 2.0 * g / a);      // 6sbh for multi-head attention
  const double projection_input = gemm_in * sbh;           // attention output: 2sbh
  const double act_input = (m.activation == Activation::kSwiglu ? 2.0 : 1.0) * e * s * b * ffn;
  const double fc2_input = gemm_in * s * b * ffn;          // activation output
  const double mlp = act_input + fc2_input;                // 16sbh for GeLU, ffn = 4h
  const double inside_tp_region = q_k_v + projection_input + mlp;
  // Attention core, sharded over heads (/t): softmax output 2as^2b, its dropout mask as^2b,
  // dropout output 2as^2b (neither at attention_dropout 0). Selective recomputation recomputes
  // these instead of storing them.
  const double as2b = a * s * s * b;
  const double attention_core = e * as2b + (attention_dropout > 0 ? kMaskBytes * as2b + e * as2b : 0.0);

  double bytes = outside_tp_region / sp_divisor + inside_tp_region / t;
  if (stores_no_scores(backend)) {
    // Flash (and fused) attention keeps no s x s tensor, only the fp32 log-sum-exp of every row (a s b).
    bytes += 4.0 * a * s * b / t;
  } else if (r == RecomputeGranularity::kNone) {
    bytes += attention_core / t;
  }
  return bytes;
}

double moe_mlp_activation_bytes(const Scenario& sc) {
  const ModelSpec& m = sc.model;
  const ParallelConfig& par = sc.parallel;
  const TrainingConfig& tr = sc.training;
  const double e = activation_element_bytes(tr.precision);
  const double gemm_in = tr.fp8() ? 1.0 : e;
  const double h = static_cast<double>(m.hidden_size);
  const double t = static_cast<double>(par.tensor_model_parallel_size);
  const double etp = static_cast<double>(par.expert_tp());
  const double local = static_cast<double>(moe_local_tokens(sc));   // T
  const double in = moe_expert_tokens_per_rank(sc);                 // T_in (busiest rank)
  const double k = static_cast<double>(m.moe_router_topk);
  const double f_e = static_cast<double>(m.moe_expert_ffn());
  const double f1_e = static_cast<double>(m.fc1_width_of(m.moe_expert_ffn()));
  // Router: the softmax probabilities over the E experts of the T local tokens (its input, the
  // norm output, is counted with the layer).
  const double router = e * local * static_cast<double>(m.num_moe_experts);
  // The local experts (grouped GEMMs, column-/row-parallel over ETP), the MLP terms of
  // Korthikanti et al. for T_in token copies: FC1 input, activation input, FC2 input.
  const double experts = in * (gemm_in * h + e * f1_e / etp + gemm_in * f_e / etp);
  // Unpermute: the expert outputs of the T k copies, kept to weight them by the probabilities
  // (and for the probabilities' gradient).
  const double unpermute = e * local * k * h;
  double bytes = router + experts + unpermute;
  if (m.moe_shared_expert_intermediate_size > 0) {
    // The shared expert: a dense MLP under TP (its input is the norm output, counted).
    const double sb = static_cast<double>(tr.micro_batch_size) *
                      static_cast<double>(local_seq_length(m, par.context_parallel_size));
    const double f_s = static_cast<double>(m.moe_shared_expert_intermediate_size);
    const double f1_s = static_cast<double>(m.fc1_width_of(m.moe_shared_expert_intermediate_size));
    bytes += sb * (e * f1_s + gemm_in * f_s) / t;
  }
  return bytes;
}

double moe_dispatch_buffer_bytes(const Scenario& sc) {
  const ModelSpec& m = sc.model;
  const double e = activation_element_bytes(sc.training.precision);
  const double h = static_cast<double>(m.hidden_size);
  const double local = static_cast<double>(moe_local_tokens(sc));
  if (m.moe_token_dispatcher_type == MoeTokenDispatcher::kAllGather) {
    // The hidden states of the whole EP x ETP group, all-gathered before the local experts pick
    // theirs.
    return e * h * local * static_cast<double>(sc.parallel.expert_model_parallel_size) *
           static_cast<double>(sc.parallel.expert_tp());
  }
  // alltoall: the permuted send buffer (T k copies) and the all-to-all receive buffer (T_in /
  // ETP copies before the ETP all-gather, whose output is the experts' input).
  const double in = moe_expert_tokens_per_rank(sc);
  return e * h * (local * static_cast<double>(m.moe_router_topk) +
                  in / static_cast<double>(sc.parallel.expert_tp()));
}

BytesPerParameter bytes_per_parameter(Precision p, bool distributed_optimizer, int64_t dp) {
  require_at_least_one(dp, "dp");
  BytesPerParameter bpp;
  switch (p) {
    case Precision::kFp16:
      // fp16 weights + fp16 grads; optimizer: fp32 main weights 4 + fp32 main grads 4 + Adam
      // moments 4 + 4 (20 in all, or 4 + 16/d).
      bpp = {2, 2, 16};
      break;
    case Precision::kBf16:
      // bf16 weights + fp32 grads (accumulated in fp32); optimizer: fp32 main weights 4 + Adam
      // moments 4 + 4 (18, or 6 + 12/d).
      bpp = {2, 4, 12};
      break;
    case Precision::kFp32:
      // fp32 weights and grads; optimizer: Adam moments 4 + 4 (16, or 8 + 8/d).
      bpp = {4, 4, 8};
      break;
    default:
      throw InvalidArgument("precision has an unknown value: " +
                            std::to_string(static_cast<int>(p)));
  }
  if (distributed_optimizer) bpp.optimizer /= static_cast<double>(dp);
  return bpp;
}

BytesPerParameter shard_bytes_per_parameter(BytesPerParameter full, int zero_stage, int64_t dp) {
  require_at_least_one(dp, "dp");
  if (zero_stage < 0 || zero_stage > 3) {
    throw InvalidArgument("zero_stage must lie in [0, 3] (got " + std::to_string(zero_stage) + ")");
  }
  const double d = static_cast<double>(dp);
  if (zero_stage >= 1) full.optimizer /= d;
  if (zero_stage >= 2) full.gradients /= d;
  if (zero_stage >= 3) full.weights /= d;
  return full;
}

namespace {

/// stage_memory() with the pipeline split kept in `split_cache` between the stages of one
/// scenario: computed where stage_memory() computes it when the cache is empty (so that the
/// first stage checks its arguments in the same order), reused when not.
StageMemory stage_memory_of(const Scenario& s, int64_t pp_rank,
                            std::vector<ChunkLayers>& split_cache) {
  const ParallelConfig& par = s.parallel;
  const TrainingConfig& tr = s.training;
  StageMemory mem;
  mem.pp_rank = pp_rank;
  // Checks pp_rank, TP, ...
  const RankParameters held = split_cache.empty()
                                  ? stage_parameters_on_rank(s, pp_rank)
                                  : stage_parameters_on_rank(s, pp_rank, split_cache);
  mem.parameters = held.total();
  mem.expert_parameters = held.expert;
  require_at_least_one(par.data_parallel_size, "data_parallel_size");
  require_at_least_one(par.context_parallel_size, "context_parallel_size");
  require_at_least_one(tr.micro_batch_size, "micro_batch_size");
  require_at_least_one(tr.global_batch_size, "global_batch_size");
  if (tr.global_batch_size % (tr.micro_batch_size * par.data_parallel_size) != 0) {
    throw InvalidArgument("global_batch_size (" + std::to_string(tr.global_batch_size) +
                          ") must be divisible by micro_batch_size x data_parallel_size (" +
                          std::to_string(tr.micro_batch_size * par.data_parallel_size) + ")");
  }
  const int64_t p = par.pipeline_model_parallel_size;
  const int64_t v = par.virtual_pipeline_model_parallel_size;
  // The transformer layers of each of the stage's chunks (uneven under Megatron-Core's uneven
  // pipeline split, core/pipeline_split.hpp).
  // (The split once: chunk_layers() would recompute it for every chunk.)
  if (split_cache.empty()) split_cache = pipeline_layer_split(s.model, par);
  const std::vector<ChunkLayers>& split = split_cache;
  std::vector<ChunkLayers> chunks;
  std::vector<int64_t> layers_of_chunk;
  for (int64_t c = 0; c < v; ++c) {
    // As chunk_layers(): the chunk's virtual stage (ZB-V's V placement under zb-v).
    chunks.push_back(split.at(
        static_cast<size_t>(virtual_stage_of(par.pipeline_schedule, p, pp_rank, c))));
    layers_of_chunk.push_back(chunks.back().num_layers);
    mem.layers += chunks.back().num_layers;  // layers_on_stage()
  }

  // Weights, gradients, optimizer state. The distributed optimizer shards the dense parameters'
  // state over the DP x CP group (Megatron reduces gradients and shards the optimizer over
  // data_parallel_group with CP) and the routed experts' over the expert-data-parallel group
  // (Megatron-Core's expert_data_parallel_group: TP x CP x DP / (ETP x EP) ranks).
  // ZeRO-2/3 (Megatron-FSDP) shard the gradients and weights over the same groups. Under HSDP
  // (training.num_distributed_optimizer_instances N) the dense group is DP x CP / N.
  const BytesPerParameter full = bytes_per_parameter(tr.precision, false, 1);
  const int stage = tr.zero_stage();
  const BytesPerParameter bpp = shard_bytes_per_parameter(full, stage, s.data_parallel_shard_size());
  const BytesPerParameter expert_bpp = shard_bytes_per_parameter(
      full, stage, s.model.is_moe() ? par.expert_data_parallel_size() : 1);
  const double dense = static_cast<double>(held.dense);
  const double expert = static_cast<double>(held.expert);
  mem.weights_bytes = dense * bpp.weights + expert * expert_bpp.weights;
  mem.gradients_bytes = dense * bpp.gradients + expert * expert_bpp.gradients;
  mem.optimizer_bytes = dense * bpp.optimizer + expert * expert_bpp.optimizer;
  if (stage >= 2 && mem.layers > 0) {
    // ZeRO-3: the FSDP units (transformer layers) whose parameters are gathered at once. With
    // reshard_after_forward (the default) the running unit and the fsdp_prefetch_depth N units
    // prefetched ahead of it, N + 1, no more than a chunk's layers (the prefetch stops at the
    // chunk's end, core/rank_lowering_optimizer.cpp fsdp_ahead); the largest layers of the
    // stage are counted. Without it every unit of the stage stays gathered from its forward to
    // its backward (under PP from its chunk's first forward to the step's end, gathered once per
    // step: core/fsdp_gather_once.hpp; the peak is the same). ZeRO-2/3: the unit whose full
    // gradients wait for their reduce-scatter.
    // (An MoE layer's local experts are part of its unit.)
    std::vector<double> units;  // per layer of the stage: its parameters on this rank
    int64_t chunk_layers_max = 0;
    std::optional<RankParameters> dense_layer;  // a dense layer's, whatever its index
    double layer_dense = 0;
    for (const ChunkLayers& c : chunks) {
      chunk_layers_max = std::max(chunk_layers_max, c.num_layers);
      for (int64_t l = c.first_layer; l < c.first_layer + c.num_layers; ++l) {
        if (!s.model.is_moe_layer(l) && !dense_layer) {
          dense_layer = layer_parameters_on_rank(s.model, par, l);
        }
        const RankParameters lp =
            s.model.is_moe_layer(l) ? layer_parameters_on_rank(s.model, par, l) : *dense_layer;
        units.push_back(static_cast<double>(lp.total()));
        layer_dense += static_cast<double>(lp.dense);
      }
    }
    std::sort(units.begin(), units.end(), std::greater<>());
    if (stage >= 3) {
      // The embedding, final norm and LM head are gathered once per iteration, as the
      // distributed optimizer's parameters (core/rank_lowering_optimizer.cpp): held whole.
      mem.weights_bytes += (dense - layer_dense) * (full.weights - bpp.weights);
      mem.fsdp_gathered_units =
          tr.reshard_after_forward
              ? std::min<int64_t>(tr.fsdp_prefetch_depth + 1, chunk_layers_max)
              : static_cast<int64_t>(units.size());
      double gathered = 0;
      for (int64_t u = 0; u < mem.fsdp_gathered_units; ++u) gathered += units[static_cast<size_t>(u)];
      mem.weights_bytes += gathered * full.weights;
    }
    if (fsdp_grads_reduced_once_per_step(s)) {
      // FSDP2 under PP (core/fsdp_gather_once.hpp): every micro-batch's gradients accumulate
      // unsharded in the stage and are reduce-scattered in each chunk's last backward, so the
      // stage holds all its parameters' full gradients (embedding and head included, their
      // buckets reduced then too) besides the shards those reduce-scatters fill.
      mem.gradients_bytes += (dense + expert) * full.gradients;
    } else {
      mem.gradients_bytes += units.front() * full.gradients;
    }
  }
  if (tr.fp8()) {
    // Transformer Engine keeps an FP8 copy of every transformer-layer GEMM weight (the local
    // experts' too) and, on Hopper (TN-only FP8 GEMMs), its transpose for the backward: 2 bytes
    // per GEMM weight. With FP8 parameters those are the weights: no 16-bit copy of the GEMM
    // weights remains.
    const double gemm = static_cast<double>(held.dense_gemm + held.expert_gemm);
    mem.fp8_weight_copies_bytes = 2.0 * gemm;
    if (tr.fp8_param_gather) mem.weights_bytes -= gemm * bpp.weights;
  }

  // Transformer-layer activations at the peak of the stage's schedule.
  // (peak_in_flight_weighted: the schedule's peak without building it.)
  auto peak_of = [&](const std::vector<int64_t>& weight_of_chunk) {
    return peak_in_flight_weighted(par.pipeline_schedule, p, pp_rank, s.num_micro_batches(), v,
                                   weight_of_chunk);
  };
  mem.in_flight = peak_of(std::vector<int64_t>(static_cast<size_t>(v), 1));
  // The micro-batches in flight in chunk c alone (with one chunk: all of them).
  auto in_flight_of_chunk = [&](int64_t c) {
    if (v == 1) return mem.in_flight;
    std::vector<int64_t> only(static_cast<size_t>(v), 0);
    only[static_cast<size_t>(c)] = 1;
    return peak_of(only);
  };
  // The peak is a maximum of weighted sums, linear in the weights: with every chunk holding the
  // same L >= 0 layers (an even split) it is L x the unweighted peak, exactly (integers).
  const bool same_layers =
      std::all_of(layers_of_chunk.begin(), layers_of_chunk.end(),
                  [&](int64_t l) { return l == layers_of_chunk.front() && l >= 0; });
  mem.in_flight_layers =
      same_layers ? layers_of_chunk.front() * mem.in_flight : peak_of(layers_of_chunk);
  const double per_layer = layer_activation_bytes(
      s.model, tr.micro_batch_size, par.tensor_model_parallel_size, par.context_parallel_size,
      par.sequence_parallel, tr.recompute_granularity, tr.precision, tr.attention_backend,
      tr.fp8(), tr.hidden_dropout, tr.attention_dropout, tr.selective_ac_option);
  int64_t moe_layers = 0;
  for (const ChunkLayers& chunk : chunks) {
    for (int64_t l = chunk.first_layer; l < chunk.end_layer(); ++l) {
      moe_layers += s.model.is_moe_layer(l) ? 1 : 0;
    }
  }
  if (moe_layers == 0) {
    mem.activations_bytes = static_cast<double>(mem.in_flight_layers) * per_layer;
  } else {
    // An MoE layer keeps the dense layer's attention terms; its MLP terms are the router's,
    // the local experts' and the shared expert's (full recomputation keeps only the input).
    double moe_layer = per_layer;
    if (tr.recompute_granularity != RecomputeGranularity::kFull) {
      moe_layer += moe_mlp_activation_bytes(s) -
                   dense_mlp_activation_bytes(s.model, tr.micro_batch_size,
                                              par.tensor_model_parallel_size,
                                              par.context_parallel_size, tr.precision, tr.fp8());
    }
    // The in-flight peak weighted by each chunk's bytes (layers differ between chunks).
    std::vector<int64_t> bytes_of_chunk;
    for (const ChunkLayers& chunk : chunks) {
      double bytes = 0;
      for (int64_t l = chunk.first_layer; l < chunk.end_layer(); ++l) {
        bytes += s.model.is_moe_layer(l) ? moe_layer : per_layer;
      }
      bytes_of_chunk.push_back(static_cast<int64_t>(std::llround(bytes)));
    }
    mem.activations_bytes = static_cast<double>(peak_of(bytes_of_chunk));
    // One MoE layer's dispatch buffers at a time (transient: freed after the combine).
    mem.moe_dispatch_buffers_bytes = moe_dispatch_buffer_bytes(s);
  }

  // CPU offload: what moves from the GPU to host memory.
  if (tr.optimizer_cpu_offload) {
    // The offloaded share f of the rank's optimizer shard (the rules allow it with the
    // distributed optimizer only, ZeRO-1: n = dense / (DP x CP) + expert / expert-DP
    // parameters): its device state leaves the GPU; the host holds 16 bytes per offloaded
    // parameter (HybridDeviceOptimizer with param_update_in_fp32: fp32 main parameter, exp_avg,
    // exp_avg_sq and the pinned fp32 gradient copy it steps from).
    const double f = tr.optimizer_offload_fraction;
    const double shard =
        dense / static_cast<double>(s.data_parallel_shard_size()) +
        (s.model.is_moe() ? expert / static_cast<double>(par.expert_data_parallel_size()) : 0.0);
    mem.host_optimizer_bytes = f * kHostOptimizerBytesPerParameter * shard;
    mem.optimizer_bytes *= 1.0 - f;
  }
  if (tr.cpu_offloading && tr.cpu_offloading_num_layers > 0) {
    // The first cpu_offloading_num_layers layers' saved activations of every micro-batch in
    // flight (the rules refuse PP > 1: one stage holds every layer) live on the host;
    // Transformer Engine keeps at most num_layers - cpu_offloading_num_layers sets on the GPU
    // (its default scheduling stalls compute and reloads to enforce it).
    double offloaded = 0;
    for (int64_t l = 0; l < tr.cpu_offloading_num_layers; ++l) {
      offloaded += offloaded_layer_activation_bytes(s, l);
    }
    mem.host_activations_bytes = static_cast<double>(mem.in_flight) * offloaded;
    mem.activations_bytes -= mem.host_activations_bytes;
  }

  // Outside the transformer layers (Korthikanti et al. 2022, sec. 4.3), counted for each
  // micro-batch in flight in the model chunk that holds them.
  const double t = static_cast<double>(par.tensor_model_parallel_size);
  const double sp_divisor = par.sequence_parallel ? t : 1.0;
  const double sbh = static_cast<double>(local_seq_length(s.model, par.context_parallel_size)) *
                     static_cast<double>(tr.micro_batch_size) *
                     static_cast<double>(s.model.hidden_size);
  // The chunks that run the embedding (the first virtual stage) and the final norm, LM head and
  // loss (the last): chunk 0 of rank 0 and chunk v - 1 of rank p - 1, chunk 1 of rank 0 for the
  // last under the V placement (ZB-V, DualPipeV); under DualPipe the end ranks' chunks both,
  // one of each per direction (core/schedule.hpp takes_embedding, computes_loss).
  for (int64_t c = 0; c < v; ++c) {
    const int64_t vs = virtual_stage_of(par.pipeline_schedule, p, pp_rank, c);
    if (!takes_embedding(par.pipeline_schedule, p, v, vs)) continue;
    // Embedding dropout mask (hidden_dropout > 0), 1 byte per element; sequence-parallel with SP.
    if (tr.hidden_dropout <= 0) continue;
    const double in_flight = static_cast<double>(in_flight_of_chunk(c));
    mem.embedding_and_logits_bytes += in_flight * kMaskBytes * sbh / sp_divisor;
  }
  for (int64_t last_chunk = 0; last_chunk < v; ++last_chunk) {
    const int64_t vs = virtual_stage_of(par.pipeline_schedule, p, pp_rank, last_chunk);
    if (!computes_loss(par.pipeline_schedule, p, v, vs)) continue;
    const double in_flight = static_cast<double>(in_flight_of_chunk(last_chunk));
    const double e = activation_element_bytes(tr.precision);
    // Input of the final LayerNorm and input of the LM head (2sbh each in 16 bits). Without SP
    // both are full-size on every TP rank; with SP the LayerNorm runs sequence-parallel and the
    // LM head, like every column-parallel linear under SP, keeps only its local sequence shard
    // and all-gathers it again in backward, so both are /t.
    const double ln_and_head_inputs = 2.0 * e * sbh / sp_divisor;
    // fp32 logits of the vocab-parallel cross-entropy: 4 s b V/t (V as padded by Megatron).
    const double vocab_per_rank =
        static_cast<double>(padded_vocab_size(s.model.vocab_size, par.tensor_model_parallel_size) /
                            par.tensor_model_parallel_size);
    const double logits =
        kLogitsBytes * (sbh / static_cast<double>(s.model.hidden_size)) * vocab_per_rank;
    mem.embedding_and_logits_bytes += in_flight * (ln_and_head_inputs + logits);
    if (tr.cross_entropy_loss == CrossEntropyLoss::kTorch) {
      // torch.nn.functional.cross_entropy on the logits cast to fp32 (torchtitan): each
      // micro-batch in flight keeps log_softmax's fp32 output (4 bytes, as above); the one in
      // its loss backward holds two more fp32 tensors (kTorchLossTransientBytes).
      mem.embedding_and_logits_bytes += kTorchLossTransientBytes *
                                        (sbh / static_cast<double>(s.model.hidden_size)) *
                                        vocab_per_rank;
    }
  }
  return mem;
}

}  // namespace

double offloaded_layer_activation_bytes(const Scenario& s, int64_t layer) {
  const ParallelConfig& par = s.parallel;
  const TrainingConfig& tr = s.training;
  double bytes = layer_activation_bytes(s.model, tr.micro_batch_size,
                                        par.tensor_model_parallel_size, par.context_parallel_size,
                                        par.sequence_parallel, tr.recompute_granularity,
                                        tr.precision, tr.attention_backend, tr.fp8(),
                                        tr.hidden_dropout, tr.attention_dropout,
                                        tr.selective_ac_option);
  if (s.model.is_moe_layer(layer) && tr.recompute_granularity != RecomputeGranularity::kFull) {
    bytes += moe_mlp_activation_bytes(s) -
             dense_mlp_activation_bytes(s.model, tr.micro_batch_size,
                                        par.tensor_model_parallel_size, par.context_parallel_size,
                                        tr.precision, tr.fp8());
  }
  return bytes;
}

StageMemory stage_memory(const Scenario& s, int64_t pp_rank) {
  std::vector<ChunkLayers> split;
  return stage_memory_of(s, pp_rank, split);
}

std::vector<StageMemory> memory_per_stage(const Scenario& s) {
  require_at_least_one(s.parallel.pipeline_model_parallel_size, "pipeline_model_parallel_size");
  std::vector<StageMemory> stages;
  stages.reserve(static_cast<size_t>(s.parallel.pipeline_model_parallel_size));
  std::vector<ChunkLayers> split;  // the pipeline split, once for every stage
  for (int64_t r = 0; r < s.parallel.pipeline_model_parallel_size; ++r) {
    stages.push_back(stage_memory_of(s, r, split));
  }
  return stages;
}

const char* to_string(MemoryVerdict v) {
  switch (v) {
    case MemoryVerdict::kFits: return "fits";
    case MemoryVerdict::kAtRisk: return "at risk";
    case MemoryVerdict::kOutOfMemory: return "OOM";
  }
  return "?";
}

MemoryVerdict memory_verdict(double peak_bytes, double capacity_bytes, double reserve_bytes) {
  if (!(capacity_bytes > 0)) {
    throw InvalidArgument("memory_verdict: capacity must be > 0 bytes, got " +
                          std::to_string(capacity_bytes));
  }
  if (!(reserve_bytes >= 0)) {
    throw InvalidArgument("memory_verdict: reserve must be >= 0 bytes, got " +
                          std::to_string(reserve_bytes));
  }
  if (peak_bytes > capacity_bytes) return MemoryVerdict::kOutOfMemory;
  const bool inside_reserve = peak_bytes + reserve_bytes > capacity_bytes;
  return inside_reserve || peak_bytes > kMemoryAtRiskShare * capacity_bytes ? MemoryVerdict::kAtRisk
                                                                            : MemoryVerdict::kFits;
}

MemoryVerdict host_memory_verdict(double host_bytes, double host_capacity_bytes) {
  if (!(host_capacity_bytes > 0)) {
    throw InvalidArgument("host_memory_verdict: host capacity must be > 0 bytes, got " +
                          std::to_string(host_capacity_bytes));
  }
  if (host_bytes > host_capacity_bytes) return MemoryVerdict::kOutOfMemory;
  return host_bytes > kMemoryAtRiskShare * host_capacity_bytes ? MemoryVerdict::kAtRisk
                                                               : MemoryVerdict::kFits;
}

}  // namespace traintwin
