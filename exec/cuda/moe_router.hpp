// The router of a mixture-of-experts layer on the GPU: the same functions, choices and semantics
// as exec/cpu/moe_router.hpp (Megatron-Core topk_softmax_with_capacity with drop policy "probs",
// switch_load_balancing_loss_func), fp32 on [N, E] row-major arrays (N = tokens, E = experts,
// k = topk), 0/1 byte maps. The selections reproduce the CPU's exactly: top-k on the logits with
// the smaller expert index first on ties; the gates from a correctly rounded exp
// ((float)exp((double)x), as glibc's expf to within its 0.502 ulp) summed in the CPU's order, so
// the capacity choice (largest gates, the smaller token index on ties; a stable radix sort) sees
// the CPU's gates. Device pointers; asynchronous on `stream`. Each launcher throws
// InvalidArgument for a size < 1 or a null pointer, CudaError if a launch fails.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace traintwin::exec::cuda {

/// Step 1: top-k of every row of `logits`, then softmax over the k selected logits. Overwrites
/// gates (the softmax on the selected experts, 0 elsewhere), topk_map (0/1) and
/// tokens_per_expert[e] = column sums of topk_map (int64, before capacity). One warp per token.
void moe_topk_softmax_forward(float* gates,                 // [N, E]
                              uint8_t* topk_map,            // [N, E]
                              int64_t* tokens_per_expert,   // [E]
                              const float* logits,          // [N, E]
                              int64_t tokens, int64_t experts, int64_t topk, cudaStream_t stream);

/// Device bytes moe_capacity_routing needs as `workspace` for these sizes (sort keys, values and
/// cub::DeviceRadixSort's temporary storage).
size_t moe_capacity_workspace_bytes(int64_t tokens, int64_t experts);

/// Step 2, capacity `capacity` >= 1: every expert keeps the min(capacity, N) tokens with the
/// largest gates (the smaller token index on ties); routing_map (overwritten) = 1 for those
/// tokens when `pad_to_capacity`, else topk_map there (a dropped or padding token is 0). Gates
/// are >= 0, so their bit patterns sort as their values: one stable cub::DeviceRadixSort of the
/// keys (expert << 32 | ~gate bits) with token values.
void moe_capacity_routing(uint8_t* routing_map,       // [N, E]
                          const float* gates,         // [N, E]
                          const uint8_t* topk_map,    // [N, E]
                          int64_t tokens, int64_t experts, int64_t capacity,
                          bool pad_to_capacity, void* workspace, size_t workspace_bytes,
                          cudaStream_t stream);

/// Step 3: probs[i] = routing_map[i] ? gates[i] : 0 over n elements (overwrites probs).
void moe_masked_probs(float* probs, const float* gates, const uint8_t* routing_map, int64_t n,
                      cudaStream_t stream);

/// dlogits += the softmax-over-top-k backward (moe_router.hpp): for the selected experts S of
/// token n, d_e = dprobs routing_map, dlogits[n, e] += gates (d_e - sum_{j in S} gates_j d_j).
void moe_topk_softmax_backward(float* dlogits,               // [N, E]
                               const float* dprobs,          // [N, E]
                               const float* gates,           // [N, E]
                               const uint8_t* topk_map,      // [N, E]
                               const uint8_t* routing_map,   // [N, E]
                               int64_t tokens, int64_t experts, cudaStream_t stream);

/// The Switch aux loss's device half: scores = softmax(logits) over all E (overwritten) and
/// score_sums[e] = sum over the N tokens of scores[n, e] in fp64 (overwritten; the CPU sums in
/// double too). The host finishes coeff E / (T^2 k) sum_e score_sums[e] tokens_per_expert[e].
void moe_aux_scores(float* scores,          // [N, E]
                    double* score_sums,     // [E]
                    const float* logits,    // [N, E]
                    int64_t tokens, int64_t experts, cudaStream_t stream);

/// Its backward: dlogits[n, e] += daux scores[n, e] (c[e] - sum_j scores[n, j] c[j]), with
/// c[e] = coeff E / (T^2 k) tokens_per_expert[e] (fp32, computed by the caller).
void moe_aux_loss_backward(float* dlogits,        // [N, E]
                           float daux,
                           const float* scores,   // [N, E]
                           const float* c,        // [E]
                           int64_t tokens, int64_t experts, cudaStream_t stream);

}  // namespace traintwin::exec::cuda
