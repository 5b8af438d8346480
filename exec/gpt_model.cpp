// The GPT model's math (exec/gpt_model.hpp), in files by concept like llm.c's layers:
//   exec/gpt_model.cpp            construction, geometry and per-(chunk, micro-batch) state, the
//                                 dispatch of an op by Role, the embedding, the final LayerNorm,
//                                 LM head and cross-entropy
//   exec/gpt_model_layer.cpp      the transformer layer's forward and backward, Role by Role
//   exec/gpt_model_attention.cpp  blockwise attention: flash, ring attention and all-gather CP
//   exec/gpt_model_moe.cpp        the MoE layer: router, permutation, experts, unpermutation
//   exec/gpt_model_internal.hpp   the dropout sites and helpers these files share
// This file: construction, state, dispatch, embedding and head. Next in the flow (after the
// embedding): exec/gpt_model_layer.cpp, the transformer layers.
#include "exec/gpt_model.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "core/error.hpp"
#include "core/schedule.hpp"
#include "exec/counter_rng.hpp"
#include "exec/cpu/rope.hpp"
#include "exec/gpt_model_internal.hpp"

namespace traintwin::exec {

GptModel::GptModel(const Program& program, const RankProgram& rank, ModelShard& shard,
                   Backend& backend, const TrainingHyperparameters& hyper)
    : prog_(program),
      rank_(rank.rank),
      coord_(rank.coord),
      shard_(shard),
      backend_(backend),
      linear_(backend, program.scenario.training.precision),
      hyper_(hyper) {
  const Scenario& sc = prog_.scenario;
  g_.b = sc.training.micro_batch_size;
  g_.cp = sc.parallel.context_parallel_size;
  g_.s_full = sc.model.seq_length;
  g_.s = g_.s_full / g_.cp;
  seq_ = CpSequence(g_.s_full, g_.cp, coord_.cp);
  g_.blockwise = g_.cp > 1 || stores_no_scores(sc.training.attention_backend);
  g_.fused = sc.training.attention_backend == AttentionBackend::kFused;  // CP 1 (the Executor)
  g_.rotary_base = sc.model.rotary_base;
  all_gather_ = g_.cp > 1 && sc.parallel.cp_comm_type == CpCommType::kAllGather;
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
  g_.sp = sc.parallel.sequence_parallel;
  g_.tl = g_.sp ? g_.s / g_.t : g_.s;
  g_.p = sc.parallel.pipeline_model_parallel_size;
  g_.v = sc.parallel.virtual_pipeline_model_parallel_size;
  g_.m = sc.num_micro_batches();
  for (int64_t c = 0; c < g_.v; ++c) {
    chunk_layers_.push_back(chunk_layers(sc, coord_.pp, c));
    const PipelineScheduleKind kind = sc.parallel.pipeline_schedule;
    vstage_.push_back(virtual_stage_of(kind, g_.p, coord_.pp, c));
    embeds_.push_back(traintwin::takes_embedding(kind, g_.p, g_.v, vstage_.back()));
    loss_.push_back(traintwin::computes_loss(kind, g_.p, g_.v, vstage_.back()));
    if (embeds_.back()) embedding_chunk_ = c;
  }
  g_.dp = sc.parallel.data_parallel_size;
  g_.vocab = sc.model.vocab_size;
  g_.vl = shard_.vocab_local();
  g_.vstart = shard_.vocab_start();
  g_.vtotal = g_.vl * g_.t;
  recompute_ = sc.training.recompute_granularity;
  split_ = splits_backward(sc.parallel.pipeline_schedule);
  grad_fusion_ = sc.training.gradient_accumulation_fusion;
  if (sc.model.is_moe()) {
    g_.experts = sc.model.num_moe_experts;
    g_.topk = sc.model.moe_router_topk;
    g_.ep = sc.parallel.expert_model_parallel_size;
    g_.el = shard_.local_experts();
    g_.fe = sc.model.moe_expert_ffn() / sc.parallel.expert_tp();
    g_.fc1e = g_.activation == Activation::kSwiglu ? 2 * g_.fe : g_.fe;
    g_.fs = sc.model.moe_shared_expert_intermediate_size / g_.t;
    g_.fc1s = g_.activation == Activation::kSwiglu ? 2 * g_.fs : g_.fs;
  }

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
        const bool moe = moe_layer(l), dense = !moe, shared = moe && g_.fs > 0;
        LayerParams& lp = (grad ? layer_grads_ : layer_params_)[l];
        lp = LayerParams{
            view("input_layernorm.weight"),           view("input_layernorm.bias", nb),
            view("self_attention.linear_qkv.weight"), view("self_attention.linear_qkv.bias", lb),
            view("self_attention.linear_proj.weight"),
            view("self_attention.linear_proj.bias", lb),
            view("pre_mlp_layernorm.weight"),         view("pre_mlp_layernorm.bias", nb),
            dense ? view("mlp.linear_fc1.weight") : view("mlp.shared_experts.linear_fc1.weight", shared),
            view("mlp.linear_fc1.bias", lb && dense),
            dense ? view("mlp.linear_fc2.weight") : view("mlp.shared_experts.linear_fc2.weight", shared),
            view("mlp.linear_fc2.bias", lb && dense)};
        if (moe) {
          lp.router_w = view("mlp.router.weight");
          // The local experts' weights are adjacent in the shard (model_shard.hpp): one array.
          auto experts = [&](const char* which) {
            const int64_t x0 = shard_.first_local_expert();
            const std::string first = pre + "mlp.experts." + which + ".weight" + std::to_string(x0);
            const std::string last =
                pre + "mlp.experts." + which + ".weight" + std::to_string(x0 + g_.el - 1);
            std::span<float> a = grad ? shard_.grad(chunk, first) : shard_.param(chunk, first);
            std::span<float> b = grad ? shard_.grad(chunk, last) : shard_.param(chunk, last);
            return std::span<float>(a.data(), static_cast<size_t>(b.data() + b.size() - a.data()));
          };
          lp.experts_fc1_w = experts("linear_fc1");
          lp.experts_fc2_w = experts("linear_fc2");
        }
      }
    }
  }
}

