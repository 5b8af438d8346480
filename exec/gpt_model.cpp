// The GPT model's math; see gpt_model.hpp.
#include "exec/gpt_model.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "core/error.hpp"
#include "exec/counter_rng.hpp"
#include "exec/cpu/rope.hpp"

namespace traintwin::exec {
namespace {

/// Dropout sites (part of the mask's stream id).
enum DropoutSite : uint64_t {
  kSiteEmbedding = 0,
  kSiteAttention = 1,  // after the projection
  kSiteMlp = 2,
  kSiteAttentionProbabilities = 3,
};

bool is_forward(Phase phase) { return phase == Phase::kForward || phase == Phase::kRecompute; }

}  // namespace

GptModel::GptModel(const Program& program, const RankProgram& rank, ModelShard& shard,
                   Backend& backend, const TrainingHyperparameters& hyper)
    : prog_(program), rank_(rank.rank), coord_(rank.coord), shard_(shard), backend_(backend), hyper_(hyper) {
  const Scenario& sc = prog_.scenario;
  g_.b = sc.training.micro_batch_size;
  g_.s = sc.model.seq_length;
  g_.h = sc.model.hidden_size;
  g_.t = sc.parallel.tensor_model_parallel_size;
  g_.hl = g_.h / g_.t;
  g_.f = sc.model.ffn_hidden_size / g_.t;
  g_.heads = sc.model.num_attention_heads / g_.t;
  g_.groups = sc.model.query_groups() / g_.t;
  g_.hd = sc.model.head_dim();
  g_.qkv = (g_.heads + 2 * g_.groups) * g_.hd;
  g_.activation = sc.model.activation;
  g_.fc1 = g_.activation == Activation::kSwiglu ? 2 * g_.f : g_.f;
  g_.rmsnorm = sc.model.normalization == Normalization::kRmsNorm;
  g_.rope = sc.model.position_embedding_type == PositionEmbedding::kRope;
  g_.gqa = g_.groups != g_.heads;
  g_.untied = sc.model.untie_embeddings_and_output_weights;
  if (g_.gqa && hyper_.attention_dropout > 0) {
    throw UnsupportedError("scenario " + sc.name +
                           ": attention_dropout > 0 with grouped-query attention "
                           "(model.num_query_groups < num_attention_heads) is not executed yet");
  }
  g_.sp = sc.parallel.sequence_parallel;
  g_.tl = g_.sp ? g_.s / g_.t : g_.s;
  g_.p = sc.parallel.pipeline_model_parallel_size;
  g_.v = sc.parallel.virtual_pipeline_model_parallel_size;
  g_.m = sc.num_micro_batches();
  for (int64_t c = 0; c < g_.v; ++c) chunk_layers_.push_back(chunk_layers(sc, coord_.pp, c));
  g_.dp = sc.parallel.data_parallel_size;
  g_.vocab = sc.model.vocab_size;
  g_.vl = shard_.vocab_local();
  g_.vstart = shard_.vocab_start();
  g_.vtotal = g_.vl * g_.t;
  recompute_ = sc.training.recompute_granularity;

  const auto& chunks = shard_.chunks();
  for (size_t c = 0; c < chunks.size(); ++c) {
    const int64_t chunk = static_cast<int64_t>(c);
    for (int64_t l = first_layer(chunk); l < first_layer(chunk) + num_layers(chunk); ++l) {
      const std::string pre = "layers." + std::to_string(l) + ".";
      for (bool grad : {false, true}) {
        auto view = [&](const char* name, bool present = true) {
          if (!present) return std::span<float>();
          return grad ? shard_.grad(chunk, pre + name) : shard_.param(chunk, pre + name);
        };
        const bool nb = !g_.rmsnorm, lb = sc.model.add_bias_linear;
        (grad ? layer_grads_ : layer_params_)[l] = LayerParams{
            view("input_layernorm.weight"),           view("input_layernorm.bias", nb),
            view("self_attention.linear_qkv.weight"), view("self_attention.linear_qkv.bias", lb),
            view("self_attention.linear_proj.weight"),
            view("self_attention.linear_proj.bias", lb),
            view("pre_mlp_layernorm.weight"),         view("pre_mlp_layernorm.bias", nb),
            view("mlp.linear_fc1.weight"),            view("mlp.linear_fc1.bias", lb),
            view("mlp.linear_fc2.weight"),            view("mlp.linear_fc2.bias", lb)};
      }
    }
  }
}

void GptModel::begin(int64_t iteration, const MicroBatchSource& data, bool training) {
  iteration_ = iteration;
  data_ = &data;
  training_ = training;
  chunks_.clear();
  loss_sum_ = 0;
  loss_tokens_ = 0;
}

// ---- geometry and state --------------------------------------------------------------------------

/// Global index of the first sample of micro-batch `mb` of this DP replica (Megatron's
/// pretraining sampler: each step of b x DP samples is split over the DP ranks).
int64_t GptModel::first_sample(int64_t mb) const {
  const int64_t gbs = prog_.scenario.training.global_batch_size;
  return std::max<int64_t>(iteration_ - 1, 0) * gbs + mb * g_.b * g_.dp + coord_.dp * g_.b;
}

ChunkState& GptModel::chunk(int64_t chunk, int64_t mb) {
  auto [it, inserted] = chunks_.try_emplace({chunk, mb});
  if (inserted) {
    ChunkState& st = it->second;
    st.layers.resize(static_cast<size_t>(num_layers(chunk)));
    if (vstage(chunk) == 0 || is_last_vstage(chunk)) {
      const auto n = static_cast<size_t>(g_.b * g_.s);
      host_tokens_.assign(n, 0);
      host_labels_.assign(n, 0);
      (*data_)(mb, host_tokens_, host_labels_);
      st.tokens = DeviceBuffer<int32_t>(backend_, g_.b * g_.s);
      st.labels = DeviceBuffer<int32_t>(backend_, g_.b * g_.s);
      backend_.upload(st.tokens, host_tokens_);
      backend_.upload(st.labels, host_labels_);
    }
  }
  return it->second;
}

Tensor& GptModel::chunk_output(ChunkState& st, int64_t chunk) {
  if (!st.layers.empty()) return st.layers.back().out;
  return vstage(chunk) == 0 ? st.emb_out : st.input;
}

Tensor& GptModel::chunk_input_grad(ChunkState& st, int64_t chunk) {
  if (!st.layers.empty()) return st.layers.front().d_in;
  return is_last_vstage(chunk) ? st.d_last : st.d_output;
}

LayerState& GptModel::layer(const Op& op) {
  ChunkState& st = chunk(op.model_chunk, op.micro_batch);
  return st.layers[static_cast<size_t>(op.layer - first_layer(op.model_chunk))];
}

Tensor GptModel::clone(const Tensor& x) {
  Tensor y = zeros(static_cast<int64_t>(x.size()));
  backend_.copy(y, x);
  return y;
}

/// The LM head's weight on the last stage: its own (untied) weight, else the word embedding's
/// copy when PP > 1, the word embedding itself (chunk 0) when PP == 1.
std::span<float> GptModel::head_weight(int64_t chunk, bool grad) {
  if (g_.untied || g_.p > 1) {
    return grad ? shard_.grad(chunk, "output_layer.weight")
                : shard_.param(chunk, "output_layer.weight");
  }
  return grad ? shard_.grad(0, "embedding.word_embeddings.weight")
              : shard_.param(0, "embedding.word_embeddings.weight");
}

std::span<float> GptModel::embedding_grad_to_reduce() {
  if (coord_.pp == 0) return shard_.grad(0, "embedding.word_embeddings.weight");
  return shard_.grad(static_cast<int64_t>(shard_.chunks().size()) - 1, "output_layer.weight");
}

cpu::DropoutParams GptModel::dropout(uint64_t site, int64_t layer) const {
  return cpu::DropoutParams{training_ ? hyper_.hidden_dropout : 0.0, hyper_.seed,
                            stream_id({static_cast<uint64_t>(iteration_),
                                       static_cast<uint64_t>(layer + 1), site})};
}

/// Attention-probability dropout of micro-batch `mb` in `layer` (null when off); the mask is
/// keyed by global heads, so TP shards draw the same mask as one rank.
const cpu::AttentionProbabilityDropout* GptModel::attention_dropout(int64_t mb, int64_t layer) {
  if (!training_ || hyper_.attention_dropout == 0) return nullptr;
  att_dropout_ = cpu::AttentionProbabilityDropout{
      cpu::DropoutParams{hyper_.attention_dropout, hyper_.seed,
                         stream_id({static_cast<uint64_t>(iteration_),
                                    static_cast<uint64_t>(layer + 1),
                                    kSiteAttentionProbabilities})},
      cpu::AttentionBlock{g_.b, g_.heads, g_.s, first_sample(mb), coord_.tp * g_.heads,
                          g_.heads * g_.t}};
  return &att_dropout_;
}

cpu::HiddenBlock GptModel::block(int64_t mb, bool full) const {
  return cpu::HiddenBlock{g_.b, full ? g_.s : g_.tl, g_.h, first_sample(mb),
                          full ? 0 : seq_offset(), g_.s};
}

void GptModel::norm_forward(Tensor& out, Tensor& mean, Tensor& rstd, CFSpan inp, CFSpan weight,
                            CFSpan bias) {
  out = zeros(g_.b * g_.tl * g_.h);
  rstd = zeros(g_.b * g_.tl);
  if (g_.rmsnorm) {
    backend_.rmsnorm_forward(out, rstd, inp, weight, g_.b, g_.tl, g_.h);
    return;
  }
  mean = zeros(g_.b * g_.tl);
  backend_.layernorm_forward(out, mean, rstd, inp, weight, bias, g_.b, g_.tl, g_.h);
}

void GptModel::norm_backward(FSpan dinp, FSpan dweight, FSpan dbias, CFSpan dout, CFSpan inp,
                             CFSpan weight, const Tensor& mean, const Tensor& rstd) {
  if (g_.rmsnorm) {
    backend_.rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, g_.b, g_.tl, g_.h);
  } else {
    backend_.layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, g_.b, g_.tl,
                                g_.h);
  }
}

