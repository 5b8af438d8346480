// The CPU trainer executor; see executor.hpp.
#include "exec/executor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "core/error.hpp"
#include "core/pipeline_split.hpp"
#include "exec/counter_rng.hpp"
#include "exec/cpu/attention.hpp"
#include "exec/cpu/dropout.hpp"
#include "exec/cpu/gelu.hpp"
#include "exec/cpu/layernorm.hpp"
#include "exec/cpu/matmul.hpp"
#include "exec/cpu/position_embedding.hpp"
#include "exec/cpu/vocab_parallel_cross_entropy.hpp"
#include "exec/cpu/vocab_parallel_embedding.hpp"

namespace traintwin::exec {
namespace {

using Buf = std::vector<float>;
using CSpan = std::span<const float>;

void release(Buf& b) { Buf().swap(b); }
Buf zeros(int64_t n) { return Buf(static_cast<size_t>(n), 0.0f); }
CSpan cs(const Buf& b) { return CSpan(b.data(), b.size()); }

/// Dropout sites (part of the mask's stream id).
enum DropoutSite : uint64_t {
  kSiteEmbedding = 0,
  kSiteAttention = 1,  // after the projection
  kSiteMlp = 2,
  kSiteAttentionProbabilities = 3,
};

/// Parameter and gradient views of one transformer layer.
struct LayerParams {
  std::span<float> ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w,
      fc2_b;
};

/// Saved activations and gradients of one layer for one micro-batch. Sizes: Tl = s/t with SP
/// else s; H = h, Hl = h/t, F = ffn/t.
struct LayerState {
  Buf in;                          // [b, Tl, H] layer input (residual stream)
  Buf ln1, ln1_mean, ln1_rstd;     // [b, Tl, H], [b*Tl]
  Buf ln1_full;                    // [b, s, H] SP-gathered QKV input
  Buf qkv;                         // [b, s, 3Hl]
  Buf preatt, att;                 // [b, a/t, s, s]
  Buf attn;                        // [b, s, Hl]
  Buf proj;                        // [b, s, H] partial, all-reduced in place without SP
  Buf proj_rs;                     // [b, Tl, H] SP reduce-scatter output
  Buf resid1;                      // [b, Tl, H]
  Buf ln2, ln2_mean, ln2_rstd, ln2_full;
  Buf fc1, gelu;                   // [b, s, F]
  Buf fc2, fc2_rs;                 // like proj, proj_rs
  Buf out;                         // [b, Tl, H]
  // backward
  Buf d_out;                       // [b, Tl, H] gradient of out
  Buf d_resid1;                    // [b, Tl, H]
  Buf d_branch;                    // [b, Tl, H] gradient of the dropout input (row-parallel output)
  Buf d_branch_full;               // [b, s, H] SP-gathered d_branch
  Buf d_gelu, d_fc1;               // [b, s, F]
  Buf d_attn;                      // [b, s, Hl]
  Buf d_qkv;                       // [b, s, 3Hl]
  Buf d_ln_full;                   // [b, s, H] column-parallel input gradient (partial sums)
  Buf d_ln;                        // [b, Tl, H] after the reduce-scatter (SP)
  Buf d_in;                        // [b, Tl, H]
};

/// Everything of one micro-batch on one model chunk.
struct ChunkState {
  std::vector<int32_t> tokens, labels;  // [b, s]
  Buf input;                            // [b, Tl, H] received activation (vs > 0)
  Buf d_output;                         // [b, Tl, H] received output gradient (not last vs)
  std::vector<LayerState> layers;       // layers of the chunk, first layer first
  // embedding (vs == 0)
  Buf emb, emb_rs, emb_out;             // [b, s, H], [b, Tl, H], [b, Tl, H]
  Buf d_emb_full;                       // [b, s, H]
  // head (last vs)
  Buf lnf, lnf_mean, lnf_rstd, lnf_full, logits;  // logits [b, s, V_local]
  Buf lmax, sum_exp, target;            // [b, s]
  Buf d_logits, d_lnf_full, d_lnf, d_last;
  bool loss_counted = false;
};

struct InFlight {
  RequestPtr request;
  std::function<void()> on_complete;
  Buf buffer;  // owned send/pack buffer
  double start_s = 0;
};

}  // namespace

class Executor::Impl {
 public:
  Impl(const Program& program, Communicator& comm, ModelShard& shard, TrainingHyperparameters hyper)
      : prog_(program), comm_(comm), shard_(shard), hyper_(std::move(hyper)),
        origin_(std::chrono::steady_clock::now()) {
    const Scenario& sc = prog_.scenario;
    auto it = prog_.ranks.find(comm_.rank());
    if (it == prog_.ranks.end()) {
      throw InvalidArgument("executor: the Program has no ops for rank " +
                            std::to_string(comm_.rank()));
    }
    rp_ = &it->second;
    if (!(shard_.coord() == rp_->coord)) {
      throw InvalidArgument("executor: the model shard belongs to another rank than " +
                            std::to_string(comm_.rank()));
    }
    auto unsupported = [&](const std::string& what) {
      throw UnsupportedError("scenario " + sc.name + ": " + what +
                             " is not executed by the CPU backend yet");
    };
    if (sc.training.tp_comm_overlap) unsupported("training.tp_comm_overlap");
    if (sc.parallel.context_parallel_size > 1) unsupported("context parallelism");
    if (sc.training.precision != Precision::kFp32) {
      throw UnsupportedError("scenario " + sc.name + ": training.precision is " +
                             std::string(to_string(sc.training.precision)) +
                             "; the CPU backend computes in fp32 only (set precision: fp32)");
    }
    b_ = sc.training.micro_batch_size;
    s_ = sc.model.seq_length;
    h_ = sc.model.hidden_size;
    t_ = sc.parallel.tensor_model_parallel_size;
    hl_ = h_ / t_;
    f_ = sc.model.ffn_hidden_size / t_;
    heads_ = sc.model.num_attention_heads / t_;
    sp_ = sc.parallel.sequence_parallel;
    tl_ = sp_ ? s_ / t_ : s_;
    p_ = sc.parallel.pipeline_model_parallel_size;
    v_ = sc.parallel.virtual_pipeline_model_parallel_size;
    m_ = sc.num_micro_batches();
    for (int64_t c = 0; c < v_; ++c) chunk_layers_.push_back(chunk_layers(sc, rp_->coord.pp, c));
    dp_ = sc.parallel.data_parallel_size;
    vocab_ = sc.model.vocab_size;
    vl_ = shard_.vocab_local();
    vstart_ = shard_.vocab_start();
    vtotal_ = vl_ * t_;
    coord_ = rp_->coord;
    recompute_ = sc.training.recompute_granularity;
    dist_opt_ = sc.training.use_distributed_optimizer;
    resolve_parameters();
  }