void GptModel::begin(int64_t iteration, const MicroBatchSource& data, bool training) {
  iteration_ = iteration;
  data_ = &data;
  training_ = training;
  linear_.begin_iteration();
  chunks_.clear();
  loss_sum_ = 0;
  loss_tokens_ = 0;
  aux_loss_sum_ = 0;
  aux_loss_terms_ = 0;
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
    st.mb = mb;
    st.layers.resize(static_cast<size_t>(num_layers(chunk)));
    if (takes_embedding(chunk) || computes_loss(chunk)) {
      // The micro-batch's whole sequences; under CP this rank keeps its two chunks of each.
      const auto n = static_cast<size_t>(g_.b * g_.s_full);
      host_tokens_.assign(n, 0);
      host_labels_.assign(n, 0);
      (*data_)(mb, host_tokens_, host_labels_);
      if (g_.cp > 1) {
        std::vector<int32_t> t(static_cast<size_t>(g_.b * g_.s)), l(t.size());
        seq_.slice<int32_t>(t, host_tokens_, g_.b);
        seq_.slice<int32_t>(l, host_labels_, g_.b);
        host_tokens_ = std::move(t);
        host_labels_ = std::move(l);
      }
      st.tokens = DeviceBuffer<int32_t>(backend_, g_.b * g_.s);
      st.labels = DeviceBuffer<int32_t>(backend_, g_.b * g_.s);
      backend_.upload(st.tokens, host_tokens_);
      backend_.upload(st.labels, host_labels_);
    }
  }
  return it->second;
}

int64_t GptModel::chunk_of_vstage(int64_t vs) const {
  const auto it = std::find(vstage_.begin(), vstage_.end(), vs);
  return it == vstage_.end() ? -1 : it - vstage_.begin();
}

Tensor& GptModel::chunk_output(ChunkState& st, int64_t chunk) {
  if (!st.layers.empty()) return st.layers.back().out;
  return takes_embedding(chunk) ? st.emb_out : chunk_input(st, chunk);
}

Tensor& GptModel::chunk_input_grad(ChunkState& st, int64_t chunk) {
  if (!st.layers.empty()) return st.layers.front().d_in;
  return computes_loss(chunk) ? st.d_last : chunk_output_grad(st, chunk);
}

