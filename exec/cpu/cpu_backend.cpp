// The CPU backend; see cpu_backend.hpp.
#include "exec/cpu/cpu_backend.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/cpu/bf16.hpp"
#include "exec/cpu/checks.hpp"
#include "exec/cpu/fp8.hpp"
#include "exec/cpu/gelu.hpp"
#include "exec/cpu/host_device.hpp"
#include "exec/cpu/gqa_attention.hpp"
#include "exec/cpu/grouped_matmul.hpp"
#include "exec/cpu/layernorm.hpp"
#include "exec/cpu/matmul.hpp"
#include "exec/cpu/moe_router.hpp"
#include "exec/cpu/position_embedding.hpp"
#include "exec/cpu/rmsnorm.hpp"
#include "exec/cpu/rope.hpp"
#include "exec/cpu/squared_relu.hpp"
#include "exec/cpu/swiglu.hpp"
#include "exec/cpu/vocab_parallel_cross_entropy.hpp"
#include "exec/cpu/vocab_parallel_embedding.hpp"

namespace traintwin::exec::cpu {
namespace {

/// Throws unless `rows` rows of `width` elements, `pitch` apart, lie inside `size` elements.
void check_2d(const char* what, size_t size, int64_t pitch, int64_t width, int64_t height) {
  if (width < 0 || height < 0 || pitch < width) {
    throw InvalidArgument(std::string("cpu backend ") + what + ": width " + std::to_string(width) +
                          ", height " + std::to_string(height) + " and pitch " +
                          std::to_string(pitch) + " must satisfy 0 <= width <= pitch");
  }
  if (height > 0 && static_cast<int64_t>(size) < (height - 1) * pitch + width) {
    throw InvalidArgument(std::string("cpu backend ") + what + ": " + std::to_string(height) +
                          " rows of " + std::to_string(width) + " elements, " +
                          std::to_string(pitch) + " apart, leave a span of " +
                          std::to_string(size) + " elements");
  }
}

}  // namespace

int64_t CpuBackend::cache_bytes() const { return last_level_cache_bytes(); }

CpuBackend& host_backend() {
  static CpuBackend* backend = new CpuBackend();  // never destroyed: buffers may outlive main
  return *backend;
}

void* CpuBackend::allocate_zeroed(size_t bytes) { return blocks_.allocate_zeroed(bytes); }

void CpuBackend::deallocate(void* ptr, size_t bytes) noexcept { blocks_.deallocate(ptr, bytes); }

void CpuBackend::empty_cache() { blocks_.release_cached(); }

void CpuBackend::copy(FSpan dst, CFSpan src) {
  require_same("cpu backend copy", dst.size(), src.size(), "dst and src");
  std::copy(src.begin(), src.end(), dst.begin());
}

void CpuBackend::copy_2d(FSpan dst, int64_t dst_pitch, CFSpan src, int64_t src_pitch,
                         int64_t width, int64_t height) {
  check_2d("copy_2d dst", dst.size(), dst_pitch, width, height);
  check_2d("copy_2d src", src.size(), src_pitch, width, height);
  for (int64_t r = 0; r < height; ++r) {
    std::copy_n(src.data() + r * src_pitch, width, dst.data() + r * dst_pitch);
  }
}

void CpuBackend::fill_2d(FSpan dst, int64_t pitch, int64_t width, int64_t height, float value) {
  check_2d("fill_2d", dst.size(), pitch, width, height);
  for (int64_t r = 0; r < height; ++r) std::fill_n(dst.data() + r * pitch, width, value);
}

void CpuBackend::upload(std::span<int32_t> device, std::span<const int32_t> host) {
  require_same("cpu backend upload", device.size(), host.size(), "device and host");
  std::copy(host.begin(), host.end(), device.begin());
}

void CpuBackend::upload(FSpan device, CFSpan host) {
  require_same("cpu backend upload", device.size(), host.size(), "device and host");
  std::copy(host.begin(), host.end(), device.begin());
}

void CpuBackend::download(std::span<float> host, CFSpan device) {
  require_same("cpu backend download", host.size(), device.size(), "host and device");
  std::copy(device.begin(), device.end(), host.begin());
}

void CpuBackend::vocab_parallel_embedding_forward(FSpan out, CISpan tokens, CFSpan wte_local,
                                                  int64_t batch, int64_t seq, int64_t channels,
                                                  int64_t vocab_start, int64_t vocab_local,
                                                  int64_t vocab_total) {
  cpu::vocab_parallel_embedding_forward<float>(out, tokens, wte_local, batch, seq, channels,
                                               vocab_start, vocab_local, vocab_total);
}

void CpuBackend::vocab_parallel_embedding_backward(FSpan dwte_local, CFSpan dout, CISpan tokens,
                                                   int64_t batch, int64_t seq, int64_t channels,
                                                   int64_t vocab_start, int64_t vocab_local,
                                                   int64_t vocab_total) {
  cpu::vocab_parallel_embedding_backward<float>(dwte_local, dout, tokens, batch, seq, channels,
                                                vocab_start, vocab_local, vocab_total);
}

void CpuBackend::position_embedding_forward(FSpan out, CFSpan wpe, int64_t batch,
                                            int64_t seq_local, int64_t channels,
                                            int64_t seq_offset) {
  cpu::position_embedding_forward<float>(out, wpe, batch, seq_local, channels, seq_offset);
}

void CpuBackend::position_embedding_backward(FSpan dwpe, CFSpan dout, int64_t batch,
                                             int64_t seq_local, int64_t channels,
                                             int64_t seq_offset) {
  cpu::position_embedding_backward<float>(dwpe, dout, batch, seq_local, channels, seq_offset);
}

void CpuBackend::layernorm_forward(FSpan out, FSpan mean, FSpan rstd, CFSpan inp, CFSpan weight,
                                   CFSpan bias, int64_t batch, int64_t seq, int64_t channels) {
  cpu::layernorm_forward<float>(out, mean, rstd, inp, weight, bias, batch, seq, channels);
}

void CpuBackend::layernorm_backward(FSpan dinp, FSpan dweight, FSpan dbias, CFSpan dout,
                                    CFSpan inp, CFSpan weight, CFSpan mean, CFSpan rstd,
                                    int64_t batch, int64_t seq, int64_t channels) {
  cpu::layernorm_backward<float>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, batch, seq,
                                 channels);
}

