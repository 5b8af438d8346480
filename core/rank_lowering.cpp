// RankLowering: run(), op creation, the pipeline schedule and one
// schedule step; see core/rank_lowering.hpp.
#include "core/rank_lowering.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/error.hpp"
#include "core/fsdp_gather_once.hpp"

namespace traintwin::lowering {

namespace {

/// Capacity given to a small vector of an op (its deps, kernels, kernel roles) on its first
/// element: as many elements as fit in the 24 bytes glibc's smallest heap chunk holds (the chunk
/// one element takes anyway), so that the vector grows without a malloc and free per element
/// up to that many (a probe of the analytical estimator lowers ~10^4 ops, sim/analytical.hpp).
template <class T>
void reserve_small(std::vector<T>& v) {
  if (v.capacity() == 0) v.reserve(24 / sizeof(T));
}

}  // namespace

uint32_t RankLowering::new_op(OpKind kind, Stream stream, const char* what) {
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

void RankLowering::add_dep(uint32_t op, uint32_t dep) {
  if (dep == kNoOp) return;
  auto& deps = out_.ops[op].deps;
  if (std::find(deps.begin(), deps.end(), dep) == deps.end()) {
    reserve_small(deps);
    deps.push_back(dep);
  }
}

void RankLowering::kernel(const Kernel& kern, const char* what, int32_t target) {
  if (part_ == BackwardPart::kWeightInputs) return;  // only the gathers of W's inputs
  if (part_ != BackwardPart::kAll) {
    // A split backward: B leaves out the weight-gradient GEMMs, W issues only them and the
    // gradient accumulation after them (grad_accumulate, without gradient_accumulation_fusion).
    const bool wgrad = kern.key.name.ends_with("_wgrad") || kern.key.name == "grad_accumulate";
    if (wgrad != (part_ == BackwardPart::kWeight)) return;
  }
  if (open_compute_ == kNoOp) {
    open_compute_ = new_op(OpKind::kCompute, Stream::kCompute, what);
    add_dep(open_compute_, last_compute_);
    for (uint32_t w : waits_) add_dep(open_compute_, w);
    waits_.clear();
    last_compute_ = open_compute_;
  }
  Op& op = out_.ops[open_compute_];
  reserve_small(op.kernels);
  reserve_small(op.kernel_roles);
  op.kernels.push_back(table_.add(kern));
  op.kernel_roles.push_back(role_);
  if (target >= 0 && op.kernel_targets.empty()) op.kernel_targets.resize(op.kernels.size() - 1, -1);
  if (target >= 0 || !op.kernel_targets.empty()) op.kernel_targets.push_back(target);
}

void RankLowering::context(Phase phase, int64_t mb, int64_t chunk, int64_t layer) {
  // The backward helpers set kBackward (or kRecompute) as they go; in a W step their ops are W's.
  if ((part_ == BackwardPart::kWeight || part_ == BackwardPart::kWeightInputs) &&
      (phase == Phase::kBackward || phase == Phase::kRecompute)) {
    phase = Phase::kWeightGrad;
  }
  if (phase != phase_ || mb != mb_ || chunk != chunk_ || layer != layer_) close_compute();
  phase_ = phase;
  mb_ = mb;
  chunk_ = chunk;
  layer_ = layer;
}

uint32_t RankLowering::collective(CollectiveKind kind, GroupKind group, Stream stream,
                                  int64_t bytes, const char* what) {
  if (layout_.size(group) == 1) return kNoOp;
  // A W step communicates only to feed a wgrad GEMM (the SP gather of its saved input).
  if ((part_ == BackwardPart::kWeight || part_ == BackwardPart::kWeightInputs) &&
      !allow_w_collective_) {
    return kNoOp;
  }
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

void RankLowering::wait(uint32_t op) {
  if (op == kNoOp) return;
  close_compute();
  waits_.push_back(op);
}

void RankLowering::tp_blocking(CollectiveKind kind, int64_t bytes, const char* what) {
  wait(collective(kind, GroupKind::kTp, Stream::kTpComm, bytes, what));
}

void RankLowering::p2p_batch(const std::vector<P2P>& batch) {
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
    if (!(split_ && x.send)) ids.push_back(id);
  }
  if (scatter_gathers()) {
    // Megatron-LM's _communicate: wait for the whole batch, then gather each received chunk
    // over TP (the full [s, b, h] tensor, p2p_bytes() x TP) before anything uses it.
    const Role saved = role_;
    role_ = Role::kPipeline;
    std::vector<uint32_t> gathers;
    for (size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].send) continue;
      const uint32_t g = collective(CollectiveKind::kAllGather, GroupKind::kTp, Stream::kTpComm,
                                    p2p_bytes() * d_.t, "pp all_gather (scatter/gather)");
      for (uint32_t id : ids) add_dep(g, id);
      gathers.push_back(g);
    }
    role_ = saved;
    ids.insert(ids.end(), gathers.begin(), gathers.end());
  }
  for (uint32_t id : ids) waits_.push_back(id);
}