void GptModel::rope(FSpan out, CFSpan in, bool backward) {
  // q and k heads are adjacent in each row: [q (heads hd) | k (groups hd) | v].
  const int64_t rows = g_.b * g_.s, heads = g_.heads + g_.groups, width = heads * g_.hd;
  Tensor qk = zeros(rows * width), rotated = zeros(rows * width);
  backend_.copy_2d(qk, width, in, g_.qkv, width, rows);
  if (backward) {
    backend_.rope_backward(rotated, qk, g_.b, g_.s, heads, g_.hd, 0, cpu::kRotaryBase);
  } else {
    backend_.rope_forward(rotated, qk, g_.b, g_.s, heads, g_.hd, 0, cpu::kRotaryBase);
  }
  backend_.copy_2d(out, g_.qkv, rotated, width, width, rows);
}

void GptModel::unexpected(const Op& op, const std::string& what) const {
  throw InvalidArgument("executor: rank " + std::to_string(rank_) +
                        " op " + std::to_string(op.id) + " (" + prog_.label(op) + "): " + what);
}

// ---- dispatch ------------------------------------------------------------------------------------

void GptModel::run(const Op& op, const std::string& kernel, Role role) {
  const bool fwd = is_forward(op.phase);
  switch (role) {
    case Role::kEmbedding: return fwd ? embedding_forward(op) : embedding_backward(op);
    case Role::kEmbeddingDropout: return embedding_dropout(op);
    case Role::kInputLayerNorm:
    case Role::kQkv:
    case Role::kAttentionCore:
    case Role::kAttentionProjection:
    case Role::kAttentionResidual:
    case Role::kPostAttentionLayerNorm:
    case Role::kFc1:
    case Role::kGelu:
    case Role::kFc2:
    case Role::kMlpResidual:
      return fwd ? layer_forward(op, kernel, role) : layer_backward(op, kernel, role);
    case Role::kFinalLayerNorm:
    case Role::kLmHead:
    case Role::kCrossEntropyMax:
    case Role::kCrossEntropy:
      return fwd ? head_forward(op, kernel, role) : head_backward(op, kernel, role);
    default: unexpected(op, std::string("no kernel for role ") + to_string(role));
  }
}

