// Internal to exec/gpt_model*.cpp (GptModel's member functions, in files by concept; the table of
// contents opens exec/gpt_model.cpp): the dropout sites and the phase test these files share.
// Next in the flow: exec/gpt_model.cpp.
#pragma once

#include <cstdint>

#include "core/program.hpp"

namespace traintwin::exec {

/// Dropout sites (part of the mask's stream id).
enum DropoutSite : uint64_t {
  kSiteEmbedding = 0,
  kSiteAttention = 1,  // after the projection
  kSiteMlp = 2,
  kSiteAttentionProbabilities = 3,
};

/// Whether `phase` runs a forward: the forward itself or its recomputation.
inline bool is_forward(Phase phase) {
  return phase == Phase::kForward || phase == Phase::kRecompute;
}

}  // namespace traintwin::exec
