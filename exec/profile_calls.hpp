// One kernel call of `traintwin profile`, internal to exec/profile*.cpp: the inputs of a
// catalogue kernel (its tensors, token ids, bf16 and FP8 operands) and the Backend call that runs
// it on them, as exec/gpt_model*.cpp make it for the kernel's Role. Next in the flow:
// exec/profile.cpp rotates over several sets of them and times each run.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/scenario.hpp"
#include "exec/backend.hpp"
#include "exec/profile.hpp"
#include "exec/profile_inputs.hpp"

namespace traintwin::exec {

/// One set of inputs of a kernel and the call that runs it on them.
struct KernelCall {
  std::vector<Tensor> t;
  /// The tensors of `t` that exec/gpt_model*.cpp allocates at this kernel (its outputs, zeroed by
  /// the backend): allocated again before every run, inside the timed region, as the live op
  /// pays it. The others (inputs, and the gradient accumulators the model keeps in its shard)
  /// persist across runs.
  std::vector<size_t> fresh;
  std::vector<DeviceBuffer<int32_t>> ids;
  /// The bf16 tensors of a bf16 kernel, and those of them allocated at the kernel (as `fresh`).
  std::vector<Bf16Tensor> h;
  std::vector<size_t> fresh_h;
  /// The FP8 operands of an FP8 kernel.
  std::vector<Fp8Tensor> q;
  std::function<void(KernelCall&)> run;
  int64_t bytes() const {
    int64_t b = 0;
    for (const Tensor& x : t) b += static_cast<int64_t>(x.size() * sizeof(float));
    for (const auto& x : ids) b += static_cast<int64_t>(x.size() * sizeof(int32_t));
    for (const auto& x : h) b += static_cast<int64_t>(x.size() * sizeof(uint16_t));
    for (const auto& x : q) b += static_cast<int64_t>(x.size());
    return b;
  }
};

/// A kernel of the catalogue's GEMM class: the linear layers' and the experts' grouped GEMMs
/// (the kernels with bf16 and FP8 bindings).
bool is_gemm(const std::string& name);

/// The kernel of `target` on fresh inputs from `in`, with the Backend calls exec/gpt_model*.cpp
/// make for its Role. Throws UnsupportedError for a kernel the executor's model does not run.
/// `bf16_activations`: ProfileOptions::bf16_activations.
KernelCall make_kernel_call(Backend& be, const Scenario& sc, const ProfileTarget& target,
                            ProfileInputs& in, bool bf16_activations);

}  // namespace traintwin::exec
