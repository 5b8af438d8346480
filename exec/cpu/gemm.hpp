// Row-major BLAS GEMM for the CPU kernels (matmul.hpp, attention.hpp, gqa_attention.hpp,
// block_attention.hpp): one overload per Scalar, cblas_sgemm for float, cblas_dgemm for double.
#pragma once

#include <cblas.h>

#include <cstdint>

namespace traintwin::exec::cpu {

/// C[m, n] = alpha op(A) op(B) + beta C, all row-major with leading dimensions lda, ldb, ldc
/// (elements); op(A) is [m, k], op(B) is [k, n]. Threads: set_gemm_threads (matmul.hpp).
inline void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k,
                 float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                 float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

/// As above in double (cblas_dgemm).
inline void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k,
                 double alpha, const double* a, int64_t lda, const double* b, int64_t ldb,
                 double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

}  // namespace traintwin::exec::cpu
