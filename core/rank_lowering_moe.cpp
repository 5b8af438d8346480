// RankLowering: the MoE layer (router, token dispatch, experts,
// shared expert); see core/rank_lowering.hpp.
#include "core/rank_lowering.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/error.hpp"

namespace traintwin::lowering {

bool RankLowering::alltoall() const {
  return sc_.model.moe_token_dispatcher_type == MoeTokenDispatcher::kAllToAll;
}

bool RankLowering::aux_loss() const {
  return sc_.model.moe_router_load_balancing_type == MoeLoadBalancing::kAuxLoss;
}

void RankLowering::ep_blocking(CollectiveKind kind, GroupKind group, int64_t bytes,
                               const char* what) {
  wait(collective(kind, group, Stream::kEpComm, bytes, what));
}

void RankLowering::expert_gemm(const char* variant, int64_t n, int64_t k, bool fp8) {
  const int64_t m = d_.expert_rows;
  if (sc_.model.moe_grouped_gemm) {
    const std::string_view v = variant;
    const char* grouped = v == "gemm_fwd"     ? "grouped_gemm_fwd"
                          : v == "gemm_dgrad" ? "grouped_gemm_dgrad"
                                              : "grouped_gemm_wgrad";
    kernel(k_.grouped_gemm(grouped, d_.local_experts, m, n, k, fp8, d_.etp), "experts");
    return;
  }
  Kernel one = gemm_kernel(variant, m, n, k, fp8);
  one.key.tp = d_.etp;
  for (int64_t e = 0; e < d_.local_experts; ++e) kernel(one, "experts", static_cast<int32_t>(e));
}

void RankLowering::router_forward() {
  role(Role::kRouter);
  kernel(k_.gemm("gemm_fwd", d_.moe_tokens, d_.experts, d_.h), "router");
  kernel(k_.router_topk(false, d_.moe_tokens, aux_loss()), "router");
  if (aux_loss()) kernel(k_.aux_loss(false, d_.moe_tokens), "router");
}

void RankLowering::expert_fp8_cast(int64_t columns) {
  // Transformer Engine's Linear casts (and transposes, for the backward) its own 16-bit input:
  // one cast per local expert in SequentialMLP, one multi-tensor cast over the groups in
  // GroupedLinear (moe_grouped_gemm). Megatron-Core's expert activation (bias_swiglu_impl /
  // bias_geglu_impl, megatron/core/fusions) writes 16-bit, so nothing is fused into it.
  if (sc_.model.moe_grouped_gemm) {
    fp8_cast(local_expert_rows() * columns, "experts", Cast::kSeparate);
    return;
  }
  for (int64_t e = 0; e < d_.local_experts; ++e) {
    fp8_cast(d_.expert_rows * columns, "experts", Cast::kSeparate);
  }
}

void RankLowering::sequential_mlp_cat() {
  if (sc_.model.moe_grouped_gemm || d_.local_experts < 2) return;
  kernel(k_.moe_chunk_cat(local_expert_rows()), "experts");
}

void RankLowering::experts_forward(bool f8) {
  const int64_t rows = local_expert_rows();
  role(Role::kExpertFc1);
  if (f8) expert_fp8_cast(d_.h);  // the permuted tokens
  expert_gemm("gemm_fwd", d_.expert_fc1_local, d_.h, f8);
  role(Role::kExpertActivation);
  kernel(k_.activation_n(false, rows * d_.expert_ffn / d_.etp, d_.etp), "experts");
  role(Role::kExpertFc2);
  if (f8) expert_fp8_cast(d_.expert_ffn / d_.etp);  // the activation's output
  expert_gemm("gemm_fwd", d_.h, d_.expert_ffn / d_.etp, f8);
  sequential_mlp_cat();  // torch.cat of the local experts' outputs
}

void RankLowering::experts_backward(bool f8) {
  const int64_t rows = local_expert_rows();
  role(Role::kExpertFc2);
  if (f8) expert_fp8_cast(d_.h);  // the output gradient
  expert_gemm("gemm_dgrad", d_.h, d_.expert_ffn / d_.etp, f8);
  expert_gemm("gemm_wgrad", d_.h, d_.expert_ffn / d_.etp, f8);
  role(Role::kExpertActivation);
  kernel(k_.activation_n(true, rows * d_.expert_ffn / d_.etp, d_.etp), "experts");
  role(Role::kExpertFc1);
  if (f8) expert_fp8_cast(d_.expert_fc1_local);  // the activation's input gradient
  expert_gemm("gemm_dgrad", d_.expert_fc1_local, d_.h, f8);
  expert_gemm("gemm_wgrad", d_.expert_fc1_local, d_.h, f8);
  sequential_mlp_cat();  // the backward of the input's split: a cat of the input gradients
}

void RankLowering::sort_chunks_by_local_expert(const char* what) {
  if (d_.local_experts < 2) return;
  kernel(k_.moe_chunk_cat(local_expert_rows()), what);
}

void RankLowering::shared_expert_forward(bool f8) {
  if (d_.shared_ffn == 0) return;
  role(Role::kFc1);
  gathered_gemm(d_.shared_fc1_local, d_.h, "shared expert", f8);
  role(Role::kGelu);
  kernel(k_.activation_n(false, d_.tokens * d_.shared_ffn / d_.t, d_.t), "shared expert");
  role(Role::kFc2);
  gemm_reduced(d_.h, d_.shared_ffn / d_.t, "shared expert", f8, Cast::kFused);
}

void RankLowering::shared_expert_backward(bool f8) {
  if (d_.shared_ffn == 0) return;
  role(Role::kFc2);
  row_parallel_backward(d_.h, d_.shared_ffn / d_.t, "shared expert", f8);
  role(Role::kGelu);
  kernel(k_.activation_n(true, d_.tokens * d_.shared_ffn / d_.t, d_.t), "shared expert");
  role(Role::kFc1);
  column_parallel_backward(d_.shared_fc1_local, d_.h, "shared expert", f8, Cast::kFused);
}

void RankLowering::moe_forward() {
  const bool f8 = fp8();
  router_forward();
  if (alltoall()) {
    role(Role::kMoePermute);
    kernel(k_.moe_permute(false, a2a_rows(), d_.moe_tokens), "moe permute");
    role(Role::kMoeDispatch);
    ep_blocking(CollectiveKind::kAllToAll, GroupKind::kEp, row_bytes(a2a_rows()),
                "ep all_to_all dispatch");
    if (d_.etp > 1) {
      ep_blocking(CollectiveKind::kAllGather, GroupKind::kEtp, row_bytes(d_.etp * a2a_rows()),
                  "etp all_gather dispatch");
    }
    sort_chunks_by_local_expert("moe sort chunks");
  } else {
    role(Role::kMoeDispatch);
    ep_blocking(CollectiveKind::kAllGather, GroupKind::kEtpEp, row_bytes(gathered_rows()),
                "etp-ep all_gather dispatch");
    role(Role::kMoePermute);
    kernel(k_.moe_permute(false, local_expert_rows(), gathered_rows()), "moe permute");
  }
  experts_forward(f8);
  if (alltoall()) {
    role(Role::kMoeCombine);
    sort_chunks_by_local_expert("moe unsort chunks");
    if (d_.etp > 1) {
      ep_blocking(CollectiveKind::kReduceScatter, GroupKind::kEtp,
                  row_bytes(d_.etp * a2a_rows()), "etp reduce_scatter combine");
    }
    ep_blocking(CollectiveKind::kAllToAll, GroupKind::kEp, row_bytes(a2a_rows()),
                "ep all_to_all combine");
    role(Role::kMoeUnpermute);
    kernel(k_.moe_unpermute(false, a2a_rows(), d_.moe_tokens), "moe unpermute");
  } else {
    role(Role::kMoeUnpermute);
    kernel(k_.moe_unpermute(false, local_expert_rows(), gathered_rows()), "moe unpermute");
    role(Role::kMoeCombine);
    ep_blocking(CollectiveKind::kReduceScatter, GroupKind::kEtpEp, row_bytes(gathered_rows()),
                "etp-ep reduce_scatter combine");
  }
  shared_expert_forward(f8);
}

void RankLowering::moe_backward() {
  const bool f8 = fp8();
  shared_expert_backward(f8);
  if (alltoall()) {
    role(Role::kMoeUnpermute);
    kernel(k_.moe_unpermute(true, a2a_rows(), d_.moe_tokens), "moe unpermute");
    role(Role::kMoeCombine);
    ep_blocking(CollectiveKind::kAllToAll, GroupKind::kEp, row_bytes(a2a_rows()),
                "ep all_to_all combine grad");
    if (d_.etp > 1) {
      ep_blocking(CollectiveKind::kAllGather, GroupKind::kEtp, row_bytes(d_.etp * a2a_rows()),
                  "etp all_gather combine grad");
    }
    sort_chunks_by_local_expert("moe unsort chunks");
  } else {
    role(Role::kMoeCombine);
    ep_blocking(CollectiveKind::kAllGather, GroupKind::kEtpEp, row_bytes(gathered_rows()),
                "etp-ep all_gather combine grad");
    role(Role::kMoeUnpermute);
    kernel(k_.moe_unpermute(true, local_expert_rows(), gathered_rows()), "moe unpermute");
  }
  experts_backward(f8);
  if (alltoall()) {
    role(Role::kMoeDispatch);
    sort_chunks_by_local_expert("moe sort chunks");
    if (d_.etp > 1) {
      ep_blocking(CollectiveKind::kReduceScatter, GroupKind::kEtp,
                  row_bytes(d_.etp * a2a_rows()), "etp reduce_scatter dispatch grad");
    }
    ep_blocking(CollectiveKind::kAllToAll, GroupKind::kEp, row_bytes(a2a_rows()),
                "ep all_to_all dispatch grad");
    role(Role::kMoePermute);
    kernel(k_.moe_permute(true, a2a_rows(), d_.moe_tokens), "moe permute");
  } else {
    role(Role::kMoePermute);
    kernel(k_.moe_permute(true, local_expert_rows(), gathered_rows()), "moe permute");
    role(Role::kMoeDispatch);
    ep_blocking(CollectiveKind::kReduceScatter, GroupKind::kEtpEp, row_bytes(gathered_rows()),
                "etp-ep reduce_scatter dispatch grad");
  }
  role(Role::kRouter);
  if (aux_loss()) kernel(k_.aux_loss(true, d_.moe_tokens), "router");
  kernel(k_.router_topk(true, d_.moe_tokens, aux_loss()), "router");
  kernel(k_.gemm("gemm_dgrad", d_.moe_tokens, d_.experts, d_.h), "router");
  kernel(k_.gemm("gemm_wgrad", d_.moe_tokens, d_.experts, d_.h), "router");
}

}  // namespace traintwin::lowering
