// The Backend seam of the trainer executor: every kernel the executor runs, and every byte of
// activation memory it holds, goes through one Backend. The walk (exec/executor.cpp) and the
// model math (exec/gpt_model*.cpp) never call a layer directly, so the CPU backend
// (exec/cpu/cpu_backend.hpp: OpenBLAS and the llm.c-style layers of exec/cpu/) and a CUDA backend
// (cuBLAS(Lt) and the kernels of exec/cuda/, whose launchers take the same shapes) are
// interchangeable, and `traintwin profile` times exactly the kernels `train` runs.
//
// Conventions (those of exec/cpu/ and exec/cuda/): row-major tensors, shapes as trailing
// comments ([B, T, C] = micro-batch, sequence positions, channels), fp32 storage and compute
// (bf16 linear layers and FP8 GEMMs below: training.precision bf16 runs the former, `profile`
// times both), weights in PyTorch nn.Linear layout [OC, C]. Spans are
// views of the backend's memory (host memory for cpu, device memory for cuda: never
// dereferenced by the caller); host data crosses the seam only through upload() and download().
// "+=" marks kernels that accumulate into their output, as the layers they wrap. Every kernel
// checks its sizes and throws InvalidArgument naming the layer and the operand; a backend's
// device errors are its own Error subclass (CudaError).
//
// Adding a kernel (a Llama layer, say): a pure virtual here with its shapes, the CPU layer in
// exec/cpu/ and its override in CpuBackend, the CUDA launcher in exec/cuda/ — the walk does not
// change, the model math calls it, and `traintwin profile` needs the KernelKey's inputs set up
// in exec/profile.cpp (make_call).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/scenario.hpp"
#include "exec/cpu/adamw.hpp"
#include "exec/cp_sequence.hpp"
#include "exec/cpu/attention.hpp"
#include "exec/cpu/block_attention.hpp"
#include "exec/cpu/dropout.hpp"
#include "exec/cpu/fp8.hpp"
#include "exec/cpu/moe_permute.hpp"

namespace traintwin::exec {

class Backend;

/// The tag of a DeviceBuffer whose contents start unspecified.
struct Uninitialized {};
inline constexpr Uninitialized kUninitialized{};

/// An owning, zero-initialized array of `T` in a Backend's memory (move-only; freed by the
/// backend that allocated it, which must outlive it). Default-constructed: empty.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  /// `n` zeros of T in `backend`'s memory. Throws what Backend::allocate_zeroed throws.
  DeviceBuffer(Backend& backend, int64_t n);
  /// `n` T of unspecified value (Backend::allocate_uninitialized): for a buffer the next kernel
  /// overwrites whole, without the pass that zeroes it.
  DeviceBuffer(Backend& backend, int64_t n, Uninitialized);
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : backend_(std::exchange(o.backend_, nullptr)), data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      backend_ = std::exchange(o.backend_, nullptr);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  /// Frees the memory now (the buffer becomes empty).
  void reset() noexcept;
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  std::span<T> span() { return {data_, size_}; }
  std::span<const T> span() const { return {data_, size_}; }
  operator std::span<T>() { return span(); }              // NOLINT: a view, as std::vector's
  operator std::span<const T>() const { return span(); }  // NOLINT

 private:
  Backend* backend_ = nullptr;
  T* data_ = nullptr;
  size_t size_ = 0;
};

/// An fp32 activation or gradient tensor.
using Tensor = DeviceBuffer<float>;
using FSpan = std::span<float>;
using CFSpan = std::span<const float>;
using CISpan = std::span<const int32_t>;
/// A bf16 tensor: bfloat16 bit patterns (exec/cpu/bf16.hpp), 2 bytes per element.
using Bf16Tensor = DeviceBuffer<uint16_t>;
using BSpan = std::span<uint16_t>;
using CBSpan = std::span<const uint16_t>;
/// An FP8 tensor (E4M3 or E5M2 bytes, exec/cpu/fp8.hpp).
using Fp8Tensor = DeviceBuffer<uint8_t>;
using F8Span = std::span<uint8_t>;
using CF8Span = std::span<const uint8_t>;

/// The kernels of the GPT model and its optimizer on one device. Not thread-safe: one per rank
/// (host thread). Kernels may run asynchronously on the backend's stream; download() and
/// synchronize() wait for them.
class Backend {
 public:
  virtual ~Backend() = default;

