// The CPU backend: the Backend interface (exec/backend.hpp) over the llm.c-style fp32 layers of
// exec/cpu/ (OpenBLAS GEMMs, loops elsewhere) in host memory. The reference every machine has.
#pragma once

#include <string>

#include "exec/backend.hpp"
#include "exec/cpu/block_cache.hpp"

namespace traintwin::exec::cpu {

/// Backend running every kernel on the calling thread (GEMMs on OpenBLAS's threads,
/// set_gemm_threads). Memory is host memory, zeroed on allocation, freed blocks of 256 KiB and
/// more kept for reuse by size (HostBlockCache).
class CpuBackend : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  void synchronize() override {}
  /// The host's last-level cache (host_device.hpp, last_level_cache_bytes).
  int64_t cache_bytes() const override;

  void* allocate_zeroed(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) noexcept override;
  void empty_cache() override;
  void copy(FSpan dst, CFSpan src) override;
  void copy_2d(FSpan dst, int64_t dst_pitch, CFSpan src, int64_t src_pitch, int64_t width,
               int64_t height) override;
  void fill_2d(FSpan dst, int64_t pitch, int64_t width, int64_t height, float value) override;
  void upload(std::span<int32_t> device, std::span<const int32_t> host) override;
  void upload(FSpan device, CFSpan host) override;
  void download(std::span<float> host, CFSpan device) override;

