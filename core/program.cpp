#include "core/program.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "core/error.hpp"
#include "core/kernel_catalogue.hpp"
#include "core/memory.hpp"
#include "core/moe_tokens.hpp"
#include "core/params.hpp"
#include "core/pipeline_split.hpp"

namespace traintwin {

const char* to_string(Stream s) {
  switch (s) {
    case Stream::kCompute: return "compute";
    case Stream::kTpComm: return "tp-comm";
    case Stream::kCpComm: return "cp-comm";
    case Stream::kPpComm: return "pp-comm";
    case Stream::kDpComm: return "dp-comm";
    case Stream::kEpComm: return "ep-comm";
  }
  return "?";
}

const char* to_string(OpKind k) {
  switch (k) {
    case OpKind::kCompute: return "compute";
    case OpKind::kCollective: return "collective";
    case OpKind::kSend: return "send";
    case OpKind::kRecv: return "recv";
  }
  return "?";
}

const char* to_string(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kAllToAll: return "all_to_all";
    case CollectiveKind::kRingExchange: return "ring_exchange";
  }
  return "?";
}

const char* to_string(Phase p) {
  switch (p) {
    case Phase::kForward: return "fwd";
    case Phase::kBackward: return "bwd";
    case Phase::kRecompute: return "recompute";
    case Phase::kGradSync: return "grad-sync";
    case Phase::kParamSync: return "param-sync";
    case Phase::kOptimizer: return "optimizer";
  }
  return "?";
}

const char* to_string(Role r) {
  switch (r) {
    case Role::kNone: return "none";
    case Role::kEmbedding: return "embedding";
    case Role::kEmbeddingDropout: return "embedding dropout";
    case Role::kInputLayerNorm: return "input layernorm";
    case Role::kQkv: return "qkv";
    case Role::kAttentionCore: return "attention core";
    case Role::kAttentionProjection: return "attention projection";
    case Role::kAttentionResidual: return "attention residual";
    case Role::kPostAttentionLayerNorm: return "post-attention layernorm";
    case Role::kFc1: return "fc1";
    case Role::kGelu: return "activation";
    case Role::kFc2: return "fc2";
    case Role::kMlpResidual: return "mlp residual";
    case Role::kRouter: return "router";
    case Role::kMoePermute: return "moe permute";
    case Role::kMoeDispatch: return "moe dispatch";
    case Role::kExpertFc1: return "expert fc1";
    case Role::kExpertActivation: return "expert activation";
    case Role::kExpertFc2: return "expert fc2";
    case Role::kMoeCombine: return "moe combine";
    case Role::kMoeUnpermute: return "moe unpermute";
    case Role::kFinalLayerNorm: return "final layernorm";
    case Role::kLmHead: return "lm head";
    case Role::kCrossEntropyMax: return "cross entropy max";
    case Role::kCrossEntropy: return "cross entropy";
    case Role::kCrossEntropyTarget: return "cross entropy target";
    case Role::kCrossEntropySumExp: return "cross entropy sum-exp";
    case Role::kPipeline: return "pipeline";
    case Role::kGradBucket: return "grad bucket";
    case Role::kParamBucket: return "param bucket";
    case Role::kLayerNormGrads: return "layernorm grads";
    case Role::kEmbeddingGrads: return "embedding grads";
    case Role::kGradNorm: return "grad norm";
    case Role::kOptimizerStep: return "optimizer step";
    case Role::kZeroGradBuffer: return "zero grad buffer";
    case Role::kGradClipScale: return "grad clip scale";
  }
  return "?";
}

std::string KernelKey::to_string() const {
  std::ostringstream o;
  o << name << '[';
  for (size_t i = 0; i < shape.size(); ++i) o << (i ? "," : "") << shape[i];
  o << "] " << traintwin::to_string(dtype) << " tp" << tp;
  return o.str();
}

size_t KernelKeyHash::operator()(const KernelKey& k) const {
  size_t h = std::hash<std::string>()(k.name);
  auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  for (int64_t d : k.shape) mix(std::hash<int64_t>()(d));
  mix(static_cast<size_t>(k.dtype));
  mix(std::hash<int64_t>()(k.tp));
  return h;
}

double Program::op_flops(const Op& op) const {
  double f = 0;
  for (uint32_t k : op.kernels) f += kernels[k].flops;
  return f;
}

std::string Program::label(const Op& op) const {
  std::ostringstream o;
  o << to_string(op.phase);
  if (op.micro_batch >= 0) o << " mb" << op.micro_batch;
  if (op.model_chunk >= 0 && scenario.parallel.virtual_pipeline_model_parallel_size > 1) {
    o << " chunk" << op.model_chunk;
  }
  if (op.layer >= 0) o << " L" << op.layer;
  o << ' ' << op.what;
  switch (op.kind) {
    case OpKind::kCompute: break;
    case OpKind::kCollective:
      o << " [" << to_string(op.collective) << ' ' << to_string(op.group) << ' ' << op.bytes
        << " B]";
      break;
    case OpKind::kSend: o << " [send " << op.bytes << " B to " << op.peer << " tag " << op.tag << ']'; break;
    case OpKind::kRecv: o << " [recv " << op.bytes << " B from " << op.peer << " tag " << op.tag << ']'; break;
  }
  return o.str();
}

RankProgramStats program_stats(const Program& prog, const RankProgram& rp) {
  RankProgramStats st;
  for (const Op& op : rp.ops) {
    const auto s = static_cast<size_t>(op.stream);
    ++st.ops[s];
    if (op.kind == OpKind::kCompute) {
      st.kernels += static_cast<int64_t>(op.kernels.size());
      st.flops += prog.op_flops(op);
    } else {
      st.comm_bytes[s] += static_cast<double>(op.bytes);
    }
  }
  return st;
}

int64_t ddp_bucket_size_params(const Scenario& s) {
  if (!s.training.overlap_grad_reduce) return 0;
  // Megatron-LM training.py: bucket_size = max(40000000, 1000000 * dp_size_with_cp).
  const int64_t dp_cp = s.parallel.data_parallel_size * s.parallel.context_parallel_size;
  return std::max<int64_t>(40'000'000, 1'000'000 * dp_cp);
}

namespace {

constexpr uint32_t kNoOp = std::numeric_limits<uint32_t>::max();

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Sizes used by the lowering, named as in Korthikanti et al.: s, b, h, a, t, ...
struct Dims {
  int64_t p, v, t, m, b, s, h, a, hd, ffn, vocab_local;
  int64_t aw;  ///< attention width a x hd (the projection's input; = h unless kv_channels)
  std::vector<ChunkLayers> split;  // the layers of each virtual stage (core/pipeline_split.hpp)
  int64_t cp;          // context-parallel size
  int64_t s_full;      // the whole sequence (s is the local s / CP)
  int64_t g;           // query groups (K/V heads)
  int64_t qkv_local;   // QKV GEMM output width per TP rank: (a + 2g) d / t
  int64_t fc1_local;   // FC1 output width per TP rank: 2 ffn / t (SwiGLU) or ffn / t
  ModelSpec model;
  int64_t dsize;       // bytes per activation/parameter element
  int64_t grad_bytes;  // bytes per gradient element in the DP reduce
  bool sp;
  int64_t tokens;      // s * b: rows of the TP-region GEMMs
  int64_t tokens_sp;   // rows of the LN/dropout regions: s*b/t with SP, else s*b
  Precision dtype;
  Precision matmul_dtype;  // the KernelKey dtype of the matrix products (matmul_precision())
  AttentionBackend backend;
  // Mixture of experts (zeros / ones for a dense model; build_program() names them).
  int64_t experts = 0;     // E
  int64_t topk = 0;        // k
  int64_t ep = 1, etp = 1;
  int64_t local_experts = 0;     // E / EP
  int64_t expert_ffn = 0;        // ffn_e: one routed expert's inner width
  int64_t expert_fc1_local = 0;  // FC1 output width of an expert per ETP rank
  int64_t shared_ffn = 0;        // shared expert width (0 = none)
  int64_t shared_fc1_local = 0;  // its FC1 output width per TP rank
  int64_t moe_tokens = 0;        // T: the router's input rows (moe_local_tokens)
  int64_t per_expert = 0;        // P: token copies one rank sends to one expert (busiest)
  int64_t expert_rows = 0;       // rows of one local expert's GEMMs: ETP x EP x per_expert

  explicit Dims(const Scenario& sc) {
    backend = sc.training.attention_backend;
    p = sc.parallel.pipeline_model_parallel_size;
    v = sc.parallel.virtual_pipeline_model_parallel_size;
    t = sc.parallel.tensor_model_parallel_size;
    cp = sc.parallel.context_parallel_size;
    m = sc.num_micro_batches();
    b = sc.training.micro_batch_size;
    s_full = sc.model.seq_length;
    s = s_full / cp;
    model = sc.model;
    g = sc.model.query_groups();
    qkv_local = sc.model.qkv_width() / t;
    fc1_local = sc.model.fc1_width() / t;
    h = sc.model.hidden_size;
    a = sc.model.num_attention_heads;
    hd = sc.model.head_dim();
    aw = sc.model.attention_width();
    ffn = sc.model.ffn_hidden_size;
    vocab_local = padded_vocab_size(sc.model.vocab_size, t) / t;
    split = pipeline_layer_split(sc.model, sc.parallel);
    dtype = sc.training.precision;
    matmul_dtype = matmul_precision(sc.training);
    dsize = bytes_per_element(dtype);
    grad_bytes = static_cast<int64_t>(bytes_per_parameter(dtype, false, 1).gradients);
    sp = sc.parallel.sequence_parallel;
    tokens = s * b;
    tokens_sp = sp ? tokens / t : tokens;
    if (sc.model.is_moe()) {
      experts = sc.model.num_moe_experts;
      topk = sc.model.moe_router_topk;
      ep = sc.parallel.expert_model_parallel_size;
      etp = sc.parallel.expert_tp();
      local_experts = experts / ep;
      expert_ffn = sc.model.moe_expert_ffn();
      expert_fc1_local = sc.model.fc1_width_of(expert_ffn) / etp;
      shared_ffn = sc.model.moe_shared_expert_intermediate_size;
      shared_fc1_local = sc.model.fc1_width_of(shared_ffn) / t;
      moe_tokens = moe_local_tokens(sc);
      // The busiest rank's expert tokens (core/moe_tokens.hpp: ETP T k x imbalance, capped or
      // padded at ETP E C) spread over its ETP x E (expert, source ETP rank) pairs, rounded up.
      per_expert = static_cast<int64_t>(
          std::ceil(moe_expert_tokens_per_rank(sc) / static_cast<double>(etp * experts) - 1e-9));
      expert_rows = etp * ep * per_expert;
    }
  }
};

/// Interns kernels into the Program's kernel table.
class KernelTable {
 public:
  explicit KernelTable(std::vector<Kernel>& kernels) : kernels_(kernels) {}
  uint32_t add(Kernel k) {
    auto [it, inserted] = index_.try_emplace(k.key, static_cast<uint32_t>(kernels_.size()));
    if (inserted) kernels_.push_back(std::move(k));
    return it->second;
  }

