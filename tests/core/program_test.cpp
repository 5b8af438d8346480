#include "core/program.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "core/error.hpp"
#include "core/kernel_catalogue.hpp"
#include "core/flops.hpp"
#include "core/fsdp_gather_once.hpp"
#include "core/memory.hpp"
#include "core/params.hpp"
#include "core/pipeline_split.hpp"
#include "sim/matching.hpp"
#include "models.hpp"

namespace traintwin {
namespace {

using ::testing::HasSubstr;

struct Knobs {
  int64_t tp = 1, pp = 1, dp = 1, v = 1, m = 1, b = 1, layers = 4, h = 64;
  bool sp = false;
  RecomputeGranularity recompute = RecomputeGranularity::kNone;
  PipelineScheduleKind schedule = PipelineScheduleKind::k1F1B;
  bool dist_opt = false, overlap_grad = false, overlap_param = false, tp_overlap = false;
  Precision precision = Precision::kBf16;
  std::string order = "tp-cp-dp-pp";
  // Uneven pipeline split (core/pipeline_split.hpp).
  std::optional<int64_t> first, last;
  bool account_embedding = false, account_loss = false;
  bool scatter_gather = false;  // parallelism.scatter_gather_tensors_in_pipeline
};

// A small GPT: h 64, 8 heads, ffn 4h, s 32, V 1024 (a multiple of 128 x TP, so no padding).
Scenario make(const Knobs& k) {
  Scenario s;
  s.name = "test";
  s.model = ModelSpec{"gpt", k.layers, k.h, 8, 4 * k.h, 32, 1024};
  s.parallel.tensor_model_parallel_size = k.tp;
  s.parallel.pipeline_model_parallel_size = k.pp;
  s.parallel.virtual_pipeline_model_parallel_size = k.v;
  s.parallel.data_parallel_size = k.dp;
  s.parallel.sequence_parallel = k.sp;
  s.parallel.pipeline_schedule = k.schedule;
  s.parallel.rank_order = k.order;
  s.parallel.decoder_first_pipeline_num_layers = k.first;
  s.parallel.decoder_last_pipeline_num_layers = k.last;
  s.parallel.account_for_embedding_in_pipeline_split = k.account_embedding;
  s.parallel.account_for_loss_in_pipeline_split = k.account_loss;
  s.parallel.scatter_gather_tensors_in_pipeline = k.scatter_gather;
  s.training.micro_batch_size = k.b;
  s.training.global_batch_size = k.m * k.b * k.dp;
  s.training.precision = k.precision;
  s.training.recompute_granularity = k.recompute;
  s.training.use_distributed_optimizer = k.dist_opt;
  s.training.overlap_grad_reduce = k.overlap_grad;
  s.training.overlap_param_gather = k.overlap_param;
  s.training.tp_comm_overlap = k.tp_overlap;
  s.cluster.num_gpus = k.tp * k.pp * k.dp;
  return s;
}

/// make(k) under Megatron-FSDP's ZeRO-3 (data_parallel_sharding_strategy optim_grads_params).
Scenario make_zero3(const Knobs& k) {
  Scenario s = make(k);
  s.training.use_megatron_fsdp = true;
  s.training.data_parallel_sharding_strategy = DataParallelShardingStrategy::kOptimGradsParams;
  return s;
}

// Replays every rank's ops with the Program's semantics and no costs: an op runs when its deps
// are done; a collective completes when every member of its group has reached its k-th
// collective on that group (and they agree on kind and bytes); a send completes with the recv of
// the same (src, dst, tag). Returns the number of ops left undone (0 = no deadlock) and fills
// `errors` with any mismatch.
size_t replay_all(const Program& prog, std::vector<std::string>& errors) {
  struct RankState {
    std::vector<bool> done;
    std::vector<bool> posted;
    std::vector<int64_t> seq;  // collective_sequence
  };
  std::map<int64_t, RankState> st;
  for (const auto& [r, rp] : prog.ranks) {
    st[r].done.assign(rp.ops.size(), false);
    st[r].posted.assign(rp.ops.size(), false);
    st[r].seq = collective_sequence(rp);
  }
  // The Program's matching rules (sim/matching.hpp), as the engines apply them.
  CollectiveRendezvous<std::pair<int64_t, uint32_t>> arrivals;
  TransferMatcher<std::pair<int64_t, uint32_t>> transfers;
  bool progress = true;
  while (progress) {
    progress = false;
    for (const auto& [r, rp] : prog.ranks) {
      auto& s = st[r];
      for (const Op& op : rp.ops) {
        if (s.posted[op.id]) continue;
        bool ready = true;
        for (uint32_t d : op.deps) {
          if (d >= op.id) errors.push_back("dep on a later op");
          ready = ready && s.done[d];
        }
        if (!ready) continue;
        s.posted[op.id] = true;
        progress = true;
        switch (op.kind) {
          case OpKind::kCompute:
          case OpKind::kHost: s.done[op.id] = true; break;
          case OpKind::kCollective: {
            const auto members = prog.layout.group(op.group, r);
            const auto arr = arrivals.arrive(collective_key(prog.layout, r, op, s.seq[op.id]),
                                             {r, op.id}, static_cast<int64_t>(members.size()));
            if (arr) {
              const Op& first = prog.ranks.at((*arr)[0].first).ops[(*arr)[0].second];
              for (auto [rr, id] : *arr) {
                const Op& o = prog.ranks.at(rr).ops[id];
                if (o.collective != first.collective || o.bytes != first.bytes) {
                  errors.push_back("collective mismatch: " + prog.label(o) + " vs " + prog.label(first));
                }
                st[rr].done[id] = true;
              }
            }
            break;
          }
          case OpKind::kSend:
          case OpKind::kRecv: {
            try {
              const auto other_side = transfers.post(transfer_key(r, op, op.peer),
                                                     op.kind == OpKind::kSend, {r, op.id});
              if (other_side) {
                const Op& other = prog.ranks.at(other_side->first).ops[other_side->second];
                if (other.bytes != op.bytes) errors.push_back("p2p bytes mismatch: " + prog.label(op));
                st[other_side->first].done[other_side->second] = true;
                s.done[op.id] = true;
              }
            } catch (const Error& e) {
              errors.push_back(std::string("duplicate p2p tag: ") + e.what());
            }
            break;
          }
        }
      }
    }
    // Completions of collectives/p2p may unblock ops in ranks already scanned: loop again.
    for (auto& [r, s] : st) {
      for (size_t i = 0; i < s.done.size(); ++i) {
        if (s.done[i] && !s.posted[i]) errors.push_back("done before posted");
      }
    }
  }
  size_t undone = 0;
  for (auto& [r, s] : st) {
    for (bool d : s.done) undone += d ? 0 : 1;
  }
  if (transfers.pending() != 0) errors.push_back("unmatched send/recv");
  if (arrivals.pending() != 0) errors.push_back("collective some member never reached");
  return undone;
}

// Every layout over a grid lowers to Programs that replay to completion: no deadlock between
// the PP batches, collectives issued in the same order by every member, sends matched by recvs.
TEST(Program, EveryLayoutReplaysWithoutDeadlockOrMismatch) {
  int cases = 0;
  for (int64_t tp : {1, 2}) {
    for (int64_t pp : {1, 2, 4}) {
      for (int64_t v : {1, 2}) {
        if (v > 1 && pp == 1) continue;
        for (int64_t m : {4, 8}) {
          for (bool sp : {false, true}) {
            if (sp && tp == 1) continue;
            for (auto rc : {RecomputeGranularity::kNone, RecomputeGranularity::kSelective,
                            RecomputeGranularity::kFull}) {
              for (int flags = 0; flags < 4; ++flags) {
                Knobs k;
                k.tp = tp, k.pp = pp, k.v = v, k.m = m, k.sp = sp, k.recompute = rc, k.dp = 2;
                k.layers = 4 * v * pp / (pp == 4 && v == 2 ? 2 : 1);
                k.dist_opt = flags & 1;
                k.overlap_grad = flags & 2;
                k.overlap_param = k.dist_opt && k.overlap_grad;
                k.tp_overlap = sp && (flags & 1);
                const Program prog = build_program(make(k));
                std::vector<std::string> errors;
                const size_t undone = replay_all(prog, errors);
                ASSERT_EQ(undone, 0u) << "tp " << tp << " pp " << pp << " v " << v << " m " << m;
                ASSERT_TRUE(errors.empty()) << errors.front();
                ++cases;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 100);
}

/// Uneven pipeline splits: the 126-layer PP 8 x VP 8 recipe shrunk to 6 layers on PP 2 x VP 2
/// with both account flags (chunks 1, 2, 2, 1), chunks holding only the embedding or only the
/// loss (2 layers: 0, 1, 1, 0), and first/last stage counts with and without interleaving.
std::vector<Knobs> uneven_knobs() {
  std::vector<Knobs> out;
  Knobs k;
  k.pp = 2, k.v = 2, k.m = 4, k.layers = 6, k.account_embedding = true, k.account_loss = true;
  out.push_back(k);
  k.layers = 2;
  out.push_back(k);
  k = Knobs();
  k.pp = 4, k.m = 4, k.layers = 10, k.first = 1, k.last = 3;  // 1, 3, 3, 3
  out.push_back(k);
  k = Knobs();
  k.pp = 4, k.v = 2, k.m = 4, k.layers = 16, k.first = 2, k.last = 2;  // 2, 6, 6, 2
  out.push_back(k);
  k = Knobs();
  k.pp = 4, k.m = 4, k.layers = 7, k.account_embedding = true;  // 1, 2, 2, 2
  out.push_back(k);
  return out;
}

TEST(Program, UnevenSplitsReplayWithoutDeadlockOrMismatch) {
  for (const Knobs& base : uneven_knobs()) {
    for (int flags = 0; flags < 8; ++flags) {
      Knobs k = base;
      k.tp = 2, k.dp = 2, k.sp = flags & 4;
      k.dist_opt = flags & 1;
      k.overlap_grad = flags & 2;
      k.overlap_param = k.dist_opt && k.overlap_grad;
      k.recompute = flags & 1 ? RecomputeGranularity::kFull : RecomputeGranularity::kSelective;
      const Program prog = build_program(make(k));
      std::vector<std::string> errors;
      ASSERT_EQ(replay_all(prog, errors), 0u) << "layers " << k.layers << " flags " << flags;
      ASSERT_TRUE(errors.empty()) << errors.front();
    }
  }
}

// Each rank runs the forward and backward of exactly the layers the split gives its chunks, the
// embedding on virtual stage 0 and the LM head on the last one; every layer runs on one stage.
TEST(Program, UnevenSplitLowersEachChunksOwnLayers) {
  for (const Knobs& k : uneven_knobs()) {
    const Scenario s = make(k);
    const Program prog = build_program(s);
    std::map<int64_t, int64_t> stage_of_layer;
    for (const auto& [r, rp] : prog.ranks) {
      std::map<int64_t, std::set<int64_t>> forward_layers;  // chunk -> layers
      std::set<int64_t> head_chunks, embedding_chunks;
      for (const Op& op : rp.ops) {
        if (op.kind != OpKind::kCompute || op.phase != Phase::kForward) continue;
        if (op.layer >= 0) forward_layers[op.model_chunk].insert(op.layer);
        for (Role role : op.kernel_roles) {
          if (role == Role::kLmHead) head_chunks.insert(op.model_chunk);
          if (role == Role::kEmbedding) embedding_chunks.insert(op.model_chunk);
        }
      }
      for (int64_t c = 0; c < k.v; ++c) {
        const ChunkLayers want = chunk_layers(s, rp.coord.pp, c);
        std::set<int64_t> expected;
        for (int64_t l = want.first_layer; l < want.end_layer(); ++l) {
          expected.insert(l);
          stage_of_layer[l] = rp.coord.pp;
        }
        EXPECT_EQ(forward_layers[c], expected) << "layers " << k.layers << " stage "
                                               << rp.coord.pp << " chunk " << c;
        const int64_t vs = c * k.pp + rp.coord.pp;
        EXPECT_EQ(embedding_chunks.count(c), vs == 0 ? 1u : 0u);
        EXPECT_EQ(head_chunks.count(c), vs == k.pp * k.v - 1 ? 1u : 0u);
      }
    }
    EXPECT_EQ(static_cast<int64_t>(stage_of_layer.size()), k.layers);
  }
}

/// True when op `later` of `rp` depends on op `earlier`, directly or through other ops.
bool depends_on(const RankProgram& rp, uint32_t later, uint32_t earlier) {
  std::vector<uint32_t> todo = {later};
  std::set<uint32_t> seen;
  while (!todo.empty()) {
    const uint32_t id = todo.back();
    todo.pop_back();
    if (id == earlier) return true;
    if (!seen.insert(id).second) continue;
    for (uint32_t d : rp.ops[id].deps) todo.push_back(d);
  }
  return false;
}

// Every op that reads a received tensor runs after its recv, also where a chunk holds no
// transformer layer: with SP, the embedding's backward starts with the all-gather of the output
// gradient, which in an embedding-only first chunk comes straight from the next stage.
TEST(Program, UnevenSplitEmbeddingOnlyChunkWaitsForItsGradient) {
  for (const Knobs& base : uneven_knobs()) {
    for (bool sp : {false, true}) {
      Knobs k = base;
      k.tp = 2, k.sp = sp;
      const Program prog = build_program(make(k));
      for (const auto& [r, rp] : prog.ranks) {
        if (rp.coord.pp != 0) continue;
        std::map<int32_t, uint32_t> recv_grad;  // micro-batch -> recv of chunk 0's output grad
        for (const Op& op : rp.ops) {
          // Tag (mb x stages + sender's virtual stage 1) x 2 + 1: vs 1 sends vs 0 its input grad.
          if (op.kind == OpKind::kRecv && op.tag % 2 == 1 && (op.tag / 2) % (k.pp * k.v) == 1) {
            recv_grad[static_cast<int32_t>(op.tag / 2 / (k.pp * k.v))] = op.id;
          }
        }
        int checked = 0;
        for (const Op& op : rp.ops) {
          const bool embedding = op.role == Role::kEmbedding ||
                                 (!op.kernel_roles.empty() && op.kernel_roles.front() == Role::kEmbedding);
          if (op.phase != Phase::kBackward || op.model_chunk != 0 || !embedding) continue;
          ASSERT_TRUE(recv_grad.count(op.micro_batch)) << "layers " << k.layers;
          EXPECT_TRUE(depends_on(rp, op.id, recv_grad[op.micro_batch]))
              << "layers " << k.layers << " sp " << sp << " op " << prog.label(op);
          ++checked;
        }
        EXPECT_GE(checked, k.m);
      }
    }
  }
}

// Under an uneven split the FLOPs still add up to the model's, and the DP buckets of each rank
// carry its own parameters (parameters_on_rank follows the split) once.
TEST(Program, UnevenSplitFlopsAndBucketsFollowTheSplit) {
  for (Knobs k : uneven_knobs()) {
    k.dp = 2, k.overlap_grad = true;
    const Scenario s = make(k);
    const Program prog = build_program(s);
    double matmul_flops = 0;
    for (const auto& [r, rp] : prog.ranks) {
      int64_t grad_bytes = 0;
      for (const Op& op : rp.ops) {
        for (uint32_t id : op.kernels) {
          const Kernel& kern = prog.kernels[id];
          if (kern.key.name.rfind("gemm", 0) == 0 || kern.key.name.rfind("attention", 0) == 0) {
            matmul_flops += kern.flops;
          }
        }
        if (op.kind == OpKind::kCollective && op.phase == Phase::kGradSync &&
            op.group == GroupKind::kDpCp) {
          grad_bytes += op.bytes;
        }
      }
      EXPECT_EQ(grad_bytes, parameters_on_rank(s, rp.coord.pp) * 4) << "rank " << r;
    }
    const double expected =
        hardware_flops_per_iteration(s.model, s.training.global_batch_size, k.recompute);
    EXPECT_NEAR(matmul_flops / expected, 1.0, 1e-12) << "layers " << k.layers;
  }
}

TEST(Program, GPipeReplaysToo) {
  Knobs k;
  k.pp = 4, k.m = 6, k.tp = 2, k.dp = 2, k.schedule = PipelineScheduleKind::kGPipe;
  std::vector<std::string> errors;
  EXPECT_EQ(replay_all(build_program(make(k)), errors), 0u);
  EXPECT_TRUE(errors.empty());
}

// Summed over all ranks, the GEMM and attention FLOPs of the Program equal the hardware FLOPs
// of the FLOP model (fwd + bwd + recomputation), for every recompute granularity and layout.
TEST(Program, FlopsOverAllRanksEqualHardwareFlops) {
  for (auto rc : {RecomputeGranularity::kNone, RecomputeGranularity::kSelective,
                  RecomputeGranularity::kFull}) {
    for (auto [tp, pp, dp, v, sp] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, bool>>{
             {1, 1, 1, 1, false}, {2, 2, 2, 1, true}, {4, 2, 1, 2, false}, {2, 4, 1, 1, true}}) {
      Knobs k;
      k.tp = tp, k.pp = pp, k.dp = dp, k.v = v, k.sp = sp, k.recompute = rc, k.m = 4, k.b = 2;
      k.layers = 8;
      const Scenario s = make(k);
      const Program prog = build_program(s);
      double matmul_flops = 0;
      for (const auto& [r, rp] : prog.ranks) {
        for (const Op& op : rp.ops) {
          for (uint32_t id : op.kernels) {
            const Kernel& kern = prog.kernels[id];
            if (kern.key.name.rfind("gemm", 0) == 0 || kern.key.name.rfind("attention", 0) == 0) {
              matmul_flops += kern.flops;
            }
          }
        }
      }
      const double expected = hardware_flops_per_iteration(s.model, s.training.global_batch_size, rc);
      EXPECT_NEAR(matmul_flops / expected, 1.0, 1e-12) << "tp " << tp << " pp " << pp;
    }
  }
}

int64_t count(const RankProgram& rp, OpKind kind, Stream stream, Phase phase, int32_t mb = -2) {
  int64_t n = 0;
  for (const Op& op : rp.ops) {
    if (op.kind == kind && op.stream == stream && op.phase == phase && (mb == -2 || op.micro_batch == mb)) ++n;
  }
  return n;
}

// Megatron's TP communication per transformer layer and micro-batch (Korthikanti et al. fig. 5):
// without SP 2 all-reduces forward and 2 backward (the column-parallel input gradients);
// with SP 2 all-gathers + 2 reduce-scatters forward, and backward 2 reduce-scatters, 2
// all-gathers of the output gradient and 2 all-gathers of the saved inputs.
TEST(Program, TensorParallelCollectivesPerLayerAsMegatron) {
  for (bool sp : {false, true}) {
    Knobs k;
    k.tp = 4, k.sp = sp, k.layers = 3, k.m = 2;
    const Program prog = build_program(make(k), {0});
    const RankProgram& rp = prog.ranks.at(0);
    std::map<std::pair<Phase, CollectiveKind>, int64_t> per_layer;
    for (const Op& op : rp.ops) {
      if (op.kind == OpKind::kCollective && op.layer == 1 && op.micro_batch == 0) {
        ++per_layer[{op.phase, op.collective}];
        EXPECT_EQ(op.group, GroupKind::kTp);
        EXPECT_EQ(op.bytes, 32 * 64 * 2);  // s * b * h * 2 bytes
      }
    }
    using P = std::pair<Phase, CollectiveKind>;
    if (!sp) {
      EXPECT_EQ(per_layer, (std::map<P, int64_t>{{{Phase::kForward, CollectiveKind::kAllReduce}, 2},
                                                 {{Phase::kBackward, CollectiveKind::kAllReduce}, 2}}));
    } else {
      EXPECT_EQ(per_layer, (std::map<P, int64_t>{{{Phase::kForward, CollectiveKind::kAllGather}, 2},
                                                 {{Phase::kForward, CollectiveKind::kReduceScatter}, 2},
                                                 {{Phase::kBackward, CollectiveKind::kAllGather}, 4},
                                                 {{Phase::kBackward, CollectiveKind::kReduceScatter}, 2}}));
    }
  }
  Knobs one;
  one.layers = 2;
  const Program prog = build_program(make(one), {0});
  EXPECT_EQ(count(prog.ranks.at(0), OpKind::kCollective, Stream::kTpComm, Phase::kForward), 0);
}

// --no-async-tensor-model-parallel-allreduce (Megatron-LM before Oct 2021): a column-parallel
// layer's input-gradient all-reduce follows the layer's whole backward and blocks; with the async
// all-reduce (the default) it is issued after the input-gradient GEMM and the weight-gradient GEMM
// runs beside it. TP 2, 2 layers: the LM head, each layer's QKV and FC1 (1 + 2 x 2 all-reduces).
TEST(Program, AsyncTpAllReduceOffFollowsTheWeightGradient) {
  for (bool async : {true, false}) {
    SCOPED_TRACE(async ? "async" : "blocking");
    Knobs k;
    k.tp = 2, k.layers = 2, k.m = 1;
    Scenario sc = make(k);
    sc.training.async_tensor_model_parallel_allreduce = async;
    const Program prog = build_program(sc, {0});
    const std::vector<Op>& ops = prog.ranks.at(0).ops;
    const auto kernel_name = [&](uint32_t kid) { return prog.kernels[kid].key.name; };
    int checked = 0;
    for (const Op& op : ops) {
      if (op.kind != OpKind::kCollective || op.phase != Phase::kBackward ||
          std::string(op.what) != "tp all_reduce grad") {
        continue;
      }
      const Op* before = nullptr;
      const Op* after = nullptr;
      for (const Op& o : ops) {
        if (o.kind != OpKind::kCompute) continue;
        if (o.id < op.id) before = &o;
        if (o.id > op.id && after == nullptr) after = &o;
      }
      ASSERT_NE(before, nullptr);
      ASSERT_NE(after, nullptr);
      const bool after_waits = std::find(after->deps.begin(), after->deps.end(), op.id) != after->deps.end();
      if (async) {  // the wgrad GEMM runs beside the all-reduce, the next op waits for it
        EXPECT_EQ(kernel_name(before->kernels.back()), "gemm_dgrad");
        EXPECT_EQ(kernel_name(after->kernels.front()), "gemm_wgrad");
        EXPECT_FALSE(after_waits);
      } else {  // the whole backward of the layer first, then the blocking all-reduce
        EXPECT_EQ(kernel_name(before->kernels.back()), "gemm_wgrad");
        EXPECT_TRUE(after_waits);
      }
      ++checked;
    }
    EXPECT_EQ(checked, 1 + 2 * 2);
  }
}

// Recomputation inserts the forward work before backward: full = each layer's whole forward
// (with its TP collectives), selective = the attention core only.
TEST(Program, RecomputationOpsPerGranularity) {
  for (auto rc : {RecomputeGranularity::kNone, RecomputeGranularity::kSelective,
                  RecomputeGranularity::kFull}) {
    Knobs k;
    k.tp = 2, k.layers = 3, k.m = 2, k.recompute = rc;
    const Program prog = build_program(make(k), {0});
    int64_t recompute_attention = 0, recompute_gemms = 0, recompute_colls = 0;
    for (const Op& op : prog.ranks.at(0).ops) {
      if (op.phase != Phase::kRecompute) continue;
      if (op.kind == OpKind::kCollective) ++recompute_colls;
      for (uint32_t id : op.kernels) {
        const auto& name = prog.kernels[id].key.name;
        recompute_attention += name == "attention_fwd" || name == "flash_attention_fwd";
        recompute_gemms += name == "gemm_fwd";
      }
    }
    const int64_t layer_passes = 3 * 2;  // layers x micro-batches
    EXPECT_EQ(recompute_attention, rc == RecomputeGranularity::kNone ? 0 : layer_passes);
    EXPECT_EQ(recompute_gemms, rc == RecomputeGranularity::kFull ? 4 * layer_passes : 0);
    EXPECT_EQ(recompute_colls, rc == RecomputeGranularity::kFull ? 2 * layer_passes : 0);
  }
}

// torchtitan's op-level selective activation checkpointing (selective_ac_option op) on a small
// Llama layer (h 64, 4 heads, 2 KV heads, ffn 160, s 32, b 2: 64 tokens), 3 layers x 2
// micro-batches: each layer's backward starts with the recompute of wk (64 x 32 x 64), wo
// (64 x 64 x 64) and w3 (64 x 160 x 64) and no attention core, 2 x 64 x (2048 + 4096 + 10240) =
// 2,097,152 FLOPs in its GEMMs (op_sac_recompute_forward_flops for 2 samples), plus RoPE, two
// norms, the residual add and the SwiGLU product; Megatron's selective (core_attn) recomputes the
// attention core instead and no GEMM.
TEST(Program, TorchtitanOpLevelSacRecomputesWkWoW3) {
  for (auto option : {SelectiveAcOption::kCoreAttn, SelectiveAcOption::kOp}) {
    Scenario s = make(Knobs{.m = 2, .b = 2, .layers = 3});
    s.model = testing::llama(3, 64, 160, 4, 2, 32, 1024);
    s.training.recompute_granularity = RecomputeGranularity::kSelective;
    s.training.selective_ac_option = option;
    s.training.attention_backend = AttentionBackend::kFlash;
    const Program prog = build_program(s, {0});
    double gemm_flops = 0;
    int64_t gemms = 0, attention = 0, rope = 0, other = 0;
    std::multiset<std::vector<int64_t>> shapes;
    for (const Op& op : prog.ranks.at(0).ops) {
      if (op.phase != Phase::kRecompute) continue;
      EXPECT_EQ(op.kind, OpKind::kCompute);
      for (uint32_t id : op.kernels) {
        const Kernel& kern = prog.kernels[id];
        const std::string& name = kern.key.name;
        if (name == "gemm_fwd") {
          ++gemms;
          gemm_flops += kern.flops;
          shapes.insert(kern.key.shape);
        } else if (name.find("attention") != std::string::npos) {
          ++attention;
        } else if (name.find("rope") != std::string::npos) {
          ++rope;
        } else {
          ++other;
        }
      }
    }
    const int64_t passes = 3 * 2;
    if (option == SelectiveAcOption::kCoreAttn) {
      EXPECT_EQ(gemms, 0);
      EXPECT_EQ(attention, passes);
      continue;
    }
    EXPECT_EQ(attention, 0);
    EXPECT_EQ(gemms, 3 * passes);
    EXPECT_EQ(rope, passes);
    EXPECT_EQ(other, 4 * passes);  // two norms, the residual add, the SwiGLU product
    EXPECT_EQ(gemm_flops, passes * 2097152.0);
    EXPECT_EQ(gemm_flops, passes * op_sac_recompute_forward_flops(s.model, 2));
    EXPECT_EQ(shapes.count({64, 32, 64}), static_cast<size_t>(passes));   // wk
    EXPECT_EQ(shapes.count({64, 64, 64}), static_cast<size_t>(passes));   // wo
    EXPECT_EQ(shapes.count({64, 160, 64}), static_cast<size_t>(passes));  // w3
  }
}

// DP gradient reduce: the buckets carry every parameter of the rank once (fp32 grads for bf16);
// with the distributed optimizer they are reduce-scatters followed by all-gathers of the bf16
// parameters; with overlap_grad_reduce they start inside the last micro-batch's backward.
// h = 1024: 12.6M parameters per layer, so a stage of 6 layers fills two buckets of >= 40M.
TEST(Program, DataParallelBucketsCoverEveryParameterOnce) {
  for (bool dist : {false, true}) {
    for (bool overlap : {false, true}) {
      Knobs k;
      k.pp = 2, k.dp = 4, k.m = 4, k.layers = 12, k.h = 1024, k.dist_opt = dist, k.overlap_grad = overlap;
      const Scenario s = make(k);
      const Program prog = build_program(s);
      for (const auto& [r, rp] : prog.ranks) {
        int64_t grad_bytes = 0, param_bytes = 0;
        uint32_t first_sync = UINT32_MAX, last_backward = 0;
        for (const Op& op : rp.ops) {
          if (op.kind == OpKind::kCollective && op.group == GroupKind::kDpCp) {
            if (op.phase == Phase::kGradSync) {
              grad_bytes += op.bytes;
              first_sync = std::min(first_sync, op.id);
              EXPECT_EQ(op.collective, dist ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce);
            } else {
              EXPECT_EQ(op.phase, Phase::kParamSync);
              EXPECT_EQ(op.collective, CollectiveKind::kAllGather);
              param_bytes += op.bytes;
            }
          }
          if (op.kind == OpKind::kCompute && op.phase == Phase::kBackward) last_backward = op.id;
        }
        const int64_t params = parameters_on_rank(s, rp.coord.pp);
        EXPECT_EQ(grad_bytes, params * 4);
        EXPECT_EQ(param_bytes, dist ? params * 2 : 0);
        int64_t syncs = 0;
        for (const Op& op : rp.ops) syncs += op.phase == Phase::kGradSync && op.group == GroupKind::kDpCp;
        EXPECT_EQ(syncs, overlap ? 2 : 1);  // the first bucket closes at 4 x 12.6M (+1M head)
        if (overlap) {
          EXPECT_LT(first_sync, last_backward) << "grad reduce overlaps the backward";
        } else {
          EXPECT_GT(first_sync, last_backward);
        }
      }
    }
  }
}

// The same under the V of zb-v and dualpipev (tied embedding): rank 0 holds the first and the
// last virtual stage, so the LM head is the embedding's weight, counted once (core/params.cpp)
// and reduced once over DP; no rank all-reduces the embedding over the embedding group.
TEST(Program, DataParallelBucketsUnderAVCountTheTiedHeadOnce) {
  for (PipelineScheduleKind kind : {PipelineScheduleKind::kZbV, PipelineScheduleKind::kDualPipeV}) {
    Knobs k;
    k.pp = 2, k.v = 2, k.dp = 2, k.m = 4, k.layers = 8, k.schedule = kind;
    const Scenario s = make(k);
    const Program prog = build_program(s);
    for (const auto& [r, rp] : prog.ranks) {
      int64_t grad_bytes = 0, embedding_all_reduces = 0;
      for (const Op& op : rp.ops) {
        if (op.kind != OpKind::kCollective) continue;
        if (op.group == GroupKind::kDpCp && op.phase == Phase::kGradSync) grad_bytes += op.bytes;
        embedding_all_reduces += op.group == GroupKind::kEmbedding;
      }
      EXPECT_EQ(grad_bytes, parameters_on_rank(s, rp.coord.pp) * 4) << "rank " << r;
      EXPECT_EQ(embedding_all_reduces, 0) << "rank " << r;
    }
  }
}

// Every kernel and communication op carries the role the executor dispatches on: a layer's
// forward kernels in Megatron's order, each collective tagged with the computation it serves, and
// every bucket op lists the layers whose gradients it holds (each layer once per chunk).
TEST(Program, RolesTagEveryKernelAndCommunication) {
  Knobs k;
  k.tp = 2, k.pp = 2, k.dp = 2, k.m = 4, k.layers = 4, k.sp = true, k.overlap_grad = true;
  const Program prog = build_program(make(k));
  const std::vector<Role> layer_fwd = {
      Role::kInputLayerNorm, Role::kQkv,   Role::kAttentionCore, Role::kAttentionProjection,
      Role::kAttentionResidual, Role::kPostAttentionLayerNorm, Role::kFc1, Role::kGelu,
      Role::kFc2, Role::kMlpResidual};
  for (const auto& [r, rp] : prog.ranks) {
    std::map<std::tuple<int, int, int>, std::vector<Role>> fwd;  // (mb, chunk, layer) -> roles
    std::map<int32_t, int> bucketed;
    for (const Op& op : rp.ops) {
      if (op.kind == OpKind::kCompute) {
        ASSERT_EQ(op.kernel_roles.size(), op.kernels.size());
        for (size_t i = 0; i < op.kernels.size(); ++i) {
          EXPECT_NE(op.kernel_roles[i], Role::kNone) << prog.label(op);
          if (op.phase == Phase::kForward && op.layer >= 0) {
            fwd[{op.micro_batch, op.model_chunk, op.layer}].push_back(op.kernel_roles[i]);
          }
        }
        continue;
      }
      EXPECT_NE(op.role, Role::kNone) << prog.label(op);
      if (op.kind != OpKind::kCollective) {
        EXPECT_EQ(op.role, Role::kPipeline);
      }
      if (op.role == Role::kGradBucket) {
        EXPECT_FALSE(op.bucket_layers.empty());
        for (int32_t l : op.bucket_layers) ++bucketed[l];
      }
      if (op.collective == CollectiveKind::kAllGather && op.group == GroupKind::kTp &&
          op.phase == Phase::kForward) {
        EXPECT_TRUE(op.role == Role::kQkv || op.role == Role::kFc1 || op.role == Role::kLmHead)
            << prog.label(op);
      }
    }
    EXPECT_EQ(fwd.size(), 4u * 2u);  // 4 micro-batches x 2 layers of this stage
    for (const auto& [key, roles] : fwd) EXPECT_EQ(roles, layer_fwd);
    const int32_t first = static_cast<int32_t>(rp.coord.pp * 2);
    EXPECT_EQ(bucketed[first], 1);
    EXPECT_EQ(bucketed[first + 1], 1);
    EXPECT_EQ(bucketed.count(rp.coord.pp == 0 ? -2 : -1), 1u);
  }
}

// Megatron's DDP bucket size: max(40M, 1M x DP x CP) parameters with overlap, else one bucket.
TEST(Program, BucketSizeAsMegatron) {
  Knobs k;
  k.dp = 8, k.overlap_grad = true;
  EXPECT_EQ(ddp_bucket_size_params(make(k)), 40'000'000);
  k.dp = 64;
  EXPECT_EQ(ddp_bucket_size_params(make(k)), 64'000'000);
  k.overlap_grad = false;
  EXPECT_EQ(ddp_bucket_size_params(make(k)), 0);
}

// Pipeline p2p: every stage but the last sends one activation per micro-batch and chunk forward
// (s/t * b * h elements with SP, else s * b * h); every stage but the first one gradient back.
TEST(Program, PipelineSendsPerMicroBatch) {
  for (bool sp : {false, true}) {
    Knobs k;
    k.tp = 2, k.pp = 4, k.v = 2, k.m = 8, k.layers = 8, k.sp = sp;
    const Program prog = build_program(make(k));
    for (const auto& [r, rp] : prog.ranks) {
      int64_t sends = 0;
      for (const Op& op : rp.ops) {
        if (op.kind != OpKind::kSend) continue;
        ++sends;
        EXPECT_EQ(op.bytes, (sp ? 16 : 32) * 64 * 2);
      }
      // 8 micro-batches x 2 chunks x (forward + backward), less the ends of the virtual pipeline.
      int64_t expected = 8 * 2 * 2;
      if (rp.coord.pp == 3) expected -= 8;  // last virtual stage sends no activation forward
      if (rp.coord.pp == 0) expected -= 8;  // first virtual stage sends no gradient back
      EXPECT_EQ(sends, expected) << "rank " << r;
    }
  }
}

// Megatron-LM's pipeline scatter/gather (Narayanan et al. SC'21, section 4.1; Megatron-LM
// p2p_communication._communicate: split_tensor_into_1d_equal_chunks before the send,
// gather_split_1d_tensor after the batch's wait): without SP each TP rank sends 1/TP of the
// [s, b, h] tensor, and every received chunk is all-gathered over TP (the whole tensor) before
// the compute that uses it. With SP the tensor is already split: nothing changes.
TEST(Program, PipelineScatterGatherSendsOneTpShareAndGathersIt) {
  for (bool sp : {false, true}) {
    Knobs k;
    k.tp = 2, k.pp = 4, k.v = 2, k.m = 8, k.layers = 8, k.sp = sp, k.scatter_gather = true;
    const Program prog = build_program(make(k));
    std::vector<std::string> errors;
    EXPECT_EQ(replay_all(prog, errors), 0u);
    EXPECT_TRUE(errors.empty()) << (errors.empty() ? "" : errors.front());
    // s b h x 2 bytes = 32 x 64 x 2 for the whole tensor; SP or scatter/gather send half.
    const int64_t whole = 32 * 64 * 2;
    for (const auto& [r, rp] : prog.ranks) {
      int64_t recvs = 0, gathers = 0;
      for (const Op& op : rp.ops) {
        if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) EXPECT_EQ(op.bytes, whole / 2);
        if (op.kind == OpKind::kRecv) ++recvs;
        if (op.kind != OpKind::kCollective || op.what != std::string("pp all_gather (scatter/gather)")) {
          continue;
        }
        ++gathers;
        EXPECT_EQ(op.collective, CollectiveKind::kAllGather);
        EXPECT_EQ(op.group, GroupKind::kTp);
        EXPECT_EQ(op.bytes, whole);  // the gathered [s, b, h] tensor
        const bool after_recv = std::any_of(op.deps.begin(), op.deps.end(), [&](uint32_t d) {
          return rp.ops[d].kind == OpKind::kRecv;
        });
        EXPECT_TRUE(after_recv) << prog.label(op);
        // The next compute op waits for the gather.
        const auto next = std::find_if(rp.ops.begin() + op.id, rp.ops.end(),
                                       [](const Op& o) { return o.kind == OpKind::kCompute; });
        ASSERT_NE(next, rp.ops.end());
        EXPECT_NE(std::find(next->deps.begin(), next->deps.end(), op.id), next->deps.end())
            << prog.label(*next);
      }
      EXPECT_EQ(gathers, sp ? 0 : recvs) << "rank " << r;
      EXPECT_GT(recvs, 0) << "rank " << r;
    }
  }
}

// The first and last stage all-reduce the tied embedding's gradient when PP > 1, and with SP the
// LayerNorm gradients are all-reduced over TP.
TEST(Program, EmbeddingAndLayerNormGradientAllReduces) {
  Knobs k;
  k.tp = 2, k.pp = 4, k.m = 4, k.sp = true;
  const Program prog = build_program(make(k));
  for (const auto& [r, rp] : prog.ranks) {
    int64_t embd = 0, ln = 0;
    for (const Op& op : rp.ops) {
      if (op.kind != OpKind::kCollective || op.phase != Phase::kGradSync) continue;
      if (op.group == GroupKind::kEmbedding) {
        ++embd;
        EXPECT_EQ(op.bytes, 1024 / 2 * 64 * 4);
      }
      if (op.group == GroupKind::kTp) ++ln;
    }
    EXPECT_EQ(embd, (rp.coord.pp == 0 || rp.coord.pp == 3) ? 1 : 0);
    EXPECT_EQ(ln, 1);
  }
}

// With tp_comm_overlap the SP all-gather/reduce-scatter and their GEMMs are split into TP pieces.
TEST(Program, TpCommOverlapSplitsCollectivesIntoPieces) {
  Knobs k;
  k.tp = 4, k.sp = true, k.layers = 1, k.m = 1, k.tp_overlap = true;
  const Program prog = build_program(make(k), {0});
  int64_t pieces = 0;
  for (const Op& op : prog.ranks.at(0).ops) {
    if (op.kind == OpKind::kCollective && op.phase == Phase::kForward && op.layer == 0) {
      ++pieces;
      EXPECT_EQ(op.bytes, 32 * 64 * 2 / 4);
    }
  }
  EXPECT_EQ(pieces, 4 * 4);  // 2 all-gathers + 2 reduce-scatters, 4 pieces each
}

// The attention backend picks the kernels: unfused attention_fwd/bwd move the s x s scores
// through memory, flash_attention_fwd/bwd and fused_attention_fwd/bwd do not; the FLOPs are the
// same.
TEST(Program, AttentionBackendPicksTheKernels) {
  Knobs k;
  k.layers = 1;
  Scenario s = make(k);
  const Program unfused = build_program(s, {0});
  s.training.attention_backend = AttentionBackend::kFlash;
  const Program flash = build_program(s, {0});
  auto find = [](const Program& p, const std::string& name) -> const Kernel* {
    for (const Kernel& kern : p.kernels) {
      if (kern.key.name == name) return &kern;
    }
    return nullptr;
  };
  ASSERT_NE(find(unfused, "attention_fwd"), nullptr);
  ASSERT_EQ(find(unfused, "flash_attention_fwd"), nullptr);
  const Kernel* f = find(flash, "flash_attention_fwd");
  const Kernel* u = find(unfused, "attention_fwd");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(find(flash, "attention_fwd"), nullptr);
  EXPECT_EQ(f->flops, u->flops);
  // Unfused moves b * heads * s^2 scores at 12 bytes each (bf16: baddbmm writes 2, the causal
  // softmax reads 1 and writes 2, dropout reads 2 and writes 2 + a 1-byte mask, the AV bmm
  // reads 2; tests/core/kernel_bytes_test.cpp) and copies the context once more (b s heads d x
  // 2 x 2 bytes): 1 * 8 * 32 * 32 * 12 + 32 * 8 * 8 * 4 more bytes than flash.
  EXPECT_DOUBLE_EQ(u->bytes - f->bytes, 8.0 * 32 * 32 * 12 + 32.0 * 8 * 8 * 4);
  // fused (cuDNN's fused attention): flash's work under its own names, so a database times it
  // apart from the flash kernels.
  s.training.attention_backend = AttentionBackend::kFused;
  const Program fused = build_program(s, {0});
  EXPECT_EQ(find(fused, "flash_attention_fwd"), nullptr);
  for (const char* dir : {"fwd", "bwd"}) {
    const Kernel* x = find(fused, std::string("fused_attention_") + dir);
    const Kernel* y = find(flash, std::string("flash_attention_") + dir);
    ASSERT_NE(x, nullptr) << dir;
    ASSERT_NE(y, nullptr) << dir;
    EXPECT_EQ(x->key.shape, y->key.shape) << dir;
    EXPECT_EQ(x->flops, y->flops) << dir;
    EXPECT_EQ(x->bytes, y->bytes) << dir;
  }
}

// Megatron-FSDP over DP 2 with 3 micro-batches and 4 layers (each its own FSDP unit and, under
// ZeRO-3, its own gradient bucket). ZeRO-1 (the distributed optimizer) reduce-scatters each
// bucket once, after the last micro-batch; ZeRO-2 keeps only a gradient shard, so every
// micro-batch reduce-scatters its buckets (3x as many); ZeRO-3 also gathers each layer before
// its forward and again before its backward, every micro-batch (2 x 3 x 4 = 24 gathers), and
// no longer gathers the layers once per iteration after the step.
TEST(Program, MegatronFsdpReducesEveryMicroBatchAndGathersEveryLayer) {
  Knobs k;
  k.dp = 2;
  k.m = 3;
  k.dist_opt = true;
  k.overlap_grad = true;
  Scenario s = make(k);
  auto count = [](const Program& p, std::string_view what) {
    int n = 0;
    for (const Op& op : p.ranks.at(0).ops) n += std::string_view(op.what) == what;
    return n;
  };
  const Program zero1 = build_program(s);
  const int rs1 = count(zero1, "dp reduce_scatter grads");
  ASSERT_GT(rs1, 0);
  EXPECT_EQ(count(zero1, "fsdp all_gather params"), 0);
  const int layer_gathers1 = count(zero1, "dp all_gather params");
  s.training.use_megatron_fsdp = true;
  s.training.data_parallel_sharding_strategy = DataParallelShardingStrategy::kOptimGrads;
  const Program zero2 = build_program(s);
  EXPECT_EQ(count(zero2, "dp reduce_scatter grads"), 3 * rs1);
  EXPECT_EQ(count(zero2, "dp all_gather params"), layer_gathers1);
  s.training.data_parallel_sharding_strategy = DataParallelShardingStrategy::kOptimGradsParams;
  const Program zero3 = build_program(s);
  EXPECT_EQ(count(zero3, "fsdp all_gather params"), 2 * 3 * 4);
  // One bucket per unit: 4 layers + the embedding + the final norm and head, every micro-batch.
  EXPECT_EQ(count(zero3, "dp reduce_scatter grads"), 3 * 6);
  // Only the embedding and head units are gathered once per iteration.
  EXPECT_EQ(count(zero3, "dp all_gather params"), 2);
  // Every layer's compute waits for its own gather: the first forward op of layer L depends
  // on an fsdp gather of L.
  const RankProgram& rp = zero3.ranks.at(0);
  for (int32_t layer = 0; layer < 4; ++layer) {
    const auto first = std::find_if(rp.ops.begin(), rp.ops.end(), [&](const Op& op) {
      return op.kind == OpKind::kCompute && op.phase == Phase::kForward && op.layer == layer;
    });
    ASSERT_NE(first, rp.ops.end());
    EXPECT_TRUE(std::any_of(first->deps.begin(), first->deps.end(), [&](uint32_t d) {
      return std::string_view(rp.ops[d].what) == "fsdp all_gather params" &&
             rp.ops[d].bucket_layers == std::vector<int32_t>{layer};
    })) << "layer " << layer;
  }
}

// ZeRO-3's unit schedule on the same layout (DP 2, 3 micro-batches, 4 layers, one chunk).
// reshard_after_forward false: the backward gathers nothing (the layers stay whole from the
// forward), so 3 x 4 = 12 gathers, all in forward steps, against 24. fsdp_prefetch_depth N: at
// layer L of a pass the gathers of the next N layers of the pass are issued before L's compute
// runs; counted in the DP stream's issue order, the gather of layer L + k (forward) comes
// before L's first compute op for k <= N and after it for k = N + 1. The number of gathers does
// not change with N.
TEST(Program, Zero3ReshardAfterForwardAndPrefetchDepth) {
  Knobs k;
  k.dp = 2;
  k.m = 3;
  k.dist_opt = true;
  k.overlap_grad = true;
  Scenario s = make_zero3(k);
  auto gathers = [](const Program& p, Phase phase) {
    int n = 0;
    for (const Op& op : p.ranks.at(0).ops) {
      n += std::string_view(op.what) == "fsdp all_gather params" && op.phase == phase;
    }
    return n;
  };
  const Program resharded = build_program(s);
  EXPECT_EQ(gathers(resharded, Phase::kForward), 12);
  EXPECT_EQ(gathers(resharded, Phase::kBackward), 12);
  s.training.reshard_after_forward = false;
  const Program kept = build_program(s);
  EXPECT_EQ(gathers(kept, Phase::kForward), 12);
  EXPECT_EQ(gathers(kept, Phase::kBackward), 0);
  std::vector<std::string> errors;
  EXPECT_EQ(replay_all(kept, errors), 0u);
  EXPECT_TRUE(errors.empty());
  s.training.reshard_after_forward = true;

  for (int64_t depth : {0, 1, 2, 3}) {
    s.training.fsdp_prefetch_depth = depth;
    const Program prog = build_program(s);
    EXPECT_EQ(gathers(prog, Phase::kForward), 12) << "depth " << depth;
    EXPECT_EQ(gathers(prog, Phase::kBackward), 12) << "depth " << depth;
    errors.clear();
    EXPECT_EQ(replay_all(prog, errors), 0u) << "depth " << depth;
    const RankProgram& rp = prog.ranks.at(0);
    // Micro-batch 0's forward: op id of layer L's gather and of L's first compute op.
    std::map<int32_t, uint32_t> gather_of, compute_of;
    for (const Op& op : rp.ops) {
      if (op.phase != Phase::kForward || op.micro_batch != 0) continue;
      if (std::string_view(op.what) == "fsdp all_gather params") {
        gather_of.try_emplace(op.bucket_layers.at(0), op.id);
      }
      if (op.kind == OpKind::kCompute && op.layer >= 0) compute_of.try_emplace(op.layer, op.id);
    }
    ASSERT_EQ(gather_of.size(), 4u);
    for (int32_t layer = 0; layer < 4; ++layer) {
      for (int32_t ahead = 1; layer + ahead < 4; ++ahead) {
        EXPECT_EQ(gather_of[layer + ahead] < compute_of[layer], ahead <= depth)
            << "depth " << depth << ", layer " << layer << ", gather of layer " << layer + ahead;
      }
    }
  }
}

/// The layout of the two ZeRO-3-under-PP tests below: the small GPT on PP 2 x DP 2 with 3
/// micro-batches, the distributed optimizer with overlapped gradient reduction.
Knobs zero3_pp2_knobs() {
  Knobs k;
  k.pp = 2;
  k.dp = 2;
  k.m = 3;
  k.dist_opt = true;
  k.overlap_grad = true;
  return k;
}

// The ops of `rank` whose `what` is `what`: how many, their bytes, their micro-batches and the
// first one's id.
struct OpTally {
  int n = 0;
  int64_t bytes = 0;
  std::set<int32_t> micro_batches;
  uint32_t first_id = std::numeric_limits<uint32_t>::max();
};
OpTally tally_ops(const Program& p, int64_t rank, std::string_view what) {
  OpTally t;
  for (const Op& op : p.ranks.at(rank).ops) {
    if (std::string_view(op.what) != what) continue;
    ++t.n;
    t.bytes += op.bytes;
    t.micro_batches.insert(op.micro_batch);
    t.first_id = std::min(t.first_id, op.id);
  }
  return t;
}

// ZeRO-3 with reshard_after_forward false under PP (core/fsdp_gather_once.hpp, torchtitan's FSDP2
// with torch.distributed.pipelining): each FSDP unit is all-gathered once per step, in its chunk's
// first forward, not per micro-batch. The small GPT (h 64, ffn 4h, bf16), PP 2, DP 2, 3
// micro-batches, 4 layers: 2 layers per stage, 12h^2 + 13h = 49,984 parameters each, gathered
// whole (TP 1) in bf16: 99,968 bytes per unit. Per step and rank: 2 gathers = 199,936 bytes,
// against 3 micro-batches x 2 layers x (forward + backward) = 12 gathers = 1,199,616 bytes when
// resharded after forward (and 3 x 2 = 6 forward gathers = 599,808 bytes without PP's rule).
TEST(Program, Zero3UnitsGatheredOncePerStepUnderPipelineParallelism) {
  const Knobs k = zero3_pp2_knobs();
  Scenario s = make_zero3(k);
  const Program resharded = build_program(s);
  s.training.reshard_after_forward = false;
  ASSERT_TRUE(fsdp_units_gathered_once_per_step(s));
  const Program kept = build_program(s);
  for (const int64_t rank : {int64_t{0}, int64_t{3}}) {  // stage 0 and stage 1
    ASSERT_EQ(kept.ranks.at(rank).coord.pp, rank == 0 ? 0 : 1);
    const OpTally r = tally_ops(resharded, rank, "fsdp all_gather params");
    EXPECT_EQ(r.n, 12) << "rank " << rank;
    EXPECT_EQ(r.bytes, 1'199'616) << "rank " << rank;
    const OpTally g = tally_ops(kept, rank, "fsdp all_gather params");
    EXPECT_EQ(g.n, 2) << "rank " << rank;
    EXPECT_EQ(g.bytes, 199'936) << "rank " << rank;
    EXPECT_EQ(g.micro_batches, std::set<int32_t>{0}) << "rank " << rank << ": the first forward";
    // The memory model holds every unit it gathered, for the whole step.
    EXPECT_EQ(memory_per_stage(s).at(static_cast<size_t>(rank == 0 ? 0 : 1)).fsdp_gathered_units,
              g.n)
        << "rank " << rank;
  }
  std::vector<std::string> errors;
  EXPECT_EQ(replay_all(kept, errors), 0u);
  EXPECT_TRUE(errors.empty());
  // Without PP the rule does not apply: every micro-batch's forward gathers again.
  Knobs flat = k;
  flat.pp = 1;
  Scenario f = make_zero3(flat);
  f.training.reshard_after_forward = false;
  EXPECT_FALSE(fsdp_units_gathered_once_per_step(f));
  f.model.num_layers = 2;  // the 2 layers a stage held above
  const OpTally g = tally_ops(build_program(f), 0, "fsdp all_gather params");
  EXPECT_EQ(g.n, 6);
  EXPECT_EQ(g.bytes, 599'808);
}

// The same layout's gradient reduce-scatters (core/fsdp_gather_once.hpp
// fsdp_grads_reduced_once_per_step): with the units kept for the step, FSDP2 under
// torch.distributed.pipelining accumulates the gradients unsharded and reduce-scatters them in
// each chunk's last backward only. By hand: stage 0 holds the embeddings (1024 x 64 + 32 x 64 =
// 67,584) and 2 layers (2 x 49,984), 167,552 parameters; stage 1 2 layers, the final norm (2h =
// 128) and the tied LM head's copy of the word embedding (65,536), 165,632. fp32 gradients (bf16
// training): 670,208 and 662,528 bytes reduce-scattered once per step, 3 x that (m = 3) when
// every micro-batch reduce-scatters. Memory: the shard (4 / 2 bytes) plus every parameter's full
// gradients (4 bytes), 6 x 167,552 = 1,005,312 and 6 x 165,632 = 993,792 bytes, against
// 2 x 167,552 + 4 x 49,984 (one unit's full gradients) = 535,040 bytes per micro-batch.
TEST(Program, Zero3GradientsReduceScatteredOncePerStepUnderPipelineParallelism) {
  const Knobs k = zero3_pp2_knobs();
  Scenario s = make_zero3(k);
  // The first op of the rank's last backward (micro-batch m - 1).
  auto last_backward = [](const Program& p, int64_t rank) {
    for (const Op& op : p.ranks.at(rank).ops) {
      if (op.phase == Phase::kBackward && op.micro_batch == 2) return op.id;
    }
    return std::numeric_limits<uint32_t>::max();
  };
  const Program resharded = build_program(s);
  EXPECT_FALSE(fsdp_grads_reduced_once_per_step(s));
  const std::vector<StageMemory> every = memory_per_stage(s);
  s.training.reshard_after_forward = false;
  ASSERT_TRUE(fsdp_grads_reduced_once_per_step(s));
  const Program kept = build_program(s);
  const std::vector<StageMemory> once = memory_per_stage(s);
  for (const int64_t rank : {int64_t{0}, int64_t{3}}) {  // stage 0 and stage 1
    const size_t stage = rank == 0 ? 0 : 1;
    const int64_t per_step = rank == 0 ? 670'208 : 662'528;
    const OpTally r = tally_ops(resharded, rank, "dp reduce_scatter grads");
    EXPECT_EQ(r.bytes, 3 * per_step) << "rank " << rank;
    const OpTally g = tally_ops(kept, rank, "dp reduce_scatter grads");
    EXPECT_EQ(g.bytes, per_step) << "rank " << rank;
    EXPECT_EQ(3 * g.n, r.n) << "rank " << rank << ": the same buckets, once";
    EXPECT_GT(g.first_id, last_backward(kept, rank)) << "rank " << rank << ": in the last backward";
    EXPECT_LT(r.first_id, last_backward(resharded, rank)) << "rank " << rank;
    EXPECT_DOUBLE_EQ(once.at(stage).gradients_bytes, rank == 0 ? 1'005'312 : 993'792);
  }
  EXPECT_DOUBLE_EQ(every.at(0).gradients_bytes, 535'040);
  std::vector<std::string> errors;
  EXPECT_EQ(replay_all(kept, errors), 0u);
  EXPECT_TRUE(errors.empty());
  // ZeRO-2 under PP keeps Megatron-FSDP's reduce-scatter after every micro-batch.
  s.training.reshard_after_forward = true;
  s.training.data_parallel_sharding_strategy = DataParallelShardingStrategy::kOptimGrads;
  EXPECT_FALSE(fsdp_grads_reduced_once_per_step(s));
  EXPECT_EQ(tally_ops(build_program(s), 0, "dp reduce_scatter grads").bytes, 3 * 670'208);
}

// CPU offload on the small GPT (8 layers, h 64, 8 heads, s 32, b 1, V 1024, bf16), PP 1, DP 2,
// 2 micro-batches, the distributed optimizer. Parameters: 49,984 per layer, 467,584 in all
// (12h^2 + 13h per layer, 1024 x 64 + 32 x 64 embeddings, 2h final norm): the optimizer shard
// is 233,792. Half offloaded: n = 116,896 go D2H as fp32 gradients (467,584 bytes), through the
// CPU AdamW (28 n = 3,273,088 bytes) and back H2D in bf16 (233,792 bytes); the GPU's adamw_step
// steps the other 116,896. Activations: 3 of 8 layers offloaded, 110,592 bytes each per
// micro-batch (s b h (34 + 5 a s / h) = 2,048 x 54, Korthikanti Table 2); the GPU holds W =
// 8 - 3 = 5 sets, so the forward of layer l + 5 waits for layer l's D2H and the H2D reload of
// layer l follows the backward of layer l + 5.
TEST(Program, CpuOffloadLowersHostOpsOnTheOffloadStream) {
  Knobs k;
  k.layers = 8;
  k.dp = 2;
  k.m = 2;
  k.dist_opt = true;
  Scenario s = make(k);
  s.training.optimizer_cpu_offload = true;
  s.training.optimizer_offload_fraction = 0.5;
  s.training.cpu_offloading = true;
  s.training.cpu_offloading_num_layers = 3;
  const Program prog = build_program(s);
  std::vector<std::string> errors;
  EXPECT_EQ(replay_all(prog, errors), 0u);
  EXPECT_TRUE(errors.empty());
  const RankProgram& rp = prog.ranks.at(0);
  // (phase, micro-batch, layer) -> the first compute op; what -> host ops.
  std::map<std::tuple<Phase, int32_t, int32_t>, const Op*> first_compute;
  std::map<std::string, std::vector<const Op*>> host;
  const Op* previous_host = nullptr;
  for (const Op& op : rp.ops) {
    if (op.kind == OpKind::kCompute) first_compute.try_emplace({op.phase, op.micro_batch, op.layer}, &op);
    if (op.kind != OpKind::kHost) continue;
    EXPECT_EQ(op.stream, Stream::kOffload);
    if (previous_host != nullptr) {  // the offload stream is FIFO
      EXPECT_NE(std::find(op.deps.begin(), op.deps.end(), previous_host->id), op.deps.end())
          << prog.label(op);
    }
    previous_host = &op;
    host[op.what].push_back(&op);
  }
  auto waits_for = [](const Op* op, const Op* dep) {
    return std::find(op->deps.begin(), op->deps.end(), dep->id) != op->deps.end();
  };
  ASSERT_EQ(host["offload activations"].size(), 6u);
  ASSERT_EQ(host["reload activations"].size(), 6u);
  for (const Op* d2h : host["offload activations"]) {
    EXPECT_EQ(d2h->host, HostOp::kCopyD2H);
    EXPECT_EQ(d2h->bytes, 110592);
    EXPECT_EQ(d2h->phase, Phase::kForward);
    EXPECT_EQ(d2h->role, Role::kActivationOffload);
    EXPECT_LT(d2h->layer, 3);
    // The forward of layer + 5 waits for it (Transformer Engine's window of 5 sets).
    EXPECT_TRUE(waits_for(first_compute.at({Phase::kForward, d2h->micro_batch, d2h->layer + 5}), d2h));
  }
  for (const Op* h2d : host["reload activations"]) {
    EXPECT_EQ(h2d->host, HostOp::kCopyH2D);
    EXPECT_EQ(h2d->bytes, 110592);
    EXPECT_EQ(h2d->phase, Phase::kBackward);
    // After the backward of layer + 5; the layer's backward waits for it.
    EXPECT_TRUE(waits_for(h2d, first_compute.at({Phase::kBackward, h2d->micro_batch, h2d->layer + 5})) ||
                std::any_of(h2d->deps.begin(), h2d->deps.end(), [&](uint32_t d) {
                  return rp.ops[d].kind == OpKind::kCompute && rp.ops[d].layer == h2d->layer + 5 &&
                         rp.ops[d].phase == Phase::kBackward;
                }));
    EXPECT_TRUE(waits_for(first_compute.at({Phase::kBackward, h2d->micro_batch, h2d->layer}), h2d));
  }
  ASSERT_EQ(host["offload optimizer grads"].size(), 1u);
  ASSERT_EQ(host["cpu optimizer step"].size(), 1u);
  ASSERT_EQ(host["reload optimizer params"].size(), 1u);
  EXPECT_EQ(host["offload optimizer grads"][0]->bytes, 467584);
  EXPECT_EQ(host["cpu optimizer step"][0]->host, HostOp::kCpuAdamW);
  EXPECT_EQ(host["cpu optimizer step"][0]->bytes, 3273088);
  const Op* h2d = host["reload optimizer params"][0];
  EXPECT_EQ(h2d->bytes, 233792);
  int gathers = 0;
  for (const Op& op : rp.ops) {
    for (uint32_t kid : op.kernels) {
      if (prog.kernels[kid].key.name == "adamw_step") {
        EXPECT_EQ(prog.kernels[kid].key.shape, (std::vector<int64_t>{116896}));
      }
    }
    if (std::string_view(op.what) == "dp all_gather params") {
      ++gathers;
      EXPECT_TRUE(waits_for(&op, h2d));  // the host-stepped parameters are gathered once back
    }
  }
  EXPECT_GT(gathers, 0);
}

// HSDP (Megatron-Core's num_distributed_optimizer_instances = 2) over DP 4: the DP group
// {0, 1, 2, 3} splits into the sharding groups {0, 1} and {2, 3}, and rank 0's replica group is
// {0, 2}. The small GPT (h 64, ffn 256, V 1024, s 32, bf16: parameters gathered in 2 bytes,
// gradients reduced in 4) has 12h^2 + 13h = 49,984 parameters per layer, 1024 x 64 + 32 x 64 =
// 67,584 in the embeddings (learned positions), 2h = 128 in the final norm (the head is tied).
// ZeRO-3 with 2 micro-batches: each layer gathered over the sharding group before its forward
// and its backward (2 x 2 x 4 = 16 gathers of 49,984 x 2 = 99,968 bytes), every bucket
// reduce-scattered over the sharding group every micro-batch (2 x 6) and its half all-reduced
// over the replica group once, after the last micro-batch: a layer's ceil(49,984 / 2) x 4 =
// 99,968 bytes, the embeddings' 33,792 x 4 = 135,168, the norm's 64 x 4 = 256.
TEST(Program, HsdpShardsInsideAGroupAndAllReducesAcrossReplicas) {
  Knobs k;
  k.dp = 4;
  k.m = 2;
  k.dist_opt = true;
  k.overlap_grad = true;
  Scenario s = make_zero3(k);
  s.training.num_distributed_optimizer_instances = 2;
  EXPECT_EQ(s.data_parallel_shard_size(), 2);
  const Program prog = build_program(s);
  EXPECT_EQ(prog.layout.group(GroupKind::kDpShard, 0), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(prog.layout.group(GroupKind::kDpShard, 3), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(prog.layout.group(GroupKind::kDpReplica, 0), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(prog.layout.group(GroupKind::kDpReplica, 3), (std::vector<int64_t>{1, 3}));
  const RankProgram& rp = prog.ranks.at(0);
  std::vector<const Op*> gathers, scatters, replicas;
  for (const Op& op : rp.ops) {
    const std::string_view what = op.what;
    if (what == "fsdp all_gather params") gathers.push_back(&op);
    if (what == "dp reduce_scatter grads") scatters.push_back(&op);
    if (what == "hsdp all_reduce grad shards") replicas.push_back(&op);
    if (op.kind == OpKind::kCollective && op.group == GroupKind::kDpCp) {
      ADD_FAILURE() << "a collective over all of DP: " << what;
    }
  }
  ASSERT_EQ(gathers.size(), 16u);
  for (const Op* op : gathers) {
    EXPECT_EQ(op->group, GroupKind::kDpShard);
    EXPECT_EQ(op->collective, CollectiveKind::kAllGather);
    EXPECT_EQ(op->bytes, 99968);
  }
  ASSERT_EQ(scatters.size(), 12u);
  for (const Op* op : scatters) EXPECT_EQ(op->group, GroupKind::kDpShard);
  ASSERT_EQ(replicas.size(), 6u);
  std::map<std::vector<int32_t>, int64_t> replica_bytes;
  for (const Op* op : replicas) {
    EXPECT_EQ(op->group, GroupKind::kDpReplica);
    EXPECT_EQ(op->collective, CollectiveKind::kAllReduce);
    EXPECT_EQ(op->micro_batch, -1);
    replica_bytes[op->bucket_layers] = op->bytes;
    // After the reduce-scatter of its own bucket (of the last micro-batch).
    EXPECT_TRUE(std::any_of(op->deps.begin(), op->deps.end(), [&](uint32_t d) {
      return std::string_view(rp.ops[d].what) == "dp reduce_scatter grads" &&
             rp.ops[d].bucket_layers == op->bucket_layers;
    }));
  }
  for (int32_t layer = 0; layer < 4; ++layer) {
    EXPECT_EQ(replica_bytes[std::vector<int32_t>{layer}], 99968) << layer;
  }
  EXPECT_EQ(replica_bytes[std::vector<int32_t>{-2}], 135168);
  EXPECT_EQ(replica_bytes[std::vector<int32_t>{-1}], 256);
  // Every rank's collectives meet their group's (no deadlock, sizes agree).
  std::vector<std::string> errors;
  EXPECT_EQ(replay_all(prog, errors), 0u);
  EXPECT_TRUE(errors.empty()) << errors.front();

  // ZeRO-1 HSDP (the distributed optimizer in 2 instances, reduced after the backward): one
  // reduce-scatter and one replica all-reduce per bucket, the parameters gathered over the
  // sharding group after the step.
  s.training.use_megatron_fsdp = false;
  s.training.data_parallel_sharding_strategy = DataParallelShardingStrategy::kNoShard;
  s.training.overlap_grad_reduce = false;
  const Program zero1 = build_program(s);
  int rs = 0, ar = 0, ag = 0;
  for (const Op& op : zero1.ranks.at(0).ops) {
    const std::string_view what = op.what;
    rs += what == "dp reduce_scatter grads" && op.group == GroupKind::kDpShard;
    ar += what == "hsdp all_reduce grad shards" && op.group == GroupKind::kDpReplica;
    ag += what == "dp all_gather params" && op.group == GroupKind::kDpShard;
  }
  EXPECT_GT(rs, 0);
  EXPECT_EQ(ar, rs);
  EXPECT_EQ(ag, rs);
  errors.clear();
  EXPECT_EQ(replay_all(zero1, errors), 0u);
}

TEST(Program, RefusesWhatItCannotLower) {
  Knobs k;
  k.tp = 2;
  Scenario s = make(k);
  s.training.tp_comm_overlap = true;
  EXPECT_THROW(build_program(s), UnsupportedError);
  EXPECT_THROW(build_program(make(k), {2}), InvalidArgument);
}

// A hand-written Program: TP 2, one layer, one micro-batch, no SP, no PP/DP. Rank 0's ops:
TEST(Program, HandWrittenSingleLayer) {
  Knobs k;
  k.tp = 2, k.layers = 1, k.m = 1;
  const Program prog = build_program(make(k), {0});
  std::vector<std::string> labels;
  for (const Op& op : prog.ranks.at(0).ops) labels.push_back(prog.label(op));
  const std::vector<std::string> expected = {
      "optimizer zero grad buffer",                             // memset of the grads
      "fwd mb0 embedding",                                      // lookup of this vocab shard
      "fwd mb0 tp all_reduce [all_reduce tp 4096 B]",           // s*b*h*2 = 32*1*64*2
      "fwd mb0 embedding",                                      // dropout
      "fwd mb0 L0 layernorm",                                   // LN1, QKV, attention, projection
      "fwd mb0 L0 tp all_reduce [all_reduce tp 4096 B]",
      "fwd mb0 L0 mlp",                                         // dropout-add, LN2, FC1, GELU, FC2
      "fwd mb0 L0 tp all_reduce [all_reduce tp 4096 B]",
      "fwd mb0 L0 mlp",                                         // dropout-add
      "fwd mb0 final layernorm",                                // final LN, LM head, CE max
      "fwd mb0 tp all_reduce max [all_reduce tp 128 B]",        // s*b fp32 = 32*4
      "fwd mb0 cross entropy",
      "fwd mb0 tp all_reduce target [all_reduce tp 128 B]",
      "fwd mb0 tp all_reduce sum-exp [all_reduce tp 128 B]",
      "bwd mb0 cross entropy",                                  // CE backward, LM head dgrad
      "bwd mb0 tp all_reduce grad [all_reduce tp 4096 B]",
      "bwd mb0 lm head",                                        // LM head wgrad (overlaps it)
      "bwd mb0 final layernorm",
      "bwd mb0 L0 mlp",                                         // FC2 dgrad+wgrad, GELU, FC1 dgrad
      "bwd mb0 L0 tp all_reduce grad [all_reduce tp 4096 B]",
      "bwd mb0 L0 mlp",                                         // FC1 wgrad (overlaps it)
      "bwd mb0 L0 mlp",                                         // LN2, dropout-add, proj, attn, QKV dgrad
      "bwd mb0 L0 tp all_reduce grad [all_reduce tp 4096 B]",
      "bwd mb0 L0 attention",                                   // QKV wgrad (overlaps it)
      "bwd mb0 L0 attention",                                   // LN1
      "bwd mb0 embedding",
      "optimizer grad norm",
      "optimizer grad norm all_reduce [all_reduce mp 4 B]",
      "optimizer optimizer step",                               // grad clip scale, AdamW
  };
  EXPECT_EQ(labels, expected);
}

// Megatron's train_step: zero_grad_buffer first, then clip_grad_norm_fp32's scale between the
// norm's all-reduce and the step. TP 2, one layer (h 64, V 1024, s 32, biases): TP rank 0 holds
// word embedding 512 x 64 = 32768, positions 32 x 64 = 2048, LN1 + LN2 2 x 128, QKV 64 x 96 +
// 96, projection 32 x 64 + 64, FC1 64 x 128 + 128, FC2 128 x 64 + 64, final LN 128:
// 60128 parameters; bf16 training keeps fp32 gradients (Megatron's main_grad buffer).
TEST(Program, ZeroGradBufferAndGradClipScale) {
  for (const bool dist : {false, true}) {
    Knobs k;
    k.tp = 2, k.layers = 1, k.m = 1, k.dp = 2, k.dist_opt = dist;
    const Program prog = build_program(make(k), {0});
    const RankProgram& rp = prog.ranks.at(0);
    // The distributed optimizer steps (and clips) its DP shard, but zeroes the whole buffer.
    const int64_t n_rank = 60128, n_opt = dist ? 60128 / 2 : 60128;
    ASSERT_FALSE(rp.ops.empty());
    const Op& zero = rp.ops.front();
    ASSERT_EQ(zero.kind, OpKind::kCompute);
    ASSERT_EQ(zero.kernels.size(), 1u);
    EXPECT_EQ(zero.kernel_roles[0], Role::kZeroGradBuffer);
    EXPECT_EQ(zero.phase, Phase::kOptimizer);
    const Kernel& zk = prog.kernels[zero.kernels[0]];
    EXPECT_EQ(zk.key.name, "zero_grad_buffer");
    EXPECT_EQ(zk.key.shape, std::vector<int64_t>{n_rank});
    EXPECT_EQ(zk.flops, 0.0);
    EXPECT_EQ(zk.bytes, 4.0 * n_rank);  // written once
    // ... norm, its all-reduce, then one op: grad_clip_scale, adamw_step.
    constexpr uint32_t kNone = UINT32_MAX;
    uint32_t norm_ar = kNone, step = kNone;
    for (const Op& op : rp.ops) {
      if (op.kind == OpKind::kCollective && op.role == Role::kGradNorm) norm_ar = op.id;
      for (Role r : op.kernel_roles) {
        if (r == Role::kGradClipScale) step = op.id;
        if (r == Role::kZeroGradBuffer) EXPECT_EQ(op.id, zero.id);
      }
    }
    ASSERT_NE(norm_ar, kNone);
    ASSERT_NE(step, kNone);
    const Op& so = rp.ops[step];
    EXPECT_EQ(so.id, rp.ops.size() - (dist ? 2 : 1));  // dist: the param all-gather follows
    EXPECT_NE(std::find(so.deps.begin(), so.deps.end(), norm_ar), so.deps.end());
    ASSERT_EQ(so.kernel_roles, (std::vector<Role>{Role::kGradClipScale, Role::kOptimizerStep}));
    const Kernel& ck = prog.kernels[so.kernels[0]];
    EXPECT_EQ(ck.key.name, "grad_clip_scale");
    EXPECT_EQ(ck.key.shape, std::vector<int64_t>{n_opt});
    EXPECT_EQ(ck.flops, 1.0 * n_opt);
    EXPECT_EQ(ck.bytes, 8.0 * n_opt);  // fp32 read + write
    EXPECT_EQ(prog.kernels[so.kernels[1]].key.shape, std::vector<int64_t>{n_opt});
  }
  // No clipping, no scale; the zero op stays.
  Knobs k;
  k.layers = 1;
  Scenario s = make(k);
  s.training.clip_grad = 0;
  const Program prog = build_program(s, {0});
  for (const Kernel& kern : prog.kernels) EXPECT_NE(kern.key.name, "grad_clip_scale");
  EXPECT_EQ(prog.kernels[prog.ranks.at(0).ops.front().kernels[0]].key.name, "zero_grad_buffer");
}


// ---- Llama-style layers, context parallelism, FP8 ---------------------------------------------

struct LlamaKnobs {
  int64_t tp = 1, cp = 1, pp = 1, dp = 1, v = 1, m = 2;
  bool sp = false, flash = false, fp8 = false;
  CpCommType cp_comm = CpCommType::kP2p;
  RecomputeGranularity recompute = RecomputeGranularity::kNone;
  bool dist_opt = false, overlap = false;
  Fp8Recipe recipe = Fp8Recipe::kDelayed;
};

// A tiny Llama: 4 layers (x v x pp / 4 as needed), h 64, 8 heads of 8, 4 query groups, ffn 96,
// s 32, V 1024; bf16.
Scenario make_llama(const LlamaKnobs& k) {
  Scenario s;
  s.name = "llama-test";
  ModelSpec& m = s.model;
  m.architecture = "llama";
  m.num_layers = 2 * k.pp * k.v;
  m.hidden_size = 64;
  m.num_attention_heads = 8;
  m.num_query_groups = 4;
  m.ffn_hidden_size = 96;
  m.seq_length = 32;
  m.vocab_size = 1024;
  m.normalization = Normalization::kRmsNorm;
  m.activation = Activation::kSwiglu;
  m.position_embedding_type = PositionEmbedding::kRope;
  m.untie_embeddings_and_output_weights = true;
  m.add_bias_linear = false;
  s.parallel.tensor_model_parallel_size = k.tp;
  s.parallel.context_parallel_size = k.cp;
  s.parallel.cp_comm_type = k.cp_comm;
  s.parallel.pipeline_model_parallel_size = k.pp;
  s.parallel.virtual_pipeline_model_parallel_size = k.v;
  s.parallel.data_parallel_size = k.dp;
  s.parallel.sequence_parallel = k.sp;
  s.training.micro_batch_size = 1;
  s.training.global_batch_size = k.m * k.dp;
  s.training.recompute_granularity = k.recompute;
  s.training.attention_backend = k.flash ? AttentionBackend::kFlash : AttentionBackend::kUnfused;
  s.training.use_distributed_optimizer = k.dist_opt;
  s.training.overlap_grad_reduce = k.overlap;
  if (k.fp8) s.training.fp8_format = Fp8Format::kHybrid;
  s.training.fp8_recipe = k.recipe;
  s.cluster.num_gpus = k.tp * k.cp * k.pp * k.dp;
  validate_scenario(s, "make_llama");
  return s;
}

bool is_matmul(const Kernel& kern) {
  const std::string& n = kern.key.name;
  return n.rfind("gemm", 0) == 0 || n.rfind("attention", 0) == 0 || n.rfind("flash_attention", 0) == 0;
}

// Every CP layout and comm type, with TP/SP, PP, VPP, DP and the distributed optimizer, replays
// to completion with matched collectives; over all ranks the GEMM and attention FLOPs equal the
// FLOP model's hardware FLOPs (GQA QKV, SwiGLU's doubled FC1, the LM head; CP blocks add up to the
// full s x s attention).
TEST(Program, LlamaAndContextParallelLayoutsReplayAndCountFlops) {
  int cases = 0;
  for (int64_t cp : {1, 2, 4}) {
    for (CpCommType comm : {CpCommType::kP2p, CpCommType::kAllGather, CpCommType::kA2a}) {
      if (cp == 1 && comm != CpCommType::kP2p) continue;
      for (auto [tp, pp, v, dp] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{
               {1, 1, 1, 1}, {2, 1, 1, 2}, {1, 2, 2, 1}, {2, 2, 1, 1}}) {
        if (comm == CpCommType::kA2a && (4 / tp) % cp != 0) continue;  // query groups per rank
        for (auto rc : {RecomputeGranularity::kNone, RecomputeGranularity::kSelective}) {
          for (bool fp8 : {false, true}) {
            LlamaKnobs k;
            k.tp = tp, k.cp = cp, k.pp = pp, k.v = v, k.dp = dp, k.sp = tp > 1, k.cp_comm = comm;
            k.recompute = rc, k.fp8 = fp8, k.dist_opt = dp > 1, k.overlap = dp > 1, k.m = 4;
            k.flash = fp8;
            const Scenario s = make_llama(k);
            const Program prog = build_program(s);
            std::vector<std::string> errors;
            ASSERT_EQ(replay_all(prog, errors), 0u) << "cp " << cp << " tp " << tp << " pp " << pp;
            ASSERT_TRUE(errors.empty()) << errors.front();
            double flops = 0;
            for (const auto& [r, rp] : prog.ranks) {
              for (const Op& op : rp.ops) {
                for (uint32_t id : op.kernels) {
                  if (is_matmul(prog.kernels[id])) flops += prog.kernels[id].flops;
                }
              }
            }
            const double expected = hardware_flops_per_iteration(
                s.model, s.training.global_batch_size, rc);
            EXPECT_NEAR(flops / expected, 1.0, 1e-12) << "cp " << cp << " tp " << tp;
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 40);
}

// The layer as Megatron-Core runs Llama: RMSNorm, QKV of (a + 2g) d / t = (8 + 8) x 8 / 2 = 64
// columns, RoPE, SwiGLU with FC1 of 2 ffn / t = 96 columns, FC2 of ffn / t = 48 rows.
TEST(Program, LlamaLayerKernels) {
  LlamaKnobs k;
  k.tp = 2;
  const Program prog = build_program(make_llama(k), {0});
  std::set<std::string> names;
  std::set<std::vector<int64_t>> gemm_fwd;
  for (const Kernel& kern : prog.kernels) {
    names.insert(kern.key.name);
    if (kern.key.name == "gemm_fwd") gemm_fwd.insert(kern.key.shape);
  }
  for (const char* n : {"rmsnorm_fwd", "rmsnorm_bwd", "rope_fwd", "rope_bwd", "swiglu_fwd",
                        "swiglu_bwd"}) {
    EXPECT_TRUE(names.count(n)) << n;
  }
  for (const char* n : {"layernorm_fwd", "gelu_fwd"}) EXPECT_FALSE(names.count(n)) << n;
  const std::set<std::vector<int64_t>> want = {
      {32, 64, 64},   // QKV: 32 tokens x (8 + 2 x 4) x 8 / 2
      {32, 64, 32},   // projection: h x h / t
      {32, 96, 64},   // FC1: 2 x 96 / 2
      {32, 64, 48},   // FC2
      {32, 512, 64},  // LM head: 1024 / 2 vocabulary rows
  };
  EXPECT_EQ(gemm_fwd, want);
}

// Untied embeddings: no embedding-gradient all-reduce between the first and last stage, and the
// DP buckets still hold every parameter of the rank once (the LM head in the last stage's).
TEST(Program, UntiedHeadHasItsOwnGradient) {
  LlamaKnobs k;
  k.pp = 2, k.dp = 2, k.m = 4, k.overlap = true;
  const Scenario s = make_llama(k);
  const Program prog = build_program(s);
  for (const auto& [r, rp] : prog.ranks) {
    int64_t grad_bytes = 0;
    for (const Op& op : rp.ops) {
      EXPECT_NE(op.group == GroupKind::kEmbedding && op.kind == OpKind::kCollective, true)
          << prog.label(op);
      if (op.kind == OpKind::kCollective && op.phase == Phase::kGradSync &&
          op.group == GroupKind::kDpCp) {
        grad_bytes += op.bytes;
      }
    }
    EXPECT_EQ(grad_bytes, parameters_on_rank(s, rp.coord.pp) * 4) << "rank " << r;
  }
}

// CP communication per layer and micro-batch on the cp-comm stream: p2p ring attention exchanges
// KV CP - 1 times forward and KV + dKV 2 (CP - 1) times backward, overlapped with the blocks
// (the exchange for block i + 1 is issued before block i computes); all_gather gathers KV once
// forward, and gathers KV and reduce-scatters dKV backward; a2a has two all-to-alls each way.
TEST(Program, ContextParallelCommunicationPerLayer) {
  struct Want {
    CpCommType comm;
    CollectiveKind fwd_kind;
    int64_t fwd, bwd;
  };
  for (const Want& w : {Want{CpCommType::kP2p, CollectiveKind::kRingExchange, 3, 6},
                        Want{CpCommType::kAllGather, CollectiveKind::kAllGather, 1, 2},
                        Want{CpCommType::kA2a, CollectiveKind::kAllToAll, 2, 2}}) {
    LlamaKnobs k;
    k.cp = 4, k.cp_comm = w.comm, k.m = 1;
    const Scenario s = make_llama(k);
    const Program prog = build_program(s, {0});
    const RankProgram& rp = prog.ranks.at(0);
    int64_t fwd = 0, bwd = 0;
    for (const Op& op : rp.ops) {
      if (op.kind != OpKind::kCollective || op.group != GroupKind::kCp) continue;
      EXPECT_EQ(op.stream, Stream::kCpComm);
      if (op.layer != 0) continue;
      if (op.phase == Phase::kForward) {
        ++fwd;
        EXPECT_EQ(op.collective, w.fwd_kind);
      }
      if (op.phase == Phase::kBackward) ++bwd;
    }
    EXPECT_EQ(fwd, w.fwd) << to_string(w.comm);
    EXPECT_EQ(bwd, w.bwd) << to_string(w.comm);
    // KV of the local 8 tokens: 2 x 8 x 4 groups x 8 x 2 bytes = 1024 per ring exchange.
    if (w.comm == CpCommType::kP2p) {
      for (const Op& op : rp.ops) {
        if (op.collective == CollectiveKind::kRingExchange && op.kind == OpKind::kCollective) {
          EXPECT_EQ(op.bytes, 1024);
        }
      }
      // Overlap: the first forward exchange of layer 0 and the first attention block both follow
      // the QKV GEMM, and the second block waits for that exchange.
      uint32_t x = UINT32_MAX;
      for (const Op& op : rp.ops) {
        if (op.kind == OpKind::kCollective && op.group == GroupKind::kCp && op.layer == 0 &&
            op.phase == Phase::kForward) {
          x = op.id;
          break;
        }
      }
      ASSERT_NE(x, UINT32_MAX);
      bool waited = false;
      for (const Op& op : rp.ops) {
        if (op.kind == OpKind::kCompute && std::find(op.deps.begin(), op.deps.end(), x) != op.deps.end()) {
          waited = true;
          EXPECT_EQ(op.layer, 0);
        }
      }
      EXPECT_TRUE(waited);
    }
  }
  // Every op runs on s / CP = 8 tokens: the QKV GEMM has 8 rows.
  LlamaKnobs k;
  k.cp = 4;
  const Program prog = build_program(make_llama(k), {0});
  bool found = false;
  for (const Kernel& kern : prog.kernels) {
    if (kern.key.name == "gemm_fwd" && kern.key.shape[1] == 128) {  // (8 + 8) x 8 columns
      EXPECT_EQ(kern.key.shape[0], 8);
      found = true;
    }
  }
  EXPECT_TRUE(found);
}

// FP8 parameters: the distributed optimizer's parameter all-gather carries the layers' GEMM
// weights in 1 byte and the rest (norms, embedding, LM head) in 2.
TEST(Program, Fp8ParamGatherBytes) {
  LlamaKnobs k;
  k.dp = 2, k.dist_opt = true, k.fp8 = true;
  Scenario s = make_llama(k);
  const auto gathered = [](const Program& prog) {
    int64_t bytes = 0;
    for (const Op& op : prog.ranks.at(0).ops) {
      if (op.kind == OpKind::kCollective && op.phase == Phase::kParamSync) bytes += op.bytes;
    }
    return bytes;
  };
  const int64_t params = parameters_on_rank(s, 0);
  EXPECT_EQ(gathered(build_program(s, {0})), 2 * params);
  s.training.fp8_param_gather = true;
  const int64_t gemm = 2 * layer_gemm_weights_on_rank(s.model, 1);  // 2 layers
  EXPECT_EQ(gathered(build_program(s, {0})), 2 * (params - gemm) + gemm);
}

// FP8: the transformer layers' GEMMs have dtype fp8 (1-byte operands), their operands cast;
// the LM head stays bf16; the weights are cast once, after the optimizer step; the delayed
// recipe updates its scales per layer, tensorwise adds an amax pass before every cast.
TEST(Program, Fp8GemmsAndTheirCasts) {
  for (Fp8Recipe recipe : {Fp8Recipe::kDelayed, Fp8Recipe::kTensorwise}) {
    LlamaKnobs k;
    k.fp8 = true, k.recipe = recipe, k.m = 3;
    const Program prog = build_program(make_llama(k), {0});
    std::map<std::string, int64_t> launches;
    for (const Op& op : prog.ranks.at(0).ops) {
      for (uint32_t id : op.kernels) {
        const Kernel& kern = prog.kernels[id];
        ++launches[kern.key.name];
        if (kern.key.name.rfind("gemm_", 0) == 0) {
          const bool head = kern.key.shape[1] == 1024;  // vocabulary columns
          EXPECT_EQ(kern.key.dtype, head ? Precision::kBf16 : Precision::kFp8) << kern.key.to_string();
        }
      }
    }
    const int64_t layers = 2, mbs = 3;
    // Per layer and micro-batch, delayed: 1 separate input cast forward (the projection's; the
    // norms and the activation write the others in FP8) and 3 output-gradient casts backward
    // (FC2, projection, QKV; FC1's is fused into the activation backward); tensorwise: all 8,
    // each after an amax pass. Plus one cast of the rank's layer weights after the step.
    const int64_t casts = recipe == Fp8Recipe::kDelayed ? 4 : 8;
    EXPECT_EQ(launches["fp8_cast_transpose"], layers * mbs * casts + 1);
    EXPECT_EQ(launches["fp8_scale_update"], recipe == Fp8Recipe::kDelayed ? layers * mbs * 2 : 0);
    EXPECT_EQ(launches["fp8_amax"], recipe == Fp8Recipe::kTensorwise ? layers * mbs * 8 : 0);
  }
}

// FP8, delayed recipe: Transformer Engine reduces the amaxes of each model chunk's fp8_autocast
// region over TP x DP x CP once per forward (3 per GEMM: input, weight, output) and once per
// backward (2 per GEMM: output and input gradients), a blocking all-reduce of 4-byte amaxes.
// Here TP 2, DP 2, PP 2 x VPP 2, 2 layers per chunk of 4 GEMMs, 6 micro-batches per DP rank:
// 6 x 2 chunks = 12 of each per rank, 2 x 4 x 3 x 4 = 96 bytes forward, 64 backward, over the 4 ranks of
// the stage. Tensorwise scaling and BF16 have none.
TEST(Program, Fp8DelayedScalingReducesAmaxesPerChunkAndMicroBatch) {
  for (Fp8Recipe recipe : {Fp8Recipe::kDelayed, Fp8Recipe::kTensorwise}) {
    for (bool fp8 : {true, false}) {
      LlamaKnobs k;
      k.tp = 2, k.dp = 2, k.pp = 2, k.v = 2, k.m = 6, k.sp = true;  // 6 micro-batches per DP rank
      k.fp8 = fp8, k.recipe = recipe;
      // Gradient buckets triggered in the last backward step leave a kGradSync context behind:
      // the backward reduction still belongs to its step.
      k.dist_opt = true, k.overlap = true;
      const Scenario s = make_llama(k);
      const Program prog = build_program(s, {0, 5});
      for (const auto& [rank, rp] : prog.ranks) {
        int64_t forward = 0, backward = 0;
        for (const Op& op : rp.ops) {
          if (std::string(op.what) != "fp8 amax all_reduce") continue;
          EXPECT_EQ(op.kind, OpKind::kCollective);
          EXPECT_EQ(op.collective, CollectiveKind::kAllReduce);
          EXPECT_EQ(op.group, GroupKind::kTpDpCp);
          EXPECT_EQ(prog.layout.group(GroupKind::kTpDpCp, rank).size(), 4u);
          EXPECT_GE(op.micro_batch, 0);
          if (op.phase == Phase::kForward) {
            ++forward;
            EXPECT_EQ(op.bytes, 2 * 4 * 3 * 4);
          } else {
            ++backward;
            EXPECT_EQ(op.phase, Phase::kBackward);
            EXPECT_EQ(op.bytes, 2 * 4 * 2 * 4);
          }
        }
        const int64_t expected = fp8 && recipe == Fp8Recipe::kDelayed ? 6 * 2 : 0;
        EXPECT_EQ(forward, expected) << "rank " << rank;
        EXPECT_EQ(backward, expected) << "rank " << rank;
      }
    }
  }
}

// fp32 training with TF32 / bf16-arithmetic products: the gemm and attention classes of the
// catalogue carry the arithmetic's dtype in their keys (so a database row measured with it
// serves them), every other kernel fp32; FLOPs and bytes are those of fp32 storage.
TEST(Program, Float32MatmulPrecisionKeysTheMatrixProducts) {
  LlamaKnobs k;
  Scenario fp32 = make_llama(k);
  fp32.training.precision = Precision::kFp32;
  const Program base = build_program(fp32, {0});
  for (const auto& [p, dtype] : {std::pair{Float32MatmulPrecision::kHigh, Precision::kTf32},
                                 std::pair{Float32MatmulPrecision::kMedium, Precision::kFp32Bf16}}) {
    SCOPED_TRACE(to_string(p));
    Scenario s = fp32;
    s.training.float32_matmul_precision = p;
    const Program prog = build_program(s, {0});
    ASSERT_EQ(prog.kernels.size(), base.kernels.size());
    int64_t products = 0, others = 0;
    for (size_t i = 0; i < prog.kernels.size(); ++i) {
      const Kernel& kern = prog.kernels[i];
      const KernelDescriptor* d = find_kernel(kern.key.name);
      ASSERT_NE(d, nullptr) << kern.key.name;
      const bool product = d->cost_class != KernelClass::kMemory;
      EXPECT_EQ(kern.key.dtype, product ? dtype : Precision::kFp32) << kern.key.to_string();
      (product ? products : others) += 1;
      EXPECT_EQ(kern.key.name, base.kernels[i].key.name);
      EXPECT_EQ(kern.key.shape, base.kernels[i].key.shape);
      EXPECT_EQ(kern.flops, base.kernels[i].flops);
      EXPECT_EQ(kern.bytes, base.kernels[i].bytes);
    }
    EXPECT_GT(products, 0);
    EXPECT_GT(others, 0);
  }
}

// ---- Mixture of experts -------------------------------------------------------------------

struct MoeKnobs {
  int64_t tp = 1, cp = 1, pp = 1, v = 1, dp = 1, m = 2, ep = 1;
  std::optional<int64_t> etp;
  int64_t experts = 4, topk = 2, shared = 0;
  MoeTokenDispatcher dispatcher = MoeTokenDispatcher::kAllToAll;
  std::optional<double> capacity;
  bool pad = false, grouped = true, alternate = false, aux = true, fp8 = false;
  RecomputeGranularity recompute = RecomputeGranularity::kNone;
  bool dist_opt = false, overlap = false;
  std::optional<double> imbalance;
};

// A tiny Llama MoE: make_llama's model (h 64, 8 heads, 4 groups, s 32, V 1024) with E experts
// of width 48, top-k, every layer MoE (or every other one), SP whenever TP > 1.
Scenario make_moe(const MoeKnobs& k) {
  LlamaKnobs lk;
  lk.tp = k.tp, lk.cp = k.cp, lk.pp = k.pp, lk.v = k.v, lk.dp = k.dp, lk.m = k.m, lk.sp = k.tp > 1;
  lk.recompute = k.recompute, lk.dist_opt = k.dist_opt, lk.overlap = k.overlap, lk.fp8 = k.fp8;
  Scenario s = make_llama(lk);
  ModelSpec& md = s.model;
  md.num_moe_experts = k.experts;
  md.moe_router_topk = k.topk;
  md.moe_ffn_hidden_size = 48;
  md.moe_shared_expert_intermediate_size = k.shared;
  if (k.alternate) {
    md.moe_layer_pattern.clear();
    for (int64_t l = 0; l < md.num_layers; ++l) md.moe_layer_pattern.push_back(l % 2 == 0);
  }
  md.moe_expert_capacity_factor = k.capacity;
  md.moe_pad_expert_input_to_capacity = k.pad;
  md.moe_token_dispatcher_type = k.dispatcher;
  md.moe_router_load_balancing_type = k.aux ? MoeLoadBalancing::kAuxLoss : MoeLoadBalancing::kNone;
  md.moe_grouped_gemm = k.grouped;
  s.parallel.expert_model_parallel_size = k.ep;
  s.parallel.expert_tensor_parallel_size = k.etp;
  s.parallel.rank_order = "tp-cp-ep-dp-pp";  // Megatron's default order
  s.cluster.what_if.moe_load_imbalance = k.imbalance;
  validate_scenario(s, "make_moe");
  return s;
}

// Model FLOPs of an iteration's GEMMs and attention with MoE layers, worked by hand from the
// dense model's: per token and MoE layer, the dense MLP's 2 h (fc1 + ffn) forward FLOPs become
// the router's 2 h E + k routed experts' 2 h (fc1_e + ffn_e) + the shared expert's
// 2 h (fc1_s + f_s); backward twice the forward, full recomputation one forward more.
double moe_matmul_flops(const Scenario& s, RecomputeGranularity rc) {
  ModelSpec dense = s.model;
  dense.num_moe_experts = 0;
  double flops = hardware_flops_per_iteration(dense, s.training.global_batch_size, rc);
  const ModelSpec& m = s.model;
  const double h = static_cast<double>(m.hidden_size);
  auto mlp = [&](int64_t ffn) {
    return 2.0 * h * static_cast<double>(m.fc1_width() / m.ffn_hidden_size * ffn + ffn);
  };
  const double per_token = 2.0 * h * static_cast<double>(m.num_moe_experts) +
                           static_cast<double>(m.moe_router_topk) * mlp(m.moe_expert_ffn()) +
                           (m.moe_shared_expert_intermediate_size > 0
                                ? mlp(m.moe_shared_expert_intermediate_size) : 0.0) -
                           mlp(m.ffn_hidden_size);
  int64_t moe_layers = 0;
  for (int64_t l = 0; l < m.num_layers; ++l) moe_layers += m.is_moe_layer(l);
  const double passes = rc == RecomputeGranularity::kFull ? 4.0 : 3.0;
  const double tokens = static_cast<double>(s.training.global_batch_size * m.seq_length);
  return flops + passes * tokens * static_cast<double>(moe_layers) * per_token;
}

double matmul_flops(const Program& prog) {
  double flops = 0;
  for (const auto& [r, rp] : prog.ranks) {
    for (const Op& op : rp.ops) {
      for (uint32_t id : op.kernels) {
        const std::string& n = prog.kernels[id].key.name;
        if (is_matmul(prog.kernels[id]) || n.rfind("grouped_gemm", 0) == 0) {
          flops += prog.kernels[id].flops;
        }
      }
    }
  }
  return flops;
}

// A grid of EP / ETP / TP / CP / PP / VP / dispatcher / capacity / recompute / optimizer layouts
// replays to completion with matched collectives, and over all ranks the GEMM FLOPs equal the
// model FLOPs worked by hand and core/flops' (balanced routing: T k / E is whole in every case
// here, and the capacities 1.0 padded and 1.5 drop nothing).
TEST(MoeProgram, LayoutsReplayAndCountModelFlops) {
  int cases = 0;
  struct Layout { int64_t tp, cp, pp, v, dp, ep; std::optional<int64_t> etp; };
  const std::vector<Layout> layouts = {
      {1, 1, 1, 1, 1, 1, {}}, {1, 1, 1, 1, 2, 2, {}}, {2, 1, 1, 1, 2, 2, {}},
      {2, 1, 1, 1, 2, 2, 1},  {2, 1, 1, 1, 2, 4, 1},  {2, 2, 1, 1, 1, 2, {}},
      {1, 2, 2, 1, 2, 4, {}}, {2, 1, 2, 2, 2, 2, 2},  {1, 1, 2, 1, 4, 4, {}}};
  for (const Layout& l : layouts) {
    for (auto disp : {MoeTokenDispatcher::kAllToAll, MoeTokenDispatcher::kAllGather}) {
      for (int variant = 0; variant < 4; ++variant) {
        MoeKnobs k;
        k.tp = l.tp, k.cp = l.cp, k.pp = l.pp, k.v = l.v, k.dp = l.dp, k.ep = l.ep, k.etp = l.etp;
        k.dispatcher = disp;
        k.m = 4;
        k.recompute = variant == 1 ? RecomputeGranularity::kFull
                                   : variant == 2 ? RecomputeGranularity::kSelective
                                                  : RecomputeGranularity::kNone;
        k.dist_opt = variant >= 2, k.overlap = variant == 3;
        k.shared = variant == 1 || variant == 3 ? 32 : 0;
        k.alternate = variant == 2;
        k.grouped = variant != 1;
        if (variant == 2) k.capacity = 1.0, k.pad = true;
        if (variant == 3) k.capacity = 1.5;
        const Scenario s = make_moe(k);
        const Program prog = build_program(s);
        std::vector<std::string> errors;
        const std::string where = "tp " + std::to_string(l.tp) + " cp " + std::to_string(l.cp) +
                                  " pp " + std::to_string(l.pp) + " ep " + std::to_string(l.ep) +
                                  " variant " + std::to_string(variant);
        ASSERT_EQ(replay_all(prog, errors), 0u) << where;
        ASSERT_TRUE(errors.empty()) << where << ": " << errors.front();
        EXPECT_NEAR(matmul_flops(prog) / moe_matmul_flops(s, k.recompute), 1.0, 1e-12) << where;
        // ... and core/flops' model (router, top-k routed experts, shared expert).
        EXPECT_NEAR(matmul_flops(prog) /
                        hardware_flops_per_iteration(s.model, s.training.global_batch_size, k.recompute),
                    1.0, 1e-12) << where;
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 72);
}

// One MoE layer's communication, worked by hand: TP 2 (SP), DP 2, EP 2, ETP = TP 2; s 32, so
// T = 16 router rows, k 2 of E 4 -> P = 8 copies per expert, E P = 32 rows sent (x 64 x 2 B =
// 4096 B); R = ETP EP P = 32 rows per local expert, 2 local experts.
TEST(MoeProgram, LayerCommunicationAndGemmsByHand) {
  using C = CollectiveKind;
  using G = GroupKind;
  struct Coll {
    Role role;
    C kind;
    G group;
    int64_t bytes;
    bool operator==(const Coll&) const = default;
  };
  for (auto disp : {MoeTokenDispatcher::kAllToAll, MoeTokenDispatcher::kAllGather}) {
    MoeKnobs k;
    k.tp = 2, k.dp = 2, k.ep = 2, k.dispatcher = disp;
    const Program prog = build_program(make_moe(k), {0});
    std::vector<Coll> fwd, bwd;
    std::vector<std::vector<int64_t>> fc1;
    for (const Op& op : prog.ranks.at(0).ops) {
      if (op.layer != 0 || op.micro_batch != 0) continue;
      if (op.kind == OpKind::kCollective && op.stream == Stream::kEpComm) {
        (op.phase == Phase::kForward ? fwd : bwd).push_back({op.role, op.collective, op.group, op.bytes});
      }
      for (size_t i = 0; i < op.kernels.size(); ++i) {
        if (op.kernel_roles[i] == Role::kExpertFc1 && op.phase == Phase::kForward) {
          const Kernel& kern = prog.kernels[op.kernels[i]];
          EXPECT_EQ(kern.key.name, "grouped_gemm_fwd");
          EXPECT_EQ(kern.key.tp, 2);
          fc1.push_back(kern.key.shape);
        }
      }
    }
    if (disp == MoeTokenDispatcher::kAllToAll) {
      EXPECT_EQ(fwd, (std::vector<Coll>{{Role::kMoeDispatch, C::kAllToAll, G::kEp, 4096},
                                        {Role::kMoeDispatch, C::kAllGather, G::kEtp, 8192},
                                        {Role::kMoeCombine, C::kReduceScatter, G::kEtp, 8192},
                                        {Role::kMoeCombine, C::kAllToAll, G::kEp, 4096}}));
      EXPECT_EQ(bwd, (std::vector<Coll>{{Role::kMoeCombine, C::kAllToAll, G::kEp, 4096},
                                        {Role::kMoeCombine, C::kAllGather, G::kEtp, 8192},
                                        {Role::kMoeDispatch, C::kReduceScatter, G::kEtp, 8192},
                                        {Role::kMoeDispatch, C::kAllToAll, G::kEp, 4096}}));
    } else {
      // The ETP x EP group's 4 x 16 rows gathered: 8192 B.
      EXPECT_EQ(fwd, (std::vector<Coll>{{Role::kMoeDispatch, C::kAllGather, G::kEtpEp, 8192},
                                        {Role::kMoeCombine, C::kReduceScatter, G::kEtpEp, 8192}}));
      EXPECT_EQ(bwd, (std::vector<Coll>{{Role::kMoeCombine, C::kAllGather, G::kEtpEp, 8192},
                                        {Role::kMoeDispatch, C::kReduceScatter, G::kEtpEp, 8192}}));
    }
    // 2 local experts x 32 rows, SwiGLU FC1 of 2 x 48 / ETP = 48 columns, h = 64.
    EXPECT_EQ(fc1, (std::vector<std::vector<int64_t>>{{2, 32, 48, 64}}));
  }
}

// The forward kernels of an MoE layer in order, per dispatcher (the executor's contract).
// Without moe_grouped_gemm each local expert has its own GEMM (Megatron's SequentialMLP), and the
// lowering names the expert each serves (Op::kernel_targets), which the executor reads; every
// other kernel has none, and the grouped GEMM's ops carry no targets at all.
TEST(MoeProgram, PerExpertGemmsNameTheirLocalExpert) {
  for (bool grouped : {false, true}) {
    MoeKnobs k;
    k.ep = 2, k.dp = 2, k.experts = 6, k.grouped = grouped;  // 3 local experts per EP rank
    const Program prog = build_program(make_moe(k), {0});
    int checked = 0;
    for (const Op& op : prog.ranks.at(0).ops) {
      if (op.kind != OpKind::kCompute) continue;
      if (grouped) {
        EXPECT_TRUE(op.kernel_targets.empty());
        continue;
      }
      if (op.kernel_targets.empty()) continue;
      ASSERT_EQ(op.kernel_targets.size(), op.kernels.size());
      std::vector<int32_t> per_expert;
      for (size_t i = 0; i < op.kernels.size(); ++i) {
        const std::string& name = prog.kernels[op.kernels[i]].key.name;
        const Role r = op.kernel_roles[i];
        const bool expert_gemm =
            (r == Role::kExpertFc1 || r == Role::kExpertFc2) && name.rfind("gemm_", 0) == 0;
        if (!expert_gemm) {
          EXPECT_EQ(op.kernel_targets[i], -1) << name;
          continue;
        }
        per_expert.push_back(op.kernel_targets[i]);
      }
      // Each variant's GEMMs cover the local experts 0, 1, 2 in order.
      ASSERT_EQ(per_expert.size() % 3, 0u);
      for (size_t j = 0; j < per_expert.size(); ++j) {
        EXPECT_EQ(per_expert[j], static_cast<int32_t>(j % 3));
      }
      ++checked;
    }
    if (!grouped) EXPECT_GT(checked, 0);
  }
}

TEST(MoeProgram, LayerRolesInOrder) {
  for (auto disp : {MoeTokenDispatcher::kAllToAll, MoeTokenDispatcher::kAllGather}) {
    MoeKnobs k;
    k.tp = 2, k.dp = 2, k.ep = 2, k.dispatcher = disp, k.shared = 32;
    const Program prog = build_program(make_moe(k), {0});
    std::vector<Role> roles;
    for (const Op& op : prog.ranks.at(0).ops) {
      if (op.layer != 0 || op.micro_batch != 0 || op.phase != Phase::kForward) continue;
      for (Role r : op.kernel_roles) {
        if (roles.empty() || roles.back() != r) roles.push_back(r);
      }
      if (op.kind == OpKind::kCollective && op.role != roles.back()) roles.push_back(op.role);
    }
    const bool a2a = disp == MoeTokenDispatcher::kAllToAll;
    std::vector<Role> expected = {Role::kInputLayerNorm, Role::kQkv, Role::kAttentionCore,
                                  Role::kAttentionProjection, Role::kAttentionResidual,
                                  Role::kPostAttentionLayerNorm, Role::kRouter};
    for (Role r : a2a ? std::vector<Role>{Role::kMoePermute, Role::kMoeDispatch}
                      : std::vector<Role>{Role::kMoeDispatch, Role::kMoePermute}) {
      expected.push_back(r);
    }
    for (Role r : {Role::kExpertFc1, Role::kExpertActivation, Role::kExpertFc2}) expected.push_back(r);
    for (Role r : a2a ? std::vector<Role>{Role::kMoeCombine, Role::kMoeUnpermute}
                      : std::vector<Role>{Role::kMoeUnpermute, Role::kMoeCombine}) {
      expected.push_back(r);
    }
    for (Role r : {Role::kFc1, Role::kGelu, Role::kFc2, Role::kMlpResidual}) expected.push_back(r);
    EXPECT_EQ(roles, expected) << to_string(disp);
  }
}

// Dropless timing follows the busiest expert: moe_load_imbalance 1.5 makes the expert GEMMs and
// the dispatch 1.5 x (P 8 -> 12); a capacity factor of 1.25 caps it at C = 10, and padding to
// the capacity makes every expert C even when balanced.
TEST(MoeProgram, LoadImbalanceAndCapacityScaleExpertsAndDispatch) {
  auto measure = [](const MoeKnobs& k) {
    const Program prog = build_program(make_moe(k), {0});
    double expert_flops = 0;
    int64_t a2a_bytes = 0;
    for (const Op& op : prog.ranks.at(0).ops) {
      for (size_t i = 0; i < op.kernels.size(); ++i) {
        const Role r = op.kernel_roles[i];
        if (r == Role::kExpertFc1 || r == Role::kExpertFc2) expert_flops += prog.kernels[op.kernels[i]].flops;
      }
      if (op.kind == OpKind::kCollective && op.group == GroupKind::kEp) a2a_bytes += op.bytes;
    }
    return std::pair{expert_flops, a2a_bytes};
  };
  MoeKnobs k;
  k.tp = 2, k.dp = 2, k.ep = 2;
  const auto [f1, b1] = measure(k);
  k.imbalance = 1.5;
  const auto [f15, b15] = measure(k);
  EXPECT_DOUBLE_EQ(f15 / f1, 1.5);
  EXPECT_EQ(b15 * 2, b1 * 3);
  k.capacity = 1.25;
  const auto [fc, bc] = measure(k);
  EXPECT_DOUBLE_EQ(fc / f1, 10.0 / 8);
  EXPECT_EQ(bc * 8, b1 * 10);
  k.imbalance.reset();
  k.pad = true;
  const auto [fp, bp] = measure(k);
  EXPECT_DOUBLE_EQ(fp / f1, 10.0 / 8);
  EXPECT_EQ(bp * 8, b1 * 10);
}

// Expert parameters in DDP buckets of their own over expert-DP, dense ones over DP x CP:
// TP 2, DP 4, EP 2, ETP 1 -> expert-DP 8 / 2 = 4. Per layer and rank: 2 local experts of
// h x 2 x 48 + 48 x h = 9216 parameters; the dense part: the dense layer's minus its MLP
// (64 x 192 / 2 + 96 / 2 x 64 = 9216) plus the router (4 x 64 = 256).
TEST(MoeProgram, ExpertGradientsReducedOverExpertDataParallel) {
  for (bool dist : {false, true}) {
    MoeKnobs k;
    k.tp = 2, k.dp = 4, k.ep = 2, k.etp = 1, k.dist_opt = dist, k.overlap = true, k.m = 4;
    const Scenario s = make_moe(k);
    Scenario dense_s = s;
    dense_s.model.num_moe_experts = 0;
    const int64_t layers = s.model.num_layers;
    const Program prog = build_program(s, {0});
    int64_t expert_grads = 0, dense_grads = 0, expert_gathers = 0, dense_gathers = 0;
    std::map<int32_t, int> expert_layers;
    for (const Op& op : prog.ranks.at(0).ops) {
      if (op.kind != OpKind::kCollective) continue;
      if (op.role == Role::kGradBucket) {
        EXPECT_EQ(op.collective, dist ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce);
        (op.group == GroupKind::kEdp ? expert_grads : dense_grads) += op.bytes;
        EXPECT_TRUE(op.group == GroupKind::kEdp || op.group == GroupKind::kDpCp);
        if (op.group == GroupKind::kEdp) {
          for (int32_t l : op.bucket_layers) ++expert_layers[l];
        }
      }
      if (op.role == Role::kParamBucket) {
        (op.group == GroupKind::kEdp ? expert_gathers : dense_gathers) += op.bytes;
      }
    }
    EXPECT_EQ(prog.layout.size(GroupKind::kEdp), 4);
    EXPECT_EQ(expert_grads, layers * 2 * 9216 * 4);  // fp32 gradients
    EXPECT_EQ(dense_grads, (parameters_on_rank(dense_s, 0) - layers * (9216 - 256)) * 4);
    EXPECT_EQ(expert_gathers, dist ? layers * 2 * 9216 * 2 : 0);  // bf16 parameters
    EXPECT_EQ(dense_gathers, dist ? (parameters_on_rank(dense_s, 0) - layers * (9216 - 256)) * 2 : 0);
    EXPECT_EQ(expert_layers, (std::map<int32_t, int>{{0, 1}, {1, 1}}));
  }
}

// Megatron-Core's unfused permute / unpermute (moe_utils.py permute() and unpermute(), core_v0.10.0
// to core_v0.12, moe_permute_fusion off) and its layout copies, worked by hand: TP 2 (SP), DP 2,
// EP 2, ETP = TP 2, bf16 (e = 2 B), h 64; T = 32 / 2 = 16 router rows, k 2 of E 4 -> P 8, r = E P
// = 32 rows sent; E_l 2 local experts of R = ETP EP P = 32 rows, 64 rows in all. Indices int64.
//   permute fwd, index_select:              2 r h e + 8 r         = 8192 + 256         =  8448 B
//   permute bwd, zeros + index_add_:        (3 r + T) h e + 8 r   = 112 x 128 + 256    = 14592 B
//   unpermute fwd, mul + zeros + scatter_add_: (5 r + T) h e + 8 r = 176 x 128 + 256   = 22784 B
//   unpermute bwd, gather + mul + mul-sum:  8 r h e + 8 r         = 256 x 128 + 256    = 33024 B
//   moe_chunk_cat of the 64 rows (sort_chunks_by_idxs, SequentialMLP's torch.cat):
//                                           2 x 64 x 64 x 2                            = 16384 B
// sort_chunks_by_idxs runs twice forward (after the ETP all-gather, before the ETP
// reduce-scatter) and twice backward; SequentialMLP (no moe_grouped_gemm) adds its cat once each
// way; with one local expert (EP 4, ETP 1) there is nothing to sort or concatenate.
TEST(MoeProgram, PermuteUnpermuteAndChunkCopiesAsMegatronRunsThem) {
  for (int variant = 0; variant < 3; ++variant) {
    MoeKnobs k;
    k.tp = 2, k.dp = 2, k.ep = 2;
    k.grouped = variant != 1;
    if (variant == 2) k.ep = 4, k.etp = 1;  // E_l = 1
    const Program prog = build_program(make_moe(k), {0});
    std::map<std::string, double> bytes;
    std::map<std::pair<std::string, Phase>, int> count;
    for (const Op& op : prog.ranks.at(0).ops) {
      if (op.layer != 0 || op.micro_batch != 0) continue;
      for (uint32_t id : op.kernels) {
        const Kernel& kern = prog.kernels[id];
        if (kern.key.name.rfind("moe_", 0) != 0) continue;
        bytes[kern.key.name] = kern.bytes;
        ++count[{kern.key.name, op.phase}];
      }
    }
    const std::string where = "variant " + std::to_string(variant);
    if (variant == 2) {
      // EP 4 x ETP 1: one local expert, nothing to sort or concatenate.
      EXPECT_EQ(count.count({"moe_chunk_cat", Phase::kForward}), 0u) << where;
      EXPECT_EQ(count.count({"moe_chunk_cat", Phase::kBackward}), 0u) << where;
      continue;
    }
    EXPECT_EQ(bytes["moe_permute_fwd"], 8448) << where;
    EXPECT_EQ(bytes["moe_permute_bwd"], 14592) << where;
    EXPECT_EQ(bytes["moe_unpermute_fwd"], 22784) << where;
    EXPECT_EQ(bytes["moe_unpermute_bwd"], 33024) << where;
    EXPECT_EQ(bytes["moe_chunk_cat"], 16384) << where;
    const int cats = k.grouped ? 2 : 3;
    EXPECT_EQ((count[{"moe_chunk_cat", Phase::kForward}]), cats) << where;
    EXPECT_EQ((count[{"moe_chunk_cat", Phase::kBackward}]), cats) << where;
  }
}

// model.moe_permute_fusion (Megatron --moe-permute-fusion): the same four permutation steps as
// Transformer Engine's fused kernels (transformer_engine/pytorch/permutation.py, mask-map: each
// token row loaded once), one int32 destination row per routed copy. Same layout as above: r = 32
// rows sent, T = 16, h 64, bf16 (e = 2):
//   permute fwd:    (T + r) h e + 4 r      = 48 x 128 + 128   =  6272 B, no FLOPs
//   permute bwd:    (r + T) h e + 4 r      = 6272 B, r h      =  2048 FLOPs (the k copies summed)
//   unpermute fwd:  (r + T) h e + 8 r      = 6144 + 256       =  6400 B, 2 r h = 4096 FLOPs
//   unpermute bwd:  (2 r + T) h e + 12 r   = 80 x 128 + 384   = 10624 B, 3 r h = 6144 FLOPs
// against 8448 / 14592 / 22784 / 33024 B unfused; one of each per layer and micro-batch, as
// unfused, and no unfused permutation kernel left.
TEST(MoeProgram, PermuteFusionRunsTransformerEnginesFusedKernels) {
  MoeKnobs k;
  k.tp = 2, k.dp = 2, k.ep = 2, k.grouped = true;
  Scenario s = make_moe(k);
  s.model.moe_permute_fusion = true;
  const Program prog = build_program(s, {0});
  std::map<std::string, std::pair<double, double>> work;  // name -> (bytes, FLOPs)
  std::map<std::string, int> count;
  for (const Op& op : prog.ranks.at(0).ops) {
    if (op.layer != 0 || op.micro_batch != 0) continue;
    for (uint32_t id : op.kernels) {
      const Kernel& kern = prog.kernels[id];
      if (kern.key.name.find("permute") == std::string::npos) continue;
      work[kern.key.name] = {kern.bytes, kern.flops};
      ++count[kern.key.name];
    }
  }
  EXPECT_EQ(count, (std::map<std::string, int>{{"moe_permute_fused_bwd", 1},
                                               {"moe_permute_fused_fwd", 1},
                                               {"moe_unpermute_fused_bwd", 1},
                                               {"moe_unpermute_fused_fwd", 1}}));
  EXPECT_EQ(work["moe_permute_fused_fwd"], std::make_pair(6272.0, 0.0));
  EXPECT_EQ(work["moe_permute_fused_bwd"], std::make_pair(6272.0, 2048.0));
  EXPECT_EQ(work["moe_unpermute_fused_fwd"], std::make_pair(6400.0, 4096.0));
  EXPECT_EQ(work["moe_unpermute_fused_bwd"], std::make_pair(10624.0, 6144.0));
  for (const auto& [name, n] : count) EXPECT_NE(find_kernel(name), nullptr) << name;
}

// FP8 experts: Transformer Engine's Linear casts each of its 16-bit inputs itself (Megatron-Core's
// expert activation, fusions/fused_bias_swiglu.py, writes 16-bit): the permuted tokens (R x h) and
// the activation output (R x ffn_e / ETP) forward, the output gradient (R x h) and the
// activation's input gradient (R x 2 ffn_e / ETP) backward — one cast-transpose per local expert
// in SequentialMLP, one over the 2 R rows of both with moe_grouped_gemm. Same layout as above:
// R = 32, h 64, ffn_e 48 / ETP 2 = 24, SwiGLU FC1 96 / 2 = 48.
TEST(MoeProgram, Fp8ExpertInputsCastPerLocalExpert) {
  for (bool grouped : {false, true}) {
    MoeKnobs k;
    k.tp = 2, k.dp = 2, k.ep = 2, k.fp8 = true, k.grouped = grouped;
    const Program prog = build_program(make_moe(k), {0});
    std::vector<int64_t> fwd, bwd;
    for (const Op& op : prog.ranks.at(0).ops) {
      if (op.layer != 0 || op.micro_batch != 0) continue;
      for (size_t i = 0; i < op.kernels.size(); ++i) {
        const Kernel& kern = prog.kernels[op.kernels[i]];
        const Role r = op.kernel_roles[i];
        if (kern.key.name != "fp8_cast_transpose" ||
            (r != Role::kExpertFc1 && r != Role::kExpertFc2)) {
          continue;
        }
        EXPECT_EQ(kern.bytes, 4.0 * static_cast<double>(kern.key.shape[0]));  // 2 in, 1 + 1 out
        (op.phase == Phase::kForward ? fwd : bwd).push_back(kern.key.shape[0]);
      }
    }
    if (grouped) {
      EXPECT_EQ(fwd, (std::vector<int64_t>{64 * 64, 64 * 24}));
      EXPECT_EQ(bwd, (std::vector<int64_t>{64 * 64, 64 * 48}));
    } else {
      EXPECT_EQ(fwd, (std::vector<int64_t>{32 * 64, 32 * 64, 32 * 24, 32 * 24}));
      EXPECT_EQ(bwd, (std::vector<int64_t>{32 * 64, 32 * 64, 32 * 48, 32 * 48}));
    }
  }
}

}  // namespace
}  // namespace traintwin

namespace traintwin {
namespace {

// ---- gradient accumulation fusion off (Megatron of 2021) --------------------------------------

// training.gradient_accumulation_fusion false: each layer's backward of each micro-batch ends with
// one grad_accumulate kernel over that layer's parameters on the rank (Megatron's param hook,
// main_grad += param.grad), after the layer's wgrad GEMMs; under a split backward (ZB-H1) in the
// W step, after W's wgrads, never in B. With the fusion on (the default) there is none. The
// Programs replay without deadlock either way.
TEST(Program, UnfusedGradientAccumulationOneKernelPerLayerAndMicroBatch) {
  for (auto kind : {PipelineScheduleKind::k1F1B, PipelineScheduleKind::kZbH1}) {
    for (int64_t v : {1, 2}) {
      if (v > 1 && kind != PipelineScheduleKind::k1F1B) continue;
      for (bool fused : {true, false}) {
        SCOPED_TRACE(std::string(to_string(kind)) + " v " + std::to_string(v) +
                     (fused ? " fused" : " unfused"));
        Knobs k;
        k.tp = 2, k.pp = 2, k.v = v, k.m = 4, k.layers = 8, k.schedule = kind;
        k.recompute = RecomputeGranularity::kFull;
        Scenario sc = make(k);
        sc.training.gradient_accumulation_fusion = fused;
        const Program prog = build_program(sc);
        std::vector<std::string> errors;
        ASSERT_EQ(replay_all(prog, errors), 0u);
        ASSERT_TRUE(errors.empty()) << errors.front();
        const int64_t per_layer = layer_parameters_on_rank(sc.model, sc.parallel, 0).total();
        for (const auto& [rank, rp] : prog.ranks) {
          std::map<std::pair<int64_t, int64_t>, int> seen;  // (micro-batch, layer) -> kernels
          for (const Op& op : rp.ops) {
            bool wgrad_before = false;
            for (size_t i = 0; i < op.kernels.size(); ++i) {
              const Kernel& kern = prog.kernels[op.kernels[i]];
              if (kern.key.name == "gemm_wgrad") wgrad_before = true;
              if (kern.key.name != "grad_accumulate") continue;
              EXPECT_EQ(op.kernel_roles[i], Role::kGradAccumulate);
              EXPECT_EQ(kern.key.shape, (std::vector<int64_t>{per_layer}));
              EXPECT_GE(op.layer, 0);
              EXPECT_EQ(op.phase, kind == PipelineScheduleKind::kZbH1 ? Phase::kWeightGrad
                                                                      : Phase::kBackward);
              // Under W the op holds the layer's wgrads; else the layer's wgrads came in this op
              // or in earlier ops of the same backward.
              if (kind == PipelineScheduleKind::kZbH1) EXPECT_TRUE(wgrad_before);
              ++seen[{op.micro_batch, op.layer}];
            }
          }
          if (fused) {
            EXPECT_TRUE(seen.empty()) << "rank " << rank;
            continue;
          }
          // 8 layers over PP 2: 4 per pipeline rank, each once per micro-batch.
          EXPECT_EQ(seen.size(), 4u * 4u) << "rank " << rank;
          for (const auto& [key, n] : seen) EXPECT_EQ(n, 1) << "mb " << key.first << " layer " << key.second;
        }
      }
    }
  }
}

// ---- the B/W split of the zero-bubble schedules ----------------------------------------------

// ZB-H1 and ZB-H2 Programs replay to completion over a grid of layouts (the W steps between the
// p2p batches and the step that waits for them create no deadlock).
TEST(ProgramZeroBubble, ReplaysWithoutDeadlockOrMismatch) {
  int cases = 0;
  for (auto kind : {PipelineScheduleKind::kZbH1, PipelineScheduleKind::kZbH2}) {
    for (int64_t tp : {1, 2}) {
      for (int64_t pp : {2, 4}) {
        for (int64_t m : {4, 8}) {
          if (m < pp) continue;
          for (bool sp : {false, true}) {
            if (sp && tp == 1) continue;
            for (auto rc : {RecomputeGranularity::kNone, RecomputeGranularity::kSelective,
                            RecomputeGranularity::kFull}) {
              for (int flags = 0; flags < 4; ++flags) {
                Knobs k;
                k.tp = tp, k.pp = pp, k.m = m, k.sp = sp, k.recompute = rc, k.dp = 2;
                k.schedule = kind, k.layers = 2 * pp;
                k.dist_opt = flags & 1;
                k.overlap_grad = flags & 2;
                k.overlap_param = k.dist_opt && k.overlap_grad;
                k.tp_overlap = sp && (flags & 1);
                const Program prog = build_program(make(k));
                std::vector<std::string> errors;
                ASSERT_EQ(replay_all(prog, errors), 0u)
                    << to_string(kind) << " tp " << tp << " pp " << pp << " m " << m;
                ASSERT_TRUE(errors.empty()) << errors.front();
                ++cases;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 2 * (4 + 8) * 3 * 4);  // kinds x (tp 1: 4, tp 2 with SP on/off: 8) x ...
}

// An uneven split whose first stage holds only the embedding (2 layers + embedding + loss over PP
// 4): its B steps have no op, so the W of the same micro-batch (the embedding's backward, after
// its SP all-gather) waits for the gradient's recv itself; the Programs replay.
TEST(ProgramZeroBubble, EmbeddingOnlyStageWaitsForTheGradientInW) {
  for (auto kind : {PipelineScheduleKind::kZbH1, PipelineScheduleKind::kZbH2}) {
    for (bool sp : {false, true}) {
      Knobs k;
      k.tp = 2, k.pp = 4, k.m = 4, k.layers = 2, k.sp = sp, k.schedule = kind;
      k.account_embedding = true, k.account_loss = true;
      const Program prog = build_program(make(k));
      std::vector<std::string> errors;
      ASSERT_EQ(replay_all(prog, errors), 0u) << to_string(kind);
      ASSERT_TRUE(errors.empty()) << errors.front();
      const RankProgram& rp = prog.ranks.at(0);  // stage 0, TP rank 0
      int64_t recvs = 0;
      for (const Op& op : rp.ops) {
        if (op.kind != OpKind::kRecv) continue;
        ++recvs;
        // The gradient's micro-batch (a recv issued with a forward's send carries that
        // forward's micro-batch as its own).
        const int64_t mb = read_pipeline_tag(op.tag, 4).micro_batch;
        bool waited_by_w = false;
        for (const Op& later : rp.ops) {
          if (later.phase != Phase::kWeightGrad || later.micro_batch != mb) continue;
          waited_by_w |= std::find(later.deps.begin(), later.deps.end(), op.id) != later.deps.end();
        }
        EXPECT_TRUE(waited_by_w) << prog.label(op);
      }
      EXPECT_EQ(recvs, 4);  // one gradient per micro-batch
    }
  }
}

/// Per kernel name, the sum of FLOPs and the number of launches over all ranks and ops of `phase`
/// (every phase when nullopt).
std::map<std::string, std::pair<double, int64_t>> kernels_by_name(const Program& prog,
                                                                  std::optional<Phase> phase) {
  std::map<std::string, std::pair<double, int64_t>> out;
  for (const auto& [r, rp] : prog.ranks) {
    for (const Op& op : rp.ops) {
      if (phase && op.phase != *phase) continue;
      for (uint32_t id : op.kernels) {
        auto& [flops, n] = out[prog.kernels[id].key.name];
        flops += prog.kernels[id].flops;
        ++n;
      }
    }
  }
  return out;
}

// The split moves kernels between steps and never adds or drops one: the same kernels (names,
// counts, FLOPs) as 1F1B; the W ops hold exactly the wgrad GEMMs and the embedding's backward,
// and no other op holds a wgrad GEMM.
TEST(ProgramZeroBubble, SameKernelsAsOneFOneBWithWgradInW) {
  for (bool sp : {false, true}) {
    Knobs k;
    k.tp = 2, k.pp = 2, k.dp = 2, k.m = 4, k.sp = sp, k.layers = 4;
    const Program one_f_one_b = build_program(make(k));
    k.schedule = PipelineScheduleKind::kZbH1;
    const Program zb = build_program(make(k));
    EXPECT_EQ(kernels_by_name(zb, std::nullopt), kernels_by_name(one_f_one_b, std::nullopt));
    const auto w = kernels_by_name(zb, Phase::kWeightGrad);
    // Per micro-batch (4) and rank (8): 4 wgrad GEMMs per layer (2 layers per stage) and the LM
    // head's on the last stage (4 ranks); the embedding's backward on the first stage (4 ranks).
    ASSERT_EQ(w.size(), 2u);
    EXPECT_EQ(w.at("gemm_wgrad").second, 4 * (8 * 2 * 4 + 4));
    EXPECT_EQ(w.at("embedding_bwd").second, 4 * 4);
    EXPECT_EQ(kernels_by_name(zb, Phase::kBackward).count("gemm_wgrad"), 0u);
    EXPECT_EQ(kernels_by_name(zb, Phase::kWeightGrad).at("gemm_wgrad"),
              kernels_by_name(one_f_one_b, Phase::kBackward).at("gemm_wgrad"));
    // The only communication of a W step: with SP, the all-gather of each column-parallel
    // linear's saved input (QKV, FC1 per layer, the LM head) before its wgrad, and that of the
    // embedding's output gradient.
    std::map<std::string, int64_t> w_collectives;
    for (const auto& [r, rp] : zb.ranks) {
      for (const Op& op : rp.ops) {
        if (op.phase != Phase::kWeightGrad || op.kind != OpKind::kCollective) continue;
        ++w_collectives[op.what];
        EXPECT_EQ(op.collective, CollectiveKind::kAllGather);
      }
    }
    if (sp) {
      EXPECT_EQ(w_collectives,
                (std::map<std::string, int64_t>{{"sp all_gather input", 4 * (8 * 2 * 2 + 4)},
                                                {"sp all_gather grad", 4 * 4}}));
    } else {
      EXPECT_TRUE(w_collectives.empty());
    }
  }
}

// The DP gradient buckets start after the last W of their layers (the gradients are complete
// only then), not after the last B; with 1F1B after the last backward as before.
TEST(ProgramZeroBubble, GradientBucketsFollowTheLastW) {
  Knobs k;
  k.pp = 2, k.dp = 2, k.m = 4, k.layers = 4, k.overlap_grad = true;
  k.schedule = PipelineScheduleKind::kZbH1;
  const Program prog = build_program(make(k));
  for (const auto& [r, rp] : prog.ranks) {
    int64_t buckets = 0;
    for (const Op& op : rp.ops) {
      if (op.role != Role::kGradBucket) continue;
      ++buckets;
      // Its producer: the compute op it follows is a W op of the last micro-batch's W.
      ASSERT_FALSE(op.deps.empty());
      const Op& producer = rp.ops[op.deps.front()];
      EXPECT_EQ(producer.phase, Phase::kWeightGrad) << prog.label(op);
      EXPECT_EQ(producer.micro_batch, 3) << prog.label(op);
    }
    EXPECT_GE(buckets, 1) << "rank " << r;
  }
}

// Under 1F1B nothing moves: no W phase in the Program.
TEST(ProgramZeroBubble, OneFOneBHasNoWeightGradPhase) {
  Knobs k;
  k.tp = 2, k.pp = 2, k.m = 4, k.sp = true;
  const Program prog = build_program(make(k));
  for (const auto& [r, rp] : prog.ranks) {
    for (const Op& op : rp.ops) EXPECT_NE(op.phase, Phase::kWeightGrad);
  }
}

// ---- DualPipe: two parameter copies, two directions --------------------------------------------

// DualPipe Programs (DeepSeek-V3 sec. 3.2.1; core/schedule.hpp dualpipe_schedule) replay to
// completion over a grid of layouts: the two directions' transfers match by tag, and the mirror
// all-reduce of each pair of ranks r and p - 1 - r meets.
TEST(ProgramDualPipe, ReplaysWithoutDeadlockOrMismatch) {
  int cases = 0;
  for (int64_t tp : {1, 2}) {
    for (int64_t pp : {2, 4}) {
      for (int64_t m : {2 * pp, 2 * pp + 2}) {
        for (bool sp : {false, true}) {
          if (sp && tp == 1) continue;
          for (auto rc : {RecomputeGranularity::kNone, RecomputeGranularity::kFull}) {
            for (int flags = 0; flags < 4; ++flags) {
              Knobs k;
              k.tp = tp, k.pp = pp, k.v = 2, k.m = m, k.sp = sp, k.recompute = rc, k.dp = 2;
              k.schedule = PipelineScheduleKind::kDualPipe, k.layers = 2 * pp;
              k.dist_opt = flags & 1;
              k.overlap_grad = flags & 2;
              k.overlap_param = k.dist_opt && k.overlap_grad;
              const Program prog = build_program(make(k));
              std::vector<std::string> errors;
              ASSERT_EQ(replay_all(prog, errors), 0u) << "tp " << tp << " pp " << pp << " m " << m;
              ASSERT_TRUE(errors.empty()) << errors.front();
              ++cases;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 3 * 2 * 2 * 2 * 4);  // (tp, sp) x pp x m x recompute x flags
}

// Every micro-batch runs through the whole model once, in one direction: over all ranks the step
// kernels (forward, input and weight gradients) are 1F1B's, names, counts and FLOPs; the
// embedding runs on both end ranks (rank 0 for micro-batches 0..m/2-1, rank p - 1 for the
// others) and so does the loss; the only W kernels are the wgrad GEMMs and the embedding's
// backward.
TEST(ProgramDualPipe, SameStepKernelsAsOneFOneBWithEmbeddingAndLossOnBothEnds) {
  for (bool sp : {false, true}) {
    Knobs k;
    k.tp = 2, k.pp = 4, k.dp = 1, k.m = 8, k.sp = sp, k.layers = 8;
    const Program one_f_one_b = build_program(make(k));
    k.v = 2, k.schedule = PipelineScheduleKind::kDualPipe;
    const Program dual = build_program(make(k));
    auto steps = [](const Program& prog) {
      std::map<std::string, std::pair<double, int64_t>> all;
      for (Phase ph : {Phase::kForward, Phase::kBackward, Phase::kWeightGrad, Phase::kRecompute}) {
        for (const auto& [name, fn] : kernels_by_name(prog, ph)) {
          all[name].first += fn.first;
          all[name].second += fn.second;
        }
      }
      return all;
    };
    const auto a = steps(dual), b = steps(one_f_one_b);
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [name, fn] : b) {
      ASSERT_TRUE(a.count(name)) << name;
      EXPECT_EQ(a.at(name).second, fn.second) << name;
      EXPECT_NEAR(a.at(name).first, fn.first, 1e-9 * fn.first) << name;
    }
    const auto w = kernels_by_name(dual, Phase::kWeightGrad);
    ASSERT_EQ(w.size(), 2u);
    EXPECT_TRUE(w.count("gemm_wgrad") && w.count("embedding_bwd"));
    for (const auto& [r, rp] : dual.ranks) {
      std::set<int64_t> embedded, lost;  // micro-batches
      for (const Op& op : rp.ops) {
        for (uint32_t id : op.kernels) {
          const std::string& name = dual.kernels[id].key.name;
          if (name == "embedding_fwd") embedded.insert(op.micro_batch);
          if (name == "cross_entropy_fwd") lost.insert(op.micro_batch);
        }
      }
      const int64_t pp = rp.coord.pp;
      const std::set<int64_t> first_half = {0, 1, 2, 3}, second_half = {4, 5, 6, 7};
      if (pp == 0) {  // forward direction's stage 0, reverse direction's stage 3
        EXPECT_EQ(embedded, first_half);
        EXPECT_EQ(lost, second_half);
      } else if (pp == 3) {
        EXPECT_EQ(embedded, second_half);
        EXPECT_EQ(lost, first_half);
      } else {
        EXPECT_TRUE(embedded.empty() && lost.empty()) << "rank " << r;
      }
    }
  }
}

// The gradients: each chunk's DP buckets carry its copy's parameters (every parameter of the rank
// once, the tied LM head as the end ranks' one word embedding), then one all-reduce over the
// mirror pair (ranks r and p - 1 - r, GroupKind::kPpMirror) of the gradients the optimizer reads
// (all of them; the DP x CP shard with the distributed optimizer), before the gradient norm; no
// embedding-group all-reduce (the mirror sums the end ranks' word embeddings).
TEST(ProgramDualPipe, DataParallelBucketsThenOneMirrorAllReduce) {
  for (bool dist : {false, true}) {
    Knobs k;
    k.pp = 4, k.v = 2, k.dp = 2, k.m = 8, k.layers = 8, k.dist_opt = dist;
    k.schedule = PipelineScheduleKind::kDualPipe;
    const Scenario s = make(k);
    const Program prog = build_program(s);
    for (const auto& [r, rp] : prog.ranks) {
      const int64_t params = parameters_on_rank(s, rp.coord.pp);
      int64_t grad_bytes = 0, embedding_all_reduces = 0, mirrors = 0;
      uint32_t mirror = 0, norm = 0;
      for (const Op& op : rp.ops) {
        if (op.kind == OpKind::kCollective && op.group == GroupKind::kDpCp &&
            op.phase == Phase::kGradSync) {
          grad_bytes += op.bytes;
        }
        embedding_all_reduces += op.kind == OpKind::kCollective && op.group == GroupKind::kEmbedding;
        if (op.role == Role::kMirrorGrads) {
          ++mirrors;
          mirror = op.id;
          EXPECT_EQ(op.group, GroupKind::kPpMirror);
          EXPECT_EQ(op.collective, CollectiveKind::kAllReduce);
          // fp32 gradients of the whole rank, or of its half (DP 2) with the distributed optimizer
          EXPECT_EQ(op.bytes, (dist ? (params + 1) / 2 : params) * 4) << "rank " << r;
        }
        if (op.kind == OpKind::kCompute && !op.kernel_roles.empty() &&
            op.kernel_roles.front() == Role::kGradNorm) {
          norm = op.id;
        }
      }
      EXPECT_EQ(grad_bytes, params * 4) << "rank " << r;
      EXPECT_EQ(embedding_all_reduces, 0) << "rank " << r;
      EXPECT_EQ(mirrors, 1) << "rank " << r;
      EXPECT_LT(mirror, norm) << "rank " << r;
      const std::vector<int64_t> pair = prog.layout.group(GroupKind::kPpMirror, r);
      ASSERT_EQ(pair.size(), 2u);
      EXPECT_EQ(prog.layout.coord(pair[0]).pp + prog.layout.coord(pair[1]).pp, 3);
    }
    // Ranks r and 3 - r hold the same parameters: stages r and 3 - r.
    EXPECT_EQ(parameters_on_rank(s, 0), parameters_on_rank(s, 3));
    EXPECT_EQ(parameters_on_rank(s, 1), parameters_on_rank(s, 2));
  }
}

}  // namespace
}  // namespace traintwin
