// Profile mode of the executor; see profile.hpp.
#include "exec/profile.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "core/error.hpp"
#include "core/kernel_catalogue.hpp"
#include "core/memory.hpp"
#include "core/rank_layout.hpp"
#include "exec/counter_rng.hpp"
#include "exec/cpu/host_device.hpp"
#include "exec/cpu/moe_router.hpp"
#include "exec/cpu/rope.hpp"
#include "exec/profile_inputs.hpp"
#include "traces/timeline_costs.hpp"

namespace traintwin::exec {
namespace {

/// One set of inputs of a kernel and the call that runs it on them.
struct KernelCall {
  std::vector<Tensor> t;
  /// The tensors of `t` that exec/gpt_model*.cpp allocates at this kernel (its outputs, zeroed by
  /// the backend): allocated again before every run, inside the timed region, as the live op
  /// pays it. The others (inputs, and the gradient accumulators the model keeps in its shard)
  /// persist across runs.
  std::vector<size_t> fresh;
  std::vector<DeviceBuffer<int32_t>> ids;
  /// The bf16 tensors of a bf16 kernel, and those of them allocated at the kernel (as `fresh`).
  std::vector<Bf16Tensor> h;
  std::vector<size_t> fresh_h;
  /// The FP8 operands of an FP8 kernel.
  std::vector<Fp8Tensor> q;
  std::function<void(KernelCall&)> run;
  int64_t bytes() const {
    int64_t b = 0;
    for (const Tensor& x : t) b += static_cast<int64_t>(x.size() * sizeof(float));
    for (const auto& x : ids) b += static_cast<int64_t>(x.size() * sizeof(int32_t));
    for (const auto& x : h) b += static_cast<int64_t>(x.size() * sizeof(uint16_t));
    for (const auto& x : q) b += static_cast<int64_t>(x.size());
    return b;
  }
};

/// The tensors, moved into a vector (an initializer list would copy them).
template <typename... Ts>
std::vector<Tensor> list(Ts&&... xs) {
  std::vector<Tensor> v;
  v.reserve(sizeof...(xs));
  (v.push_back(std::forward<Ts>(xs)), ...);
  return v;
}

bool has_bias(Role role) { return role == Role::kQkv || role == Role::kFc1; }

[[noreturn]] void unsupported(const KernelKey& key) {
  throw UnsupportedError("profile: kernel " + key.to_string() +
                         " is not run by the executor's model (no profile for it)");
}

bool is_linear_gemm(const std::string& name) {
  return name == "gemm_fwd" || name == "gemm_dgrad" || name == "gemm_wgrad";
}

/// A kernel of the catalogue's GEMM class: the linear layers' and the experts' grouped GEMMs
/// (the kernels with bf16 and FP8 bindings).
bool is_gemm(const std::string& name) {
  const KernelDescriptor* d = find_kernel(name);
  return d != nullptr && d->cost_class == KernelClass::kGemm;
}

/// A permutation of `rows` expert rows over `tokens` tokens and `experts` experts, as the
/// dispatcher's is shaped: expert-major (expert m E / rows), tokens spread evenly (m N / rows),
/// so each expert receives the same number of rows give or take one (a balanced router).
cpu::MoePermutation balanced_permutation(int64_t rows, int64_t tokens, int64_t experts) {
  cpu::MoePermutation perm;
  perm.rows_per_expert.assign(static_cast<size_t>(experts), 0);
  for (int64_t m = 0; m < rows; ++m) {
    perm.token.push_back(m * tokens / rows);
    const auto e = static_cast<int32_t>(m * experts / rows);
    perm.expert.push_back(e);
    ++perm.rows_per_expert[static_cast<size_t>(e)];
  }
  return perm;
}

/// The routing state of one router call (host maps and counts, as the Backend keeps them on the
/// host), shared by a kernel call's runs.
struct RouterState {
  std::vector<uint8_t> topk_map, routing_map;
  std::vector<int64_t> tokens_per_expert;
};

/// The MoE kernel `key` (exec/gpt_model_moe.cpp's calls: router top-k softmax with the
/// scenario's capacity, the Switch aux loss, permute / unpermute over a balanced permutation,
/// the local experts' grouped GEMM with equal rows per expert), fp32.
KernelCall make_moe_call(Backend& be, const Scenario& sc, const KernelKey& key, ProfileInputs& in) {
  const std::vector<int64_t>& d = key.shape;
  const std::string& name = key.name;
  const auto& model = sc.model;
  const int64_t topk = model.moe_router_topk;
  KernelCall c;
  if (name == "moe_router_topk_fwd" || name == "moe_router_topk_bwd") {
    const int64_t n = d[0], e = d[1], k = d[2];
    const int64_t capacity = model.moe_expert_capacity_factor
                                 ? cpu::moe_expert_capacity(n, k, e, *model.moe_expert_capacity_factor)
                                 : 0;
    const bool pad = model.moe_pad_expert_input_to_capacity;
    auto st = std::make_shared<RouterState>();
    st->topk_map.assign(static_cast<size_t>(n * e), 0);
    st->routing_map.assign(static_cast<size_t>(n * e), 0);
    st->tokens_per_expert.assign(static_cast<size_t>(e), 0);
    // gates, probs, logits
    c.t = list(in.zeros(n * e), in.zeros(n * e), in.uniform(n * e, -3.0, 3.0));
    auto forward = [&be, st, n, e, k, capacity, pad](KernelCall& x) {
      be.moe_topk_softmax_forward(x.t[0], st->topk_map, st->routing_map, x.t[1],
                                  st->tokens_per_expert, x.t[2], n, e, k, capacity, pad);
    };
    if (name == "moe_router_topk_fwd") {
      c.fresh = {0, 1};
      c.run = forward;
    } else {
      forward(c);  // the maps and gates the backward reads
      c.t.push_back(in.zeros(n * e));     // dlogits (+=)
      c.t.push_back(in.uniform(n * e));   // dprobs
      c.run = [&be, st, n, e](KernelCall& x) {
        be.moe_topk_softmax_backward(x.t[3], x.t[4], x.t[0], st->topk_map, st->routing_map, n, e);
      };
    }
  } else if (name == "moe_aux_loss_fwd" || name == "moe_aux_loss_bwd") {
    const int64_t n = d[0], e = d[1];
    auto tpe = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(e), 0);
    for (int64_t i = 0; i < n * topk; ++i) ++(*tpe)[static_cast<size_t>(i % e)];
    const double coeff = model.moe_aux_loss_coeff;
    if (name == "moe_aux_loss_fwd") {
      c.fresh = {0};
      c.t = list(in.zeros(n * e), in.uniform(n * e, -3.0, 3.0));  // scores, logits
      c.run = [&be, tpe, n, e, topk, coeff](KernelCall& x) {
        (void)be.moe_switch_aux_loss_forward(x.t[0], x.t[1], *tpe, n, e, n, topk, coeff);
      };
    } else {
      c.t = list(in.zeros(n * e), in.uniform(n * e, 0.0, 1.0));  // dlogits (+=), scores
      c.run = [&be, tpe, n, e, topk, coeff](KernelCall& x) {
        be.moe_switch_aux_loss_backward(x.t[0], 1.0, x.t[1], *tpe, n, e, n, topk, coeff);
      };
    }
  } else if (name == "moe_permute_fwd" || name == "moe_permute_bwd" ||
             name == "moe_unpermute_fwd" || name == "moe_unpermute_bwd") {
    const int64_t rows = d[0], n = d[1], h = d[2], e = model.num_moe_experts;
    auto perm = std::make_shared<const cpu::MoePermutation>(balanced_permutation(rows, n, e));
    if (name == "moe_permute_fwd") {
      c.fresh = {0};
      c.t = list(in.zeros(rows * h), in.uniform(n * h));
      c.run = [&be, perm, n, h](KernelCall& x) { be.moe_permute_forward(x.t[0], x.t[1], *perm, n, h); };
    } else if (name == "moe_permute_bwd") {
      c.fresh = {0};
      c.t = list(in.zeros(n * h), in.uniform(rows * h));
      c.run = [&be, perm, n, h](KernelCall& x) { be.moe_permute_backward(x.t[0], x.t[1], *perm, n, h); };
    } else if (name == "moe_unpermute_fwd") {
      c.fresh = {0};
      c.t = list(in.zeros(n * h), in.uniform(rows * h), in.uniform(n * e, 0.0, 1.0));
      c.run = [&be, perm, n, e, h](KernelCall& x) {
        be.moe_unpermute_forward(x.t[0], x.t[1], x.t[2], *perm, n, e, h);
      };
    } else {
      c.fresh = {0, 1};  // dinp, dprobs: fresh per micro-batch in exec/gpt_model_moe.cpp
      c.t = list(in.zeros(rows * h), in.zeros(n * e), in.uniform(n * h), in.uniform(rows * h),
                 in.uniform(n * e, 0.0, 1.0));
      c.run = [&be, perm, n, e, h](KernelCall& x) {
        be.moe_unpermute_backward(x.t[0], x.t[1], x.t[2], x.t[3], x.t[4], *perm, n, e, h);
      };
    }
  } else {  // grouped_gemm_{fwd,dgrad,wgrad}: {groups, m, n, k}, each Y[m, n] = X[m, k] W_g^T
    const int64_t g = d[0], m = d[1], n = d[2], k = d[3];
    auto rows = std::make_shared<const std::vector<int64_t>>(static_cast<size_t>(g), m);
    if (name == "grouped_gemm_fwd") {
      c.fresh = {0};
      c.t = list(in.zeros(g * m * n), in.uniform(g * m * k), in.uniform(g * n * k));
      c.run = [&be, rows, n, k](KernelCall& x) {
        be.grouped_matmul_forward(x.t[0], x.t[1], x.t[2], *rows, k, n);
      };
    } else if (name == "grouped_gemm_dgrad") {
      c.fresh = {0};
      c.t = list(in.zeros(g * m * k), in.uniform(g * m * n), in.uniform(g * n * k));
      c.run = [&be, rows, n, k](KernelCall& x) {
        be.grouped_matmul_backward_data(x.t[0], x.t[1], x.t[2], *rows, k, n);
      };
    } else {
      c.t = list(in.zeros(g * n * k), in.uniform(g * m * n), in.uniform(g * m * k));
      c.run = [&be, rows, n, k](KernelCall& x) {
        be.grouped_matmul_backward_weight(x.t[0], x.t[1], x.t[2], *rows, k, n);
      };
    }
  }
  return c;
}

/// The GEMM shape of a linear-layer or grouped key: {groups, m, n, k} (rows, out_channels,
/// channels per group; groups 1 for gemm_*).
struct GemmShape {
  int64_t g, m, n, k;
};

GemmShape gemm_shape(const KernelKey& key) {
  const std::vector<int64_t>& d = key.shape;
  return d.size() == 4 ? GemmShape{d[0], d[1], d[2], d[3]} : GemmShape{1, d[0], d[1], d[2]};
}

std::string_view variant(const std::string& name) {  // "fwd", "dgrad" or "wgrad"
  return std::string_view(name).substr(name.rfind('_') + 1);
}

/// The FP8 linear layers of `key` as Transformer Engine runs them, every GEMM in the TN form on
/// the FP8 copies it keeps (Backend::fp8_gemm_nt), one per group (the grouped GEMM of the local
/// experts as CudaBackend's: one GEMM per expert): forward inp [m, k] x W [n, k] -> [m, n] bf16
/// (fast accumulation); dgrad dout [m, n] x W^T [k, n] -> [m, k] bf16; wgrad dout^T [n, m] x
/// inp^T [k, m] += [n, k] fp32 main_grad. E4M3 throughout under --fp8-format e4m3; the gradients
/// E5M2 under hybrid. Scales 1 (inputs in [-1, 1)): a GEMM's time does not depend on them.
KernelCall make_fp8_gemm_call(Backend& be, const Scenario& sc, const KernelKey& key,
                              ProfileInputs& in) {
  const GemmShape shape = gemm_shape(key);
  const int64_t g = shape.g, m = shape.m, n = shape.n, k = shape.k;
  const cpu::Fp8Kind fwd = cpu::Fp8Kind::kE4M3;
  const cpu::Fp8Kind grad = sc.training.fp8_format == Fp8Format::kHybrid ? cpu::Fp8Kind::kE5M2
                                                                          : cpu::Fp8Kind::kE4M3;
  const std::string_view v = variant(key.name);
  KernelCall c;
  if (v == "fwd") {
    c.q.push_back(in.uniform_fp8(g * m * k, fwd));
    c.q.push_back(in.uniform_fp8(g * n * k, fwd));
    c.h.push_back(in.zeros_bf16(g * m * n));
    c.fresh_h = {0};
    c.run = [&be, g, m, n, k, fwd](KernelCall& x) {
      for (int64_t i = 0; i < g; ++i) {
        be.fp8_gemm_nt(BSpan(x.h[0]).subspan(i * m * n, m * n),
                       CF8Span(x.q[0]).subspan(i * m * k, m * k), fwd,
                       CF8Span(x.q[1]).subspan(i * n * k, n * k), fwd, 1.0f, m, n, k, true);
      }
    };
  } else if (v == "dgrad") {
    c.q.push_back(in.uniform_fp8(g * m * n, grad));
    c.q.push_back(in.uniform_fp8(g * k * n, fwd));
    c.h.push_back(in.zeros_bf16(g * m * k));
    c.fresh_h = {0};
    c.run = [&be, g, m, n, k, fwd, grad](KernelCall& x) {
      for (int64_t i = 0; i < g; ++i) {
        be.fp8_gemm_nt(BSpan(x.h[0]).subspan(i * m * k, m * k),
                       CF8Span(x.q[0]).subspan(i * m * n, m * n), grad,
                       CF8Span(x.q[1]).subspan(i * k * n, k * n), fwd, 1.0f, m, k, n, false);
      }
    };
  } else {
    c.q.push_back(in.uniform_fp8(g * n * m, grad));
    c.q.push_back(in.uniform_fp8(g * k * m, fwd));
    c.t = list(in.zeros(g * n * k));
    c.run = [&be, g, m, n, k, fwd, grad](KernelCall& x) {
      for (int64_t i = 0; i < g; ++i) {
        be.fp8_gemm_nt_accumulate(FSpan(x.t[0]).subspan(i * n * k, n * k),
                                  CF8Span(x.q[0]).subspan(i * n * m, n * m), grad,
                                  CF8Span(x.q[1]).subspan(i * k * m, k * m), fwd, 1.0f, n, k, m,
                                  false);
      }
    };
  }
  return c;
}

/// The bf16 linear layers of `key` (Backend::matmul_*_bf16), one per group as make_fp8_gemm_call.
KernelCall make_bf16_gemm_call(Backend& be, const KernelKey& key, bool bias, ProfileInputs& in) {
  const GemmShape shape = gemm_shape(key);
  const int64_t g = shape.g, m = shape.m, n = shape.n, k = shape.k;
  const std::string_view v = variant(key.name);
  KernelCall c;
  if (v == "fwd") {
    c.h.push_back(in.zeros_bf16(g * m * n));
    c.h.push_back(in.uniform_bf16(g * m * k));
    c.h.push_back(in.uniform_bf16(g * n * k));
    if (bias) c.h.push_back(in.uniform_bf16(n));
    c.fresh_h = {0};
    c.run = [&be, g, m, n, k, bias](KernelCall& x) {
      for (int64_t i = 0; i < g; ++i) {
        be.matmul_forward_bf16(BSpan(x.h[0]).subspan(i * m * n, m * n),
                               CBSpan(x.h[1]).subspan(i * m * k, m * k),
                               CBSpan(x.h[2]).subspan(i * n * k, n * k),
                               bias ? CBSpan(x.h[3]) : CBSpan(), 1, m, k, n);
      }
    };
  } else if (v == "dgrad") {
    c.h.push_back(in.zeros_bf16(g * m * k));
    c.h.push_back(in.uniform_bf16(g * m * n));
    c.h.push_back(in.uniform_bf16(g * n * k));
    c.fresh_h = {0};
    c.run = [&be, g, m, n, k](KernelCall& x) {
      for (int64_t i = 0; i < g; ++i) {
        be.matmul_backward_data_bf16(BSpan(x.h[0]).subspan(i * m * k, m * k),
                                     CBSpan(x.h[1]).subspan(i * m * n, m * n),
                                     CBSpan(x.h[2]).subspan(i * n * k, n * k), 1, m, k, n);
      }
    };
  } else {  // wgrad: the fp32 main_grad (and bias gradient) persist, as the shard's buffers
    c.t = list(in.zeros(g * n * k), in.zeros(bias ? n : 0));
    c.h.push_back(in.uniform_bf16(g * m * n));
    c.h.push_back(in.uniform_bf16(g * m * k));
    c.run = [&be, g, m, n, k](KernelCall& x) {
      for (int64_t i = 0; i < g; ++i) {
        be.matmul_backward_weight_bf16(FSpan(x.t[0]).subspan(i * n * k, n * k),
                                       i == 0 ? FSpan(x.t[1]) : FSpan(),
                                       CBSpan(x.h[0]).subspan(i * m * n, m * n),
                                       CBSpan(x.h[1]).subspan(i * m * k, m * k), 1, m, k, n);
      }
    };
  }
  return c;
}

/// The kernel of `target` on fresh inputs, with the Backend calls exec/gpt_model*.cpp makes for
/// its Role.
KernelCall make_call(Backend& be, const Scenario& sc, const ProfileTarget& target,
                     ProfileInputs& in) {
  const KernelKey& key = target.kernel.key;
  const std::vector<int64_t>& d = key.shape;
  const std::string& name = key.name;
  const int64_t h = sc.model.hidden_size;
  const int64_t b = sc.training.micro_batch_size;
  const int64_t t = key.tp;
  const double p_hidden = sc.training.hidden_dropout, p_att = sc.training.attention_dropout;
  KernelCall c;
  auto need = [&](size_t dims) {
    if (d.size() != dims) unsupported(key);
  };
  check_runs_dtype(be, sc, key);
  if (is_linear_gemm(name)) {
    need(3);
    const int64_t m = d[0], n = d[1], k = d[2];
    const bool bias = has_bias(target.role);
    if (key.dtype == Precision::kBf16) return make_bf16_gemm_call(be, key, bias, in);
    if (key.dtype == Precision::kFp8) return make_fp8_gemm_call(be, sc, key, in);
    if (name == "gemm_fwd") {
      c.fresh = {0};
      c.t = list(in.zeros(m * n), in.uniform(m * k), in.uniform(n * k));
      if (bias) c.t.push_back(in.uniform(n));
      c.run = [&be, m, n, k, bias](KernelCall& x) {
        be.matmul_forward(x.t[0], x.t[1], x.t[2], bias ? CFSpan(x.t[3]) : CFSpan(), 1, m, k, n);
      };
    } else if (name == "gemm_dgrad") {
      c.fresh = {0};
      c.t = list(in.zeros(m * k), in.uniform(m * n), in.uniform(n * k));
      c.run = [&be, m, n, k](KernelCall& x) {
        be.matmul_backward_data(x.t[0], x.t[1], x.t[2], 1, m, k, n);
      };
    } else {
      c.t = list(in.zeros(n * k), in.zeros(bias ? n : 0), in.uniform(m * n), in.uniform(m * k));
      c.run = [&be, m, n, k](KernelCall& x) {
        be.matmul_backward_weight(x.t[0], x.t[1], x.t[2], x.t[3], 1, m, k, n);
      };
    }
  } else if (name == "attention_fwd" || name == "attention_bwd" ||
             name == "flash_attention_fwd" || name == "flash_attention_bwd") {
    need(4);
    const bool fwd = name == "attention_fwd" || name == "flash_attention_fwd";
    const bool flash = name == "flash_attention_fwd" || name == "flash_attention_bwd";
    const int64_t bb = d[0], heads = d[1], s = d[2], C = d[1] * d[3];
    const int64_t a = sc.model.num_attention_heads, g = sc.model.query_groups();
    const int64_t hd = d[3], kv = heads * g / a, width = (heads + 2 * kv) * hd;
    if (kv * a != heads * g) unsupported(key);
    auto drop = std::make_shared<cpu::AttentionProbabilityDropout>(cpu::AttentionProbabilityDropout{
        cpu::DropoutParams{p_att, 1, 3}, cpu::AttentionBlock{bb, heads, s, 0, 0, heads}});
    const cpu::AttentionProbabilityDropout* dp = p_att > 0 ? drop.get() : nullptr;
    if (flash || sc.parallel.context_parallel_size > 1) {
      // GptModel runs flash attention, and every block of ring attention, with the blockwise
      // kernel; a causal block of s queries and keys has the work of a CP ring block (each
      // visits half of its s x s pairs under the causal load balance).
      const cpu::BlockAttentionShape shape{bb, s, s, heads, kv, hd};
      const CpSequence seq(s, 1, 0);
      if (fwd) {
        c.fresh = {0, 1};
        c.t = list(in.zeros(bb * s * C), in.zeros(bb * heads * s), in.uniform(bb * s * C),
                   in.uniform(bb * s * 2 * kv * hd));
        c.run = [&be, shape, seq, drop, dp](KernelCall& x) {
          be.block_attention_forward(x.t[0], x.t[1], x.t[2], x.t[3], seq, seq, shape, dp);
        };
      } else {
        c.fresh = {0, 1};
        c.t = list(in.zeros(bb * s * C), in.zeros(bb * s * 2 * kv * hd), in.uniform(bb * s * C),
                   in.uniform(bb * s * C), in.uniform(bb * s * 2 * kv * hd),
                   in.uniform(bb * s * C), in.uniform(bb * heads * s, 1.0, 3.0));
        c.run = [&be, shape, seq, drop, dp](KernelCall& x) {
          be.block_attention_backward(x.t[0], x.t[1], x.t[2], x.t[3], x.t[4], x.t[5], x.t[6], seq,
                                      seq, shape, dp);
        };
      }
    } else if (g != a) {  // grouped-query attention (GptModel: the gqa kernel)
      if (fwd) {
        c.fresh = {0, 1};
        c.t = list(in.zeros(bb * s * C), in.zeros(bb * heads * s * s), in.uniform(bb * s * width));
        c.run = [&be, bb, s, heads, kv, hd, drop, dp](KernelCall& x) {
          be.gqa_attention_forward(x.t[0], x.t[1], x.t[2], bb, s, heads, kv, hd, dp);
        };
      } else {
        c.fresh = {0};
        c.t = list(in.zeros(bb * s * width), in.uniform(bb * s * C), in.uniform(bb * s * width),
                   in.uniform(bb * heads * s * s, 0.0, 1.0));
        c.run = [&be, bb, s, heads, kv, hd, drop, dp](KernelCall& x) {
          be.gqa_attention_backward(x.t[0], x.t[1], x.t[2], x.t[3], bb, s, heads, kv, hd, dp);
        };
      }
    } else if (fwd) {
      c.fresh = {0, 1, 2};
      c.t = list(in.zeros(bb * s * C), in.zeros(bb * heads * s * s), in.zeros(bb * heads * s * s),
             in.uniform(bb * s * 3 * C));
      c.run = [&be, bb, s, C, heads, drop, dp](KernelCall& x) {
        be.attention_forward(x.t[0], x.t[1], x.t[2], x.t[3], bb, s, C, heads, dp);
      };
    } else {
      c.fresh = {0};
      c.t = list(in.zeros(bb * s * 3 * C), in.uniform(bb * s * C), in.uniform(bb * s * 3 * C),
             in.uniform(bb * heads * s * s, 0.0, 1.0));
      c.run = [&be, bb, s, C, heads, drop, dp](KernelCall& x) {
        be.attention_backward(x.t[0], x.t[1], x.t[2], x.t[3], bb, s, C, heads, dp);
      };
    }
  } else if (name == "cp_attention_merge") {
    need(4);  // {b, heads, s, head_dim}
    const int64_t bb = d[0], heads = d[1], s = d[2], hd = d[3];
    c.t = list(in.uniform(bb * s * heads * hd), in.uniform(bb * heads * s),
               in.uniform(bb * s * heads * hd), in.uniform(bb * heads * s));
    c.run = [&be, bb, s, heads, hd](KernelCall& x) {
      be.attention_merge(x.t[0], x.t[1], x.t[2], x.t[3], bb, s, heads, hd);
    };
  } else if (name == "layernorm_fwd" || name == "layernorm_bwd") {
    need(2);
    const int64_t rows = d[0], C = d[1];
    if (name == "layernorm_fwd") {
      c.fresh = {0, 1, 2};
      c.t = list(in.zeros(rows * C), in.zeros(rows), in.zeros(rows), in.uniform(rows * C),
             in.uniform(C), in.uniform(C));
      c.run = [&be, rows, C](KernelCall& x) {
        be.layernorm_forward(x.t[0], x.t[1], x.t[2], x.t[3], x.t[4], x.t[5], 1, rows, C);
      };
    } else {
      c.t = list(in.zeros(rows * C), in.zeros(C),       in.zeros(C),
             in.uniform(rows * C), in.uniform(rows * C), in.uniform(C),
             in.uniform(rows),   in.uniform(rows, 0.5, 2.0));
      c.run = [&be, rows, C](KernelCall& x) {
        be.layernorm_backward(x.t[0], x.t[1], x.t[2], x.t[3], x.t[4], x.t[5], x.t[6], x.t[7], 1,
                              rows, C);
      };
    }
  } else if (name == "rmsnorm_fwd" || name == "rmsnorm_bwd") {
    need(2);
    const int64_t rows = d[0], C = d[1];
    if (name == "rmsnorm_fwd") {
      c.fresh = {0, 1};
      c.t = list(in.zeros(rows * C), in.zeros(rows), in.uniform(rows * C), in.uniform(C));
      c.run = [&be, rows, C](KernelCall& x) {
        be.rmsnorm_forward(x.t[0], x.t[1], x.t[2], x.t[3], 1, rows, C);
      };
    } else {
      c.t = list(in.zeros(rows * C), in.zeros(C), in.uniform(rows * C), in.uniform(rows * C),
                 in.uniform(C), in.uniform(rows, 0.5, 2.0));
      c.run = [&be, rows, C](KernelCall& x) {
        be.rmsnorm_backward(x.t[0], x.t[1], x.t[2], x.t[3], x.t[4], x.t[5], 1, rows, C);
      };
    }
  } else if (name == "swiglu_fwd" || name == "swiglu_bwd") {
    need(1);
    const int64_t n = d[0];  // output elements; the input holds [gate | up]
    if (name == "swiglu_fwd") {
      c.fresh = {0};
      c.t = list(in.zeros(n), in.uniform(2 * n, -3.0, 3.0));
      c.run = [&be, n](KernelCall& x) { be.swiglu_forward(x.t[0], x.t[1], 1, n); };
    } else {
      c.fresh = {0};
      c.t = list(in.zeros(2 * n), in.uniform(n), in.uniform(2 * n, -3.0, 3.0));
      c.run = [&be, n](KernelCall& x) { be.swiglu_backward(x.t[0], x.t[1], x.t[2], 1, n); };
    }
  } else if (name == "squared_relu_fwd" || name == "squared_relu_bwd") {
    need(1);
    const int64_t n = d[0];
    if (name == "squared_relu_fwd") {
      c.fresh = {0};
      c.t = list(in.zeros(n), in.uniform(n, -3.0, 3.0));
      c.run = [&be](KernelCall& x) { be.squared_relu_forward(x.t[0], x.t[1]); };
    } else {
      c.fresh = {0};
      c.t = list(in.zeros(n), in.uniform(n, -3.0, 3.0), in.uniform(n));
      c.run = [&be](KernelCall& x) { be.squared_relu_backward(x.t[0], x.t[1], x.t[2]); };
    }
  } else if (name == "rope_fwd" || name == "rope_bwd") {
    need(1);  // the q and k heads of the local tokens
    const int64_t n = d[0], hd = sc.model.head_dim(), rows = n / hd;
    if (rows * hd != n) unsupported(key);
    const bool fwd = name == "rope_fwd";
    c.fresh = {0};
    c.t = list(in.zeros(n), in.uniform(n));
    const double base = sc.model.rotary_base;
    c.run = [&be, rows, hd, fwd, base](KernelCall& x) {
      const CpSequence one(1, 1, 0);
      if (fwd) {
        be.rope_forward(x.t[0], x.t[1], 1, 1, rows, hd, one, base);
      } else {
        be.rope_backward(x.t[0], x.t[1], 1, 1, rows, hd, one, base);
      }
    };
  } else if (name == "dropout_add_fwd" || name == "dropout_add_bwd") {
    need(1);
    const int64_t n = d[0], rows = n / h;
    if (rows * h != n) unsupported(key);
    const cpu::DropoutParams params{p_hidden, 1, 1};
    const cpu::HiddenBlock block{1, rows, h, 0, 0, rows};
    if (name == "dropout_add_fwd") {
      c.fresh = {0};
      c.t = list(in.zeros(n), in.uniform(n), in.uniform(h), in.uniform(n));
      c.run = [&be, params, block](KernelCall& x) {
        be.bias_dropout_add_forward(x.t[0], x.t[1], x.t[2], x.t[3], params, block);
      };
    } else {
      c.fresh = {0, 2};
      c.t = list(in.zeros(n), in.zeros(h), in.zeros(n), in.uniform(n));
      c.run = [&be, params, block](KernelCall& x) {
        be.bias_dropout_add_backward(x.t[0], x.t[1], x.t[2], x.t[3], params, block);
      };
    }
  } else if (name == "dropout_fwd") {  // the embedding's positions + dropout (Role kEmbeddingDropout)
    need(1);
    const int64_t n = d[0], rows = n / h, tl = rows / b;
    if (tl * b * h != n) unsupported(key);
    const cpu::DropoutParams params{p_hidden, 1, 0};
    const cpu::HiddenBlock block{b, tl, h, 0, 0, tl};
    c.fresh = {2};
    c.t = list(in.uniform(n), in.uniform(tl * h), in.zeros(n));
    c.run = [&be, params, block, b, tl, h](KernelCall& x) {
      be.position_embedding_forward(x.t[0], x.t[1], b, tl, h, 0);
      be.bias_dropout_add_forward(x.t[2], x.t[0], {}, {}, params, block);
    };
  } else if (name == "gelu_fwd" || name == "gelu_bwd") {
    need(1);
    const int64_t n = d[0];
    if (name == "gelu_fwd") {
      c.fresh = {0};
      c.t = list(in.zeros(n), in.uniform(n, -3.0, 3.0));
      c.run = [&be](KernelCall& x) { be.gelu_forward(x.t[0], x.t[1]); };
    } else {
      c.fresh = {0};
      c.t = list(in.zeros(n), in.uniform(n, -3.0, 3.0), in.uniform(n));
      c.run = [&be](KernelCall& x) { be.gelu_backward(x.t[0], x.t[1], x.t[2]); };
    }
  } else if (name == "embedding_fwd" || name == "embedding_bwd") {
    need(3);
    const int64_t tokens = d[0], C = d[1], vl = d[2], s = tokens / b;
    if (s * b != tokens) unsupported(key);
    c.ids.push_back(in.ids(tokens, vl * t));
    if (name == "embedding_fwd") {
      c.fresh = {0};
      c.t = list(in.zeros(tokens * C), in.uniform(vl * C));
      c.run = [&be, b, s, C, vl, t](KernelCall& x) {
        be.vocab_parallel_embedding_forward(x.t[0], x.ids[0], x.t[1], b, s, C, 0, vl, vl * t);
      };
    } else {  // dropout backward, positions, words (GptModel::embedding_backward)
      const cpu::DropoutParams params{p_hidden, 1, 0};
      const cpu::HiddenBlock block{b, s, C, 0, 0, s};
      c.fresh = {0};
      c.t = list(in.zeros(tokens * C), in.uniform(tokens * C), in.zeros(s * C), in.zeros(vl * C));
      c.run = [&be, b, s, C, vl, t, params, block](KernelCall& x) {
        be.bias_dropout_add_backward(x.t[0], {}, {}, x.t[1], params, block);
        be.position_embedding_backward(x.t[2], x.t[0], b, s, C, 0);
        be.vocab_parallel_embedding_backward(x.t[3], x.t[0], x.ids[0], b, s, C, 0, vl, vl * t);
      };
    }
  } else if (name == "cross_entropy_max" || name == "cross_entropy_fwd" ||
             name == "cross_entropy_bwd") {
    need(2);
    const int64_t rows = d[0], vl = d[1];
    c.ids.push_back(in.ids(rows, vl * t));
    if (name == "cross_entropy_max") {
      c.fresh = {0};
      c.t = list(in.zeros(rows), in.uniform(rows * vl));
      c.run = [&be, rows, vl](KernelCall& x) {
        be.vocab_parallel_logits_max(x.t[0], x.t[1], 1, rows, vl);
      };
    } else if (name == "cross_entropy_fwd") {
      c.fresh = {0, 1};
      c.t = list(in.zeros(rows), in.zeros(rows), in.uniform(rows * vl), in.uniform(rows, 1.0, 1.0001));
      c.run = [&be, rows, vl, t](KernelCall& x) {
        be.vocab_parallel_sum_exp(x.t[0], x.t[1], x.t[2], x.t[3], x.ids[0], 1, rows, 0, vl,
                                  vl * t);
      };
    } else {  // loss, its gradient weights, the logits' gradient (GptModel::head_backward)
      c.fresh = {0, 1, 6};
      c.t = list(in.zeros(rows * vl),        in.zeros(rows),
             in.uniform(rows * vl),      in.uniform(rows, 1.0, 1.0001),
             in.uniform(rows, 0.3 * static_cast<double>(vl), 0.4 * static_cast<double>(vl)),
             in.uniform(rows),           in.zeros(rows));
      c.run = [&be, rows, vl, t](KernelCall& x) {
        be.vocab_parallel_cross_entropy_loss(x.t[6], x.t[4], x.t[3], x.t[5], 1, rows);
        be.fill_2d(x.t[1], rows, rows, 1, 1.0f / static_cast<float>(rows));
        be.vocab_parallel_cross_entropy_backward(x.t[0], x.t[1], x.t[2], x.t[3], x.t[4], x.ids[0],
                                                 1, rows, 0, vl, vl * t);
      };
    }
  } else if (name.rfind("moe_", 0) == 0 || name.rfind("grouped_gemm_", 0) == 0) {
    // {groups, m, n, k}; {tokens, E} (aux loss); {tokens, E, k} or {rows, tokens, h} (others).
    const bool grouped = name.rfind("grouped_gemm_", 0) == 0;
    need(grouped ? 4 : name.rfind("moe_aux_loss", 0) == 0 ? 2 : 3);
    if (grouped && key.dtype == Precision::kBf16) return make_bf16_gemm_call(be, key, false, in);
    if (grouped && key.dtype == Precision::kFp8) return make_fp8_gemm_call(be, sc, key, in);
    return make_moe_call(be, sc, key, in);
  } else if (name == "grad_norm") {
    need(1);
    c.t = list(in.uniform(d[0]));
    c.run = [&be](KernelCall& x) { (void)be.sum_of_squares(x.t[0]); };
  } else if (name == "zero_grad_buffer") {  // ShardOptimizer::zero_grad_buffer
    need(1);
    const int64_t n = d[0];
    c.t = list(in.uniform(n));  // the shard's gradients: persistent, not allocated per run
    c.run = [&be, n](KernelCall& x) { be.fill_2d(x.t[0], n, n, 1, 0.0f); };
  } else if (name == "grad_clip_scale") {  // ShardOptimizer::clip
    need(1);
    c.t = list(in.uniform(d[0]));
    // Coefficients 0.5 and 2 in turn: the values neither drift to denormals nor overflow over
    // any number of runs.
    c.run = [&be, k = 0](KernelCall& x) mutable { be.scale_in_place(x.t[0], (k++ % 2) ? 2.0 : 0.5); };
  } else if (name == "adamw_step") {
    need(1);
    const int64_t n = d[0];
    const cpu::AdamWParams hyper{sc.training.adam_beta1, sc.training.adam_beta2,
                                 sc.training.adam_eps, sc.training.weight_decay};
    c.t = list(in.uniform(n), in.uniform(n), in.uniform(n, -0.01, 0.01), in.uniform(n, 0.0, 1e-4));
    c.run = [&be, hyper](KernelCall& x) {
      be.adamw_step(x.t[0], x.t[1], x.t[2], x.t[3], hyper, 1e-4, 10);
    };
  } else {
    unsupported(key);
  }
  return c;
}

}  // namespace