  IterationResult train(int64_t iteration, const MicroBatchSource& data) {
    begin(iteration, data, /*training=*/true);
    shard_.zero_grads();
    for (const Op& op : rp_->ops) execute(op);
    finish();
    IterationResult r = report();
    r.grad_norm = grad_norm_;
    r.learning_rate = lr_;
    return r;
  }

  IterationResult evaluate(const MicroBatchSource& data) {
    begin(0, data, /*training=*/false);
    for (const Op& op : rp_->ops) {
      // Activation sends/recvs have even tags; a p2p batch may carry them under the phase of the
      // step it follows (send_backward_recv_forward), so they are picked by tag.
      const bool p2p = op.kind == OpKind::kSend || op.kind == OpKind::kRecv;
      if (p2p ? op.tag % 2 != 0 : op.phase != Phase::kForward) continue;
      execute(op);
    }
    finish();
    for (auto& [key, st] : chunks_) {
      if (is_last_vstage(key.first) && !st.sum_exp.empty()) count_loss(st);
    }
    return report();
  }

  void synchronize_parameters() {
    if (!dist_opt_ || !prog_.scenario.training.overlap_param_gather) return;
    inflight_.clear();
    inflight_.resize(rp_->ops.size());
    for (const Op& op : rp_->ops) {
      if (op.role == Role::kParamBucket) param_bucket(op);
    }
    finish();
    spans_.clear();
  }

  // ---- iteration bookkeeping -------------------------------------------------------------------

  void begin(int64_t iteration, const MicroBatchSource& data, bool training) {
    iteration_ = iteration;
    data_ = &data;
    training_ = training;
    chunks_.clear();
    inflight_.clear();
    inflight_.resize(rp_->ops.size());
    spans_.clear();
    loss_sum_ = 0;
    loss_tokens_ = 0;
    grad_norm_ = 0;
    lr_ = 0;
  }

  void finish() {
    for (uint32_t i = 0; i < inflight_.size(); ++i) complete(i);
  }

  /// The loss averaged over the global batch, the same on every rank (a reporting all-reduce
  /// over the world, outside the Program, as Megatron's loss averaging for logging).
  IterationResult report() {
    std::array<double, 2> totals{loss_sum_, static_cast<double>(loss_tokens_)};
    comm_.all_reduce(GroupKind::kWorld, std::span<double>(totals), ReduceOp::kSum)->wait();
    IterationResult r;
    r.lm_loss = totals[1] > 0 ? totals[0] / totals[1] : 0.0;
    r.spans = std::move(spans_);
    chunks_.clear();
    return r;
  }

  void reset_clock() { origin_ = std::chrono::steady_clock::now(); }

  double now_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count();
  }

  // ---- geometry --------------------------------------------------------------------------------

  int64_t vstage(int64_t chunk) const { return chunk * p_ + coord_.pp; }
  bool is_last_vstage(int64_t chunk) const { return vstage(chunk) == p_ * v_ - 1; }
  /// The chunk's transformer layers (core/pipeline_split.hpp; uneven under an uneven split).
  int64_t first_layer(int64_t chunk) const {
    return chunk_layers_[static_cast<size_t>(chunk)].first_layer;
  }
  int64_t num_layers(int64_t chunk) const {
    return chunk_layers_[static_cast<size_t>(chunk)].num_layers;
  }
  /// The activation a chunk hands on (to the next virtual stage or to the final LayerNorm): its
  /// last layer's output or, for a chunk without transformer layers, its input.
  Buf& chunk_output(ChunkState& st, int64_t chunk) {
    if (!st.layers.empty()) return st.layers.back().out;
    return vstage(chunk) == 0 ? st.emb_out : st.input;
  }
  /// The gradient of a chunk's input: its first layer's or, for a chunk without transformer
  /// layers, the gradient of its output (from the final LayerNorm or received).
  Buf& chunk_input_grad(ChunkState& st, int64_t chunk) {
    if (!st.layers.empty()) return st.layers.front().d_in;
    return is_last_vstage(chunk) ? st.d_last : st.d_output;
  }
  int64_t seq_offset() const { return sp_ ? coord_.tp * tl_ : 0; }
  /// Global index of the first sample of micro-batch `mb` of this DP replica (Megatron's
  /// pretraining sampler: each step of b x DP samples is split over the DP ranks).
  int64_t first_sample(int64_t mb) const {
    const int64_t gbs = prog_.scenario.training.global_batch_size;
    return std::max<int64_t>(iteration_ - 1, 0) * gbs + mb * b_ * dp_ + coord_.dp * b_;
  }

  ChunkState& chunk_state(int64_t chunk, int64_t mb) {
    auto [it, inserted] = chunks_.try_emplace({chunk, mb});
    if (inserted) {
      it->second.layers.resize(static_cast<size_t>(num_layers(chunk)));
      const bool first = vstage(chunk) == 0, last = is_last_vstage(chunk);
      if (first || last) {
        it->second.tokens.assign(static_cast<size_t>(b_ * s_), 0);
        it->second.labels.assign(static_cast<size_t>(b_ * s_), 0);
        (*data_)(mb, it->second.tokens, it->second.labels);
      }
    }
    return it->second;
  }

  LayerState& layer_state(const Op& op) {
    ChunkState& st = chunk_state(op.model_chunk, op.micro_batch);
    return st.layers[static_cast<size_t>(op.layer - first_layer(op.model_chunk))];
  }

  // ---- parameters ------------------------------------------------------------------------------

  void resolve_parameters() {
    const auto& chunks = shard_.chunks();
    for (size_t c = 0; c < chunks.size(); ++c) {
      const int64_t chunk = static_cast<int64_t>(c);
      for (int64_t l = first_layer(chunk); l < first_layer(chunk) + num_layers(chunk); ++l) {
        const std::string pre = "layers." + std::to_string(l) + ".";
        auto view = [&](const std::string& name, bool grad) {
          return grad ? shard_.grad(chunk, pre + name) : shard_.param(chunk, pre + name);
        };
        for (bool grad : {false, true}) {
          LayerParams lp{view("input_layernorm.weight", grad),
                         view("input_layernorm.bias", grad),
                         view("self_attention.linear_qkv.weight", grad),
                         view("self_attention.linear_qkv.bias", grad),
                         view("self_attention.linear_proj.weight", grad),
                         view("self_attention.linear_proj.bias", grad),
                         view("pre_mlp_layernorm.weight", grad),
                         view("pre_mlp_layernorm.bias", grad),
                         view("mlp.linear_fc1.weight", grad),
                         view("mlp.linear_fc1.bias", grad),
                         view("mlp.linear_fc2.weight", grad),
                         view("mlp.linear_fc2.bias", grad)};
          (grad ? layer_grads_ : layer_params_)[l] = lp;
        }
      }
    }
  }

  /// The word embedding (first stage) or the LM head's weight on the last stage: the copy when
  /// PP > 1, the word embedding itself (chunk 0) when PP == 1.
  std::span<float> head_weight(int64_t chunk, bool grad) {
    if (p_ > 1) {
      return grad ? shard_.grad(chunk, "output_layer.weight")
                  : shard_.param(chunk, "output_layer.weight");
    }
    return grad ? shard_.grad(0, "embedding.word_embeddings.weight")
                : shard_.param(0, "embedding.word_embeddings.weight");
  }