  /// "cpu" or "cuda".
  virtual std::string name() const = 0;
  /// Waits until every kernel issued so far has finished (a no-op on the CPU).
  virtual void synchronize() = 0;
  /// Runs `work` (which issues kernels on this backend) and returns the time its kernels took, in
  /// microseconds: by default the host clock from before `work` to after synchronize(); a device
  /// backend times its stream with events (CUDA: cudaEventElapsedTime, 0.5 us resolution), so
  /// no host time between launches counts. `profile` times each run of a kernel with it.
  virtual double time_us(const std::function<void()>& work) {
    synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    work();
    synchronize();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
        .count();
  }
  /// Time stamps of the live timeline. mark() stamps the point after the kernels issued so far
  /// and returns its index (0, 1, ... since clear_marks()); mark_times_s() waits for the last
  /// one and returns every mark's time in seconds after mark 0. This default waits for the
  /// kernels (synchronize) and reads the host clock; a device backend records an event on its
  /// stream instead and does not wait (CUDA events), so a timed run is not serialized by its
  /// timing. Marks are kept until clear_marks().
  virtual size_t mark() {
    synchronize();
    host_marks_.push_back(std::chrono::steady_clock::now());
    return host_marks_.size() - 1;
  }
  virtual std::vector<double> mark_times_s() {
    std::vector<double> out;
    out.reserve(host_marks_.size());
    for (const auto& t : host_marks_) {
      out.push_back(std::chrono::duration<double>(t - host_marks_.front()).count());
    }
    return out;
  }
  virtual void clear_marks() { host_marks_.clear(); }
  /// Bytes of the last-level cache the kernels' operands pass through (the CPU's L3, the GPU's
  /// L2): `profile` rotates inputs over at least twice this so a timed run starts cold when a
  /// live one would.
  virtual int64_t cache_bytes() const = 0;
  /// Sets the arithmetic of the matrix products issued from now on (GEMMs, grouped GEMMs, the
  /// attention core; training.float32_matmul_precision, as PyTorch's
  /// torch.set_float32_matmul_precision): kHighest true fp32 (the default), kHigh TF32, kMedium
  /// bf16 tensor cores; operands and results stay fp32 in memory. Throws UnsupportedError for an
  /// arithmetic this backend cannot compute (this default: anything but kHighest).
  virtual void set_float32_matmul_precision(Float32MatmulPrecision p) {
    if (p == Float32MatmulPrecision::kHighest) return;
    throw UnsupportedError("training.float32_matmul_precision: " + std::string(to_string(p)) +
                           ": the " + name() +
                           " backend computes matrix products in fp32 only (allowed: highest; "
                           "high and medium need tensor cores, --backend cuda)");
  }

  // ---- memory ----------------------------------------------------------------------------------
  /// `bytes` of zeroed device memory (nullptr for 0 bytes). Throws Error when out of memory.
  virtual void* allocate_zeroed(size_t bytes) = 0;
  /// `bytes` of device memory of unspecified contents (nullptr for 0 bytes); this default zeroes
  /// them. Throws as allocate_zeroed.
  virtual void* allocate_uninitialized(size_t bytes) { return allocate_zeroed(bytes); }
  virtual void deallocate(void* ptr, size_t bytes) noexcept = 0;
  /// Frees the blocks a caching allocator keeps for reuse (none in use are touched), as
  /// torch.cuda.empty_cache(): `profile` calls it before each kernel, so the blocks of the
  /// kernels timed before cannot crowd out the blocks this one frees and takes back. Default:
  /// nothing to free.
  virtual void empty_cache() {}
  /// dst = src (equal sizes, else InvalidArgument).
  virtual void copy(FSpan dst, CFSpan src) = 0;
  /// `height` rows of `width` elements from src (rows `src_pitch` apart) to dst (rows `dst_pitch`
  /// apart): cudaMemcpy2D's contract, in elements. Throws InvalidArgument when a row would leave
  /// its span.
  virtual void copy_2d(FSpan dst, int64_t dst_pitch, CFSpan src, int64_t src_pitch, int64_t width,
                       int64_t height) = 0;
  /// `height` rows of `width` elements of dst, rows `pitch` apart, set to `value`.
  virtual void fill_2d(FSpan dst, int64_t pitch, int64_t width, int64_t height, float value) = 0;
  /// Host to device: device = host (equal sizes).
  virtual void upload(std::span<int32_t> device, std::span<const int32_t> host) = 0;
  virtual void upload(FSpan device, CFSpan host) = 0;
  /// Device to host: host = device (equal sizes); waits for the kernels writing `device`.
  virtual void download(std::span<float> host, CFSpan device) = 0;