void check_runs_dtype(const Backend& be, const Scenario& s, const KernelKey& key) {
  const Precision p = key.dtype;
  if (p == Precision::kFp32 || p == Precision::kTf32 || p == Precision::kFp32Bf16) return;
  const bool gemm = is_gemm(key.name);
  const bool per_tensor = s.training.fp8_recipe == Fp8Recipe::kDelayed ||
                          s.training.fp8_recipe == Fp8Recipe::kTensorwise;
  if (gemm && p == Precision::kBf16 && be.has_bf16_arithmetic()) return;
  if (gemm && p == Precision::kFp8 && be.has_fp8_arithmetic() && per_tensor) return;
  std::string why;
  if (gemm && p == Precision::kBf16) {
    why = "the " + be.name() + " backend emulates bf16 (fp32 GEMMs of rounded operands), so its "
          "time is not a bf16 cost; profile bf16 GEMMs with --backend cuda";
  } else if (gemm && p == Precision::kFp8 && !per_tensor) {
    why = std::string("training.fp8_recipe ") + to_string(s.training.fp8_recipe) +
          " scales blocks, not tensors; the executor's FP8 GEMMs are per-tensor scaled (recipes "
          "delayed, tensorwise)";
  } else if (gemm && p == Precision::kFp8) {
    why = "the " + be.name() + " backend has no FP8 tensor cores (it would emulate them); "
          "profile FP8 GEMMs with --backend cuda on compute capability 8.9 or later";
  } else {
    why = "the executor runs " + std::string(to_string(p)) +
          " kernels only as GEMMs so far (gemm_* and grouped_gemm_* in bf16 and fp8; --backend "
          "cuda); select those with --kernels, e.g. --kernels "
          "'^(grouped_)?gemm_(fwd|dgrad|wgrad)\\[.*\\] (bf16|fp8) '";
  }
  throw UnsupportedError("profile: kernel " + key.to_string() + ": " + why);
}