 private:
  std::vector<Kernel>& kernels_;
  std::unordered_map<KernelKey, uint32_t, KernelKeyHash> index_;
};

// ---- Kernel catalogue: name, shape, FLOPs, bytes --------------------------------------------
// GEMMs keep the forward GEMM's {m, n, k} (Y[m,n] = X[m,k] W[k,n]) for all three variants:
// gemm_fwd, gemm_dgrad (dX = dY W^T) and gemm_wgrad (dW = X^T dY); each is 2mnk FLOPs.

struct KernelFactory {
  const Dims& d;

  // The key's dtype: the matrix products' (gemm and attention classes of the catalogue) or the
  // training precision. Bytes stay those of the stored precision (TF32 and bf16 arithmetic of
  // fp32 training read and write fp32).
  Kernel make(const char* name, std::vector<int64_t> shape, double flops, double bytes) const {
    return Kernel{KernelKey{name, std::move(shape), key_dtype(name), d.t}, flops, bytes};
  }
  Precision key_dtype(const char* name) const {
    if (d.matmul_dtype == d.dtype) return d.dtype;
    const KernelDescriptor* desc = find_kernel(name);
    const bool product = desc != nullptr && (desc->cost_class == KernelClass::kGemm ||
                                             desc->cost_class == KernelClass::kAttention);
    return product ? d.matmul_dtype : d.dtype;
  }
  Kernel gemm(const char* name, int64_t m, int64_t n, int64_t k) const {
    const double fm = static_cast<double>(m), fn = static_cast<double>(n),
                 fk = static_cast<double>(k);
    return make(name, {m, n, k}, 2.0 * fm * fn * fk,
                (fm * fk + fk * fn + fm * fn) * static_cast<double>(d.dsize));
  }
  // A transformer-layer GEMM: FP8 under training.fp8_format (both operands 1 byte, the output
  // 16-bit; dtype fp8 in its key, so the cost model takes the FP8 peak), else gemm().
  Kernel layer_gemm(const char* name, int64_t m, int64_t n, int64_t k, bool fp8) const {
    if (!fp8) return gemm(name, m, n, k);
    const double fm = static_cast<double>(m), fn = static_cast<double>(n),
                 fk = static_cast<double>(k);
    return Kernel{KernelKey{name, {m, n, k}, Precision::kFp8, d.t}, 2.0 * fm * fn * fk,
                  fm * fk + fk * fn + fm * fn * static_cast<double>(d.dsize)};
  }
  // FP8 cast of n 16-bit elements (reads 2 bytes, writes 1; with the transpose Hopper's FP8
  // GEMMs need for the weight-gradient and dgrad operands another byte): Transformer Engine's
  // cast / cast_transpose, which also records the amax.
  Kernel fp8_cast(int64_t n, bool transpose) const {
    const double fn = static_cast<double>(n);
    return make(transpose ? "fp8_cast_transpose" : "fp8_cast", {n}, 2 * fn,
                fn * (static_cast<double>(d.dsize) + (transpose ? 2.0 : 1.0)));
  }
  // Tensorwise (current) scaling: the amax of a tensor before its cast, one more read.
  Kernel fp8_amax(int64_t n) const {
    const double fn = static_cast<double>(n);
    return make("fp8_amax", {n}, fn, fn * static_cast<double>(d.dsize));
  }
  // Delayed scaling: roll the amax history (1024 entries) and recompute the scales of the n
  // FP8 tensors of one layer (fp32).
  Kernel fp8_scale_update(int64_t tensors) const {
    const double n = static_cast<double>(tensors) * 1024.0;
    return make("fp8_scale_update", {tensors}, 2 * n, 8 * n);
  }
  // Attention core for b samples, `heads` local query heads (kv_heads K/V heads), sq queries
  // against sq keys, head_dim hd: QK^T and attention-over-values, 2 * 2 * b * heads * sq^2 * hd
  // FLOPs forward (full sq x sq, as the papers count), twice that backward. Unfused
  // ("attention_fwd/bwd"): the sq x sq scores are written and read by the softmax and dropout
  // (forward: scores, softmax, mask, dropout output; backward about twice that). Flash
  // ("flash_attention_fwd/bwd", Dao et al. 2022): Q, K, V, O (+ dO, dQ, dK, dV backward) only.
  // A CP block of ring attention is this kernel with sq = s / CP.
  Kernel attention(bool backward, int64_t heads, int64_t kv_heads, int64_t sq) const {
    const bool flash = d.backend == AttentionBackend::kFlash;
    const char* name = flash ? (backward ? "flash_attention_bwd" : "flash_attention_fwd")
                             : (backward ? "attention_bwd" : "attention_fwd");
    const double per_head = static_cast<double>(d.b * sq * d.hd * d.dsize);
    const double qo = 2.0 * static_cast<double>(heads) * per_head;     // Q and O
    const double kv = 2.0 * static_cast<double>(kv_heads) * per_head;  // K and V
    const double scores = static_cast<double>(d.b * heads) * static_cast<double>(sq) *
                          static_cast<double>(sq) * (3.0 * static_cast<double>(d.dsize) + 1.0);
    const double f = 4.0 * static_cast<double>(d.b * heads) * static_cast<double>(sq) *
                     static_cast<double>(sq) * static_cast<double>(d.hd);
    const double bytes = (backward ? 2 * (qo + kv) : qo + kv) +
                         (flash ? 0.0 : (backward ? 2 : 1) * scores);
    return make(name, {d.b, heads, sq, d.hd}, backward ? 2 * f : f, bytes);
  }
  // Ring attention: merge a block's partial output into the running one by their log-sum-exps
  // (Transformer Engine's out correction): reads both outputs, writes one.
  Kernel attention_merge(int64_t heads) const {
    const double n = static_cast<double>(d.b * d.s * heads * d.hd);
    return make("cp_attention_merge", {d.b, heads, d.s, d.hd}, 4 * n,
                3 * n * static_cast<double>(d.dsize));
  }
  // Rotary position embedding (Su et al. 2021) on the local Q and K heads: a rotation of each
  // pair of channels, 6 FLOPs per pair; reads and writes the tensors (cos/sin tables cached).
  Kernel rope(bool backward) const {
    const int64_t n = d.tokens * (d.a / d.t + d.g / d.t) * d.hd;
    const double fn = static_cast<double>(n);
    return make(backward ? "rope_bwd" : "rope_fwd", {n}, 3 * fn,
                2 * fn * static_cast<double>(d.dsize));
  }
  // The MLP activation on the FC1 output of the local tokens: GeLU (8 FLOPs per element, reads
  // x and writes y; backward reads x, dy, writes dx), SwiGLU silu(gate) * up (reads 2 ffn,
  // writes ffn; backward reads 2 ffn + dy, writes 2 ffn), squared ReLU (reads x, writes y).
  Kernel activation(bool backward) const {
    return activation_of(backward, d.tokens * d.ffn / d.t);  // elements of the output
  }
  Kernel activation_of(bool backward, int64_t n) const {
    const double fn = static_cast<double>(n);
    const double e = static_cast<double>(d.dsize);
    switch (d.model.activation) {
      case Activation::kSwiglu:
        return make(backward ? "swiglu_bwd" : "swiglu_fwd", {n}, backward ? 16 * fn : 8 * fn,
                    (backward ? 5 : 3) * fn * e);
      case Activation::kSquaredRelu:
        return make(backward ? "squared_relu_bwd" : "squared_relu_fwd", {n}, 2 * fn,
                    (backward ? 3 : 2) * fn * e);
      case Activation::kGelu:
        break;
    }
    return make(backward ? "gelu_bwd" : "gelu_fwd", {n}, 8 * fn, (backward ? 3 : 2) * fn * e);
  }
  // LayerNorm (mean and variance) or RMSNorm (root mean square only) over the LN region.
  Kernel norm(bool backward) const {
    if (d.model.normalization == Normalization::kRmsNorm) {
      const double n = static_cast<double>(d.tokens_sp * d.h);
      return make(backward ? "rmsnorm_bwd" : "rmsnorm_fwd", {d.tokens_sp, d.h},
                  backward ? 8 * n : 4 * n, (backward ? 3 : 2) * n * static_cast<double>(d.dsize));
    }
    return layernorm(backward);
  }
  Kernel layernorm(bool backward) const {
    const double n = static_cast<double>(d.tokens_sp * d.h);
    return make(backward ? "layernorm_bwd" : "layernorm_fwd", {d.tokens_sp, d.h},
                backward ? 12 * n : 8 * n, (backward ? 3 : 2) * n * static_cast<double>(d.dsize));
  }
  // bias + dropout + residual add over the LN region; 1-byte mask.
  Kernel dropout_add(bool backward) const {
    const int64_t n = d.tokens_sp * d.h;
    const double fn = static_cast<double>(n);
    return make(backward ? "dropout_add_bwd" : "dropout_add_fwd", {n}, 2 * fn,
                (backward ? 2 : 3) * fn * static_cast<double>(d.dsize) + fn);
  }
  Kernel elementwise_vocab(const char* name, double flops_per_elem, double passes) const {
    const double n = static_cast<double>(d.tokens * d.vocab_local);
    return make(name, {d.tokens, d.vocab_local}, flops_per_elem * n,
                passes * n * static_cast<double>(d.dsize));
  }
  Kernel embedding(bool backward) const {
    const double n = static_cast<double>(d.tokens * d.h);
    return make(backward ? "embedding_bwd" : "embedding_fwd", {d.tokens, d.h, d.vocab_local},
                backward ? n : 0, (backward ? 3 : 2) * n * static_cast<double>(d.dsize));
  }
  Kernel dropout() const {
    const int64_t n = d.tokens_sp * d.h;
    const double fn = static_cast<double>(n);
    return make("dropout_fwd", {n}, fn, 2 * fn * static_cast<double>(d.dsize) + fn);
  }
  // ---- MoE kernels (T router rows, E experts, k = topk; fp32 router scores) ----
  // Router top-k and probabilities on T x E logits: Megatron's default topk-then-softmax (top-k
  // selection about k comparisons per logit, softmax over the k chosen: 5 FLOPs each), plus,
  // for the aux loss, a softmax over all E scores (5 per logit); reads the fp32 logits, writes
  // the k probabilities and indices (fp32 + int32) and the T x E routing map (bool).
  Kernel router_topk(bool backward, int64_t rows, bool aux_scores) const {
    const double te = static_cast<double>(rows * d.experts);
    const double tk = static_cast<double>(rows * d.topk);
    const double fwd_flops = te * static_cast<double>(d.topk) + 5 * tk + (aux_scores ? 5 * te : 0);
    if (backward) {
      // softmax backward over the k chosen (4 each) and over all E for the aux loss; the
      // gradient scattered back to T x E logits.
      return make("moe_router_topk_bwd", {rows, d.experts, d.topk},
                  4 * tk + te + (aux_scores ? 4 * te : 0), te * 4 * (aux_scores ? 2 : 1) + tk * 8);
    }
    return make("moe_router_topk_fwd", {rows, d.experts, d.topk}, fwd_flops, te * 5 + tk * 8);
  }
  // Switch Transformer load-balancing loss (Fedus et al. 2021, eq. 4; Megatron's
  // switch_load_balancing_loss_func): per expert the fraction of routed tokens f_i (a sum over
  // the routing map) and the mean probability P_i (a sum over the scores), then
  // coeff x E / k x sum_i f_i P_i; backward: d scores = coeff E / (k T) f_i per element.
  Kernel aux_loss(bool backward, int64_t rows) const {
    const double te = static_cast<double>(rows * d.experts);
    if (backward) return make("moe_aux_loss_bwd", {rows, d.experts}, te, te * 8);
    return make("moe_aux_loss_fwd", {rows, d.experts}, 2 * te, te * 5);
  }
  // Permute: gather `rows` token copies (of h elements) into expert order (reads and writes each
  // row, plus an int32 index per row). Backward: scatter-add them into the `tokens` input rows.
  Kernel moe_permute(bool backward, int64_t rows, int64_t tokens) const {
    const double r = static_cast<double>(rows), hh = static_cast<double>(d.h),
                 e = static_cast<double>(d.dsize);
    if (backward) {
      return make("moe_permute_bwd", {rows, tokens, d.h}, r * hh,
                  (r + static_cast<double>(tokens)) * hh * e + 4 * r);
    }
    return make("moe_permute_fwd", {rows, tokens, d.h}, 0, 2 * r * hh * e + 4 * r);
  }
  // Unpermute: each of `rows` expert outputs times its router probability, summed into the
  // `tokens` output rows (2 FLOPs per element). Backward: the gradient of each row (1 FLOP per
  // element) and of each probability (a dot product of the output gradient and the expert
  // output, 2 per element).
  Kernel moe_unpermute(bool backward, int64_t rows, int64_t tokens) const {
    const double r = static_cast<double>(rows), hh = static_cast<double>(d.h),
                 e = static_cast<double>(d.dsize), tok = static_cast<double>(tokens);
    if (backward) {
      return make("moe_unpermute_bwd", {rows, tokens, d.h}, 3 * r * hh,
                  (2 * r + tok) * hh * e + 8 * r);
    }
    return make("moe_unpermute_fwd", {rows, tokens, d.h}, 2 * r * hh, (r + tok) * hh * e + 8 * r);
  }
  // Grouped GEMM over `groups` experts, each Y[m,n] = X[m,k] W_g[k,n] (Transformer Engine's /
  // CUTLASS grouped GEMM, Megatron --moe-grouped-gemm): key {groups, m, n, k}, 2 groups m n k
  // FLOPs; the variants grouped_gemm_fwd / _dgrad / _wgrad as for gemm. `fp8` as layer_gemm.
  Kernel grouped_gemm(const char* name, int64_t groups, int64_t m, int64_t n, int64_t k,
                      bool fp8, int64_t tp) const {
    const double g = static_cast<double>(groups), fm = static_cast<double>(m),
                 fn = static_cast<double>(n), fk = static_cast<double>(k);
    const double e = static_cast<double>(d.dsize);
    const double bytes = fp8 ? g * (fm * fk + fk * fn + fm * fn * e) : g * (fm * fk + fk * fn + fm * fn) * e;
    const Precision dtype = fp8 ? Precision::kFp8 : d.matmul_dtype;
    return Kernel{KernelKey{name, {groups, m, n, k}, dtype, tp},
                  2.0 * g * fm * fn * fk, bytes};
  }
  // The MLP activation over n output elements (the experts' or the shared expert's), as
  // activation() for the dense MLP.
  Kernel activation_n(bool backward, int64_t n, int64_t tp) const {
    Kernel k = activation_of(backward, n);
    k.key.tp = tp;
    return k;
  }

