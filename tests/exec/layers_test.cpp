// CPU layers (exec/cpu/): every backward against central finite differences in float64, forward
// values on small hand-worked cases, the causal mask, the float instantiation against the double
// one, and InvalidArgument for bad sizes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/cpu/attention.hpp"
#include "exec/cpu/cross_entropy.hpp"
#include "exec/cpu/embedding.hpp"
#include "exec/cpu/gelu.hpp"
#include "exec/cpu/layernorm.hpp"
#include "exec/cpu/matmul.hpp"
#include "exec/cpu/residual.hpp"
#include "tests/exec/gradient_check.hpp"

namespace traintwin::exec::cpu {
namespace {

// Small shapes: B = 2, T = 4, C = 8, NH = 2, V = 11, OC = 5.
constexpr int64_t kB = 2;
constexpr int64_t kT = 4;
constexpr int64_t kC = 8;
constexpr int64_t kNH = 2;
constexpr int64_t kV = 11;
constexpr int64_t kOC = 5;

TEST(LayerGradTest, Matmul) {
  Vec inp = random_vec(kB * kT * kC, 1);
  Vec weight = random_vec(kOC * kC, 2);
  Vec bias = random_vec(kOC, 3);
  const Vec dout = random_vec(kB * kT * kOC, 4);
  Vec out(dout.size());
  auto loss = [&] {
    matmul_forward<double>(out, inp, weight, bias, kB, kT, kC, kOC);
    return dot(out, dout);
  };
  loss();
  Vec dinp(inp.size()), dweight(weight.size()), dbias(bias.size());
  matmul_backward<double>(dinp, dweight, dbias, dout, inp, weight, kB, kT, kC, kOC);
  expect_gradient(inp, dinp, loss, "dinp");
  expect_gradient(weight, dweight, loss, "dweight");
  expect_gradient(bias, dbias, loss, "dbias");
}

TEST(LayerGradTest, MatmulWithoutBias) {
  Vec inp = random_vec(kB * kT * kC, 5);
  Vec weight = random_vec(kV * kC, 6);
  const Vec dout = random_vec(kB * kT * kV, 7);
  Vec out(dout.size());
  auto loss = [&] {
    matmul_forward<double>(out, inp, weight, {}, kB, kT, kC, kV);
    return dot(out, dout);
  };
  loss();
  Vec dinp(inp.size()), dweight(weight.size());
  matmul_backward<double>(dinp, dweight, {}, dout, inp, weight, kB, kT, kC, kV);
  expect_gradient(inp, dinp, loss, "dinp");
  expect_gradient(weight, dweight, loss, "dweight");
}

TEST(LayerGradTest, LayerNorm) {
  Vec inp = random_vec(kB * kT * kC, 11, 2.0);
  Vec weight = random_vec(kC, 12);
  Vec bias = random_vec(kC, 13);
  const Vec dout = random_vec(kB * kT * kC, 14);
  Vec out(dout.size()), mean(kB * kT), rstd(kB * kT);
  auto loss = [&] {
    layernorm_forward<double>(out, mean, rstd, inp, weight, bias, kB, kT, kC);
    return dot(out, dout);
  };
  loss();
  Vec dinp(inp.size()), dweight(weight.size()), dbias(bias.size());
  layernorm_backward<double>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, kB, kT, kC);
  expect_gradient(inp, dinp, loss, "dinp");
  expect_gradient(weight, dweight, loss, "dweight");
  expect_gradient(bias, dbias, loss, "dbias");
}

TEST(LayerGradTest, Gelu) {
  Vec inp = random_vec(kB * kT * 4 * kC, 21, 3.0);
  const Vec dout = random_vec(kB * kT * 4 * kC, 22);
  Vec out(dout.size());
  auto loss = [&] {
    gelu_forward<double>(out, inp);
    return dot(out, dout);
  };
  Vec dinp(inp.size());
  gelu_backward<double>(dinp, inp, dout);
  expect_gradient(inp, dinp, loss, "dinp");
}

TEST(LayerGradTest, Residual) {
  Vec inp1 = random_vec(kB * kT * kC, 31);
  Vec inp2 = random_vec(kB * kT * kC, 32);
  const Vec dout = random_vec(kB * kT * kC, 33);
  Vec out(dout.size());
  auto loss = [&] {
    residual_forward<double>(out, inp1, inp2);
    return dot(out, dout);
  };
  Vec dinp1(inp1.size()), dinp2(inp2.size());
  residual_backward<double>(dinp1, dinp2, dout);
  expect_gradient(inp1, dinp1, loss, "dinp1");
  expect_gradient(inp2, dinp2, loss, "dinp2");
}

TEST(LayerGradTest, Embedding) {
  constexpr int64_t kMaxT = kT + 2;  // wpe may have more rows than T
  // Repeated tokens check that gradients of a row accumulate.
  std::vector<int32_t> tokens = random_tokens(kB * kT, 4, 41);
  Vec wte = random_vec(kV * kC, 42);
  Vec wpe = random_vec(kMaxT * kC, 43);
  const Vec dout = random_vec(kB * kT * kC, 44);
  Vec out(dout.size());
  auto loss = [&] {
    embedding_forward<double>(out, tokens, wte, wpe, kB, kT, kC, kV);
    return dot(out, dout);
  };
  Vec dwte(wte.size()), dwpe(wpe.size());
  embedding_backward<double>(dwte, dwpe, dout, tokens, kB, kT, kC, kV);
  expect_gradient(wte, dwte, loss, "dwte");
  expect_gradient(wpe, dwpe, loss, "dwpe");
}

TEST(LayerGradTest, Attention) {
  Vec inp = random_vec(kB * kT * 3 * kC, 51, 1.5);
  const Vec dout = random_vec(kB * kT * kC, 52);
  Vec out(dout.size()), preatt(kB * kNH * kT * kT), att(preatt.size());
  auto loss = [&] {
    attention_forward<double>(out, preatt, att, inp, kB, kT, kC, kNH);
    return dot(out, dout);
  };
  loss();
  Vec dinp(inp.size());
  attention_backward<double>(dinp, dout, inp, att, kB, kT, kC, kNH);
  expect_gradient(inp, dinp, loss, "dinp (q, k, v)");
}

// Attention-probability dropout (p 0.3): the same gradient check with the mask fixed by its
// seed; and heads computed as two TP shards (head_offset) equal all heads in one call.
TEST(LayerGradTest, AttentionWithProbabilityDropout) {
  Vec inp = random_vec(kB * kT * 3 * kC, 53, 1.5);
  const Vec dout = random_vec(kB * kT * kC, 54);
  const AttentionProbabilityDropout drop{DropoutParams{0.3, 9, 4}, AttentionBlock{kB, kNH, kT, 5, 0, kNH}};
  Vec out(dout.size()), preatt(kB * kNH * kT * kT), att(preatt.size());
  auto loss = [&] {
    attention_forward<double>(out, preatt, att, inp, kB, kT, kC, kNH, &drop);
    return dot(out, dout);
  };
  loss();
  Vec plain(out.size()), p2(preatt.size()), a2(att.size());
  attention_forward<double>(plain, p2, a2, inp, kB, kT, kC, kNH);
  EXPECT_NE(plain, out) << "p = 0.3 dropped nothing";
  EXPECT_EQ(a2, att) << "att is the undropped softmax";
  Vec dinp(inp.size());
  attention_backward<double>(dinp, dout, inp, att, kB, kT, kC, kNH, &drop);
  expect_gradient(inp, dinp, loss, "dinp (q, k, v) under dropout");

  // Head h of the whole call = local head h - offset of the shard holding it (llm.c layout:
  // the shard's q|k|v channels are the whole's channels of its heads).
  loss();  // out at the unperturbed inputs
  const int64_t hs = kC / kNH;
  for (int64_t shard = 0; shard < kNH; ++shard) {
    Vec inp_s(kB * kT * 3 * hs);
    for (int64_t bt = 0; bt < kB * kT; ++bt) {
      for (int64_t part = 0; part < 3; ++part) {
        for (int64_t i = 0; i < hs; ++i) {
          inp_s[static_cast<size_t>(bt * 3 * hs + part * hs + i)] =
              inp[static_cast<size_t>(bt * 3 * kC + part * kC + shard * hs + i)];
        }
      }
    }
    const AttentionProbabilityDropout d_s{drop.params, AttentionBlock{kB, 1, kT, 5, shard, kNH}};
    Vec out_s(kB * kT * hs), pre_s(kB * kT * kT), att_s(pre_s.size());
    attention_forward<double>(out_s, pre_s, att_s, inp_s, kB, kT, hs, 1, &d_s);
    for (int64_t bt = 0; bt < kB * kT; ++bt) {
      for (int64_t i = 0; i < hs; ++i) {
        EXPECT_EQ(out_s[static_cast<size_t>(bt * hs + i)],
                  out[static_cast<size_t>(bt * kC + shard * hs + i)]);
      }
    }
  }
}

TEST(LayerGradTest, CrossEntropySoftmax) {
  Vec logits = random_vec(kB * kT * kV, 61, 3.0);
  const std::vector<int32_t> targets = random_tokens(kB * kT, static_cast<int32_t>(kV), 62);
  const Vec dlosses = random_vec(kB * kT, 63);
  Vec probs(logits.size()), losses(kB * kT);
  auto loss = [&] {
    softmax_forward<double>(probs, logits, kB, kT, kV);
    cross_entropy_forward<double>(losses, probs, targets, kB, kT, kV);
    return dot(losses, dlosses);
  };
  loss();
  Vec dlogits(logits.size());
  cross_entropy_softmax_backward<double>(dlogits, dlosses, probs, targets, kB, kT, kV);
  expect_gradient(logits, dlogits, loss, "dlogits");
}

// Backward adds to the gradients already there (llm.c semantics): two calls give twice one.
TEST(LayerGradTest, BackwardAccumulatesIntoExistingGradients) {
  const Vec inp = random_vec(kB * kT * kC, 71);
  const Vec weight = random_vec(kOC * kC, 72);
  const Vec dout = random_vec(kB * kT * kOC, 73);
  Vec once_inp(inp.size()), once_w(weight.size()), once_b(kOC);
  matmul_backward<double>(once_inp, once_w, once_b, dout, inp, weight, kB, kT, kC, kOC);
  Vec twice_inp(inp.size()), twice_w(weight.size()), twice_b(kOC);
  matmul_backward<double>(twice_inp, twice_w, twice_b, dout, inp, weight, kB, kT, kC, kOC);
  matmul_backward<double>(twice_inp, twice_w, twice_b, dout, inp, weight, kB, kT, kC, kOC);
  for (size_t i = 0; i < inp.size(); ++i) EXPECT_NEAR(twice_inp[i], 2 * once_inp[i], 1e-12);
  for (size_t i = 0; i < weight.size(); ++i) EXPECT_NEAR(twice_w[i], 2 * once_w[i], 1e-12);
  for (size_t i = 0; i < once_b.size(); ++i) EXPECT_NEAR(twice_b[i], 2 * once_b[i], 1e-12);
}

TEST(LayerForwardTest, MatmulByHand) {
  // inp [1, 2] (B = T = 1, C = 2); W rows [1, 0], [0, 1], [1, 1]; bias [0.5, 0, -1].
  const Vec inp = {1, 2};
  const Vec weight = {1, 0, 0, 1, 1, 1};
  const Vec bias = {0.5, 0, -1};
  Vec out(3);
  matmul_forward<double>(out, inp, weight, bias, 1, 1, 2, 3);
  EXPECT_THAT(out, ::testing::ElementsAre(1.5, 2.0, 2.0));
  std::vector<float> outf(3);
  const std::vector<float> inpf = {1, 2}, weightf = {1, 0, 0, 1, 1, 1};
  matmul_forward<float>(outf, inpf, weightf, {}, 1, 1, 2, 3);
  EXPECT_THAT(outf, ::testing::ElementsAre(1.0f, 2.0f, 3.0f));
}

TEST(LayerForwardTest, LayerNormOfOneTwoThree) {
  const Vec inp = {1, 2, 3};
  const Vec weight = {1, 1, 1};
  const Vec bias = {0, 0, 0};
  Vec out(3), mean(1), rstd(1);
  layernorm_forward<double>(out, mean, rstd, inp, weight, bias, 1, 1, 3);
  const double r = 1.0 / std::sqrt(2.0 / 3.0 + 1e-5);  // biased variance 2/3, eps 1e-5
  EXPECT_DOUBLE_EQ(mean[0], 2.0);
  EXPECT_NEAR(rstd[0], r, 1e-12);
  EXPECT_NEAR(out[0], -r, 1e-12);
  EXPECT_NEAR(out[1], 0.0, 1e-12);
  EXPECT_NEAR(out[2], r, 1e-12);
  EXPECT_NEAR(r, 1.2247357, 1e-6);
}

TEST(LayerForwardTest, GeluValues) {
  const Vec inp = {0.0, 1.0, -1.0, 10.0, -10.0};
  Vec out(inp.size());
  gelu_forward<double>(out, inp);
  EXPECT_EQ(out[0], 0.0);
  const double k = std::sqrt(2.0 / M_PI);
  const double g1 = 0.5 * (1 + std::tanh(k * (1 + 0.044715)));
  EXPECT_NEAR(out[1], g1, 1e-15);
  EXPECT_NEAR(out[1], 0.8411920, 1e-6);  // GPT-2 gelu(1)
  EXPECT_NEAR(out[2], g1 - 1.0, 1e-15);  // gelu(-x) = gelu(x) - x
  EXPECT_NEAR(out[3], 10.0, 1e-12);
  EXPECT_NEAR(out[4], 0.0, 1e-12);
}

TEST(LayerForwardTest, SoftmaxOfEqualLogitsIsUniform) {
  const Vec logits(2 * kV, 3.25);
  Vec probs(logits.size());
  softmax_forward<double>(probs, logits, 1, 2, kV);
  for (double p : probs) EXPECT_NEAR(p, 1.0 / kV, 1e-15);
}

TEST(LayerForwardTest, CrossEntropyOfUniformLogitsIsLnV) {
  const Vec logits(kB * kT * kV, -0.5);
  const std::vector<int32_t> targets = random_tokens(kB * kT, static_cast<int32_t>(kV), 81);
  Vec probs(logits.size()), losses(kB * kT);
  softmax_forward<double>(probs, logits, kB, kT, kV);
  cross_entropy_forward<double>(losses, probs, targets, kB, kT, kV);
  for (double l : losses) EXPECT_NEAR(l, std::log(static_cast<double>(kV)), 1e-12);
  // Large logits stay finite (max subtracted).
  std::vector<float> big(kV, 1000.0f), pf(kV), lf(1);
  const std::vector<int32_t> t0 = {0};
  softmax_forward<float>(pf, big, 1, 1, kV);
  cross_entropy_forward<float>(lf, pf, t0, 1, 1, kV);
  EXPECT_NEAR(lf[0], std::log(static_cast<float>(kV)), 1e-5f);
}

TEST(LayerForwardTest, EmbeddingAddsTokenAndPositionRows) {
  // V = 3, C = 2, T = 2, B = 1.
  const Vec wte = {1, 2, 10, 20, 100, 200};
  const Vec wpe = {0.5, 0.25, -1, -2};
  const std::vector<int32_t> tokens = {2, 0};
  Vec out(4);
  embedding_forward<double>(out, tokens, wte, wpe, 1, 2, 2, 3);
  EXPECT_THAT(out, ::testing::ElementsAre(100.5, 200.25, 0.0, 0.0));
}

TEST(LayerForwardTest, AttentionFirstPositionReturnsItsValue) {
  // At t = 0 only one key is visible: att = 1 and out = v_0, whatever q and k.
  const Vec inp = random_vec(1 * kT * 3 * kC, 91);
  Vec out(kT * kC), preatt(kNH * kT * kT), att(preatt.size());
  attention_forward<double>(out, preatt, att, inp, 1, kT, kC, kNH);
  for (int64_t c = 0; c < kC; ++c) EXPECT_NEAR(out[c], inp[2 * kC + c], 1e-15);
  // Every att row sums to 1 over t2 <= t and is 0 beyond.
  for (int64_t h = 0; h < kNH; ++h) {
    for (int64_t t = 0; t < kT; ++t) {
      double sum = 0;
      for (int64_t t2 = 0; t2 < kT; ++t2) {
        const double a = att[(h * kT + t) * kT + t2];
        if (t2 > t) {
          EXPECT_EQ(a, 0.0);
        }
        sum += a;
      }
      EXPECT_NEAR(sum, 1.0, 1e-14);
    }
  }
}

TEST(LayerForwardTest, AttentionEqualKeysAverageTheValues) {
  // q = k = 0: every visible position gets weight 1/(t+1); out_t = mean of v_0..v_t.
  Vec inp(kT * 3 * kC, 0.0);
  for (int64_t t = 0; t < kT; ++t) {
    for (int64_t c = 0; c < kC; ++c) inp[t * 3 * kC + 2 * kC + c] = static_cast<double>(t + c);
  }
  Vec out(kT * kC), preatt(kNH * kT * kT), att(preatt.size());
  attention_forward<double>(out, preatt, att, inp, 1, kT, kC, kNH);
  for (int64_t t = 0; t < kT; ++t) {
    for (int64_t c = 0; c < kC; ++c) {
      EXPECT_NEAR(out[t * kC + c], static_cast<double>(t) / 2 + static_cast<double>(c), 1e-14);
    }
  }
}

TEST(LayerForwardTest, AttentionIsCausal) {
  Vec inp = random_vec(kB * kT * 3 * kC, 101);
  Vec out(kB * kT * kC), preatt(kB * kNH * kT * kT), att(preatt.size());
  attention_forward<double>(out, preatt, att, inp, kB, kT, kC, kNH);
  for (int64_t t = 0; t < kT - 1; ++t) {
    // Change every q, k, v after t: outputs at positions <= t stay bit-identical.
    Vec changed = inp;
    for (int64_t b = 0; b < kB; ++b) {
      for (int64_t t2 = t + 1; t2 < kT; ++t2) {
        for (int64_t c = 0; c < 3 * kC; ++c) changed[(b * kT + t2) * 3 * kC + c] += 7.0;
      }
    }
    Vec out2(out.size());
    attention_forward<double>(out2, preatt, att, changed, kB, kT, kC, kNH);
    for (int64_t b = 0; b < kB; ++b) {
      for (int64_t t1 = 0; t1 < kT; ++t1) {
        for (int64_t c = 0; c < kC; ++c) {
          const size_t i = (b * kT + t1) * kC + c;
          if (t1 <= t) {
            EXPECT_EQ(out2[i], out[i]) << "b " << b << " t " << t1 << " changed after " << t;
          } else {
            EXPECT_NE(out2[i], out[i]);
          }
        }
      }
    }
  }
  // And the backward: dout at positions <= t gives no gradient to inputs after t.
  const int64_t t = 1;
  Vec dout(out.size(), 0.0);
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t c = 0; c < kC; ++c) dout[(b * kT + t) * kC + c] = 1.0;
  }
  attention_forward<double>(out, preatt, att, inp, kB, kT, kC, kNH);
  Vec dinp(inp.size(), 0.0);
  attention_backward<double>(dinp, dout, inp, att, kB, kT, kC, kNH);
  for (int64_t b = 0; b < kB; ++b) {
    for (int64_t t2 = t + 1; t2 < kT; ++t2) {
      for (int64_t c = 0; c < 3 * kC; ++c) EXPECT_EQ(dinp[(b * kT + t2) * 3 * kC + c], 0.0);
    }
  }
}

