// The executor's collectives (exec/executor_impl.hpp): the SP reorderings between member-major
// pieces and [b, s, h], the TP/SP/CP collectives, the MoE token exchange over EP (alltoall
// dispatcher), the DP gradient and parameter buckets with the distributed optimizer's pieces, and
// the SP LayerNorm gradients. Before it in the flow: exec/executor.cpp dispatches the ops.
#include <algorithm>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "exec/executor_impl.hpp"

namespace traintwin::exec {

void Executor::Impl::member_major_to_bsh(const Tensor& pieces, Tensor& out, int64_t width) {
  const int64_t block = g().tl * width;
  out = zeros(g().b * g().s * width);
  for (int64_t r = 0; r < g().t; ++r) {
    backend_.copy_2d(out.span().subspan(static_cast<size_t>(r * block)), g().s * width,
                     pieces.span().subspan(static_cast<size_t>(r * g().b * block)), block, block,
                     g().b);
  }
}

Tensor Executor::Impl::bsh_to_member_major(const Tensor& full, int64_t width) {
  const int64_t block = g().tl * width;
  Tensor pieces = zeros(static_cast<int64_t>(full.size()));
  for (int64_t r = 0; r < g().t; ++r) {
    backend_.copy_2d(pieces.span().subspan(static_cast<size_t>(r * g().b * block)), block,
                     full.span().subspan(static_cast<size_t>(r * block)), g().s * width, block,
                     g().b);
  }
  return pieces;
}

void Executor::Impl::gather_sp(const Op& op, const Tensor& shard, Tensor* full) {
  if (shard.size() != static_cast<size_t>(g().b * g().tl * g().h)) {
    unexpected(op, "nothing to gather");
  }
  InFlight f;
  f.buffer = zeros(g().b * g().s * g().h);
  f.request = comm_.all_gather(GroupKind::kTp, shard, f.buffer);
  InFlight& slot = start(op, std::move(f));
  const Tensor* pieces = &slot.buffer;
  slot.on_complete = [this, pieces, full] { member_major_to_bsh(*pieces, *full, g().h); };
}

void Executor::Impl::reduce_tp(const Op& op, Tensor& partial, Tensor* shard) {
  InFlight f;
  if (op.collective == CollectiveKind::kAllReduce) {
    f.request = comm_.all_reduce(GroupKind::kTp, partial.span(), ReduceOp::kSum);
  } else if (op.collective == CollectiveKind::kReduceScatter) {
    f.buffer = bsh_to_member_major(partial, g().h);
    *shard = zeros(g().b * g().tl * g().h);
    f.request = comm_.reduce_scatter(GroupKind::kTp, f.buffer, shard->span(), ReduceOp::kSum);
  } else {
    unexpected(op, "expected a TP all_reduce or reduce_scatter");
  }
  start(op, std::move(f));
}

void Executor::Impl::issue_collective(const Op& op) {
  const bool fwd = op.phase == Phase::kForward || op.phase == Phase::kRecompute;
  const bool gather = op.collective == CollectiveKind::kAllGather;
  switch (op.role) {
    case Role::kEmbedding: {
      ChunkState& st = model_->chunk(op.model_chunk, op.micro_batch);
      if (fwd) return reduce_tp(op, st.emb, &st.emb_rs);
      return gather_sp(op, model_->chunk_input_grad(st, op.model_chunk), &st.d_emb_full);
    }
    case Role::kQkv:
    case Role::kFc1: {
      LayerState& L = model_->layer(op);
      const bool qkv = op.role == Role::kQkv;
      if (gather) return gather_sp(op, qkv ? L.ln1 : L.ln2, qkv ? &L.ln1_full : &L.ln2_full);
      if (fwd) unexpected(op, "unexpected forward reduce");
      return reduce_tp(op, L.d_ln_full, &L.d_ln);
    }
    case Role::kAttentionProjection:
    case Role::kFc2: {
      LayerState& L = model_->layer(op);
      const bool proj = op.role == Role::kAttentionProjection;
      if (fwd) return reduce_tp(op, proj ? L.proj : L.fc2, proj ? &L.proj_rs : &L.fc2_rs);
      return gather_sp(op, L.d_branch, &L.d_branch_full);
    }
    case Role::kLmHead: {
      ChunkState& st = model_->chunk(op.model_chunk, op.micro_batch);
      if (gather) return gather_sp(op, st.lnf, &st.lnf_full);
      return reduce_tp(op, st.d_lnf_full, &st.d_lnf);
    }
    case Role::kCrossEntropyMax:
    case Role::kCrossEntropyTarget:
    case Role::kCrossEntropySumExp: {
      ChunkState& st = model_->chunk(op.model_chunk, op.micro_batch);
      Tensor& x = op.role == Role::kCrossEntropyMax      ? st.lmax
                  : op.role == Role::kCrossEntropyTarget ? st.target
                                                         : st.sum_exp;
      InFlight f;
      f.request = comm_.all_reduce(
          GroupKind::kTp, x.span(),
          op.role == Role::kCrossEntropyMax ? ReduceOp::kMax : ReduceOp::kSum);
      start(op, std::move(f));
      return;
    }
    case Role::kMoeDispatch: return moe_exchange(op, /*dispatch=*/true, fwd);
    case Role::kMoeCombine: return moe_exchange(op, /*dispatch=*/false, fwd);
    case Role::kAttentionCore: {  // context parallelism: K/V (dK/dV) over the CP group
      CpTransfer t = model_->cp_transfer(op);
      InFlight f;
      f.buffer = std::move(t.send);
      switch (op.collective) {
        case CollectiveKind::kRingExchange:
          f.request = comm_.ring_exchange(op.group, f.buffer.span(), t.recv);
          break;
        case CollectiveKind::kAllGather:
          f.request = comm_.all_gather(op.group, f.buffer.span(), t.recv);
          break;
        case CollectiveKind::kReduceScatter:
          f.request = comm_.reduce_scatter(op.group, f.buffer.span(), t.recv, ReduceOp::kSum);
          break;
        default: unexpected(op, "unexpected CP collective");
      }
      f.on_complete = std::move(t.on_complete);
      start(op, std::move(f));
      return;
    }
    case Role::kGradBucket: return grad_bucket(op);
    case Role::kParamBucket: return param_bucket(op);
    case Role::kLayerNormGrads: return layernorm_grads(op);
    case Role::kEmbeddingGrads: {
      InFlight f;
      f.request =
          comm_.all_reduce(GroupKind::kEmbedding, model_->embedding_grad_to_reduce(), ReduceOp::kSum);
      start(op, std::move(f));
      return;
    }
    case Role::kMirrorGrads: return mirror_grads(op);
    case Role::kGradNorm: {
      InFlight f;
      f.request = comm_.all_reduce(op.group, std::span<double>(&sum_sq_, 1), ReduceOp::kSum);
      start(op, std::move(f));
      return;
    }
    default: unexpected(op, std::string("no collective for role ") + to_string(op.role));
  }
}

void Executor::Impl::plan_exchange(const Op& op, LayerState& L) {
  const int64_t ep = comm_.layout().size(GroupKind::kEp);
  const int64_t me = shard_.expert_coord().ep;
  const int64_t e = g().experts, el = g().el;
  const std::vector<int64_t>& mine = model_->moe_rows_per_expert(op);
  std::vector<float> local(mine.begin(), mine.end()), all(static_cast<size_t>(ep * e));
  comm_.all_gather(GroupKind::kEp, local, all)->wait();
  MoeExchange& x = L.exchange;
  x.send_rows.assign(static_cast<size_t>(ep), 0);
  x.recv_rows.assign(static_cast<size_t>(ep), 0);
  x.chunk_rows.assign(static_cast<size_t>(ep * el), 0);
  x.rows_per_local_expert.assign(static_cast<size_t>(el), 0);
  for (int64_t r = 0; r < ep; ++r) {
    for (int64_t j = 0; j < el; ++j) {
      const auto sent = mine[static_cast<size_t>(r * el + j)];
      const auto got = static_cast<int64_t>(all[static_cast<size_t>(r * e + me * el + j)]);
      x.send_rows[static_cast<size_t>(r)] += sent;
      x.recv_rows[static_cast<size_t>(r)] += got;
      x.chunk_rows[static_cast<size_t>(r * el + j)] = got;
      x.rows_per_local_expert[static_cast<size_t>(j)] += got;
    }
  }
}

Tensor Executor::Impl::sort_chunks(const MoeExchange& x, CFSpan in, bool to_expert_major) {
  const int64_t ep = static_cast<int64_t>(x.send_rows.size()), el = g().el;
  std::vector<int64_t> rows(static_cast<size_t>(ep * el)), order(rows.size());
  for (int64_t r = 0; r < ep; ++r) {
    for (int64_t j = 0; j < el; ++j) {
      const auto src = static_cast<size_t>(r * el + j), dst = static_cast<size_t>(j * ep + r);
      if (to_expert_major) {  // input (r, j)-ordered
        rows[src] = x.chunk_rows[src];
        order[dst] = static_cast<int64_t>(src);
      } else {  // input (j, r)-ordered
        rows[dst] = x.chunk_rows[src];
        order[src] = static_cast<int64_t>(dst);
      }
    }
  }
  Tensor out = zeros(static_cast<int64_t>(in.size()));
  backend_.moe_sort_chunks(out, in, rows, order, g().h);
  return out;
}

std::vector<int64_t> Executor::Impl::times(const std::vector<int64_t>& rows, int64_t h) {
  std::vector<int64_t> v(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) v[i] = rows[i] * h;
  return v;
}

void Executor::Impl::moe_exchange(const Op& op, bool dispatch, bool fwd) {
  if (op.collective != CollectiveKind::kAllToAll || op.group != GroupKind::kEp) {
    unexpected(op, "expected an all_to_all over ep (alltoall dispatcher, ETP 1)");
  }
  LayerState& L = model_->layer(op);
  const int64_t h = g().h;
  if (dispatch && fwd) plan_exchange(op, L);
  const MoeExchange& x = L.exchange;
  const std::vector<int64_t> sent = times(x.send_rows, h), got = times(x.recv_rows, h);
  const int64_t m_rows = L.perm.rows();
  int64_t r_rows = 0;
  for (int64_t v : x.recv_rows) r_rows += v;
  InFlight f;
  // Tokens travel to the experts (dispatch forward, combine backward) or back.
  const bool to_experts = dispatch == fwd;
  if (to_experts) {
    f.buffer = zeros(r_rows * h);
    CFSpan in = dispatch ? CFSpan(L.permuted) : CFSpan(L.d_combined);
    f.request = comm_.all_to_all_v(GroupKind::kEp, in, sent, f.buffer, got);
    InFlight& slot = start(op, std::move(f));
    Tensor* received = &slot.buffer;
    slot.on_complete = [this, &L, received, dispatch] {
      Tensor sorted = sort_chunks(L.exchange, *received, /*to_expert_major=*/true);
      if (dispatch) {
        L.dispatched = std::move(sorted);
        L.permuted.reset();
      } else {
        L.d_expert_fc2 = std::move(sorted);
        L.d_combined.reset();
      }
    };
    return;
  }
  // Back from the experts: (local expert, source) -> (source, local expert), then all-to-all.
  Tensor& from = dispatch ? L.d_dispatched : L.expert_fc2;
  f.buffer = sort_chunks(x, from, /*to_expert_major=*/false);
  from.reset();
  Tensor& into = dispatch ? L.d_permuted : L.combined;
  into = zeros(m_rows * h);
  f.request = comm_.all_to_all_v(GroupKind::kEp, f.buffer, got, into, sent);
  start(op, std::move(f));
}

bool Executor::Impl::expert_bucket(const Op& op) { return op.group == GroupKind::kEdp; }

std::vector<const ShardTensor*> Executor::Impl::bucket_tensors(const Op& op) const {
  const auto [begin, end] =
      shard_.item_range(op.model_chunk, op.bucket_layers, expert_bucket(op));
  std::vector<const ShardTensor*> out;
  for (const ShardTensor& t : shard_.chunks()[static_cast<size_t>(op.model_chunk)].tensors) {
    if (t.offset >= begin && t.offset < end) out.push_back(&t);
  }
  return out;
}

FSpan Executor::Impl::elements(Tensor& flat, const ShardTensor& t, int64_t lo, int64_t hi) {
  return FSpan(flat.data() + t.offset + lo, static_cast<size_t>(hi - lo));
}

void Executor::Impl::copy_pieces(Tensor& flat, const std::vector<const ShardTensor*>& tensors,
                 int64_t d, FSpan packed, int64_t first, bool to_packed) {
  int64_t k = first;
  for (const ShardTensor* t : tensors) {
    const auto [lo, hi] = optimizer_->owned(*t, d);
    FSpan dst = packed.subspan(static_cast<size_t>(k), static_cast<size_t>(hi - lo));
    if (to_packed) {
      backend_.copy(dst, elements(flat, *t, lo, hi));
    } else {
      backend_.copy(elements(flat, *t, lo, hi), dst);
    }
    k += optimizer_->piece(*t);
  }
}

int64_t Executor::Impl::bucket_member(const Op& op) const {
  return expert_bucket(op) ? shard_.expert_coord().edp : dp_cp_index_;
}

int64_t Executor::Impl::pieces_per_member(const std::vector<const ShardTensor*>& tensors) const {
  int64_t n = 0;
  for (const ShardTensor* t : tensors) n += optimizer_->piece(*t);
  return n;
}

void Executor::Impl::grad_bucket(const Op& op) {
  auto& grads = shard_.chunks()[static_cast<size_t>(op.model_chunk)].grads;
  InFlight f;
  if (op.collective == CollectiveKind::kAllReduce && op.group == GroupKind::kDpReplica) {
    // HSDP: this rank's reduced pieces of the bucket (after its reduce-scatter, the Program's
    // dependency) summed over the replicas that hold the same pieces.
    const std::vector<const ShardTensor*> tensors = bucket_tensors(op);
    const int64_t me = bucket_member(op);
    f.buffer = zeros(pieces_per_member(tensors));
    copy_pieces(grads, tensors, me, f.buffer, 0, true);
    f.request = comm_.all_reduce(op.group, f.buffer.span(), ReduceOp::kSum);
    InFlight& slot = start(op, std::move(f));
    Tensor* packed = &slot.buffer;
    slot.on_complete = [this, tensors, packed, &grads, me] {
      copy_pieces(grads, tensors, me, packed->span(), 0, false);
    };
    return;
  }
  if (op.collective == CollectiveKind::kAllReduce) {
    const auto [begin, end] =
        shard_.item_range(op.model_chunk, op.bucket_layers, expert_bucket(op));
    f.request = comm_.all_reduce(
        op.group, FSpan(grads.data() + begin, static_cast<size_t>(end - begin)), ReduceOp::kSum);
    start(op, std::move(f));
    return;
  }
  if (op.collective != CollectiveKind::kReduceScatter) unexpected(op, "unexpected bucket collective");
  // Member-major input: for each member d of the group (DP, or expert-DP for an expert
  // bucket), piece d of every tensor (zero-padded).
  const std::vector<const ShardTensor*> tensors = bucket_tensors(op);
  const int64_t per_member = pieces_per_member(tensors);
  const int64_t dp = expert_bucket(op) ? comm_.layout().size(op.group) : dp_cp_size_;
  const int64_t me = bucket_member(op);
  f.buffer = zeros(per_member * dp);
  for (int64_t d = 0; d < dp; ++d) copy_pieces(grads, tensors, d, f.buffer, d * per_member, true);
  auto out = std::make_shared<Tensor>(zeros(per_member));
  f.request = comm_.reduce_scatter(op.group, f.buffer, out->span(), ReduceOp::kSum);
  if (zero_stage_ < 2) {
    // ZeRO-1: once per iteration, after the last micro-batch; the reduced pieces replace this
    // rank's pieces of the accumulated gradients.
    f.on_complete = [this, tensors, out, &grads, me] {
      copy_pieces(grads, tensors, me, out->span(), 0, false);
    };
    start(op, std::move(f));
    return;
  }
  // ZeRO-2/3: after every micro-batch's backward. The micro-batch's gradients are in the send
  // buffer now, so the bucket's range of the gradient buffer starts the next micro-batch from
  // zero; the reduced pieces add up in the series' accumulator, which becomes this rank's
  // pieces of the gradients (what the norm, clipping and AdamW read) once the series is complete.
  // The other pieces stay 0: no rank keeps a gradient it does not own.
  const size_t series = grad_series_.at(op.id);
  if (series == kNoSeries) unexpected(op, "a reduce-scatter outside the gradient buckets");
  // The series completes in issue order (the previous micro-batch's reduce-scatter is done long
  // before, a backward ago), so whatever waits for the last one (the HSDP replica all-reduce)
  // finds the accumulated pieces.
  if (const std::optional<uint32_t> prev = grad_acc_[series].last_issued) complete(*prev);
  grad_acc_[series].last_issued = op.id;
  const auto [begin, end] = shard_.item_range(op.model_chunk, op.bucket_layers, expert_bucket(op));
  if (end > begin) {
    backend_.fill_2d(FSpan(grads.data() + begin, static_cast<size_t>(end - begin)), end - begin,
                     end - begin, 1, 0.0f);
  }
  f.on_complete = [this, tensors, out, &grads, me, series] {
    GradSeries& s = grad_acc_[series];
    if (s.done++ == 0) {
      s.acc = out;
    } else {
      backend_.add_in_place(s.acc->span(), out->span());
    }
    if (s.done == s.rounds) copy_pieces(grads, tensors, me, s.acc->span(), 0, false);
  };
  start(op, std::move(f));
}

void Executor::Impl::reshard(Tensor& flat, const std::vector<const ShardTensor*>& tensors,
                             int64_t d) {
  auto zero = [&](const ShardTensor& t, int64_t lo, int64_t hi) {
    if (hi > lo) backend_.fill_2d(elements(flat, t, lo, hi), hi - lo, hi - lo, 1, 0.0f);
  };
  for (const ShardTensor* t : tensors) {
    const auto [lo, hi] = optimizer_->owned(*t, d);
    zero(*t, 0, lo);
    zero(*t, hi, t->numel);
  }
}

void Executor::Impl::reshard_layers() {
  for (ChunkShard& c : shard_.chunks()) {
    for (const ShardTensor& t : c.tensors) {
      if (t.item >= 0) reshard(c.params, {&t}, optimizer_->member(t));
    }
  }
}

void Executor::Impl::gather_sharded_state() {
  if (zero_stage_ < 1) return;
  for (ChunkShard& c : shard_.chunks()) {
    for (const bool expert : {false, true}) {
      std::vector<const ShardTensor*> tensors;
      for (const ShardTensor& t : c.tensors) {
        if (t.expert == expert) tensors.push_back(&t);
      }
      if (tensors.empty()) continue;
      const GroupKind group = expert ? GroupKind::kEdp : dense_group_;
      const int64_t members = expert ? comm_.layout().size(group) : dp_cp_size_;
      const int64_t me = expert ? shard_.expert_coord().edp : dp_cp_index_;
      if (members <= 1) continue;
      const int64_t per_member = pieces_per_member(tensors);
      for (Tensor* buf : {&c.params, &c.exp_avg, &c.exp_avg_sq}) {
        Tensor mine = zeros(per_member), all = zeros(per_member * members);
        copy_pieces(*buf, tensors, me, mine.span(), 0, true);
        comm_.all_gather(group, mine.span(), all.span())->wait();
        for (int64_t d = 0; d < members; ++d) {
          copy_pieces(*buf, tensors, d, all.span(), d * per_member, false);
        }
      }
    }
  }
}

void Executor::Impl::param_bucket(const Op& op) {
  if (op.collective != CollectiveKind::kAllGather) unexpected(op, "expected an all-gather");
  auto& params = shard_.chunks()[static_cast<size_t>(op.model_chunk)].params;
  const std::vector<const ShardTensor*> tensors = bucket_tensors(op);
  const int64_t per_member = pieces_per_member(tensors);
  const int64_t dp = expert_bucket(op) ? comm_.layout().size(op.group) : dp_cp_size_;
  auto mine = std::make_shared<Tensor>(zeros(per_member));
  copy_pieces(params, tensors, bucket_member(op), mine->span(), 0, true);
  // ZeRO-3: the layer was resharded after its last use (here, at the gather that replaces it),
  // so its forward or backward reads only what this gather brings.
  if (fsdp_unit(op)) reshard(params, tensors, bucket_member(op));
  InFlight f;
  f.buffer = zeros(per_member * dp);
  f.request = comm_.all_gather(op.group, mine->span(), f.buffer.span());
  InFlight& slot = start(op, std::move(f));
  Tensor* gathered = &slot.buffer;  // owned by the in-flight slot until completion
  slot.on_complete = [this, tensors, mine, gathered, &params, per_member, dp] {
    for (int64_t d = 0; d < dp; ++d) {
      copy_pieces(params, tensors, d, gathered->span(), d * per_member, false);
    }
  };
}

void Executor::Impl::mirror_grads(const Op& op) {
  if (op.collective != CollectiveKind::kAllReduce || op.group != GroupKind::kPpMirror) {
    unexpected(op, "expected an all_reduce over pp-mirror");
  }
  // Rank r holds stage r in chunk 0 and stage p - 1 - r in chunk 1, its mirror the same stages
  // the other way round, each stage's tensors in the same order (exec/model_shard.hpp): both
  // pack the stage with the smaller index first. Only the pieces the optimizer reads (this
  // rank's DP x CP / expert-DP pieces with the distributed optimizer, which the mirror owns
  // too: the pair differs in its PP coordinate only).
  std::vector<ChunkShard*> order;
  for (ChunkShard& c : shard_.chunks()) order.push_back(&c);
  if (coord_.pp > g().p - 1 - coord_.pp) std::reverse(order.begin(), order.end());
  auto for_each_piece = [this, order](FSpan packed, bool to_packed) {
    int64_t k = 0;
    for (ChunkShard* c : order) {
      for (const ShardTensor& t : c->tensors) {
        const auto [lo, hi] = optimizer_->owned(t, optimizer_->member(t));
        if (hi == lo) continue;
        if (!packed.empty()) {
          FSpan piece = packed.subspan(static_cast<size_t>(k), static_cast<size_t>(hi - lo));
          if (to_packed) {
            backend_.copy(piece, elements(c->grads, t, lo, hi));
          } else {
            backend_.copy(elements(c->grads, t, lo, hi), piece);
          }
        }
        k += hi - lo;
      }
    }
    return k;
  };
  InFlight f;
  f.buffer = zeros(for_each_piece(FSpan(), true));
  for_each_piece(f.buffer, true);
  f.request = comm_.all_reduce(GroupKind::kPpMirror, f.buffer.span(), ReduceOp::kSum);
  InFlight& slot = start(op, std::move(f));
  Tensor* packed = &slot.buffer;
  slot.on_complete = [packed, for_each_piece] { for_each_piece(packed->span(), false); };
}

void Executor::Impl::layernorm_grads(const Op& op) {
  int64_t total = 0;
  for (const auto& c : shard_.chunks()) {
    for (const auto& t : c.tensors) {
      if (t.sequence_parallel_grad) total += t.numel;
    }
  }
  InFlight f;
  f.buffer = zeros(total);
  auto for_each_piece = [this](FSpan packed, bool to_packed) {
    int64_t k = 0;
    for (auto& c : shard_.chunks()) {
      for (const auto& t : c.tensors) {
        if (!t.sequence_parallel_grad) continue;
        FSpan piece = packed.subspan(static_cast<size_t>(k), static_cast<size_t>(t.numel));
        if (to_packed) {
          backend_.copy(piece, elements(c.grads, t, 0, t.numel));
        } else {
          backend_.copy(elements(c.grads, t, 0, t.numel), piece);
        }
        k += t.numel;
      }
    }
  };
  for_each_piece(f.buffer, true);
  f.request = comm_.all_reduce(GroupKind::kTp, f.buffer.span(), ReduceOp::kSum);
  InFlight& slot = start(op, std::move(f));
  Tensor* packed = &slot.buffer;
  slot.on_complete = [packed, for_each_piece] { for_each_piece(packed->span(), false); };
}

}  // namespace traintwin::exec