  // Global grad norm over fp32 gradients of n parameters.
  Kernel grad_norm(int64_t n) const {
    const double fn = static_cast<double>(n);
    return make("grad_norm", {n}, 2 * fn, 4 * fn);
  }
  // Megatron's zero_grad_buffer + optimizer.zero_grad(): a memset of the gradient buffer of n
  // parameters, `grad_bytes` each (written once, nothing read, no FLOPs).
  Kernel zero_grad_buffer(int64_t n) const {
    return make("zero_grad_buffer", {n}, 0, static_cast<double>(n) * static_cast<double>(d.grad_bytes));
  }
  // Megatron clip_grad_norm_fp32's multi_tensor_scale of the fp32 main grads of n parameters by
  // the clip coefficient: 1 FLOP per element, 4 bytes read and 4 written.
  Kernel grad_clip_scale(int64_t n) const {
    const double fn = static_cast<double>(n);
    return make("grad_clip_scale", {n}, fn, 8 * fn);
  }
  // AdamW on n parameters: read grad + fp32 master, m, v; write master, m, v and the param copy.
  Kernel adamw(int64_t n) const {
    const double fn = static_cast<double>(n);
    return make("adamw_step", {n}, 16 * fn, fn * (4 + 12 + 12 + static_cast<double>(d.dsize)));
  }
};

/// A send or recv of one p2p batch.
struct P2P {
  bool send;
  int64_t peer;
  int64_t tag;
  int64_t bytes;
};

/// One DP gradient bucket of a model chunk: parameters and the layer whose backward completes it
/// (layer -1: the LM head copy; -2: the embeddings).
struct Bucket {
  int64_t params = 0;
  int64_t gemm_weights = 0;  // of which transformer-layer GEMM weights (FP8 with fp8_param_gather)
  int64_t trigger = 0;
  std::vector<int64_t> layers;  // layers in the bucket (embedding -2, head -1)
  GroupKind group = GroupKind::kDpCp;  // kEdp: the routed experts' parameters of the layers
  uint32_t grad_op = kNoOp;
  uint32_t param_gather_op = kNoOp;
};

/// Lowers one rank's schedule to ops.
class RankLowering {
 public:
  RankLowering(const Scenario& sc, const RankLayout& layout, KernelTable& table, RankProgram& out,
               StepScope scope)
      : sc_(sc), layout_(layout), table_(table), out_(out), scope_(scope), d_(sc), k_{d_} {}

  void run() {
    const RankCoord c = out_.coord;
    out_.schedule = build_schedule(sc_.parallel.pipeline_schedule, d_.p, c.pp, d_.m, d_.v);
    plan_buckets();
    if (sc_.training.use_distributed_optimizer && sc_.training.overlap_param_gather) {
      issue_param_gathers(Phase::kParamSync);
    }
    zero_grad_buffer();
    lower_schedule();
    if (!sc_.training.overlap_grad_reduce) {
      for (size_t chunk = 0; chunk < buckets_.size(); ++chunk) {
        for (auto& bucket : buckets_[chunk]) issue_grad_reduce(static_cast<int64_t>(chunk), bucket);
      }
    }
    finalize_and_step();
    if (sc_.training.use_distributed_optimizer && !sc_.training.overlap_param_gather) {
      issue_param_gathers(Phase::kParamSync);
    }
  }

 private:
  // ---- op creation ---------------------------------------------------------------------------

  uint32_t new_op(OpKind kind, Stream stream, const char* what) {
    Op op;
    op.id = static_cast<uint32_t>(out_.ops.size());
    op.kind = kind;
    op.stream = stream;
    op.phase = phase_;
    op.micro_batch = static_cast<int32_t>(mb_);
    op.model_chunk = static_cast<int32_t>(chunk_);
    op.layer = static_cast<int32_t>(layer_);
    op.what = what;
    out_.ops.push_back(std::move(op));
    return out_.ops.back().id;
  }

  void add_dep(uint32_t op, uint32_t dep) {
    if (dep == kNoOp) return;
    auto& deps = out_.ops[op].deps;
    if (std::find(deps.begin(), deps.end(), dep) == deps.end()) deps.push_back(dep);
  }

  /// Appends a kernel to the open compute op, opening one (after the previous compute op and
  /// every pending wait) if none is open.
  /// `target`: the local expert the kernel serves (Op::kernel_targets), -1 for none.
  void kernel(const Kernel& kern, const char* what, int32_t target = -1) {
    if (open_compute_ == kNoOp) {
      open_compute_ = new_op(OpKind::kCompute, Stream::kCompute, what);
      add_dep(open_compute_, last_compute_);
      for (uint32_t w : waits_) add_dep(open_compute_, w);
      waits_.clear();
      last_compute_ = open_compute_;
    }
    Op& op = out_.ops[open_compute_];
    op.kernels.push_back(table_.add(kern));
    op.kernel_roles.push_back(role_);
    if (target >= 0 && op.kernel_targets.empty()) op.kernel_targets.resize(op.kernels.size() - 1, -1);
    if (target >= 0 || !op.kernel_targets.empty()) op.kernel_targets.push_back(target);
  }

