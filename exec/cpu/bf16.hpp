// bfloat16 on the CPU: the storage type of Megatron-LM's --bf16 activations and model weights
// (Kalamkar et al., "A Study of BFLOAT16 for Deep Learning Training", 2019: the upper 16 bits of
// an IEEE-754 binary32), its rounding, and the CPU reference of the bf16 linear-layer GEMMs that
// the cuda backend runs on the tensor cores (exec/backend.hpp's matmul_*_bf16). Next in the
// flow: exec/cpu/cpu_backend.cpp wraps these as the cpu Backend's bf16 kernels; the GPU tests
// compare the cuda backend's with them.
#pragma once

#include <bit>
#include <cstdint>
#include <span>

namespace traintwin::exec::cpu {

/// The bf16 nearest to `x`, ties to even (as __float2bfloat16_rn and PyTorch's .to(bfloat16));
/// NaN stays a (quiet) NaN, infinities stay infinite, overflow past the largest bf16 rounds to
/// infinity.
inline uint16_t float_to_bf16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN, sign kept
  }
  const uint32_t round = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + round) >> 16);
}

/// The fp32 value of a bf16 (exact: bf16 is a prefix of binary32).
inline float bf16_to_float(uint16_t h) { return std::bit_cast<float>(uint32_t{h} << 16); }

/// dst[i] = float_to_bf16(src[i]). Throws InvalidArgument for different sizes.
void to_bf16(std::span<uint16_t> dst, std::span<const float> src);
/// dst[i] = bf16_to_float(src[i]). Throws InvalidArgument for different sizes.
void from_bf16(std::span<float> dst, std::span<const uint16_t> src);
/// dst[i] += bf16_to_float(src[i]) in fp32. Throws InvalidArgument for different sizes.
void accumulate_bf16(std::span<float> dst, std::span<const uint16_t> src);

/// The bf16 linear layer as Megatron-LM / Transformer Engine run it (bf16 operands, products
/// summed in fp32, the result rounded once to bf16): out = bf16(inp W^T + bias), each operand
/// exactly its bf16 value. Shapes as exec/cpu/matmul.hpp (inp [B*T, C], weight [OC, C], bias
/// [OC] or empty, out [B*T, OC]). The fp32 sums are OpenBLAS's (cblas_sgemm), so a GPU's
/// differ by fp32 summation order only. Throws InvalidArgument as matmul_forward.
void matmul_forward_bf16(std::span<uint16_t> out, std::span<const uint16_t> inp,
                         std::span<const uint16_t> weight, std::span<const uint16_t> bias,
                         int64_t batch, int64_t seq, int64_t channels, int64_t out_channels);
/// dgrad: dinp = bf16(dout W) (overwritten, as a bf16 activation gradient is produced fresh;
/// dinp [B*T, C], dout [B*T, OC]). Throws InvalidArgument as matmul_forward.
void matmul_backward_data_bf16(std::span<uint16_t> dinp, std::span<const uint16_t> dout,
                               std::span<const uint16_t> weight, int64_t batch, int64_t seq,
                               int64_t channels, int64_t out_channels);
/// wgrad into fp32 gradients (Megatron's gradient_accumulation_fusion: main_grad += dout^T inp
/// in fp32), dbias += the column sums of dout (may be empty). Throws InvalidArgument as
/// matmul_forward.
void matmul_backward_weight_bf16(std::span<float> dweight, std::span<float> dbias,
                                 std::span<const uint16_t> dout, std::span<const uint16_t> inp,
                                 int64_t batch, int64_t seq, int64_t channels,
                                 int64_t out_channels);

}  // namespace traintwin::exec::cpu
