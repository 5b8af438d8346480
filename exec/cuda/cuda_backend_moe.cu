// CudaBackend's mixture-of-experts members (see cuda_backend.hpp): the router (top-k softmax with
// capacity, Switch aux loss) over exec/cuda/moe_router, the token permutation and chunk sort over
// exec/cuda/moe_permute, and the local experts' grouped GEMM as one cuBLASLt GEMM per non-empty
// group (exec/cuda/gemm). Semantics, checks and choices are the CPU layers' (exec/cpu/moe_router,
// moe_permute, grouped_matmul). Routing maps, token counts and MoePermutation are host memory by
// the Backend interface: the router forward and the aux loss forward compute on the device and
// copy back what the host needs, then wait for the stream (Megatron's .tolist() of the splits);
// the permutation's index arrays are uploaded into stream-ordered scratch. Everything else is
// asynchronous on the backend's stream.
#include "exec/cuda/cuda_backend.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "exec/cpu/grouped_matmul.hpp"
#include "exec/cpu/moe_permute.hpp"
#include "exec/cpu/moe_router.hpp"
#include "exec/cuda/cuda_check.hpp"
#include "exec/cuda/gemm.hpp"
#include "exec/cuda/moe_permute.hpp"
#include "exec/cuda/moe_router.hpp"

