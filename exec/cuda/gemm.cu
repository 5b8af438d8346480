// cuBLASLt / cuBLAS GEMMs; see gemm.hpp.
//
// cuBLAS is column-major; a row-major X[r, c] (leading dimension ld) is the column-major X^T
// [c, r] with the same ld. So the row-major products here are computed as their transposes:
//   forward  out[BT, OC] = inp W^T      <=> out^T[OC, BT] = W[OC, C] . inp^T[C, BT]
//            (A = W stored col-major [C, OC] ld C, op T; B = inp stored [C, BT] ld C, op N)
//   dgrad    dinp[BT, C] = dout W       <=> dinp^T[C, BT] = W^T[C, OC] . dout^T[OC, BT]
//            (A = W stored [C, OC] ld C, op N; B = dout stored [OC, BT] ld OC, op N)
//   wgrad    dW[OC, C] = dout^T inp     <=> dW^T[C, OC] = inp^T[C, BT] . dout[BT, OC]
//            (A = inp stored [C, BT] ld C, op N; B = dout stored [OC, BT] ld OC, op T)
// and the bias epilogue adds bias[OC] to each column of out^T, i.e. to each row of out.
#include "exec/cuda/gemm.hpp"

#include <utility>

#include "exec/cuda/common.cuh"
#include "exec/cuda/cublas_context.cuh"

namespace traintwin::exec::cuda {
namespace {

using namespace detail;

constexpr const char* kLayer = "matmul";

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return CUDA_R_32F;
    case DType::kBFloat16: return CUDA_R_16BF;
    case DType::kFloat16: return CUDA_R_16F;
  }
  throw InvalidArgument("cuda matmul: unknown DType " + std::to_string(static_cast<int>(dtype)) +
                        " (allowed: kFloat32, kBFloat16, kFloat16)");
}

// The cuBLAS compute type of a GEMM with operands of type `ab`: fp32 operands follow the
// context's float32_matmul_precision, 16-bit ones always accumulate in fp32.
cublasComputeType_t compute_type(const CublasContext& ctx, cudaDataType_t ab) {
  if (ab != CUDA_R_32F) return CUBLAS_COMPUTE_32F;
  switch (ctx.float32_matmul_precision()) {
    case Float32MatmulPrecision::kHigh: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case Float32MatmulPrecision::kMedium: return CUBLAS_COMPUTE_32F_FAST_16BF;
    case Float32MatmulPrecision::kHighest: break;
  }
  return CUBLAS_COMPUTE_32F;
}

// Largest power of two dividing the address, at most 256 (cuBLASLt's alignment preference).
uint32_t alignment_bytes(const void* ptr) {
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  uint32_t align = 256;
  while (align > 1 && addr % align != 0) align /= 2;
  return align;
}

// Owns the cuBLASLt descriptors of one call.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr;
  cublasLtMatrixLayout_t b = nullptr;
  cublasLtMatrixLayout_t d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LtDescriptors() = default;
  LtDescriptors(const LtDescriptors&) = delete;
  LtDescriptors& operator=(const LtDescriptors&) = delete;
  ~LtDescriptors() {
    if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

// Column-major D[m, n] (leading dimension ld) += bias[m] in every column.
template <typename T>
__global__ void add_bias_kernel(T* d, const T* bias, int64_t m, int64_t n, int64_t ld) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < m * n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t col = i / m;
    const int64_t row = i - col * m;
    T& x = d[col * ld + row];
    x = from_float<T>(to_float(x) + to_float(bias[row]));
  }
}

void add_bias(cudaDataType_t type, void* d, const void* bias, int64_t m, int64_t n, int64_t ld,
              cudaStream_t stream) {
  const DType dtype = type == CUDA_R_32F    ? DType::kFloat32
                      : type == CUDA_R_16BF ? DType::kBFloat16
                                            : DType::kFloat16;
  dispatch(dtype, kLayer, [&](auto tag) {
    using T = decltype(tag);
    add_bias_kernel<T><<<grid_for(m * n), kBlock, 0, stream>>>(
        static_cast<T*>(d), static_cast<const T*>(bias), m, n, ld);
    TRAINTWIN_CUDA_CHECK_LAUNCH();
  });
}