void CpuBackend::matmul_forward(FSpan out, CFSpan inp, CFSpan weight, CFSpan bias, int64_t batch,
                                int64_t seq, int64_t channels, int64_t out_channels) {
  cpu::matmul_forward<float>(out, inp, weight, bias, batch, seq, channels, out_channels);
}

void CpuBackend::matmul_backward_data(FSpan dinp, CFSpan dout, CFSpan weight, int64_t batch,
                                      int64_t seq, int64_t channels, int64_t out_channels) {
  cpu::matmul_backward_data<float>(dinp, dout, weight, batch, seq, channels, out_channels);
}

void CpuBackend::matmul_backward_weight(FSpan dweight, FSpan dbias, CFSpan dout, CFSpan inp,
                                        int64_t batch, int64_t seq, int64_t channels,
                                        int64_t out_channels) {
  cpu::matmul_backward_weight<float>(dweight, dbias, dout, inp, batch, seq, channels,
                                     out_channels);
}

void CpuBackend::convert_to_bf16(BSpan dst, CFSpan src) { cpu::to_bf16(dst, src); }

void CpuBackend::convert_from_bf16(FSpan dst, CBSpan src) { cpu::from_bf16(dst, src); }

void CpuBackend::accumulate_from_bf16(FSpan dst, CBSpan src) { cpu::accumulate_bf16(dst, src); }

