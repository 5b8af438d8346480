// The GPT model's math; see gpt_model.hpp.
#include "exec/gpt_model.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>

#include "core/error.hpp"
#include "exec/counter_rng.hpp"
#include "exec/cpu/moe_router.hpp"
#include "exec/cpu/rope.hpp"

#include <memory>

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
  g_.cp = sc.parallel.context_parallel_size;
  g_.s_full = sc.model.seq_length;
  g_.s = g_.s_full / g_.cp;
  seq_ = CpSequence(g_.s_full, g_.cp, coord_.cp);
  g_.blockwise = g_.cp > 1 || sc.training.attention_backend == AttentionBackend::kFlash;
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
  for (int64_t c = 0; c < g_.v; ++c) chunk_layers_.push_back(chunk_layers(sc, coord_.pp, c));
  g_.dp = sc.parallel.data_parallel_size;
  g_.vocab = sc.model.vocab_size;
  g_.vl = shard_.vocab_local();
  g_.vstart = shard_.vocab_start();
  g_.vtotal = g_.vl * g_.t;
  recompute_ = sc.training.recompute_granularity;
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
    st.layers.resize(static_cast<size_t>(num_layers(chunk)));
    if (vstage(chunk) == 0 || is_last_vstage(chunk)) {
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

// ---- blockwise attention: flash and ring attention (context parallelism) -------------------------
// Flash (CP = 1): one block, the local queries against the local keys. Ring attention
// (Megatron-Core cp_comm_type p2p; Transformer Engine's AttnFuncWithCPAndKVP2P): at ring step i
// this CP rank holds the K/V block of CP rank (r - i) mod CP — step 0 its own, each later one
// received by the ring_exchange op issued before the previous step — and attends its queries to
// it by their global positions (a causal prefix of the block's keys), merging the block's output
// into the running one by log-sum-exp. The backward recirculates K/V the same way; the dK/dV of
// the block held at step i >= 1 goes to the next rank, which holds that block at step i + 1 and
// adds its own part, until after CP - 1 hops the sum of the other ranks' parts reaches the
// block's owner and is added to the owner's step-0 part. The Program's op order
// (core/rank_lowering_layer.cpp attention_core) fixes the sequence: forward [kv x0] b0 [kv x1]
// b1+merge ... ; backward [kv x0] b0 [kv x1] b1 [dkv x1] [kv x2] b2 [dkv x2] ... b(CP-1)
// [dkv x(CP-1)].
// cp_comm_type all_gather (Megatron-Core's all-gather CP): K/V of every CP rank all-gathered
// before the CP blocks (block i = CP rank i's K/V, merged at once: the Program lists no merge
// kernel), and in the backward each block's dK/dV reduce-scattered onto its owner.

CpSequence GptModel::ring_source(int64_t step) const {
  if (all_gather_) return CpSequence(g_.s_full, g_.cp, step);  // the gathered blocks in CP order
  return CpSequence(g_.s_full, g_.cp, ((coord_.cp - step) % g_.cp + g_.cp) % g_.cp);
}

cpu::BlockAttentionShape GptModel::block_shape() const {
  return cpu::BlockAttentionShape{g_.b, g_.s, g_.s, g_.heads, g_.groups, g_.hd};
}

/// Packs the (rotated) queries and the local K/V block from the QKV rows, once per pass.
void GptModel::pack_ring_inputs(LayerState& L) {
  if (!L.kv_steps.empty()) return;
  const Tensor& qkv = g_.rope ? L.qkv_rope : L.qkv;
  if (qkv.empty()) throw InvalidArgument("executor: attention inputs were not kept or recomputed");
  const int64_t rows = g_.b * g_.s, qw = g_.heads * g_.hd, kvw = 2 * g_.groups * g_.hd;
  L.q = zeros(rows * qw);
  backend_.copy_2d(L.q, qw, qkv, g_.qkv, qw, rows);
  L.kv_steps.push_back(zeros(rows * kvw));
  backend_.copy_2d(L.kv_steps[0], kvw, qkv.span().subspan(static_cast<size_t>(qw)), g_.qkv, kvw,
                   rows);
}

void GptModel::blockwise_forward(const Op& op, LayerState& L, bool merge) {
  const int64_t rows = g_.b * g_.s;
  const int64_t i = L.ring_step;
  auto merge_block = [&] {
    if (i == 0 || L.block_out.empty()) unexpected(op, "ring attention merge without a block");
    backend_.attention_merge(L.attn, L.lse, L.block_out, L.block_lse, g_.b, g_.s, g_.heads, g_.hd);
    L.block_out.reset();
    L.block_lse.reset();
  };
  if (merge) {
    merge_block();
  } else {
    if (i >= g_.cp) unexpected(op, "more ring attention blocks than CP ranks");
    pack_ring_inputs(L);
    if (static_cast<int64_t>(L.kv_steps.size()) <= i || L.kv_steps[static_cast<size_t>(i)].empty()) {
      unexpected(op, "the K/V block of ring step " + std::to_string(i) + " has not arrived");
    }
    const cpu::AttentionProbabilityDropout* drop = attention_dropout(op.micro_batch, op.layer);
    Tensor& out = i == 0 ? L.attn : L.block_out;
    Tensor& lse = i == 0 ? L.lse : L.block_lse;
    out = zeros(rows * g_.heads * g_.hd);
    lse = zeros(g_.b * g_.heads * g_.s);
    backend_.block_attention_forward(out, lse, L.q, L.kv_steps[static_cast<size_t>(i)], seq_,
                                     ring_source(i), block_shape(), drop);
    L.kv_steps[static_cast<size_t>(i)].reset();  // its exchange sent a copy
    if (i > 0) {
      if (!all_gather_) return;  // the merge kernel ends the step
      merge_block();             // all_gather: the Program lists no merge kernel
    }
  }
  if (++L.ring_step < g_.cp) return;
  // The pass is done: the backward repacks its inputs; selective recomputation and evaluation
  // keep no attention state (the statistics are recomputed).
  L.ring_step = 0;
  L.kv_exchanges = 0;
  L.kv_steps.clear();
  L.q.reset();
  if ((op.phase == Phase::kForward && recompute_ == RecomputeGranularity::kSelective) ||
      !training_) {
    L.lse.reset();
    L.qkv_rope.reset();
  }
}

void GptModel::blockwise_backward(const Op& op, LayerState& L) {
  if (L.lse.empty()) unexpected(op, "attention statistics were not kept or recomputed");
  const int64_t i = L.ring_step;
  if (i >= g_.cp) unexpected(op, "more ring attention blocks than CP ranks");
  pack_ring_inputs(L);
  if (static_cast<int64_t>(L.kv_steps.size()) <= i || L.kv_steps[static_cast<size_t>(i)].empty()) {
    unexpected(op, "the K/V block of ring step " + std::to_string(i) + " has not arrived");
  }
  const int64_t kv_size = g_.b * g_.s * 2 * g_.groups * g_.hd;
  if (i == 0) {
    L.dq = zeros(g_.b * g_.s * g_.heads * g_.hd);
    L.dkv_own = zeros(kv_size);
  }
  FSpan dkv_span;
  if (all_gather_) {
    // Block i is CP rank i's: its dK/dV goes to piece i of the reduce-scatter input, which sums
    // every rank's pieces onto their owners (dkv_own stays zero).
    if (i == 0) L.dkv_block = zeros(g_.cp * kv_size);
    dkv_span = L.dkv_block.span().subspan(static_cast<size_t>(i * kv_size),
                                          static_cast<size_t>(kv_size));
  } else if (i == 0) {
    dkv_span = L.dkv_own.span();
  } else {
    // From step 2 on, the partial dK/dV of this block from the ranks before arrived (the dkv
    // exchange of the previous step completed before this step's K/V exchange was issued).
    L.dkv_block = i >= 2 ? std::move(L.dkv_recv) : zeros(kv_size);
    if (L.dkv_block.empty()) {
      unexpected(op, "the partial dK/dV of ring step " + std::to_string(i) + " has not arrived");
    }
    dkv_span = L.dkv_block.span();
  }
  backend_.block_attention_backward(L.dq, dkv_span, L.d_attn, L.q, L.kv_steps[static_cast<size_t>(i)],
                                    L.attn, L.lse, seq_, ring_source(i), block_shape(),
                                    attention_dropout(op.micro_batch, op.layer));
  L.kv_steps[static_cast<size_t>(i)].reset();
  ++L.ring_step;
  if (g_.cp == 1) finish_blockwise_backward(L);  // else when the last dK/dV arrives
}

/// The local K/V's gradient complete (own part + the others' from the last dkv exchange): dq
/// and dK/dV scattered into the QKV rows' gradient, the layer's attention state freed.
void GptModel::finish_blockwise_backward(LayerState& L) {
  if (g_.cp > 1) backend_.add_in_place(L.dkv_own, L.dkv_recv);
  const int64_t rows = g_.b * g_.s, qw = g_.heads * g_.hd, kvw = 2 * g_.groups * g_.hd;
  L.d_qkv = zeros(rows * g_.qkv);
  backend_.copy_2d(L.d_qkv, g_.qkv, L.dq, qw, qw, rows);
  backend_.copy_2d(L.d_qkv.span().subspan(static_cast<size_t>(qw)), g_.qkv, L.dkv_own, kvw, kvw,
                   rows);
  L.dq.reset();
  L.dkv_own.reset();
  L.dkv_recv.reset();
  L.dkv_block.reset();
  L.kv_steps.clear();
  L.q.reset();
  L.ring_step = 0;
  L.kv_exchanges = 0;
  L.dkv_exchanges = 0;
  L.d_attn.reset();
  L.attn.reset();
  L.lse.reset();
  L.qkv_rope.reset();
}

CpTransfer GptModel::cp_transfer(const Op& op) {
  if (op.role != Role::kAttentionCore || !g_.blockwise || g_.cp < 2) {
    unexpected(op, "not a context-parallel collective of the attention core");
  }
  LayerState& L = layer(op);
  const int64_t kv_size = g_.b * g_.s * 2 * g_.groups * g_.hd;
  CpTransfer t;
  if (all_gather_) {
    if (op.collective == CollectiveKind::kAllGather) {  // every CP rank's K/V, in CP order
      pack_ring_inputs(L);
      t.send = clone(L.kv_steps[0]);
      auto gathered = std::make_shared<Tensor>(zeros(g_.cp * kv_size));
      t.recv = gathered->span();
      LayerState* state = &L;
      t.on_complete = [this, state, gathered, kv_size] {
        state->kv_steps.clear();
        for (int64_t j = 0; j < g_.cp; ++j) {
          state->kv_steps.push_back(zeros(kv_size));
          backend_.copy(state->kv_steps.back(),
                        gathered->span().subspan(static_cast<size_t>(j * kv_size),
                                                 static_cast<size_t>(kv_size)));
        }
      };
      return t;
    }
    if (op.collective == CollectiveKind::kReduceScatter && !is_forward(op.phase)) {
      if (L.ring_step != g_.cp || L.dkv_block.empty()) unexpected(op, "no dK/dV to reduce");
      t.send = std::move(L.dkv_block);
      L.dkv_recv = zeros(kv_size);
      t.recv = L.dkv_recv.span();
      LayerState* state = &L;
      t.on_complete = [this, state] { finish_blockwise_backward(*state); };
      return t;
    }
    unexpected(op, "expected the all_gather of K/V or the reduce_scatter of dK/dV");
  }
  if (op.collective != CollectiveKind::kRingExchange) unexpected(op, "expected a ring exchange");
  const bool dkv = !is_forward(op.phase) && L.ring_step >= 2 && L.dkv_exchanges < L.ring_step - 1;
  if (dkv) {
    if (L.dkv_block.empty()) unexpected(op, "no dK/dV to pass on");
    t.send = std::move(L.dkv_block);
    L.dkv_recv = zeros(kv_size);
    t.recv = L.dkv_recv.span();
    if (++L.dkv_exchanges == g_.cp - 1) {
      // The last hop brings the other ranks' parts of this rank's own K/V gradient.
      LayerState* state = &L;
      t.on_complete = [this, state] { finish_blockwise_backward(*state); };
    }
    return t;
  }
  pack_ring_inputs(L);
  const int64_t k = L.kv_exchanges++;
  if (k + 1 >= g_.cp || static_cast<int64_t>(L.kv_steps.size()) != k + 1 ||
      L.kv_steps[static_cast<size_t>(k)].empty()) {
    unexpected(op, "K/V ring exchange " + std::to_string(k) + " does not follow ring step " +
                       std::to_string(L.ring_step));
  }
  t.send = clone(L.kv_steps[static_cast<size_t>(k)]);
  L.kv_steps.push_back(zeros(kv_size));
  t.recv = L.kv_steps.back().span();
  return t;
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
  const int64_t tl = g_.tl, hl = g_.hl, f = mlp_width(op.layer), heads = g_.heads;
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
      if (g_.blockwise) {  // flash / ring attention: no s x s store
        if (kernel == "cp_attention_merge") {
          blockwise_forward(op, L, /*merge=*/true);
        } else if (kernel == "attention_fwd" || kernel == "flash_attention_fwd") {
          blockwise_forward(op, L, /*merge=*/false);
        } else {
          unexpected(op, "unexpected kernel " + kernel);
        }
        return;
      }
      const Tensor& qkv = g_.rope ? L.qkv_rope : L.qkv;
      L.attn = zeros(b * s * hl);
      L.att = zeros(b * heads * s * s);
      if (g_.gqa) {
        backend_.gqa_attention_forward(L.attn, L.att, qkv, b, s, heads, g_.groups, g_.hd,
                                       attention_dropout(op.micro_batch, op.layer));
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
      dropout_add_forward(L.resid1, y, P.proj_b, L.in, dropout(kSiteAttention, op.layer),
                          op.micro_batch, false);
      return;
    }
    case Role::kPostAttentionLayerNorm:
      norm_forward(L.ln2, L.ln2_mean, L.ln2_rstd, L.resid1, P.ln2_w, P.ln2_b);
      return;
    case Role::kFc1: {  // column-parallel (in an MoE layer: the shared expert)
      const int64_t fc1 = fc1_width(op.layer);
      L.fc1 = zeros(b * s * fc1);
      backend_.matmul_forward(L.fc1, g_.sp ? L.ln2_full : L.ln2, P.fc1_w, P.fc1_b, b, s, h, fc1);
      L.ln2_full.reset();
      return;
    }
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
      Tensor y;
      if (moe_layer(op.layer)) {
        // The routed output, plus the shared expert's (reduced) output when there is one.
        y = std::move(L.moe_out);
        if (g_.fs > 0) {
          Tensor sum = zeros(b * tl * h);
          backend_.bias_dropout_add_forward(sum, reduced(L.fc2, L.fc2_rs), {}, y,
                                            cpu::DropoutParams{0.0, hyper_.seed, 0},
                                            block(op.micro_batch, false));
          y = std::move(sum);
        }
      } else {
        y = std::move(reduced(L.fc2, L.fc2_rs));
      }
      L.fc2.reset();
      L.fc2_rs.reset();
      L.out = zeros(b * tl * h);
      dropout_add_forward(L.out, y, P.fc2_b, L.resid1, dropout(kSiteMlp, op.layer),
                          op.micro_batch, false);
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
  const int64_t tl = g_.tl, hl = g_.hl, f = mlp_width(op.layer), heads = g_.heads;
  const int64_t fc1 = fc1_width(op.layer);
  const bool dgrad = kernel == "gemm_dgrad", wgrad = kernel == "gemm_wgrad";
  auto bad_kernel = [&] { unexpected(op, "unexpected kernel " + kernel); };
  switch (role) {
    case Role::kMlpResidual: {
      Tensor d_out = take_output_grad(op);
      L.d_resid1 = zeros(b * tl * h);
      L.d_branch = zeros(b * tl * h);
      dropout_add_backward(L.d_branch, G.fc2_b, L.d_resid1, d_out, dropout(kSiteMlp, op.layer),
                           op.micro_batch, false);
      if (moe_layer(op.layer)) {
        // The routed experts' output gradient; d_branch stays for the shared expert.
        L.d_moe = g_.fs > 0 ? clone(L.d_branch) : std::move(L.d_branch);
      }
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
      L.d_fc1 = zeros(b * s * fc1);
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
        backend_.matmul_backward_data(L.d_ln_full, L.d_fc1, P.fc1_w, b, s, h, fc1);
      } else if (wgrad) {
        backend_.matmul_backward_weight(G.fc1_w, G.fc1_b, L.d_fc1, g_.sp ? L.ln2_full : L.ln2, b,
                                        s, h, fc1);
        L.d_fc1.reset();
        L.ln2_full.reset();
      } else {
        bad_kernel();
      }
      return;
    case Role::kPostAttentionLayerNorm: {
      const Tensor* d_ln = &reduced(L.d_ln_full, L.d_ln);
      Tensor sum;
      if (moe_layer(op.layer)) {
        // The routed path's gradient, plus the shared expert's (reduced) when there is one.
        if (g_.fs > 0) {
          sum = zeros(b * tl * h);
          backend_.bias_dropout_add_forward(sum, *d_ln, {}, L.d_moe_in,
                                            cpu::DropoutParams{0.0, hyper_.seed, 0},
                                            block(op.micro_batch, false));
          d_ln = &sum;
        } else {
          d_ln = &L.d_moe_in;
        }
      }
      norm_backward(L.d_resid1, G.ln2_w, G.ln2_b, *d_ln, L.resid1, P.ln2_w, L.ln2_mean,
                    L.ln2_rstd);
      L.d_moe_in.reset();
      L.d_ln_full.reset();
      L.d_ln.reset();
      L.ln2.reset();
      return;
    }
    case Role::kAttentionResidual:
      L.d_in = zeros(b * tl * h);
      L.d_branch = zeros(b * tl * h);
      dropout_add_backward(L.d_branch, G.proj_b, L.d_in, L.d_resid1,
                           dropout(kSiteAttention, op.layer), op.micro_batch, false);
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
      if (g_.blockwise) return blockwise_backward(op, L);
      if (L.att.empty()) unexpected(op, "attention probabilities were not kept or recomputed");
      const Tensor& qkv = g_.rope ? L.qkv_rope : L.qkv;
      L.d_qkv = zeros(b * s * g_.qkv);
      if (g_.gqa) {
        backend_.gqa_attention_backward(L.d_qkv, L.d_attn, qkv, L.att, b, s, heads, g_.groups,
                                        g_.hd, attention_dropout(op.micro_batch, op.layer));
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

// ---- MoE layer (routed experts; Megatron-Core MoELayer with the alltoall dispatcher) -------------

/// The routed experts' forward on this rank's N = b Tl rows of ln2, Role by Role (between them
/// the walk runs the dispatch and combine all-to-alls over EP, exec/executor.cpp):
///   kRouter: logits = ln2 W_r^T; top-k softmax with capacity (moe_router.hpp); the aux loss.
///   kMoePermute: the routed copies in expert-major order.
///   kExpertFc1 / kExpertActivation / kExpertFc2: the local experts' MLPs on the dispatched rows
///     (grouped GEMM, or local expert j at the j-th GEMM kernel of the op).
///   kMoeUnpermute: the expert outputs back to token order, weighted by the router probs.
void GptModel::moe_forward(const Op& op, const std::string& kernel, Role role,
                           int64_t expert) {
  LayerState& L = layer(op);
  const LayerParams& P = layer_params_.at(op.layer);
  const ModelSpec& model = prog_.scenario.model;
  const int64_t n = g_.b * g_.tl, h = g_.h, e = g_.experts;
  switch (role) {
    case Role::kRouter:
      if (kernel == "gemm_fwd") {
        L.logits = zeros(n * e);
        backend_.matmul_forward(L.logits, L.ln2, P.router_w, {}, 1, n, h, e);
      } else if (kernel == "moe_router_topk_fwd") {
        const int64_t capacity =
            model.moe_expert_capacity_factor
                ? cpu::moe_expert_capacity(n, g_.topk, e, *model.moe_expert_capacity_factor)
                : 0;
        L.gates = zeros(n * e);
        L.probs = zeros(n * e);
        L.topk_map.assign(static_cast<size_t>(n * e), 0);
        L.routing_map.assign(static_cast<size_t>(n * e), 0);
        L.tokens_per_expert.assign(static_cast<size_t>(e), 0);
        backend_.moe_topk_softmax_forward(L.gates, L.topk_map, L.routing_map, L.probs,
                                          L.tokens_per_expert, L.logits, n, e, g_.topk, capacity,
                                          model.moe_pad_expert_input_to_capacity);
        L.perm = cpu::moe_make_permutation(L.routing_map, n, e);
        // (the walk sums tokens_per_expert over TP under SP before the aux loss: exec/executor.cpp)
      } else if (kernel == "moe_aux_loss_fwd") {
        L.scores = zeros(n * e);
        const double aux = backend_.moe_switch_aux_loss_forward(
            L.scores, L.logits, L.tokens_per_expert, n, e, n * (g_.sp ? g_.t : 1), g_.topk,
            model.moe_aux_loss_coeff);
        // Under SP the TP shards' terms add up to the micro-batch's loss: one term, on TP rank 0.
        aux_loss_sum_ += aux;
        if (coord_.tp == 0) ++aux_loss_terms_;
      } else {
        unexpected(op, "unexpected router kernel " + kernel);
      }
      return;
    case Role::kMoePermute:
      L.permuted = zeros(L.perm.rows() * h);
      backend_.moe_permute_forward(L.permuted, L.ln2, L.perm, n, h);
      if (g_.ep == 1) {  // no dispatch op (a group of one): every expert is local
        L.exchange = MoeExchange{{L.perm.rows()}, {L.perm.rows()}, L.perm.rows_per_expert,
                                 L.perm.rows_per_expert};
        L.dispatched = std::move(L.permuted);
      }
      return;
    case Role::kExpertFc1: {
      const auto& groups = L.exchange.rows_per_local_expert;
      const int64_t r = L.dispatched.size() / static_cast<size_t>(h);
      if (L.expert_fc1.empty()) L.expert_fc1 = zeros(r * g_.fc1e);
      if (kernel == "grouped_gemm_fwd") {
        backend_.grouped_matmul_forward(L.expert_fc1, L.dispatched, P.experts_fc1_w, groups, h,
                                        g_.fc1e);
      } else if (kernel == "gemm_fwd") {  // local expert `expert` alone
        const int64_t first = std::accumulate(groups.begin(), groups.begin() + expert, int64_t{0});
        const int64_t rows = groups[static_cast<size_t>(expert)];
        if (rows > 0) {
          backend_.matmul_forward(
              L.expert_fc1.span().subspan(static_cast<size_t>(first * g_.fc1e),
                                          static_cast<size_t>(rows * g_.fc1e)),
              L.dispatched.span().subspan(static_cast<size_t>(first * h),
                                          static_cast<size_t>(rows * h)),
              expert_slice(P.experts_fc1_w, g_.el, expert), {}, 1, rows, h, g_.fc1e);
        }
      } else {
        unexpected(op, "unexpected expert FC1 kernel " + kernel);
      }
      return;
    }
    case Role::kExpertActivation: {
      const int64_t r = L.dispatched.size() / static_cast<size_t>(h);
      L.expert_act = zeros(r * g_.fe);
      if (r == 0) return;
      switch (g_.activation) {
        case Activation::kGelu: backend_.gelu_forward(L.expert_act, L.expert_fc1); break;
        case Activation::kSwiglu:
          backend_.swiglu_forward(L.expert_act, L.expert_fc1, r, g_.fe);
          break;
        case Activation::kSquaredRelu:
          backend_.squared_relu_forward(L.expert_act, L.expert_fc1);
          break;
      }
      return;
    }
    case Role::kExpertFc2: {
      const auto& groups = L.exchange.rows_per_local_expert;
      const int64_t r = L.dispatched.size() / static_cast<size_t>(h);
      if (L.expert_fc2.empty()) L.expert_fc2 = zeros(r * h);
      if (kernel == "grouped_gemm_fwd") {
        backend_.grouped_matmul_forward(L.expert_fc2, L.expert_act, P.experts_fc2_w, groups,
                                        g_.fe, h);
      } else if (kernel == "gemm_fwd") {
        const int64_t first = std::accumulate(groups.begin(), groups.begin() + expert, int64_t{0});
        const int64_t rows = groups[static_cast<size_t>(expert)];
        if (rows > 0) {
          backend_.matmul_forward(
              L.expert_fc2.span().subspan(static_cast<size_t>(first * h),
                                          static_cast<size_t>(rows * h)),
              L.expert_act.span().subspan(static_cast<size_t>(first * g_.fe),
                                          static_cast<size_t>(rows * g_.fe)),
              expert_slice(P.experts_fc2_w, g_.el, expert), {}, 1, rows, g_.fe, h);
        }
      } else {
        unexpected(op, "unexpected expert FC2 kernel " + kernel);
      }
      return;
    }
    case Role::kMoeUnpermute:
      if (g_.ep == 1) L.combined = std::move(L.expert_fc2);  // no combine op
      L.moe_out = zeros(n * h);
      backend_.moe_unpermute_forward(L.moe_out, L.combined, L.probs, L.perm, n, e, h);
      if (!training_) {
        L.combined.reset();
        L.dispatched.reset();
        L.expert_fc1.reset();
        L.expert_act.reset();
      }
      return;
    default: unexpected(op, "not an MoE forward role");
  }
}

/// The routed experts' backward, mirrored: unpermute (dprobs and the expert outputs' gradient),
/// the experts' dgrad / wgrad, permute's scatter-add into d_moe_in, then the router: the aux
/// loss and top-k softmax backward into dlogits, the router's dgrad (into d_moe_in) and wgrad.
void GptModel::moe_backward(const Op& op, const std::string& kernel, Role role,
                            int64_t expert) {
  LayerState& L = layer(op);
  const LayerParams& P = layer_params_.at(op.layer);
  const LayerParams& G = layer_grads_.at(op.layer);
  const ModelSpec& model = prog_.scenario.model;
  const int64_t n = g_.b * g_.tl, h = g_.h, e = g_.experts;
  const int64_t r = L.dispatched.size() / static_cast<size_t>(h);
  const auto& groups = L.exchange.rows_per_local_expert;
  const bool dgrad = kernel == "gemm_dgrad" || kernel == "grouped_gemm_dgrad";
  const bool wgrad = kernel == "gemm_wgrad" || kernel == "grouped_gemm_wgrad";
  const bool grouped = kernel.rfind("grouped_", 0) == 0;
  // One local expert's rows of a [R, width] tensor (grouped: all of them).
  auto rows_of = [&](Tensor& t, int64_t width) -> FSpan {
    if (grouped) return t.span();
    const int64_t first =
        std::accumulate(groups.begin(), groups.begin() + expert, int64_t{0});
    return t.span().subspan(static_cast<size_t>(first * width),
                            static_cast<size_t>(groups[static_cast<size_t>(expert)] * width));
  };
  auto one_group = [&]() -> std::vector<int64_t> {
    if (grouped) return groups;
    return {groups[static_cast<size_t>(expert)]};
  };
  auto weights = [&](std::span<float> all) {
    return grouped ? all : expert_slice(all, g_.el, expert);
  };
  switch (role) {
    case Role::kMoeUnpermute:
      L.d_combined = zeros(L.perm.rows() * h);
      L.d_probs = zeros(n * e);
      backend_.moe_unpermute_backward(L.d_combined, L.d_probs, L.d_moe, L.combined, L.probs,
                                      L.perm, n, e, h);
      L.d_moe.reset();
      L.combined.reset();
      if (g_.ep == 1) L.d_expert_fc2 = std::move(L.d_combined);  // no combine op
      return;
    case Role::kExpertFc2:
      if (dgrad) {
        if (L.d_expert_act.empty()) L.d_expert_act = zeros(r * g_.fe);
        backend_.grouped_matmul_backward_data(rows_of(L.d_expert_act, g_.fe),
                                              rows_of(L.d_expert_fc2, h), weights(P.experts_fc2_w),
                                              one_group(), g_.fe, h);
      } else if (wgrad) {
        backend_.grouped_matmul_backward_weight(weights(G.experts_fc2_w), rows_of(L.d_expert_fc2, h),
                                                rows_of(L.expert_act, g_.fe), one_group(), g_.fe,
                                                h);
      } else {
        unexpected(op, "unexpected expert FC2 kernel " + kernel);
      }
      return;
    case Role::kExpertActivation:
      L.d_expert_fc2.reset();
      L.expert_act.reset();
      L.d_expert_fc1 = zeros(r * g_.fc1e);
      if (r > 0) {
        switch (g_.activation) {
          case Activation::kGelu:
            backend_.gelu_backward(L.d_expert_fc1, L.expert_fc1, L.d_expert_act);
            break;
          case Activation::kSwiglu:
            backend_.swiglu_backward(L.d_expert_fc1, L.d_expert_act, L.expert_fc1, r, g_.fe);
            break;
          case Activation::kSquaredRelu:
            backend_.squared_relu_backward(L.d_expert_fc1, L.expert_fc1, L.d_expert_act);
            break;
        }
      }
      L.d_expert_act.reset();
      L.expert_fc1.reset();
      return;
    case Role::kExpertFc1:
      if (dgrad) {
        if (L.d_dispatched.empty()) L.d_dispatched = zeros(r * h);
        backend_.grouped_matmul_backward_data(rows_of(L.d_dispatched, h),
                                              rows_of(L.d_expert_fc1, g_.fc1e),
                                              weights(P.experts_fc1_w), one_group(), h, g_.fc1e);
      } else if (wgrad) {
        backend_.grouped_matmul_backward_weight(weights(G.experts_fc1_w),
                                                rows_of(L.d_expert_fc1, g_.fc1e),
                                                rows_of(L.dispatched, h), one_group(), h, g_.fc1e);
      } else {
        unexpected(op, "unexpected expert FC1 kernel " + kernel);
      }
      return;
    case Role::kMoePermute:
      if (g_.ep == 1) L.d_permuted = std::move(L.d_dispatched);  // no dispatch op
      L.d_moe_in = zeros(n * h);
      backend_.moe_permute_backward(L.d_moe_in, L.d_permuted, L.perm, n, h);
      L.d_permuted.reset();
      return;
    case Role::kRouter: {
      const double daux =  // each micro-batch's aux loss weighs 1 / (m DP), as its LM loss
          1.0 / static_cast<double>(g_.m * g_.dp);
      if (kernel == "moe_aux_loss_bwd") {
        if (L.d_logits.empty()) L.d_logits = zeros(n * e);
        backend_.moe_switch_aux_loss_backward(L.d_logits, daux, L.scores, L.tokens_per_expert, n,
                                              e, n * (g_.sp ? g_.t : 1), g_.topk,
                                              model.moe_aux_loss_coeff);
        L.scores.reset();
      } else if (kernel == "moe_router_topk_bwd") {
        if (L.d_logits.empty()) L.d_logits = zeros(n * e);
        backend_.moe_topk_softmax_backward(L.d_logits, L.d_probs, L.gates, L.topk_map,
                                           L.routing_map, n, e);
        L.d_probs.reset();
      } else if (kernel == "gemm_dgrad") {
        backend_.matmul_backward_data(L.d_moe_in, L.d_logits, P.router_w, 1, n, h, e);
      } else if (kernel == "gemm_wgrad") {
        backend_.matmul_backward_weight(G.router_w, {}, L.d_logits, L.ln2, 1, n, h, e);
        L.d_logits.reset();
        L.logits.reset();
        L.gates.reset();
        L.probs.reset();
        L.dispatched.reset();
        L.d_dispatched.reset();
      } else {
        unexpected(op, "unexpected router kernel " + kernel);
      }
      return;
    }
    default: unexpected(op, "not an MoE backward role");
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