  /// The role of the kernels and communication ops that follow.
  void role(Role r) { role_ = r; }

  void close_compute() { open_compute_ = kNoOp; }

  /// Sets the context of the ops that follow; a change of layer or phase starts a new op.
  void context(Phase phase, int64_t mb, int64_t chunk, int64_t layer) {
    if (phase != phase_ || mb != mb_ || chunk != chunk_ || layer != layer_) close_compute();
    phase_ = phase;
    mb_ = mb;
    chunk_ = chunk;
    layer_ = layer;
  }

  /// Issues a collective after the last compute op (its producer) and the previous op on its
  /// stream. Returns kNoOp when the group has one member (nothing to communicate).
  uint32_t collective(CollectiveKind kind, GroupKind group, Stream stream, int64_t bytes,
                      const char* what) {
    if (layout_.size(group) == 1) return kNoOp;
    close_compute();
    const uint32_t id = new_op(OpKind::kCollective, stream, what);
    out_.ops[id].collective = kind;
    out_.ops[id].group = group;
    out_.ops[id].bytes = bytes;
    out_.ops[id].role = role_;
    add_dep(id, last_compute_);
    add_dep(id, last_on_stream_[static_cast<size_t>(stream)]);
    // A collective issued before any compute consumes a received tensor reads it: the SP
    // all-gather of the embedding's output gradient in a first chunk that holds no transformer
    // layer (uneven pipeline split) follows the recv of that gradient directly.
    for (uint32_t w : waits_) {
      if (out_.ops[w].kind == OpKind::kRecv) add_dep(id, w);
    }
    last_on_stream_[static_cast<size_t>(stream)] = id;
    return id;
  }

  /// The next compute op waits for `op` (no-op for kNoOp).
  void wait(uint32_t op) {
    if (op == kNoOp) return;
    close_compute();
    waits_.push_back(op);
  }

  /// A blocking TP collective on the critical path.
  void tp_blocking(CollectiveKind kind, int64_t bytes, const char* what) {
    wait(collective(kind, GroupKind::kTp, Stream::kTpComm, bytes, what));
  }

  /// Megatron's p2p call: every op of the batch follows the last compute op, the ops progress
  /// together, and the next compute op waits for all of them.
  void p2p_batch(const std::vector<P2P>& batch) {
    if (batch.empty()) return;
    close_compute();
    std::vector<uint32_t> ids;
    for (const P2P& x : batch) {
      const uint32_t id = new_op(x.send ? OpKind::kSend : OpKind::kRecv, Stream::kPpComm,
                                 x.send ? (phase_ == Phase::kBackward ? "send grad" : "send activation")
                                        : (phase_ == Phase::kBackward ? "recv grad" : "recv activation"));
      out_.ops[id].peer = x.peer;
      out_.ops[id].tag = x.tag;
      out_.ops[id].bytes = x.bytes;
      out_.ops[id].role = Role::kPipeline;
      add_dep(id, last_compute_);
      ids.push_back(id);
    }
    for (uint32_t id : ids) waits_.push_back(id);
  }

  // ---- pipeline geometry ---------------------------------------------------------------------

  int64_t num_vstages() const { return d_.p * d_.v; }
  int64_t vstage(int64_t chunk) const { return chunk * d_.p + out_.coord.pp; }
  /// The transformer layers of this rank's model chunk `chunk` (uneven under an uneven split).
  const ChunkLayers& layers_of(int64_t chunk) const {
    return d_.split[static_cast<size_t>(vstage(chunk))];
  }
  int64_t rank_of_vstage(int64_t vs) const {
    RankCoord c = out_.coord;
    c.pp = vs % d_.p;
    return layout_.rank(c);
  }
  int64_t p2p_bytes() const { return d_.tokens_sp * d_.h * d_.dsize; }
  /// A transfer of this rank (core/schedule.hpp's rule) as the recv or send the lowering emits:
  /// the peer is the rank of the other virtual stage.
  P2P p2p(const PipelineTransfer& t, bool send) const {
    const int64_t peer = send ? t.receiver_vstage() : t.sender_vstage;
    return P2P{send, rank_of_vstage(peer), pipeline_tag(t, num_vstages()), p2p_bytes()};
  }
  /// The recv of a step's input, if it has one.
  std::optional<P2P> recv_input(const ScheduleStep& st) const {
    const auto t = step_input(st, vstage(st.model_chunk), num_vstages());
    return t ? std::optional<P2P>(p2p(*t, false)) : std::nullopt;
  }
  /// The send of a step's output, if it has one.
  std::optional<P2P> send_output(const ScheduleStep& st) const {
    const auto t = step_output(st, vstage(st.model_chunk), num_vstages());
    return t ? std::optional<P2P>(p2p(*t, true)) : std::nullopt;
  }

  static void append(std::vector<P2P>& batch, const std::optional<P2P>& x) {
    if (x) batch.push_back(*x);
  }

  /// Sets the context for the p2p ops around a step (phase and micro-batch of the step).
  void p2p_context(const ScheduleStep& st) {
    context(st.pass == Pass::kForward ? Phase::kForward : Phase::kBackward, st.micro_batch,
            st.model_chunk, -1);
  }

  /// Emits steps and p2p batches in the order Megatron-LM's schedules call them.
  void lower_schedule() {
    const auto& steps = out_.schedule;
    const size_t n = steps.size();
    if (d_.v == 1) {
      // forward_backward_pipelining_without_interleaving (and GPipe): recv the input, run the
      // step, send the output; between a forward and a backward (steady state) Megatron combines
      // send and recv in one call (send_forward_recv_backward / send_backward_recv_forward).
      p2p_context(steps[0]);
      p2p_batch(to_batch(recv_input(steps[0])));
      for (size_t i = 0; i < n; ++i) {
        lower_step(steps[i]);
        p2p_context(steps[i]);
        std::vector<P2P> batch;
        append(batch, send_output(steps[i]));
        if (i + 1 < n && steps[i + 1].pass != steps[i].pass) {
          append(batch, recv_input(steps[i + 1]));
          p2p_batch(batch);
        } else {
          p2p_batch(batch);
          if (i + 1 < n) {
            p2p_context(steps[i + 1]);
            p2p_batch(to_batch(recv_input(steps[i + 1])));
          }
        }
      }
      return;
    }
    // forward_backward_pipelining_with_interleaving (no p2p overlap): split the steps into the
    // forward and backward sequences; warm-up forwards, steady (F, B) pairs, cool-down backwards.
    std::vector<ScheduleStep> fwd, bwd;
    for (const auto& st : steps) (st.pass == Pass::kForward ? fwd : bwd).push_back(st);
    size_t warmup = 0;
    while (warmup < n && steps[warmup].pass == Pass::kForward) ++warmup;
    const size_t total = fwd.size();
    const size_t steady = total - warmup;
    auto recv_f = [&](size_t k) { return k < total ? recv_input(fwd[k]) : std::nullopt; };
    auto recv_b = [&](size_t k) { return k < total ? recv_input(bwd[k]) : std::nullopt; };

    p2p_context(fwd[0]);
    p2p_batch(to_batch(recv_f(0)));
    for (size_t k = 0; k < warmup; ++k) {
      lower_step(fwd[k]);
      p2p_context(fwd[k]);
      std::vector<P2P> batch;
      append(batch, send_output(fwd[k]));
      append(batch, recv_f(k + 1));
      if (k + 1 == warmup && steady > 0) append(batch, recv_b(0));
      p2p_batch(batch);
    }
    for (size_t j = 0; j < steady; ++j) {
      lower_step(fwd[warmup + j]);
      lower_step(bwd[j]);
      p2p_context(bwd[j]);
      std::vector<P2P> batch;
      append(batch, send_output(fwd[warmup + j]));
      append(batch, send_output(bwd[j]));
      append(batch, recv_f(warmup + j + 1));
      append(batch, recv_b(j + 1));
      p2p_batch(batch);
    }
    if (steady == 0) {
      p2p_context(bwd[0]);
      p2p_batch(to_batch(recv_b(0)));
    }
    for (size_t k = steady; k < total; ++k) {
      lower_step(bwd[k]);
      p2p_context(bwd[k]);
      std::vector<P2P> batch;
      append(batch, send_output(bwd[k]));
      append(batch, recv_b(k + 1));
      p2p_batch(batch);
    }
  }

  static std::vector<P2P> to_batch(const std::optional<P2P>& x) {
    std::vector<P2P> b;
    append(b, x);
    return b;
  }

  // ---- one schedule step ---------------------------------------------------------------------

  void lower_step(const ScheduleStep& st) {
    const auto c = static_cast<size_t>(st.model_chunk);
    if (scope_ == StepScope::kBoundary &&
        (st.pass == Pass::kForward ? forwarded_chunk_[c] : st.micro_batch != last_backward_mb_[c])) {
      return;  // neither the chunk's first forward nor its last backward
    }
    const int64_t vs = vstage(st.model_chunk);
    const int64_t first_layer = layers_of(st.model_chunk).first_layer;
    const int64_t last_layer = layers_of(st.model_chunk).end_layer() - 1;
    const bool is_last_vs = vs == num_vstages() - 1;
    if (st.pass == Pass::kForward) {
      const bool first_forward = !forwarded_chunk_[static_cast<size_t>(st.model_chunk)];
      forwarded_chunk_[static_cast<size_t>(st.model_chunk)] = true;
      if (vs == 0) {
        context(Phase::kForward, st.micro_batch, st.model_chunk, -1);
        if (first_forward) wait_param_gather(st.model_chunk, -2);
        embedding_forward();
      }
      for (int64_t l = first_layer; l <= last_layer; ++l) {
        context(Phase::kForward, st.micro_batch, st.model_chunk, l);
        if (first_forward) wait_param_gather(st.model_chunk, l);
        layer_forward();
      }
      if (is_last_vs) {
        context(Phase::kForward, st.micro_batch, st.model_chunk, -1);
        if (first_forward) wait_param_gather(st.model_chunk, -1);
        head_forward();
      }
      close_compute();
      return;
    }
    const bool last_backward = st.micro_batch == last_backward_mb_[static_cast<size_t>(st.model_chunk)];
    if (is_last_vs) {
      context(Phase::kBackward, st.micro_batch, st.model_chunk, -1);
      head_backward();
      if (last_backward) bucket_done(st.model_chunk, -1);
    }
    for (int64_t l = last_layer; l >= first_layer; --l) {
      if (sc_.training.recompute_granularity == RecomputeGranularity::kFull) {
        context(Phase::kRecompute, st.micro_batch, st.model_chunk, l);
        layer_forward();
      }
      context(Phase::kBackward, st.micro_batch, st.model_chunk, l);
      layer_backward(st.micro_batch, st.model_chunk, l);
      if (last_backward) bucket_done(st.model_chunk, l);
    }
    if (vs == 0) {
      context(Phase::kBackward, st.micro_batch, st.model_chunk, -1);
      embedding_backward();
      if (last_backward) bucket_done(st.model_chunk, -2);
    }
    close_compute();
  }