void CpuBackend::matmul_forward_bf16(BSpan out, CBSpan inp, CBSpan weight, CBSpan bias,
                                     int64_t batch, int64_t seq, int64_t channels,
                                     int64_t out_channels) {
  cpu::matmul_forward_bf16(out, inp, weight, bias, batch, seq, channels, out_channels);
}

void CpuBackend::matmul_backward_data_bf16(BSpan dinp, CBSpan dout, CBSpan weight, int64_t batch,
                                           int64_t seq, int64_t channels, int64_t out_channels) {
  cpu::matmul_backward_data_bf16(dinp, dout, weight, batch, seq, channels, out_channels);
}

void CpuBackend::matmul_backward_weight_bf16(FSpan dweight, FSpan dbias, CBSpan dout, CBSpan inp,
                                             int64_t batch, int64_t seq, int64_t channels,
                                             int64_t out_channels) {
  cpu::matmul_backward_weight_bf16(dweight, dbias, dout, inp, batch, seq, channels,
                                   out_channels);
}

void CpuBackend::quantize_fp8(F8Span dst, CFSpan src, cpu::Fp8Kind kind, float scale) {
  cpu::to_fp8(dst, src, kind, scale);
}

// fast_accumulation changes nothing here: the reference always sums in fp32.
void CpuBackend::fp8_gemm_nt(BSpan out, CF8Span a, cpu::Fp8Kind a_kind, CF8Span b,
                             cpu::Fp8Kind b_kind, float alpha, int64_t m, int64_t n, int64_t k,
                             bool /*fast_accumulation*/) {
  cpu::fp8_gemm_nt(out, a, a_kind, b, b_kind, alpha, m, n, k);
}

void CpuBackend::fp8_gemm_nt_accumulate(FSpan out, CF8Span a, cpu::Fp8Kind a_kind, CF8Span b,
                                        cpu::Fp8Kind b_kind, float alpha, int64_t m, int64_t n,
                                        int64_t k, bool /*fast_accumulation*/) {
  cpu::fp8_gemm_nt_accumulate(out, a, a_kind, b, b_kind, alpha, m, n, k);
}

void CpuBackend::attention_forward(FSpan out, FSpan preatt, FSpan att, CFSpan inp, int64_t batch,
                                   int64_t seq, int64_t channels, int64_t heads,
                                   const AttentionProbabilityDropout* dropout) {
  cpu::attention_forward<float>(out, preatt, att, inp, batch, seq, channels, heads, dropout);
}

void CpuBackend::attention_backward(FSpan dinp, CFSpan dout, CFSpan inp, CFSpan att,
                                    int64_t batch, int64_t seq, int64_t channels, int64_t heads,
                                    const AttentionProbabilityDropout* dropout) {
  cpu::attention_backward<float>(dinp, dout, inp, att, batch, seq, channels, heads, dropout);
}

void CpuBackend::rmsnorm_forward(FSpan out, FSpan rrms, CFSpan inp, CFSpan weight,
                                 int64_t batch, int64_t seq, int64_t channels) {
  cpu::rmsnorm_forward<float>(out, rrms, inp, weight, batch, seq, channels);
}

void CpuBackend::rmsnorm_backward(FSpan dinp, FSpan dweight, CFSpan dout, CFSpan inp,
                                  CFSpan weight, CFSpan rrms, int64_t batch, int64_t seq,
                                  int64_t channels) {
  cpu::rmsnorm_backward<float>(dinp, dweight, dout, inp, weight, rrms, batch, seq, channels);
}

void CpuBackend::gqa_attention_forward(FSpan out, FSpan att, CFSpan inp, int64_t batch,
                                       int64_t seq, int64_t heads, int64_t query_groups,
                                       int64_t head_dim,
                                       const AttentionProbabilityDropout* dropout) {
  cpu::gqa_attention_forward<float>(out, att, inp, batch, seq, heads, query_groups, head_dim,
                                    dropout);
}

