// The kernel calls `traintwin profile` times (exec/profile_calls.hpp): for each kernel of the
// catalogue the executor runs, its inputs on fresh random tensors (exec/profile_inputs.hpp) and
// the Backend calls exec/gpt_model*.cpp make for its Role. Next in the flow: exec/profile.cpp
// times them.
#include "exec/profile_calls.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "core/kernel_catalogue.hpp"
#include "exec/counter_rng.hpp"
#include "exec/cpu/host_device.hpp"
#include "exec/cpu/moe_router.hpp"
#include "exec/cpu/rope.hpp"
#include "exec/linear.hpp"
#include "exec/qkv_rows.hpp"

namespace traintwin::exec {
namespace {

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

/// A permutation kernel's unfused name: "moe_permute_fused_fwd" -> "moe_permute_fwd".
std::string unfused_name(std::string_view name) {
  std::string s(name);
  const size_t at = s.find("_fused");
  if (at != std::string::npos) s.erase(at, 6);
  return s;
}

/// The token permutation kernels, unfused (moe_permute_fwd, ...) or fused (moe_permute_fused_fwd,
/// ..., model.moe_permute_fusion): whatever unfused_name() maps onto the four unfused ones.
bool is_moe_permutation(std::string_view name) {
  const std::string base = unfused_name(name);
  for (const char* n : {"moe_permute_fwd", "moe_permute_bwd", "moe_unpermute_fwd",
                        "moe_unpermute_bwd"}) {
    if (base == n) return true;
  }
  return false;
}

bool is_linear_gemm(const std::string& name) {
  return name == "gemm_fwd" || name == "gemm_dgrad" || name == "gemm_wgrad";
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
  } else if (is_moe_permutation(name)) {
    // The fused variants (moe_permute_fusion) move the same rows: both names time this
    // backend's one permutation kernel (exec/cpu/moe_permute.hpp, exec/cuda/moe_permute.hpp).
    const std::string base = unfused_name(name);
    const int64_t rows = d[0], n = d[1], h = d[2], e = model.num_moe_experts;
    auto perm = std::make_shared<const cpu::MoePermutation>(balanced_permutation(rows, n, e));
    if (base == "moe_permute_fwd") {
      c.fresh = {0};
      c.t = list(in.zeros(rows * h), in.uniform(n * h));
      c.run = [&be, perm, n, h](KernelCall& x) { be.moe_permute_forward(x.t[0], x.t[1], *perm, n, h); };
    } else if (base == "moe_permute_bwd") {
      c.fresh = {0};
      c.t = list(in.zeros(n * h), in.uniform(rows * h));
      c.run = [&be, perm, n, h](KernelCall& x) { be.moe_permute_backward(x.t[0], x.t[1], *perm, n, h); };
    } else if (base == "moe_unpermute_fwd") {
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
  } else if (name == "moe_chunk_cat") {
    // {rows, h}: Megatron's sort_chunks_by_idxs / SequentialMLP's torch.cat, a copy of the rows
    // (the executor's layout needs none: exec/gpt_model_moe.cpp); timed as the Backend's copy.
    const int64_t rows = d[0], h = d[1];
    c.t = list(in.zeros(rows * h), in.uniform(rows * h));
    c.run = [&be](KernelCall& x) { be.copy(x.t[0], x.t[1]); };
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

/// A bf16 linear-layer GEMM as `train` runs it (exec/linear.hpp LinearLayers): the fp32
/// activation rounded to bf16 into a new buffer, the bf16 GEMM with fp32 accumulation against
/// the weight's bf16 copy (refreshed once per iteration, so primed here, outside the timing), the
/// bf16 result widened into (dgrad: added to) the model's fp32 tensor. The wgrad reuses the
/// output gradient its dgrad rounded (1F1B places a layer's W right after its B), so it rounds
/// only the activation.
KernelCall make_linear_layer_bf16_call(Backend& be, const KernelKey& key, bool bias,
                                       ProfileInputs& in) {
  const GemmShape shape = gemm_shape(key);
  const int64_t m = shape.m, n = shape.n, k = shape.k;
  if (shape.g != 1) unsupported(key);
  const std::string_view v = variant(key.name);
  auto layers = std::make_shared<LinearLayers>(be, Precision::kBf16);
  KernelCall c;
  if (v == "fwd") {
    c.fresh = {0};
    c.t = list(in.zeros(m * n), in.uniform(m * k), in.uniform(n * k));
    if (bias) c.t.push_back(in.uniform(n));
    c.run = [layers, m, n, k, bias](KernelCall& x) {
      layers->forward(x.t[0], x.t[1], x.t[2], bias ? CFSpan(x.t[3]) : CFSpan(), 1, m, k, n);
    };
    c.run(c);  // the weight's bf16 copy
  } else if (v == "dgrad") {
    c.fresh = {0};
    c.t = list(in.zeros(m * k), in.uniform(m * n), in.uniform(n * k));
    c.run = [layers, m, n, k](KernelCall& x) {
      layers->backward_data(x.t[0], x.t[1], x.t[2], 1, m, k, n);
    };
    c.run(c);
  } else {  // the fp32 main_grad (and bias gradient) persist, as the shard's buffers
    c.t = list(in.zeros(n * k), in.zeros(bias ? n : 0), in.uniform(m * k));
    c.h.push_back(in.uniform_bf16(m * n));  // the output gradient its dgrad rounded
    c.run = [&be, m, n, k](KernelCall& x) {
      Bf16Tensor xb(be, x.t[2].size(), kUninitialized);
      be.convert_to_bf16(xb, CFSpan(x.t[2]));
      be.matmul_backward_weight_bf16(FSpan(x.t[0]), FSpan(x.t[1]), CBSpan(x.h[0]), CBSpan(xb), 1,
                                     m, k, n);
    };
  }
  return c;
}

}  // namespace

bool is_gemm(const std::string& name) {
  const KernelDescriptor* d = find_kernel(name);
  return d != nullptr && d->cost_class == KernelClass::kGemm;
}

KernelCall make_kernel_call(Backend& be, const Scenario& sc, const ProfileTarget& target,
                            ProfileInputs& in, bool bf16_activations) {
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
    if (key.dtype == Precision::kBf16) {
      return bf16_activations ? make_bf16_gemm_call(be, key, bias, in)
                              : make_linear_layer_bf16_call(be, key, bias, in);
    }
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
             name == "flash_attention_fwd" || name == "flash_attention_bwd" ||
             name == "fused_attention_fwd" || name == "fused_attention_bwd") {
    need(4);
    const bool fwd =
        name == "attention_fwd" || name == "flash_attention_fwd" || name == "fused_attention_fwd";
    const bool fused = name == "fused_attention_fwd" || name == "fused_attention_bwd";
    const bool flash = name == "flash_attention_fwd" || name == "flash_attention_bwd";
    const int64_t bb = d[0], heads = d[1], s = d[2], C = d[1] * d[3];
    const int64_t a = sc.model.num_attention_heads, g = sc.model.query_groups();
    const int64_t hd = d[3], kv = heads * g / a, width = (heads + 2 * kv) * hd;
    if (kv * a != heads * g) unsupported(key);
    auto drop = std::make_shared<cpu::AttentionProbabilityDropout>(cpu::AttentionProbabilityDropout{
        cpu::DropoutParams{p_att, 1, 3}, cpu::AttentionBlock{bb, heads, s, 0, 0, heads}});
    const cpu::AttentionProbabilityDropout* dp = p_att > 0 ? drop.get() : nullptr;
    if (fused) {
      // GptModel's fused attention op (exec/gpt_model_attention.cpp, CP = 1): one Backend call
      // on the QKV rows each way; out, lse and the rows' gradient are allocated at the op.
      if (sc.parallel.context_parallel_size != 1) unsupported(key);
      const cpu::BlockAttentionShape shape{bb, s, s, heads, kv, hd};
      const int64_t rows = bb * s;
      if (fwd) {  // out, lse, the QKV rows
        c.fresh = {0, 1};
        c.t = list(in.zeros(rows * C), in.zeros(bb * heads * s), in.uniform(rows * width));
        c.run = [&be, shape, drop, dp](KernelCall& x) {
          be.fused_attention_forward(x.t[0], x.t[1], x.t[2], shape, dp);
        };
      } else {  // d_qkv, d_attn, QKV rows, attn, lse
        c.fresh = {0};
        c.t = list(in.zeros(rows * width), in.uniform(rows * C), in.uniform(rows * width),
                   in.uniform(rows * C), in.uniform(bb * heads * s, 1.0, 3.0));
        c.run = [&be, shape, drop, dp](KernelCall& x) {
          be.fused_attention_backward(x.t[0], x.t[1], x.t[2], x.t[3], x.t[4], shape, dp);
        };
      }
    } else if (flash && sc.parallel.context_parallel_size == 1) {
      // GptModel's flash attention op (exec/gpt_model_attention.cpp): the queries and the K/V
      // block packed from the QKV rows (zeroed buffers, two 2-D copies), the blockwise kernel;
      // the backward packs them again, and scatters dq and dK/dV into a zeroed QKV-rows gradient.
      const cpu::BlockAttentionShape shape{bb, s, s, heads, kv, hd};
      const CpSequence seq(s, 1, 0);
      const int64_t rows = bb * s, qw = heads * hd, kvw = 2 * kv * hd;
      if (fwd) {  // out, lse, q, kv (allocated at the op), the QKV rows
        c.fresh = {0, 1, 2, 3};
        c.t = list(in.zeros(rows * C), in.zeros(bb * heads * s), in.zeros(rows * qw),
                   in.zeros(rows * kvw), in.uniform(rows * width));
        c.run = [&be, shape, seq, drop, dp, rows, qw, kvw](KernelCall& x) {
          pack_qkv_rows(be, x.t[2], x.t[3], x.t[4], rows, qw, kvw);
          be.block_attention_forward(x.t[0], x.t[1], x.t[2], x.t[3], seq, seq, shape, dp);
        };
      } else {  // dq, dkv, q, kv, d_qkv (allocated at the op), d_attn, QKV rows, attn, lse
        c.fresh = {0, 1, 2, 3, 4};
        c.t = list(in.zeros(rows * C), in.zeros(rows * kvw), in.zeros(rows * qw),
                   in.zeros(rows * kvw), in.zeros(rows * width), in.uniform(rows * C),
                   in.uniform(rows * width), in.uniform(rows * C),
                   in.uniform(bb * heads * s, 1.0, 3.0));
        c.run = [&be, shape, seq, drop, dp, rows, qw, kvw](KernelCall& x) {
          pack_qkv_rows(be, x.t[2], x.t[3], x.t[6], rows, qw, kvw);
          be.block_attention_backward(x.t[0], x.t[1], x.t[5], x.t[2], x.t[3], x.t[7], x.t[8], seq,
                                      seq, shape, dp);
          scatter_qkv_rows(be, x.t[4], x.t[0], x.t[1], rows, qw, kvw);
        };
      }
    } else if (flash || sc.parallel.context_parallel_size > 1) {
      // GptModel runs every block of ring attention (and flash attention) with the blockwise
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
    // {groups, m, n, k}; {tokens, E} (aux loss); {rows, h} (chunk cat); {tokens, E, k} or
    // {rows, tokens, h} (others).
    const bool grouped = name.rfind("grouped_gemm_", 0) == 0;
    need(grouped ? 4 : name.rfind("moe_aux_loss", 0) == 0 || name == "moe_chunk_cat" ? 2 : 3);
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
  } else if (name == "grad_accumulate") {  // GptModel::grad_accumulate: main_grad += param.grad
    need(1);
    const int64_t n = d[0];
    // The main gradients persist (the shard's buffer); param.grad is the backward's output.
    c.t = list(in.uniform(n), in.uniform(n, -1e-3, 1e-3));
    c.run = [&be](KernelCall& x) { be.add_in_place(x.t[0], x.t[1]); };
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

}  // namespace traintwin::exec