// ---- embedding -----------------------------------------------------------------------------------

void GptModel::embedding_forward(const Op& op) {
  ChunkState& st = chunk(op.model_chunk, op.micro_batch);
  st.emb = zeros(g_.b * g_.s * g_.h);
  backend_.vocab_parallel_embedding_forward(
      st.emb, st.tokens, shard_.param(op.model_chunk, "embedding.word_embeddings.weight"), g_.b,
      g_.s, g_.h, g_.vstart, g_.vl, g_.vtotal);
}

/// After the TP reduce of the word embedding (reduce-scatter with SP): positions, then dropout.
void GptModel::embedding_dropout(const Op& op) {
  ChunkState& st = chunk(op.model_chunk, op.micro_batch);
  Tensor& e = reduced(st.emb, st.emb_rs);
  if (!g_.rope) {  // RoPE models rotate q and k in attention instead
    backend_.position_embedding_forward(
        e, shard_.param(op.model_chunk, "embedding.position_embeddings.weight"), g_.b, g_.tl,
        g_.h, seq_offset());
  }
  st.emb_out = zeros(g_.b * g_.tl * g_.h);
  backend_.bias_dropout_add_forward(st.emb_out, e, {}, {}, dropout(kSiteEmbedding, -1),
                                    block(op.micro_batch, false));
  st.emb.reset();
  st.emb_rs.reset();
}