namespace traintwin::exec::cuda {
namespace {

constexpr DType kF32 = DType::kFloat32;

/// The inverse of perm.token in CSR form, [offsets (N + 1) | rows (M)]: token n's rows are
/// rows[offsets[n] .. offsets[n+1]), ascending (a stable counting sort), the CPU's summation
/// order.
std::vector<int64_t> token_rows(const cpu::MoePermutation& perm, int64_t tokens) {
  const auto n = static_cast<size_t>(tokens);
  std::vector<int64_t> csr(n + 1 + perm.token.size(), 0);
  for (const int64_t t : perm.token) ++csr[static_cast<size_t>(t) + 1];
  for (size_t i = 0; i < n; ++i) csr[i + 1] += csr[i];
  std::vector<int64_t> next(csr.begin(), csr.begin() + static_cast<std::ptrdiff_t>(n));
  for (size_t m = 0; m < perm.token.size(); ++m) {
    const auto t = static_cast<size_t>(perm.token[m]);
    csr[n + 1 + static_cast<size_t>(next[t]++)] = static_cast<int64_t>(m);
  }
  return csr;
}

}  // namespace

// ---- router -------------------------------------------------------------------------------------

/// Top-k on the logits [N, E], softmax over the k (moe_router.hpp steps 1-3). gates and probs
/// [N, E] on the device; topk_map, routing_map [N, E] (0/1) and tokens_per_expert [E] (column
/// sums of topk_map, before capacity) on the host: computed on the device, copied back, then
/// the stream is synchronized. Same selection as the CPU (ties to the smaller expert / token).
void CudaBackend::moe_topk_softmax_forward(FSpan gates, std::span<uint8_t> topk_map,
                                           std::span<uint8_t> routing_map, FSpan probs,
                                           std::span<int64_t> tokens_per_expert, CFSpan logits,
                                           int64_t tokens, int64_t experts, int64_t topk,
                                           int64_t capacity, bool pad_to_capacity) {
  cpu::check_moe_router_forward(logits.size(), gates.size(), topk_map.size(), routing_map.size(),
                                probs.size(), tokens_per_expert.size(), tokens, experts, topk,
                                capacity, pad_to_capacity);
  const int64_t ne = tokens * experts;
  const auto map_bytes = static_cast<size_t>(ne);
  Scratch maps(*this, 2 * map_bytes);  // [topk_map | routing_map]
  Scratch counts(*this, static_cast<size_t>(experts) * sizeof(int64_t));
  auto* topk_d = maps.as<uint8_t>();
  uint8_t* routing_d = topk_d + map_bytes;
  cuda::moe_topk_softmax_forward(gates.data(), topk_d, counts.as<int64_t>(), logits.data(),
                                 tokens, experts, topk, stream_);
  const bool dropless = capacity < 1;
  if (dropless) {
    // routing_map = topk_map, probs = gates (0 off the top k).
    TRAINTWIN_CUDA_CHECK(cudaMemcpyAsync(probs.data(), gates.data(), map_bytes * sizeof(float),
                                         cudaMemcpyDeviceToDevice, stream_));
  } else {
    const size_t workspace_bytes =
        capacity < tokens ? moe_capacity_workspace_bytes(tokens, experts) : 0;
    Scratch workspace(*this, workspace_bytes);
    moe_capacity_routing(routing_d, gates.data(), topk_d, tokens, experts, capacity,
                         pad_to_capacity, workspace.get(), workspace_bytes, stream_);
    moe_masked_probs(probs.data(), gates.data(), routing_d, ne, stream_);
    TRAINTWIN_CUDA_CHECK(cudaMemcpyAsync(routing_map.data(), routing_d, map_bytes,
                                         cudaMemcpyDeviceToHost, stream_));
  }
  TRAINTWIN_CUDA_CHECK(
      cudaMemcpyAsync(topk_map.data(), topk_d, map_bytes, cudaMemcpyDeviceToHost, stream_));
  TRAINTWIN_CUDA_CHECK(cudaMemcpyAsync(tokens_per_expert.data(), counts.get(),
                                       static_cast<size_t>(experts) * sizeof(int64_t),
                                       cudaMemcpyDeviceToHost, stream_));
  TRAINTWIN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (dropless) std::memcpy(routing_map.data(), topk_map.data(), map_bytes);
}

/// dlogits [N, E] += the softmax-over-top-k backward of dprobs [N, E] (moe_router.hpp); the
/// host maps are uploaded into scratch. Asynchronous.
void CudaBackend::moe_topk_softmax_backward(FSpan dlogits, CFSpan dprobs, CFSpan gates,
                                            std::span<const uint8_t> topk_map,
                                            std::span<const uint8_t> routing_map, int64_t tokens,
                                            int64_t experts) {
  cpu::check_moe_router_backward(dlogits.size(), dprobs.size(), gates.size(), topk_map.size(),
                                 routing_map.size(), tokens, experts);
  const Scratch topk_d = upload_scratch(topk_map.data(), topk_map.size());
  const Scratch routing_d = upload_scratch(routing_map.data(), routing_map.size());
  cuda::moe_topk_softmax_backward(dlogits.data(), dprobs.data(), gates.data(),
                                  topk_d.as<uint8_t>(), routing_d.as<uint8_t>(), tokens, experts,
                                  stream_);
}

/// The Switch load-balancing loss (Fedus et al. 2021 eq. 4, Megatron's
/// switch_load_balancing_loss_func): scores [N, E] = softmax(logits) on the device, its column
/// sums (fp64) copied back, then on the host coeff E / (T^2 k) sum_e P_e tokens_per_expert[e],
/// rounded to fp32 as the CPU backend's float layer returns it. Synchronizes the stream.
double CudaBackend::moe_switch_aux_loss_forward(FSpan scores, CFSpan logits,
                                                std::span<const int64_t> tokens_per_expert,
                                                int64_t tokens, int64_t experts,
                                                int64_t total_tokens, int64_t topk,
                                                double coeff) {
  cpu::check_moe_aux_loss(scores.size(), logits.size(), tokens_per_expert.size(), tokens, experts,
                          total_tokens, topk);
  const auto e_count = static_cast<size_t>(experts);
  Scratch sums(*this, e_count * sizeof(double));
  moe_aux_scores(scores.data(), sums.as<double>(), logits.data(), tokens, experts, stream_);
  std::vector<double> per_expert(e_count);
  TRAINTWIN_CUDA_CHECK(cudaMemcpyAsync(per_expert.data(), sums.get(), e_count * sizeof(double),
                                       cudaMemcpyDeviceToHost, stream_));
  TRAINTWIN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  double total = 0;
  for (size_t e = 0; e < e_count; ++e) {
    total += per_expert[e] * static_cast<double>(tokens_per_expert[e]);
  }
  return static_cast<float>(total * cpu::moe_aux_loss_scale(experts, total_tokens, topk, coeff));
}

/// dlogits [N, E] += daux x d aux / d logits: with c_e = coeff E / (T^2 k) tokens_per_expert[e]
/// (host, fp32, uploaded), dlogits += daux scores (c_e - sum_j scores_j c_j). Asynchronous.
void CudaBackend::moe_switch_aux_loss_backward(FSpan dlogits, double daux, CFSpan scores,
                                               std::span<const int64_t> tokens_per_expert,
                                               int64_t tokens, int64_t experts,
                                               int64_t total_tokens, int64_t topk, double coeff) {
  cpu::check_moe_aux_loss(scores.size(), dlogits.size(), tokens_per_expert.size(), tokens, experts,
                          total_tokens, topk);
  const double scale = cpu::moe_aux_loss_scale(experts, total_tokens, topk, coeff);
  std::vector<float> c(static_cast<size_t>(experts));
  for (size_t e = 0; e < c.size(); ++e) {
    c[e] = static_cast<float>(scale * static_cast<double>(tokens_per_expert[e]));
  }
  const Scratch c_d = upload_scratch(c.data(), c.size() * sizeof(float));
  moe_aux_loss_backward(dlogits.data(), static_cast<float>(daux), scores.data(), c_d.as<float>(),
                        tokens, experts, stream_);
}

// ---- permutation --------------------------------------------------------------------------------

/// out [M, C] = inp [N, C] gathered by perm.token (expert-major rows). Asynchronous.
void CudaBackend::moe_permute_forward(FSpan out, CFSpan inp, const cpu::MoePermutation& perm,
                                      int64_t tokens, int64_t channels) {
  cpu::check_moe_permutation_rows(perm, out.size(), "out", inp.size(), "inp", tokens, channels);
  if (perm.rows() == 0) return;
  const Scratch token_d =
      upload_scratch(perm.token.data(), perm.token.size() * sizeof(int64_t));
  moe_gather_rows(out.data(), inp.data(), token_d.as<int64_t>(), perm.rows(), channels, stream_);
}

/// dinp [N, C] += the scatter-add of dout [M, C] to perm.token, as a gather over each token's
/// rows (host-built CSR inverse; no atomics, the CPU's summation order). Asynchronous.
void CudaBackend::moe_permute_backward(FSpan dinp, CFSpan dout, const cpu::MoePermutation& perm,
                                       int64_t tokens, int64_t channels) {
  cpu::check_moe_permutation_rows(perm, dout.size(), "dout", dinp.size(), "dinp", tokens,
                                  channels);
  if (perm.rows() == 0) return;
  const std::vector<int64_t> csr = token_rows(perm, tokens);
  const Scratch csr_d = upload_scratch(csr.data(), csr.size() * sizeof(int64_t));
  const int64_t* offsets = csr_d.as<int64_t>();
  moe_scatter_add_rows(dinp.data(), dout.data(), offsets, offsets + tokens + 1, tokens, channels,
                       stream_);
}

/// out [N, C] = sum over token n's rows m of probs[n, expert(m)] inp[m] (overwrites; 0 for a
/// token without rows). Asynchronous.
void CudaBackend::moe_unpermute_forward(FSpan out, CFSpan inp, CFSpan probs,
                                        const cpu::MoePermutation& perm, int64_t tokens,
                                        int64_t experts, int64_t channels) {
  cpu::check_moe_permutation_rows(perm, inp.size(), "inp", out.size(), "out", tokens, channels);
  cpu::check_moe_permutation_experts(perm, probs.size(), tokens, experts);
  const std::vector<int64_t> csr = token_rows(perm, tokens);
  const Scratch csr_d = upload_scratch(csr.data(), csr.size() * sizeof(int64_t));
  const Scratch expert_d =
      upload_scratch(perm.expert.data(), perm.expert.size() * sizeof(int32_t));
  const int64_t* offsets = csr_d.as<int64_t>();
  moe_unpermute_rows(out.data(), inp.data(), probs.data(), offsets, offsets + tokens + 1,
                     expert_d.as<int32_t>(), tokens, experts, channels, stream_);
}

/// dinp [M, C] += probs[n, e] dout[n], dprobs [N, E] += dout[n] . inp[m] (n, e of row m).
/// Asynchronous.
void CudaBackend::moe_unpermute_backward(FSpan dinp, FSpan dprobs, CFSpan dout, CFSpan inp,
                                         CFSpan probs, const cpu::MoePermutation& perm,
                                         int64_t tokens, int64_t experts, int64_t channels) {
  const char* who = "moe_unpermute_backward";
  cpu::check_moe_permutation_rows(perm, inp.size(), "inp", dout.size(), "dout", tokens, channels);
  check_size(who, "dinp", dinp.size(), perm.rows() * channels);
  cpu::check_moe_permutation_experts(perm, probs.size(), tokens, experts);
  check_size(who, "dprobs", dprobs.size(), tokens * experts);
  if (perm.rows() == 0) return;
  const Scratch token_d =
      upload_scratch(perm.token.data(), perm.token.size() * sizeof(int64_t));
  const Scratch expert_d =
      upload_scratch(perm.expert.data(), perm.expert.size() * sizeof(int32_t));
  moe_unpermute_rows_backward(dinp.data(), dprobs.data(), dout.data(), inp.data(), probs.data(),
                              token_d.as<int64_t>(), expert_d.as<int32_t>(), perm.rows(), experts,
                              channels, stream_);
}

/// Output chunk j = input chunk order[j] (chunks of chunk_rows rows of `channels`; order a
/// permutation of 0..K-1). One gather kernel over the rows. Asynchronous.
void CudaBackend::moe_sort_chunks(FSpan out, CFSpan inp, std::span<const int64_t> chunk_rows,
                                  std::span<const int64_t> order, int64_t channels) {
  // The input chunks' first rows, after the CPU layer's checks.
  const std::vector<int64_t> start =
      cpu::moe_sort_chunks_starts(chunk_rows, order, inp.size(), out.size(), channels);
  const size_t k = chunk_rows.size();
  const int64_t rows = start[k];
  if (rows == 0) return;
  // [out_start (K + 1) | in_start of output chunk j (K)].
  std::vector<int64_t> starts(2 * k + 1, 0);
  for (size_t j = 0; j < k; ++j) {
    const auto i = static_cast<size_t>(order[j]);
    starts[j + 1] = starts[j] + chunk_rows[i];
    starts[k + 1 + j] = start[i];
  }
  const Scratch starts_d = upload_scratch(starts.data(), starts.size() * sizeof(int64_t));
  const int64_t* out_start = starts_d.as<int64_t>();
  cuda::moe_sort_chunks(out.data(), inp.data(), out_start, out_start + k + 1,
                        static_cast<int64_t>(k), rows, channels, stream_);
}

// ---- grouped GEMM -------------------------------------------------------------------------------

/// out [M, OC] = inp_g W_g^T per group (weight [G, OC, C], rows_per_group [G] host): one
/// cuBLASLt GEMM per group with rows (Megatron's GroupedMLP loop; empty groups skipped).
void CudaBackend::grouped_matmul_forward(FSpan out, CFSpan inp, CFSpan weight,
                                         std::span<const int64_t> rows_per_group,
                                         int64_t channels, int64_t out_channels) {
  cpu::grouped_matmul_rows(rows_per_group, weight.size(), inp.size(), "inp", out.size(), "out",
                           channels, out_channels);
  const int64_t w = out_channels * channels;
  cpu::for_each_group(rows_per_group, [&](int64_t g, int64_t first, int64_t rows) {
    cuda::matmul_forward(cublas_, kF32, out.data() + first * out_channels,
                         inp.data() + first * channels, weight.data() + g * w, nullptr, rows,
                         channels, out_channels, stream_);
  });
}

/// dinp [M, C] += dout_g W_g per group ("dgrad", accumulate).
void CudaBackend::grouped_matmul_backward_data(FSpan dinp, CFSpan dout, CFSpan weight,
                                               std::span<const int64_t> rows_per_group,
                                               int64_t channels, int64_t out_channels) {
  cpu::grouped_matmul_rows(rows_per_group, weight.size(), dinp.size(), "dinp", dout.size(),
                           "dout", channels, out_channels);
  const int64_t w = out_channels * channels;
  cpu::for_each_group(rows_per_group, [&](int64_t g, int64_t first, int64_t rows) {
    cuda::matmul_backward_data(cublas_, kF32, dinp.data() + first * channels,
                               dout.data() + first * out_channels, weight.data() + g * w, rows,
                               channels, out_channels, /*accumulate=*/true, stream_);
  });
}

/// dweight_g [OC, C] += dout_g^T inp_g per group ("wgrad"); a group without rows is untouched.
void CudaBackend::grouped_matmul_backward_weight(FSpan dweight, CFSpan dout, CFSpan inp,
                                                 std::span<const int64_t> rows_per_group,
                                                 int64_t channels, int64_t out_channels) {
  cpu::grouped_matmul_rows(rows_per_group, dweight.size(), inp.size(), "inp", dout.size(),
                           "dout", channels, out_channels);
  const int64_t w = out_channels * channels;
  cpu::for_each_group(rows_per_group, [&](int64_t g, int64_t first, int64_t rows) {
    cuda::matmul_backward_weight(cublas_, kF32, dweight.data() + g * w, nullptr,
                                 dout.data() + first * out_channels,
                                 inp.data() + first * channels, rows, channels, out_channels,
                                 stream_);
  });
}

}  // namespace traintwin::exec::cuda
