// Causal self-attention through cuDNN's fused flash attention (the engine Transformer Engine runs
// for Megatron-LM's --attention-backend fused), on the bf16 QKV rows of a layer, forward and
// backward. cuDNN has no single attention operation on Hopper in the releases we target
// (9.14-9.19; its unified SDPA operation needs 9.21 for a causal mask), so the graphs are the
// scaled-dot-product patterns cuDNN's runtime-fusion engines recognize, as cudnn-frontend
// composes them (NVIDIA/cudnn-frontend, include/cudnn_frontend/node/
// scaled_dot_product_flash_attention.h, CompositeSDPANode / CompositeSDPABackwardNode; read, not
// copied), built with the backend API:
//   forward   S = scale Q K^T; S[i][j] = -inf for j > i (GEN_INDEX rows and columns, CMP_GE,
//             BINARY_SELECT); m = max_j S; E = exp(S - m); l = sum_j E; lse = m + log l (the
//             Stats output, fp32); P = E / l (bf16); O = P V.
//   backward  D = rowsum(dO * O); S and the mask again; P = exp(S - lse); dV = P^T dO;
//             dP = dO V^T; dS = P (dP - D) scale; dK = dS^T Q; dQ = dS K (fp32 accumulator,
//             then rounded to bf16).
// Layouts (element strides; one bf16 buffer of QKV rows, Megatron's "bs3hd" for MHA):
//   qkv  [B, T, 3 NH D]: each row [q (NH D) | k (NH D) | v (NH D)], pitch P = 3 NH D
//   out  [B, T, NH D] bf16;  lse [B, NH, T] fp32 (log-sum-exp of the scaled scores, natural log:
//   exec/cpu/block_attention.hpp's lse);  dqkv like qkv.
// Plans are built once per shape (heuristics mode A, then the first engine configuration that
// finalizes) and cached. A plan can be built without a GPU from a device's serialized
// properties (cuDNN's deviceless ahead-of-time compilation, CUDNN_ATTR_DEVICEPROP_JSON_
// REPRESENTATION, cuDNN >= 9.11): the CPU tests build the H200's plans that way.
// Next in the flow: CudaBackend::fused_attention_forward / _backward (exec/cuda/
// cuda_backend_modern.cu) call this for attention_backend fused.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "core/error.hpp"

namespace traintwin::exec::cuda {

/// cuDNN reported a failure. The message names the call, cuDNN's status string and, for a graph
/// no engine runs, the shape.
class CudnnError : public Error {
 public:
  using Error::Error;
};

/// One causal multi-head self-attention call: batch B, sequence T, heads NH, head dimension D,
/// and the score scale (1 / sqrt(D) in Megatron-LM without softmax scaling tricks).
struct CudnnAttentionShape {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  float scale = 0.0f;

  auto key() const { return std::tie(batch, seq, heads, head_dim, scale); }
  bool operator<(const CudnnAttentionShape& o) const { return key() < o.key(); }
};

/// What a built plan pair says about itself (for logs and tests).
struct CudnnAttentionPlanInfo {
  int64_t forward_engine = -1;            ///< CUDNN_ATTR_ENGINE_GLOBAL_INDEX of the forward plan
  int64_t backward_engine = -1;
  int64_t forward_workspace_bytes = 0;    ///< cuDNN's own workspace of each plan
  int64_t backward_workspace_bytes = 0;
  /// The backward's own scratch: D (B NH T fp32) and the dQ accumulator (B NH T D fp32).
  int64_t backward_scratch_bytes = 0;
};

/// cuDNN's fused causal attention on one device. Not thread-safe (one per CudaBackend).
class CudnnAttention {
 public:
  /// On the current CUDA device; kernels are issued on `stream`. Throws CudnnError when cuDNN
  /// cannot create its handle (no device, or a cuDNN older than 9.11).
  explicit CudnnAttention(cudaStream_t stream);
  /// Deviceless: plans are built for the device `device_json` describes (the JSON cuDNN writes
  /// for CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION); no GPU is needed, and forward/backward
  /// throw CudnnError. Throws CudnnError for JSON cuDNN does not accept.
  static std::unique_ptr<CudnnAttention> deviceless(const std::string& device_json);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  /// cuDNN's version at run time (cudnnGetVersion, e.g. 91900).
  static int64_t version();

  /// Builds (once) and returns the forward and backward plans of `shape`. Throws CudnnError
  /// naming the shape when no engine configuration finalizes (e.g. D not a multiple of 8 or
  /// above 128 on Hopper), InvalidArgument for sizes < 1.
  CudnnAttentionPlanInfo prepare(const CudnnAttentionShape& shape);

  /// out [B, T, NH D] bf16 and lse [B, NH, T] fp32 from qkv [B, T, 3 NH D] bf16 (device
  /// pointers, 16-byte aligned). Asynchronous on the stream.
  void forward(const CudnnAttentionShape& shape, const void* qkv, void* out, float* lse);
  /// dqkv [B, T, 3 NH D] bf16 (overwritten) from the forward's qkv, out and lse and the output
  /// gradient dout [B, T, NH D] bf16. Asynchronous on the stream.
  void backward(const CudnnAttentionShape& shape, const void* qkv, const void* out,
                const void* dout, const float* lse, void* dqkv);

  struct Plans;

 private:
  CudnnAttention(void* handle, void* device_properties, cudaStream_t stream);
  /// The built plans of `s`; CudnnError on a deviceless instance.
  Plans& runnable(const CudnnAttentionShape& s);
  /// The device scratch of at least `bytes` (grown, never shrunk; stream-ordered reuse).
  void* scratch(int64_t bytes);

  void* handle_ = nullptr;             // cudnnHandle_t (null when deviceless)
  void* device_properties_ = nullptr;  // cudnnBackendDescriptor_t of CUDNN_BACKEND_DEVICEPROP
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  int64_t scratch_bytes_ = 0;
  std::map<CudnnAttentionShape, std::unique_ptr<Plans>> plans_;
};

}  // namespace traintwin::exec::cuda
