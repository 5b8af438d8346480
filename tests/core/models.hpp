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

/// A Llama-style model (the `llama` preset: RMSNorm, SwiGLU, RoPE, untied, no biases).
inline ModelSpec llama(int64_t layers, int64_t h, int64_t ffn, int64_t heads, int64_t groups,
                       int64_t seq, int64_t vocab) {
  ModelSpec m;
  m.architecture = "llama";
  m.num_layers = layers;
  m.hidden_size = h;
  m.ffn_hidden_size = ffn;
  m.num_attention_heads = heads;
  m.num_query_groups = groups;
  m.seq_length = seq;
  m.vocab_size = vocab;
  m.normalization = Normalization::kRmsNorm;
  m.activation = Activation::kSwiglu;
  m.position_embedding_type = PositionEmbedding::kRope;
  m.untie_embeddings_and_output_weights = true;
  m.add_bias_linear = false;
  return m;
}

/// Llama 3.1 8B, 70B, 405B (Meta, "The Llama 3 Herd of Models", 2024, Table 3): 8 KV heads,
/// vocabulary 128256, 8K pre-training sequences.
inline ModelSpec llama31_8b() { return llama(32, 4096, 14336, 32, 8, 8192, 128256); }
inline ModelSpec llama31_70b() { return llama(80, 8192, 28672, 64, 8, 8192, 128256); }
inline ModelSpec llama31_405b() { return llama(126, 16384, 53248, 128, 8, 8192, 128256); }

}  // namespace traintwin::testing
