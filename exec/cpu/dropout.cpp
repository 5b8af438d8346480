// Counter-based inverted dropout; see dropout.hpp.
#include "exec/cpu/dropout.hpp"

#include <string>

#include "core/checks.hpp"
#include "core/error.hpp"
#include "exec/counter_rng.hpp"
#include "exec/cpu/checks.hpp"

namespace traintwin::exec::cpu {
namespace {

constexpr const char* kLayer = "dropout";

void check_p(double p) {
  if (!(p >= 0.0 && p < 1.0)) {  // also rejects NaN
    throw InvalidArgument(std::string(kLayer) + ": p must be in [0, 1), got " + std::to_string(p));
  }
}

void require_non_negative(int64_t value, const char* name) {
  if (value < 0) {
    throw InvalidArgument(std::string(kLayer) + ": " + name + " must be >= 0, got " +
                          std::to_string(value));
  }
}

// Checks the block and returns its element count.
int64_t check_block(const HiddenBlock& k) {
  require_at_least_one(k.batch, "dropout batch");
  require_at_least_one(k.seq_local, "dropout seq_local");
  require_at_least_one(k.channels, "dropout channels");
  require_non_negative(k.first_sample, "first_sample");
  require_non_negative(k.seq_offset, "seq_offset");
  if (k.seq_total < k.seq_offset + k.seq_local) {
    throw InvalidArgument(
        std::string(kLayer) + ": seq_total " + std::to_string(k.seq_total) +
        " must be >= seq_offset + seq_local = " + std::to_string(k.seq_offset + k.seq_local));
  }
  return k.batch * k.seq_local * k.channels;
}

int64_t check_block(const AttentionBlock& k) {
  require_at_least_one(k.batch, "attention_dropout batch");
  require_at_least_one(k.heads, "attention_dropout heads");
  require_at_least_one(k.seq, "attention_dropout seq");
  require_non_negative(k.first_sample, "first_sample");
  require_non_negative(k.head_offset, "head_offset");
  if (k.heads_total < k.head_offset + k.heads) {
    throw InvalidArgument(
        std::string(kLayer) + ": heads_total " + std::to_string(k.heads_total) +
        " must be >= head_offset + heads = " + std::to_string(k.head_offset + k.heads));
  }
  return k.batch * k.heads * k.seq * k.seq;
}

// Calls fn(local_index, global_index) for every element of the block, in memory order.
// Hidden: rows (b, t) of C contiguous elements.
template <typename Fn>
void for_each_element(const HiddenBlock& k, Fn&& fn) {
  int64_t local = 0;
  for (int64_t b = 0; b < k.batch; ++b) {
    for (int64_t t = 0; t < k.seq_local; ++t) {
      const auto row = static_cast<uint64_t>(
          ((k.first_sample + b) * k.seq_total + k.seq_offset + t) * k.channels);
      for (int64_t c = 0; c < k.channels; ++c) fn(local++, row + static_cast<uint64_t>(c));
    }
  }
}

// Attention: rows (b, h, t) of T contiguous elements.
template <typename Fn>
void for_each_element(const AttentionBlock& k, Fn&& fn) {
  int64_t local = 0;
  for (int64_t b = 0; b < k.batch; ++b) {
    for (int64_t h = 0; h < k.heads; ++h) {
      for (int64_t t = 0; t < k.seq; ++t) {
        const uint64_t row = attention_dropout_index(k, b, h, t, 0);
        for (int64_t t2 = 0; t2 < k.seq; ++t2) fn(local++, row + static_cast<uint64_t>(t2));
      }
    }
  }
}

template <typename Scalar, typename Block>
void forward(std::span<Scalar> out, std::span<const Scalar> inp, const DropoutParams& params,
             const Block& block) {
  check_p(params.p);
  const int64_t n = check_block(block);
  require_size(kLayer, out.size(), n, "out");
  require_size(kLayer, inp.size(), n, "inp");
  if (params.p == 0.0) {
    for (int64_t i = 0; i < n; ++i) out[i] = inp[i];
    return;
  }
  const auto scale = static_cast<Scalar>(1.0 / (1.0 - params.p));
  for_each_element(block, [&](int64_t i, uint64_t global) {
    out[i] = dropout_keep(params, global) ? inp[i] * scale : Scalar{0};
  });
}

template <typename Scalar, typename Block>
void backward(std::span<Scalar> dinp, std::span<const Scalar> dout, const DropoutParams& params,
              const Block& block) {
  check_p(params.p);
  const int64_t n = check_block(block);
  require_size(kLayer, dinp.size(), n, "dinp");
  require_size(kLayer, dout.size(), n, "dout");
  if (params.p == 0.0) {
    for (int64_t i = 0; i < n; ++i) dinp[i] += dout[i];
    return;
  }
  const auto scale = static_cast<Scalar>(1.0 / (1.0 - params.p));
  for_each_element(block, [&](int64_t i, uint64_t global) {
    if (dropout_keep(params, global)) dinp[i] += dout[i] * scale;
  });
}

}  // namespace

template <typename Scalar>
void dropout_forward(std::span<Scalar> out, std::span<const Scalar> inp,
                     const DropoutParams& params, const HiddenBlock& block) {
  forward(out, inp, params, block);
}

template <typename Scalar>
void dropout_backward(std::span<Scalar> dinp, std::span<const Scalar> dout,
                      const DropoutParams& params, const HiddenBlock& block) {
  backward(dinp, dout, params, block);
}

template <typename Scalar>
void attention_dropout_forward(std::span<Scalar> out, std::span<const Scalar> inp,
                               const DropoutParams& params, const AttentionBlock& block) {
  forward(out, inp, params, block);
}

template <typename Scalar>
void attention_dropout_backward(std::span<Scalar> dinp, std::span<const Scalar> dout,
                                const DropoutParams& params, const AttentionBlock& block) {
  backward(dinp, dout, params, block);
}

template <typename Scalar>
void bias_dropout_add_forward(std::span<Scalar> out, std::span<const Scalar> inp,
                              std::span<const Scalar> bias, std::span<const Scalar> residual,
                              const DropoutParams& params, const HiddenBlock& block) {
  check_p(params.p);
  const int64_t n = check_block(block);
  require_size(kLayer, out.size(), n, "out");
  require_size(kLayer, inp.size(), n, "inp");
  if (!bias.empty()) require_size(kLayer, bias.size(), block.channels, "bias");
  if (!residual.empty()) require_size(kLayer, residual.size(), n, "residual");
  const int64_t c_count = block.channels;
  auto biased = [&](int64_t i) -> Scalar {
    return bias.empty() ? inp[i] : static_cast<Scalar>(inp[i] + bias[i % c_count]);
  };
  if (params.p == 0.0) {
    for (int64_t i = 0; i < n; ++i) out[i] = biased(i);
  } else {
    const auto scale = static_cast<Scalar>(1.0 / (1.0 - params.p));
    for_each_element(block, [&](int64_t i, uint64_t global) {
      out[i] = dropout_keep(params, global) ? biased(i) * scale : Scalar{0};
    });
  }
  if (!residual.empty()) {
    for (int64_t i = 0; i < n; ++i) out[i] += residual[i];
  }
}

template <typename Scalar>
void bias_dropout_add_backward(std::span<Scalar> dinp, std::span<Scalar> dbias,
                               std::span<Scalar> dresidual, std::span<const Scalar> dout,
                               const DropoutParams& params, const HiddenBlock& block) {
  check_p(params.p);
  const int64_t n = check_block(block);
  require_size(kLayer, dinp.size(), n, "dinp");
  require_size(kLayer, dout.size(), n, "dout");
  if (!dbias.empty()) require_size(kLayer, dbias.size(), block.channels, "dbias");
  if (!dresidual.empty()) require_size(kLayer, dresidual.size(), n, "dresidual");
  if (!dresidual.empty()) {
    for (int64_t i = 0; i < n; ++i) dresidual[i] += dout[i];
  }
  const int64_t c_count = block.channels;
  auto add = [&](int64_t i, Scalar g) {
    dinp[i] += g;
    if (!dbias.empty()) dbias[i % c_count] += g;
  };
  if (params.p == 0.0) {
    for (int64_t i = 0; i < n; ++i) add(i, dout[i]);
    return;
  }
  const auto scale = static_cast<Scalar>(1.0 / (1.0 - params.p));
  for_each_element(block, [&](int64_t i, uint64_t global) {
    add(i, dropout_keep(params, global) ? dout[i] * scale : Scalar{0});
  });
}

template void bias_dropout_add_forward<float>(std::span<float>, std::span<const float>,
                                              std::span<const float>, std::span<const float>,
                                              const DropoutParams&, const HiddenBlock&);
template void bias_dropout_add_forward<double>(std::span<double>, std::span<const double>,
                                               std::span<const double>, std::span<const double>,
                                               const DropoutParams&, const HiddenBlock&);
template void bias_dropout_add_backward<float>(std::span<float>, std::span<float>,
                                               std::span<float>, std::span<const float>,
                                               const DropoutParams&, const HiddenBlock&);
template void bias_dropout_add_backward<double>(std::span<double>, std::span<double>,
                                                std::span<double>, std::span<const double>,
                                                const DropoutParams&, const HiddenBlock&);
template void dropout_forward<float>(std::span<float>, std::span<const float>, const DropoutParams&,
                                     const HiddenBlock&);
template void dropout_forward<double>(std::span<double>, std::span<const double>,
                                      const DropoutParams&, const HiddenBlock&);
template void dropout_backward<float>(std::span<float>, std::span<const float>,
                                      const DropoutParams&, const HiddenBlock&);
template void dropout_backward<double>(std::span<double>, std::span<const double>,
                                       const DropoutParams&, const HiddenBlock&);
template void attention_dropout_forward<float>(std::span<float>, std::span<const float>,
                                               const DropoutParams&, const AttentionBlock&);
template void attention_dropout_forward<double>(std::span<double>, std::span<const double>,
                                                const DropoutParams&, const AttentionBlock&);
template void attention_dropout_backward<float>(std::span<float>, std::span<const float>,
                                                const DropoutParams&, const AttentionBlock&);
template void attention_dropout_backward<double>(std::span<double>, std::span<const double>,
                                                 const DropoutParams&, const AttentionBlock&);

}  // namespace traintwin::exec::cpu