  // ---- embedding (exec/cpu/vocab_parallel_embedding.hpp, position_embedding.hpp) ---------------
  /// out[b, t] = wte_local[token - vocab_start] for tokens of this vocabulary shard, else 0.
  virtual void vocab_parallel_embedding_forward(FSpan out,        // [B, T, C]
                                                CISpan tokens,    // [B, T]
                                                CFSpan wte_local, // [V_local, C]
                                                int64_t batch, int64_t seq, int64_t channels,
                                                int64_t vocab_start, int64_t vocab_local,
                                                int64_t vocab_total) = 0;
  /// dwte_local += scatter of dout by token (this shard's tokens only).
  virtual void vocab_parallel_embedding_backward(FSpan dwte_local,  // [V_local, C]
                                                 CFSpan dout,       // [B, T, C]
                                                 CISpan tokens,     // [B, T]
                                                 int64_t batch, int64_t seq, int64_t channels,
                                                 int64_t vocab_start, int64_t vocab_local,
                                                 int64_t vocab_total) = 0;
  /// out[b, t] += wpe[seq_offset + t].
  virtual void position_embedding_forward(FSpan out,   // [B, T_local, C]
                                          CFSpan wpe,  // [maxT, C]
                                          int64_t batch, int64_t seq_local, int64_t channels,
                                          int64_t seq_offset) = 0;
  /// dwpe[seq_offset + t] += sum over b of dout[b, t].
  virtual void position_embedding_backward(FSpan dwpe,   // [maxT, C]
                                           CFSpan dout,  // [B, T_local, C]
                                           int64_t batch, int64_t seq_local, int64_t channels,
                                           int64_t seq_offset) = 0;

  // ---- LayerNorm (Ba et al. 2016; exec/cpu/layernorm.hpp) ---------------------------------------
  virtual void layernorm_forward(FSpan out,      // [B, T, C]
                                 FSpan mean,     // [B, T]
                                 FSpan rstd,     // [B, T]
                                 CFSpan inp,     // [B, T, C]
                                 CFSpan weight,  // [C]
                                 CFSpan bias,    // [C]
                                 int64_t batch, int64_t seq, int64_t channels) = 0;
  /// dinp, dweight, dbias +=.
  virtual void layernorm_backward(FSpan dinp,     // [B, T, C]
                                  FSpan dweight,  // [C]
                                  FSpan dbias,    // [C]
                                  CFSpan dout,    // [B, T, C]
                                  CFSpan inp,     // [B, T, C]
                                  CFSpan weight,  // [C]
                                  CFSpan mean,    // [B, T]
                                  CFSpan rstd,    // [B, T]
                                  int64_t batch, int64_t seq, int64_t channels) = 0;

  // ---- RMSNorm (Zhang & Sennrich 2019; exec/cpu/rmsnorm.hpp), Llama's norm -----------------------
  virtual void rmsnorm_forward(FSpan out,      // [B, T, C]
                               FSpan rrms,     // [B, T] saved 1 / rms
                               CFSpan inp,     // [B, T, C]
                               CFSpan weight,  // [C]
                               int64_t batch, int64_t seq, int64_t channels) = 0;
  /// dinp, dweight +=.
  virtual void rmsnorm_backward(FSpan dinp,     // [B, T, C]
                                FSpan dweight,  // [C]
                                CFSpan dout,    // [B, T, C]
                                CFSpan inp,     // [B, T, C]
                                CFSpan weight,  // [C]
                                CFSpan rrms,    // [B, T]
                                int64_t batch, int64_t seq, int64_t channels) = 0;

  // ---- linear layers (exec/cpu/matmul.hpp, exec/cuda/gemm.hpp) ----------------------------------
  /// out = inp W^T + bias (bias may be empty). KernelKey "gemm_fwd".
  virtual void matmul_forward(FSpan out,      // [B, T, OC]
                              CFSpan inp,     // [B, T, C]
                              CFSpan weight,  // [OC, C]
                              CFSpan bias,    // [OC] or empty
                              int64_t batch, int64_t seq, int64_t channels,
                              int64_t out_channels) = 0;
  /// dinp += dout W. KernelKey "gemm_dgrad".
  virtual void matmul_backward_data(FSpan dinp,     // [B, T, C]
                                    CFSpan dout,    // [B, T, OC]
                                    CFSpan weight,  // [OC, C]
                                    int64_t batch, int64_t seq, int64_t channels,
                                    int64_t out_channels) = 0;
  /// dweight += dout^T inp, dbias += column sums of dout (dbias may be empty). "gemm_wgrad".
  virtual void matmul_backward_weight(FSpan dweight,  // [OC, C]
                                      FSpan dbias,    // [OC] or empty
                                      CFSpan dout,    // [B, T, OC]
                                      CFSpan inp,     // [B, T, C]
                                      int64_t batch, int64_t seq, int64_t channels,
                                      int64_t out_channels) = 0;

