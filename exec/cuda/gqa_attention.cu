// Causal grouped-query attention through cuBLAS and the fused softmax; see gqa_attention.hpp.
#include "exec/cuda/gqa_attention.hpp"

#include <cmath>

#include "exec/cuda/common.cuh"
#include "exec/cuda/dropout.hpp"
#include "exec/cuda/softmax.hpp"

namespace traintwin::exec::cuda {
namespace {

using namespace detail;

constexpr const char* kLayer = "gqa_attention";

/// The sizes of one call.
struct Shape {
  int64_t batch, seq, heads, groups, d;
  /// Fused QKV row, (NH + 2G) D.
  __host__ __device__ int64_t row() const { return (heads + 2 * groups) * d; }
  /// Query heads per K/V head, NH / G.
  __host__ __device__ int64_t per_group() const { return heads / groups; }
  /// Elements of q [B, NH, T, D], of k or v [B, G, T, D], of att [B, NH, T, T].
  __host__ __device__ int64_t q_elems() const { return batch * heads * seq * d; }
  __host__ __device__ int64_t kv_elems() const { return batch * groups * seq * d; }
  __host__ __device__ int64_t att_elems() const { return batch * heads * seq * seq; }
};

// Element i of q [B, NH, T, D] (i < B NH T D) or of k [B, G, T, D] (i - B NH T D otherwise): its
// offset in the fused [B, T, (NH + 2G) D] row layout (the v element of a k element is G D
// further on).
__device__ __forceinline__ int64_t fused_offset(int64_t i, const Shape& s, bool* is_q) {
  const int64_t nq = s.q_elems();
  *is_q = i < nq;
  const int64_t j = *is_q ? i : i - nq;
  const int64_t heads = *is_q ? s.heads : s.groups;
  const int64_t d = j % s.d;
  const int64_t t = (j / s.d) % s.seq;
  const int64_t h = (j / (s.d * s.seq)) % heads;
  const int64_t b = j / (s.d * s.seq * heads);
  return (b * s.seq + t) * s.row() + (*is_q ? h : s.heads + h) * s.d + d;
}

// inp[B, T, (NH + 2G) D] -> q [B, NH, T, D], k and v [B, G, T, D]: one thread per element of q
// plus one per element of k (which also moves v).
__global__ void gqa_gather_kernel(float* q, float* k, float* v, const float* inp, Shape s) {
  const int64_t nq = s.q_elems();
  const int64_t n = nq + s.kv_elems();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    bool is_q = false;
    const int64_t at = fused_offset(i, s, &is_q);
    if (is_q) {
      q[i] = inp[at];
    } else {
      k[i - nq] = inp[at];
      v[i - nq] = inp[at + s.groups * s.d];
    }
  }
}

// The reverse, accumulating: dinp += dq, dk, dv.
__global__ void gqa_scatter_add_kernel(float* dinp, const float* dq, const float* dk,
                                       const float* dv, Shape s) {
  const int64_t nq = s.q_elems();
  const int64_t n = nq + s.kv_elems();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    bool is_q = false;
    const int64_t at = fused_offset(i, s, &is_q);
    if (is_q) {
      dinp[at] += dq[i];
    } else {
      dinp[at] += dk[i - nq];
      dinp[at + s.groups * s.d] += dv[i - nq];
    }
  }
}

// y[B, NH, T, D] <-> out[B, T, NH D]; to_heads: y = permute(out), else out = unpermute(y).
__global__ void gqa_heads_permute_kernel(float* dst, const float* src, Shape s, bool to_heads) {
  const int64_t n = s.q_elems();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t d = i % s.d;
    const int64_t t = (i / s.d) % s.seq;
    const int64_t h = (i / (s.d * s.seq)) % s.heads;
    const int64_t b = i / (s.d * s.seq * s.heads);
    const int64_t j = (b * s.seq + t) * s.heads * s.d + h * s.d + d;
    if (to_heads) {
      dst[i] = src[j];
    } else {
      dst[j] = src[i];
    }
  }
}

