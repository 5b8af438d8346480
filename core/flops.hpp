// FLOP model of GPT training.
//
// Forward FLOPs of one transformer layer for B*s tokens (GEMMs only, as in the sources):
//   QKV 2Bsh(a + 2g)d (= 6Bsh^2 for multi-head attention; g query groups, d = h/a)
//   + attention scores 2Bs^2h + attention over values 2Bs^2h + projection 2Bsh^2
//   + FC1 2Bsh*ffn (x2 for SwiGLU's gate and up) + FC2 2Bsh*ffn
//   (= 24Bsh^2 + 4Bs^2h for GPT with ffn = 4h). The attention terms count the full s x s matrix
//   (not halved for the causal mask), as Narayanan et al. and NVIDIA's DGX Cloud recipes do:
//   for Llama the per-sample model FLOPs are s [12 L h^2 (1 + G/H + s/h) + 18 L F h + 6 V h].
// LM head 2BshV. Backward = 2x forward. Mixture of experts: an MoE layer's MLP is the router
//   2BshE + k routed experts (each an MLP of width f_e) + the shared expert (mlp_forward_flops).
// Model FLOPs (Korthikanti et al. 2022, sec. 6): 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
// With full recomputation (Narayanan et al. SC'21, eq. 3): 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
#pragma once

#include <cstdint>
#include <string>

#include "core/scenario.hpp"

namespace traintwin {

/// Forward FLOPs of the MLP block of global layer `layer` (in [0, num_layers)) for `samples` =
/// B samples of s tokens (T = B s). A dense layer: FC1 2 T h f1 + FC2 2 T ffn h (f1 = 2 ffn for
/// SwiGLU, else ffn). An MoE layer (ModelSpec::is_moe_layer): the router GEMM 2 T h E + k routed
/// experts 2 T h f1_e + 2 T f_e h (f_e = moe_expert_ffn(); balanced routing, no dropped tokens:
/// model FLOPs count what the model asks for, not what capacity drops or imbalance do) + the
/// shared expert 2 T h f1_s + 2 T f_s h when moe_shared_expert_intermediate_size = f_s > 0.
/// Every function here throws InvalidArgument, naming the argument or field, for a batch < 1,
/// a layer outside [0, num_layers) or a model size (num_layers, hidden_size, ffn_hidden_size,
/// seq_length, vocab_size) < 1; the paper formulas (eq. 3, Korthikanti) do not use ffn and
/// assume ffn = 4h.
double mlp_forward_flops(const ModelSpec& m, int64_t samples, int64_t layer);

/// Forward FLOPs of global layer `layer` for `samples` = B samples of s = seq_length tokens:
/// QKV 2Bsh(a+2g)d + projection 2Bs(ad)h + attention core 4Bs^2(ad) + mlp_forward_flops()
/// (ad = h unless kv_channels; 8Bsh^2 + 4Bs^2h + 4Bsh*ffn for GPT). Layer 0 stands for every
/// layer of a dense model.
double layer_forward_flops(const ModelSpec& m, int64_t samples, int64_t layer = 0);

/// Sum of layer_forward_flops() over the num_layers layers (dense and MoE).
double layers_forward_flops(const ModelSpec& m, int64_t samples);

/// Model FLOPs of one iteration over `global_batch` samples: fwd + bwd (3x forward) of all layers
/// and the LM head; no recomputation. Equals Korthikanti's formula for ffn = 4h.
double model_flops_per_iteration(const ModelSpec& m, int64_t global_batch);

/// Forward FLOPs one dense layer recomputes under torchtitan's op-level selective activation
/// checkpointing (SelectiveAcOption::kOp) for `samples` = B samples of s tokens: the layer's
/// aten.mm in torchtitan's order are wq, wk, wv, wo, w1, w3, w2 (torchtitan/models/llama
/// model.py: Attention, then FeedForward's w2(silu(w1(x)) * w3(x))); the policy saves the
/// outputs of the odd-numbered ones and of the SDPA kernel, so the recompute runs the even ones,
/// wk 2Bs h gd + wo 2Bs(ad)h + w3 2Bs h ffn (d = head dim), and no attention core. Needs a
/// SwiGLU model (the rules refuse op with any other, core/scenario_rules.cpp).
double op_sac_recompute_forward_flops(const ModelSpec& m, int64_t samples);

/// Hardware FLOPs of one iteration: model FLOPs plus the recomputed forward work —
/// selective: attention core (4Bs^2h per layer) with `selective` kCoreAttn,
/// op_sac_recompute_forward_flops() per layer with kOp; full: the whole layer forward (not the
/// LM head). For kFull and ffn = 4h this equals Narayanan et al. eq. 3.
double hardware_flops_per_iteration(const ModelSpec& m, int64_t global_batch,
                                    RecomputeGranularity r,
                                    SelectiveAcOption selective = SelectiveAcOption::kCoreAttn);

/// The formula model_flops_per_iteration() evaluates for `m`, as text for the output (which
/// terms, whether attention is causal-halved: it is not).
std::string model_flops_formula(const ModelSpec& m);

/// Narayanan et al. SC'21 eq. 3 verbatim: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
double narayanan_eq3_flops(const ModelSpec& m, int64_t global_batch);

/// Korthikanti et al. 2022 model FLOPs verbatim: 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
double korthikanti_model_flops(const ModelSpec& m, int64_t global_batch);

/// MFU: model FLOPs / (iteration time * GPUs * peak FLOP/s per GPU), a fraction (0.5 = 50 %).
/// Passing hardware FLOPs instead gives HFU. Throws InvalidArgument for non-positive time, GPU
/// count or peak, or negative FLOPs.
double model_flops_utilization(double model_flops, double iteration_time_s, int64_t num_gpus,
                               double peak_flops_per_gpu);

}  // namespace traintwin