  void vocab_parallel_embedding_forward(FSpan out, CISpan tokens, CFSpan wte_local, int64_t batch,
                                        int64_t seq, int64_t channels, int64_t vocab_start,
                                        int64_t vocab_local, int64_t vocab_total) override;
  void vocab_parallel_embedding_backward(FSpan dwte_local, CFSpan dout, CISpan tokens,
                                         int64_t batch, int64_t seq, int64_t channels,
                                         int64_t vocab_start, int64_t vocab_local,
                                         int64_t vocab_total) override;
  void position_embedding_forward(FSpan out, CFSpan wpe, int64_t batch, int64_t seq_local,
                                  int64_t channels, int64_t seq_offset) override;
  void position_embedding_backward(FSpan dwpe, CFSpan dout, int64_t batch, int64_t seq_local,
                                   int64_t channels, int64_t seq_offset) override;
  void layernorm_forward(FSpan out, FSpan mean, FSpan rstd, CFSpan inp, CFSpan weight, CFSpan bias,
                         int64_t batch, int64_t seq, int64_t channels) override;
  void layernorm_backward(FSpan dinp, FSpan dweight, FSpan dbias, CFSpan dout, CFSpan inp,
                          CFSpan weight, CFSpan mean, CFSpan rstd, int64_t batch, int64_t seq,
                          int64_t channels) override;
  void matmul_forward(FSpan out, CFSpan inp, CFSpan weight, CFSpan bias, int64_t batch,
                      int64_t seq, int64_t channels, int64_t out_channels) override;
  void matmul_backward_data(FSpan dinp, CFSpan dout, CFSpan weight, int64_t batch, int64_t seq,
                            int64_t channels, int64_t out_channels) override;
  void matmul_backward_weight(FSpan dweight, FSpan dbias, CFSpan dout, CFSpan inp, int64_t batch,
                              int64_t seq, int64_t channels, int64_t out_channels) override;
  void convert_to_bf16(BSpan dst, CFSpan src) override;
  void convert_from_bf16(FSpan dst, CBSpan src) override;
  void accumulate_from_bf16(FSpan dst, CBSpan src) override;
  void matmul_forward_bf16(BSpan out, CBSpan inp, CBSpan weight, CBSpan bias, int64_t batch,
                           int64_t seq, int64_t channels, int64_t out_channels) override;
  void matmul_backward_data_bf16(BSpan dinp, CBSpan dout, CBSpan weight, int64_t batch,
                                 int64_t seq, int64_t channels, int64_t out_channels) override;
  void matmul_backward_weight_bf16(FSpan dweight, FSpan dbias, CBSpan dout, CBSpan inp,
                                   int64_t batch, int64_t seq, int64_t channels,
                                   int64_t out_channels) override;
  void quantize_fp8(F8Span dst, CFSpan src, cpu::Fp8Kind kind, float scale) override;
  void fp8_gemm_nt(BSpan out, CF8Span a, cpu::Fp8Kind a_kind, CF8Span b, cpu::Fp8Kind b_kind,
                   float alpha, int64_t m, int64_t n, int64_t k, bool fast_accumulation) override;
  void fp8_gemm_nt_accumulate(FSpan out, CF8Span a, cpu::Fp8Kind a_kind, CF8Span b,
                              cpu::Fp8Kind b_kind, float alpha, int64_t m, int64_t n, int64_t k,
                              bool fast_accumulation) override;
  void attention_forward(FSpan out, FSpan preatt, FSpan att, CFSpan inp, int64_t batch,
                         int64_t seq, int64_t channels, int64_t heads,
                         const AttentionProbabilityDropout* dropout) override;
  void attention_backward(FSpan dinp, CFSpan dout, CFSpan inp, CFSpan att, int64_t batch,
                          int64_t seq, int64_t channels, int64_t heads,
                          const AttentionProbabilityDropout* dropout) override;
  void rmsnorm_forward(FSpan out, FSpan rrms, CFSpan inp, CFSpan weight, int64_t batch,
                       int64_t seq, int64_t channels) override;
  void rmsnorm_backward(FSpan dinp, FSpan dweight, CFSpan dout, CFSpan inp, CFSpan weight,
                        CFSpan rrms, int64_t batch, int64_t seq, int64_t channels) override;
  void gqa_attention_forward(FSpan out, FSpan att, CFSpan inp, int64_t batch, int64_t seq,
                             int64_t heads, int64_t query_groups, int64_t head_dim,
                             const AttentionProbabilityDropout* dropout) override;
  void gqa_attention_backward(FSpan dinp, CFSpan dout, CFSpan inp, CFSpan att, int64_t batch,
                              int64_t seq, int64_t heads, int64_t query_groups, int64_t head_dim,
                              const AttentionProbabilityDropout* dropout) override;
  void block_attention_forward(FSpan out, FSpan lse, CFSpan q, CFSpan kv,
                               const CpSequence& q_positions, const CpSequence& k_positions,
                               const cpu::BlockAttentionShape& shape,
                               const AttentionProbabilityDropout* dropout) override;
  void attention_merge(FSpan out, FSpan lse, CFSpan block_out, CFSpan block_lse, int64_t batch,
                       int64_t seq, int64_t heads, int64_t head_dim) override;
  void add_in_place(FSpan dst, CFSpan src) override;
  void block_attention_backward(FSpan dq, FSpan dkv, CFSpan dout, CFSpan q, CFSpan kv, CFSpan out,
                                CFSpan lse, const CpSequence& q_positions,
                                const CpSequence& k_positions,
                                const cpu::BlockAttentionShape& shape,
                                const AttentionProbabilityDropout* dropout) override;
  void rope_forward(FSpan out, CFSpan inp, int64_t batch, int64_t seq, int64_t heads,
                    int64_t head_dim, const CpSequence& positions, double rotary_base) override;
  void rope_backward(FSpan dinp, CFSpan dout, int64_t batch, int64_t seq, int64_t heads,
                     int64_t head_dim, const CpSequence& positions, double rotary_base) override;
  void swiglu_forward(FSpan out, CFSpan inp, int64_t rows, int64_t width) override;
  void swiglu_backward(FSpan dinp, CFSpan dout, CFSpan inp, int64_t rows, int64_t width) override;
  void moe_topk_softmax_forward(FSpan gates, std::span<uint8_t> topk_map,
                                std::span<uint8_t> routing_map, FSpan probs,
                                std::span<int64_t> tokens_per_expert, CFSpan logits,
                                int64_t tokens, int64_t experts, int64_t topk, int64_t capacity,
                                bool pad_to_capacity) override;
  void moe_topk_softmax_backward(FSpan dlogits, CFSpan dprobs, CFSpan gates,
                                 std::span<const uint8_t> topk_map,
                                 std::span<const uint8_t> routing_map, int64_t tokens,
                                 int64_t experts) override;
  double moe_switch_aux_loss_forward(FSpan scores, CFSpan logits,
                                     std::span<const int64_t> tokens_per_expert, int64_t tokens,
                                     int64_t experts, int64_t total_tokens, int64_t topk,
                                     double coeff) override;
  void moe_switch_aux_loss_backward(FSpan dlogits, double daux, CFSpan scores,
                                    std::span<const int64_t> tokens_per_expert, int64_t tokens,
                                    int64_t experts, int64_t total_tokens, int64_t topk,
                                    double coeff) override;
  void moe_permute_forward(FSpan out, CFSpan inp, const cpu::MoePermutation& perm, int64_t tokens,
                           int64_t channels) override;
  void moe_permute_backward(FSpan dinp, CFSpan dout, const cpu::MoePermutation& perm,
                            int64_t tokens, int64_t channels) override;
  void moe_unpermute_forward(FSpan out, CFSpan inp, CFSpan probs, const cpu::MoePermutation& perm,
                             int64_t tokens, int64_t experts, int64_t channels) override;
  void moe_unpermute_backward(FSpan dinp, FSpan dprobs, CFSpan dout, CFSpan inp, CFSpan probs,
                              const cpu::MoePermutation& perm, int64_t tokens, int64_t experts,
                              int64_t channels) override;
  void moe_sort_chunks(FSpan out, CFSpan inp, std::span<const int64_t> chunk_rows,
                       std::span<const int64_t> order, int64_t channels) override;
  void grouped_matmul_forward(FSpan out, CFSpan inp, CFSpan weight,
                              std::span<const int64_t> rows_per_group, int64_t channels,
                              int64_t out_channels) override;
  void grouped_matmul_backward_data(FSpan dinp, CFSpan dout, CFSpan weight,
                                    std::span<const int64_t> rows_per_group, int64_t channels,
                                    int64_t out_channels) override;
  void grouped_matmul_backward_weight(FSpan dweight, CFSpan dout, CFSpan inp,
                                      std::span<const int64_t> rows_per_group, int64_t channels,
                                      int64_t out_channels) override;
  void squared_relu_forward(FSpan out, CFSpan inp) override;
  void squared_relu_backward(FSpan dinp, CFSpan inp, CFSpan dout) override;
  void gelu_forward(FSpan out, CFSpan inp) override;
  void gelu_backward(FSpan dinp, CFSpan inp, CFSpan dout) override;
  void bias_dropout_add_forward(FSpan out, CFSpan inp, CFSpan bias, CFSpan residual,
                                const DropoutParams& params, const HiddenBlock& block) override;
  void bias_dropout_add_backward(FSpan dinp, FSpan dbias, FSpan dresidual, CFSpan dout,
                                 const DropoutParams& params, const HiddenBlock& block) override;
  void vocab_parallel_logits_max(FSpan logits_max_local, CFSpan logits_local, int64_t batch,
                                 int64_t seq, int64_t vocab_local) override;
  void vocab_parallel_sum_exp(FSpan sum_exp_local, FSpan target_logit_local, CFSpan logits_local,
                              CFSpan logits_max, CISpan targets, int64_t batch, int64_t seq,
                              int64_t vocab_start, int64_t vocab_local,
                              int64_t vocab_total) override;
  void vocab_parallel_cross_entropy_loss(FSpan losses, CFSpan sum_exp, CFSpan logits_max,
                                         CFSpan target_logit, int64_t batch,
                                         int64_t seq) override;
  void vocab_parallel_cross_entropy_backward(FSpan dlogits_local, CFSpan dlosses,
                                             CFSpan logits_local, CFSpan logits_max,
                                             CFSpan sum_exp, CISpan targets, int64_t batch,
                                             int64_t seq, int64_t vocab_start,
                                             int64_t vocab_local, int64_t vocab_total) override;
  double sum_of_squares(CFSpan values) override;
  void scale_in_place(FSpan values, double factor) override;
  void adamw_step(FSpan params, CFSpan grads, FSpan exp_avg, FSpan exp_avg_sq,
                  const AdamWParams& hyper, double lr, int64_t step) override;
 private:
  HostBlockCache blocks_;
};

/// The process-wide CpuBackend that holds host-side buffers created without a backend (a
/// ModelShard built without one). Created on first use; never destroyed before exit.
CpuBackend& host_backend();

}  // namespace traintwin::exec::cpu