Tensor& GptModel::chunk_input(ChunkState& st, int64_t chunk) {
  // The V's turn (zb-v, dualpipev): virtual stages p - 1 and p both on rank p - 1. Not between
  // DualPipe's directions (virtual stage p takes the embedding: p - 1's output is the loss's).
  if (st.input.empty() && !takes_embedding(chunk)) {
    const int64_t prev = chunk_of_vstage(vstage(chunk) - 1);
    if (prev >= 0) {
      const Tensor& out = chunk_output(this->chunk(prev, st.mb), prev);
      if (out.empty()) local_handover_missing("output", prev, chunk, st.mb);
      st.input = clone(out);
    }
  }
  return st.input;
}

Tensor& GptModel::chunk_output_grad(ChunkState& st, int64_t chunk) {
  if (st.d_output.empty() && !computes_loss(chunk)) {
    const int64_t next = chunk_of_vstage(vstage(chunk) + 1);
    if (next >= 0) {
      st.d_output = take_chunk_input_grad(this->chunk(next, st.mb), next);
      if (st.d_output.empty()) local_handover_missing("input gradient", next, chunk, st.mb);
    }
  }
  return st.d_output;
}

void GptModel::local_handover_missing(const char* what, int64_t from, int64_t to,
                                      int64_t mb) const {
  throw InvalidArgument("executor: rank " + std::to_string(rank_) + ": model chunk " +
                        std::to_string(to) + " (virtual stage " + std::to_string(vstage(to)) +
                        ") needs the " + what + " of chunk " + std::to_string(from) +
                        " (virtual stage " + std::to_string(vstage(from)) + ") for micro-batch " +
                        std::to_string(mb) + ", which the Program has not computed yet");
}

Tensor GptModel::take_chunk_input_grad(ChunkState& st, int64_t chunk) {
  Tensor grad = std::move(chunk_input_grad(st, chunk));
  if (!st.layers.empty() && !split_) st.layers.front() = LayerState();
  return grad;
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

/// The LM head's weight on a loss stage: its own (untied) weight or the word embedding's copy
/// (ModelShard::head_has_own_weight), else the word embedding itself, in this rank's chunk that
/// takes the embedding (chunk 0: PP 1, or the V placement's last stage on rank 0; DualPipe: the
/// other chunk of the end rank, the copy of stage 0).
std::span<float> GptModel::head_weight(int64_t chunk, bool grad) {
  if (shard_.head_has_own_weight()) {
    return grad ? shard_.grad(chunk, "output_layer.weight")
                : shard_.param(chunk, "output_layer.weight");
  }
  const int64_t emb = std::max<int64_t>(embedding_chunk_, 0);  // ModelShard names it if absent
  return grad ? shard_.grad(emb, "embedding.word_embeddings.weight")
              : shard_.param(emb, "embedding.word_embeddings.weight");
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
      cpu::AttentionBlock{g_.b, g_.heads, g_.s_full, first_sample(mb), coord_.tp * g_.heads,
                          g_.heads * g_.t}};
  return &att_dropout_;
}

cpu::HiddenBlock GptModel::block(int64_t mb, bool full) const {
  return cpu::HiddenBlock{g_.b, full ? g_.s : g_.tl, g_.h, first_sample(mb),
                          full ? 0 : seq_offset(), g_.s};
}

namespace {
/// Elements [offset, offset + n) of `x` (an empty span stays empty).
template <typename T>
std::span<T> part(std::span<T> x, int64_t offset, int64_t n) {
  if (x.empty()) return x;
  return x.subspan(static_cast<size_t>(offset), static_cast<size_t>(n));
}
}  // namespace

void GptModel::hidden_pieces(int64_t mb, bool full, const HiddenPieceFn& f) const {
  if (g_.cp == 1) return f(0, g_.b * (full ? g_.s : g_.tl) * g_.h, block(mb, full));
  const int64_t rows = full ? g_.s : g_.tl, first = full ? 0 : seq_offset(), h = g_.h;
  for (int64_t b = 0; b < g_.b; ++b) {
    for (const CpSequence::Run& r : seq_.runs(first, rows)) {
      f((b * rows + r.local - first) * h, r.length * h,
        cpu::HiddenBlock{1, r.length, h, first_sample(mb) + b, r.global, g_.s_full});
    }
  }
}