  // ---- bf16 linear layers (exec/cpu/bf16.hpp; exec/cuda/gemm.hpp with DType::kBFloat16) ----------
  // The GEMMs of Megatron-LM's --bf16 training: bf16 operands, fp32 accumulation, one rounding
  // of the result; KernelKeys gemm_fwd / gemm_dgrad / gemm_wgrad of dtype bf16. The linear layers
  // of training.precision bf16 (exec/linear.hpp) run through them.
  /// True when this backend computes bf16 products in bf16 arithmetic (tensor cores), false when
  /// it emulates them (the cpu backend: fp32 GEMMs of the rounded operands). `profile` times
  /// bf16 kernels only where this is true: an emulation's time is not a bf16 cost.
  virtual bool has_bf16_arithmetic() const { return false; }
  /// dst = src rounded to bf16, ties to even (equal sizes, else InvalidArgument).
  virtual void convert_to_bf16(BSpan dst, CFSpan src) = 0;
  /// dst = src widened to fp32, exactly (equal sizes, else InvalidArgument).
  virtual void convert_from_bf16(FSpan dst, CBSpan src) = 0;
  /// dst += src widened to fp32 (the bf16 dgrad added to the fp32 gradient it accumulates into,
  /// in one pass; equal sizes, else InvalidArgument).
  virtual void accumulate_from_bf16(FSpan dst, CBSpan src) = 0;
  /// out = bf16(inp W^T + bias) (bias may be empty). KernelKey "gemm_fwd", dtype bf16.
  virtual void matmul_forward_bf16(BSpan out,      // [B, T, OC]
                                   CBSpan inp,     // [B, T, C]
                                   CBSpan weight,  // [OC, C]
                                   CBSpan bias,    // [OC] or empty
                                   int64_t batch, int64_t seq, int64_t channels,
                                   int64_t out_channels) = 0;
  /// dinp = bf16(dout W), overwritten. "gemm_dgrad", bf16.
  virtual void matmul_backward_data_bf16(BSpan dinp,     // [B, T, C]
                                         CBSpan dout,    // [B, T, OC]
                                         CBSpan weight,  // [OC, C]
                                         int64_t batch, int64_t seq, int64_t channels,
                                         int64_t out_channels) = 0;
  /// dweight += dout^T inp and dbias += column sums of dout in fp32 (Megatron's
  /// gradient_accumulation_fusion into main_grad; dbias may be empty). "gemm_wgrad", bf16.
  virtual void matmul_backward_weight_bf16(FSpan dweight,  // [OC, C] fp32
                                           FSpan dbias,    // [OC] fp32 or empty
                                           CBSpan dout,    // [B, T, OC]
                                           CBSpan inp,     // [B, T, C]
                                           int64_t batch, int64_t seq, int64_t channels,
                                           int64_t out_channels) = 0;

  // ---- FP8 GEMMs (exec/cpu/fp8.hpp; cuBLASLt's FP8 TN GEMM) ---------------------------------------
  // Transformer Engine's per-tensor-scaled FP8 linear layers (Megatron --fp8-format with the
  // delayed or tensorwise recipe): KernelKeys gemm_fwd / gemm_dgrad / gemm_wgrad of dtype fp8.
  // Not run by `train` (no FP8 training yet); `profile` times them.
  /// True when this backend has FP8 tensor cores (CUDA compute capability 8.9 or later); the cpu
  /// backend emulates FP8 (fp32 GEMMs of the decoded values).
  virtual bool has_fp8_arithmetic() const { return false; }
  /// dst = FP8 `kind` of scale * src (saturating, ties to even; TE's cast). Equal sizes, else
  /// InvalidArgument.
  virtual void quantize_fp8(F8Span dst, CFSpan src, cpu::Fp8Kind kind, float scale) = 0;
  /// out[M, N] = bf16(alpha a[M, K] b[N, K]^T), fp32 accumulation (cpu::fp8_gemm_nt; not both
  /// operands E5M2). `fast_accumulation`: TE's forward (use_split_accumulator false; Hopper
  /// accumulates in the tensor cores' reduced precision), else its dgrad and wgrad. The CUDA
  /// backend needs M, N and K multiples of 16 (InvalidArgument otherwise).
  virtual void fp8_gemm_nt(BSpan out, CF8Span a, cpu::Fp8Kind a_kind, CF8Span b,
                           cpu::Fp8Kind b_kind, float alpha, int64_t m, int64_t n, int64_t k,
                           bool fast_accumulation) = 0;
  /// out[M, N] += alpha a b^T in fp32 (TE's wgrad into main_grad). As fp8_gemm_nt.
  virtual void fp8_gemm_nt_accumulate(FSpan out, CF8Span a, cpu::Fp8Kind a_kind, CF8Span b,
                                      cpu::Fp8Kind b_kind, float alpha, int64_t m, int64_t n,
                                      int64_t k, bool fast_accumulation) = 0;

