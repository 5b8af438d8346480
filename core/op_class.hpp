// Op classes: the rows of the prediction-vs-reality table of `traintwin validate --live` (and of
// any comparison of two timelines of one Program): where the time of a rank goes, by kind of
// work, the same way for a live run and a simulated one.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "core/program.hpp"

namespace traintwin {

/// The class of kernel `kernel` of a compute op, its live_class in the kernel catalogue
/// (core/kernel_catalogue.hpp): "GEMM" (gemm_*, grouped_gemm_*), "attention" (attention_*,
/// flash_attention_*, fused_attention_*), "optimizer" (zero_grad_buffer, grad_accumulate,
/// grad_norm, grad_clip_scale, adamw_step) or
/// "elementwise" (every other kernel: LayerNorm, GELU, dropout-add, embedding, cross-entropy, the
/// MoE router and permutations; also a name the catalogue lacks); of a communication op (the
/// kernel index is ignored): "<group> <collective>" such as "tp all_reduce", "dp
/// reduce_scatter", "embd all_reduce", or "pp send/recv".
std::string op_class(const Program& prog, const Op& op, size_t kernel = 0);

/// How long each op of one rank took in one iteration: op_s[op id] (communication: issue to
/// completion), and for compute ops kernel_s[op id][i] per kernel (may be empty: then the op's
/// time goes to the class of its first kernel).
struct OpDurations {
  std::vector<double> op_s;
  std::vector<std::vector<double>> kernel_s;
};

/// Seconds per op class over the ops of `rp` (a rank of `prog`), plus "compute" (all compute
/// ops) and, when iteration_s > 0, "pipeline bubble and waits": iteration_s minus the compute
/// time (the compute stream's idle time). Communication classes overlap compute: their time is
/// issue to completion. Throws InvalidArgument when `d` does not have one entry per op.
std::map<std::string, double> class_seconds(const Program& prog, const RankProgram& rp,
                                            const OpDurations& d, double iteration_s = 0);

}  // namespace traintwin