void CpuBackend::gqa_attention_backward(FSpan dinp, CFSpan dout, CFSpan inp, CFSpan att,
                                        int64_t batch, int64_t seq, int64_t heads,
                                        int64_t query_groups, int64_t head_dim,
                                        const AttentionProbabilityDropout* dropout) {
  cpu::gqa_attention_backward<float>(dinp, dout, inp, att, batch, seq, heads, query_groups,
                                     head_dim, dropout);
}

namespace {
/// The global positions of a sequence's local positions [0, n).
std::vector<int64_t> positions(const CpSequence& sequence, int64_t n) {
  if (n != sequence.local()) {
    throw InvalidArgument("cpu backend: " + std::to_string(n) + " positions, but the sequence "
                          "holds " + std::to_string(sequence.local()) + " local positions");
  }
  return sequence.positions(0, n);
}
}  // namespace

void CpuBackend::block_attention_forward(FSpan out, FSpan lse, CFSpan q, CFSpan kv,
                                         const CpSequence& q_positions,
                                         const CpSequence& k_positions,
                                         const cpu::BlockAttentionShape& shape,
                                         const AttentionProbabilityDropout* dropout) {
  cpu::block_attention_forward<float>(out, lse, q, kv, positions(q_positions, shape.seq_q),
                                      positions(k_positions, shape.seq_k), shape, dropout);
}

void CpuBackend::attention_merge(FSpan out, FSpan lse, CFSpan block_out, CFSpan block_lse,
                                 int64_t batch, int64_t seq, int64_t heads, int64_t head_dim) {
  cpu::attention_merge<float>(out, lse, block_out, block_lse, batch, seq, heads, head_dim);
}

void CpuBackend::add_in_place(FSpan dst, CFSpan src) {
  cpu::require_same("add_in_place", dst.size(), src.size(), "dst and src");
  for (size_t i = 0; i < dst.size(); ++i) dst[i] += src[i];
}

void CpuBackend::block_attention_backward(FSpan dq, FSpan dkv, CFSpan dout, CFSpan q, CFSpan kv,
                                          CFSpan out, CFSpan lse, const CpSequence& q_positions,
                                          const CpSequence& k_positions,
                                          const cpu::BlockAttentionShape& shape,
                                          const AttentionProbabilityDropout* dropout) {
  cpu::block_attention_backward<float>(dq, dkv, dout, q, kv, out, lse,
                                       positions(q_positions, shape.seq_q),
                                       positions(k_positions, shape.seq_k), shape, dropout);
}

void CpuBackend::rope_forward(FSpan out, CFSpan inp, int64_t batch, int64_t seq, int64_t heads,
                              int64_t head_dim, const CpSequence& sequence, double rotary_base) {
  cpu::rope_forward<float>(out, inp, positions(sequence, seq), batch, seq, heads, head_dim,
                           rotary_base);
}

void CpuBackend::rope_backward(FSpan dinp, CFSpan dout, int64_t batch, int64_t seq, int64_t heads,
                               int64_t head_dim, const CpSequence& sequence, double rotary_base) {
  cpu::rope_backward<float>(dinp, dout, positions(sequence, seq), batch, seq, heads, head_dim,
                            rotary_base);
}

void CpuBackend::swiglu_forward(FSpan out, CFSpan inp, int64_t rows, int64_t width) {
  cpu::swiglu_forward<float>(out, inp, rows, width);
}

void CpuBackend::swiglu_backward(FSpan dinp, CFSpan dout, CFSpan inp, int64_t rows,
                                 int64_t width) {
  cpu::swiglu_backward<float>(dinp, dout, inp, rows, width);
}

void CpuBackend::moe_topk_softmax_forward(FSpan gates, std::span<uint8_t> topk_map,
                                          std::span<uint8_t> routing_map, FSpan probs,
                                          std::span<int64_t> tokens_per_expert, CFSpan logits,
                                          int64_t tokens, int64_t experts, int64_t topk,
                                          int64_t capacity, bool pad_to_capacity) {
  cpu::moe_topk_softmax_forward<float>(gates, topk_map, routing_map, probs, tokens_per_expert,
                                       logits, tokens, experts, topk, capacity, pad_to_capacity);
}