// Column-major D[m, n] = op(A)[m, k] op(B)[k, n] + beta D (+ bias[m] per column when bias is
// not null), fp32 compute and scale. A and B of type ab, D (and C = D) of type cd.
void lt_matmul(CublasContext& ctx, cudaDataType_t ab, cudaDataType_t cd, bool trans_a,
               bool trans_b, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda,
               const void* b, int64_t ldb, void* d, int64_t ldd, float beta, const void* bias,
               cudaStream_t stream) {
  CublasContext::Handles& h = ctx.handles();
  LtDescriptors desc;
  const cublasComputeType_t compute = compute_type(ctx, ab);
  TRAINTWIN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.op, compute, CUDA_R_32F));
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  TRAINTWIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                        &op_a, sizeof(op_a)));
  TRAINTWIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSB,
                                                        &op_b, sizeof(op_b)));
  if (bias != nullptr) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    TRAINTWIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    TRAINTWIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    const cudaDataType_t bias_type = cd;
    TRAINTWIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        desc.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
  }
  const auto u = [](int64_t x) { return static_cast<uint64_t>(x); };
  TRAINTWIN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.a, ab, trans_a ? u(k) : u(m),
                                                    trans_a ? u(m) : u(k), lda));
  TRAINTWIN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.b, ab, trans_b ? u(n) : u(k),
                                                    trans_b ? u(k) : u(n), ldb));
  TRAINTWIN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.d, cd, u(m), u(n), ldd));
  TRAINTWIN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&desc.pref));
  const size_t workspace = ctx.workspace_bytes();
  TRAINTWIN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      desc.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
  const uint32_t align[4] = {alignment_bytes(a), alignment_bytes(b), alignment_bytes(d),
                             alignment_bytes(d)};
  const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i) {
    TRAINTWIN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(desc.pref, align_attr[i],
                                                                &align[i], sizeof(align[i])));
  }
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  TRAINTWIN_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(h.lt, desc.op, desc.a, desc.b, desc.d,
                                                        desc.d, desc.pref, 1, &heuristic, &found));
  const float alpha = 1.0f;
  if (found == 0) {
    // No cuBLASLt kernel for these sizes/alignments (e.g. odd leading dimensions of 16-bit
    // data): the same product through cublasGemmEx, then the bias as a separate kernel.
    for (const int64_t size : {m, n, k, lda, ldb, ldd}) {
      if (size > INT32_MAX) {
        throw CudaError("cuda matmul: cuBLASLt found no algorithm for m " + std::to_string(m) +
                        ", n " + std::to_string(n) + ", k " + std::to_string(k) +
                        " and the sizes exceed cublasGemmEx's int range");
      }
    }
    const auto i32 = [](int64_t x) { return static_cast<int>(x); };
    TRAINTWIN_CUBLAS_CHECK(cublasSetStream(h.cublas, stream));
    TRAINTWIN_CUBLAS_CHECK(cublasGemmEx(h.cublas, op_a, op_b, i32(m), i32(n), i32(k), &alpha, a,
                                        ab, i32(lda), b, ab, i32(ldb), &beta, d, cd, i32(ldd),
                                        compute, CUBLAS_GEMM_DEFAULT));
    if (bias != nullptr) add_bias(cd, d, bias, m, n, ldd, stream);
    return;
  }
  TRAINTWIN_CUBLAS_CHECK(cublasLtMatmul(h.lt, desc.op, &alpha, a, desc.a, b, desc.b, &beta, d,
                                        desc.d, d, desc.d, &heuristic.algo, h.workspace,
                                        workspace, stream));
}

// dbias[c] += sum over rows of dout[row, c]. Block (32, 8).
template <typename T>
__global__ void column_sum_kernel(float* dbias, const T* dout, int64_t rows, int64_t cols) {
  __shared__ float part[8][33];
  const int64_t c = blockIdx.x * int64_t{32} + threadIdx.x;
  float sum = 0.0f;
  if (c < cols) {
    for (int64_t row = blockIdx.y * int64_t{8} + threadIdx.y; row < rows;
         row += int64_t{gridDim.y} * 8) {
      sum += to_float(dout[row * cols + c]);
    }
  }
  part[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    for (int y = 1; y < 8; ++y) sum += part[y][threadIdx.x];
    atomicAdd(&dbias[c], sum);
  }
}

void check_sizes(int64_t rows, int64_t channels, int64_t out_channels) {
  require_positive(kLayer, rows, "rows");
  require_positive(kLayer, channels, "channels");
  require_positive(kLayer, out_channels, "out_channels");
  require_product_fits(kLayer, rows, std::max(channels, out_channels), "rows * channels");
  require_product_fits(kLayer, channels, out_channels, "channels * out_channels");
}

}  // namespace