void GptModel::dropout_add_forward(FSpan out, CFSpan inp, CFSpan bias, CFSpan residual,
                                   const cpu::DropoutParams& params, int64_t mb, bool full) {
  hidden_pieces(mb, full, [&](int64_t at, int64_t n, const cpu::HiddenBlock& k) {
    backend_.bias_dropout_add_forward(part(out, at, n), part(inp, at, n), bias,
                                      part(residual, at, n), params, k);
  });
}

void GptModel::dropout_add_backward(FSpan dinp, FSpan dbias, FSpan dresidual, CFSpan dout,
                                    const cpu::DropoutParams& params, int64_t mb, bool full) {
  hidden_pieces(mb, full, [&](int64_t at, int64_t n, const cpu::HiddenBlock& k) {
    backend_.bias_dropout_add_backward(part(dinp, at, n), dbias, part(dresidual, at, n),
                                       part(dout, at, n), params, k);
  });
}

void GptModel::positions_forward(FSpan e, int64_t chunk, int64_t mb) {
  const std::span<float> wpe = shard_.param(chunk, "embedding.position_embeddings.weight");
  hidden_pieces(mb, false, [&](int64_t at, int64_t n, const cpu::HiddenBlock& k) {
    backend_.position_embedding_forward(part(e, at, n), wpe, k.batch, k.seq_local, g_.h,
                                        k.seq_offset);
  });
}

void GptModel::positions_backward(CFSpan d_e, int64_t chunk, int64_t mb) {
  const std::span<float> dwpe = shard_.grad(chunk, "embedding.position_embeddings.weight");
  hidden_pieces(mb, true, [&](int64_t at, int64_t n, const cpu::HiddenBlock& k) {
    backend_.position_embedding_backward(dwpe, part(d_e, at, n), k.batch, k.seq_local, g_.h,
                                         k.seq_offset);
  });
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
    backend_.rope_backward(rotated, qk, g_.b, g_.s, heads, g_.hd, seq_, g_.rotary_base);
  } else {
    backend_.rope_forward(rotated, qk, g_.b, g_.s, heads, g_.hd, seq_, g_.rotary_base);
  }
  backend_.copy_2d(out, g_.qkv, rotated, width, width, rows);
}

void GptModel::unexpected(const Op& op, const std::string& what) const {
  throw InvalidArgument("executor: rank " + std::to_string(rank_) +
                        " op " + std::to_string(op.id) + " (" + prog_.label(op) + "): " + what);
}

// ---- dispatch ------------------------------------------------------------------------------------

int64_t GptModel::mlp_width(int64_t layer) const { return moe_layer(layer) ? g_.fs : g_.f; }
int64_t GptModel::fc1_width(int64_t layer) const { return moe_layer(layer) ? g_.fc1s : g_.fc1; }

std::span<float> GptModel::expert_slice(std::span<float> all, int64_t experts, int64_t j) {
  if (j < 0) return all;
  const size_t n = all.size() / static_cast<size_t>(experts);
  return all.subspan(static_cast<size_t>(j) * n, n);
}

void GptModel::run(const Op& op, const std::string& kernel, Role role, int64_t expert) {
  const bool fwd = is_forward(op.phase);
  switch (role) {
    case Role::kRouter:
    case Role::kMoePermute:
    case Role::kMoeDispatch:
    case Role::kMoeCombine:
    case Role::kExpertFc1:
    case Role::kExpertActivation:
    case Role::kExpertFc2:
    case Role::kMoeUnpermute:
      return fwd ? moe_forward(op, kernel, role, expert)
                 : moe_backward(op, kernel, role, expert);
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
    case Role::kGradAccumulate: return grad_accumulate(op);
    default: unexpected(op, std::string("no kernel for role ") + to_string(role));
  }
}