int64_t largest_collective_bytes(const Scenario& s) {
  const std::vector<int64_t> ranks = layout_of(s).first_rank_of_each_stage();
  const Program prog = build_program(s, ranks);
  int64_t largest = 0;
  for (int64_t r : ranks) {
    for (const Op& op : prog.ranks.at(r).ops) {
      if (op.kind == OpKind::kCollective) largest = std::max(largest, op.bytes);
    }
  }
  return largest;
}

std::vector<ProfileTarget> profile_targets(const Scenario& s) {
  const std::vector<int64_t> ranks = layout_of(s).first_rank_of_each_stage();
  const Program prog = build_program(s, ranks);
  std::vector<ProfileTarget> out;
  std::unordered_map<KernelKey, size_t, KernelKeyHash> index;
  for (int64_t pp = 0; pp < s.parallel.pipeline_model_parallel_size; ++pp) {
    for (const Op& op : prog.ranks.at(ranks[static_cast<size_t>(pp)]).ops) {
      for (size_t i = 0; i < op.kernels.size(); ++i) {
        const Kernel& k = prog.kernels[op.kernels[i]];
        const auto [it, fresh] = index.emplace(k.key, out.size());
        if (fresh) out.push_back({k, op.kernel_roles[i], {}});
        std::vector<int64_t>& stages = out[it->second].stages;
        if (stages.empty() || stages.back() != pp) stages.push_back(pp);
      }
    }
  }
  return out;
}