void GptModel::embedding_backward(const Op& op) {
  ChunkState& st = chunk(op.model_chunk, op.micro_batch);
  // The gradient of the embedding output over the whole sequence (SP: all-gathered).
  const Tensor& d_out = g_.sp ? st.d_emb_full : chunk_input_grad(st, op.model_chunk);
  Tensor d_e = zeros(g_.b * g_.s * g_.h);
  backend_.bias_dropout_add_backward(d_e, {}, {}, d_out, dropout(kSiteEmbedding, -1),
                                     block(op.micro_batch, true));
  if (!g_.rope) {
    backend_.position_embedding_backward(
        shard_.grad(op.model_chunk, "embedding.position_embeddings.weight"), d_e, g_.b, g_.s,
        g_.h, 0);
  }
  backend_.vocab_parallel_embedding_backward(
      shard_.grad(op.model_chunk, "embedding.word_embeddings.weight"), d_e, st.tokens, g_.b, g_.s,
      g_.h, g_.vstart, g_.vl, g_.vtotal);
  st.d_emb_full.reset();
  if (!st.layers.empty()) st.layers.front() = LayerState();
}

// ---- transformer layer ---------------------------------------------------------------------------

/// The input of the first layer of a chunk (embedding output or received activation) or the
/// previous layer's output.
Tensor GptModel::take_layer_input(const Op& op) {
  ChunkState& st = chunk(op.model_chunk, op.micro_batch);
  const int64_t i = op.layer - first_layer(op.model_chunk);
  if (i > 0) return std::move(st.layers[static_cast<size_t>(i - 1)].out);
  if (vstage(op.model_chunk) == 0) return std::move(st.emb_out);
  return std::move(st.input);
}