// The float instantiation (used by the executor) agrees with the double one.
TEST(LayerForwardTest, FloatMatchesDouble) {
  const Vec inp = random_vec(kB * kT * 3 * kC, 111);
  Vec out(kB * kT * kC), preatt(kB * kNH * kT * kT), att(preatt.size());
  attention_forward<double>(out, preatt, att, inp, kB, kT, kC, kNH);
  const std::vector<float> inpf(inp.begin(), inp.end());
  std::vector<float> outf(out.size()), preattf(preatt.size()), attf(att.size());
  attention_forward<float>(outf, preattf, attf, inpf, kB, kT, kC, kNH);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(outf[i], out[i], 1e-5);

  const Vec x = random_vec(kB * kT * kC, 112);
  const Vec w = random_vec(kC, 113);
  const Vec bias = random_vec(kC, 114);
  Vec y(x.size()), mean(kB * kT), rstd(kB * kT);
  layernorm_forward<double>(y, mean, rstd, x, w, bias, kB, kT, kC);
  const std::vector<float> xf(x.begin(), x.end()), wf(w.begin(), w.end()),
      bf(bias.begin(), bias.end());
  std::vector<float> yf(y.size()), meanf(mean.size()), rstdf(rstd.size());
  layernorm_forward<float>(yf, meanf, rstdf, xf, wf, bf, kB, kT, kC);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(yf[i], y[i], 1e-5);
}