Shape check(int64_t batch, int64_t seq, int64_t heads, int64_t groups, int64_t d) {
  require_positive(kLayer, batch, "batch");
  require_positive(kLayer, seq, "seq");
  require_positive(kLayer, heads, "heads");
  require_positive(kLayer, groups, "query_groups");
  require_positive(kLayer, d, "head_dim");
  if (heads % groups != 0) {
    throw InvalidArgument(std::string("cuda ") + kLayer + ": query_groups " +
                          std::to_string(groups) + " must divide heads " + std::to_string(heads));
  }
  require_product_fits(kLayer, batch * seq, (heads + 2 * groups) * d, "batch * seq * row");
  require_product_fits(kLayer, batch * heads * seq, seq, "batch * heads * seq * seq");
  return Shape{batch, seq, heads, groups, d};
}

/// Whether `dropout` drops anything (non-null, p > 0); throws as exec/cpu/attention_dropout_row.hpp
/// for p outside [0, 1) or an active block that is not this call's.
bool dropout_active(const cpu::AttentionProbabilityDropout* dropout, const Shape& s) {
  if (dropout == nullptr) return false;
  const double p = dropout->params.p;
  if (!(p >= 0 && p < 1)) {
    throw InvalidArgument(std::string("cuda ") + kLayer + ": dropout p must be in [0, 1), got " +
                          std::to_string(p));
  }
  if (p == 0) return false;
  const cpu::AttentionBlock& k = dropout->block;
  if (k.batch != s.batch || k.seq != s.seq || k.heads != s.heads || k.first_sample < 0 ||
      k.head_offset < 0 || k.head_offset + s.heads > k.heads_total) {
    throw InvalidArgument(std::string("cuda ") + kLayer +
                          ": the dropout block does not match the call (batch " +
                          std::to_string(s.batch) + ", heads " + std::to_string(s.heads) +
                          ", seq " + std::to_string(s.seq) + ")");
  }
  return true;
}

void check_workspace(const void* workspace, size_t bytes, const Shape& s, bool dropout,
                     bool backward) {
  require_pointer(kLayer, workspace, "workspace");
  const size_t needed =
      gqa_attention_workspace_bytes(s.batch, s.seq, s.heads, s.groups, s.d, dropout, backward);
  if (bytes < needed) {
    throw InvalidArgument(std::string("cuda ") + kLayer + ": workspace has " +
                          std::to_string(bytes) + " bytes, needs " + std::to_string(needed) +
                          " (gqa_attention_workspace_bytes)");
  }
}

/// Row-major C_g = alpha op(A_g) op(B_g) over the B G groups (fp32).
void group_gemm(CublasContext& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                float alpha, const float* a, int64_t lda, int64_t stride_a, const float* b,
                int64_t ldb, int64_t stride_b, float* c, int64_t ldc, int64_t stride_c,
                int64_t count, cudaStream_t stream) {
  batched_matmul(ctx, DType::kFloat32, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb,
                 stride_b, 0.0f, c, ldc, stride_c, count, stream);
}

}  // namespace

size_t gqa_attention_workspace_bytes(int64_t batch, int64_t seq, int64_t heads,
                                     int64_t query_groups, int64_t head_dim, bool dropout,
                                     bool backward) {
  const Shape s = check(batch, seq, heads, query_groups, head_dim);
  const int64_t floats =
      backward ? 3 * s.q_elems() + 4 * s.kv_elems() + (dropout ? 2 : 1) * s.att_elems()
               : 2 * s.q_elems() + 2 * s.kv_elems() + (dropout ? 1 : 0) * s.att_elems();
  return static_cast<size_t>(floats) * sizeof(float);
}