/// The forward of one layer, Role by Role (between them the walk runs the TP collectives: the
/// SP all-gathers before QKV and FC1, the reduces after the projection and FC2).
void GptModel::layer_forward(const Op& op, const std::string& kernel, Role role) {
  LayerState& L = layer(op);
  const LayerParams& P = layer_params_.at(op.layer);
  const int64_t b = g_.b, s = g_.s, h = g_.h;
  const int64_t tl = g_.tl, hl = g_.hl, f = g_.f, heads = g_.heads;
  switch (role) {
    case Role::kInputLayerNorm:
      if (op.phase != Phase::kRecompute) L.in = take_layer_input(op);
      norm_forward(L.ln1, L.ln1_mean, L.ln1_rstd, L.in, P.ln1_w, P.ln1_b);
      return;
    case Role::kQkv:  // column-parallel
      L.qkv = zeros(b * s * g_.qkv);
      backend_.matmul_forward(L.qkv, g_.sp ? L.ln1_full : L.ln1, P.qkv_w, P.qkv_b, b, s, h, g_.qkv);
      L.ln1_full.reset();
      return;
    case Role::kAttentionCore: {
      if (kernel == "rope_fwd") {  // before the attention kernel; L.qkv stays unrotated
        L.qkv_rope = clone(L.qkv);
        rope(L.qkv_rope, L.qkv, /*backward=*/false);
        return;
      }
      const Tensor& qkv = g_.rope ? L.qkv_rope : L.qkv;
      L.attn = zeros(b * s * hl);
      L.att = zeros(b * heads * s * s);
      if (g_.gqa) {
        backend_.gqa_attention_forward(L.attn, L.att, qkv, b, s, heads, g_.groups, g_.hd);
      } else {
        L.preatt = zeros(b * heads * s * s);
        backend_.attention_forward(L.attn, L.preatt, L.att, qkv, b, s, hl, heads,
                                   attention_dropout(op.micro_batch, op.layer));
        L.preatt.reset();
      }
      // Selective recomputation (and evaluation) keeps no s x s scores.
      if ((op.phase == Phase::kForward && recompute_ == RecomputeGranularity::kSelective) ||
          !training_) {
        L.att.reset();
        L.qkv_rope.reset();
      }
      return;
    }
    case Role::kAttentionProjection:  // row-parallel: partial sums, reduced by the walk
      L.proj = zeros(b * s * h);
      backend_.matmul_forward(L.proj, L.attn, P.proj_w, {}, b, s, hl, h);
      return;
    case Role::kAttentionResidual: {
      Tensor y = std::move(reduced(L.proj, L.proj_rs));
      L.proj.reset();
      L.proj_rs.reset();
      L.resid1 = zeros(b * tl * h);
      backend_.bias_dropout_add_forward(L.resid1, y, P.proj_b, L.in,
                                        dropout(kSiteAttention, op.layer),
                                        block(op.micro_batch, false));
      return;
    }
    case Role::kPostAttentionLayerNorm:
      norm_forward(L.ln2, L.ln2_mean, L.ln2_rstd, L.resid1, P.ln2_w, P.ln2_b);
      return;
    case Role::kFc1:  // column-parallel
      L.fc1 = zeros(b * s * g_.fc1);
      backend_.matmul_forward(L.fc1, g_.sp ? L.ln2_full : L.ln2, P.fc1_w, P.fc1_b, b, s, h, g_.fc1);
      L.ln2_full.reset();
      return;
    case Role::kGelu:
      L.gelu = zeros(b * s * f);
      switch (g_.activation) {
        case Activation::kGelu: backend_.gelu_forward(L.gelu, L.fc1); break;
        case Activation::kSwiglu: backend_.swiglu_forward(L.gelu, L.fc1, b * s, f); break;
        case Activation::kSquaredRelu: backend_.squared_relu_forward(L.gelu, L.fc1); break;
      }
      return;
    case Role::kFc2:  // row-parallel
      L.fc2 = zeros(b * s * h);
      backend_.matmul_forward(L.fc2, L.gelu, P.fc2_w, {}, b, s, f, h);
      return;
    case Role::kMlpResidual: {
      Tensor y = std::move(reduced(L.fc2, L.fc2_rs));
      L.fc2.reset();
      L.fc2_rs.reset();
      L.out = zeros(b * tl * h);
      backend_.bias_dropout_add_forward(L.out, y, P.fc2_b, L.resid1, dropout(kSiteMlp, op.layer),
                                        block(op.micro_batch, false));
      // Full recomputation (and evaluation) keeps only the layer input.
      if ((op.phase == Phase::kForward && recompute_ == RecomputeGranularity::kFull) ||
          !training_) {
        Tensor in = std::move(L.in), out = std::move(L.out);
        L = LayerState();
        if (training_) L.in = std::move(in);
        L.out = std::move(out);
      }
      return;
    }
    default: unexpected(op, "not a layer-forward role");
  }
}

