// The CUDA backend: the Backend interface (exec/backend.hpp) on one NVIDIA GPU, fp32 storage and
// arithmetic (the executor's precision; GEMMs through cuBLASLt in true fp32, CUBLAS_COMPUTE_32F,
// or in TF32 / bf16 tensor-core arithmetic under set_float32_matmul_precision), over the
// launchers of exec/cuda/. Every kernel is issued asynchronously on the
// backend's one stream; download(), sum_of_squares() and the MoE routing (whose maps are host
// memory by the interface) wait for it. Device memory comes from CUDA's stream-ordered pool
// (cudaMallocAsync on that stream, release threshold unlimited: freed blocks stay cached as
// PyTorch's caching allocator keeps them; empty_cache() trims the pool).
//
// The overrides are defined in four files, one per family of kernels:
//   cuda_backend.cu          memory, copies, embedding, LayerNorm, GEMMs, multi-head attention,
//                            GELU, bias_dropout_add, vocab-parallel cross-entropy, optimizer;
//   cuda_backend_modern.cu   RMSNorm, RoPE, SwiGLU, squared ReLU, grouped-query attention,
//                            blockwise attention (FlashAttention tile / CP block) and its merge,
//                            fused attention (cuDNN's graph, exec/cuda/cudnn_attention.hpp);
//   cuda_backend_moe.cu      MoE router (top-k softmax, Switch aux loss), permute/unpermute,
//                            chunk sort, grouped GEMM.
// Next in the flow: the executor (exec/executor.hpp) and `traintwin profile` call these through
// Backend&; tests/gpu/cuda_backend_*_test.cpp check every one against cpu::CpuBackend.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "exec/backend.hpp"
#include "exec/cuda/gemm.hpp"
#if TRAINTWIN_HAVE_CUDNN
#include <memory>

#include "exec/cuda/cudnn_attention.hpp"
#endif

