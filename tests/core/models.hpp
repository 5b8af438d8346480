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

/// A Llama-style mixture of experts: `experts` routed SwiGLU experts of width `expert_ffn`, top-k.
inline ModelSpec llama_moe(ModelSpec m, int64_t experts, int64_t topk, int64_t expert_ffn) {
  m.num_moe_experts = experts;
  m.moe_router_topk = topk;
  m.moe_ffn_hidden_size = expert_ffn;
  return m;
}

/// Mixtral 8x7B (Jiang et al. 2024, "Mixtral of Experts", Table 1): 32 layers, h 4096, 32 heads,
/// 8 KV heads, 8 experts of width 14336, top-2, vocabulary 32000.
inline ModelSpec mixtral_8x7b() {
  return llama_moe(llama(32, 4096, 14336, 32, 8, 4096, 32000), 8, 2, 14336);
}
/// Qwen3-30B-A3B (Qwen3 technical report 2025, Table 2; the model's config.json): 48 layers,
/// h 2048, 32 heads, 4 KV heads of head dimension 128 (kv_channels), 128 experts of width 768,
/// top-8, vocabulary 151936, untied. Its per-head QK RMSNorm (256 parameters a layer) is not
/// modelled.
inline ModelSpec qwen3_30b_a3b() {
  ModelSpec m = llama_moe(llama(48, 2048, 6144, 32, 4, 4096, 151936), 128, 8, 768);
  m.kv_channels = 128;
  return m;
}
/// Grok-1 (xAI's open release, github.com/xai-org/grok-1 model.py / run.py): 64 layers, h 6144,
/// 48 heads, 8 KV heads, 8 gated experts of width 32768 (widening factor 8 x 2/3, rounded),
/// top-2, vocabulary 131072, input and output embedding shared (InOutEmbed).
inline ModelSpec grok1() {
  ModelSpec m = llama_moe(llama(64, 6144, 32768, 48, 8, 8192, 131072), 8, 2, 32768);
  m.untie_embeddings_and_output_weights = false;
  return m;
}

}  // namespace traintwin::testing