const ChunkLayers& RankLowering::layers_of(int64_t chunk) const {
  return d_.split[static_cast<size_t>(vstage(chunk))];
}

int64_t RankLowering::rank_of_vstage(int64_t vs) const {
  RankCoord c = out_.coord;
  c.pp = rank_of_virtual_stage(sc_.parallel.pipeline_schedule, d_.p, vs);
  return layout_.rank(c);
}

P2P RankLowering::p2p(const PipelineTransfer& t, bool send) const {
  const int64_t peer = send ? t.receiver_vstage() : t.sender_vstage;
  return P2P{send, rank_of_vstage(peer), pipeline_tag(t, num_vstages()), p2p_bytes()};
}

std::optional<P2P> RankLowering::recv_input(const ScheduleStep& st) const {
  const auto t = rank_step_input(sc_.parallel.pipeline_schedule, d_.p, out_.coord.pp, d_.v, st);
  return t ? std::optional<P2P>(p2p(*t, false)) : std::nullopt;
}

std::optional<P2P> RankLowering::send_output(const ScheduleStep& st) const {
  const auto t = rank_step_output(sc_.parallel.pipeline_schedule, d_.p, out_.coord.pp, d_.v, st);
  return t ? std::optional<P2P>(p2p(*t, true)) : std::nullopt;
}

void RankLowering::append(std::vector<P2P>& batch, const std::optional<P2P>& x) {
  if (x) batch.push_back(*x);
}

void RankLowering::p2p_context(const ScheduleStep& st) {
  context(st.pass == Pass::kForward ? Phase::kForward : Phase::kBackward, st.micro_batch,
          st.model_chunk, -1);
}

