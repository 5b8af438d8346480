// RankLowering: the transformer layer (GEMMs, attention, TP/CP
// collectives), embedding and LM head; see core/rank_lowering.hpp.
#include "core/rank_lowering.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/error.hpp"

namespace traintwin::lowering {

CollectiveKind RankLowering::tp_reduce() const {
  return d_.sp ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce;
}

Kernel RankLowering::gemm_kernel(const char* name, int64_t m, int64_t n, int64_t k,
                                 bool fp8) const {
  return k_.layer_gemm(name, m, n, k, fp8);
}

void RankLowering::fp8_cast(int64_t n, const char* what, Cast where) {
  const bool current = sc_.training.fp8_recipe == Fp8Recipe::kTensorwise;
  if (where == Cast::kFused && !current) return;
  if (current) kernel(k_.fp8_amax(n), what);
  kernel(k_.fp8_cast(n, true), what);
}

void RankLowering::fp8_amax_reduction(bool forward, int64_t mb, int64_t chunk) {
  if (!fp8() || sc_.training.fp8_recipe != Fp8Recipe::kDelayed) return;
  const ChunkLayers& layers = layers_of(chunk);
  int64_t gemms = 0;
  for (int64_t l = layers.first_layer; l < layers.end_layer(); ++l) {
    gemms += sc_.model.is_moe_layer(l) ? 2 + 2 * d_.local_experts + (d_.shared_ffn > 0 ? 2 : 0) : 4;
  }
  if (gemms == 0) return;
  context(forward ? Phase::kForward : Phase::kBackward, mb, chunk, -1);
  role(Role::kNone);
  wait(collective(CollectiveKind::kAllReduce, GroupKind::kTpDpCp, Stream::kTpComm,
                  4 * gemms * (forward ? 3 : 2), "fp8 amax all_reduce"));
}

void RankLowering::gathered_gemm(int64_t n, int64_t k, const char* what, bool fp8) {
  if (fp8) fp8_cast(d_.tokens_sp * k, what, Cast::kFused);
  if (!d_.sp) {
    kernel(gemm_kernel("gemm_fwd", d_.tokens, n, k, fp8), what);
    return;
  }
  if (!sc_.training.tp_comm_overlap) {
    tp_blocking(CollectiveKind::kAllGather, act_bytes(d_.h), "sp all_gather");
    kernel(gemm_kernel("gemm_fwd", d_.tokens, n, k, fp8), what);
    return;
  }
  for (int64_t i = 0; i < d_.t; ++i) {
    wait(collective(CollectiveKind::kAllGather, GroupKind::kTp, Stream::kTpComm,
                    act_bytes(d_.h) / d_.t, "sp all_gather (overlapped)"));
    kernel(gemm_kernel("gemm_fwd", d_.tokens / d_.t, n, k, fp8), what);
  }
}

void RankLowering::gemm_reduced(int64_t n, int64_t k, const char* what, bool fp8, Cast cast) {
  if (fp8) fp8_cast(d_.tokens * k, what, cast);
  if (!(d_.sp && sc_.training.tp_comm_overlap)) {
    kernel(gemm_kernel("gemm_fwd", d_.tokens, n, k, fp8), what);
    tp_blocking(tp_reduce(), act_bytes(d_.h), d_.sp ? "sp reduce_scatter" : "tp all_reduce");
    return;
  }
  std::vector<uint32_t> pieces;
  for (int64_t i = 0; i < d_.t; ++i) {
    kernel(gemm_kernel("gemm_fwd", d_.tokens / d_.t, n, k, fp8), what);
    pieces.push_back(collective(CollectiveKind::kReduceScatter, GroupKind::kTp, Stream::kTpComm,
                                act_bytes(d_.h) / d_.t, "sp reduce_scatter (overlapped)"));
  }
  for (uint32_t p : pieces) wait(p);
}

void RankLowering::attention_core(bool backward) {
  const int64_t heads = d_.a / d_.t;
  const int64_t kv_heads = d_.g / d_.t;
  const bool rope = d_.model.position_embedding_type == PositionEmbedding::kRope;
  if (rope && !backward) kernel(k_.rope(false), "attention");
  if (d_.cp == 1) {
    kernel(k_.attention(backward, heads, kv_heads, d_.s), "attention");
  } else {
    // K and V of the local s / CP tokens (bytes of one block).
    const int64_t kv_bytes = 2 * d_.b * d_.s * kv_heads * d_.hd * d_.dsize;
    switch (sc_.parallel.cp_comm_type) {
      case CpCommType::kA2a: {
        // Ulysses: sequence-sharded Q, K, V -> head-sharded over the whole sequence, and back.
        const int64_t qkv_bytes = act_bytes(d_.qkv_local);
        const int64_t out_bytes = act_bytes(d_.aw / d_.t);
        cp_blocking(CollectiveKind::kAllToAll, backward ? out_bytes : qkv_bytes,
                    backward ? "cp all_to_all grad" : "cp all_to_all qkv");
        kernel(k_.attention(backward, heads / d_.cp, kv_heads / d_.cp, d_.s_full), "attention");
        cp_blocking(CollectiveKind::kAllToAll, backward ? qkv_bytes : out_bytes,
                    backward ? "cp all_to_all qkv grad" : "cp all_to_all output");
        break;
      }
      case CpCommType::kAllGather: {
        cp_blocking(CollectiveKind::kAllGather, d_.cp * kv_bytes, "cp all_gather kv");
        for (int64_t i = 0; i < d_.cp; ++i) {
          kernel(k_.attention(backward, heads, kv_heads, d_.s), "attention");
        }
        if (backward) {
          cp_blocking(CollectiveKind::kReduceScatter, d_.cp * kv_bytes, "cp reduce_scatter dkv");
        }
        break;
      }
      case CpCommType::kP2p: {
        // Ring attention: block i uses the KV that arrived in exchange i-1; exchange i (for
        // block i+1) runs on the cp-comm stream while block i computes.
        uint32_t dkv = kNoOp;
        for (int64_t i = 0; i < d_.cp; ++i) {
          uint32_t next = kNoOp;
          if (i + 1 < d_.cp) {
            next = collective(CollectiveKind::kRingExchange, GroupKind::kCp, Stream::kCpComm,
                              kv_bytes, backward ? "cp ring exchange kv (bwd)" : "cp ring exchange kv");
          }
          kernel(k_.attention(backward, heads, kv_heads, d_.s), "attention");
          if (!backward && i > 0) kernel(k_.attention_merge(heads), "attention");
          if (backward && i > 0) {
            // The dK, dV accumulated for the KV block this rank holds travel on with it.
            dkv = collective(CollectiveKind::kRingExchange, GroupKind::kCp, Stream::kCpComm,
                             kv_bytes, "cp ring exchange dkv");
          }
          wait(next);
        }
        wait(dkv);
        break;
      }
    }
  }
  if (rope && backward) kernel(k_.rope(true), "attention");
}

void RankLowering::cp_blocking(CollectiveKind kind, int64_t bytes, const char* what) {
  wait(collective(kind, GroupKind::kCp, Stream::kCpComm, bytes, what));
}

void RankLowering::layer_forward() {
  const bool f8 = fp8();
  role(Role::kInputLayerNorm);
  kernel(k_.norm(false), "layernorm");
  role(Role::kQkv);
  gathered_gemm(d_.qkv_local, d_.h, "attention", f8);
  role(Role::kAttentionCore);
  attention_core(false);
  role(Role::kAttentionProjection);
  gemm_reduced(d_.h, d_.aw / d_.t, "attention", f8);
  role(Role::kAttentionResidual);
  kernel(k_.dropout_add(false), "mlp");
  role(Role::kPostAttentionLayerNorm);
  kernel(k_.norm(false), "mlp");
  if (sc_.model.is_moe_layer(layer_)) {
    moe_forward();
  } else {
    role(Role::kFc1);
    gathered_gemm(d_.fc1_local, d_.h, "mlp", f8);
    role(Role::kGelu);
    kernel(k_.activation(false), "mlp");
    role(Role::kFc2);
    gemm_reduced(d_.h, d_.ffn / d_.t, "mlp", f8, Cast::kFused);  // cast by the activation
  }
  role(Role::kMlpResidual);
  kernel(k_.dropout_add(false), "mlp");
  if (f8 && sc_.training.fp8_recipe == Fp8Recipe::kDelayed) {
    role(Role::kNone);
    kernel(k_.fp8_scale_update(8), "fp8 scales");  // 4 GEMM inputs + 4 weights
  }
}

void RankLowering::row_parallel_backward(int64_t n, int64_t k, const char* what, bool fp8) {
  if (part_ == BackwardPart::kWeightInputs) return;
  if (part_ == BackwardPart::kWeight) {  // W: the output gradient B gathered (and cast) is kept
    kernel(gemm_kernel("gemm_wgrad", d_.tokens, n, k, fp8), what);
    return;
  }
  if (d_.sp) tp_blocking(CollectiveKind::kAllGather, act_bytes(d_.h), "sp all_gather grad");
  if (fp8) fp8_cast(d_.tokens * n, what, Cast::kSeparate);  // the residual stream's gradient
  kernel(gemm_kernel("gemm_dgrad", d_.tokens, n, k, fp8), what);
  kernel(gemm_kernel("gemm_wgrad", d_.tokens, n, k, fp8), what);
}

void RankLowering::column_parallel_backward(int64_t n, int64_t k, const char* what, bool fp8,
                                            Cast cast) {
  if (part_ == BackwardPart::kWeightInputs) {  // W's first pass: gather the saved input
    if (d_.sp) {
      allow_w_collective_ = true;
      w_gathers_.push_back(collective(CollectiveKind::kAllGather, GroupKind::kTp, Stream::kTpComm,
                                      act_bytes(d_.h), "sp all_gather input"));
      allow_w_collective_ = false;
    }
    return;
  }
  if (part_ == BackwardPart::kWeight) {
    if (d_.sp) wait(w_gathers_.at(next_w_gather_++));
    kernel(gemm_kernel("gemm_wgrad", d_.tokens, n, k, fp8), what);
    return;
  }
  uint32_t gather = kNoOp;
  if (d_.sp && part_ == BackwardPart::kAll) {
    gather = collective(CollectiveKind::kAllGather, GroupKind::kTp, Stream::kTpComm,
                        act_bytes(d_.h), "sp all_gather input");
  }
  if (fp8) fp8_cast(d_.tokens * n, what, cast);
  kernel(gemm_kernel("gemm_dgrad", d_.tokens, n, k, fp8), what);
  if (!d_.sp && part_ == BackwardPart::kAll &&
      !sc_.training.async_tensor_model_parallel_allreduce) {
    // Megatron before the async all-reduce (2021): autograd runs the layer's whole backward,
    // then _CopyToModelParallelRegion's backward all-reduces the input gradient, blocking.
    kernel(gemm_kernel("gemm_wgrad", d_.tokens, n, k, fp8), what);
    tp_blocking(CollectiveKind::kAllReduce, act_bytes(k), "tp all_reduce grad");
    return;
  }
  const uint32_t reduce = collective(tp_reduce(), GroupKind::kTp, Stream::kTpComm,
                                     act_bytes(k), d_.sp ? "sp reduce_scatter grad" : "tp all_reduce grad");
  if (part_ == BackwardPart::kInput) {  // B: nothing to hide the reduce behind
    wait(reduce);
    return;
  }
  wait(gather);
  kernel(gemm_kernel("gemm_wgrad", d_.tokens, n, k, fp8), what);
  wait(reduce);
}

void RankLowering::op_sac_recompute() {
  // torchtitan's op-level selective activation checkpointing (SelectiveAcOption::kOp; the rules
  // hold it to TP = CP = 1, a dense SwiGLU layer, flash attention, no FP8): the layer's first
  // saved-tensor unpack in backward reruns its forward with the saved ops' outputs (wq, wv, the
  // SDPA kernel, w1, w2) taken from the cache, so the recompute is the input norm, wk, RoPE of
  // Q and K, wo, the residual add, the post-attention norm, w3 and silu(w1) * w3. It stops there
  // (torch.utils.checkpoint's early stop: w2's input is the last tensor the backward needs).
  const int64_t kv_width = d_.qkv_local - d_.aw;  // K and V, gd each (TP = 1)
  role(Role::kInputLayerNorm);
  kernel(k_.norm(false), "attention");
  role(Role::kQkv);
  kernel(gemm_kernel("gemm_fwd", d_.tokens, kv_width / 2, d_.h, false), "attention");
  role(Role::kAttentionCore);
  kernel(k_.rope(false), "attention");
  role(Role::kAttentionProjection);
  kernel(gemm_kernel("gemm_fwd", d_.tokens, d_.h, d_.aw, false), "attention");
  role(Role::kAttentionResidual);
  kernel(k_.dropout_add(false), "mlp");
  role(Role::kPostAttentionLayerNorm);
  kernel(k_.norm(false), "mlp");
  role(Role::kFc1);
  kernel(gemm_kernel("gemm_fwd", d_.tokens, d_.ffn, d_.h, false), "mlp");
  role(Role::kGelu);
  kernel(k_.activation(false), "mlp");
}

void RankLowering::layer_backward(int64_t mb, int64_t chunk, int64_t layer) {
  const bool f8 = fp8();
  const bool op_sac = sc_.training.recompute_granularity == RecomputeGranularity::kSelective &&
                      sc_.training.selective_ac_option == SelectiveAcOption::kOp;
  if (op_sac) {
    context(Phase::kRecompute, mb, chunk, layer);
    op_sac_recompute();
    context(Phase::kBackward, mb, chunk, layer);
  }
  role(Role::kMlpResidual);
  kernel(k_.dropout_add(true), "mlp");
  if (sc_.model.is_moe_layer(layer)) {
    moe_backward();
  } else {
    role(Role::kFc2);
    row_parallel_backward(d_.h, d_.ffn / d_.t, "mlp", f8);
    role(Role::kGelu);
    kernel(k_.activation(true), "mlp");
    role(Role::kFc1);
    column_parallel_backward(d_.fc1_local, d_.h, "mlp", f8, Cast::kFused);  // by its backward
  }
  role(Role::kPostAttentionLayerNorm);
  kernel(k_.norm(true), "mlp");
  role(Role::kAttentionResidual);
  kernel(k_.dropout_add(true), "attention");
  role(Role::kAttentionProjection);
  row_parallel_backward(d_.h, d_.aw / d_.t, "attention", f8);
  role(Role::kAttentionCore);
  if (sc_.training.recompute_granularity == RecomputeGranularity::kSelective && !op_sac) {
    context(Phase::kRecompute, mb, chunk, layer);
    attention_core(false);
    context(Phase::kBackward, mb, chunk, layer);
  }
  attention_core(true);
  role(Role::kQkv);
  column_parallel_backward(d_.qkv_local, d_.h, "attention", f8);
  role(Role::kInputLayerNorm);
  kernel(k_.norm(true), "attention");
  if (f8 && sc_.training.fp8_recipe == Fp8Recipe::kDelayed) {
    role(Role::kNone);
    kernel(k_.fp8_scale_update(4), "fp8 scales");  // 4 output gradients
  }
  if (!sc_.training.gradient_accumulation_fusion) {
    // Megatron before gradient accumulation fusion: the layer's gradients of this micro-batch,
    // written to param.grad by its backward, added into main_grad by the parameters' backward
    // hooks (core/lowering_kernels.hpp grad_accumulate): every parameter of the layer on this
    // rank, the GEMM weights, biases and norms. Under a split backward it follows the W step's
    // wgrad GEMMs (kernel() issues it in W only). With the fusion on, the biases and norms still
    // take the hook (Megatron fuses the GEMM weights only); that pass, about 1/h of the layer's
    // parameters, is not counted.
    role(Role::kGradAccumulate);
    kernel(k_.grad_accumulate(layer_parameters_on_rank(sc_.model, sc_.parallel, layer).total()),
           "grad accumulate");
  }
}

void RankLowering::embedding_forward() {
  role(Role::kEmbedding);
  kernel(k_.embedding(false), "embedding");
  // VocabParallelEmbedding: partial lookups summed over TP (reduce-scatter into SP regions).
  tp_blocking(tp_reduce(), act_bytes(d_.h), d_.sp ? "sp reduce_scatter" : "tp all_reduce");
  role(Role::kEmbeddingDropout);
  kernel(k_.dropout(), "embedding");
}

void RankLowering::embedding_backward() {
  role(Role::kEmbedding);
  if (d_.sp) tp_blocking(CollectiveKind::kAllGather, act_bytes(d_.h), "sp all_gather grad");
  kernel(k_.embedding(true), "embedding");
}

void RankLowering::head_forward() {
  role(Role::kFinalLayerNorm);
  kernel(k_.norm(false), "final layernorm");
  role(Role::kLmHead);
  gathered_gemm(d_.vocab_local, d_.h, "lm head");
  // Vocab-parallel cross-entropy: all-reduce of the logit max, then of the target logits and
  // of the sum of exponentials (fp32, one value per token each).
  role(Role::kCrossEntropyMax);
  kernel(k_.cross_entropy("cross_entropy_max"), "cross entropy");
  tp_blocking(CollectiveKind::kAllReduce, d_.tokens * 4, "tp all_reduce max");
  role(Role::kCrossEntropy);
  kernel(k_.cross_entropy("cross_entropy_fwd"), "cross entropy");
  role(Role::kCrossEntropyTarget);
  tp_blocking(CollectiveKind::kAllReduce, d_.tokens * 4, "tp all_reduce target");
  role(Role::kCrossEntropySumExp);
  tp_blocking(CollectiveKind::kAllReduce, d_.tokens * 4, "tp all_reduce sum-exp");
}

void RankLowering::head_backward() {
  role(Role::kCrossEntropy);
  kernel(k_.cross_entropy("cross_entropy_bwd"), "cross entropy");
  role(Role::kLmHead);
  column_parallel_backward(d_.vocab_local, d_.h, "lm head");
  role(Role::kFinalLayerNorm);
  kernel(k_.norm(true), "final layernorm");
}

}  // namespace traintwin::lowering
