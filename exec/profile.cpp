// Profile mode of the executor; see profile.hpp.
#include "exec/profile.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/rank_layout.hpp"
#include "exec/counter_rng.hpp"
#include "exec/cpu/host_device.hpp"
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
  std::function<void(KernelCall&)> run;
  int64_t bytes() const {
    int64_t b = 0;
    for (const Tensor& x : t) b += static_cast<int64_t>(x.size() * sizeof(float));
    for (const auto& x : ids) b += static_cast<int64_t>(x.size() * sizeof(int32_t));
    for (const auto& x : h) b += static_cast<int64_t>(x.size() * sizeof(uint16_t));
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

/// The bf16 linear layer of `key` ({m, n, k}: rows, out_channels, channels) on fresh inputs.
KernelCall make_bf16_gemm_call(Backend& be, const KernelKey& key, bool bias, ProfileInputs& in) {
  const int64_t m = key.shape[0], n = key.shape[1], k = key.shape[2];
  KernelCall c;
  if (key.name == "gemm_fwd") {
    c.h.push_back(in.zeros_bf16(m * n));
    c.h.push_back(in.uniform_bf16(m * k));
    c.h.push_back(in.uniform_bf16(n * k));
    if (bias) c.h.push_back(in.uniform_bf16(n));
    c.fresh_h = {0};
    c.run = [&be, m, n, k, bias](KernelCall& x) {
      be.matmul_forward_bf16(x.h[0], x.h[1], x.h[2], bias ? CBSpan(x.h[3]) : CBSpan(), 1, m, k,
                             n);
    };
  } else if (key.name == "gemm_dgrad") {
    c.h.push_back(in.zeros_bf16(m * k));
    c.h.push_back(in.uniform_bf16(m * n));
    c.h.push_back(in.uniform_bf16(n * k));
    c.fresh_h = {0};
    c.run = [&be, m, n, k](KernelCall& x) {
      be.matmul_backward_data_bf16(x.h[0], x.h[1], x.h[2], 1, m, k, n);
    };
  } else {  // wgrad: the fp32 main_grad (and bias gradient) persist, as the shard's buffers
    c.t = list(in.zeros(n * k), in.zeros(bias ? n : 0));
    c.h.push_back(in.uniform_bf16(m * n));
    c.h.push_back(in.uniform_bf16(m * k));
    c.run = [&be, m, n, k](KernelCall& x) {
      be.matmul_backward_weight_bf16(x.t[0], x.t[1], x.h[0], x.h[1], 1, m, k, n);
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
  check_runs_dtype(be, key);
  if (is_linear_gemm(name)) {
    need(3);
    const int64_t m = d[0], n = d[1], k = d[2];
    const bool bias = has_bias(target.role);
    if (key.dtype == Precision::kBf16) return make_bf16_gemm_call(be, key, bias, in);
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

void check_runs_dtype(const Backend& be, const KernelKey& key) {
  const Precision p = key.dtype;
  if (p == Precision::kFp32 || p == Precision::kTf32 || p == Precision::kFp32Bf16) return;
  if (p == Precision::kBf16 && is_linear_gemm(key.name) && be.has_bf16_arithmetic()) return;
  std::string why;
  if (p == Precision::kBf16 && is_linear_gemm(key.name)) {
    why = "the " + be.name() + " backend emulates bf16 (fp32 GEMMs of rounded operands), so its "
          "time is not a bf16 cost; profile bf16 GEMMs with --backend cuda";
  } else {
    why = "the executor runs " + std::string(to_string(p)) +
          " kernels only for the linear-layer GEMMs in bf16 so far (gemm_fwd, gemm_dgrad, "
          "gemm_wgrad; --backend cuda); select those with --kernels, e.g. --kernels "
          "'^gemm_(fwd|dgrad|wgrad)\\[.*\\] bf16 '";
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