namespace traintwin::exec::cuda {

/// Properties of the device a CudaBackend runs on (cudaGetDeviceProperties, driver and library
/// versions), as `traintwin profile` records them.
struct CudaDeviceInfo {
  int device = 0;
  std::string name;                ///< e.g. "NVIDIA H100 80GB HBM3"
  int sm_count = 0;
  int compute_capability = 0;      ///< major x 10 + minor (90 for Hopper)
  int64_t memory_bytes = 0;
  int64_t l2_bytes = 0;
  int sm_clock_mhz = 0;            ///< current SM clock (NVML-free: cudaDevAttrClockRate, kHz/1000)
  int memory_clock_mhz = 0;
  int driver_version = 0;          ///< cudaDriverGetVersion (CUDA driver API), e.g. 13000
  std::string driver_release;      ///< the kernel module's, e.g. "580.159.04" ("" if unknown)
  int runtime_version = 0;         ///< cudaRuntimeGetVersion
  int cublas_version = 0;          ///< cublasLtGetVersion
  int cudnn_version = 0;           ///< cudnnGetVersion at run time (0: built without cuDNN)
};

/// Backend on CUDA device `device` (cudaSetDevice on construction and before every call from
/// another thread is the caller's affair: one backend per host thread). Throws CudaError when
/// no device is visible or the device cannot be initialized.
class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device = 0);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }
  void synchronize() override;
  /// CUDA events recorded on the stream before and after `work`, then synchronized: the device
  /// time of its kernels, launch gaps between them included, host time before the first not.
  double time_us(const std::function<void()>& work) override;
  /// The device's L2 (cudaDevAttrL2CacheSize).
  int64_t cache_bytes() const override;
  /// An event recorded on the stream (cudaEventRecord; no synchronize); the times come from
  /// cudaEventElapsedTime (0.5 us resolution) once the last mark's event has completed.
  size_t mark() override;
  std::vector<double> mark_times_s() override;
  void clear_marks() override { marks_used_ = 0; }
  /// kHighest CUBLAS_COMPUTE_32F, kHigh CUBLAS_COMPUTE_32F_FAST_TF32, kMedium
  /// CUBLAS_COMPUTE_32F_FAST_16BF for every GEMM (the attention core's batched GEMMs included).
  void set_float32_matmul_precision(Float32MatmulPrecision p) override;

  /// The stream every kernel of this backend is issued on (profile records events on it).
  cudaStream_t stream() const { return stream_; }
  /// The device's properties and versions.
  CudaDeviceInfo device_info() const;
  /// Bytes the pool holds now (in use + cached) and its high-water mark of used bytes since the
  /// backend was created (cudaMemPoolAttrUsedMemHigh): the allocator's peak, as
  /// torch.cuda.max_memory_allocated.
  int64_t pool_reserved_bytes() const;
  int64_t pool_peak_used_bytes() const;

  void* allocate_zeroed(size_t bytes) override;
  void* allocate_uninitialized(size_t bytes) override;
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
  bool has_bf16_arithmetic() const override { return true; }
  void convert_to_bf16(BSpan dst, CFSpan src) override;
  void convert_from_bf16(FSpan dst, CBSpan src) override;
  void accumulate_from_bf16(FSpan dst, CBSpan src) override;
  /// cuBLASLt with bf16 A, B and D, CUBLAS_COMPUTE_32F, the bias epilogue in bf16.
  void matmul_forward_bf16(BSpan out, CBSpan inp, CBSpan weight, CBSpan bias, int64_t batch,
                           int64_t seq, int64_t channels, int64_t out_channels) override;
  void matmul_backward_data_bf16(BSpan dinp, CBSpan dout, CBSpan weight, int64_t batch,
                                 int64_t seq, int64_t channels, int64_t out_channels) override;
  /// cuBLASLt with bf16 A and B, fp32 C = D and beta 1 (Transformer Engine's wgrad into
  /// main_grad), then the bias gradient's column sums.
  void matmul_backward_weight_bf16(FSpan dweight, FSpan dbias, CBSpan dout, CBSpan inp,
                                   int64_t batch, int64_t seq, int64_t channels,
                                   int64_t out_channels) override;
  /// Compute capability 8.9 or later (Ada, Hopper, Blackwell).
  bool has_fp8_arithmetic() const override;
  /// cuda_fp8.h's __nv_cvt_float_to_fp8 with __NV_SATFINITE.
  void quantize_fp8(F8Span dst, CFSpan src, cpu::Fp8Kind kind, float scale) override;
  /// cuBLASLt FP8 TN GEMM (exec/cuda/gemm.hpp fp8_matmul_nt), bf16 D.
  void fp8_gemm_nt(BSpan out, CF8Span a, cpu::Fp8Kind a_kind, CF8Span b, cpu::Fp8Kind b_kind,
                   float alpha, int64_t m, int64_t n, int64_t k, bool fast_accumulation) override;
  /// The same with fp32 C = D and beta 1.
  void fp8_gemm_nt_accumulate(FSpan out, CF8Span a, cpu::Fp8Kind a_kind, CF8Span b,
                              cpu::Fp8Kind b_kind, float alpha, int64_t m, int64_t n, int64_t k,
                              bool fast_accumulation) override;
  void attention_forward(FSpan out, FSpan preatt, FSpan att, CFSpan inp, int64_t batch,
                         int64_t seq, int64_t channels, int64_t heads,
                         const cpu::AttentionProbabilityDropout* dropout) override;
  void attention_backward(FSpan dinp, CFSpan dout, CFSpan inp, CFSpan att, int64_t batch,
                          int64_t seq, int64_t channels, int64_t heads,
                          const cpu::AttentionProbabilityDropout* dropout) override;

  // ---- cuda_backend_modern.cu ------------------------------------------------------------------
  void rmsnorm_forward(FSpan out, FSpan rrms, CFSpan inp, CFSpan weight, int64_t batch,
                       int64_t seq, int64_t channels) override;
  void rmsnorm_backward(FSpan dinp, FSpan dweight, CFSpan dout, CFSpan inp, CFSpan weight,
                        CFSpan rrms, int64_t batch, int64_t seq, int64_t channels) override;
  void gqa_attention_forward(FSpan out, FSpan att, CFSpan inp, int64_t batch, int64_t seq,
                             int64_t heads, int64_t query_groups, int64_t head_dim,
                             const cpu::AttentionProbabilityDropout* dropout) override;
  void gqa_attention_backward(FSpan dinp, CFSpan dout, CFSpan inp, CFSpan att, int64_t batch,
                              int64_t seq, int64_t heads, int64_t query_groups, int64_t head_dim,
                              const cpu::AttentionProbabilityDropout* dropout) override;
  void block_attention_forward(FSpan out, FSpan lse, CFSpan q, CFSpan kv,
                               const CpSequence& q_positions, const CpSequence& k_positions,
                               const cpu::BlockAttentionShape& shape,
                               const cpu::AttentionProbabilityDropout* dropout) override;
  void attention_merge(FSpan out, FSpan lse, CFSpan block_out, CFSpan block_lse, int64_t batch,
                       int64_t seq, int64_t heads, int64_t head_dim) override;
  void add_in_place(FSpan dst, CFSpan src) override;
  void block_attention_backward(FSpan dq, FSpan dkv, CFSpan dout, CFSpan q, CFSpan kv, CFSpan out,
                                CFSpan lse, const CpSequence& q_positions,
                                const CpSequence& k_positions,
                                const cpu::BlockAttentionShape& shape,
                                const cpu::AttentionProbabilityDropout* dropout) override;
  /// cuDNN's fused flash attention (exec/cuda/cudnn_attention.hpp) on bf16 copies of the QKV
  /// rows, its bf16 output widened into `out`: multi-head attention (groups = heads), no
  /// attention dropout, bf16 products (float32_matmul_precision medium: training.precision
  /// bf16). Throws UnsupportedError naming what is missing otherwise, and in a build without
  /// cuDNN; CudnnError when cuDNN has no engine for the shape.
  void fused_attention_forward(FSpan out, FSpan lse, CFSpan qkv,
                               const cpu::BlockAttentionShape& shape,
                               const cpu::AttentionProbabilityDropout* dropout) override;
  /// The backward of the same graph: bf16 copies of qkv, out and dout; d_qkv overwritten with
  /// the widened bf16 gradient.
  void fused_attention_backward(FSpan d_qkv, CFSpan dout, CFSpan qkv, CFSpan out, CFSpan lse,
                                const cpu::BlockAttentionShape& shape,
                                const cpu::AttentionProbabilityDropout* dropout) override;
  void rope_forward(FSpan out, CFSpan inp, int64_t batch, int64_t seq, int64_t heads,
                    int64_t head_dim, const CpSequence& positions, double rotary_base) override;
  void rope_backward(FSpan dinp, CFSpan dout, int64_t batch, int64_t seq, int64_t heads,
                     int64_t head_dim, const CpSequence& positions, double rotary_base) override;
  void swiglu_forward(FSpan out, CFSpan inp, int64_t rows, int64_t width) override;
  void swiglu_backward(FSpan dinp, CFSpan dout, CFSpan inp, int64_t rows, int64_t width) override;
  void squared_relu_forward(FSpan out, CFSpan inp) override;
  void squared_relu_backward(FSpan dinp, CFSpan inp, CFSpan dout) override;

  // ---- cuda_backend_moe.cu ---------------------------------------------------------------------
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

  // ---- cuda_backend.cu -------------------------------------------------------------------------
  void gelu_forward(FSpan out, CFSpan inp) override;
  void gelu_backward(FSpan dinp, CFSpan inp, CFSpan dout) override;
  void bias_dropout_add_forward(FSpan out, CFSpan inp, CFSpan bias, CFSpan residual,
                                const cpu::DropoutParams& params,
                                const cpu::HiddenBlock& block) override;
  void bias_dropout_add_backward(FSpan dinp, FSpan dbias, FSpan dresidual, CFSpan dout,
                                 const cpu::DropoutParams& params,
                                 const cpu::HiddenBlock& block) override;
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
  /// Every piece's kernel adds into one device sum (pieces adjacent in memory as one launch),
  /// then one copy to the host.
  double total_sum_of_squares(std::span<const CFSpan> pieces) override;
  void scale_in_place(FSpan values, double factor) override;
  void adamw_step(FSpan params, CFSpan grads, FSpan exp_avg, FSpan exp_avg_sq,
                  const cpu::AdamWParams& hyper, double lr, int64_t step) override;

 private:
  /// A device scratch buffer of at least `bytes` from the pool, freed (stream-ordered) when the
  /// Scratch goes out of scope: safe to use for the kernels issued before that.
  class Scratch {
   public:
    Scratch(CudaBackend& backend, size_t bytes);
    ~Scratch();
    Scratch(Scratch&& o) noexcept : backend_(o.backend_), ptr_(o.ptr_), bytes_(o.bytes_) {
      o.ptr_ = nullptr;
      o.bytes_ = 0;
    }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    Scratch& operator=(Scratch&&) = delete;
    void* get() const { return ptr_; }
    template <typename T>
    T* as() const { return static_cast<T*>(ptr_); }
    size_t bytes() const { return bytes_; }

   private:
    CudaBackend& backend_;
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
  };
  /// `bytes` of host data copied into a new Scratch (cudaMemcpyAsync from pageable memory:
  /// the host data has been staged when it returns, so `host` may go away after the call).
  Scratch upload_scratch(const void* host, size_t bytes);

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  /// mark()'s events, reused across clear_marks(): the first `marks_used_` are this set's.
  std::vector<cudaEvent_t> marks_;
  size_t marks_used_ = 0;
  cudaMemPool_t pool_ = nullptr;
  CublasContext cublas_;
#if TRAINTWIN_HAVE_CUDNN
  /// The fused attention's cuDNN handle and plans, made at the first fused call.
  CudnnAttention& cudnn_attention();
  std::unique_ptr<CudnnAttention> cudnn_attention_;
#endif
};

/// The NVIDIA kernel module's release in the text of /proc/driver/nvidia/version: the first word
/// of digits and dots on the "Kernel Module" line ("NVRM version: NVIDIA UNIX x86_64 Kernel
/// Module  580.159.04  ..." -> "580.159.04"), "" when it names none.
std::string nvidia_driver_release(const std::string& proc_version_text);

/// Throws InvalidArgument "cuda backend: <who>: <what> has <n> elements, expected <m>" unless
/// span.size() == expected (the CPU layers' own size checks, done before any launch).
void check_size(const char* who, const char* what, size_t size, int64_t expected);

}  // namespace traintwin::exec::cuda