  // ---- layers --------------------------------------------------------------------------------

  CollectiveKind tp_reduce() const {
    return d_.sp ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce;
  }
  int64_t act_bytes(int64_t width) const { return d_.tokens * width * d_.dsize; }

  /// A GEMM of the transformer layers (FP8 when training.fp8_format) or of the LM head (16-bit).
  Kernel gemm_kernel(const char* name, int64_t m, int64_t n, int64_t k, bool fp8) const {
    return k_.layer_gemm(name, m, n, k, fp8);
  }

  /// Where a GEMM operand's FP8 cast happens: in its own kernel, or fused into the kernel that
  /// produces it (Transformer Engine: the norm of LayerNormLinear writes the QKV and FC1 inputs
  /// in FP8, the activation of LayerNormMLP writes FC2's input and, in backward, FC1's output
  /// gradient in FP8, with their transposes: the same bytes as the 16-bit output).
  enum class Cast { kSeparate, kFused };

  /// FP8: the cast (and transpose, for the backward's other operand) of a GEMM operand of n
  /// elements. Tensorwise (current) scaling needs the tensor's amax before the cast, so it never
  /// fuses: an amax pass and a cast kernel for every operand.
  void fp8_cast(int64_t n, const char* what, Cast where) {
    const bool current = sc_.training.fp8_recipe == Fp8Recipe::kTensorwise;
    if (where == Cast::kFused && !current) return;
    if (current) kernel(k_.fp8_amax(n), what);
    kernel(k_.fp8_cast(n, true), what);
  }

  /// All-gather (SP) + GEMM, chunked into TP pieces with tp_comm_overlap: GEMM piece i waits
  /// for gather piece i only. FP8 (`fp8`): the input is cast first.
  /// FP8 (`fp8`): the input, a norm's output, is cast by the norm (Cast::kFused).
  void gathered_gemm(int64_t n, int64_t k, const char* what, bool fp8 = false) {
    if (fp8) fp8_cast(d_.tokens_sp * k, what, Cast::kFused);
    if (!d_.sp) {
      kernel(gemm_kernel("gemm_fwd", d_.tokens, n, k, fp8), what);
      return;
    }
    if (!sc_.training.tp_comm_overlap) {
      tp_blocking(CollectiveKind::kAllGather, act_bytes(d_.h), "sp all_gather");
      kernel(gemm_kernel("gemm_fwd", d_.tokens, n, k, fp8), what);
      return;
    }
    for (int64_t i = 0; i < d_.t; ++i) {
      wait(collective(CollectiveKind::kAllGather, GroupKind::kTp, Stream::kTpComm,
                      act_bytes(d_.h) / d_.t, "sp all_gather (overlapped)"));
      kernel(gemm_kernel("gemm_fwd", d_.tokens / d_.t, n, k, fp8), what);
    }
  }

  /// GEMM + TP all-reduce (reduce-scatter with SP), chunked with tp_comm_overlap.
  void gemm_reduced(int64_t n, int64_t k, const char* what, bool fp8 = false,
                    Cast cast = Cast::kSeparate) {
    if (fp8) fp8_cast(d_.tokens * k, what, cast);
    if (!(d_.sp && sc_.training.tp_comm_overlap)) {
      kernel(gemm_kernel("gemm_fwd", d_.tokens, n, k, fp8), what);
      tp_blocking(tp_reduce(), act_bytes(d_.h), d_.sp ? "sp reduce_scatter" : "tp all_reduce");
      return;
    }
    std::vector<uint32_t> pieces;
    for (int64_t i = 0; i < d_.t; ++i) {
      kernel(gemm_kernel("gemm_fwd", d_.tokens / d_.t, n, k, fp8), what);
      pieces.push_back(collective(CollectiveKind::kReduceScatter, GroupKind::kTp, Stream::kTpComm,
                                  act_bytes(d_.h) / d_.t, "sp reduce_scatter (overlapped)"));
    }
    for (uint32_t p : pieces) wait(p);
  }

  bool fp8() const { return sc_.training.fp8(); }

  /// The attention core between QKV and the projection, forward or backward, by CP and
  /// cp_comm_type (see build_program()). RoPE on Q and K before it (after it in backward).
  void attention_core(bool backward) {
    const int64_t heads = d_.a / d_.t;
    const int64_t kv_heads = d_.g / d_.t;
    const bool rope = d_.model.position_embedding_type == PositionEmbedding::kRope;
    if (rope && !backward) kernel(k_.rope(false), "attention");
    if (d_.cp == 1) {
      kernel(k_.attention(backward, heads, kv_heads, d_.s), "attention");
    } else {
      // K and V of the local s / CP tokens (bytes of one block).
      const int64_t kv_bytes = 2 * d_.b * d_.s * kv_heads * d_.hd * d_.dsize;
      switch (sc_.parallel.cp_comm_type) {
        case CpCommType::kA2a: {
          // Ulysses: sequence-sharded Q, K, V -> head-sharded over the whole sequence, and back.
          const int64_t qkv_bytes = act_bytes(d_.qkv_local);
          const int64_t out_bytes = act_bytes(d_.aw / d_.t);
          cp_blocking(CollectiveKind::kAllToAll, backward ? out_bytes : qkv_bytes,
                      backward ? "cp all_to_all grad" : "cp all_to_all qkv");
          kernel(k_.attention(backward, heads / d_.cp, kv_heads / d_.cp, d_.s_full), "attention");
          cp_blocking(CollectiveKind::kAllToAll, backward ? qkv_bytes : out_bytes,
                      backward ? "cp all_to_all qkv grad" : "cp all_to_all output");
          break;
        }
        case CpCommType::kAllGather: {
          cp_blocking(CollectiveKind::kAllGather, d_.cp * kv_bytes, "cp all_gather kv");
          for (int64_t i = 0; i < d_.cp; ++i) {
            kernel(k_.attention(backward, heads, kv_heads, d_.s), "attention");
          }
          if (backward) {
            cp_blocking(CollectiveKind::kReduceScatter, d_.cp * kv_bytes, "cp reduce_scatter dkv");
          }
          break;
        }
        case CpCommType::kP2p: {
          // Ring attention: block i uses the KV that arrived in exchange i-1; exchange i (for
          // block i+1) runs on the cp-comm stream while block i computes.
          uint32_t dkv = kNoOp;
          for (int64_t i = 0; i < d_.cp; ++i) {
            uint32_t next = kNoOp;
            if (i + 1 < d_.cp) {
              next = collective(CollectiveKind::kRingExchange, GroupKind::kCp, Stream::kCpComm,
                                kv_bytes, backward ? "cp ring exchange kv (bwd)" : "cp ring exchange kv");
            }
            kernel(k_.attention(backward, heads, kv_heads, d_.s), "attention");
            if (!backward && i > 0) kernel(k_.attention_merge(heads), "attention");
            if (backward && i > 0) {
              // The dK, dV accumulated for the KV block this rank holds travel on with it.
              dkv = collective(CollectiveKind::kRingExchange, GroupKind::kCp, Stream::kCpComm,
                               kv_bytes, "cp ring exchange dkv");
            }
            wait(next);
          }
          wait(dkv);
          break;
        }
      }
    }
    if (rope && backward) kernel(k_.rope(true), "attention");
  }

  /// A blocking CP collective on the critical path (cp-comm stream).
  void cp_blocking(CollectiveKind kind, int64_t bytes, const char* what) {
    wait(collective(kind, GroupKind::kCp, Stream::kCpComm, bytes, what));
  }

  void layer_forward() {
    const bool f8 = fp8();
    role(Role::kInputLayerNorm);
    kernel(k_.norm(false), "layernorm");
    role(Role::kQkv);
    gathered_gemm(d_.qkv_local, d_.h, "attention", f8);
    role(Role::kAttentionCore);
    attention_core(false);
    role(Role::kAttentionProjection);
    gemm_reduced(d_.h, d_.aw / d_.t, "attention", f8);
    role(Role::kAttentionResidual);
    kernel(k_.dropout_add(false), "mlp");
    role(Role::kPostAttentionLayerNorm);
    kernel(k_.norm(false), "mlp");
    if (sc_.model.is_moe_layer(layer_)) {
      moe_forward();
    } else {
      role(Role::kFc1);
      gathered_gemm(d_.fc1_local, d_.h, "mlp", f8);
      role(Role::kGelu);
      kernel(k_.activation(false), "mlp");
      role(Role::kFc2);
      gemm_reduced(d_.h, d_.ffn / d_.t, "mlp", f8, Cast::kFused);  // cast by the activation
    }
    role(Role::kMlpResidual);
    kernel(k_.dropout_add(false), "mlp");
    if (f8 && sc_.training.fp8_recipe == Fp8Recipe::kDelayed) {
      role(Role::kNone);
      kernel(k_.fp8_scale_update(8), "fp8 scales");  // 4 GEMM inputs + 4 weights
    }
  }

  // ---- MoE layer (see build_program() for the op order) ------------------------------------

  bool alltoall() const {
    return sc_.model.moe_token_dispatcher_type == MoeTokenDispatcher::kAllToAll;
  }
  bool aux_loss() const {
    return sc_.model.moe_router_load_balancing_type == MoeLoadBalancing::kAuxLoss;
  }
  /// Bytes of `rows` hidden-state rows.
  int64_t row_bytes(int64_t rows) const { return rows * d_.h * d_.dsize; }
  /// Rows the alltoall dispatcher sends (and receives) over EP: per_expert copies for each of
  /// the E experts (the busiest rank's share).
  int64_t a2a_rows() const { return d_.experts * d_.per_expert; }
  /// The hidden states of the ETP x EP group the allgather dispatcher gathers.
  int64_t gathered_rows() const { return d_.etp * d_.ep * d_.moe_tokens; }
  /// Rows of the local experts' GEMMs over all local experts.
  int64_t local_expert_rows() const { return d_.local_experts * d_.expert_rows; }

