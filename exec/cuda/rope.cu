// Rotary position embedding; see rope.hpp.
#include "exec/cuda/rope.hpp"

#include <cmath>

#include "exec/cuda/common.cuh"
#include "exec/cuda/cp_positions.cuh"

namespace traintwin::exec::cuda {
namespace {

using namespace detail;

constexpr const char* kLayer = "rope";

// table[0, t, i] = cos(pos(t) theta_i), table[1, t, i] = sin(pos(t) theta_i), in double as the
// CPU layer, rounded to float.
__global__ void rope_table_kernel(float* table, CpPositions positions, int64_t seq, int64_t half,
                                  int64_t head_dim, double base) {
  const int64_t n = seq * half;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = k / half;
    const int64_t i = k - t * half;
    const double theta = pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    const double angle = static_cast<double>(positions.global(t)) * theta;
    table[k] = static_cast<float>(cos(angle));
    table[n + k] = static_cast<float>(sin(angle));
  }
}

// One thread per pair (b, t, h, i): rotation by +angle (sign 1, overwrite) or -angle (sign -1,
// accumulate).
__global__ void rope_rotate_kernel(float* dst, const float* src, const float* table,
                                   int64_t batch, int64_t seq, int64_t heads, int64_t half,
                                   float sign, bool accumulate) {
  const int64_t n = batch * seq * heads * half;
  const int64_t table_n = seq * half;
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = k % half;
    const int64_t bth = k / half;  // (b * T + t) * H + h
    const int64_t t = (bth / heads) % seq;
    const float c = table[t * half + i];
    const float s = sign * table[table_n + t * half + i];
    const int64_t at = bth * 2 * half;
    const float x1 = src[at + i], x2 = src[at + half + i];
    const float y1 = x1 * c - x2 * s, y2 = x2 * c + x1 * s;
    if (accumulate) {
      dst[at + i] += y1;
      dst[at + half + i] += y2;
    } else {
      dst[at + i] = y1;
      dst[at + half + i] = y2;
    }
  }
}

void check(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
           const CpSequence& positions, double base) {
  require_positive(kLayer, batch, "batch");
  require_positive(kLayer, seq, "seq");
  require_positive(kLayer, heads, "heads");
  require_positive(kLayer, head_dim, "head_dim");
  if (head_dim % 2 != 0) {
    throw InvalidArgument(std::string("cuda ") + kLayer + ": head_dim must be even, got " +
                          std::to_string(head_dim));
  }
  if (!(base > 0)) {
    throw InvalidArgument(std::string("cuda ") + kLayer + ": base must be > 0, got " +
                          std::to_string(base));
  }
  if (seq != positions.local()) {
    throw InvalidArgument(std::string("cuda ") + kLayer + ": " + std::to_string(seq) +
                          " positions, but the sequence holds " +
                          std::to_string(positions.local()) + " local positions");
  }
  require_product_fits(kLayer, batch * seq, heads * head_dim, "batch * seq * heads * head_dim");
}

void rotate(float* dst, const float* src, float* table, int64_t batch, int64_t seq,
            int64_t heads, int64_t head_dim, const CpSequence& positions, double base,
            float sign, bool accumulate, cudaStream_t stream) {
  check(batch, seq, heads, head_dim, positions, base);
  require_pointer(kLayer, dst, accumulate ? "dinp" : "out");
  require_pointer(kLayer, src, accumulate ? "dout" : "inp");
  require_pointer(kLayer, table, "table");
  const int64_t half = head_dim / 2;
  rope_table_kernel<<<grid_for(seq * half), kBlock, 0, stream>>>(
      table, CpPositions::of(positions), seq, half, head_dim, base);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
  rope_rotate_kernel<<<grid_for(batch * seq * heads * half), kBlock, 0, stream>>>(
      dst, src, table, batch, seq, heads, half, sign, accumulate);
  TRAINTWIN_CUDA_CHECK_LAUNCH();
}

}  // namespace

int64_t rope_table_floats(int64_t seq, int64_t head_dim) { return seq * head_dim; }

void rope_forward(float* out, const float* inp, float* table, int64_t batch, int64_t seq,
                  int64_t heads, int64_t head_dim, const CpSequence& positions, double base,
                  cudaStream_t stream) {
  rotate(out, inp, table, batch, seq, heads, head_dim, positions, base, 1.0f, false, stream);
}

void rope_backward(float* dinp, const float* dout, float* table, int64_t batch, int64_t seq,
                   int64_t heads, int64_t head_dim, const CpSequence& positions, double base,
                   cudaStream_t stream) {
  // The rotation is orthogonal: its transpose is the rotation by -angle.
  rotate(dinp, dout, table, batch, seq, heads, head_dim, positions, base, -1.0f, true, stream);
}

}  // namespace traintwin::exec::cuda