  // ---- attention (causal softmax(q k^T / sqrt(hs)) v; exec/cpu/attention.hpp) ------------------
  /// `dropout` (may be null): attention-probability dropout with its global mask.
  virtual void attention_forward(FSpan out,     // [B, T, C]
                                 FSpan preatt,  // [B, NH, T, T]
                                 FSpan att,     // [B, NH, T, T] saved for the backward
                                 CFSpan inp,    // [B, T, 3C] q, k, v
                                 int64_t batch, int64_t seq, int64_t channels, int64_t heads,
                                 const cpu::AttentionProbabilityDropout* dropout) = 0;
  /// dinp +=.
  virtual void attention_backward(FSpan dinp,   // [B, T, 3C]
                                  CFSpan dout,  // [B, T, C]
                                  CFSpan inp,   // [B, T, 3C]
                                  CFSpan att,   // [B, NH, T, T]
                                  int64_t batch, int64_t seq, int64_t channels, int64_t heads,
                                  const cpu::AttentionProbabilityDropout* dropout) = 0;

  /// Causal grouped-query attention (Ainslie et al. 2023; exec/cpu/gqa_attention.hpp) on
  /// [q (NH D) | k (G D) | v (G D)] rows; K/V head g serves query heads [g NH/G, (g+1) NH/G).
  /// `dropout` (may be null): attention-probability dropout with attention_forward's mask.
  virtual void gqa_attention_forward(FSpan out,   // [B, T, NH D]
                                     FSpan att,   // [B, NH, T, T] saved for the backward
                                     CFSpan inp,  // [B, T, (NH + 2G) D]
                                     int64_t batch, int64_t seq, int64_t heads,
                                     int64_t query_groups, int64_t head_dim,
                                     const cpu::AttentionProbabilityDropout* dropout) = 0;
  /// dinp +=.
  virtual void gqa_attention_backward(FSpan dinp,   // [B, T, (NH + 2G) D]
                                      CFSpan dout,  // [B, T, NH D]
                                      CFSpan inp,   // [B, T, (NH + 2G) D]
                                      CFSpan att,   // [B, NH, T, T]
                                      int64_t batch, int64_t seq, int64_t heads,
                                      int64_t query_groups, int64_t head_dim,
                                      const cpu::AttentionProbabilityDropout* dropout) = 0;

  /// Blockwise causal attention with log-sum-exp (exec/cpu/block_attention.hpp): FlashAttention's
  /// tile without a T x T store, and one block of ring attention under context parallelism. The
  /// queries are the local positions of `q_positions` (shape.seq_q = q_positions.local()), the
  /// keys those of `k_positions` (the CP rank the K/V block came from); the causal mask and the
  /// dropout mask use their global positions. Overwrites out and lse.
  virtual void block_attention_forward(FSpan out,  // [B, Tq, NH D]
                                       FSpan lse,  // [B, NH, Tq]
                                       CFSpan q,   // [B, Tq, NH D]
                                       CFSpan kv,  // [B, Tk, 2 G D]: [k | v] rows
                                       const CpSequence& q_positions,
                                       const CpSequence& k_positions,
                                       const cpu::BlockAttentionShape& shape,
                                       const cpu::AttentionProbabilityDropout* dropout) = 0;
  /// Ring attention's merge of a block's (block_out, block_lse) into the running (out, lse).
  virtual void attention_merge(FSpan out,         // [B, T, NH D]
                               FSpan lse,         // [B, NH, T]
                               CFSpan block_out,  // [B, T, NH D]
                               CFSpan block_lse,  // [B, NH, T]
                               int64_t batch, int64_t seq, int64_t heads, int64_t head_dim) = 0;
  /// dst += src (ring attention: the dK/dV received for the local K/V block added to its own).
  virtual void add_in_place(FSpan dst, CFSpan src) = 0;  // [N]
  /// dq +=, dkv += one block's gradients, from the final (merged) out and lse.
  virtual void block_attention_backward(FSpan dq,     // [B, Tq, NH D]
                                        FSpan dkv,    // [B, Tk, 2 G D]
                                        CFSpan dout,  // [B, Tq, NH D]
                                        CFSpan q,     // [B, Tq, NH D]
                                        CFSpan kv,    // [B, Tk, 2 G D]
                                        CFSpan out,   // [B, Tq, NH D]
                                        CFSpan lse,   // [B, NH, Tq]
                                        const CpSequence& q_positions,
                                        const CpSequence& k_positions,
                                        const cpu::BlockAttentionShape& shape,
                                        const cpu::AttentionProbabilityDropout* dropout) = 0;

