// SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"; Llama, Megatron --swiglu) on the
// output of the fused FC1, whose rows hold [gate (F) | up (F)] as Megatron's
// torch.chunk(x, 2, dim=-1) splits them (a TP rank holds its own gate and up shards):
//   out[r, i] = silu(gate[r, i]) * up[r, i],  silu(x) = x sigmoid(x)
// R = rows (B*T), F = width of the output. Scalar is float or double.
#pragma once

#include <cstdint>
#include <span>

namespace traintwin::exec::cpu {

/// Forward. Throws InvalidArgument for a size < 1 or a span whose length does not match.
template <typename Scalar>
void swiglu_forward(std::span<Scalar> out,        // [R, F]
                    std::span<const Scalar> inp,  // [R, 2F]
                    int64_t rows, int64_t width);

/// Backward; accumulates (+=) into dinp: dgate = dout up silu'(gate), dup = dout silu(gate),
/// silu'(x) = s + x s (1 - s), s = sigmoid(x). Throws as swiglu_forward.
template <typename Scalar>
void swiglu_backward(std::span<Scalar> dinp,         // [R, 2F]
                     std::span<const Scalar> dout,   // [R, F]
                     std::span<const Scalar> inp,    // [R, 2F]
                     int64_t rows, int64_t width);

}  // namespace traintwin::exec::cpu
