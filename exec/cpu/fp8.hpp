// FP8 on the CPU: the two 8-bit formats of Hopper's tensor cores (Micikevicius et al., "FP8
// Formats for Deep Learning", 2022: E4M3 with 4 exponent bits, bias 7, no infinities, largest
// finite 448; E5M2 with 5 exponent bits, bias 15, largest finite 57344), their saturating
// rounding as Transformer Engine casts (cuda_fp8.h's __nv_cvt_float_to_fp8 with __NV_SATFINITE),
// and the CPU reference of the per-tensor-scaled FP8 GEMM TE runs for every linear layer (its
// delayed and current "tensorwise" recipes). Next in the flow: exec/cpu/cpu_backend.cpp wraps
// these as the cpu Backend's FP8 kernels; the GPU tests compare the cuda backend's with them.
#pragma once

#include <cstdint>
#include <span>

namespace traintwin::exec::cpu {

/// An FP8 format: E4M3 (Megatron --fp8-format e4m3, and the forward of hybrid) or E5M2 (the
/// gradients of --fp8-format hybrid).
enum class Fp8Kind { kE4M3, kE5M2 };

/// The FP8 `kind` value nearest to `x`, ties to even; beyond the largest finite value (448 or
/// 57344, infinities included) the largest finite one with x's sign; NaN gives the format's NaN
/// (0x7f; 0xff when negative).
uint8_t float_to_fp8(float x, Fp8Kind kind);
/// The value of FP8 bits `v` of `kind` (exact in fp32; NaN for a NaN pattern, +-inf for E5M2's).
float fp8_to_float(uint8_t v, Fp8Kind kind);

/// dst[i] = float_to_fp8(scale * src[i]): Transformer Engine's cast with its scale. Throws
/// InvalidArgument for different sizes.
void to_fp8(std::span<uint8_t> dst, std::span<const float> src, Fp8Kind kind, float scale);

/// The FP8 GEMM of Transformer Engine's linear layers, one form for all three (on the FP8 copies
/// TE keeps: forward a = inp, b = W; dgrad a = dout, b = W^T; wgrad a = dout^T, b = inp^T; the
/// TN product Hopper's FP8 tensor cores take):
///   out[M, N] = bf16(alpha * sum_k a[M, K] b[N, K])
/// with the products of the FP8 values summed in fp32 and rounded once (alpha = the product of
/// the two operands' inverse scales). Row-major. Throws InvalidArgument for sizes < 1 or spans
/// that do not match them.
void fp8_gemm_nt(std::span<uint16_t> out, std::span<const uint8_t> a, Fp8Kind a_kind,
                 std::span<const uint8_t> b, Fp8Kind b_kind, float alpha, int64_t m, int64_t n,
                 int64_t k);
/// The same product added to fp32 `out` (TE's wgrad into main_grad): out += alpha a b^T.
void fp8_gemm_nt_accumulate(std::span<float> out, std::span<const uint8_t> a, Fp8Kind a_kind,
                            std::span<const uint8_t> b, Fp8Kind b_kind, float alpha, int64_t m,
                            int64_t n, int64_t k);

}  // namespace traintwin::exec::cpu
