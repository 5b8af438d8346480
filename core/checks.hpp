// Argument checks shared by the model libraries (params, FLOPs, memory).
#pragma once

#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "core/scenario.hpp"

namespace traintwin {

/// Throws InvalidArgument "<name> must be >= 1, got <value>" when value < 1.
inline void require_at_least_one(int64_t value, const char* name) {
  if (value < 1) {
    throw InvalidArgument(std::string(name) + " must be >= 1, got " + std::to_string(value));
  }
}

/// Every size of the model >= 1 (ffn_hidden_size included: models built in code must set it).
inline void require_valid_model(const ModelSpec& m) {
  require_at_least_one(m.num_layers, "num_layers");
  require_at_least_one(m.hidden_size, "hidden_size");
  require_at_least_one(m.num_attention_heads, "num_attention_heads");
  require_at_least_one(m.ffn_hidden_size, "ffn_hidden_size");
  require_at_least_one(m.seq_length, "seq_length");
  require_at_least_one(m.vocab_size, "vocab_size");
}

}  // namespace traintwin