CublasContext::CublasContext(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {}

CublasContext::~CublasContext() {
  if (!handles_) return;
  if (handles_->workspace != nullptr) cudaFree(handles_->workspace);
  if (handles_->lt != nullptr) cublasLtDestroy(handles_->lt);
  if (handles_->cublas != nullptr) cublasDestroy(handles_->cublas);
}

CublasContext::Handles& CublasContext::handles() {
  if (handles_) return *handles_;
  Handles created;
  try {
    TRAINTWIN_CUBLAS_CHECK(cublasCreate(&created.cublas));
    TRAINTWIN_CUBLAS_CHECK(cublasLtCreate(&created.lt));
    if (workspace_bytes_ > 0) TRAINTWIN_CUDA_CHECK(cudaMalloc(&created.workspace, workspace_bytes_));
  } catch (...) {
    if (created.workspace != nullptr) cudaFree(created.workspace);
    if (created.lt != nullptr) cublasLtDestroy(created.lt);
    if (created.cublas != nullptr) cublasDestroy(created.cublas);
    throw;
  }
  handles_ = std::make_unique<Handles>(created);
  return *handles_;
}

void matmul_forward(CublasContext& ctx, DType dtype, void* out, const void* inp,
                    const void* weight, const void* bias, int64_t rows, int64_t channels,
                    int64_t out_channels, cudaStream_t stream) {
  check_sizes(rows, channels, out_channels);
  require_pointer(kLayer, out, "out");
  require_pointer(kLayer, inp, "inp");
  require_pointer(kLayer, weight, "weight");
  const cudaDataType_t type = cuda_type(dtype);
  lt_matmul(ctx, type, type, /*trans_a=*/true, /*trans_b=*/false, out_channels, rows, channels,
            weight, channels, inp, channels, out, out_channels, 0.0f, bias, stream);
}

void matmul_backward_data(CublasContext& ctx, DType dtype, void* dinp, const void* dout,
                          const void* weight, int64_t rows, int64_t channels,
                          int64_t out_channels, bool accumulate, cudaStream_t stream) {
  check_sizes(rows, channels, out_channels);
  require_pointer(kLayer, dinp, "dinp");
  require_pointer(kLayer, dout, "dout");
  require_pointer(kLayer, weight, "weight");
  const cudaDataType_t type = cuda_type(dtype);
  lt_matmul(ctx, type, type, false, false, channels, rows, out_channels, weight, channels, dout,
            out_channels, dinp, channels, accumulate ? 1.0f : 0.0f, nullptr, stream);
}

void matmul_backward_weight(CublasContext& ctx, DType dtype, float* dweight, float* dbias,
                            const void* dout, const void* inp, int64_t rows, int64_t channels,
                            int64_t out_channels, cudaStream_t stream) {
  check_sizes(rows, channels, out_channels);
  require_pointer(kLayer, dweight, "dweight");
  require_pointer(kLayer, dout, "dout");
  require_pointer(kLayer, inp, "inp");
  const cudaDataType_t type = cuda_type(dtype);
  lt_matmul(ctx, type, CUDA_R_32F, false, true, channels, out_channels, rows, inp, channels, dout,
            out_channels, dweight, channels, 1.0f, nullptr, stream);
  if (dbias == nullptr) return;
  dispatch(dtype, kLayer, [&](auto tag) {
    using T = decltype(tag);
    const dim3 grid(static_cast<unsigned>((out_channels + 31) / 32),
                    static_cast<unsigned>(std::min<int64_t>((rows + 7) / 8, 128)));
    column_sum_kernel<T><<<grid, dim3(32, 8), 0, stream>>>(dbias, static_cast<const T*>(dout),
                                                           rows, out_channels);
    TRAINTWIN_CUDA_CHECK_LAUNCH();
  });
}

void fp8_matmul_nt(CublasContext& ctx, cpu::Fp8Kind a_kind, const void* a, cpu::Fp8Kind b_kind,
                   const void* b, DType out_type, void* out, float alpha, float beta, int64_t m,
                   int64_t n, int64_t k, bool fast_accumulation, cudaStream_t stream) {
  constexpr const char* kName = "fp8_matmul_nt";
  for (const auto& [v, what] : {std::pair{m, "M"}, std::pair{n, "N"}, std::pair{k, "K"}}) {
    if (v < 16 || v % 16 != 0 || v > INT32_MAX) {
      throw InvalidArgument(std::string("cuda ") + kName + ": " + what + " = " +
                            std::to_string(v) +
                            " must be a positive multiple of 16 (FP8 tensor-core GEMMs)");
    }
  }
  if (a_kind == cpu::Fp8Kind::kE5M2 && b_kind == cpu::Fp8Kind::kE5M2) {
    throw InvalidArgument(std::string("cuda ") + kName +
                          ": both operands E5M2 (cuBLASLt takes E4M3 x E4M3, E4M3 x E5M2, E5M2 x "
                          "E4M3)");
  }
  if (out_type == DType::kBFloat16 && beta != 0.0f) {
    throw InvalidArgument(std::string("cuda ") + kName + ": a bf16 out needs beta 0");
  }
  require_pointer(kName, a, "a");
  require_pointer(kName, b, "b");
  require_pointer(kName, out, "out");
  const auto fp8_type = [](cpu::Fp8Kind kind) {
    return kind == cpu::Fp8Kind::kE4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
  };
  const cudaDataType_t d_type = cuda_type(out_type);
  // Column-major, as cuBLAS reads the row-major operands: out^T[N, M] = b[N, K] a^T[K, M] with
  // A = b stored [K, N] (ld K) transposed, B = a stored [K, M] (ld K), D [N, M] (ld N): TN.
  CublasContext::Handles& h = ctx.handles();
  LtDescriptors desc;
  TRAINTWIN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  TRAINTWIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                        &op_t, sizeof(op_t)));
  TRAINTWIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSB,
                                                        &op_n, sizeof(op_n)));
  const int8_t fast = fast_accumulation ? 1 : 0;
  TRAINTWIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                                                        &fast, sizeof(fast)));
  const auto u = [](int64_t x) { return static_cast<uint64_t>(x); };
  TRAINTWIN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.a, fp8_type(b_kind), u(k), u(n), k));
  TRAINTWIN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.b, fp8_type(a_kind), u(k), u(m), k));
  TRAINTWIN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.d, d_type, u(n), u(m), n));
  TRAINTWIN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&desc.pref));
  const size_t workspace = ctx.workspace_bytes();
  TRAINTWIN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      desc.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  TRAINTWIN_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(h.lt, desc.op, desc.a, desc.b, desc.d,
                                                        desc.d, desc.pref, 1, &heuristic, &found));
  if (found == 0) {
    throw CudaError("cuda fp8_matmul_nt: cuBLASLt has no FP8 algorithm for M " +
                    std::to_string(m) + ", N " + std::to_string(n) + ", K " + std::to_string(k) +
                    " on this GPU (FP8 tensor cores need compute capability 8.9 or later)");
  }
  TRAINTWIN_CUBLAS_CHECK(cublasLtMatmul(h.lt, desc.op, &alpha, b, desc.a, a, desc.b, &beta, out,
                                        desc.d, out, desc.d, &heuristic.algo, h.workspace,
                                        workspace, stream));
}

