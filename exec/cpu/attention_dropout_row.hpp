// The attention-probability dropout factors of one query row, shared by the attention kernels
// (attention.hpp, gqa_attention.hpp, block_attention.hpp) so that all of them draw the same mask
// for the same global (sample, head, query position, key position): the index of
// attention_dropout_index() (dropout.hpp) on global positions, whatever the kernel, the TP shard
// of the heads or the CP chunk of the sequence that computes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/cpu/attention.hpp"

namespace traintwin::exec::cpu {

/// Per-key factors of one (b, h, t) row under attention dropout: 1/(1-p) kept, 0 dropped; all 1
/// without dropout (a null or p == 0 `dropout`).
template <typename Scalar>
class AttentionDropoutRow {
 public:
  /// `layer` names the kernel in errors; `seq_total` is the number of positions per sample the
  /// caller indexes (the whole sequence: every query and key position must be below it), which
  /// must be the dropout block's seq. `max_keys` bounds the keys of one row.
  /// Throws InvalidArgument for p outside [0, 1) or a block that does not match the call.
  AttentionDropoutRow(const char* layer, const AttentionProbabilityDropout* d, int64_t batch,
                      int64_t heads, int64_t seq_total, int64_t max_keys)
      : d_(d != nullptr && d->params.p > 0 ? d : nullptr),
        factors_(static_cast<size_t>(max_keys), Scalar{1}) {
    if (d == nullptr) return;
    if (!(d->params.p >= 0 && d->params.p < 1)) {
      throw InvalidArgument(std::string(layer) + ": dropout p must be in [0, 1), got " +
                            std::to_string(d->params.p));
    }
    if (d_ == nullptr) return;
    const AttentionBlock& k = d_->block;
    if (k.batch != batch || k.seq != seq_total || k.heads != heads || k.first_sample < 0 ||
        k.head_offset < 0 || k.head_offset + heads > k.heads_total) {
      throw InvalidArgument(std::string(layer) +
                            ": the dropout block does not match the call (batch " +
                            std::to_string(batch) + ", heads " + std::to_string(heads) +
                            ", seq " + std::to_string(seq_total) + ")");
    }
    scale_ = static_cast<Scalar>(1.0 / (1.0 - d_->params.p));
  }

  /// Fills the factors of row (b, local head h, query position t) for `n` keys at positions
  /// `key_positions[0..n)` (null: positions 0..n-1) and returns them.
  const Scalar* row(int64_t b, int64_t h, int64_t t, int64_t n,
                    const int64_t* key_positions = nullptr) {
    if (d_ != nullptr) {
      for (int64_t j = 0; j < n; ++j) {
        const int64_t t2 = key_positions == nullptr ? j : key_positions[j];
        factors_[static_cast<size_t>(j)] =
            dropout_keep(d_->params, attention_dropout_index(d_->block, b, h, t, t2)) ? scale_
                                                                                        : Scalar{0};
      }
    }
    return factors_.data();
  }

 private:
  const AttentionProbabilityDropout* d_;
  std::vector<Scalar> factors_;
  Scalar scale_ = 1;
};

}  // namespace traintwin::exec::cpu