  // ---- fused attention (training.attention_backend fused) ---------------------------------------
  /// Causal self-attention of one layer without context parallelism straight from its QKV rows
  /// (Megatron --attention-backend fused: Transformer Engine's FusedAttention, one cuDNN graph
  /// per pass). The function is block_attention_forward's for the queries and the K/V block at
  /// positions 0..T-1 (shape.seq_q = shape.seq_k = T); this default packs them out of the rows
  /// (exec/qkv_rows.hpp) and calls it, the reference every backend's fused kernel is tested
  /// against. Overwrites out and lse. Throws what block_attention_forward throws; a backend
  /// whose fused kernel cannot run `shape` throws UnsupportedError naming what it needs.
  virtual void fused_attention_forward(FSpan out,   // [B, T, NH D]
                                       FSpan lse,   // [B, NH, T]
                                       CFSpan qkv,  // [B, T, (NH + 2G) D]: [q | k | v] rows
                                       const cpu::BlockAttentionShape& shape,
                                       const cpu::AttentionProbabilityDropout* dropout);
  /// d_qkv [B, T, (NH + 2G) D] overwritten with the gradient of the QKV rows, from the forward's
  /// out and lse and their gradient dout; the default packs, calls block_attention_backward and
  /// scatters the gradients back into the rows.
  virtual void fused_attention_backward(FSpan d_qkv,  // [B, T, (NH + 2G) D]
                                        CFSpan dout,  // [B, T, NH D]
                                        CFSpan qkv,   // [B, T, (NH + 2G) D]
                                        CFSpan out,   // [B, T, NH D]
                                        CFSpan lse,   // [B, NH, T]
                                        const cpu::BlockAttentionShape& shape,
                                        const cpu::AttentionProbabilityDropout* dropout);

  // ---- rotary position embedding (Su et al. 2021; exec/cpu/rope.hpp) -----------------------------
  /// out = rotation of inp's heads; local position t is at `positions.global(t)` of the whole
  /// sequence (seq = positions.local(); CP chunks, exec/cp_sequence.hpp). Megatron-Core's
  /// rotate_half form, base `rotary_base` (--rotary-base).
  virtual void rope_forward(FSpan out,   // [B, T, H, D]
                            CFSpan inp,  // [B, T, H, D]
                            int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                            const CpSequence& positions, double rotary_base) = 0;
  /// dinp += the inverse rotation of dout.
  virtual void rope_backward(FSpan dinp,   // [B, T, H, D]
                             CFSpan dout,  // [B, T, H, D]
                             int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                             const CpSequence& positions, double rotary_base) = 0;

  // ---- elementwise ------------------------------------------------------------------------------
  /// GELU, tanh approximation (Hendrycks & Gimpel 2016), as GPT-2 and Megatron.
  virtual void gelu_forward(FSpan out, CFSpan inp) = 0;                     // [N]
  /// dinp += gelu'(inp) dout.
  virtual void gelu_backward(FSpan dinp, CFSpan inp, CFSpan dout) = 0;     // [N]
  /// SwiGLU (Shazeer 2020): out = silu(gate) * up on rows [gate (F) | up (F)].
  virtual void swiglu_forward(FSpan out, CFSpan inp, int64_t rows, int64_t width) = 0;  // [R, F], [R, 2F]
  /// dinp +=.
  virtual void swiglu_backward(FSpan dinp, CFSpan dout, CFSpan inp, int64_t rows,
                               int64_t width) = 0;  // [R, 2F], [R, F], [R, 2F]
  /// Squared ReLU (So et al. 2021, Primer): out = max(inp, 0)^2.
  virtual void squared_relu_forward(FSpan out, CFSpan inp) = 0;                  // [N]
  /// dinp += 2 max(inp, 0) dout.
  virtual void squared_relu_backward(FSpan dinp, CFSpan inp, CFSpan dout) = 0;  // [N]
  /// Megatron's bias_dropout_add: out = residual + dropout(inp + bias) with the counter mask of
  /// `block` (exec/cpu/dropout.hpp); bias and residual may be empty (absent). out must not alias.
  virtual void bias_dropout_add_forward(FSpan out,       // [B, T_local, C]
                                        CFSpan inp,      // [B, T_local, C]
                                        CFSpan bias,     // [C] or empty
                                        CFSpan residual, // [B, T_local, C] or empty
                                        const cpu::DropoutParams& params,
                                        const cpu::HiddenBlock& block) = 0;
  /// Its backward, accumulating: dinp += keep dout / (1 - p); dresidual += dout; dbias += sums
  /// over rows of keep dout / (1 - p) (dbias and dresidual may be empty).
  virtual void bias_dropout_add_backward(FSpan dinp,       // [B, T_local, C]
                                         FSpan dbias,      // [C] or empty
                                         FSpan dresidual,  // [B, T_local, C] or empty
                                         CFSpan dout,      // [B, T_local, C]
                                         const cpu::DropoutParams& params,
                                         const cpu::HiddenBlock& block) = 0;

