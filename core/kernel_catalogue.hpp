// The kernel catalogue: one descriptor per kernel name a Program emits (core/program.cpp lowers
// the model into them; exec/ runs them through a Backend; sim/ costs them), as nccl-tests keeps
// one descriptor per collective. A descriptor says what the KernelKey's shape means, how the cost
// model classes the kernel (tensor-core GEMM, attention core, or bound by memory bandwidth) and
// which row of the live-vs-simulated breakdown (`validate --live`, core/op_class.hpp) its time
// goes to, so that every reader classes a kernel the same way. Next in the flow: op_class()
// and sim/cost_model.hpp's kernel_class() read it.
#pragma once

#include <span>
#include <string_view>

namespace traintwin {

/// Roofline class of a kernel (sim/cost_model.hpp's efficiencies apply per class).
enum class KernelClass {
  kGemm,       ///< tensor-core GEMM: gemm_*, grouped_gemm_*
  kAttention,  ///< the attention core: attention_*, flash_attention_*, fused_attention_*
  kMemory,     ///< elementwise / reduction kernels, bound by HBM bandwidth
};
/// "gemm" | "attention" | "memory".
const char* to_string(KernelClass c);

/// One kernel of the catalogue.
struct KernelDescriptor {
  std::string_view name;        ///< KernelKey::name, e.g. "grouped_gemm_fwd"
  KernelClass cost_class;       ///< the cost model's class
  std::string_view live_class;  ///< op_class() row: "GEMM" | "attention" | "optimizer" | "elementwise"
  std::string_view shape;       ///< what KernelKey::shape holds, e.g. "[M, N, K]"
};

/// Every kernel the Program emits, in name order.
std::span<const KernelDescriptor> kernel_catalogue();

/// The descriptor of `name`, or null when the catalogue has none (a database row of a kernel
/// this traintwin does not emit, say).
const KernelDescriptor* find_kernel(std::string_view name);

}  // namespace traintwin