const LayerParams& GptModel::grads_of(const Op& op) {
  if (grad_fusion_) return layer_grads_.at(op.layer);
  LayerState& L = layer(op);
  if (L.param_grad.empty()) {
    // param.grad of this micro-batch: a zeroed tensor per gradient view of the layer, in the
    // order of LayerParams' members (an empty view stays empty).
    const LayerParams& main = layer_grads_.at(op.layer);
    LayerParams& v = L.param_grad_views;
    for (auto member : kLayerParamMembers) {
      const std::span<float> m = main.*member;
      if (m.empty()) {
        v.*member = {};
        continue;
      }
      L.param_grad.push_back(zeros(static_cast<int64_t>(m.size())));
      v.*member = L.param_grad.back().span();
    }
  }
  return L.param_grad_views;
}

void GptModel::grad_accumulate(const Op& op) {
  if (grad_fusion_) unexpected(op, "grad_accumulate under gradient_accumulation_fusion");
  LayerState& L = layer(op);
  if (L.param_grad.empty()) unexpected(op, "grad_accumulate before the layer's backward");
  const LayerParams& main = layer_grads_.at(op.layer);
  for (auto member : kLayerParamMembers) {
    const std::span<float> m = main.*member;
    if (!m.empty()) backend_.add_in_place(m, L.param_grad_views.*member);
  }
  L.param_grad.clear();  // param.grad = None
  L.param_grad_views = {};
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
  if (!g_.rope) positions_forward(e, op.model_chunk, op.micro_batch);  // RoPE: in attention
  st.emb_out = zeros(g_.b * g_.tl * g_.h);
  dropout_add_forward(st.emb_out, e, {}, {}, dropout(kSiteEmbedding, -1), op.micro_batch, false);
  st.emb.reset();
  st.emb_rs.reset();
}

void GptModel::embedding_backward(const Op& op) {
  ChunkState& st = chunk(op.model_chunk, op.micro_batch);
  // The gradient of the embedding output over the whole sequence (SP: all-gathered).
  const Tensor& d_out = g_.sp ? st.d_emb_full : chunk_input_grad(st, op.model_chunk);
  Tensor d_e = zeros(g_.b * g_.s * g_.h);
  dropout_add_backward(d_e, {}, {}, d_out, dropout(kSiteEmbedding, -1), op.micro_batch, true);
  if (!g_.rope) positions_backward(d_e, op.model_chunk, op.micro_batch);
  backend_.vocab_parallel_embedding_backward(
      shard_.grad(op.model_chunk, "embedding.word_embeddings.weight"), d_e, st.tokens, g_.b, g_.s,
      g_.h, g_.vstart, g_.vl, g_.vtotal);
  st.d_emb_full.reset();
  if (!st.layers.empty()) st.layers.front() = LayerState();
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
      linear_.forward(st.logits, g_.sp ? st.lnf_full : st.lnf, head_weight(op.model_chunk, false),
                      {}, g_.b, g_.s, g_.h, g_.vl);
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
    if (computes_loss(key.first) && !st.sum_exp.empty()) count_loss(st);
  }
}

void GptModel::head_backward(const Op& op, const std::string& kernel, Role role) {
  ChunkState& st = chunk(op.model_chunk, op.micro_batch);
  const int64_t rows = g_.b * g_.s;
  const bool dgrad = kernel == "gemm_dgrad", wgrad = kernel == "gemm_wgrad";
  switch (role) {
    case Role::kCrossEntropy: {
      count_loss(st);
      // Mean over the global batch's tokens: each token weighs 1 / (b s m DP) (s the whole
      // sequence: a CP rank holds s / CP of each sample's tokens).
      const float w =
          static_cast<float>(1.0 / static_cast<double>(g_.b * g_.s_full * g_.m * g_.dp));
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
        linear_.backward_data(st.d_lnf_full, st.d_logits, head_weight(op.model_chunk, false), g_.b,
                              g_.s, g_.h, g_.vl);
      } else if (wgrad) {
        linear_.backward_weight(head_weight(op.model_chunk, true), {}, st.d_logits,
                                g_.sp ? st.lnf_full : st.lnf, g_.b, g_.s, g_.h, g_.vl);
        st.d_logits.reset();
        st.lnf_full.reset();
        if (split_) st.lnf.reset();
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
      if (!split_) st.lnf.reset();  // else the LM head's W step reads it
      return;
    default:
      unexpected(op, "not a head-backward role");
  }
}

}  // namespace traintwin::exec