void gqa_attention_forward(CublasContext& ctx, float* out, float* att, const float* inp,
                           void* workspace, size_t workspace_bytes, int64_t batch, int64_t seq,
                           int64_t heads, int64_t query_groups, int64_t head_dim,
                           const cpu::AttentionProbabilityDropout* dropout, cudaStream_t stream) {
  const Shape s = check(batch, seq, heads, query_groups, head_dim);
  const bool drop = dropout_active(dropout, s);
  check_workspace(workspace, workspace_bytes, s, drop, false);
  require_pointer(kLayer, out, "out");
  require_pointer(kLayer, att, "att");
  require_pointer(kLayer, inp, "inp");
  const int64_t T = s.seq, D = s.d, P = s.per_group(), groups = s.batch * s.groups;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  float* q = static_cast<float*>(workspace);
  float* k = q + s.q_elems();
  float* v = k + s.kv_elems();
  float* y = v + s.kv_elems();
  float* weighted = y + s.q_elems();  // [B, NH, T, T], with dropout only
  gqa_gather_kernel<<<grid_for(s.q_elems() + s.kv_elems()), kBlock, 0, stream>>>(q, k, v, inp,
                                                                                s);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
  // scores_g [P T, T] = scale q_g [P T, D] k_g^T, written into att (= [B, NH, T, T]).
  group_gemm(ctx, false, true, P * T, T, D, scale, q, D, P * T * D, k, D, T * D, att, T,
             P * T * T, groups, stream);
  causal_softmax_forward(DType::kFloat32, att, att, s.batch * s.heads, T, 1.0f, stream);
  const float* probs = att;
  if (drop) {
    attention_dropout_forward(DType::kFloat32, weighted, att, dropout->params, dropout->block,
                              stream);
    probs = weighted;
  }
  // y_g [P T, D] = probs_g [P T, T] v_g [T, D]
  group_gemm(ctx, false, false, P * T, D, T, 1.0f, probs, T, P * T * T, v, D, T * D, y, D,
             P * T * D, groups, stream);
  gqa_heads_permute_kernel<<<grid_for(s.q_elems()), kBlock, 0, stream>>>(out, y, s, false);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

void gqa_attention_backward(CublasContext& ctx, float* dinp, const float* dout, const float* inp,
                            const float* att, void* workspace, size_t workspace_bytes,
                            int64_t batch, int64_t seq, int64_t heads, int64_t query_groups,
                            int64_t head_dim, const cpu::AttentionProbabilityDropout* dropout,
                            cudaStream_t stream) {
  const Shape s = check(batch, seq, heads, query_groups, head_dim);
  const bool drop = dropout_active(dropout, s);
  check_workspace(workspace, workspace_bytes, s, drop, true);
  require_pointer(kLayer, dinp, "dinp");
  require_pointer(kLayer, dout, "dout");
  require_pointer(kLayer, inp, "inp");
  require_pointer(kLayer, att, "att");
  const int64_t T = s.seq, D = s.d, P = s.per_group(), groups = s.batch * s.groups;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  float* q = static_cast<float*>(workspace);
  float* k = q + s.q_elems();
  float* v = k + s.kv_elems();
  float* dy = v + s.kv_elems();
  float* dq = dy + s.q_elems();
  float* dk = dq + s.q_elems();
  float* dv = dk + s.kv_elems();
  float* datt = dv + s.kv_elems();      // [B, NH, T, T], then dscores in place
  float* weighted = datt + s.att_elems();  // [B, NH, T, T], with dropout only
  gqa_gather_kernel<<<grid_for(s.q_elems() + s.kv_elems()), kBlock, 0, stream>>>(q, k, v, inp,
                                                                                s);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
  gqa_heads_permute_kernel<<<grid_for(s.q_elems()), kBlock, 0, stream>>>(dy, dout, s, true);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
  // datt_g [P T, T] = dy_g [P T, D] v_g^T
  group_gemm(ctx, false, true, P * T, T, D, 1.0f, dy, D, P * T * D, v, D, T * D, datt, T,
             P * T * T, groups, stream);
  const float* probs = att;
  if (drop) {
    attention_dropout_forward(DType::kFloat32, weighted, att, dropout->params, dropout->block,
                              stream);
    attention_dropout_forward(DType::kFloat32, datt, datt, dropout->params, dropout->block,
                              stream);
    probs = weighted;
  }
  // dv_g [T, D] = probs_g^T [T, P T] dy_g [P T, D] (the group's query heads summed)
  group_gemm(ctx, true, false, T, D, P * T, 1.0f, probs, T, P * T * T, dy, D, P * T * D, dv, D,
             T * D, groups, stream);
  // dscores = scale att (datt - rowsum(att datt)), zero above the diagonal
  causal_softmax_backward(DType::kFloat32, datt, datt, att, s.batch * s.heads, T, scale, stream);
  // dq_g [P T, D] = ds_g [P T, T] k_g [T, D];  dk_g [T, D] = ds_g^T [T, P T] q_g [P T, D]
  group_gemm(ctx, false, false, P * T, D, T, 1.0f, datt, T, P * T * T, k, D, T * D, dq, D,
             P * T * D, groups, stream);
  group_gemm(ctx, true, false, T, D, P * T, 1.0f, datt, T, P * T * T, q, D, P * T * D, dk, D,
             T * D, groups, stream);
  gqa_scatter_add_kernel<<<grid_for(s.q_elems() + s.kv_elems()), kBlock, 0, stream>>>(
      dinp, dq, dk, dv, s);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

}  // namespace traintwin::exec::cuda