  // ---- op dispatch -----------------------------------------------------------------------------

  void execute(const Op& op) {
    for (uint32_t d : op.deps) complete(d);
    switch (op.kind) {
      case OpKind::kCompute: {
        const double t0 = now_s();
        for (size_t i = 0; i < op.kernels.size(); ++i) {
          run_kernel(op, prog_.kernels[op.kernels[i]].key.name, op.kernel_roles[i]);
        }
        spans_.push_back({op.id, t0, now_s()});
        break;
      }
      case OpKind::kCollective: issue_collective(op); break;
      case OpKind::kSend:
      case OpKind::kRecv: issue_p2p(op); break;
    }
  }

  void complete(uint32_t id) {
    auto& slot = inflight_[id];
    if (!slot) return;
    slot->request->wait();
    if (slot->on_complete) slot->on_complete();
    spans_.push_back({id, slot->start_s, now_s()});
    slot.reset();
  }

  void start(const Op& op, InFlight f) {
    f.start_s = now_s();
    inflight_[op.id] = std::move(f);
  }

  [[noreturn]] void unexpected(const Op& op, const std::string& what) const {
    throw InvalidArgument("executor: rank " + std::to_string(rp_->rank) + " op " +
                          std::to_string(op.id) + " (" + prog_.label(op) + "): " + what);
  }

  void run_kernel(const Op& op, const std::string& name, Role role) {
    const bool fwd = op.phase == Phase::kForward || op.phase == Phase::kRecompute;
    switch (role) {
      case Role::kEmbedding:
        return fwd ? embedding_forward(op) : embedding_backward(op);
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
        return fwd ? layer_forward(op, role) : layer_backward(op, name, role);
      case Role::kFinalLayerNorm:
      case Role::kLmHead:
      case Role::kCrossEntropyMax:
      case Role::kCrossEntropy:
        return fwd ? head_forward(op, name, role) : head_backward(op, name, role);
      case Role::kGradNorm: return grad_norm_kernel();
      case Role::kOptimizerStep: return optimizer_step();
      default: unexpected(op, std::string("no kernel for role ") + to_string(role));
    }
  }

  // ---- SP reorderings --------------------------------------------------------------------------
  // The all-gather output / reduce-scatter input is member-major [t][b][Tl][H]; activations are
  // [b][s][H] with member r holding positions [r Tl, (r+1) Tl).

  void member_major_to_bsh(const Buf& pieces, Buf& out, int64_t width) const {
    out.resize(static_cast<size_t>(b_ * s_ * width));
    for (int64_t r = 0; r < t_; ++r) {
      for (int64_t bi = 0; bi < b_; ++bi) {
        const float* src = pieces.data() + ((r * b_ + bi) * tl_) * width;
        float* dst = out.data() + (bi * s_ + r * tl_) * width;
        std::copy(src, src + tl_ * width, dst);
      }
    }
  }

  Buf bsh_to_member_major(const Buf& full, int64_t width) const {
    Buf pieces(full.size());
    for (int64_t r = 0; r < t_; ++r) {
      for (int64_t bi = 0; bi < b_; ++bi) {
        const float* src = full.data() + (bi * s_ + r * tl_) * width;
        float* dst = pieces.data() + ((r * b_ + bi) * tl_) * width;
        std::copy(src, src + tl_ * width, dst);
      }
    }
    return pieces;
  }

  /// SP all-gather of `shard` ([b, Tl, H]) into `full` ([b, s, H]) on completion.
  void gather_sp(const Op& op, const Buf& shard, Buf* full) {
    if (shard.size() != static_cast<size_t>(b_ * tl_ * h_)) unexpected(op, "nothing to gather");
    InFlight f;
    f.buffer = zeros(b_ * s_ * h_);
    f.request = comm_.all_gather(GroupKind::kTp, cs(shard), std::span<float>(f.buffer));
    start(op, std::move(f));
    const Buf* pieces = &inflight_[op.id]->buffer;
    inflight_[op.id]->on_complete = [this, pieces, full] { member_major_to_bsh(*pieces, *full, h_); };
  }

  /// TP reduce of `partial` ([b, s, H]): all-reduce in place, or (SP) reduce-scatter into `shard`.
  void reduce_tp(const Op& op, Buf& partial, Buf* shard) {
    InFlight f;
    if (op.collective == CollectiveKind::kAllReduce) {
      f.request = comm_.all_reduce(GroupKind::kTp, std::span<float>(partial), ReduceOp::kSum);
    } else if (op.collective == CollectiveKind::kReduceScatter) {
      f.buffer = bsh_to_member_major(partial, h_);
      *shard = zeros(b_ * tl_ * h_);
      f.request = comm_.reduce_scatter(GroupKind::kTp, cs(f.buffer), std::span<float>(*shard),
                                       ReduceOp::kSum);
    } else {
      unexpected(op, "expected a TP all_reduce or reduce_scatter");
    }
    start(op, std::move(f));
  }

  /// Reduced (all-reduced in place, or reduce-scattered) view of a TP-reduced activation.
  Buf& reduced(Buf& partial, Buf& shard) { return sp_ ? shard : partial; }

  // ---- embedding -------------------------------------------------------------------------------

  void embedding_forward(const Op& op) {
    ChunkState& st = chunk_state(op.model_chunk, op.micro_batch);
    st.emb = zeros(b_ * s_ * h_);
    cpu::vocab_parallel_embedding_forward<float>(
        st.emb, st.tokens, shard_.param(op.model_chunk, "embedding.word_embeddings.weight"), b_,
        s_, h_, vstart_, vl_, vtotal_);
  }

  cpu::DropoutParams dropout(uint64_t site, int64_t layer) const {
    return cpu::DropoutParams{training_ ? hyper_.hidden_dropout : 0.0, hyper_.seed,
                              stream_id({static_cast<uint64_t>(iteration_),
                                         static_cast<uint64_t>(layer + 1), site})};
  }
  /// Attention-probability dropout of micro-batch `mb` in `layer` (null when off); the mask is
  /// keyed by global heads, so TP shards draw the same mask as one rank.
  const cpu::AttentionProbabilityDropout* attention_dropout(int64_t mb, int64_t layer) {
    if (!training_ || hyper_.attention_dropout == 0) return nullptr;
    att_dropout_ = cpu::AttentionProbabilityDropout{
        cpu::DropoutParams{hyper_.attention_dropout, hyper_.seed,
                           stream_id({static_cast<uint64_t>(iteration_),
                                      static_cast<uint64_t>(layer + 1),
                                      kSiteAttentionProbabilities})},
        cpu::AttentionBlock{b_, heads_, s_, first_sample(mb), coord_.tp * heads_, heads_ * t_}};
    return &att_dropout_;
  }