/// The gradient flowing into the last layer of a chunk: from the final LayerNorm (last virtual
/// stage) or received from the next stage.
Tensor GptModel::take_output_grad(const Op& op) {
  ChunkState& st = chunk(op.model_chunk, op.micro_batch);
  const int64_t i = op.layer - first_layer(op.model_chunk);
  if (i + 1 < num_layers(op.model_chunk)) return std::move(st.layers[static_cast<size_t>(i + 1)].d_in);
  if (is_last_vstage(op.model_chunk)) return std::move(st.d_last);
  return std::move(st.d_output);
}

/// The backward of one layer, Role by Role in reverse order; the linear layers run their data
/// gradient ("gemm_dgrad") and weight gradient ("gemm_wgrad") as separate kernels, so that the
/// walk can overlap the async TP reduce of the former with the latter.
void GptModel::layer_backward(const Op& op, const std::string& kernel, Role role) {
  LayerState& L = layer(op);
  const LayerParams& P = layer_params_.at(op.layer);
  const LayerParams& G = layer_grads_.at(op.layer);
  const int64_t b = g_.b, s = g_.s, h = g_.h;
  const int64_t tl = g_.tl, hl = g_.hl, f = g_.f, heads = g_.heads;
  const bool dgrad = kernel == "gemm_dgrad", wgrad = kernel == "gemm_wgrad";
  auto bad_kernel = [&] { unexpected(op, "unexpected kernel " + kernel); };
  switch (role) {
    case Role::kMlpResidual: {
      Tensor d_out = take_output_grad(op);
      L.d_resid1 = zeros(b * tl * h);
      L.d_branch = zeros(b * tl * h);
      backend_.bias_dropout_add_backward(L.d_branch, G.fc2_b, L.d_resid1, d_out,
                                         dropout(kSiteMlp, op.layer), block(op.micro_batch, false));
      return;
    }
    case Role::kFc2:
      if (dgrad) {
        L.d_gelu = zeros(b * s * f);
        backend_.matmul_backward_data(L.d_gelu, g_.sp ? L.d_branch_full : L.d_branch, P.fc2_w, b,
                                      s, f, h);
      } else if (wgrad) {
        backend_.matmul_backward_weight(G.fc2_w, {}, g_.sp ? L.d_branch_full : L.d_branch, L.gelu,
                                        b, s, f, h);
        L.d_branch.reset();
        L.d_branch_full.reset();
        L.gelu.reset();
      } else {
        bad_kernel();
      }
      return;
    case Role::kGelu:
      L.d_fc1 = zeros(b * s * g_.fc1);
      switch (g_.activation) {
        case Activation::kGelu: backend_.gelu_backward(L.d_fc1, L.fc1, L.d_gelu); break;
        case Activation::kSwiglu:
          backend_.swiglu_backward(L.d_fc1, L.d_gelu, L.fc1, b * s, f);
          break;
        case Activation::kSquaredRelu:
          backend_.squared_relu_backward(L.d_fc1, L.fc1, L.d_gelu);
          break;
      }
      L.d_gelu.reset();
      L.fc1.reset();
      return;
    case Role::kFc1:
      if (dgrad) {
        L.d_ln_full = zeros(b * s * h);
        backend_.matmul_backward_data(L.d_ln_full, L.d_fc1, P.fc1_w, b, s, h, g_.fc1);
      } else if (wgrad) {
        backend_.matmul_backward_weight(G.fc1_w, G.fc1_b, L.d_fc1, g_.sp ? L.ln2_full : L.ln2, b,
                                        s, h, g_.fc1);
        L.d_fc1.reset();
        L.ln2_full.reset();
      } else {
        bad_kernel();
      }
      return;
    case Role::kPostAttentionLayerNorm:
      norm_backward(L.d_resid1, G.ln2_w, G.ln2_b, reduced(L.d_ln_full, L.d_ln), L.resid1, P.ln2_w,
                    L.ln2_mean, L.ln2_rstd);
      L.d_ln_full.reset();
      L.d_ln.reset();
      L.ln2.reset();
      return;
    case Role::kAttentionResidual:
      L.d_in = zeros(b * tl * h);
      L.d_branch = zeros(b * tl * h);
      backend_.bias_dropout_add_backward(L.d_branch, G.proj_b, L.d_in, L.d_resid1,
                                         dropout(kSiteAttention, op.layer),
                                         block(op.micro_batch, false));
      L.d_resid1.reset();
      L.resid1.reset();
      return;
    case Role::kAttentionProjection:
      if (dgrad) {
        L.d_attn = zeros(b * s * hl);
        backend_.matmul_backward_data(L.d_attn, g_.sp ? L.d_branch_full : L.d_branch, P.proj_w, b,
                                      s, hl, h);
      } else if (wgrad) {
        backend_.matmul_backward_weight(G.proj_w, {}, g_.sp ? L.d_branch_full : L.d_branch,
                                        L.attn, b, s, hl, h);
        L.d_branch.reset();
        L.d_branch_full.reset();
      } else {
        bad_kernel();
      }
      return;
    case Role::kAttentionCore: {
      if (kernel == "rope_bwd") {  // after the attention kernel: d(rotated q, k) -> d(q, k)
        rope(L.d_qkv, L.d_qkv, /*backward=*/true);
        return;
      }
      if (L.att.empty()) unexpected(op, "attention probabilities were not kept or recomputed");
      const Tensor& qkv = g_.rope ? L.qkv_rope : L.qkv;
      L.d_qkv = zeros(b * s * g_.qkv);
      if (g_.gqa) {
        backend_.gqa_attention_backward(L.d_qkv, L.d_attn, qkv, L.att, b, s, heads, g_.groups,
                                        g_.hd);
      } else {
        backend_.attention_backward(L.d_qkv, L.d_attn, qkv, L.att, b, s, hl, heads,
                                    attention_dropout(op.micro_batch, op.layer));
      }
      L.d_attn.reset();
      L.att.reset();
      L.attn.reset();
      L.qkv_rope.reset();
      return;
    }
    case Role::kQkv:
      if (dgrad) {
        L.d_ln_full = zeros(b * s * h);
        backend_.matmul_backward_data(L.d_ln_full, L.d_qkv, P.qkv_w, b, s, h, g_.qkv);
      } else if (wgrad) {
        backend_.matmul_backward_weight(G.qkv_w, G.qkv_b, L.d_qkv, g_.sp ? L.ln1_full : L.ln1, b,
                                        s, h, g_.qkv);
        L.d_qkv.reset();
        L.ln1_full.reset();
        L.qkv.reset();
      } else {
        bad_kernel();
      }
      return;
    case Role::kInputLayerNorm: {
      norm_backward(L.d_in, G.ln1_w, G.ln1_b, reduced(L.d_ln_full, L.d_ln), L.in, P.ln1_w,
                    L.ln1_mean, L.ln1_rstd);
      Tensor d_in = std::move(L.d_in);
      L = LayerState();
      L.d_in = std::move(d_in);
      return;
    }
    default: unexpected(op, "not a layer-backward role");
  }
}

