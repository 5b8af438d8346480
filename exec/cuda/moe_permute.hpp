// Token permutation of a mixture-of-experts layer on the GPU: the row gathers behind
// exec/cpu/moe_permute.hpp (Megatron-Core moe_utils.permute / unpermute / sort_chunks_by_idxs),
// fp32 rows of C channels. The host (CudaBackend) turns the MoePermutation into device index
// arrays: row m's token and expert, and its inverse in CSR form (token n's rows, ascending), so
// the scatter-adds become gathers: no atomics on the rows, and each output row sums its rows in
// the CPU's order (ascending m). One block per row, threads over the channels. Device pointers;
// asynchronous on `stream`. Each launcher throws InvalidArgument for a size < 1 or a null
// pointer, CudaError if a launch fails; a launcher with 0 rows does nothing.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace traintwin::exec::cuda {

/// Permute forward: out[m] = inp[token[m]] for m in [0, M) (overwrites out).
void moe_gather_rows(float* out,             // [M, C]
                     const float* inp,       // [N, C]
                     const int64_t* token,   // [M]
                     int64_t rows, int64_t channels, cudaStream_t stream);

/// Permute backward: dinp[n] += sum over r in [offsets[n], offsets[n+1]) of dout[rows_of[r]]
/// (the scatter-add of dout to the tokens, as a gather over token n's rows).
void moe_scatter_add_rows(float* dinp,              // [N, C]
                          const float* dout,        // [M, C]
                          const int64_t* offsets,   // [N + 1]
                          const int64_t* rows_of,   // [M]
                          int64_t tokens, int64_t channels, cudaStream_t stream);

/// Unpermute forward: out[n] = sum over token n's rows m of probs[n, expert[m]] inp[m]
/// (overwrites out; 0 for a token without rows).
void moe_unpermute_rows(float* out,               // [N, C]
                        const float* inp,         // [M, C]
                        const float* probs,       // [N, E]
                        const int64_t* offsets,   // [N + 1]
                        const int64_t* rows_of,   // [M]
                        const int32_t* expert,    // [M]
                        int64_t tokens, int64_t experts, int64_t channels, cudaStream_t stream);

/// Unpermute backward, accumulating: dinp[m] += probs[n, e] dout[n] and
/// dprobs[n, e] += dout[n] . inp[m] (n = token[m], e = expert[m]; fp32 atomicAdd on dprobs,
/// the block's reduction of the dot product).
void moe_unpermute_rows_backward(float* dinp,             // [M, C]
                                 float* dprobs,           // [N, E]
                                 const float* dout,       // [N, C]
                                 const float* inp,        // [M, C]
                                 const float* probs,      // [N, E]
                                 const int64_t* token,    // [M]
                                 const int32_t* expert,   // [M]
                                 int64_t rows, int64_t experts, int64_t channels,
                                 cudaStream_t stream);

/// Chunk sort: output chunk j (rows [out_start[j], out_start[j+1])) is the input's rows from
/// in_start[j] on (the input chunk order[j]); out_start is the prefix sum of the output chunks'
/// rows ([K + 1], out_start[K] = rows). Overwrites out.
void moe_sort_chunks(float* out,                 // [rows, C]
                     const float* inp,           // [rows, C]
                     const int64_t* out_start,   // [K + 1]
                     const int64_t* in_start,    // [K]
                     int64_t chunks, int64_t rows, int64_t channels, cudaStream_t stream);

}  // namespace traintwin::exec::cuda