  /// A blocking MoE dispatch/combine collective on the ep-comm stream.
  void ep_blocking(CollectiveKind kind, GroupKind group, int64_t bytes, const char* what) {
    wait(collective(kind, group, Stream::kEpComm, bytes, what));
  }

  /// The local experts' GEMM {rows per expert, n, k} (`variant` gemm_fwd/_dgrad/_wgrad): one
  /// grouped GEMM with moe_grouped_gemm, else one GEMM per local expert (Megatron's
  /// SequentialMLP); tp = ETP.
  void expert_gemm(const char* variant, int64_t n, int64_t k, bool fp8) {
    const int64_t m = d_.expert_rows;
    if (sc_.model.moe_grouped_gemm) {
      const std::string_view v = variant;
      const char* grouped = v == "gemm_fwd"     ? "grouped_gemm_fwd"
                            : v == "gemm_dgrad" ? "grouped_gemm_dgrad"
                                                : "grouped_gemm_wgrad";
      kernel(k_.grouped_gemm(grouped, d_.local_experts, m, n, k, fp8, d_.etp), "experts");
      return;
    }
    Kernel one = gemm_kernel(variant, m, n, k, fp8);
    one.key.tp = d_.etp;
    for (int64_t e = 0; e < d_.local_experts; ++e) kernel(one, "experts", static_cast<int32_t>(e));
  }

  /// The router and its aux loss on the T local rows.
  void router_forward() {
    role(Role::kRouter);
    kernel(k_.gemm("gemm_fwd", d_.moe_tokens, d_.experts, d_.h), "router");
    kernel(k_.router_topk(false, d_.moe_tokens, aux_loss()), "router");
    if (aux_loss()) kernel(k_.aux_loss(false, d_.moe_tokens), "router");
  }

  /// The routed experts' forward on their dispatched rows.
  void experts_forward(bool f8) {
    const int64_t rows = local_expert_rows();
    role(Role::kExpertFc1);
    if (f8) fp8_cast(rows * d_.h, "experts", Cast::kSeparate);  // the permuted tokens
    expert_gemm("gemm_fwd", d_.expert_fc1_local, d_.h, f8);
    role(Role::kExpertActivation);
    kernel(k_.activation_n(false, rows * d_.expert_ffn / d_.etp, d_.etp), "experts");
    role(Role::kExpertFc2);
    if (f8) fp8_cast(rows * d_.expert_ffn / d_.etp, "experts", Cast::kFused);
    expert_gemm("gemm_fwd", d_.h, d_.expert_ffn / d_.etp, f8);
  }

  void experts_backward(bool f8) {
    const int64_t rows = local_expert_rows();
    role(Role::kExpertFc2);
    if (f8) fp8_cast(rows * d_.h, "experts", Cast::kSeparate);  // the output gradient
    expert_gemm("gemm_dgrad", d_.h, d_.expert_ffn / d_.etp, f8);
    expert_gemm("gemm_wgrad", d_.h, d_.expert_ffn / d_.etp, f8);
    role(Role::kExpertActivation);
    kernel(k_.activation_n(true, rows * d_.expert_ffn / d_.etp, d_.etp), "experts");
    role(Role::kExpertFc1);
    if (f8) fp8_cast(rows * d_.expert_fc1_local, "experts", Cast::kFused);
    expert_gemm("gemm_dgrad", d_.expert_fc1_local, d_.h, f8);
    expert_gemm("gemm_wgrad", d_.expert_fc1_local, d_.h, f8);
  }

  /// The shared expert: a dense MLP of width moe_shared_expert_intermediate_size over TP (with
  /// its SP all-gather / reduce-scatter), on the same input as the router.
  void shared_expert_forward(bool f8) {
    if (d_.shared_ffn == 0) return;
    role(Role::kFc1);
    gathered_gemm(d_.shared_fc1_local, d_.h, "shared expert", f8);
    role(Role::kGelu);
    kernel(k_.activation_n(false, d_.tokens * d_.shared_ffn / d_.t, d_.t), "shared expert");
    role(Role::kFc2);
    gemm_reduced(d_.h, d_.shared_ffn / d_.t, "shared expert", f8, Cast::kFused);
  }

  void shared_expert_backward(bool f8) {
    if (d_.shared_ffn == 0) return;
    role(Role::kFc2);
    row_parallel_backward(d_.h, d_.shared_ffn / d_.t, "shared expert", f8);
    role(Role::kGelu);
    kernel(k_.activation_n(true, d_.tokens * d_.shared_ffn / d_.t, d_.t), "shared expert");
    role(Role::kFc1);
    column_parallel_backward(d_.shared_fc1_local, d_.h, "shared expert", f8, Cast::kFused);
  }

  /// The MoE MLP of one layer, after the post-attention norm (see build_program()).
  void moe_forward() {
    const bool f8 = fp8();
    router_forward();
    if (alltoall()) {
      role(Role::kMoePermute);
      kernel(k_.moe_permute(false, a2a_rows(), d_.moe_tokens), "moe permute");
      role(Role::kMoeDispatch);
      ep_blocking(CollectiveKind::kAllToAll, GroupKind::kEp, row_bytes(a2a_rows()),
                  "ep all_to_all dispatch");
      if (d_.etp > 1) {
        ep_blocking(CollectiveKind::kAllGather, GroupKind::kEtp, row_bytes(d_.etp * a2a_rows()),
                    "etp all_gather dispatch");
      }
    } else {
      role(Role::kMoeDispatch);
      ep_blocking(CollectiveKind::kAllGather, GroupKind::kEtpEp, row_bytes(gathered_rows()),
                  "etp-ep all_gather dispatch");
      role(Role::kMoePermute);
      kernel(k_.moe_permute(false, local_expert_rows(), gathered_rows()), "moe permute");
    }
    experts_forward(f8);
    if (alltoall()) {
      role(Role::kMoeCombine);
      if (d_.etp > 1) {
        ep_blocking(CollectiveKind::kReduceScatter, GroupKind::kEtp,
                    row_bytes(d_.etp * a2a_rows()), "etp reduce_scatter combine");
      }
      ep_blocking(CollectiveKind::kAllToAll, GroupKind::kEp, row_bytes(a2a_rows()),
                  "ep all_to_all combine");
      role(Role::kMoeUnpermute);
      kernel(k_.moe_unpermute(false, a2a_rows(), d_.moe_tokens), "moe unpermute");
    } else {
      role(Role::kMoeUnpermute);
      kernel(k_.moe_unpermute(false, local_expert_rows(), gathered_rows()), "moe unpermute");
      role(Role::kMoeCombine);
      ep_blocking(CollectiveKind::kReduceScatter, GroupKind::kEtpEp, row_bytes(gathered_rows()),
                  "etp-ep reduce_scatter combine");
    }
    shared_expert_forward(f8);
  }

  /// Backward of moe_forward(), mirrored.
  void moe_backward() {
    const bool f8 = fp8();
    shared_expert_backward(f8);
    if (alltoall()) {
      role(Role::kMoeUnpermute);
      kernel(k_.moe_unpermute(true, a2a_rows(), d_.moe_tokens), "moe unpermute");
      role(Role::kMoeCombine);
      ep_blocking(CollectiveKind::kAllToAll, GroupKind::kEp, row_bytes(a2a_rows()),
                  "ep all_to_all combine grad");
      if (d_.etp > 1) {
        ep_blocking(CollectiveKind::kAllGather, GroupKind::kEtp, row_bytes(d_.etp * a2a_rows()),
                    "etp all_gather combine grad");
      }
    } else {
      role(Role::kMoeCombine);
      ep_blocking(CollectiveKind::kAllGather, GroupKind::kEtpEp, row_bytes(gathered_rows()),
                  "etp-ep all_gather combine grad");
      role(Role::kMoeUnpermute);
      kernel(k_.moe_unpermute(true, local_expert_rows(), gathered_rows()), "moe unpermute");
    }
    experts_backward(f8);
    if (alltoall()) {
      role(Role::kMoeDispatch);
      if (d_.etp > 1) {
        ep_blocking(CollectiveKind::kReduceScatter, GroupKind::kEtp,
                    row_bytes(d_.etp * a2a_rows()), "etp reduce_scatter dispatch grad");
      }
      ep_blocking(CollectiveKind::kAllToAll, GroupKind::kEp, row_bytes(a2a_rows()),
                  "ep all_to_all dispatch grad");
      role(Role::kMoePermute);
      kernel(k_.moe_permute(true, a2a_rows(), d_.moe_tokens), "moe permute");
    } else {
      role(Role::kMoePermute);
      kernel(k_.moe_permute(true, local_expert_rows(), gathered_rows()), "moe permute");
      role(Role::kMoeDispatch);
      ep_blocking(CollectiveKind::kReduceScatter, GroupKind::kEtpEp, row_bytes(gathered_rows()),
                  "etp-ep reduce_scatter dispatch grad");
    }
    role(Role::kRouter);
    if (aux_loss()) kernel(k_.aux_loss(true, d_.moe_tokens), "router");
    kernel(k_.router_topk(true, d_.moe_tokens, aux_loss()), "router");
    kernel(k_.gemm("gemm_dgrad", d_.moe_tokens, d_.experts, d_.h), "router");
    kernel(k_.gemm("gemm_wgrad", d_.moe_tokens, d_.experts, d_.h), "router");
  }

  /// Backward of a row-parallel linear {tokens, n, k}: (SP) all-gather of the output gradient,
  /// then dgrad and wgrad GEMMs (FP8: the output gradient cast first).
  void row_parallel_backward(int64_t n, int64_t k, const char* what, bool fp8 = false) {
    if (d_.sp) tp_blocking(CollectiveKind::kAllGather, act_bytes(d_.h), "sp all_gather grad");
    if (fp8) fp8_cast(d_.tokens * n, what, Cast::kSeparate);  // the residual stream's gradient
    kernel(gemm_kernel("gemm_dgrad", d_.tokens, n, k, fp8), what);
    kernel(gemm_kernel("gemm_wgrad", d_.tokens, n, k, fp8), what);
  }