// ---- final LayerNorm, LM head, cross-entropy -----------------------------------------------------

void GptModel::head_forward(const Op& op, const std::string& kernel, Role role) {
  ChunkState& st = chunk(op.model_chunk, op.micro_batch);
  const int64_t rows = g_.b * g_.s;
  switch (role) {
    case Role::kFinalLayerNorm:
      norm_forward(st.lnf, st.lnf_mean, st.lnf_rstd, chunk_output(st, op.model_chunk),
                   shard_.param(op.model_chunk, "final_layernorm.weight"),
                   g_.rmsnorm ? std::span<float>()
                              : shard_.param(op.model_chunk, "final_layernorm.bias"));
      return;
    case Role::kLmHead: {
      st.logits = zeros(rows * g_.vl);
      backend_.matmul_forward(st.logits, g_.sp ? st.lnf_full : st.lnf,
                              head_weight(op.model_chunk, false), {}, g_.b, g_.s, g_.h, g_.vl);
      st.lnf_full.reset();
      // Padded vocabulary entries (ids >= V) take no part in the softmax.
      const int64_t valid = std::clamp<int64_t>(g_.vocab - g_.vstart, 0, g_.vl);
      if (valid < g_.vl) {
        backend_.fill_2d(st.logits.span().subspan(static_cast<size_t>(valid)), g_.vl,
                         g_.vl - valid, rows, -std::numeric_limits<float>::infinity());
      }
      return;
    }
    case Role::kCrossEntropyMax:
      st.lmax = zeros(rows);
      backend_.vocab_parallel_logits_max(st.lmax, st.logits, g_.b, g_.s, g_.vl);
      return;
    case Role::kCrossEntropy:
      st.sum_exp = zeros(rows);
      st.target = zeros(rows);
      backend_.vocab_parallel_sum_exp(st.sum_exp, st.target, st.logits, st.lmax, st.labels, g_.b,
                                      g_.s, g_.vstart, g_.vl, g_.vtotal);
      return;
    default: unexpected(op, "not a head-forward role (" + kernel + ")");
  }
}