void batched_matmul(CublasContext& ctx, DType dtype, bool trans_a, bool trans_b, int64_t m,
                    int64_t n, int64_t k, float alpha, const void* a, int64_t lda,
                    int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, float beta,
                    void* c, int64_t ldc, int64_t stride_c, int64_t batch, cudaStream_t stream) {
  constexpr const char* kName = "batched_matmul";
  require_positive(kName, m, "m");
  require_positive(kName, n, "n");
  require_positive(kName, k, "k");
  require_positive(kName, batch, "batch");
  const auto require_ld = [&](int64_t ld, int64_t min, const char* name) {
    if (ld < min || ld > INT32_MAX) {
      throw InvalidArgument(std::string("cuda ") + kName + ": " + name + " " +
                            std::to_string(ld) + " must be in [" + std::to_string(min) +
                            ", 2^31)");
    }
  };
  require_ld(lda, trans_a ? m : k, "lda");
  require_ld(ldb, trans_b ? k : n, "ldb");
  require_ld(ldc, n, "ldc");
  for (const int64_t size : {m, n, k, batch}) {
    if (size > INT32_MAX) {
      throw InvalidArgument(std::string("cuda ") + kName + ": sizes must be < 2^31");
    }
  }
  require_pointer(kName, a, "a");
  require_pointer(kName, b, "b");
  require_pointer(kName, c, "c");
  const cudaDataType_t type = cuda_type(dtype);
  CublasContext::Handles& h = ctx.handles();
  TRAINTWIN_CUBLAS_CHECK(cublasSetStream(h.cublas, stream));
  // Row-major C[m, n] = op(A) op(B) is column-major C^T[n, m] = op(B)^T op(A)^T, and a row-major
  // operand read column-major is already transposed: so B comes first, with its own flag.
  const auto i32 = [](int64_t x) { return static_cast<int>(x); };
  TRAINTWIN_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      h.cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, i32(n),
      i32(m), i32(k), &alpha, b, type, i32(ldb), stride_b, a, type, i32(lda), stride_a, &beta, c,
      type, i32(ldc), stride_c, i32(batch), compute_type(ctx, type), CUBLAS_GEMM_DEFAULT));
}

}  // namespace traintwin::exec::cuda
