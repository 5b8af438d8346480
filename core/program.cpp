// The Program's value names and per-rank statistics, and build_program(): the scenario's layout,
// then one RankLowering (core/rank_lowering.hpp) per wanted rank into a shared kernel table.
#include "core/program.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "core/error.hpp"
#include "core/kernel_catalogue.hpp"
#include "core/memory.hpp"
#include "core/moe_tokens.hpp"
#include "core/params.hpp"
#include "core/pipeline_order.hpp"
#include "core/pipeline_split.hpp"
#include "core/rank_lowering.hpp"

namespace traintwin {

const char* to_string(Stream s) {
  switch (s) {
    case Stream::kCompute: return "compute";
    case Stream::kTpComm: return "tp-comm";
    case Stream::kCpComm: return "cp-comm";
    case Stream::kPpComm: return "pp-comm";
    case Stream::kDpComm: return "dp-comm";
    case Stream::kEpComm: return "ep-comm";
    case Stream::kOffload: return "offload";
  }
  return "?";
}

const char* to_string(OpKind k) {
  switch (k) {
    case OpKind::kCompute: return "compute";
    case OpKind::kCollective: return "collective";
    case OpKind::kSend: return "send";
    case OpKind::kRecv: return "recv";
    case OpKind::kHost: return "host";
  }
  return "?";
}

const char* to_string(HostOp h) {
  switch (h) {
    case HostOp::kCopyD2H: return "d2h copy";
    case HostOp::kCopyH2D: return "h2d copy";
    case HostOp::kCpuAdamW: return "cpu adamw";
  }
  return "?";
}

const char* to_string(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kAllToAll: return "all_to_all";
    case CollectiveKind::kRingExchange: return "ring_exchange";
  }
  return "?";
}

const char* to_string(Phase p) {
  switch (p) {
    case Phase::kForward: return "fwd";
    case Phase::kBackward: return "bwd";
    case Phase::kRecompute: return "recompute";
    case Phase::kGradSync: return "grad-sync";
    case Phase::kParamSync: return "param-sync";
    case Phase::kOptimizer: return "optimizer";
    case Phase::kWeightGrad: return "wgrad";
  }
  return "?";
}

const char* to_string(Role r) {
  switch (r) {
    case Role::kNone: return "none";
    case Role::kEmbedding: return "embedding";
    case Role::kEmbeddingDropout: return "embedding dropout";
    case Role::kInputLayerNorm: return "input layernorm";
    case Role::kQkv: return "qkv";
    case Role::kAttentionCore: return "attention core";
    case Role::kAttentionProjection: return "attention projection";
    case Role::kAttentionResidual: return "attention residual";
    case Role::kPostAttentionLayerNorm: return "post-attention layernorm";
    case Role::kFc1: return "fc1";
    case Role::kGelu: return "activation";
    case Role::kFc2: return "fc2";
    case Role::kMlpResidual: return "mlp residual";
    case Role::kRouter: return "router";
    case Role::kMoePermute: return "moe permute";
    case Role::kMoeDispatch: return "moe dispatch";
    case Role::kExpertFc1: return "expert fc1";
    case Role::kExpertActivation: return "expert activation";
    case Role::kExpertFc2: return "expert fc2";
    case Role::kMoeCombine: return "moe combine";
    case Role::kMoeUnpermute: return "moe unpermute";
    case Role::kFinalLayerNorm: return "final layernorm";
    case Role::kLmHead: return "lm head";
    case Role::kCrossEntropyMax: return "cross entropy max";
    case Role::kCrossEntropy: return "cross entropy";
    case Role::kCrossEntropyTarget: return "cross entropy target";
    case Role::kCrossEntropySumExp: return "cross entropy sum-exp";
    case Role::kPipeline: return "pipeline";
    case Role::kGradBucket: return "grad bucket";
    case Role::kParamBucket: return "param bucket";
    case Role::kLayerNormGrads: return "layernorm grads";
    case Role::kEmbeddingGrads: return "embedding grads";
    case Role::kMirrorGrads: return "mirror grads";
    case Role::kGradNorm: return "grad norm";
    case Role::kOptimizerStep: return "optimizer step";
    case Role::kZeroGradBuffer: return "zero grad buffer";
    case Role::kGradAccumulate: return "grad accumulate";
    case Role::kGradClipScale: return "grad clip scale";
    case Role::kOffloadedOptimizer: return "offloaded optimizer";
    case Role::kActivationOffload: return "activation offload";
  }
  return "?";
}

std::string KernelKey::to_string() const {
  std::ostringstream o;
  o << name << '[';
  for (size_t i = 0; i < shape.size(); ++i) o << (i ? "," : "") << shape[i];
  o << "] " << traintwin::to_string(dtype) << " tp" << tp;
  return o.str();
}