  // ---- mixture of experts (exec/cpu/moe_router.hpp, moe_permute.hpp, grouped_matmul.hpp) --------
  // Routing maps (0/1 bytes), token counts and MoePermutation are HOST memory: the dispatcher
  // needs them on the host to size its all-to-all (a device backend would copy them back, as
  // Megatron's .tolist() of the splits does).
  /// Top-k on the logits then softmax over the k (Megatron-Core's default router), capacity
  /// (<= 0: dropless) with drop policy "probs" and optional padding; probs = gates x routing_map.
  virtual void moe_topk_softmax_forward(FSpan gates,                           // [N, E]
                                        std::span<uint8_t> topk_map,           // [N, E] host
                                        std::span<uint8_t> routing_map,        // [N, E] host
                                        FSpan probs,                           // [N, E]
                                        std::span<int64_t> tokens_per_expert,  // [E] host
                                        CFSpan logits,                         // [N, E]
                                        int64_t tokens, int64_t experts, int64_t topk,
                                        int64_t capacity, bool pad_to_capacity) = 0;
  /// dlogits += the softmax-over-top-k backward of dprobs.
  virtual void moe_topk_softmax_backward(FSpan dlogits, CFSpan dprobs, CFSpan gates,
                                         std::span<const uint8_t> topk_map,
                                         std::span<const uint8_t> routing_map, int64_t tokens,
                                         int64_t experts) = 0;
  /// The Switch load-balancing loss (Fedus et al. 2021 eq. 4, Megatron's
  /// switch_load_balancing_loss_func) of this rank's tokens; scores = softmax(logits) saved.
  virtual double moe_switch_aux_loss_forward(FSpan scores, CFSpan logits,
                                             std::span<const int64_t> tokens_per_expert,
                                             int64_t tokens, int64_t experts,
                                             int64_t total_tokens, int64_t topk,
                                             double coeff) = 0;
  /// dlogits += daux x d aux / d logits.
  virtual void moe_switch_aux_loss_backward(FSpan dlogits, double daux, CFSpan scores,
                                            std::span<const int64_t> tokens_per_expert,
                                            int64_t tokens, int64_t experts, int64_t total_tokens,
                                            int64_t topk, double coeff) = 0;
  /// out[m] = inp[perm.token[m]] (expert-major gather); backward: dinp += scatter-add.
  virtual void moe_permute_forward(FSpan out, CFSpan inp, const cpu::MoePermutation& perm,
                                   int64_t tokens, int64_t channels) = 0;
  virtual void moe_permute_backward(FSpan dinp, CFSpan dout, const cpu::MoePermutation& perm,
                                    int64_t tokens, int64_t channels) = 0;
  /// out[n] = sum of probs[n, e] inp[m] over the rows m of token n (overwrites out); backward
  /// accumulates dinp and dprobs.
  virtual void moe_unpermute_forward(FSpan out, CFSpan inp, CFSpan probs,
                                     const cpu::MoePermutation& perm, int64_t tokens,
                                     int64_t experts, int64_t channels) = 0;
  virtual void moe_unpermute_backward(FSpan dinp, FSpan dprobs, CFSpan dout, CFSpan inp,
                                      CFSpan probs, const cpu::MoePermutation& perm,
                                      int64_t tokens, int64_t experts, int64_t channels) = 0;
  /// Output chunk j = input chunk order[j] (chunks of chunk_rows rows of `channels`).
  virtual void moe_sort_chunks(FSpan out, CFSpan inp, std::span<const int64_t> chunk_rows,
                               std::span<const int64_t> order, int64_t channels) = 0;
  /// The local experts' grouped GEMM: rows_per_group[g] rows times W_g^T ([G, OC, C]); dgrad
  /// and wgrad accumulate (+=). KernelKeys grouped_gemm_fwd / _dgrad / _wgrad.
  virtual void grouped_matmul_forward(FSpan out, CFSpan inp, CFSpan weight,
                                      std::span<const int64_t> rows_per_group, int64_t channels,
                                      int64_t out_channels) = 0;
  virtual void grouped_matmul_backward_data(FSpan dinp, CFSpan dout, CFSpan weight,
                                            std::span<const int64_t> rows_per_group,
                                            int64_t channels, int64_t out_channels) = 0;
  virtual void grouped_matmul_backward_weight(FSpan dweight, CFSpan dout, CFSpan inp,
                                              std::span<const int64_t> rows_per_group,
                                              int64_t channels, int64_t out_channels) = 0;

  // ---- vocab-parallel cross-entropy (Megatron; exec/cpu/vocab_parallel_cross_entropy.hpp) ------
  virtual void vocab_parallel_logits_max(FSpan logits_max_local,  // [B, T]
                                         CFSpan logits_local,     // [B, T, V_local]
                                         int64_t batch, int64_t seq, int64_t vocab_local) = 0;
  virtual void vocab_parallel_sum_exp(FSpan sum_exp_local,       // [B, T]
                                      FSpan target_logit_local,  // [B, T]
                                      CFSpan logits_local,       // [B, T, V_local]
                                      CFSpan logits_max,         // [B, T] global
                                      CISpan targets,            // [B, T]
                                      int64_t batch, int64_t seq, int64_t vocab_start,
                                      int64_t vocab_local, int64_t vocab_total) = 0;
  virtual void vocab_parallel_cross_entropy_loss(FSpan losses,         // [B, T]
                                                 CFSpan sum_exp,       // [B, T] global
                                                 CFSpan logits_max,    // [B, T] global
                                                 CFSpan target_logit,  // [B, T] global
                                                 int64_t batch, int64_t seq) = 0;
  virtual void vocab_parallel_cross_entropy_backward(FSpan dlogits_local,  // [B, T, V_local]
                                                     CFSpan dlosses,       // [B, T]
                                                     CFSpan logits_local,  // [B, T, V_local]
                                                     CFSpan logits_max,    // [B, T] global
                                                     CFSpan sum_exp,       // [B, T] global
                                                     CISpan targets,       // [B, T]
                                                     int64_t batch, int64_t seq,
                                                     int64_t vocab_start, int64_t vocab_local,
                                                     int64_t vocab_total) = 0;