int64_t rotation_bytes(const Scenario& s, const ProfileTarget& target, int64_t llc_bytes) {
  double held = 0;
  for (int64_t pp : target.stages) held = std::max(held, stage_memory(s, pp).total_bytes());
  if (target.stages.empty()) {
    for (const StageMemory& m : memory_per_stage(s)) held = std::max(held, m.total_bytes());
  }
  return static_cast<int64_t>(std::min(2.0 * static_cast<double>(llc_bytes), held));
}

KernelMeasurement profile_kernel(Backend& backend, const Scenario& s, const ProfileTarget& target,
                                 const ProfileOptions& options) {
  if (options.warmup < 0 || options.repeats < 1 || options.rotate_bytes < 0) {
    throw InvalidArgument("profile: --warmup must be >= 0 and --repeats >= 1 (got " +
                          std::to_string(options.warmup) + ", " + std::to_string(options.repeats) +
                          ")");
  }
  if (!(options.min_time_s >= 0) || !std::isfinite(options.min_time_s)) {
    throw InvalidArgument("profile: --min-time must be a finite number of seconds >= 0 (got " +
                          std::to_string(options.min_time_s) + ")");
  }
  const int64_t rotate = options.rotate_bytes > 0
                             ? options.rotate_bytes
                             : rotation_bytes(s, target, backend.cache_bytes());
  // The cache holds the blocks of the kernels timed before; full of their shapes, it would free
  // this kernel's outputs instead of handing them back, and every timed run would pay their
  // page faults (38 ms of a 4 ms cross-entropy backward), which a live run never does.
  backend.empty_cache();
  // The arithmetic train uses for this scenario's matrix products (the kernel key's dtype says
  // it: tf32 or bf16 for fp32 training under float32_matmul_precision high or medium).
  backend.set_float32_matmul_precision(s.training.float32_matmul_precision);
  ProfileInputs in(backend, options.seed);
  std::vector<KernelCall> sets;
  int64_t bytes = 0;
  // At least two sets, so consecutive runs never share inputs; at most 4096.
  while ((bytes <= rotate || sets.size() < 2) && sets.size() < 4096) {
    sets.push_back(make_call(backend, s, target, in));
    bytes += sets.back().bytes();
  }
  size_t next = 0;
  auto run_once = [&] {
    KernelCall& c = sets[next];
    next = (next + 1) % sets.size();
    for (size_t i : c.fresh) {  // freed first, so the backend's block cache hands it back
      const auto n = static_cast<int64_t>(c.t[i].size());
      c.t[i].reset();
      c.t[i] = Tensor(backend, n);
    }
    for (size_t i : c.fresh_h) {
      const auto n = static_cast<int64_t>(c.h[i].size());
      c.h[i].reset();
      c.h[i] = Bf16Tensor(backend, n);
    }
    c.run(c);
  };
  auto timed_run = [&] { return backend.time_us(run_once); };
  for (int i = 0; i < options.warmup; ++i) timed_run();
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(options.repeats));
  double timed_us = 0;
  for (int i = 0; i < ProfileOptions::kMaxRepeats &&
                  (i < options.repeats || timed_us < options.min_time_s * 1e6);
       ++i) {
    samples.push_back(timed_run());
    timed_us += samples.back();
  }
  return measurement_from_samples(target.kernel, std::move(samples));
}

