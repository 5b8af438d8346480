// Model configurations shared by the core tests.
#pragma once

#include "core/scenario.hpp"

namespace traintwin::testing {

/// GPT-3 175B (Brown et al. 2020, Table 2.1): 96 layers, h 12288, 96 heads, ffn 4h, s 2048,
/// V 51200 (Megatron's padded GPT-2 vocabulary).
inline ModelSpec gpt3_175b() {
  ModelSpec m;
  m.num_layers = 96;
  m.hidden_size = 12288;
  m.num_attention_heads = 96;
  m.ffn_hidden_size = 4 * 12288;
  m.seq_length = 2048;
  m.vocab_size = 51200;
  return m;
}

}  // namespace traintwin::testing