/// Adds the micro-batch's token losses to the iteration's total (once, on TP rank 0).
void GptModel::count_loss(ChunkState& st) {
  if (st.loss_counted) return;
  st.loss_counted = true;
  const int64_t rows = g_.b * g_.s;
  Tensor losses = zeros(rows);
  backend_.vocab_parallel_cross_entropy_loss(losses, st.sum_exp, st.lmax, st.target, g_.b, g_.s);
  if (coord_.tp != 0) return;
  host_losses_.assign(static_cast<size_t>(rows), 0.0f);
  backend_.download(host_losses_, losses);
  for (float l : host_losses_) loss_sum_ += l;
  loss_tokens_ += rows;
}

void GptModel::count_pending_losses() {
  for (auto& [key, st] : chunks_) {
    if (is_last_vstage(key.first) && !st.sum_exp.empty()) count_loss(st);
  }
}

void GptModel::head_backward(const Op& op, const std::string& kernel, Role role) {
  ChunkState& st = chunk(op.model_chunk, op.micro_batch);
  const int64_t rows = g_.b * g_.s;
  const bool dgrad = kernel == "gemm_dgrad", wgrad = kernel == "gemm_wgrad";
  switch (role) {
    case Role::kCrossEntropy: {
      count_loss(st);
      // Mean over the global batch's tokens: each token weighs 1 / (b s m DP).
      const float w = static_cast<float>(1.0 / static_cast<double>(g_.b * g_.s * g_.m * g_.dp));
      Tensor dlosses = zeros(rows);
      backend_.fill_2d(dlosses, rows, rows, 1, w);
      st.d_logits = zeros(rows * g_.vl);
      backend_.vocab_parallel_cross_entropy_backward(st.d_logits, dlosses, st.logits, st.lmax,
                                                     st.sum_exp, st.labels, g_.b, g_.s, g_.vstart,
                                                     g_.vl, g_.vtotal);
      st.logits.reset();
      return;
    }
    case Role::kLmHead:
      if (dgrad) {
        st.d_lnf_full = zeros(rows * g_.h);
        backend_.matmul_backward_data(st.d_lnf_full, st.d_logits,
                                      head_weight(op.model_chunk, false), g_.b, g_.s, g_.h, g_.vl);
      } else if (wgrad) {
        backend_.matmul_backward_weight(head_weight(op.model_chunk, true), {}, st.d_logits,
                                        g_.sp ? st.lnf_full : st.lnf, g_.b, g_.s, g_.h, g_.vl);
        st.d_logits.reset();
        st.lnf_full.reset();
      } else {
        unexpected(op, "unexpected kernel " + kernel);
      }
      return;
    case Role::kFinalLayerNorm:
      st.d_last = zeros(g_.b * g_.tl * g_.h);
      norm_backward(st.d_last, shard_.grad(op.model_chunk, "final_layernorm.weight"),
                    g_.rmsnorm ? std::span<float>()
                               : shard_.grad(op.model_chunk, "final_layernorm.bias"),
                    reduced(st.d_lnf_full, st.d_lnf), chunk_output(st, op.model_chunk),
                    shard_.param(op.model_chunk, "final_layernorm.weight"), st.lnf_mean,
                    st.lnf_rstd);
      st.d_lnf_full.reset();
      st.d_lnf.reset();
      st.lnf.reset();
      return;
    default: unexpected(op, "not a head-backward role");
  }
}

}  // namespace traintwin::exec