std::vector<CollectiveTiming> profile_collectives(Communicator& comm,
                                                  const std::vector<int64_t>& sizes, int warmup,
                                                  int repeats) {
  const int64_t n = comm.world_size(), me = comm.rank();
  if (n < 2) throw InvalidArgument("profile --collectives: needs >= 2 ranks (mpirun -np N)");
  if (warmup < 0 || repeats < 1) {
    throw InvalidArgument("profile --collectives: --warmup must be >= 0 and --repeats >= 1");
  }
  auto barrier = [&comm] {
    double x = 0;
    comm.all_reduce(GroupKind::kWorld, std::span<double>(&x, 1), ReduceOp::kSum)->wait();
  };
  std::vector<CollectiveTiming> rows;
  for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "send_recv"}) {
    const std::string name = op;
    for (int64_t bytes : sizes) {
      if (bytes < 4 * n || bytes % (4 * n) != 0) {
        throw InvalidArgument("profile --collectives: " + std::to_string(bytes) +
                              " bytes is not a multiple of 4 x " + std::to_string(n) + " ranks");
      }
      const int64_t count = bytes / 4, piece = count / n;
      std::vector<float> a(static_cast<size_t>(count)), b(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) {
        a[static_cast<size_t>(i)] = static_cast<float>(
            counter_uniform(7, static_cast<uint64_t>(me), static_cast<uint64_t>(i)));
      }
      auto run = [&] {
        if (name == "all_reduce") {
          comm.all_reduce(GroupKind::kWorld, std::span<float>(a), ReduceOp::kSum)->wait();
        } else if (name == "all_gather") {
          comm.all_gather(GroupKind::kWorld,
                          std::span<const float>(a.data(), static_cast<size_t>(piece)),
                          std::span<float>(b.data(), static_cast<size_t>(piece * n)))
              ->wait();
        } else if (name == "reduce_scatter") {
          comm.reduce_scatter(GroupKind::kWorld,
                              std::span<const float>(a.data(), static_cast<size_t>(piece * n)),
                              std::span<float>(b.data(), static_cast<size_t>(piece)),
                              ReduceOp::kSum)
              ->wait();
        } else {
          RequestPtr r = comm.recv((me + n - 1) % n, 0, std::span<float>(b));
          RequestPtr s = comm.send((me + 1) % n, 0, std::span<const float>(a));
          s->wait();
          r->wait();
        }
      };
      for (int i = 0; i < warmup; ++i) run();
      barrier();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < repeats; ++i) run();
      double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
          repeats;
      comm.all_reduce(GroupKind::kWorld, std::span<double>(&us, 1), ReduceOp::kMax)->wait();
      rows.push_back({name, bytes, count, n, us});
    }
  }
  return rows;
}

void merge_measurements(CostDatabase& db, const std::vector<KernelMeasurement>& rows) {
  for (const KernelMeasurement& m : rows) {
    db.erase(m.key);
    db.add(m);
  }
}

void merge_measurements(CostDatabase& db, const std::vector<CollectiveMeasurement>& rows) {
  for (const CollectiveMeasurement& c : rows) {
    db.erase(c);
    db.add(c);
  }
}

CostDatabase open_database_for(const std::filesystem::path& file, const CostDbDevice& device,
                               const CostDbVersions& versions) {
  if (!std::filesystem::exists(file)) return CostDatabase(device, versions);
  CostDatabase db = CostDatabase::load(file);
  if (!db.device().same_device(device)) {
    auto describe = [](const CostDbDevice& d) {
      return "\"" + d.name + "\" (" + d.kind.value_or("gpu") + ", " + std::to_string(d.sm_count) +
             " cores/SMs" + (d.threads ? ", " + std::to_string(*d.threads) + " threads" : "") +
             ")";
    };
    throw CostDatabaseError(file.string() + ": measured on " + describe(db.device()) +
                            ", not on this device " + describe(device) +
                            "; refusing to merge (write to another --out file)");
  }
  return db;
}

}  // namespace traintwin::exec