size_t KernelKeyHash::operator()(const KernelKey& k) const {
  size_t h = std::hash<std::string>()(k.name);
  auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  for (int64_t d : k.shape) mix(std::hash<int64_t>()(d));
  mix(static_cast<size_t>(k.dtype));
  mix(std::hash<int64_t>()(k.tp));
  return h;
}

double Program::op_flops(const Op& op) const {
  double f = 0;
  for (uint32_t k : op.kernels) f += kernels[k].flops;
  return f;
}

std::string Program::label(const Op& op) const {
  std::ostringstream o;
  o << to_string(op.phase);
  if (op.micro_batch >= 0) o << " mb" << op.micro_batch;
  if (op.model_chunk >= 0 && scenario.parallel.virtual_pipeline_model_parallel_size > 1) {
    o << " chunk" << op.model_chunk;
  }
  if (op.layer >= 0) o << " L" << op.layer;
  o << ' ' << op.what;
  switch (op.kind) {
    case OpKind::kCompute: break;
    case OpKind::kCollective:
      o << " [" << to_string(op.collective) << ' ' << to_string(op.group) << ' ' << op.bytes
        << " B]";
      break;
    case OpKind::kSend: o << " [send " << op.bytes << " B to " << op.peer << " tag " << op.tag << ']'; break;
    case OpKind::kRecv: o << " [recv " << op.bytes << " B from " << op.peer << " tag " << op.tag << ']'; break;
    case OpKind::kHost: o << " [" << to_string(op.host) << ' ' << op.bytes << " B]"; break;
  }
  return o.str();
}

RankProgramStats program_stats(const Program& prog, const RankProgram& rp) {
  RankProgramStats st;
  for (const Op& op : rp.ops) {
    const auto s = static_cast<size_t>(op.stream);
    ++st.ops[s];
    if (op.kind == OpKind::kCompute) {
      st.kernels += static_cast<int64_t>(op.kernels.size());
      st.flops += prog.op_flops(op);
    } else {
      st.comm_bytes[s] += static_cast<double>(op.bytes);
    }
  }
  return st;
}

int64_t ddp_bucket_size_params(const Scenario& s) {
  if (!s.training.overlap_grad_reduce) return 0;
  // Megatron-LM training.py: bucket_size = max(40000000, 1000000 * dp_size_with_cp).
  const int64_t dp_cp = s.parallel.data_parallel_size * s.parallel.context_parallel_size;
  return std::max<int64_t>(40'000'000, 1'000'000 * dp_cp);
}


namespace {

/// build_program's body; `order`: null, or each pipeline rank's steps (checked).
Program lower_program(const Scenario& s, const std::vector<int64_t>& ranks, StepScope scope,
                      const PipelineOrder* order) {
  if (s.training.tp_comm_overlap && !s.parallel.sequence_parallel) {
    throw UnsupportedError(
        "training.tp_comm_overlap needs parallelism.sequence_parallel: true (as Megatron-LM's "
        "--tp-comm-overlap)");
  }
  Program prog{s,
               layout_of(s),
               {},
               {}};
  if (prog.layout.world_size() != s.cluster.num_gpus) {
    throw InvalidArgument("cluster.num_gpus = " + std::to_string(s.cluster.num_gpus) +
                          " differs from TP x CP x DP x PP = " +
                          std::to_string(prog.layout.world_size()));
  }
  std::vector<int64_t> wanted = ranks;
  if (wanted.empty()) {
    for (int64_t r = 0; r < prog.layout.world_size(); ++r) wanted.push_back(r);
  }
  lowering::KernelTable table(prog.kernels);
  for (int64_t r : wanted) {
    RankProgram rp;
    rp.rank = r;
    rp.coord = prog.layout.coord(r);  // throws for a rank outside the world
    const std::vector<ScheduleStep>* steps =
        order != nullptr ? &order->ranks.at(static_cast<size_t>(rp.coord.pp)) : nullptr;
    lowering::RankLowering(prog.scenario, prog.layout, table, rp, scope, steps).run();
    prog.ranks.emplace(r, std::move(rp));
  }
  return prog;
}

}  // namespace

Program build_program(const Scenario& s, const std::vector<int64_t>& ranks, StepScope scope) {
  return lower_program(s, ranks, scope, nullptr);
}

Program build_program(const Scenario& s, const PipelineOrder& order,
                      const std::vector<int64_t>& ranks, StepScope scope) {
  check_pipeline_order(s, order);
  return lower_program(s, ranks, scope, &order);
}

}  // namespace traintwin
