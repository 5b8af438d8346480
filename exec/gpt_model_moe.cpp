// GptModel: the MoE layer's routed experts (Megatron-Core MoELayer with the alltoall
// dispatcher): router, permutation, the local experts' MLPs, unpermutation, forward and
// backward; see exec/gpt_model.hpp, table of contents in exec/gpt_model.cpp. Next in the flow:
// the layer's MLP residual in exec/gpt_model_layer.cpp; after the last layer, the final
// LayerNorm and LM head at the end of exec/gpt_model.cpp.
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "exec/cpu/moe_router.hpp"
#include "exec/gpt_model.hpp"

namespace traintwin::exec {

// ---- MoE layer (routed experts; Megatron-Core MoELayer with the alltoall dispatcher) ------------

// moe_chunk_cat (core/lowering_kernels.hpp) is the copy Megatron-Core makes to put the received
// rows in local-expert order (sort_chunks_by_idxs) and to concatenate SequentialMLP's per-expert
// outputs: here the exchange already lands the rows in local-expert order in one buffer and the
// per-expert GEMMs write their slices of one output, so the kernel has nothing to move (its time
// is the simulator's).

/// The routed experts' forward on this rank's N = b Tl rows of ln2, Role by Role (between them
/// the walk runs the dispatch and combine all-to-alls over EP, exec/executor.cpp):
///   kRouter: logits = ln2 W_r^T; top-k softmax with capacity (moe_router.hpp); the aux loss.
///   kMoePermute: the routed copies in expert-major order.
///   kExpertFc1 / kExpertActivation / kExpertFc2: the local experts' MLPs on the dispatched rows
///     (grouped GEMM, or local expert j at the j-th GEMM kernel of the op).
///   kMoeUnpermute: the expert outputs back to token order, weighted by the router probs.
void GptModel::moe_forward(const Op& op, const std::string& kernel, Role role, int64_t expert) {
  if (kernel == "moe_chunk_cat") return;  // a layout copy: nothing to move here (above)
  LayerState& L = layer(op);
  const LayerParams& P = layer_params_.at(op.layer);
  const ModelSpec& model = prog_.scenario.model;
  const int64_t n = g_.b * g_.tl, h = g_.h, e = g_.experts;
  switch (role) {
    case Role::kRouter:
      if (kernel == "gemm_fwd") {
        L.logits = zeros(n * e);
        linear_.forward(L.logits, L.ln2, P.router_w, {}, 1, n, h, e);
      } else if (kernel == "moe_router_topk_fwd") {
        const int64_t capacity =
            model.moe_expert_capacity_factor
                ? cpu::moe_expert_capacity(n, g_.topk, e, *model.moe_expert_capacity_factor)
                : 0;
        L.gates = zeros(n * e);
        L.probs = zeros(n * e);
        L.topk_map.assign(static_cast<size_t>(n * e), 0);
        L.routing_map.assign(static_cast<size_t>(n * e), 0);
        L.tokens_per_expert.assign(static_cast<size_t>(e), 0);
        backend_.moe_topk_softmax_forward(L.gates, L.topk_map, L.routing_map, L.probs,
                                          L.tokens_per_expert, L.logits, n, e, g_.topk, capacity,
                                          model.moe_pad_expert_input_to_capacity);
        L.perm = cpu::moe_make_permutation(L.routing_map, n, e);
        // (the walk sums tokens_per_expert over TP under SP before the aux loss: exec/executor.cpp)
      } else if (kernel == "moe_aux_loss_fwd") {
        L.scores = zeros(n * e);
        const double aux = backend_.moe_switch_aux_loss_forward(
            L.scores, L.logits, L.tokens_per_expert, n, e, n * (g_.sp ? g_.t : 1), g_.topk,
            model.moe_aux_loss_coeff);
        // Under SP the TP shards' terms add up to the micro-batch's loss: one term, on TP rank 0.
        aux_loss_sum_ += aux;
        if (coord_.tp == 0) ++aux_loss_terms_;
      } else {
        unexpected(op, "unexpected router kernel " + kernel);
      }
      return;
    case Role::kMoePermute:
      L.permuted = zeros(L.perm.rows() * h);
      backend_.moe_permute_forward(L.permuted, L.ln2, L.perm, n, h);
      if (g_.ep == 1) {  // no dispatch op (a group of one): every expert is local
        L.exchange = MoeExchange{
            {L.perm.rows()}, {L.perm.rows()}, L.perm.rows_per_expert, L.perm.rows_per_expert};
        L.dispatched = std::move(L.permuted);
      }
      return;
    case Role::kExpertFc1: {
      const auto& groups = L.exchange.rows_per_local_expert;
      const int64_t r = L.dispatched.size() / static_cast<size_t>(h);
      if (L.expert_fc1.empty()) L.expert_fc1 = zeros(r * g_.fc1e);
      if (kernel == "grouped_gemm_fwd") {
        backend_.grouped_matmul_forward(L.expert_fc1, L.dispatched, P.experts_fc1_w, groups, h,
                                        g_.fc1e);
      } else if (kernel == "gemm_fwd") {  // local expert `expert` alone
        const int64_t first = std::accumulate(groups.begin(), groups.begin() + expert, int64_t{0});
        const int64_t rows = groups[static_cast<size_t>(expert)];
        if (rows > 0) {
          linear_.forward(L.expert_fc1.span().subspan(static_cast<size_t>(first * g_.fc1e),
                                                      static_cast<size_t>(rows * g_.fc1e)),
                          L.dispatched.span().subspan(static_cast<size_t>(first * h),
                                                      static_cast<size_t>(rows * h)),
                          expert_slice(P.experts_fc1_w, g_.el, expert), {}, 1, rows, h, g_.fc1e);
        }
      } else {
        unexpected(op, "unexpected expert FC1 kernel " + kernel);
      }
      return;
    }
    case Role::kExpertActivation: {
      const int64_t r = L.dispatched.size() / static_cast<size_t>(h);
      L.expert_act = zeros(r * g_.fe);
      if (r == 0) return;
      switch (g_.activation) {
        case Activation::kGelu:
          backend_.gelu_forward(L.expert_act, L.expert_fc1);
          break;
        case Activation::kSwiglu:
          backend_.swiglu_forward(L.expert_act, L.expert_fc1, r, g_.fe);
          break;
        case Activation::kSquaredRelu:
          backend_.squared_relu_forward(L.expert_act, L.expert_fc1);
          break;
      }
      return;
    }
    case Role::kExpertFc2: {
      const auto& groups = L.exchange.rows_per_local_expert;
      const int64_t r = L.dispatched.size() / static_cast<size_t>(h);
      if (L.expert_fc2.empty()) L.expert_fc2 = zeros(r * h);
      if (kernel == "grouped_gemm_fwd") {
        backend_.grouped_matmul_forward(L.expert_fc2, L.expert_act, P.experts_fc2_w, groups, g_.fe,
                                        h);
      } else if (kernel == "gemm_fwd") {
        const int64_t first = std::accumulate(groups.begin(), groups.begin() + expert, int64_t{0});
        const int64_t rows = groups[static_cast<size_t>(expert)];
        if (rows > 0) {
          linear_.forward(L.expert_fc2.span().subspan(static_cast<size_t>(first * h),
                                                      static_cast<size_t>(rows * h)),
                          L.expert_act.span().subspan(static_cast<size_t>(first * g_.fe),
                                                      static_cast<size_t>(rows * g_.fe)),
                          expert_slice(P.experts_fc2_w, g_.el, expert), {}, 1, rows, g_.fe, h);
        }
      } else {
        unexpected(op, "unexpected expert FC2 kernel " + kernel);
      }
      return;
    }
    case Role::kMoeUnpermute:
      if (g_.ep == 1) L.combined = std::move(L.expert_fc2);  // no combine op
      L.moe_out = zeros(n * h);
      backend_.moe_unpermute_forward(L.moe_out, L.combined, L.probs, L.perm, n, e, h);
      if (!training_) {
        L.combined.reset();
        L.dispatched.reset();
        L.expert_fc1.reset();
        L.expert_act.reset();
      }
      return;
    default:
      unexpected(op, "not an MoE forward role");
  }
}

/// The routed experts' backward, mirrored: unpermute (dprobs and the expert outputs' gradient),
/// the experts' dgrad / wgrad, permute's scatter-add into d_moe_in, then the router: the aux
/// loss and top-k softmax backward into dlogits, the router's dgrad (into d_moe_in) and wgrad.
void GptModel::moe_backward(const Op& op, const std::string& kernel, Role role, int64_t expert) {
  if (kernel == "moe_chunk_cat") return;  // a layout copy: nothing to move here (above)
  LayerState& L = layer(op);
  const LayerParams& P = layer_params_.at(op.layer);
  const LayerParams& G = grads_of(op);
  const ModelSpec& model = prog_.scenario.model;
  const int64_t n = g_.b * g_.tl, h = g_.h, e = g_.experts;
  const int64_t r = L.dispatched.size() / static_cast<size_t>(h);
  const auto& groups = L.exchange.rows_per_local_expert;
  const bool dgrad = kernel == "gemm_dgrad" || kernel == "grouped_gemm_dgrad";
  const bool wgrad = kernel == "gemm_wgrad" || kernel == "grouped_gemm_wgrad";
  const bool grouped = kernel.rfind("grouped_", 0) == 0;
  // One local expert's rows of a [R, width] tensor (grouped: all of them).
  auto rows_of = [&](Tensor& t, int64_t width) -> FSpan {
    if (grouped) return t.span();
    const int64_t first = std::accumulate(groups.begin(), groups.begin() + expert, int64_t{0});
    return t.span().subspan(static_cast<size_t>(first * width),
                            static_cast<size_t>(groups[static_cast<size_t>(expert)] * width));
  };
  auto one_group = [&]() -> std::vector<int64_t> {
    if (grouped) return groups;
    return {groups[static_cast<size_t>(expert)]};
  };
  auto weights = [&](std::span<float> all) {
    return grouped ? all : expert_slice(all, g_.el, expert);
  };
  switch (role) {
    case Role::kMoeUnpermute:
      L.d_combined = zeros(L.perm.rows() * h);
      L.d_probs = zeros(n * e);
      backend_.moe_unpermute_backward(L.d_combined, L.d_probs, L.d_moe, L.combined, L.probs, L.perm,
                                      n, e, h);
      L.d_moe.reset();
      L.combined.reset();
      if (g_.ep == 1) L.d_expert_fc2 = std::move(L.d_combined);  // no combine op
      return;
    case Role::kExpertFc2:
      if (dgrad) {
        if (L.d_expert_act.empty()) L.d_expert_act = zeros(r * g_.fe);
        backend_.grouped_matmul_backward_data(rows_of(L.d_expert_act, g_.fe),
                                              rows_of(L.d_expert_fc2, h), weights(P.experts_fc2_w),
                                              one_group(), g_.fe, h);
      } else if (wgrad) {
        backend_.grouped_matmul_backward_weight(
            weights(G.experts_fc2_w), rows_of(L.d_expert_fc2, h), rows_of(L.expert_act, g_.fe),
            one_group(), g_.fe, h);
      } else {
        unexpected(op, "unexpected expert FC2 kernel " + kernel);
      }
      return;
    case Role::kExpertActivation:
      if (!split_) {  // else FC2's W step reads them
        L.d_expert_fc2.reset();
        L.expert_act.reset();
      }
      L.d_expert_fc1 = zeros(r * g_.fc1e);
      if (r > 0) {
        switch (g_.activation) {
          case Activation::kGelu:
            backend_.gelu_backward(L.d_expert_fc1, L.expert_fc1, L.d_expert_act);
            break;
          case Activation::kSwiglu:
            backend_.swiglu_backward(L.d_expert_fc1, L.d_expert_act, L.expert_fc1, r, g_.fe);
            break;
          case Activation::kSquaredRelu:
            backend_.squared_relu_backward(L.d_expert_fc1, L.expert_fc1, L.d_expert_act);
            break;
        }
      }
      L.d_expert_act.reset();
      L.expert_fc1.reset();
      return;
    case Role::kExpertFc1:
      if (dgrad) {
        if (L.d_dispatched.empty()) L.d_dispatched = zeros(r * h);
        backend_.grouped_matmul_backward_data(rows_of(L.d_dispatched, h),
                                              rows_of(L.d_expert_fc1, g_.fc1e),
                                              weights(P.experts_fc1_w), one_group(), h, g_.fc1e);
      } else if (wgrad) {
        backend_.grouped_matmul_backward_weight(weights(G.experts_fc1_w),
                                                rows_of(L.d_expert_fc1, g_.fc1e),
                                                rows_of(L.dispatched, h), one_group(), h, g_.fc1e);
      } else {
        unexpected(op, "unexpected expert FC1 kernel " + kernel);
      }
      return;
    case Role::kMoePermute:
      if (g_.ep == 1) L.d_permuted = std::move(L.d_dispatched);  // no dispatch op
      L.d_moe_in = zeros(n * h);
      backend_.moe_permute_backward(L.d_moe_in, L.d_permuted, L.perm, n, h);
      L.d_permuted.reset();
      return;
    case Role::kRouter: {
      const double daux =  // each micro-batch's aux loss weighs 1 / (m DP), as its LM loss
          1.0 / static_cast<double>(g_.m * g_.dp);
      if (kernel == "moe_aux_loss_bwd") {
        if (L.d_logits.empty()) L.d_logits = zeros(n * e);
        backend_.moe_switch_aux_loss_backward(L.d_logits, daux, L.scores, L.tokens_per_expert, n, e,
                                              n * (g_.sp ? g_.t : 1), g_.topk,
                                              model.moe_aux_loss_coeff);
        L.scores.reset();
      } else if (kernel == "moe_router_topk_bwd") {
        if (L.d_logits.empty()) L.d_logits = zeros(n * e);
        backend_.moe_topk_softmax_backward(L.d_logits, L.d_probs, L.gates, L.topk_map,
                                           L.routing_map, n, e);
        L.d_probs.reset();
      } else if (kernel == "gemm_dgrad") {
        linear_.backward_data(L.d_moe_in, L.d_logits, P.router_w, 1, n, h, e);
      } else if (kernel == "gemm_wgrad") {
        linear_.backward_weight(G.router_w, {}, L.d_logits, L.ln2, 1, n, h, e);
        L.d_logits.reset();
        L.logits.reset();
        L.gates.reset();
        L.probs.reset();
        L.dispatched.reset();
        L.d_dispatched.reset();
      } else {
        unexpected(op, "unexpected router kernel " + kernel);
      }
      return;
    }
    default:
      unexpected(op, "not an MoE backward role");
  }
}

}  // namespace traintwin::exec
