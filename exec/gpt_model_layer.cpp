// GptModel: one transformer layer's forward and backward, Role by Role (LayerNorms, QKV, the
// attention core, projection, residuals, MLP); see exec/gpt_model.hpp, table of contents in
// exec/gpt_model.cpp. Next in the flow: the attention core (flash / ring attention) in
// exec/gpt_model_attention.cpp, an MoE layer's routed experts in exec/gpt_model_moe.cpp; after
// the last layer, the final LayerNorm and LM head at the end of exec/gpt_model.cpp.
#include <string>
#include <utility>

#include "exec/gpt_model.hpp"
#include "exec/gpt_model_internal.hpp"

namespace traintwin::exec {

// ---- transformer layer --------------------------------------------------------------------------

/// The input of the first layer of a chunk (embedding output or received activation) or the
/// previous layer's output.
Tensor GptModel::take_layer_input(const Op& op) {
  ChunkState& st = chunk(op.model_chunk, op.micro_batch);
  const int64_t i = op.layer - first_layer(op.model_chunk);
  if (i > 0) return std::move(st.layers[static_cast<size_t>(i - 1)].out);
  if (takes_embedding(op.model_chunk)) return std::move(st.emb_out);
  return std::move(chunk_input(st, op.model_chunk));
}

/// The forward of one layer, Role by Role (between them the walk runs the TP collectives: the
/// SP all-gathers before QKV and FC1, the reduces after the projection and FC2).
void GptModel::layer_forward(const Op& op, const std::string& kernel, Role role) {
  LayerState& L = layer(op);
  const LayerParams& P = layer_params_.at(op.layer);
  const int64_t b = g_.b, s = g_.s, h = g_.h;
  const int64_t tl = g_.tl, hl = g_.hl, f = mlp_width(op.layer), heads = g_.heads;
  switch (role) {
    case Role::kInputLayerNorm:
      if (op.phase != Phase::kRecompute) L.in = take_layer_input(op);
      norm_forward(L.ln1, L.ln1_mean, L.ln1_rstd, L.in, P.ln1_w, P.ln1_b);
      return;
    case Role::kQkv:  // column-parallel
      L.qkv = zeros(b * s * g_.qkv);
      linear_.forward(L.qkv, g_.sp ? L.ln1_full : L.ln1, P.qkv_w, P.qkv_b, b, s, h, g_.qkv);
      L.ln1_full.reset();
      return;
    case Role::kAttentionCore: {
      if (kernel == "rope_fwd") {  // before the attention kernel; L.qkv stays unrotated
        L.qkv_rope = clone(L.qkv);
        rope(L.qkv_rope, L.qkv, /*backward=*/false);
        return;
      }
      if (g_.blockwise) {  // flash, fused and ring attention: no s x s store
        if (kernel == "cp_attention_merge") {
          blockwise_forward(op, L, /*merge=*/true);
        } else if (kernel == "attention_fwd" || kernel == "flash_attention_fwd" ||
                   kernel == "fused_attention_fwd") {
          blockwise_forward(op, L, /*merge=*/false);
        } else {
          unexpected(op, "unexpected kernel " + kernel);
        }
        return;
      }
      const Tensor& qkv = g_.rope ? L.qkv_rope : L.qkv;
      L.attn = zeros(b * s * hl);
      L.att = zeros(b * heads * s * s);
      if (g_.gqa) {
        backend_.gqa_attention_forward(L.attn, L.att, qkv, b, s, heads, g_.groups, g_.hd,
                                       attention_dropout(op.micro_batch, op.layer));
      } else {
        L.preatt = zeros(b * heads * s * s);
        backend_.attention_forward(L.attn, L.preatt, L.att, qkv, b, s, hl, heads,
                                   attention_dropout(op.micro_batch, op.layer));
        L.preatt.reset();
      }
      // Selective recomputation (and evaluation) keeps no s x s scores.
      if ((op.phase == Phase::kForward && recompute_ == RecomputeGranularity::kSelective) ||
          !training_) {
        L.att.reset();
        L.qkv_rope.reset();
      }
      return;
    }
    case Role::kAttentionProjection:  // row-parallel: partial sums, reduced by the walk
      L.proj = zeros(b * s * h);
      linear_.forward(L.proj, L.attn, P.proj_w, {}, b, s, hl, h);
      return;
    case Role::kAttentionResidual: {
      Tensor y = std::move(reduced(L.proj, L.proj_rs));
      L.proj.reset();
      L.proj_rs.reset();
      L.resid1 = zeros(b * tl * h);
      dropout_add_forward(L.resid1, y, P.proj_b, L.in, dropout(kSiteAttention, op.layer),
                          op.micro_batch, false);
      return;
    }
    case Role::kPostAttentionLayerNorm:
      norm_forward(L.ln2, L.ln2_mean, L.ln2_rstd, L.resid1, P.ln2_w, P.ln2_b);
      return;
    case Role::kFc1: {  // column-parallel (in an MoE layer: the shared expert)
      const int64_t fc1 = fc1_width(op.layer);
      L.fc1 = zeros(b * s * fc1);
      linear_.forward(L.fc1, g_.sp ? L.ln2_full : L.ln2, P.fc1_w, P.fc1_b, b, s, h, fc1);
      L.ln2_full.reset();
      return;
    }
    case Role::kGelu:
      L.gelu = zeros(b * s * f);
      switch (g_.activation) {
        case Activation::kGelu:
          backend_.gelu_forward(L.gelu, L.fc1);
          break;
        case Activation::kSwiglu:
          backend_.swiglu_forward(L.gelu, L.fc1, b * s, f);
          break;
        case Activation::kSquaredRelu:
          backend_.squared_relu_forward(L.gelu, L.fc1);
          break;
      }
      return;
    case Role::kFc2:  // row-parallel
      L.fc2 = zeros(b * s * h);
      linear_.forward(L.fc2, L.gelu, P.fc2_w, {}, b, s, f, h);
      return;
    case Role::kMlpResidual: {
      Tensor y;
      if (moe_layer(op.layer)) {
        // The routed output, plus the shared expert's (reduced) output when there is one.
        y = std::move(L.moe_out);
        if (g_.fs > 0) {
          Tensor sum = zeros(b * tl * h);
          backend_.bias_dropout_add_forward(sum, reduced(L.fc2, L.fc2_rs), {}, y,
                                            cpu::DropoutParams{0.0, hyper_.seed, 0},
                                            block(op.micro_batch, false));
          y = std::move(sum);
        }
      } else {
        y = std::move(reduced(L.fc2, L.fc2_rs));
      }
      L.fc2.reset();
      L.fc2_rs.reset();
      L.out = zeros(b * tl * h);
      dropout_add_forward(L.out, y, P.fc2_b, L.resid1, dropout(kSiteMlp, op.layer), op.micro_batch,
                          false);
      // Full recomputation (and evaluation) keeps only the layer input.
      if ((op.phase == Phase::kForward && recompute_ == RecomputeGranularity::kFull) ||
          !training_) {
        Tensor in = std::move(L.in), out = std::move(L.out);
        L = LayerState();
        if (training_) L.in = std::move(in);
        L.out = std::move(out);
      }
      return;
    }
    default:
      unexpected(op, "not a layer-forward role");
  }
}

/// The gradient flowing into the last layer of a chunk: from the final LayerNorm (last virtual
/// stage) or received from the next stage.
Tensor GptModel::take_output_grad(const Op& op) {
  ChunkState& st = chunk(op.model_chunk, op.micro_batch);
  const int64_t i = op.layer - first_layer(op.model_chunk);
  if (i + 1 < num_layers(op.model_chunk))
    return std::move(st.layers[static_cast<size_t>(i + 1)].d_in);
  if (computes_loss(op.model_chunk)) return std::move(st.d_last);
  return std::move(chunk_output_grad(st, op.model_chunk));
}

/// The backward of one layer, Role by Role in reverse order; the linear layers run their data
/// gradient ("gemm_dgrad") and weight gradient ("gemm_wgrad") as separate kernels, so that the
/// walk can overlap the async TP reduce of the former with the latter.
void GptModel::layer_backward(const Op& op, const std::string& kernel, Role role) {
  LayerState& L = layer(op);
  const LayerParams& P = layer_params_.at(op.layer);
  const LayerParams& G = grads_of(op);
  const int64_t b = g_.b, s = g_.s, h = g_.h;
  const int64_t tl = g_.tl, hl = g_.hl, f = mlp_width(op.layer), heads = g_.heads;
  const int64_t fc1 = fc1_width(op.layer);
  const bool dgrad = kernel == "gemm_dgrad", wgrad = kernel == "gemm_wgrad";
  auto bad_kernel = [&] { unexpected(op, "unexpected kernel " + kernel); };
  switch (role) {
    case Role::kMlpResidual: {
      Tensor d_out = take_output_grad(op);
      L.d_resid1 = zeros(b * tl * h);
      L.d_branch = zeros(b * tl * h);
      dropout_add_backward(L.d_branch, G.fc2_b, L.d_resid1, d_out, dropout(kSiteMlp, op.layer),
                           op.micro_batch, false);
      if (moe_layer(op.layer)) {
        // The routed experts' output gradient; d_branch stays for the shared expert.
        L.d_moe = g_.fs > 0 ? clone(L.d_branch) : std::move(L.d_branch);
      }
      return;
    }
    case Role::kFc2:
      if (dgrad) {
        L.d_gelu = zeros(b * s * f);
        linear_.backward_data(L.d_gelu, g_.sp ? L.d_branch_full : L.d_branch, P.fc2_w, b, s, f, h);
      } else if (wgrad) {
        // In a W step (split_) the MLP's d_branch waits in d_branch_mlp.
        const Tensor& dy = !L.d_branch_mlp.empty() ? L.d_branch_mlp
                           : g_.sp                 ? L.d_branch_full
                                                   : L.d_branch;
        linear_.backward_weight(G.fc2_w, {}, dy, L.gelu, b, s, f, h);
        L.d_branch_mlp.reset();
        if (!split_) {
          L.d_branch.reset();
          L.d_branch_full.reset();
        }
        L.gelu.reset();
      } else {
        bad_kernel();
      }
      return;
    case Role::kGelu:
      L.d_fc1 = zeros(b * s * fc1);
      switch (g_.activation) {
        case Activation::kGelu:
          backend_.gelu_backward(L.d_fc1, L.fc1, L.d_gelu);
          break;
        case Activation::kSwiglu:
          backend_.swiglu_backward(L.d_fc1, L.d_gelu, L.fc1, b * s, f);
          break;
        case Activation::kSquaredRelu:
          backend_.squared_relu_backward(L.d_fc1, L.fc1, L.d_gelu);
          break;
      }
      L.d_gelu.reset();
      L.fc1.reset();
      return;
    case Role::kFc1:
      if (dgrad) {
        L.d_ln_full = zeros(b * s * h);
        linear_.backward_data(L.d_ln_full, L.d_fc1, P.fc1_w, b, s, h, fc1);
      } else if (wgrad) {
        linear_.backward_weight(G.fc1_w, G.fc1_b, L.d_fc1, g_.sp ? L.ln2_full : L.ln2, b, s, h,
                                fc1);
        L.d_fc1.reset();
        L.ln2_full.reset();
      } else {
        bad_kernel();
      }
      return;
    case Role::kPostAttentionLayerNorm: {
      const Tensor* d_ln = &reduced(L.d_ln_full, L.d_ln);
      Tensor sum;
      if (moe_layer(op.layer)) {
        // The routed path's gradient, plus the shared expert's (reduced) when there is one.
        if (g_.fs > 0) {
          sum = zeros(b * tl * h);
          backend_.bias_dropout_add_forward(sum, *d_ln, {}, L.d_moe_in,
                                            cpu::DropoutParams{0.0, hyper_.seed, 0},
                                            block(op.micro_batch, false));
          d_ln = &sum;
        } else {
          d_ln = &L.d_moe_in;
        }
      }
      norm_backward(L.d_resid1, G.ln2_w, G.ln2_b, *d_ln, L.resid1, P.ln2_w, L.ln2_mean, L.ln2_rstd);
      L.d_moe_in.reset();
      L.d_ln_full.reset();
      L.d_ln.reset();
      if (!split_) L.ln2.reset();  // else FC1's W step reads it
      return;
    }
    case Role::kAttentionResidual:
      L.d_in = zeros(b * tl * h);
      // FC2's W step comes later: it reads the MLP's output gradient as its dgrad did (SP: the
      // gathered one, before the projection's gather takes d_branch_full).
      if (split_) L.d_branch_mlp = std::move(g_.sp ? L.d_branch_full : L.d_branch);
      L.d_branch = zeros(b * tl * h);
      dropout_add_backward(L.d_branch, G.proj_b, L.d_in, L.d_resid1,
                           dropout(kSiteAttention, op.layer), op.micro_batch, false);
      L.d_resid1.reset();
      L.resid1.reset();
      return;
    case Role::kAttentionProjection:
      if (dgrad) {
        L.d_attn = zeros(b * s * hl);
        linear_.backward_data(L.d_attn, g_.sp ? L.d_branch_full : L.d_branch, P.proj_w, b, s, hl,
                              h);
      } else if (wgrad) {
        linear_.backward_weight(G.proj_w, {}, g_.sp ? L.d_branch_full : L.d_branch, L.attn, b, s,
                                hl, h);
        L.d_branch.reset();
        L.d_branch_full.reset();
      } else {
        bad_kernel();
      }
      return;
    case Role::kAttentionCore: {
      if (kernel == "rope_bwd") {  // after the attention kernel: d(rotated q, k) -> d(q, k)
        rope(L.d_qkv, L.d_qkv, /*backward=*/true);
        return;
      }
      if (g_.blockwise) return blockwise_backward(op, L);
      if (L.att.empty()) unexpected(op, "attention probabilities were not kept or recomputed");
      const Tensor& qkv = g_.rope ? L.qkv_rope : L.qkv;
      L.d_qkv = zeros(b * s * g_.qkv);
      if (g_.gqa) {
        backend_.gqa_attention_backward(L.d_qkv, L.d_attn, qkv, L.att, b, s, heads, g_.groups,
                                        g_.hd, attention_dropout(op.micro_batch, op.layer));
      } else {
        backend_.attention_backward(L.d_qkv, L.d_attn, qkv, L.att, b, s, hl, heads,
                                    attention_dropout(op.micro_batch, op.layer));
      }
      L.d_attn.reset();
      L.att.reset();
      if (!split_) L.attn.reset();  // else the projection's W step reads it
      L.qkv_rope.reset();
      return;
    }
    case Role::kQkv:
      if (dgrad) {
        L.d_ln_full = zeros(b * s * h);
        linear_.backward_data(L.d_ln_full, L.d_qkv, P.qkv_w, b, s, h, g_.qkv);
      } else if (wgrad) {
        linear_.backward_weight(G.qkv_w, G.qkv_b, L.d_qkv, g_.sp ? L.ln1_full : L.ln1, b, s, h,
                                g_.qkv);
        L.d_qkv.reset();
        L.ln1_full.reset();
        L.qkv.reset();
        if (split_) {  // the layer's last W kernel: all but the input gradient goes
          Tensor d_in = std::move(L.d_in);
          LayerState kept;
          keep_param_grad(kept, L);  // for grad_accumulate, which follows
          L = std::move(kept);
          L.d_in = std::move(d_in);
        }
      } else {
        bad_kernel();
      }
      return;
    case Role::kInputLayerNorm: {
      norm_backward(L.d_in, G.ln1_w, G.ln1_b, reduced(L.d_ln_full, L.d_ln), L.in, P.ln1_w,
                    L.ln1_mean, L.ln1_rstd);
      if (split_) {
        // B ends here; the W step reads the GEMM inputs (ln1, attn, ln2, gelu; the SP shards
        // of ln1 and ln2, which W all-gathers again) and output gradients (d_qkv, d_branch,
        // d_branch_full under SP, d_branch_mlp, d_fc1), in an MoE layer the routed experts'
        // (dispatched, expert_act, d_expert_fc1, d_expert_fc2, their row groups) and the
        // router's (d_logits), and frees them after QKV's wgrad.
        LayerState kept;
        for (Tensor LayerState::*t :
             {&LayerState::d_in, &LayerState::ln1, &LayerState::attn, &LayerState::ln2,
              &LayerState::gelu, &LayerState::d_qkv, &LayerState::d_branch,
              &LayerState::d_branch_full, &LayerState::d_branch_mlp, &LayerState::d_fc1,
              &LayerState::dispatched, &LayerState::expert_act, &LayerState::d_expert_fc1,
              &LayerState::d_expert_fc2, &LayerState::d_logits}) {
          kept.*t = std::move(L.*t);
        }
        kept.exchange = std::move(L.exchange);
        keep_param_grad(kept, L);
        L = std::move(kept);
        return;
      }
      Tensor d_in = std::move(L.d_in);
      LayerState kept;
      keep_param_grad(kept, L);  // for grad_accumulate, which follows
      L = std::move(kept);
      L.d_in = std::move(d_in);
      return;
    }
    default:
      unexpected(op, "not a layer-backward role");
  }
}

}  // namespace traintwin::exec
