// The QKV rows of an attention layer and the packed tensors the blockwise attention kernels
// take: the queries [rows, q_width] and the K/V block [rows, kv_width] copied out of the rows
// [rows, q_width + kv_width] (queries first), and their gradients written back. One rule for the
// model (exec/gpt_model_attention.cpp) and `profile`'s flash attention binding
// (exec/profile_calls.cpp), so the profile times the copies train makes. Next in the flow: the
// Backend's block_attention_forward / block_attention_backward.
#pragma once

#include <cstddef>
#include <cstdint>

#include "exec/backend.hpp"

namespace traintwin::exec {

/// q [rows, q_width] and kv [rows, kv_width] overwritten from `qkv` [rows, q_width + kv_width]
/// (two Backend::copy_2d). InvalidArgument from copy_2d when a span is too small.
inline void pack_qkv_rows(Backend& be, FSpan q, FSpan kv, CFSpan qkv, int64_t rows,
                          int64_t q_width, int64_t kv_width) {
  const int64_t pitch = q_width + kv_width;
  be.copy_2d(q, q_width, qkv, pitch, q_width, rows);
  be.copy_2d(kv, kv_width, qkv.subspan(static_cast<size_t>(q_width)), pitch, kv_width, rows);
}

/// The inverse: dq [rows, q_width] and dkv [rows, kv_width] written into `d_qkv`
/// [rows, q_width + kv_width]. InvalidArgument from copy_2d when a span is too small.
inline void scatter_qkv_rows(Backend& be, FSpan d_qkv, CFSpan dq, CFSpan dkv, int64_t rows,
                             int64_t q_width, int64_t kv_width) {
  const int64_t pitch = q_width + kv_width;
  be.copy_2d(d_qkv, pitch, dq, q_width, q_width, rows);
  be.copy_2d(d_qkv.subspan(static_cast<size_t>(q_width)), pitch, dkv, kv_width, kv_width, rows);
}

}  // namespace traintwin::exec