  // ---- optimizer (exec/cpu/adamw.hpp) -----------------------------------------------------------
  /// Sum of squares in double (for the global gradient norm); waits for the result.
  virtual double sum_of_squares(CFSpan values) = 0;
  /// Sum of squares of every piece, in double (a rank's part of the global gradient norm over
  /// its gradient tensors); one wait for the result, not one per piece. This default sums piece
  /// by piece with sum_of_squares.
  virtual double total_sum_of_squares(std::span<const CFSpan> pieces) {
    double sum = 0;
    for (const CFSpan& p : pieces) sum += sum_of_squares(p);
    return sum;
  }
  virtual void scale_in_place(FSpan values, double factor) = 0;
  /// One AdamW step (Loshchilov & Hutter 2019) at 1-based `step` with bias correction.
  virtual void adamw_step(FSpan params, CFSpan grads, FSpan exp_avg, FSpan exp_avg_sq,
                          const cpu::AdamWParams& hyper, double lr, int64_t step) = 0;

 private:
  std::vector<std::chrono::steady_clock::time_point> host_marks_;  ///< mark()'s default
};

template <typename T>
DeviceBuffer<T>::DeviceBuffer(Backend& backend, int64_t n)
    : backend_(&backend), size_(static_cast<size_t>(n)) {
  data_ = static_cast<T*>(backend.allocate_zeroed(size_ * sizeof(T)));
}

template <typename T>
DeviceBuffer<T>::DeviceBuffer(Backend& backend, int64_t n, Uninitialized)
    : backend_(&backend), size_(static_cast<size_t>(n)) {
  data_ = static_cast<T*>(backend.allocate_uninitialized(size_ * sizeof(T)));
}

template <typename T>
void DeviceBuffer<T>::reset() noexcept {
  if (backend_ != nullptr && data_ != nullptr) backend_->deallocate(data_, size_ * sizeof(T));
  data_ = nullptr;
  size_ = 0;
}

inline void Backend::fused_attention_forward(FSpan out, FSpan lse, CFSpan qkv,
                                             const cpu::BlockAttentionShape& shape,
                                             const cpu::AttentionProbabilityDropout* dropout) {
  const int64_t rows = shape.batch * shape.seq_q, qw = shape.heads * shape.head_dim,
                kvw = 2 * shape.groups * shape.head_dim;
  Tensor q(*this, rows * qw, kUninitialized), kv(*this, rows * kvw, kUninitialized);
  const int64_t pitch = qw + kvw;
  copy_2d(q, qw, qkv, pitch, qw, rows);
  copy_2d(kv, kvw, qkv.subspan(static_cast<size_t>(qw)), pitch, kvw, rows);
  const CpSequence positions(shape.seq_q, 1, 0);
  block_attention_forward(out, lse, q, kv, positions, positions, shape, dropout);
}

inline void Backend::fused_attention_backward(FSpan d_qkv, CFSpan dout, CFSpan qkv, CFSpan out,
                                              CFSpan lse, const cpu::BlockAttentionShape& shape,
                                              const cpu::AttentionProbabilityDropout* dropout) {
  const int64_t rows = shape.batch * shape.seq_q, qw = shape.heads * shape.head_dim,
                kvw = 2 * shape.groups * shape.head_dim;
  Tensor q(*this, rows * qw, kUninitialized), kv(*this, rows * kvw, kUninitialized);
  Tensor dq(*this, rows * qw), dkv(*this, rows * kvw);
  const int64_t pitch = qw + kvw;
  copy_2d(q, qw, qkv, pitch, qw, rows);
  copy_2d(kv, kvw, qkv.subspan(static_cast<size_t>(qw)), pitch, kvw, rows);
  const CpSequence positions(shape.seq_q, 1, 0);
  block_attention_backward(dq, dkv, dout, q, kv, out, lse, positions, positions, shape, dropout);
  copy_2d(d_qkv, pitch, dq, qw, qw, rows);
  copy_2d(d_qkv.subspan(static_cast<size_t>(qw)), pitch, dkv, kvw, kvw, rows);
}

}  // namespace traintwin::exec
