// The lowering's sizes and kernels, internal to core/rank_lowering*: Dims (the sizes of one rank,
// named as in Korthikanti et al.: s, b, h, a, t, ...), KernelTable (interns kernels into the
// Program's table) and KernelFactory (each kernel's key, FLOPs and bytes: the catalogue's shapes,
// core/kernel_catalogue.hpp). Next in the flow: core/rank_lowering.hpp issues them as ops.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/kernel_catalogue.hpp"
#include "core/memory.hpp"
#include "core/moe_tokens.hpp"
#include "core/params.hpp"
#include "core/pipeline_split.hpp"
#include "core/program.hpp"

namespace traintwin::lowering {

inline constexpr uint32_t kNoOp = std::numeric_limits<uint32_t>::max();

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

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
  bool fused_cross_entropy;  // training.cross_entropy_loss_fusion
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
    fused_cross_entropy = sc.training.cross_entropy_loss_fusion;
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
  /// The index of `k` in the table, added when new (copied only then: most calls of a probe's
  /// lowering find a kernel of an earlier layer).
  uint32_t add(const Kernel& k) {
    const auto it = index_.find(k.key);
    if (it != index_.end()) return it->second;
    const auto id = static_cast<uint32_t>(kernels_.size());
    index_.emplace(k.key, id);
    kernels_.push_back(k);
    return id;
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
  // FLOPs forward (full sq x sq, as the papers count), twice that backward. Flash
  // ("flash_attention_fwd/bwd", Dao et al. 2022) and fused (cuDNN's fused attention,
  // "fused_attention_fwd/bwd"): Q, K, V, O (+ dO, dQ, dK, dV backward) only.
  // Unfused ("attention_fwd/bwd"): Megatron-LM's CoreAttention (megatron/model/transformer.py of
  // 2022, CoreAttention.forward), whose sq x sq scores of e = dsize bytes go through memory
  // between five kernels: unfused_attention_score_bytes(). A CP block of ring attention is this
  // kernel with sq = s / CP.
  Kernel attention(bool backward, int64_t heads, int64_t kv_heads, int64_t sq) const {
    const bool flash = stores_no_scores(d.backend);
    const char* name = d.backend == AttentionBackend::kFused
                           ? (backward ? "fused_attention_bwd" : "fused_attention_fwd")
                       : flash ? (backward ? "flash_attention_bwd" : "flash_attention_fwd")
                               : (backward ? "attention_bwd" : "attention_fwd");
    const double per_head = static_cast<double>(d.b * sq * d.hd * d.dsize);
    const double qo = 2.0 * static_cast<double>(heads) * per_head;     // Q and O
    const double kv = 2.0 * static_cast<double>(kv_heads) * per_head;  // K and V
    const double score_elements =
        static_cast<double>(d.b * heads) * static_cast<double>(sq) * static_cast<double>(sq);
    const double f = 4.0 * score_elements * static_cast<double>(d.hd);
    // Unfused, forward only: the context [b, np, sq, hn] permuted to [sq, b, np, hn] and made
    // contiguous (CoreAttention.forward, `context_layer.permute(2, 0, 1, 3).contiguous()`):
    // O read and written once more. Its backward is a view (no copy).
    const double context_copy = flash || backward ? 0.0 : static_cast<double>(heads) * per_head * 2;
    const double bytes =
        (backward ? 2 * (qo + kv) : qo + kv) + context_copy +
        (flash ? 0.0 : score_elements * unfused_attention_score_bytes(backward, d.dsize));
    return make(name, {d.b, heads, sq, d.hd}, backward ? 2 * f : f, bytes);
  }
  // Bytes per element of the sq x sq scores that Megatron-LM's unfused, causal attention moves
  // (CoreAttention.forward, megatron/model/transformer.py of 2022; its autograd backward), with
  // e bytes per element of the training precision and a 1-byte dropout mask:
  //  forward: torch.baddbmm(beta=0) writes the scores (e); the fused causal softmax
  //    (fused_softmax.py ScaledUpperTriangMaskedSoftmax -> scaled_upper_triang_masked_softmax.h,
  //    warp_forward: loads only the local_seq = row + 1 elements below the diagonal, writes the
  //    whole row, zeros above it) reads e / 2 on average and writes e; torch dropout reads e,
  //    writes e and the bool mask (1); torch.bmm(probs, V) reads e: 5.5 e + 1 (12 bytes fp16).
  //  backward: bmm's grads read the saved dropped probabilities (dV = P^T dO, e) and write dP
  //    (dP = dO V^T, e); dropout's backward reads dP and the mask and writes (2 e + 1); the
  //    softmax backward (warp_backward) reads the gradient and the saved softmax below the
  //    diagonal (e / 2 + e / 2) and writes the row (e); baddbmm's grads read dS twice
  //    (dQ = dS K, dK = dS^T Q: 2 e): 8 e + 1 (17 bytes fp16).
  static double unfused_attention_score_bytes(bool backward, int64_t dsize) {
    const double e = static_cast<double>(dsize);
    return backward ? 8 * e + 1 : 5.5 * e + 1;
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
  // bias + dropout + residual add over the LN region (Megatron's bias_dropout_add_fused_train,
  // one TorchScript-fused kernel). Forward: reads x and the residual, writes the sum and the
  // 1-byte mask (3 e + 1). Backward: reads dy and the mask, writes dx (2 e + 1), and the
  // residual's gradient, which autograd then sums with the gradient that comes back through the
  // branch's LayerNorm where the residual stream forks (torch/csrc/autograd/input_buffer.cpp,
  // InputBuffer::accumulate: an add reading both and writing one, 3 e): each of the layer's two
  // residual adds has exactly one such sum, costed with its backward: 5 e + 1 in all.
  Kernel dropout_add(bool backward) const {
    const int64_t n = d.tokens_sp * d.h;
    const double fn = static_cast<double>(n);
    return make(backward ? "dropout_add_bwd" : "dropout_add_fwd", {n}, backward ? 3 * fn : 2 * fn,
                (backward ? 5 : 3) * fn * static_cast<double>(d.dsize) + fn);
  }
  // Megatron's vocab-parallel cross-entropy over one rank's T x V/t logits, unfused (Megatron's
  // default, --cross-entropy-loss-fusion off; megatron/core/tensor_parallel/cross_entropy.py,
  // _VocabParallelCrossEntropy.forward/backward with VocabParallelCrossEntropy's
  // calculate_logits_max, calculate_predicted_logits, calculate_cross_entropy_loss and
  // calculate_gradients, core_v0.10.0 to core_v0.12; the same passes in megatron/mpu/
  // cross_entropy.py of 2021), in fp32 after `vocab_parallel_logits.float()`: a copy of 16-bit
  // logits (reads e, writes 4), none in fp32 training. Bytes per logit, e = dsize:
  //   cross_entropy_max: the cast (e + 4 for 16-bit logits) and torch.max over the vocabulary (4).
  //   cross_entropy_fwd: `vocab_parallel_logits -= logits_max` (reads and writes 4), torch.exp
  //     in place (8), exp_logits.sum(dim=-1) (4), exp_logits.div_(sum_exp_logits), the softmax
  //     saved for the backward (8): 28.
  //   cross_entropy_bwd: grad_input.mul_(grad_output) on the saved softmax (8) and the backward
  //     of the cast, the fp32 gradient back to the logits' dtype (reads 4, writes e; none in fp32).
  // 16-bit training: 10 + 28 + 14 = 52 bytes per logit; fp32: 4 + 28 + 8 = 40.
  // Fused (training.cross_entropy_loss_fusion; megatron/core/fusions/fused_cross_entropy.py,
  // core_v0.10.0 to core_v0.12, bf16 only): the same four functions, each one @jit_fuser
  // (torch.compile) graph, so each reads and writes the logits once per graph; an in-place
  // update of a graph input is written back to it in the same kernel:
  //   cross_entropy_max: the bf16 logits read (2), the fp32 copy the graph returns written (4): 6.
  //   cross_entropy_fwd: subtract, exp and sum in one pass (reads 4, writes the exps 4), then
  //     after the all-reduce the in-place divide (8): 16.
  //   cross_entropy_bwd: the saved softmax read (4), the gradient written as bf16 (2) and the
  //     in-place update of the saved softmax written back (4): 10.
  // Fused: 6 + 16 + 10 = 32 bytes per logit. The per-token terms (target gather and mask, log
  // of the sums) are negligible. FLOPs per logit: 1 (max), 3 (subtract, exp, divide),
  // 3 (backward). The fused forward all-reduces the target logits and the sums in one call; the
  // Program keeps its two all-reduces of T x 4 bytes (one more latency per micro-batch).
  static double cross_entropy_bytes_per_logit(std::string_view name, int64_t dsize, bool fused) {
    if (fused) {
      if (name == "cross_entropy_max") return static_cast<double>(dsize) + 4;
      if (name == "cross_entropy_fwd") return 16;
      return 8 + static_cast<double>(dsize);  // cross_entropy_bwd
    }
    const double cast = dsize < 4 ? static_cast<double>(dsize) + 4 : 0.0;
    if (name == "cross_entropy_max") return cast + 4;
    if (name == "cross_entropy_fwd") return 28;
    return 8 + (dsize < 4 ? 4 + static_cast<double>(dsize) : 0.0);  // cross_entropy_bwd
  }
  Kernel cross_entropy(const char* name) const {
    const double n = static_cast<double>(d.tokens * d.vocab_local);
    const std::string_view v = name;
    return make(name, {d.tokens, d.vocab_local}, (v == "cross_entropy_max" ? 1 : 3) * n,
                cross_entropy_bytes_per_logit(v, d.dsize, d.fused_cross_entropy) * n);
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
  // Permute and unpermute as Megatron-Core runs them without moe_permute_fusion (its default;
  // megatron/core/transformer/moe/moe_utils.py permute() and unpermute(), core_v0.10.0 to
  // core_v0.12: unfused torch ops; r = `rows` routed copies, T = `tokens`, each row h elements of
  // e bytes, indices int64):
  //   permute forward: tokens.index_select(0, sorted_indices): reads and writes r h e, 8 r of
  //     indices (the masked_select building them is over the T x E routing map, negligible).
  //   permute backward (index_select's): zeros(T, h).index_add_(0, sorted_indices, grad): writes
  //     T h e, reads the r h e gradient and reads and writes one output element per added one
  //     (2 r h e): 3 r h e + T h e + 8 r; r h FLOPs.
  //   unpermute forward: permuted_tokens * permuted_probs.unsqueeze(-1) (reads and writes r h
  //     e), zeros(T, h) (T h e), scatter_add_ of the r h products (reads them, reads and writes
  //     the output element of each: 3 r h e): 5 r h e + T h e + 8 r; 2 r h FLOPs.
  //   unpermute backward: scatter_add_'s, grad.gather(0, index) (reads and writes r h e); the
  //     product's, grad x probs (reads and writes r h e) and (grad x tokens).sum(-1) for the
  //     probabilities (reads 2 r h e, writes r h e, reads it again): 8 r h e + 8 r; 3 r h FLOPs.
  //
  // With moe_permute_fusion (Megatron-Core's moe_utils.permute() / unpermute() then call
  // Transformer Engine's moe_permute / moe_unpermute, transformer_engine/pytorch/permutation.py:
  // mask-map Triton kernels that load each token row once and write each of its routed copies,
  // or gather and sum them; read in the core 0.14 / TE 2.x sources the Qwen3 recipes run): the
  // moe_permute_fused_* / moe_unpermute_fused_* kernels, one int32 destination row per routed
  // copy (4 r):
  //   permute forward: reads T h e, writes r h e: (T + r) h e + 4 r.
  //   permute backward: reads the r h e gradient, writes the T h e sum: (r + T) h e + 4 r; r h
  //     FLOPs.
  //   unpermute forward: reads the r h e rows and their fp32 probabilities, writes T h e:
  //     (r + T) h e + 8 r; 2 r h FLOPs.
  //   unpermute backward: reads the T h e gradient and the r h e forward input (for the
  //     probabilities' gradient), writes the r h e input gradient and r fp32 probability
  //     gradients: (2 r + T) h e + 12 r; 3 r h FLOPs.
  Kernel moe_permute(bool backward, int64_t rows, int64_t tokens) const {
    const double r = static_cast<double>(rows), hh = static_cast<double>(d.h),
                 e = static_cast<double>(d.dsize), tok = static_cast<double>(tokens);
    if (d.model.moe_permute_fusion) {
      return make(backward ? "moe_permute_fused_bwd" : "moe_permute_fused_fwd",
                  {rows, tokens, d.h}, backward ? r * hh : 0, (tok + r) * hh * e + 4 * r);
    }
    if (backward) {
      return make("moe_permute_bwd", {rows, tokens, d.h}, r * hh,
                  (3 * r + tok) * hh * e + 8 * r);
    }
    return make("moe_permute_fwd", {rows, tokens, d.h}, 0, 2 * r * hh * e + 8 * r);
  }
  Kernel moe_unpermute(bool backward, int64_t rows, int64_t tokens) const {
    const double r = static_cast<double>(rows), hh = static_cast<double>(d.h),
                 e = static_cast<double>(d.dsize), tok = static_cast<double>(tokens);
    if (d.model.moe_permute_fusion) {
      if (backward) {
        return make("moe_unpermute_fused_bwd", {rows, tokens, d.h}, 3 * r * hh,
                    (2 * r + tok) * hh * e + 12 * r);
      }
      return make("moe_unpermute_fused_fwd", {rows, tokens, d.h}, 2 * r * hh,
                  (r + tok) * hh * e + 8 * r);
    }
    if (backward) {
      return make("moe_unpermute_bwd", {rows, tokens, d.h}, 3 * r * hh, 8 * r * hh * e + 8 * r);
    }
    return make("moe_unpermute_fwd", {rows, tokens, d.h}, 2 * r * hh,
                (5 * r + tok) * hh * e + 8 * r);
  }
  // A copy of `rows` hidden-state rows into a new order (reads and writes rows h e, no FLOPs):
  // torch.cat of row chunks, as Megatron-Core makes it (a) in the alltoall dispatcher with more
  // than one local expert, sort_chunks_by_idxs() (core_v0.10.0 token_dispatcher.py, "Permutation
  // 2: Sort tokens by local expert", and its inverse before the combine; from core_v0.11 with
  // drop-and-pad the reshape(EP, E_l, C, h).transpose(0, 1).contiguous() that replaced it) and
  // (b) in SequentialMLP (experts.py, moe_grouped_gemm false), torch.cat of the local experts'
  // outputs; backward, the same copy of the gradients (the backward of a split is a cat).
  Kernel moe_chunk_cat(int64_t rows) const {
    const double n = static_cast<double>(rows * d.h);
    return make("moe_chunk_cat", {rows, d.h}, 0, 2 * n * static_cast<double>(d.dsize));
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

  // Global grad norm over the fp32 main gradients of n parameters (clip_grad_norm_fp32's
  // multi_tensor_l2norm: reads 4 bytes each), with the optimizer's passes over the gradients
  // that come before it in Megatron's MixedPrecisionOptimizer.step (megatron/optimizer/
  // optimizer.py): _copy_model_grads_to_main_grads, `main_grad.float()`, a copy (reads
  // grad_bytes, writes 4) only when the gradients were not accumulated in fp32 (fp16 training;
  // bf16 keeps fp32 main_grad and the call returns the same tensor), and, with the fp16 loss
  // scaler, _unscale_main_grads_and_check_for_nan (torch._amp_foreach_non_finite_check_and_
  // unscale_: reads and writes 4). fp16: 2 + 4 + 8 + 4 = 18 bytes; bf16: 4.
  Kernel grad_norm(int64_t n) const {
    const double fn = static_cast<double>(n);
    const double copy = d.grad_bytes < 4 ? static_cast<double>(d.grad_bytes) + 4 : 0.0;
    const bool unscale = d.dtype == Precision::kFp16;
    return make("grad_norm", {n}, (unscale ? 3 : 2) * fn, fn * (4 + copy + (unscale ? 8 : 0)));
  }
  // Megatron's gradient accumulation without gradient_accumulation_fusion (Megatron-LM before
  // commit 83b1e42f30, 2022-02-13; megatron/model/distributed.py _make_param_hook at 50a4b5fa02:
  // `param.main_grad.add_(param.grad.data)`, run by each parameter's backward hook once per
  // micro-batch) over n parameters: reads param.grad in the parameter dtype (dsize) and
  // main_grad (grad_bytes: fp16 under fp16 training without fp32 accumulation, fp32 under bf16 or
  // fp32), writes main_grad. fp16: 2 + 2 + 2 = 6 bytes per parameter; bf16: 2 + 4 + 4 = 10;
  // fp32: 12. One FLOP (the add) per parameter.
  Kernel grad_accumulate(int64_t n) const {
    const double fn = static_cast<double>(n);
    return make("grad_accumulate", {n}, fn,
                fn * static_cast<double>(d.dsize + 2 * d.grad_bytes));
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
  // AdamW on n parameters (apex FusedAdam's multi_tensor_adam): reads the fp32 grad, master, m
  // and v, writes master, m and v (28 bytes); then, in mixed precision, Megatron's
  // _copy_main_params_to_model_params (megatron/optimizer/optimizer.py, multi_tensor_scale by
  // 1.0; the distributed optimizer's copy_ likewise) reads the fp32 master again and writes
  // the dsize model parameter: 28 + 4 + dsize (34 bytes fp16/bf16). fp32 training steps the
  // model parameters themselves: 28.
  Kernel adamw(int64_t n) const {
    const double fn = static_cast<double>(n);
    const double copy = d.dsize < 4 ? 4 + static_cast<double>(d.dsize) : 0.0;
    return make("adamw_step", {n}, 16 * fn, fn * (28 + copy));
  }
};

}  // namespace traintwin::lowering
