// GptModel: blockwise attention, the attention core of a transformer layer without the s x s
// store — flash and fused attention (CP = 1), ring attention and all-gather CP (context
// parallelism) — and the CP collectives' buffers (cp_transfer); see exec/gpt_model.hpp, table of
// contents in exec/gpt_model.cpp. Next in the flow: the rest of the layer in
// exec/gpt_model_layer.cpp; in an MoE layer the routed experts, exec/gpt_model_moe.cpp.
#include <memory>
#include <string>
#include <utility>

#include "core/error.hpp"
#include "exec/gpt_model.hpp"
#include "exec/gpt_model_internal.hpp"
#include "exec/qkv_rows.hpp"

namespace traintwin::exec {

// ---- blockwise attention: flash and ring attention (context parallelism) ------------------------
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
  L.kv_steps.push_back(zeros(rows * kvw));
  pack_qkv_rows(backend_, L.q, L.kv_steps[0], qkv, rows, qw, kvw);
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
  } else if (g_.fused) {  // CP = 1: the backend's fused attention on the QKV rows
    const Tensor& qkv = g_.rope ? L.qkv_rope : L.qkv;
    if (qkv.empty()) {
      throw InvalidArgument("executor: attention inputs were not kept or recomputed");
    }
    L.attn = zeros(rows * g_.heads * g_.hd);
    L.lse = zeros(g_.b * g_.heads * g_.s);
    backend_.fused_attention_forward(L.attn, L.lse, qkv, block_shape(),
                                     attention_dropout(op.micro_batch, op.layer));
  } else {
    if (i >= g_.cp) unexpected(op, "more ring attention blocks than CP ranks");
    pack_ring_inputs(L);
    if (static_cast<int64_t>(L.kv_steps.size()) <= i ||
        L.kv_steps[static_cast<size_t>(i)].empty()) {
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
  if (g_.fused) {  // CP = 1: one call writes the QKV rows' gradient
    const Tensor& qkv = g_.rope ? L.qkv_rope : L.qkv;
    L.d_qkv = zeros(g_.b * g_.s * g_.qkv);
    backend_.fused_attention_backward(L.d_qkv, L.d_attn, qkv, L.attn, L.lse, block_shape(),
                                      attention_dropout(op.micro_batch, op.layer));
    L.d_attn.reset();
    if (!split_) L.attn.reset();  // else the projection's W step reads it
    L.lse.reset();
    L.qkv_rope.reset();
    return;
  }
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
    dkv_span =
        L.dkv_block.span().subspan(static_cast<size_t>(i * kv_size), static_cast<size_t>(kv_size));
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
  backend_.block_attention_backward(
      L.dq, dkv_span, L.d_attn, L.q, L.kv_steps[static_cast<size_t>(i)], L.attn, L.lse, seq_,
      ring_source(i), block_shape(), attention_dropout(op.micro_batch, op.layer));
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
  scatter_qkv_rows(backend_, L.d_qkv, L.dq, L.dkv_own, rows, qw, kvw);
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
  if (!split_) L.attn.reset();  // else the projection's W step reads it
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

}  // namespace traintwin::exec