void CpuBackend::moe_topk_softmax_backward(FSpan dlogits, CFSpan dprobs, CFSpan gates,
                                           std::span<const uint8_t> topk_map,
                                           std::span<const uint8_t> routing_map, int64_t tokens,
                                           int64_t experts) {
  cpu::moe_topk_softmax_backward<float>(dlogits, dprobs, gates, topk_map, routing_map, tokens,
                                        experts);
}

double CpuBackend::moe_switch_aux_loss_forward(FSpan scores, CFSpan logits,
                                               std::span<const int64_t> tokens_per_expert,
                                               int64_t tokens, int64_t experts,
                                               int64_t total_tokens, int64_t topk, double coeff) {
  return cpu::moe_switch_aux_loss_forward<float>(scores, logits, tokens_per_expert, tokens,
                                                 experts, total_tokens, topk, coeff);
}

void CpuBackend::moe_switch_aux_loss_backward(FSpan dlogits, double daux, CFSpan scores,
                                              std::span<const int64_t> tokens_per_expert,
                                              int64_t tokens, int64_t experts,
                                              int64_t total_tokens, int64_t topk, double coeff) {
  cpu::moe_switch_aux_loss_backward<float>(dlogits, static_cast<float>(daux), scores,
                                           tokens_per_expert, tokens, experts, total_tokens, topk,
                                           coeff);
}

void CpuBackend::moe_permute_forward(FSpan out, CFSpan inp, const cpu::MoePermutation& perm,
                                     int64_t tokens, int64_t channels) {
  cpu::moe_permute_forward<float>(out, inp, perm, tokens, channels);
}

void CpuBackend::moe_permute_backward(FSpan dinp, CFSpan dout, const cpu::MoePermutation& perm,
                                      int64_t tokens, int64_t channels) {
  cpu::moe_permute_backward<float>(dinp, dout, perm, tokens, channels);
}

void CpuBackend::moe_unpermute_forward(FSpan out, CFSpan inp, CFSpan probs,
                                       const cpu::MoePermutation& perm, int64_t tokens,
                                       int64_t experts, int64_t channels) {
  cpu::moe_unpermute_forward<float>(out, inp, probs, perm, tokens, experts, channels);
}

void CpuBackend::moe_unpermute_backward(FSpan dinp, FSpan dprobs, CFSpan dout, CFSpan inp,
                                        CFSpan probs, const cpu::MoePermutation& perm,
                                        int64_t tokens, int64_t experts, int64_t channels) {
  cpu::moe_unpermute_backward<float>(dinp, dprobs, dout, inp, probs, perm, tokens, experts,
                                     channels);
}

void CpuBackend::moe_sort_chunks(FSpan out, CFSpan inp, std::span<const int64_t> chunk_rows,
                                 std::span<const int64_t> order, int64_t channels) {
  cpu::moe_sort_chunks<float>(out, inp, chunk_rows, order, channels);
}

void CpuBackend::grouped_matmul_forward(FSpan out, CFSpan inp, CFSpan weight,
                                        std::span<const int64_t> rows_per_group, int64_t channels,
                                        int64_t out_channels) {
  cpu::grouped_matmul_forward<float>(out, inp, weight, rows_per_group, channels, out_channels);
}

void CpuBackend::grouped_matmul_backward_data(FSpan dinp, CFSpan dout, CFSpan weight,
                                              std::span<const int64_t> rows_per_group,
                                              int64_t channels, int64_t out_channels) {
  cpu::grouped_matmul_backward_data<float>(dinp, dout, weight, rows_per_group, channels,
                                           out_channels);
}