  /// Backward of a column-parallel linear {tokens, n, k} as Megatron's
  /// LinearWithGradAccumulationAndAsyncCommunication: (SP) all-gather of the saved input issued
  /// first, dgrad GEMM, async all-reduce (reduce-scatter with SP) of the input gradient
  /// overlapped with the wgrad GEMM, then wait.
  void column_parallel_backward(int64_t n, int64_t k, const char* what, bool fp8 = false,
                                Cast cast = Cast::kSeparate) {
    uint32_t gather = kNoOp;
    if (d_.sp) {
      gather = collective(CollectiveKind::kAllGather, GroupKind::kTp, Stream::kTpComm,
                          act_bytes(d_.h), "sp all_gather input");
    }
    if (fp8) fp8_cast(d_.tokens * n, what, cast);
    kernel(gemm_kernel("gemm_dgrad", d_.tokens, n, k, fp8), what);
    const uint32_t reduce = collective(tp_reduce(), GroupKind::kTp, Stream::kTpComm,
                                       act_bytes(k), d_.sp ? "sp reduce_scatter grad" : "tp all_reduce grad");
    wait(gather);
    kernel(gemm_kernel("gemm_wgrad", d_.tokens, n, k, fp8), what);
    wait(reduce);
  }

  void layer_backward(int64_t mb, int64_t chunk, int64_t layer) {
    const bool f8 = fp8();
    role(Role::kMlpResidual);
    kernel(k_.dropout_add(true), "mlp");
    if (sc_.model.is_moe_layer(layer)) {
      moe_backward();
    } else {
      role(Role::kFc2);
      row_parallel_backward(d_.h, d_.ffn / d_.t, "mlp", f8);
      role(Role::kGelu);
      kernel(k_.activation(true), "mlp");
      role(Role::kFc1);
      column_parallel_backward(d_.fc1_local, d_.h, "mlp", f8, Cast::kFused);  // by its backward
    }
    role(Role::kPostAttentionLayerNorm);
    kernel(k_.norm(true), "mlp");
    role(Role::kAttentionResidual);
    kernel(k_.dropout_add(true), "attention");
    role(Role::kAttentionProjection);
    row_parallel_backward(d_.h, d_.aw / d_.t, "attention", f8);
    role(Role::kAttentionCore);
    if (sc_.training.recompute_granularity == RecomputeGranularity::kSelective) {
      context(Phase::kRecompute, mb, chunk, layer);
      attention_core(false);
      context(Phase::kBackward, mb, chunk, layer);
    }
    attention_core(true);
    role(Role::kQkv);
    column_parallel_backward(d_.qkv_local, d_.h, "attention", f8);
    role(Role::kInputLayerNorm);
    kernel(k_.norm(true), "attention");
    if (f8 && sc_.training.fp8_recipe == Fp8Recipe::kDelayed) {
      role(Role::kNone);
      kernel(k_.fp8_scale_update(4), "fp8 scales");  // 4 output gradients
    }
  }

  // ---- embedding and LM head -----------------------------------------------------------------

  void embedding_forward() {
    role(Role::kEmbedding);
    kernel(k_.embedding(false), "embedding");
    // VocabParallelEmbedding: partial lookups summed over TP (reduce-scatter into SP regions).
    tp_blocking(tp_reduce(), act_bytes(d_.h), d_.sp ? "sp reduce_scatter" : "tp all_reduce");
    role(Role::kEmbeddingDropout);
    kernel(k_.dropout(), "embedding");
  }

  void embedding_backward() {
    role(Role::kEmbedding);
    if (d_.sp) tp_blocking(CollectiveKind::kAllGather, act_bytes(d_.h), "sp all_gather grad");
    kernel(k_.embedding(true), "embedding");
  }

  void head_forward() {
    role(Role::kFinalLayerNorm);
    kernel(k_.norm(false), "final layernorm");
    role(Role::kLmHead);
    gathered_gemm(d_.vocab_local, d_.h, "lm head");
    // Vocab-parallel cross-entropy: all-reduce of the logit max, then of the target logits and
    // of the sum of exponentials (fp32, one value per token each).
    role(Role::kCrossEntropyMax);
    kernel(k_.elementwise_vocab("cross_entropy_max", 1, 1), "cross entropy");
    tp_blocking(CollectiveKind::kAllReduce, d_.tokens * 4, "tp all_reduce max");
    role(Role::kCrossEntropy);
    kernel(k_.elementwise_vocab("cross_entropy_fwd", 3, 1), "cross entropy");
    role(Role::kCrossEntropyTarget);
    tp_blocking(CollectiveKind::kAllReduce, d_.tokens * 4, "tp all_reduce target");
    role(Role::kCrossEntropySumExp);
    tp_blocking(CollectiveKind::kAllReduce, d_.tokens * 4, "tp all_reduce sum-exp");
  }

  void head_backward() {
    role(Role::kCrossEntropy);
    kernel(k_.elementwise_vocab("cross_entropy_bwd", 3, 2), "cross entropy");
    role(Role::kLmHead);
    column_parallel_backward(d_.vocab_local, d_.h, "lm head");
    role(Role::kFinalLayerNorm);
    kernel(k_.norm(true), "final layernorm");
  }

  // ---- DP buckets, finalize, optimizer -------------------------------------------------------

  /// Splits each chunk's parameters, in backward order, into Megatron DDP buckets: the dense
  /// parameters (reduced over DP x CP) and, for MoE layers, the local experts' parameters in
  /// buckets of their own (reduced over the expert-data-parallel group), as Megatron-Core's
  /// DistributedDataParallel keeps expert-parallel parameters in separate buffers with the same
  /// bucket size.
  void plan_buckets() {
    const int64_t bucket_size = ddp_bucket_size_params(sc_);
    const int64_t emb_local = d_.vocab_local * d_.h;
    buckets_.assign(static_cast<size_t>(d_.v), {});
    bucket_of_layer_.assign(static_cast<size_t>(d_.v), {});
    bucket_of_trigger_.assign(static_cast<size_t>(d_.v), {});
    forwarded_chunk_.assign(static_cast<size_t>(d_.v), false);
    last_backward_mb_.assign(static_cast<size_t>(d_.v), -1);
    for (const auto& st : out_.schedule) {
      if (st.pass == Pass::kBackward) last_backward_mb_[static_cast<size_t>(st.model_chunk)] = st.micro_batch;
    }
    for (int64_t c = 0; c < d_.v; ++c) {
      const int64_t vs = vstage(c);
      // (layer id, params, GEMM weights) in the order their gradients become ready.
      std::vector<std::tuple<int64_t, int64_t, int64_t>> items, expert_items;
      if (vs == num_vstages() - 1) {
        // Final norm, plus the LM head: its own weight when untied, the tied copy when the
        // embedding lives on another stage.
        const bool head = sc_.model.untie_embeddings_and_output_weights || d_.p > 1;
        items.emplace_back(-1, sc_.model.norm_parameters() + (head ? emb_local : 0), 0);
      }
      const ChunkLayers& layers = layers_of(c);
      for (int64_t l = layers.end_layer() - 1; l >= layers.first_layer; --l) {
        const RankParameters lp = layer_parameters_on_rank(sc_.model, sc_.parallel, l);
        items.emplace_back(l, lp.dense, lp.dense_gemm);
        if (lp.expert > 0) expert_items.emplace_back(l, lp.expert, lp.expert_gemm);
      }
      const bool learned_positions =
          sc_.model.position_embedding_type == PositionEmbedding::kLearnedAbsolute;
      if (vs == 0) items.emplace_back(-2, emb_local + (learned_positions ? d_.s_full * d_.h : 0), 0);
      // Never empty: a chunk left with no transformer layer by the uneven split holds the
      // embedding or the LM head.
      auto& chunk = buckets_[static_cast<size_t>(c)];
      auto& of_layer = bucket_of_layer_[static_cast<size_t>(c)];
      auto fill = [&](const std::vector<std::tuple<int64_t, int64_t, int64_t>>& list,
                      GroupKind group) {
        if (list.empty()) return;
        chunk.emplace_back();
        chunk.back().group = group;
        for (const auto& [id, n, gemm] : list) {
          if (bucket_size > 0 && chunk.back().params >= bucket_size) {
            chunk.emplace_back();
            chunk.back().group = group;
          }
          chunk.back().params += n;
          chunk.back().gemm_weights += gemm;
          chunk.back().layers.push_back(id);
          chunk.back().trigger = id;
          of_layer[id].push_back(chunk.size() - 1);
        }
      };
      fill(items, GroupKind::kDpCp);
      fill(expert_items, GroupKind::kEdp);
      // A bucket's trigger (its last id) is the trigger of at most one dense and one expert
      // bucket.
      auto& of_trigger = bucket_of_trigger_[static_cast<size_t>(c)];
      for (size_t b = 0; b < chunk.size(); ++b) of_trigger[chunk[b].trigger].push_back(b);
    }
  }

  /// MoE layers over this rank's model chunks.
  int64_t moe_layers_on_rank() const {
    int64_t n = 0;
    for (int64_t c = 0; c < d_.v; ++c) {
      const ChunkLayers& layers = layers_of(c);
      for (int64_t l = layers.first_layer; l < layers.end_layer(); ++l) n += sc_.model.is_moe_layer(l);
    }
    return n;
  }

  /// Called after the last micro-batch's backward of `layer` (-1 head, -2 embedding) of a chunk:
  /// with overlap_grad_reduce, starts the reduce of the buckets this completes.
  void bucket_done(int64_t chunk, int64_t layer) {
    if (!sc_.training.overlap_grad_reduce) return;
    const auto& of_trigger = bucket_of_trigger_[static_cast<size_t>(chunk)];
    if (auto it = of_trigger.find(layer); it != of_trigger.end()) {
      for (size_t b : it->second) issue_grad_reduce(chunk, buckets_[static_cast<size_t>(chunk)][b]);
    }
  }