void RankLowering::lower_schedule() {
  const auto& steps = out_.schedule;
  const size_t n = steps.size();
  if (d_.v == 1 || split_) {
    // forward_backward_pipelining_without_interleaving (and GPipe; ZB-V's two chunks too, whose
    // runtime issues the p2p of each step around it): recv the input, run the
    // step, send the output; between a forward and a backward (steady state) Megatron combines
    // send and recv in one call (send_forward_recv_backward / send_backward_recv_forward).
    // W steps (zero-bubble schedules) have no p2p: the batches pair each F or B step with the
    // next F or B step, and a W step runs between a batch and the step that waits for it.
    auto next_fb = [&](size_t i) {
      while (i < n && steps[i].pass == Pass::kWeightGrad) ++i;
      return i;
    };
    p2p_context(steps[0]);
    p2p_batch(to_batch(recv_input(steps[0])));
    for (size_t i = 0; i < n; ++i) {
      if (steps[i].pass == Pass::kWeightGrad) {
        lower_weight_grad(steps[i]);
        continue;
      }
      lower_step(steps[i]);
      step_ops_end_ = out_.ops.size();
      p2p_context(steps[i]);
      std::vector<P2P> batch;
      append(batch, send_output(steps[i]));
      const size_t next = next_fb(i + 1);
      if (next < n && steps[next].pass != steps[i].pass) {
        append(batch, recv_input(steps[next]));
        p2p_batch(batch);
      } else {
        p2p_batch(batch);
        if (next < n) {
          p2p_context(steps[next]);
          p2p_batch(to_batch(recv_input(steps[next])));
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

std::vector<P2P> RankLowering::to_batch(const std::optional<P2P>& x) {
  std::vector<P2P> b;
  append(b, x);
  return b;
}

void RankLowering::lower_step(const ScheduleStep& st) {
  const auto c = static_cast<size_t>(st.model_chunk);
  if (scope_ == StepScope::kBoundary &&
      (st.pass == Pass::kForward ? forwarded_chunk_[c] : st.micro_batch != last_backward_mb_[c])) {
    return;  // neither the chunk's first forward nor its last backward
  }
  const int64_t vs = vstage(st.model_chunk);
  const int64_t first_layer = layers_of(st.model_chunk).first_layer;
  const int64_t last_layer = layers_of(st.model_chunk).end_layer() - 1;
  // The embedding on the first virtual stage and the loss on the last (DualPipe: of each
  // direction, core/schedule.hpp takes_embedding / computes_loss).
  const bool embeds = takes_embedding_vs(vs);
  const bool is_last_vs = computes_loss_vs(vs);
  if (st.pass == Pass::kForward) {
    const bool first_forward = !forwarded_chunk_[static_cast<size_t>(st.model_chunk)];
    forwarded_chunk_[static_cast<size_t>(st.model_chunk)] = true;
    if (embeds) {
      context(Phase::kForward, st.micro_batch, st.model_chunk, -1);
      if (first_forward) wait_param_gather(st.model_chunk, -2);
      embedding_forward();
    }
    for (int64_t l = first_layer; l <= last_layer; ++l) {
      context(Phase::kForward, st.micro_batch, st.model_chunk, l);
      if (first_forward) wait_param_gather(st.model_chunk, l);
      // (Units kept whole for the step under PP: gathered by the chunk's first forward only.)
      if (sc_.training.zero_stage() >= 3 &&
          (first_forward || !fsdp_units_gathered_once_per_step(sc_))) {
        fsdp_gather(st.model_chunk, l, fsdp_ahead(l, +1, first_layer, last_layer));
      }
      offload_before_forward(l);
      layer_forward();
      offload_after_forward(l);
    }
    fp8_amax_reduction(true, st.micro_batch, st.model_chunk);
    if (is_last_vs) {
      context(Phase::kForward, st.micro_batch, st.model_chunk, -1);
      if (first_forward) wait_param_gather(st.model_chunk, -1);
      head_forward();
    }
    close_compute();
    return;
  }
  // Under a split backward this is B: the gradients are complete, and the buckets triggered,
  // only after W (lower_weight_grad).
  const bool last_backward =
      !split_ && (reduces_every_micro_batch() ||
                  st.micro_batch == last_backward_mb_[static_cast<size_t>(st.model_chunk)]);
  part_ = split_ ? BackwardPart::kInput : BackwardPart::kAll;
  if (is_last_vs) {
    context(Phase::kBackward, st.micro_batch, st.model_chunk, -1);
    head_backward();
    if (last_backward) bucket_done(st.model_chunk, -1);
  }
  for (int64_t l = last_layer; l >= first_layer; --l) {
    // (reshard_after_forward false: the layer's parameters are still whole from its forward.)
    if (sc_.training.zero_stage() >= 3 && sc_.training.reshard_after_forward) {
      context(Phase::kBackward, st.micro_batch, st.model_chunk, l);
      fsdp_gather(st.model_chunk, l, fsdp_ahead(l, -1, first_layer, last_layer));
    }
    if (sc_.training.recompute_granularity == RecomputeGranularity::kFull) {
      context(Phase::kRecompute, st.micro_batch, st.model_chunk, l);
      layer_forward();
    }
    context(Phase::kBackward, st.micro_batch, st.model_chunk, l);
    reload_before_backward(l);
    layer_backward(st.micro_batch, st.model_chunk, l);
    reload_after_backward(l);
    if (last_backward) bucket_done(st.model_chunk, l);
  }
  fp8_amax_reduction(false, st.micro_batch, st.model_chunk);
  part_ = BackwardPart::kAll;
  if (embeds && !split_) {  // split: the embedding's backward is all weight gradient (W)
    context(Phase::kBackward, st.micro_batch, st.model_chunk, -1);
    embedding_backward();
    if (last_backward) bucket_done(st.model_chunk, -2);
  }
  close_compute();
}

void RankLowering::lower_weight_grad(const ScheduleStep& st) {
  const auto c = static_cast<size_t>(st.model_chunk);
  const bool last_w = st.micro_batch == last_weight_grad_mb_[c];
  if (scope_ == StepScope::kBoundary && !last_w) return;
  // The gradients are complete after the last W (every W under ZeRO-2/3).
  const bool last = last_w || reduces_every_micro_batch();
  // The p2p batches posted after the last F or B step are for the next one, not for W.
  std::vector<uint32_t> held;
  std::erase_if(waits_, [&](uint32_t w) {
    const OpKind k = out_.ops[w].kind;
    if ((k != OpKind::kSend && k != OpKind::kRecv) || w < step_ops_end_) return false;
    held.push_back(w);
    return true;
  });
  const int64_t vs = vstage(st.model_chunk);
  const ChunkLayers& layers = layers_of(st.model_chunk);
  if (computes_loss_vs(vs)) {
    context(Phase::kWeightGrad, st.micro_batch, st.model_chunk, -1);
    weight_grad_of([&] { head_backward(); });
    if (last) bucket_done(st.model_chunk, -1);
  }
  for (int64_t l = layers.end_layer() - 1; l >= layers.first_layer; --l) {
    context(Phase::kWeightGrad, st.micro_batch, st.model_chunk, l);
    weight_grad_of([&] { layer_backward(st.micro_batch, st.model_chunk, l); });
    if (last) bucket_done(st.model_chunk, l);
  }
  if (takes_embedding_vs(vs)) {
    context(Phase::kWeightGrad, st.micro_batch, st.model_chunk, -1);
    embedding_backward();
    if (last) bucket_done(st.model_chunk, -2);
  }
  close_compute();
  waits_.insert(waits_.end(), held.begin(), held.end());
}

}  // namespace traintwin::lowering
