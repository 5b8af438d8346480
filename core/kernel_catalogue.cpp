// The kernel catalogue; see kernel_catalogue.hpp.
#include "core/kernel_catalogue.hpp"

#include <algorithm>
#include <array>

namespace traintwin {
namespace {

constexpr KernelClass G = KernelClass::kGemm;
constexpr KernelClass A = KernelClass::kAttention;
constexpr KernelClass M = KernelClass::kMemory;

// Shapes: M tokens (rows) of the call, N output and K input features; B micro-batch, NH heads
// (this TP rank's), S sequence positions, D head dimension, H hidden size, V this rank's
// vocabulary rows, E experts, k top-k, N elements.
constexpr std::array kCatalogue = {
    KernelDescriptor{"adamw_step", M, "optimizer", "[N parameters]"},
    KernelDescriptor{"attention_bwd", A, "attention", "[B, NH, S, D]"},
    KernelDescriptor{"attention_fwd", A, "attention", "[B, NH, S, D]"},
    KernelDescriptor{"cp_attention_merge", M, "elementwise", "[B, NH, S, D]"},
    KernelDescriptor{"cross_entropy_bwd", M, "elementwise", "[M tokens, V]"},
    KernelDescriptor{"cross_entropy_fwd", M, "elementwise", "[M tokens, V]"},
    KernelDescriptor{"cross_entropy_max", M, "elementwise", "[M tokens, V]"},
    KernelDescriptor{"dropout_add_bwd", M, "elementwise", "[N elements]"},
    KernelDescriptor{"dropout_add_fwd", M, "elementwise", "[N elements]"},
    KernelDescriptor{"dropout_fwd", M, "elementwise", "[N elements]"},
    KernelDescriptor{"embedding_bwd", M, "elementwise", "[M tokens, H, V]"},
    KernelDescriptor{"embedding_fwd", M, "elementwise", "[M tokens, H, V]"},
    KernelDescriptor{"flash_attention_bwd", A, "attention", "[B, NH, S, D]"},
    KernelDescriptor{"flash_attention_fwd", A, "attention", "[B, NH, S, D]"},
    KernelDescriptor{"fp8_amax", M, "elementwise", "[N elements]"},
    KernelDescriptor{"fp8_cast", M, "elementwise", "[N elements]"},
    KernelDescriptor{"fp8_cast_transpose", M, "elementwise", "[N elements]"},
    KernelDescriptor{"fp8_scale_update", M, "elementwise", "[tensors]"},
    KernelDescriptor{"fused_attention_bwd", A, "attention", "[B, NH, S, D]"},
    KernelDescriptor{"fused_attention_fwd", A, "attention", "[B, NH, S, D]"},
    KernelDescriptor{"gelu_bwd", M, "elementwise", "[N elements]"},
    KernelDescriptor{"gelu_fwd", M, "elementwise", "[N elements]"},
    KernelDescriptor{"gemm_dgrad", G, "GEMM", "[M, N, K]"},
    KernelDescriptor{"gemm_fwd", G, "GEMM", "[M, N, K]"},
    KernelDescriptor{"gemm_wgrad", G, "GEMM", "[M, N, K]"},
    KernelDescriptor{"grad_accumulate", M, "optimizer", "[N parameters]"},
    KernelDescriptor{"grad_clip_scale", M, "optimizer", "[N parameters]"},
    KernelDescriptor{"grad_norm", M, "optimizer", "[N parameters]"},
    KernelDescriptor{"grouped_gemm_dgrad", G, "GEMM", "[groups, M, N, K]"},
    KernelDescriptor{"grouped_gemm_fwd", G, "GEMM", "[groups, M, N, K]"},
    KernelDescriptor{"grouped_gemm_wgrad", G, "GEMM", "[groups, M, N, K]"},
    KernelDescriptor{"layernorm_bwd", M, "elementwise", "[M tokens, H]"},
    KernelDescriptor{"layernorm_fwd", M, "elementwise", "[M tokens, H]"},
    KernelDescriptor{"moe_aux_loss_bwd", M, "elementwise", "[M tokens, E]"},
    KernelDescriptor{"moe_aux_loss_fwd", M, "elementwise", "[M tokens, E]"},
    KernelDescriptor{"moe_chunk_cat", M, "elementwise", "[rows, H]"},
    KernelDescriptor{"moe_permute_bwd", M, "elementwise", "[rows, M tokens, H]"},
    KernelDescriptor{"moe_permute_fused_bwd", M, "elementwise", "[rows, M tokens, H]"},
    KernelDescriptor{"moe_permute_fused_fwd", M, "elementwise", "[rows, M tokens, H]"},
    KernelDescriptor{"moe_permute_fwd", M, "elementwise", "[rows, M tokens, H]"},
    KernelDescriptor{"moe_router_topk_bwd", M, "elementwise", "[M tokens, E, k]"},
    KernelDescriptor{"moe_router_topk_fwd", M, "elementwise", "[M tokens, E, k]"},
    KernelDescriptor{"moe_unpermute_bwd", M, "elementwise", "[rows, M tokens, H]"},
    KernelDescriptor{"moe_unpermute_fused_bwd", M, "elementwise", "[rows, M tokens, H]"},
    KernelDescriptor{"moe_unpermute_fused_fwd", M, "elementwise", "[rows, M tokens, H]"},
    KernelDescriptor{"moe_unpermute_fwd", M, "elementwise", "[rows, M tokens, H]"},
    KernelDescriptor{"rmsnorm_bwd", M, "elementwise", "[M tokens, H]"},
    KernelDescriptor{"rmsnorm_fwd", M, "elementwise", "[M tokens, H]"},
    KernelDescriptor{"rope_bwd", M, "elementwise", "[N elements]"},
    KernelDescriptor{"rope_fwd", M, "elementwise", "[N elements]"},
    KernelDescriptor{"squared_relu_bwd", M, "elementwise", "[N elements]"},
    KernelDescriptor{"squared_relu_fwd", M, "elementwise", "[N elements]"},
    KernelDescriptor{"swiglu_bwd", M, "elementwise", "[N elements]"},
    KernelDescriptor{"swiglu_fwd", M, "elementwise", "[N elements]"},
    KernelDescriptor{"zero_grad_buffer", M, "optimizer", "[N parameters]"},
};

static_assert(std::is_sorted(kCatalogue.begin(), kCatalogue.end(),
                             [](const KernelDescriptor& a, const KernelDescriptor& b) {
                               return a.name < b.name;
                             }),
              "kernel catalogue: keep the names sorted (find_kernel searches them)");

}  // namespace

const char* to_string(KernelClass c) {
  switch (c) {
    case KernelClass::kGemm:
      return "gemm";
    case KernelClass::kAttention:
      return "attention";
    case KernelClass::kMemory:
      return "memory";
  }
  return "?";
}

std::span<const KernelDescriptor> kernel_catalogue() { return kCatalogue; }

const KernelDescriptor* find_kernel(std::string_view name) {
  const auto it = std::lower_bound(
      kCatalogue.begin(), kCatalogue.end(), name,
      [](const KernelDescriptor& d, std::string_view n) { return d.name < n; });
  return it != kCatalogue.end() && it->name == name ? &*it : nullptr;
}

}  // namespace traintwin
