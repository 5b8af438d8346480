// Vocab-parallel and position embeddings; see embedding.hpp.
#include "exec/cuda/embedding.hpp"

#include "exec/cuda/common.cuh"

namespace traintwin::exec::cuda {
namespace {

using namespace detail;

constexpr const char* kVocab = "vocab_parallel_embedding";
constexpr const char* kPosition = "position_embedding";

// One thread per output element (grid-stride).
template <typename T>
__global__ void vocab_embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte,
                                               int64_t rows, int64_t channels,
                                               int64_t vocab_start, int64_t vocab_local) {
  const int64_t n = rows * channels;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / channels;
    const int64_t c = i - row * channels;
    const int64_t local = int64_t{tokens[row]} - vocab_start;
    out[i] = local >= 0 && local < vocab_local ? wte[local * channels + c] : from_float<T>(0.0f);
  }
}

template <typename T>
__global__ void vocab_embedding_backward_kernel(float* dwte, const T* dout, const int32_t* tokens,
                                                int64_t rows, int64_t channels,
                                                int64_t vocab_start, int64_t vocab_local) {
  const int64_t n = rows * channels;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / channels;
    const int64_t c = i - row * channels;
    const int64_t local = int64_t{tokens[row]} - vocab_start;
    if (local >= 0 && local < vocab_local) atomicAdd(&dwte[local * channels + c], to_float(dout[i]));
  }
}

template <typename T>
__global__ void position_embedding_forward_kernel(T* out, const T* wpe, int64_t batch,
                                                  int64_t seq_local, int64_t channels,
                                                  int64_t seq_offset) {
  const int64_t n = batch * seq_local * channels;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t tc = i % (seq_local * channels);  // t * C + c
    const float w = to_float(wpe[seq_offset * channels + tc]);
    out[i] = from_float<T>(to_float(out[i]) + w);
  }
}

// One thread per (t, c): sums the batch in order.
template <typename T>
__global__ void position_embedding_backward_kernel(float* dwpe, const T* dout, int64_t batch,
                                                   int64_t seq_local, int64_t channels,
                                                   int64_t seq_offset) {
  const int64_t per_sample = seq_local * channels;
  for (int64_t tc = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; tc < per_sample;
       tc += int64_t{gridDim.x} * blockDim.x) {
    float sum = 0.0f;
    for (int64_t b = 0; b < batch; ++b) sum += to_float(dout[b * per_sample + tc]);
    dwpe[seq_offset * channels + tc] += sum;
  }
}

void check_vocab(const void* act, const char* act_name, const int32_t* tokens, const void* table,
                 const char* table_name, int64_t batch, int64_t seq, int64_t channels,
                 int64_t vocab_start, int64_t vocab_local, int64_t vocab_total) {
  require_positive(kVocab, batch, "batch");
  require_positive(kVocab, seq, "seq");
  require_positive(kVocab, channels, "channels");
  require_vocab_shard(kVocab, vocab_start, vocab_local, vocab_total);
  require_product_fits(kVocab, batch * seq, channels, "batch * seq * channels");
  require_pointer(kVocab, act, act_name);
  require_pointer(kVocab, tokens, "tokens");
  require_pointer(kVocab, table, table_name);
}

void check_position(const void* act, const char* act_name, const void* table,
                    const char* table_name, int64_t batch, int64_t seq_local, int64_t channels,
                    int64_t seq_offset, int64_t max_positions) {
  require_positive(kPosition, batch, "batch");
  require_positive(kPosition, seq_local, "seq_local");
  require_positive(kPosition, channels, "channels");
  require_non_negative(kPosition, seq_offset, "seq_offset");
  if (seq_offset + seq_local > max_positions) {
    throw InvalidArgument(std::string("cuda ") + kPosition + ": seq_offset + seq_local = " +
                          std::to_string(seq_offset + seq_local) + " exceeds max_positions " +
                          std::to_string(max_positions));
  }
  require_product_fits(kPosition, batch * seq_local, channels, "batch * seq_local * channels");
  require_pointer(kPosition, act, act_name);
  require_pointer(kPosition, table, table_name);
}

}  // namespace

void vocab_parallel_embedding_forward(DType dtype, void* out, const int32_t* tokens,
                                      const void* wte_local, int64_t batch, int64_t seq,
                                      int64_t channels, int64_t vocab_start, int64_t vocab_local,
                                      int64_t vocab_total, cudaStream_t stream) {
  check_vocab(out, "out", tokens, wte_local, "wte_local", batch, seq, channels, vocab_start,
              vocab_local, vocab_total);
  const int64_t rows = batch * seq;
  dispatch(dtype, kVocab, [&](auto tag) {
    using T = decltype(tag);
    vocab_embedding_forward_kernel<T><<<grid_for(rows * channels), kBlock, 0, stream>>>(
        static_cast<T*>(out), tokens, static_cast<const T*>(wte_local), rows, channels,
        vocab_start, vocab_local);
    TRAINTWIN_CUDA_CHECK_LAUNCH();
  });
}

void vocab_parallel_embedding_backward(DType dtype, float* dwte_local, const void* dout,
                                       const int32_t* tokens, int64_t batch, int64_t seq,
                                       int64_t channels, int64_t vocab_start, int64_t vocab_local,
                                       int64_t vocab_total, cudaStream_t stream) {
  check_vocab(dout, "dout", tokens, dwte_local, "dwte_local", batch, seq, channels, vocab_start,
              vocab_local, vocab_total);
  const int64_t rows = batch * seq;
  dispatch(dtype, kVocab, [&](auto tag) {
    using T = decltype(tag);
    vocab_embedding_backward_kernel<T><<<grid_for(rows * channels), kBlock, 0, stream>>>(
        dwte_local, static_cast<const T*>(dout), tokens, rows, channels, vocab_start,
        vocab_local);
    TRAINTWIN_CUDA_CHECK_LAUNCH();
  });
}

void position_embedding_forward(DType dtype, void* out, const void* wpe, int64_t batch,
                                int64_t seq_local, int64_t channels, int64_t seq_offset,
                                int64_t max_positions, cudaStream_t stream) {
  check_position(out, "out", wpe, "wpe", batch, seq_local, channels, seq_offset, max_positions);
  dispatch(dtype, kPosition, [&](auto tag) {
    using T = decltype(tag);
    position_embedding_forward_kernel<T>
        <<<grid_for(batch * seq_local * channels), kBlock, 0, stream>>>(
            static_cast<T*>(out), static_cast<const T*>(wpe), batch, seq_local, channels,
            seq_offset);
    TRAINTWIN_CUDA_CHECK_LAUNCH();
  });
}

void position_embedding_backward(DType dtype, float* dwpe, const void* dout, int64_t batch,
                                 int64_t seq_local, int64_t channels, int64_t seq_offset,
                                 int64_t max_positions, cudaStream_t stream) {
  check_position(dout, "dout", dwpe, "dwpe", batch, seq_local, channels, seq_offset,
                 max_positions);
  dispatch(dtype, kPosition, [&](auto tag) {
    using T = decltype(tag);
    position_embedding_backward_kernel<T><<<grid_for(seq_local * channels), kBlock, 0, stream>>>(
        dwpe, static_cast<const T*>(dout), batch, seq_local, channels, seq_offset);
    TRAINTWIN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace traintwin::exec::cuda