  cpu::HiddenBlock block(int64_t mb, bool full) const {
    return cpu::HiddenBlock{b_, full ? s_ : tl_, h_, first_sample(mb), full ? 0 : seq_offset(), s_};
  }

  void embedding_dropout(const Op& op) {
    ChunkState& st = chunk_state(op.model_chunk, op.micro_batch);
    Buf& e = reduced(st.emb, st.emb_rs);
    cpu::position_embedding_forward<float>(
        e, shard_.param(op.model_chunk, "embedding.position_embeddings.weight"), b_, tl_, h_,
        seq_offset());
    st.emb_out = zeros(b_ * tl_ * h_);
    cpu::dropout_forward<float>(st.emb_out, cs(e), dropout(kSiteEmbedding, -1),
                                block(op.micro_batch, false));
    release(st.emb);
    release(st.emb_rs);
  }

  void embedding_backward(const Op& op) {
    ChunkState& st = chunk_state(op.model_chunk, op.micro_batch);
    // The gradient of the embedding output over the whole sequence (SP: all-gathered).
    Buf& d_out = sp_ ? st.d_emb_full : chunk_input_grad(st, op.model_chunk);
    Buf d_e = zeros(b_ * s_ * h_);
    cpu::dropout_backward<float>(d_e, cs(d_out), dropout(kSiteEmbedding, -1),
                                 block(op.micro_batch, true));
    cpu::position_embedding_backward<float>(
        shard_.grad(op.model_chunk, "embedding.position_embeddings.weight"), cs(d_e), b_, s_, h_, 0);
    cpu::vocab_parallel_embedding_backward<float>(
        shard_.grad(op.model_chunk, "embedding.word_embeddings.weight"), cs(d_e), st.tokens, b_,
        s_, h_, vstart_, vl_, vtotal_);
    release(st.d_emb_full);
    if (!st.layers.empty()) st.layers.front() = LayerState();
  }

  // ---- transformer layer -----------------------------------------------------------------------

  /// The input of the first layer of a chunk (embedding output or received activation) or the
  /// previous layer's output.
  Buf take_layer_input(const Op& op) {
    ChunkState& st = chunk_state(op.model_chunk, op.micro_batch);
    const int64_t i = op.layer - first_layer(op.model_chunk);
    if (i > 0) return std::move(st.layers[static_cast<size_t>(i - 1)].out);
    if (vstage(op.model_chunk) == 0) return std::move(st.emb_out);
    return std::move(st.input);
  }

  void layer_forward(const Op& op, Role role) {
    LayerState& L = layer_state(op);
    const LayerParams& P = layer_params_.at(op.layer);
    const bool recompute = op.phase == Phase::kRecompute;
    const int64_t rows_sp = b_ * tl_;
    switch (role) {
      case Role::kInputLayerNorm:
        if (!recompute) L.in = take_layer_input(op);
        L.ln1 = zeros(rows_sp * h_);
        L.ln1_mean = zeros(rows_sp);
        L.ln1_rstd = zeros(rows_sp);
        cpu::layernorm_forward<float>(L.ln1, L.ln1_mean, L.ln1_rstd, cs(L.in), P.ln1_w, P.ln1_b, b_,
                                      tl_, h_);
        return;
      case Role::kQkv:
        L.qkv = zeros(b_ * s_ * 3 * hl_);
        cpu::matmul_forward<float>(L.qkv, cs(sp_ ? L.ln1_full : L.ln1), P.qkv_w, P.qkv_b, b_, s_, h_,
                                   3 * hl_);
        release(L.ln1_full);
        return;
      case Role::kAttentionCore:
        L.attn = zeros(b_ * s_ * hl_);
        L.preatt = zeros(b_ * heads_ * s_ * s_);
        L.att = zeros(b_ * heads_ * s_ * s_);
        cpu::attention_forward<float>(L.attn, L.preatt, L.att, cs(L.qkv), b_, s_, hl_, heads_,
                                      attention_dropout(op.micro_batch, op.layer));
        release(L.preatt);
        // Selective recomputation (and evaluation) keeps no s x s scores.
        if ((op.phase == Phase::kForward &&
             recompute_ == RecomputeGranularity::kSelective) || !training_) {
          release(L.att);
        }
        return;
      case Role::kAttentionProjection:
        L.proj = zeros(b_ * s_ * h_);
        cpu::matmul_forward<float>(L.proj, cs(L.attn), P.proj_w, {}, b_, s_, hl_, h_);
        return;
      case Role::kAttentionResidual: {
        Buf y = std::move(reduced(L.proj, L.proj_rs));
        release(L.proj);
        release(L.proj_rs);
        add_bias(y, P.proj_b);
        L.resid1 = zeros(rows_sp * h_);
        cpu::dropout_forward<float>(L.resid1, cs(y), dropout(kSiteAttention, op.layer),
                                    block(op.micro_batch, false));
        for (size_t i = 0; i < L.resid1.size(); ++i) L.resid1[i] += L.in[i];
        return;
      }
      case Role::kPostAttentionLayerNorm:
        L.ln2 = zeros(rows_sp * h_);
        L.ln2_mean = zeros(rows_sp);
        L.ln2_rstd = zeros(rows_sp);
        cpu::layernorm_forward<float>(L.ln2, L.ln2_mean, L.ln2_rstd, cs(L.resid1), P.ln2_w, P.ln2_b,
                                      b_, tl_, h_);
        return;
      case Role::kFc1:
        L.fc1 = zeros(b_ * s_ * f_);
        cpu::matmul_forward<float>(L.fc1, cs(sp_ ? L.ln2_full : L.ln2), P.fc1_w, P.fc1_b, b_, s_, h_,
                                   f_);
        release(L.ln2_full);
        return;
      case Role::kGelu:
        L.gelu = zeros(b_ * s_ * f_);
        cpu::gelu_forward<float>(L.gelu, cs(L.fc1));
        return;
      case Role::kFc2:
        L.fc2 = zeros(b_ * s_ * h_);
        cpu::matmul_forward<float>(L.fc2, cs(L.gelu), P.fc2_w, {}, b_, s_, f_, h_);
        return;
      case Role::kMlpResidual: {
        Buf y = std::move(reduced(L.fc2, L.fc2_rs));
        release(L.fc2);
        release(L.fc2_rs);
        add_bias(y, P.fc2_b);
        L.out = zeros(rows_sp * h_);
        cpu::dropout_forward<float>(L.out, cs(y), dropout(kSiteMlp, op.layer),
                                    block(op.micro_batch, false));
        for (size_t i = 0; i < L.out.size(); ++i) L.out[i] += L.resid1[i];
        // Full recomputation (and evaluation) keeps only the layer input.
        if ((op.phase == Phase::kForward && recompute_ == RecomputeGranularity::kFull) ||
            !training_) {
          Buf in = std::move(L.in), out = std::move(L.out);
          L = LayerState();
          if (training_) L.in = std::move(in);
          L.out = std::move(out);
        }
        return;
      }
      default: unexpected(op, "not a layer-forward role");
    }
  }