TEST(LayerErrorTest, BadSizesThrowInvalidArgument) {
  Vec a(6), b(6), c(2), d(3);
  EXPECT_THROW(matmul_forward<double>(a, b, Vec(5), {}, 1, 3, 2, 2), InvalidArgument);
  EXPECT_THROW(matmul_forward<double>(a, b, Vec(4), c, 0, 3, 2, 2), InvalidArgument);
  EXPECT_THROW(matmul_forward<double>(a, b, Vec(4), d, 1, 3, 2, 2), InvalidArgument);
  EXPECT_THROW(layernorm_forward<double>(a, c, c, b, c, d, 1, 2, 3), InvalidArgument);  // w [2]
  EXPECT_THROW(gelu_forward<double>(a, d), InvalidArgument);
  EXPECT_THROW(residual_forward<double>(a, b, d), InvalidArgument);
  // heads must divide channels.
  Vec out(kT * kC), preatt(3 * kT * kT), att(preatt.size()), inp(kT * 3 * kC);
  EXPECT_THROW(attention_forward<double>(out, preatt, att, inp, 1, kT, kC, 3), InvalidArgument);
  // Token outside [0, V), wpe shorter than T.
  const std::vector<int32_t> bad = {0, 3};
  Vec emb(4);
  EXPECT_THROW(embedding_forward<double>(emb, bad, Vec(6), Vec(4), 1, 2, 2, 3),
               InvalidArgument);
  const std::vector<int32_t> ok = {0, 2};
  EXPECT_THROW(embedding_forward<double>(emb, ok, Vec(6), Vec(2), 1, 2, 2, 3),
               InvalidArgument);
  // Target outside [0, V).
  const std::vector<int32_t> bad_target = {-1};
  Vec losses(1), probs(kV, 1.0 / kV);
  EXPECT_THROW(cross_entropy_forward<double>(losses, probs, bad_target, 1, 1, kV),
               InvalidArgument);
  try {
    matmul_forward<double>(a, b, Vec(5), {}, 1, 3, 2, 2);
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("weight has 5 elements, expected 4"));
  }
}

}  // namespace
}  // namespace traintwin::exec::cpu
