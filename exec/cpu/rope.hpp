// Rotary position embedding (Su et al. 2021, "RoFormer"; Llama, Megatron
// --position-embedding-type rope) on Q or K heads, in Megatron-Core's non-interleaved form
// (rotate_half): each head of D channels is split into halves x1 = x[0, D/2), x2 = x[D/2, D);
// with theta_i = base^(-2i/D) and angle a = position x theta_i, i in [0, D/2):
//   out1_i = x1_i cos a - x2_i sin a,   out2_i = x2_i cos a + x1_i sin a
// positions[t] is the token's position in the whole sequence (under context parallelism a rank's
// tokens are two non-contiguous chunks). B = batch, T = seq, H = heads, D = head_dim.
// Scalar is float or double.
#pragma once

#include <cstdint>
#include <span>

namespace traintwin::exec::cpu {

/// Megatron's default --rotary-base (Llama 2; Llama 3 uses 500000).
inline constexpr double kRotaryBase = 10000.0;

/// Forward. Throws InvalidArgument for a size < 1, an odd head_dim, a base <= 0, or a span whose
/// length does not match its shape.
template <typename Scalar>
void rope_forward(std::span<Scalar> out,                 // [B, T, H, D]
                  std::span<const Scalar> inp,           // [B, T, H, D]
                  std::span<const int64_t> positions,    // [T]
                  int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                  double base = kRotaryBase);

/// Backward (the inverse rotation); accumulates (+=) into dinp:
///   dx1_i = d1_i cos a + d2_i sin a,   dx2_i = d2_i cos a - d1_i sin a.
/// Throws as rope_forward.
template <typename Scalar>
void rope_backward(std::span<Scalar> dinp,                // [B, T, H, D]
                   std::span<const Scalar> dout,          // [B, T, H, D]
                   std::span<const int64_t> positions,    // [T]
                   int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                   double base = kRotaryBase);

}  // namespace traintwin::exec::cpu