  void add_bias(Buf& y, std::span<const float> bias) const {
    const int64_t rows = static_cast<int64_t>(y.size()) / h_;
    for (int64_t r = 0; r < rows; ++r) {
      float* row = y.data() + r * h_;
      for (int64_t c = 0; c < h_; ++c) row[c] += bias[static_cast<size_t>(c)];
    }
  }

  /// dbias += sum over rows of dy (dy [rows, width]).
  static void bias_grad(std::span<float> dbias, const Buf& dy, int64_t width) {
    const int64_t rows = static_cast<int64_t>(dy.size()) / width;
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = dy.data() + r * width;
      for (int64_t c = 0; c < width; ++c) dbias[static_cast<size_t>(c)] += row[c];
    }
  }

  /// The gradient flowing into the last layer of a chunk: from the final LayerNorm (last virtual
  /// stage) or received from the next stage.
  Buf take_output_grad(const Op& op) {
    ChunkState& st = chunk_state(op.model_chunk, op.micro_batch);
    const int64_t i = op.layer - first_layer(op.model_chunk);
    if (i + 1 < num_layers(op.model_chunk)) return std::move(st.layers[static_cast<size_t>(i + 1)].d_in);
    if (is_last_vstage(op.model_chunk)) return std::move(st.d_last);
    return std::move(st.d_output);
  }

  void layer_backward(const Op& op, const std::string& name, Role role) {
    LayerState& L = layer_state(op);
    const LayerParams& P = layer_params_.at(op.layer);
    const LayerParams& G = layer_grads_.at(op.layer);
    const int64_t rows_sp = b_ * tl_;
    const bool dgrad = name == "gemm_dgrad", wgrad = name == "gemm_wgrad";
    switch (role) {
      case Role::kMlpResidual:
        L.d_out = take_output_grad(op);
        L.d_resid1 = L.d_out;  // residual path
        L.d_branch = zeros(rows_sp * h_);
        cpu::dropout_backward<float>(L.d_branch, cs(L.d_out), dropout(kSiteMlp, op.layer),
                                     block(op.micro_batch, false));
        bias_grad(G.fc2_b, L.d_branch, h_);
        release(L.d_out);
        return;
      case Role::kFc2:
        if (dgrad) {
          L.d_gelu = zeros(b_ * s_ * f_);
          cpu::matmul_backward_data<float>(L.d_gelu, cs(sp_ ? L.d_branch_full : L.d_branch),
                                           P.fc2_w, b_, s_, f_, h_);
        } else if (wgrad) {
          cpu::matmul_backward_weight<float>(G.fc2_w, {}, cs(sp_ ? L.d_branch_full : L.d_branch),
                                             cs(L.gelu), b_, s_, f_, h_);
          release(L.d_branch);
          release(L.d_branch_full);
          release(L.gelu);
        } else {
          unexpected(op, "unexpected kernel " + name);
        }
        return;
      case Role::kGelu:
        L.d_fc1 = zeros(b_ * s_ * f_);
        cpu::gelu_backward<float>(L.d_fc1, cs(L.fc1), cs(L.d_gelu));
        release(L.d_gelu);
        release(L.fc1);
        return;
      case Role::kFc1:
        if (dgrad) {
          L.d_ln_full = zeros(b_ * s_ * h_);
          cpu::matmul_backward_data<float>(L.d_ln_full, cs(L.d_fc1), P.fc1_w, b_, s_, h_, f_);
        } else if (wgrad) {
          cpu::matmul_backward_weight<float>(G.fc1_w, G.fc1_b, cs(L.d_fc1),
                                             cs(sp_ ? L.ln2_full : L.ln2), b_, s_, h_, f_);
          release(L.d_fc1);
          release(L.ln2_full);
        } else {
          unexpected(op, "unexpected kernel " + name);
        }
        return;
      case Role::kPostAttentionLayerNorm:
        cpu::layernorm_backward<float>(L.d_resid1, G.ln2_w, G.ln2_b,
                                       cs(reduced(L.d_ln_full, L.d_ln)), cs(L.resid1), P.ln2_w,
                                       cs(L.ln2_mean), cs(L.ln2_rstd), b_, tl_, h_);
        release(L.d_ln_full);
        release(L.d_ln);
        release(L.ln2);
        return;
      case Role::kAttentionResidual:
        L.d_in = L.d_resid1;  // residual path
        L.d_branch = zeros(rows_sp * h_);
        cpu::dropout_backward<float>(L.d_branch, cs(L.d_resid1), dropout(kSiteAttention, op.layer),
                                     block(op.micro_batch, false));
        bias_grad(G.proj_b, L.d_branch, h_);
        release(L.d_resid1);
        release(L.resid1);
        return;
      case Role::kAttentionProjection:
        if (dgrad) {
          L.d_attn = zeros(b_ * s_ * hl_);
          cpu::matmul_backward_data<float>(L.d_attn, cs(sp_ ? L.d_branch_full : L.d_branch),
                                           P.proj_w, b_, s_, hl_, h_);
        } else if (wgrad) {
          cpu::matmul_backward_weight<float>(G.proj_w, {}, cs(sp_ ? L.d_branch_full : L.d_branch),
                                             cs(L.attn), b_, s_, hl_, h_);
          release(L.d_branch);
          release(L.d_branch_full);
        } else {
          unexpected(op, "unexpected kernel " + name);
        }
        return;
      case Role::kAttentionCore:
        if (L.att.empty()) unexpected(op, "attention probabilities were not kept or recomputed");
        L.d_qkv = zeros(b_ * s_ * 3 * hl_);
        cpu::attention_backward<float>(L.d_qkv, cs(L.d_attn), cs(L.qkv), cs(L.att), b_, s_, hl_,
                                       heads_, attention_dropout(op.micro_batch, op.layer));
        release(L.d_attn);
        release(L.att);
        release(L.attn);
        return;
      case Role::kQkv:
        if (dgrad) {
          L.d_ln_full = zeros(b_ * s_ * h_);
          cpu::matmul_backward_data<float>(L.d_ln_full, cs(L.d_qkv), P.qkv_w, b_, s_, h_, 3 * hl_);
        } else if (wgrad) {
          cpu::matmul_backward_weight<float>(G.qkv_w, G.qkv_b, cs(L.d_qkv),
                                             cs(sp_ ? L.ln1_full : L.ln1), b_, s_, h_, 3 * hl_);
          release(L.d_qkv);
          release(L.ln1_full);
          release(L.qkv);
        } else {
          unexpected(op, "unexpected kernel " + name);
        }
        return;
      case Role::kInputLayerNorm: {
        cpu::layernorm_backward<float>(L.d_in, G.ln1_w, G.ln1_b, cs(reduced(L.d_ln_full, L.d_ln)),
                                       cs(L.in), P.ln1_w, cs(L.ln1_mean), cs(L.ln1_rstd), b_, tl_,
                                       h_);
        Buf d_in = std::move(L.d_in);
        L = LayerState();
        L.d_in = std::move(d_in);
        return;
      }
      default: unexpected(op, "not a layer-backward role");
    }
  }

  // ---- final LayerNorm, LM head, cross-entropy --------------------------------------------------

  void head_forward(const Op& op, const std::string& name, Role role) {
    ChunkState& st = chunk_state(op.model_chunk, op.micro_batch);
    const int64_t rows = b_ * s_;
    switch (role) {
      case Role::kFinalLayerNorm: {
        const Buf& x = chunk_output(st, op.model_chunk);
        st.lnf = zeros(b_ * tl_ * h_);
        st.lnf_mean = zeros(b_ * tl_);
        st.lnf_rstd = zeros(b_ * tl_);
        cpu::layernorm_forward<float>(st.lnf, st.lnf_mean, st.lnf_rstd, cs(x),
                                      shard_.param(op.model_chunk, "final_layernorm.weight"),
                                      shard_.param(op.model_chunk, "final_layernorm.bias"), b_, tl_,
                                      h_);
        return;
      }
      case Role::kLmHead: {
        st.logits = zeros(rows * vl_);
        cpu::matmul_forward<float>(st.logits, cs(sp_ ? st.lnf_full : st.lnf),
                                   head_weight(op.model_chunk, false), {}, b_, s_, h_, vl_);
        release(st.lnf_full);
        // Padded vocabulary entries (ids >= V) take no part in the softmax.
        const int64_t valid = std::clamp<int64_t>(vocab_ - vstart_, 0, vl_);
        if (valid < vl_) {
          for (int64_t r = 0; r < rows; ++r) {
            std::fill(st.logits.begin() + r * vl_ + valid, st.logits.begin() + (r + 1) * vl_,
                      -std::numeric_limits<float>::infinity());
          }
        }
        return;
      }
      case Role::kCrossEntropyMax:
        st.lmax = zeros(rows);
        cpu::vocab_parallel_logits_max<float>(st.lmax, cs(st.logits), b_, s_, vl_);
        return;
      case Role::kCrossEntropy:
        st.sum_exp = zeros(rows);
        st.target = zeros(rows);
        cpu::vocab_parallel_sum_exp<float>(st.sum_exp, st.target, cs(st.logits), cs(st.lmax),
                                           st.labels, b_, s_, vstart_, vl_, vtotal_);
        return;
      default: unexpected(op, "not a head-forward role (" + name + ")");
    }
  }

  /// Adds the micro-batch's token losses to the iteration's total (once, on TP rank 0).
  void count_loss(ChunkState& st) {
    if (st.loss_counted) return;
    st.loss_counted = true;
    const int64_t rows = b_ * s_;
    Buf losses = zeros(rows);
    cpu::vocab_parallel_cross_entropy_loss<float>(losses, cs(st.sum_exp), cs(st.lmax),
                                                  cs(st.target), b_, s_);
    if (coord_.tp != 0) return;
    for (float l : losses) loss_sum_ += l;
    loss_tokens_ += rows;
  }

  void head_backward(const Op& op, const std::string& name, Role role) {
    ChunkState& st = chunk_state(op.model_chunk, op.micro_batch);
    const int64_t rows = b_ * s_;
    const bool dgrad = name == "gemm_dgrad", wgrad = name == "gemm_wgrad";
    switch (role) {
      case Role::kCrossEntropy: {
        count_loss(st);
        // Mean over the global batch's tokens: each token weighs 1 / (b s m DP).
        const float w = static_cast<float>(1.0 / static_cast<double>(b_ * s_ * m_ * dp_));
        Buf dlosses(static_cast<size_t>(rows), w);
        st.d_logits = zeros(rows * vl_);
        cpu::vocab_parallel_cross_entropy_backward<float>(st.d_logits, cs(dlosses), cs(st.logits),
                                                          cs(st.lmax), cs(st.sum_exp), st.labels,
                                                          b_, s_, vstart_, vl_, vtotal_);
        release(st.logits);
        return;
      }
      case Role::kLmHead:
        if (dgrad) {
          st.d_lnf_full = zeros(rows * h_);
          cpu::matmul_backward_data<float>(st.d_lnf_full, cs(st.d_logits),
                                           head_weight(op.model_chunk, false), b_, s_, h_, vl_);
        } else if (wgrad) {
          cpu::matmul_backward_weight<float>(head_weight(op.model_chunk, true), {},
                                             cs(st.d_logits), cs(sp_ ? st.lnf_full : st.lnf), b_,
                                             s_, h_, vl_);
          release(st.d_logits);
          release(st.lnf_full);
        } else {
          unexpected(op, "unexpected kernel " + name);
        }
        return;
      case Role::kFinalLayerNorm:
        st.d_last = zeros(b_ * tl_ * h_);
        cpu::layernorm_backward<float>(
            st.d_last, shard_.grad(op.model_chunk, "final_layernorm.weight"),
            shard_.grad(op.model_chunk, "final_layernorm.bias"), cs(reduced(st.d_lnf_full, st.d_lnf)),
            cs(chunk_output(st, op.model_chunk)), shard_.param(op.model_chunk, "final_layernorm.weight"),
            cs(st.lnf_mean), cs(st.lnf_rstd), b_, tl_, h_);
        release(st.d_lnf_full);
        release(st.d_lnf);
        release(st.lnf);
        return;
      default: unexpected(op, "not a head-backward role");
    }
  }

  // ---- collectives -----------------------------------------------------------------------------

  void issue_collective(const Op& op) {
    const bool fwd = op.phase == Phase::kForward || op.phase == Phase::kRecompute;
    const bool gather = op.collective == CollectiveKind::kAllGather;
    switch (op.role) {
      case Role::kEmbedding: {
        ChunkState& st = chunk_state(op.model_chunk, op.micro_batch);
        if (fwd) return reduce_tp(op, st.emb, &st.emb_rs);
        return gather_sp(op, chunk_input_grad(st, op.model_chunk), &st.d_emb_full);
      }
      case Role::kQkv:
      case Role::kFc1: {
        LayerState& L = layer_state(op);
        const bool qkv = op.role == Role::kQkv;
        if (gather) return gather_sp(op, qkv ? L.ln1 : L.ln2, qkv ? &L.ln1_full : &L.ln2_full);
        if (fwd) unexpected(op, "unexpected forward reduce");
        return reduce_tp(op, L.d_ln_full, &L.d_ln);
      }
      case Role::kAttentionProjection:
      case Role::kFc2: {
        LayerState& L = layer_state(op);
        const bool proj = op.role == Role::kAttentionProjection;
        if (fwd) return reduce_tp(op, proj ? L.proj : L.fc2, proj ? &L.proj_rs : &L.fc2_rs);
        return gather_sp(op, L.d_branch, &L.d_branch_full);
      }
      case Role::kLmHead: {
        ChunkState& st = chunk_state(op.model_chunk, op.micro_batch);
        if (gather) return gather_sp(op, st.lnf, &st.lnf_full);
        return reduce_tp(op, st.d_lnf_full, &st.d_lnf);
      }
      case Role::kCrossEntropyMax:
      case Role::kCrossEntropyTarget:
      case Role::kCrossEntropySumExp: {
        ChunkState& st = chunk_state(op.model_chunk, op.micro_batch);
        Buf& x = op.role == Role::kCrossEntropyMax      ? st.lmax
                 : op.role == Role::kCrossEntropyTarget ? st.target
                                                        : st.sum_exp;
        InFlight f;
        f.request = comm_.all_reduce(GroupKind::kTp, std::span<float>(x),
                                     op.role == Role::kCrossEntropyMax ? ReduceOp::kMax
                                                                       : ReduceOp::kSum);
        return start(op, std::move(f));
      }
      case Role::kGradBucket: return grad_bucket(op);
      case Role::kParamBucket: return param_bucket(op);
      case Role::kLayerNormGrads: return layernorm_grads(op);
      case Role::kEmbeddingGrads: {
        const bool first = coord_.pp == 0;
        std::span<float> g = first ? shard_.grad(0, "embedding.word_embeddings.weight")
                                   : shard_.grad(static_cast<int64_t>(shard_.chunks().size()) - 1,
                                                 "output_layer.weight");
        InFlight f;
        f.request = comm_.all_reduce(GroupKind::kEmbedding, g, ReduceOp::kSum);
        return start(op, std::move(f));
      }
      case Role::kGradNorm: {
        InFlight f;
        f.request = comm_.all_reduce(op.group, std::span<double>(&sum_sq_, 1), ReduceOp::kSum);
        return start(op, std::move(f));
      }
      default: unexpected(op, std::string("no collective for role ") + to_string(op.role));
    }
  }

  // ---- DP buckets and the distributed optimizer -----------------------------------------------
  // With the distributed optimizer (ZeRO-1) DP rank d owns piece d of every tensor: elements
  // [d x P, (d+1) x P) with P = ceil(numel / DP). It updates only those (AdamW, grad norm); the
  // bucket's gradient reduce-scatter brings it the reduced pieces and the parameter all-gather
  // brings every rank the others' updated pieces. Sharding per tensor (Megatron shards each
  // bucket's flat range) makes the word embedding of the first stage and its LM-head copy on the
  // last stage share one partition, so the tied-embedding all-reduce that follows the DP
  // reduce-scatter adds matching pieces (Megatron gets the same by giving the shared embedding
  // its own bucket).

  int64_t piece(const ShardTensor& t) const { return (t.numel + dp_ - 1) / dp_; }
  /// [begin, end) of the elements of `t` DP rank `d` owns (everything without the distributed
  /// optimizer).
  std::pair<int64_t, int64_t> owned(const ShardTensor& t, int64_t d) const {
    if (!dist_opt_) return {0, t.numel};
    const int64_t lo = std::min(t.numel, d * piece(t));
    return {lo, std::min(t.numel, lo + piece(t))};
  }

  /// The tensors of a bucket op's items.
  std::vector<const ShardTensor*> bucket_tensors(const Op& op) const {
    const auto [begin, end] = shard_.item_range(op.model_chunk, op.bucket_layers);
    std::vector<const ShardTensor*> out;
    for (const ShardTensor& t : shard_.chunks()[static_cast<size_t>(op.model_chunk)].tensors) {
      if (t.offset >= begin && t.offset < end) out.push_back(&t);
    }
    return out;
  }

  void grad_bucket(const Op& op) {
    auto& grads = shard_.chunks()[static_cast<size_t>(op.model_chunk)].grads;
    InFlight f;
    if (op.collective == CollectiveKind::kAllReduce) {
      const auto [begin, end] = shard_.item_range(op.model_chunk, op.bucket_layers);
      f.request = comm_.all_reduce(op.group, std::span<float>(grads.data() + begin,
                                                              static_cast<size_t>(end - begin)),
                                   ReduceOp::kSum);
      return start(op, std::move(f));
    }
    if (op.collective != CollectiveKind::kReduceScatter) unexpected(op, "unexpected bucket collective");
    // Member-major input: for each DP rank d, piece d of every tensor (zero-padded).
    const std::vector<const ShardTensor*> tensors = bucket_tensors(op);
    int64_t per_member = 0;
    for (const ShardTensor* t : tensors) per_member += piece(*t);
    f.buffer = zeros(per_member * dp_);
    for (int64_t d = 0, k = 0; d < dp_; ++d) {
      for (const ShardTensor* t : tensors) {
        const auto [lo, hi] = owned(*t, d);
        std::copy(grads.begin() + t->offset + lo, grads.begin() + t->offset + hi,
                  f.buffer.begin() + k);
        k += piece(*t);
      }
    }
    auto out = std::make_shared<Buf>(zeros(per_member));
    f.request = comm_.reduce_scatter(op.group, cs(f.buffer), std::span<float>(*out), ReduceOp::kSum);
    f.on_complete = [this, tensors, out, &grads] {
      int64_t k = 0;
      for (const ShardTensor* t : tensors) {
        const auto [lo, hi] = owned(*t, coord_.dp);
        std::copy(out->begin() + k, out->begin() + k + (hi - lo), grads.begin() + t->offset + lo);
        k += piece(*t);
      }
    };
    start(op, std::move(f));
  }

  /// Distributed optimizer: every DP rank's updated pieces of the bucket's parameters to all.
  void param_bucket(const Op& op) {
    if (op.collective != CollectiveKind::kAllGather) unexpected(op, "expected an all-gather");
    auto& params = shard_.chunks()[static_cast<size_t>(op.model_chunk)].params;
    const std::vector<const ShardTensor*> tensors = bucket_tensors(op);
    int64_t per_member = 0;
    for (const ShardTensor* t : tensors) per_member += piece(*t);
    InFlight f;
    auto mine = std::make_shared<Buf>(zeros(per_member));
    for (int64_t k = 0; const ShardTensor* t : tensors) {
      const auto [lo, hi] = owned(*t, coord_.dp);
      std::copy(params.begin() + t->offset + lo, params.begin() + t->offset + hi, mine->begin() + k);
      k += piece(*t);
    }
    f.buffer = zeros(per_member * dp_);
    f.request = comm_.all_gather(op.group, cs(*mine), std::span<float>(f.buffer));
    start(op, std::move(f));
    const Buf* gathered = &inflight_[op.id]->buffer;
    inflight_[op.id]->on_complete = [this, tensors, mine, gathered, &params] {
      for (int64_t d = 0, k = 0; d < dp_; ++d) {
        for (const ShardTensor* t : tensors) {
          const auto [lo, hi] = owned(*t, d);
          std::copy(gathered->begin() + k, gathered->begin() + k + (hi - lo),
                    params.begin() + t->offset + lo);
          k += piece(*t);
        }
      }
    };
  }

  /// SP: the gradients of the TP-replicated tensors computed from sequence shards (LayerNorms,
  /// row-parallel biases) summed over TP: packed, all-reduced, unpacked on completion.
  void layernorm_grads(const Op& op) {
    InFlight f;
    for (const auto& c : shard_.chunks()) {
      for (const auto& t : c.tensors) {
        if (!t.sequence_parallel_grad) continue;
        f.buffer.insert(f.buffer.end(), c.grads.begin() + t.offset,
                        c.grads.begin() + t.offset + t.numel);
      }
    }
    f.request = comm_.all_reduce(GroupKind::kTp, std::span<float>(f.buffer), ReduceOp::kSum);
    start(op, std::move(f));
    const Buf* packed = &inflight_[op.id]->buffer;
    inflight_[op.id]->on_complete = [this, packed] {
      size_t k = 0;
      for (auto& c : shard_.chunks()) {
        for (const auto& t : c.tensors) {
          if (!t.sequence_parallel_grad) continue;
          std::copy(packed->begin() + static_cast<ptrdiff_t>(k),
                    packed->begin() + static_cast<ptrdiff_t>(k + static_cast<size_t>(t.numel)),
                    c.grads.begin() + t.offset);
          k += static_cast<size_t>(t.numel);
        }
      }
    };
  }

  // ---- pipeline send/recv ----------------------------------------------------------------------

  void issue_p2p(const Op& op) {
    // tag = (mb x stages + sender's virtual stage) x 2 + (0 forward | 1 backward)
    const int64_t stages = p_ * v_;
    const bool backward = op.tag % 2 == 1;
    const int64_t mb = op.tag / 2 / stages;
    const int64_t sender_vs = (op.tag / 2) % stages;
    const int64_t my_vs = op.kind == OpKind::kSend ? sender_vs : sender_vs + (backward ? -1 : 1);
    const int64_t chunk = my_vs / p_;
    ChunkState& st = chunk_state(chunk, mb);
    InFlight f;
    if (op.kind == OpKind::kSend) {
      f.buffer = backward ? std::move(chunk_input_grad(st, chunk)) : chunk_output(st, chunk);
      if (backward && !st.layers.empty()) st.layers.front() = LayerState();
      f.request = comm_.send(op.peer, op.tag, cs(f.buffer));
    } else {
      Buf& dst = backward ? st.d_output : st.input;
      dst = zeros(b_ * tl_ * h_);
      f.request = comm_.recv(op.peer, op.tag, std::span<float>(dst));
    }
    start(op, std::move(f));
  }

  // ---- optimizer -------------------------------------------------------------------------------

  /// Local sum of squares of the gradients this rank owns for the norm: TP-sharded tensors, and
  /// replicated ones on TP rank 0 only; the LM head's copy of the word embedding not at all
  /// (counted on the first stage), as Megatron's get_grad_norm_fp32; with the distributed
  /// optimizer only this DP rank's pieces (the Program then all-reduces over the world).
  void grad_norm_kernel() {
    sum_sq_ = 0;
    for (const auto& c : shard_.chunks()) {
      for (const auto& t : c.tensors) {
        if (t.shared_embedding) continue;
        if (!t.tensor_parallel && coord_.tp != 0) continue;
        const auto [lo, hi] = owned(t, coord_.dp);
        sum_sq_ += cpu::sum_of_squares(CSpan(c.grads.data() + t.offset + lo, static_cast<size_t>(hi - lo)));
      }
    }
  }

  void optimizer_step() {
    grad_norm_ = std::sqrt(sum_sq_);
    if (!std::isfinite(grad_norm_)) {
      throw Error("iteration " + std::to_string(iteration_) + ": the gradient norm is " +
                  std::to_string(grad_norm_) + "; the step was not applied");
    }
    const double coef = hyper_.clip_grad > 0 ? cpu::clip_coefficient(grad_norm_, hyper_.clip_grad) : 1.0;
    lr_ = learning_rate(hyper_.lr, iteration_);
    for (auto& c : shard_.chunks()) {
      if (coef < 1.0) cpu::scale_in_place(std::span<float>(c.grads), coef);
      for (const auto& t : c.tensors) {
        const auto [lo, hi] = owned(t, coord_.dp);  // the distributed optimizer's piece
        if (hi == lo) continue;
        // Copies, not the bindings: C++20 lambdas cannot capture structured bindings in clang 14.
        auto slice = [&t, lo = lo, hi = hi](Buf& b) {
          return std::span<float>(b.data() + t.offset + lo, static_cast<size_t>(hi - lo));
        };
        cpu::AdamWParams hp = hyper_.adam;
        if (!t.weight_decay) hp.weight_decay = 0;
        cpu::adamw_step<float>(slice(c.params), slice(c.grads), slice(c.exp_avg),
                               slice(c.exp_avg_sq), hp, lr_, iteration_);
      }
    }
  }

  const Program& prog_;
  Communicator& comm_;
  ModelShard& shard_;
  TrainingHyperparameters hyper_;
  std::chrono::steady_clock::time_point origin_;
  const RankProgram* rp_ = nullptr;
  RankCoord coord_;

  int64_t b_ = 0, s_ = 0, h_ = 0, t_ = 0, hl_ = 0, f_ = 0, heads_ = 0, tl_ = 0, p_ = 0, v_ = 0,
          m_ = 0, dp_ = 0, vocab_ = 0, vl_ = 0, vstart_ = 0, vtotal_ = 0;
  bool sp_ = false;
  bool dist_opt_ = false;
  RecomputeGranularity recompute_ = RecomputeGranularity::kNone;
  std::vector<ChunkLayers> chunk_layers_;  // per model chunk of this rank
  std::map<int64_t, LayerParams> layer_params_, layer_grads_;

  // per iteration
  int64_t iteration_ = 0;
  const MicroBatchSource* data_ = nullptr;
  bool training_ = false;
  std::map<std::pair<int64_t, int64_t>, ChunkState> chunks_;  // (chunk, mb)
  std::vector<std::optional<InFlight>> inflight_;
  std::vector<OpSpan> spans_;
  double loss_sum_ = 0;
  int64_t loss_tokens_ = 0;
  double sum_sq_ = 0, grad_norm_ = 0, lr_ = 0;
  cpu::AttentionProbabilityDropout att_dropout_;
};

Executor::Executor(const Program& program, Communicator& comm, ModelShard& shard,
                   TrainingHyperparameters hyper)
    : impl_(std::make_unique<Impl>(program, comm, shard, std::move(hyper))) {}
Executor::~Executor() = default;

IterationResult Executor::train_iteration(int64_t iteration, const MicroBatchSource& data) {
  if (iteration < 1) throw InvalidArgument("executor: iteration must be >= 1");
  return impl_->train(iteration, data);
}

IterationResult Executor::evaluate(const MicroBatchSource& data) { return impl_->evaluate(data); }

void Executor::reset_clock() { impl_->reset_clock(); }

void Executor::synchronize_parameters() { impl_->synchronize_parameters(); }

}  // namespace traintwin::exec