void CpuBackend::grouped_matmul_backward_weight(FSpan dweight, CFSpan dout, CFSpan inp,
                                                std::span<const int64_t> rows_per_group,
                                                int64_t channels, int64_t out_channels) {
  cpu::grouped_matmul_backward_weight<float>(dweight, dout, inp, rows_per_group, channels,
                                             out_channels);
}

void CpuBackend::squared_relu_forward(FSpan out, CFSpan inp) {
  cpu::squared_relu_forward<float>(out, inp);
}

void CpuBackend::squared_relu_backward(FSpan dinp, CFSpan inp, CFSpan dout) {
  cpu::squared_relu_backward<float>(dinp, inp, dout);
}

void CpuBackend::gelu_forward(FSpan out, CFSpan inp) { cpu::gelu_forward<float>(out, inp); }

void CpuBackend::gelu_backward(FSpan dinp, CFSpan inp, CFSpan dout) {
  cpu::gelu_backward<float>(dinp, inp, dout);
}

void CpuBackend::bias_dropout_add_forward(FSpan out, CFSpan inp, CFSpan bias, CFSpan residual,
                                          const DropoutParams& params,
                                          const HiddenBlock& block) {
  cpu::bias_dropout_add_forward<float>(out, inp, bias, residual, params, block);
}

void CpuBackend::bias_dropout_add_backward(FSpan dinp, FSpan dbias, FSpan dresidual, CFSpan dout,
                                           const DropoutParams& params,
                                           const HiddenBlock& block) {
  cpu::bias_dropout_add_backward<float>(dinp, dbias, dresidual, dout, params, block);
}

void CpuBackend::vocab_parallel_logits_max(FSpan logits_max_local, CFSpan logits_local,
                                           int64_t batch, int64_t seq, int64_t vocab_local) {
  cpu::vocab_parallel_logits_max<float>(logits_max_local, logits_local, batch, seq, vocab_local);
}

void CpuBackend::vocab_parallel_sum_exp(FSpan sum_exp_local, FSpan target_logit_local,
                                        CFSpan logits_local, CFSpan logits_max, CISpan targets,
                                        int64_t batch, int64_t seq, int64_t vocab_start,
                                        int64_t vocab_local, int64_t vocab_total) {
  cpu::vocab_parallel_sum_exp<float>(sum_exp_local, target_logit_local, logits_local, logits_max,
                                     targets, batch, seq, vocab_start, vocab_local, vocab_total);
}

void CpuBackend::vocab_parallel_cross_entropy_loss(FSpan losses, CFSpan sum_exp,
                                                   CFSpan logits_max, CFSpan target_logit,
                                                   int64_t batch, int64_t seq) {
  cpu::vocab_parallel_cross_entropy_loss<float>(losses, sum_exp, logits_max, target_logit, batch,
                                                seq);
}

void CpuBackend::vocab_parallel_cross_entropy_backward(
    FSpan dlogits_local, CFSpan dlosses, CFSpan logits_local, CFSpan logits_max, CFSpan sum_exp,
    CISpan targets, int64_t batch, int64_t seq, int64_t vocab_start, int64_t vocab_local,
    int64_t vocab_total) {
  cpu::vocab_parallel_cross_entropy_backward<float>(dlogits_local, dlosses, logits_local,
                                                    logits_max, sum_exp, targets, batch, seq,
                                                    vocab_start, vocab_local, vocab_total);
}

double CpuBackend::sum_of_squares(CFSpan values) { return cpu::sum_of_squares(values); }

void CpuBackend::scale_in_place(FSpan values, double factor) {
  cpu::scale_in_place(values, factor);
}

void CpuBackend::adamw_step(FSpan params, CFSpan grads, FSpan exp_avg, FSpan exp_avg_sq,
                            const AdamWParams& hyper, double lr, int64_t step) {
  cpu::adamw_step<float>(params, grads, exp_avg, exp_avg_sq, hyper, lr, step);
}

}  // namespace traintwin::exec::cpu
