// RankLowering: DP gradient buckets, parameter gathers, zero_grad,
// the gradient sync and the optimizer step; see core/rank_lowering.hpp.
#include "core/rank_lowering.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/error.hpp"

namespace traintwin::lowering {

void RankLowering::plan_buckets() {
  // ZeRO-3: one bucket per FSDP unit (transformer layer; the embedding and the head alone).
  const int64_t bucket_size = sc_.training.zero_stage() >= 3 ? 1 : ddp_bucket_size_params(sc_);
  const int64_t emb_local = d_.vocab_local * d_.h;
  buckets_.assign(static_cast<size_t>(d_.v), {});
  bucket_of_layer_.assign(static_cast<size_t>(d_.v), {});
  bucket_of_trigger_.assign(static_cast<size_t>(d_.v), {});
  forwarded_chunk_.assign(static_cast<size_t>(d_.v), false);
  last_backward_mb_.assign(static_cast<size_t>(d_.v), -1);
  last_weight_grad_mb_.assign(static_cast<size_t>(d_.v), -1);
  for (const auto& st : out_.schedule) {
    if (st.pass == Pass::kBackward) last_backward_mb_[static_cast<size_t>(st.model_chunk)] = st.micro_batch;
    if (st.pass == Pass::kWeightGrad) {
      last_weight_grad_mb_[static_cast<size_t>(st.model_chunk)] = st.micro_batch;
    }
  }
  for (int64_t c = 0; c < d_.v; ++c) {
    const int64_t vs = vstage(c);
    // (layer id, params, GEMM weights) in the order their gradients become ready.
    std::vector<std::tuple<int64_t, int64_t, int64_t>> items, expert_items;
    if (computes_loss_vs(vs)) {
      // Final norm, plus the LM head: its own weight when untied, the tied copy when the
      // embedding lives on another rank (not under a V, whose last stage is on rank 0 beside
      // the embedding, nor under DualPipe, whose end ranks hold both: one weight, as
      // core/params.cpp counts it).
      const bool head = sc_.model.untie_embeddings_and_output_weights || !rank_takes_embedding();
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
    if (takes_embedding_vs(vs)) items.emplace_back(-2, emb_local + (learned_positions ? d_.s_full * d_.h : 0), 0);
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
    fill(items, dense_shard_group());
    fill(expert_items, GroupKind::kEdp);
    // A bucket's trigger (its last id) is the trigger of at most one dense and one expert
    // bucket.
    auto& of_trigger = bucket_of_trigger_[static_cast<size_t>(c)];
    for (size_t b = 0; b < chunk.size(); ++b) of_trigger[chunk[b].trigger].push_back(b);
  }
}

int64_t RankLowering::moe_layers_on_rank() const {
  int64_t n = 0;
  for (int64_t c = 0; c < d_.v; ++c) {
    const ChunkLayers& layers = layers_of(c);
    for (int64_t l = layers.first_layer; l < layers.end_layer(); ++l) n += sc_.model.is_moe_layer(l);
  }
  return n;
}

void RankLowering::bucket_done(int64_t chunk, int64_t layer) {
  if (!sc_.training.overlap_grad_reduce && !reduces_every_micro_batch()) return;
  const auto& of_trigger = bucket_of_trigger_[static_cast<size_t>(chunk)];
  // The micro-batch whose backward (W under a split backward) completes the gradients: under
  // ZeRO-2/3 the earlier ones reduce-scatter too, but only this one syncs the HSDP replicas.
  const auto c = static_cast<size_t>(chunk);
  const bool last_mb = mb_ == (split_ ? last_weight_grad_mb_[c] : last_backward_mb_[c]);
  if (auto it = of_trigger.find(layer); it != of_trigger.end()) {
    for (size_t b : it->second) issue_grad_reduce(chunk, buckets_[c][b], last_mb);
  }
}

void RankLowering::issue_grad_reduce(int64_t chunk, Bucket& bucket, bool last_micro_batch) {
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
  if (dist && last_micro_batch && bucket.group == GroupKind::kDpShard) {
    // HSDP: this rank's shard of the reduced bucket, summed across the replicas (after the
    // reduce-scatter: the same stream keeps the order).
    const uint32_t replica = collective(
        CollectiveKind::kAllReduce, GroupKind::kDpReplica, Stream::kDpComm,
        ceil_div(bucket.params, layout_.size(GroupKind::kDpShard)) * d_.grad_bytes,
        "hsdp all_reduce grad shards");
    if (replica != kNoOp) {
      add_dep(replica, bucket.grad_op);
      grad_syncs_.push_back(replica);
      out_.ops[replica].bucket_layers.assign(bucket.layers.begin(), bucket.layers.end());
      bucket.grad_op = replica;
    }
  }
}

void RankLowering::issue_param_gathers(Phase phase) {
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
      return chunk[x].group != GroupKind::kEdp && chunk[y].group == GroupKind::kEdp;
    });
    for (size_t b : order) {
      Bucket& bucket = chunk[b];
      // ZeRO-3 gathers a transformer layer where it runs (fsdp_gather), not once per iteration.
      if (sc_.training.zero_stage() >= 3 && bucket.layers.size() == 1 && bucket.layers[0] >= 0) {
        continue;
      }
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
        // The parameters the host stepped are gathered once they are back (kNoOp: none).
        add_dep(bucket.param_gather_op, optimizer_h2d_);
      }
    }
  }
}