  void issue_grad_reduce(int64_t chunk, Bucket& bucket) {
    context(Phase::kGradSync, -1, chunk, -1);
    role(Role::kGradBucket);
    const bool dist = sc_.training.use_distributed_optimizer;
    const bool expert = bucket.group == GroupKind::kEdp;
    bucket.grad_op = collective(dist ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce,
                                bucket.group, Stream::kDpComm, bucket.params * d_.grad_bytes,
                                dist ? (expert ? "edp reduce_scatter expert grads" : "dp reduce_scatter grads")
                                     : (expert ? "edp all_reduce expert grads" : "dp all_reduce grads"));
    if (bucket.grad_op != kNoOp) {
      grad_syncs_.push_back(bucket.grad_op);
      out_.ops[bucket.grad_op].bucket_layers.assign(bucket.layers.begin(), bucket.layers.end());
    }
  }

  void issue_param_gathers(Phase phase) {
    // Forward order: chunk 0 first, each chunk's buckets by the first layer the forward reaches
    // (embedding, layers ascending, head), a dense bucket before an expert one.
    auto forward_pos = [](int64_t id) {
      return id == -2 ? std::numeric_limits<int64_t>::min()
                      : id == -1 ? std::numeric_limits<int64_t>::max() : id;
    };
    for (int64_t c = 0; c < d_.v; ++c) {
      auto& chunk = buckets_[static_cast<size_t>(c)];
      std::vector<size_t> order(chunk.size());
      std::vector<int64_t> first(chunk.size(), std::numeric_limits<int64_t>::max());
      for (size_t b = 0; b < chunk.size(); ++b) {
        order[b] = b;
        for (int64_t id : chunk[b].layers) first[b] = std::min(first[b], forward_pos(id));
      }
      std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
        if (first[x] != first[y]) return first[x] < first[y];
        return chunk[x].group == GroupKind::kDpCp && chunk[y].group != GroupKind::kDpCp;
      });
      for (size_t b : order) {
        Bucket& bucket = chunk[b];
        context(phase, -1, c, -1);
        role(Role::kParamBucket);
        // FP8 parameters are gathered in FP8 (1 byte), the rest in the training precision.
        const int64_t fp8_params = sc_.training.fp8_param_gather ? bucket.gemm_weights : 0;
        bucket.param_gather_op = collective(
            CollectiveKind::kAllGather, bucket.group, Stream::kDpComm,
            (bucket.params - fp8_params) * d_.dsize + fp8_params,
            bucket.group == GroupKind::kEdp ? "edp all_gather expert params" : "dp all_gather params");
        if (bucket.param_gather_op != kNoOp) {
          out_.ops[bucket.param_gather_op].bucket_layers.assign(bucket.layers.begin(), bucket.layers.end());
        }
      }
    }
  }

  /// With overlap_param_gather, the first forward through `layer` waits for its buckets' gathers.
  void wait_param_gather(int64_t chunk, int64_t layer) {
    const auto& of_layer = bucket_of_layer_[static_cast<size_t>(chunk)];
    if (auto it = of_layer.find(layer); it != of_layer.end()) {
      for (size_t b : it->second) wait(buckets_[static_cast<size_t>(chunk)][b].param_gather_op);
    }
  }

  /// Megatron's train_step start: model_chunk.zero_grad_buffer() + optimizer.zero_grad(), a memset
  /// of the whole local gradient buffer (every parameter this rank holds, also with the
  /// distributed optimizer), as the first compute op (after the overlapped parameter gathers are
  /// issued, which it does not delay).
  void zero_grad_buffer() {
    context(Phase::kOptimizer, -1, -1, -1);
    role(Role::kZeroGradBuffer);
    kernel(k_.zero_grad_buffer(stage_parameters_on_rank(sc_, out_.coord.pp).total()),
           "zero grad buffer");
    close_compute();
  }

  /// Megatron's finalize_model_grads (DP grad sync done, then the SP LayerNorm-gradient
  /// all-reduce over TP, then the tied-embedding all-reduce over the first and last stage),
  /// then clip-by-global-norm and the optimizer step.
  void finalize_and_step() {
    context(Phase::kGradSync, -1, -1, -1);
    const RankCoord c = out_.coord;
    std::vector<uint32_t> done = grad_syncs_;
    auto after_all = [&](uint32_t op) {
      if (op == kNoOp) return;
      for (uint32_t x : done) add_dep(op, x);
      done = {op};
    };
    role(Role::kLayerNormGrads);
    if (d_.sp) {
      // 2 norms + the 2 row-parallel biases (projection, FC2) of every layer of this stage;
      // the final norm.
      const int64_t per_layer =
          2 * sc_.model.norm_parameters() + (sc_.model.add_bias_linear ? 2 * d_.h : 0);
      int64_t ln_params = layers_on_stage(sc_, c.pp) * per_layer;
      // MoE layers: no dense FC2 bias (the shared expert's instead, if any); the router weight
      // (E x h, Megatron marks it sequence_parallel).
      const int64_t moe_layers = moe_layers_on_rank();
      if (sc_.model.add_bias_linear && d_.shared_ffn == 0) ln_params -= moe_layers * d_.h;
      ln_params += moe_layers * d_.experts * d_.h;
      if (c.pp == d_.p - 1) ln_params += sc_.model.norm_parameters();
      after_all(collective(CollectiveKind::kAllReduce, GroupKind::kTp, Stream::kTpComm,
                           ln_params * d_.grad_bytes, "tp all_reduce layernorm grads"));
    }
    role(Role::kEmbeddingGrads);
    if (!sc_.model.untie_embeddings_and_output_weights && d_.p > 1 &&
        (c.pp == 0 || c.pp == d_.p - 1)) {
      after_all(collective(CollectiveKind::kAllReduce, GroupKind::kEmbedding, Stream::kPpComm,
                           d_.vocab_local * d_.h * d_.grad_bytes, "embedding grads all_reduce"));
    }
    for (uint32_t x : done) wait(x);
    context(Phase::kOptimizer, -1, -1, -1);
    const bool dist = sc_.training.use_distributed_optimizer;
    const int64_t dp_cp = layout_.size(GroupKind::kDpCp);
    // Dense parameters sharded over DP x CP, expert parameters over expert-DP.
    const RankParameters params = stage_parameters_on_rank(sc_, c.pp);
    const int64_t local =
        dist ? ceil_div(params.dense, dp_cp) +
                   (params.expert > 0 ? ceil_div(params.expert, layout_.size(GroupKind::kEdp)) : 0)
             : params.total();
    role(Role::kGradNorm);
    kernel(k_.grad_norm(local), "grad norm");
    // The norm's sum of squares: over every rank with the distributed optimizer (each holds a
    // shard); else over TP x PP, or every rank when experts are split (EP or ETP x EP differ
    // from TP: the expert shards live on ranks outside the model-parallel group).
    const bool expert_split = sc_.model.is_moe() && (d_.ep > 1 || d_.etp != d_.t);
    wait(collective(CollectiveKind::kAllReduce,
                    dist || expert_split ? GroupKind::kWorld : GroupKind::kModelParallel,
                    Stream::kDpComm, 4, "grad norm all_reduce"));
    if (sc_.training.clip_grad > 0) {
      // clip_grad_norm_fp32: the grads the step reads scaled by the clip coefficient.
      role(Role::kGradClipScale);
      kernel(k_.grad_clip_scale(local), "optimizer step");
    }
    role(Role::kOptimizerStep);
    kernel(k_.adamw(local), "optimizer step");
    if (fp8()) {
      // The FP8 copies (and transposes) of the layers' GEMM weights, refreshed once per
      // iteration from the updated weights: what Megatron's FP8 parameters do after the step
      // (and, without them, Transformer Engine on the first micro-batch: the same work).
      int64_t weights = 0;
      for (const auto& chunk : buckets_) {
        for (const Bucket& b : chunk) weights += b.gemm_weights;
      }
      kernel(k_.fp8_cast(weights, true), "fp8 weight cast");
    }
    close_compute();
  }

  const Scenario& sc_;
  const RankLayout& layout_;
  KernelTable& table_;
  RankProgram& out_;
  StepScope scope_;
  Dims d_;
  KernelFactory k_;

  Phase phase_ = Phase::kForward;
  int64_t mb_ = -1, chunk_ = -1, layer_ = -1;
  Role role_ = Role::kNone;
  uint32_t open_compute_ = kNoOp;
  uint32_t last_compute_ = kNoOp;
  std::vector<uint32_t> waits_;
  std::array<uint32_t, kNumStreams> last_on_stream_{kNoOp, kNoOp, kNoOp, kNoOp, kNoOp, kNoOp};

  std::vector<std::vector<Bucket>> buckets_;  // per model chunk
  // Per model chunk: the bucket index of each layer id, and of each bucket's trigger id (so that
  // the lowering stays linear in layers and micro-batches: no bucket list is rescanned).
  std::vector<std::unordered_map<int64_t, std::vector<size_t>>> bucket_of_layer_;
  std::vector<std::unordered_map<int64_t, std::vector<size_t>>> bucket_of_trigger_;
  std::vector<bool> forwarded_chunk_;
  std::vector<int64_t> last_backward_mb_;
  std::vector<uint32_t> grad_syncs_;
};

}  // namespace

Program build_program(const Scenario& s, const std::vector<int64_t>& ranks, StepScope scope) {
  if (s.training.tp_comm_overlap && !s.parallel.sequence_parallel) {
    throw UnsupportedError(
        "training.tp_comm_overlap needs parallelism.sequence_parallel: true (as Megatron-LM's "
        "--tp-comm-overlap)");
  }
  Program prog{s,
               layout_of(s),
               {},
               {}};
  if (prog.layout.world_size() != s.cluster.num_gpus) {
    throw InvalidArgument("cluster.num_gpus = " + std::to_string(s.cluster.num_gpus) +
                          " differs from TP x CP x DP x PP = " +
                          std::to_string(prog.layout.world_size()));
  }
  std::vector<int64_t> wanted = ranks;
  if (wanted.empty()) {
    for (int64_t r = 0; r < prog.layout.world_size(); ++r) wanted.push_back(r);
  }
  KernelTable table(prog.kernels);
  for (int64_t r : wanted) {
    RankProgram rp;
    rp.rank = r;
    rp.coord = prog.layout.coord(r);  // throws for a rank outside the world
    RankLowering(prog.scenario, prog.layout, table, rp, scope).run();
    prog.ranks.emplace(r, std::move(rp));
  }
  return prog;
}

}  // namespace traintwin