std::vector<uint32_t> RankLowering::issue_fsdp_gather(int64_t layer) {
  const RankParameters lp = layer_parameters_on_rank(sc_.model, sc_.parallel, layer);
  const Role before = role_;
  role(Role::kParamBucket);
  std::vector<uint32_t> ops;
  // FP8 parameters are gathered in FP8 (1 byte), the rest in the training precision.
  const bool f8 = sc_.training.fp8_param_gather;
  const auto gather = [&](int64_t params, int64_t gemm, GroupKind group, const char* what) {
    if (params == 0) return;
    const int64_t fp8_params = f8 ? gemm : 0;
    const uint32_t op = collective(CollectiveKind::kAllGather, group, Stream::kDpComm,
                                   (params - fp8_params) * d_.dsize + fp8_params, what);
    if (op == kNoOp) return;
    out_.ops[op].bucket_layers = {static_cast<int32_t>(layer)};
    ops.push_back(op);
  };
  gather(lp.dense, lp.dense_gemm, dense_shard_group(), "fsdp all_gather params");
  gather(lp.expert, lp.expert_gemm, GroupKind::kEdp, "fsdp all_gather expert params");
  role(before);
  return ops;
}

void RankLowering::fsdp_gather(int64_t chunk, int64_t layer, const std::vector<int64_t>& ahead) {
  std::vector<uint32_t> mine;
  if (auto it = fsdp_prefetched_.find({chunk, layer}); it != fsdp_prefetched_.end()) {
    mine = std::move(it->second);
    fsdp_prefetched_.erase(it);
  } else {
    mine = issue_fsdp_gather(layer);
  }
  for (int64_t next : ahead) {
    if (!fsdp_prefetched_.count({chunk, next})) {
      fsdp_prefetched_[{chunk, next}] = issue_fsdp_gather(next);
    }
  }
  for (uint32_t op : mine) wait(op);
}

std::vector<int64_t> RankLowering::fsdp_ahead(int64_t layer, int64_t step, int64_t first_layer,
                                              int64_t last_layer) const {
  std::vector<int64_t> ahead;
  for (int64_t k = 1; k <= sc_.training.fsdp_prefetch_depth; ++k) {
    const int64_t l = layer + k * step;
    if (l < first_layer || l > last_layer) break;
    ahead.push_back(l);
  }
  return ahead;
}

void RankLowering::wait_param_gather(int64_t chunk, int64_t layer) {
  const auto& of_layer = bucket_of_layer_[static_cast<size_t>(chunk)];
  if (auto it = of_layer.find(layer); it != of_layer.end()) {
    for (size_t b : it->second) wait(buckets_[static_cast<size_t>(chunk)][b].param_gather_op);
  }
}

void RankLowering::zero_grad_buffer() {
  context(Phase::kOptimizer, -1, -1, -1);
  role(Role::kZeroGradBuffer);
  kernel(k_.zero_grad_buffer(stage_parameters_on_rank(sc_, out_.coord.pp).total()),
         "zero grad buffer");
  close_compute();
}

void RankLowering::finalize_and_step() {
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
    for (int64_t chunk = 0; chunk < d_.v; ++chunk) {  // the final norm (DualPipe: per copy)
      if (computes_loss_vs(vstage(chunk))) ln_params += sc_.model.norm_parameters();
    }
    after_all(collective(CollectiveKind::kAllReduce, GroupKind::kTp, Stream::kTpComm,
                         ln_params * d_.grad_bytes, "tp all_reduce layernorm grads"));
  }
  role(Role::kEmbeddingGrads);
  // (ZB-V: the last stage is on rank 0 beside the embedding: one copy, no all-reduce. DualPipe:
  // ranks 0 and p - 1 hold one each, summed by the mirror all-reduce below.)
  const int64_t last_pp = rank_of_vstage_pp(num_vstages() - 1);
  const bool mirrored = bidirectional(sc_.parallel.pipeline_schedule);
  if (!sc_.model.untie_embeddings_and_output_weights && last_pp != 0 && !mirrored &&
      (c.pp == 0 || c.pp == last_pp)) {
    after_all(collective(CollectiveKind::kAllReduce, GroupKind::kEmbedding, Stream::kPpComm,
                         d_.vocab_local * d_.h * d_.grad_bytes, "embedding grads all_reduce"));
  }
  const bool dist = sc_.training.use_distributed_optimizer;
  const int64_t dp_cp = layout_.size(dense_shard_group());
  // Dense parameters sharded over DP x CP (its HSDP block), expert parameters over expert-DP.
  const RankParameters params = stage_parameters_on_rank(sc_, c.pp);
  const int64_t local =
      dist ? ceil_div(params.dense, dp_cp) +
                 (params.expert > 0 ? ceil_div(params.expert, layout_.size(GroupKind::kEdp)) : 0)
           : params.total();
  if (mirrored) {
    // DualPipe: ranks r and p - 1 - r hold the same two stages (one copy per direction); the
    // gradients the optimizer reads are summed over the pair (deepseek-ai/DualPipe,
    // examples/example_dualpipe.py adds each copy's gradient to its mirror's).
    role(Role::kMirrorGrads);
    after_all(collective(CollectiveKind::kAllReduce, GroupKind::kPpMirror, Stream::kPpComm,
                         local * d_.grad_bytes, "pp-mirror all_reduce grads"));
  }
  for (uint32_t x : done) wait(x);
  context(Phase::kOptimizer, -1, -1, -1);
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
  // CPU offload: the offloaded share steps on the host, beside the GPU's step of the rest.
  const int64_t on_gpu = offload_optimizer(local);
  role(Role::kOptimizerStep);
  if (on_gpu > 0) kernel(k_.adamw(on_gpu), "optimizer step");
  if (fp8()) {
    wait(optimizer_h2d_);  // the FP8 copies are cast from the updated parameters
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

}  // namespace traintwin::lowering
