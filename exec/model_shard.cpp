// The parameters of one rank: layout, TP split and layout-independent initialization as
// specified in model_shard.hpp.
//
// Random stream of a tensor: stream_id({fnv1a64(global name)}) — the FNV-1a 64 hash
// (exec/checkpoint.hpp) of the tensor's global name, e.g. "layers.3.mlp.linear_fc1.weight", fed as
// the single part of counter_rng.hpp's stream_id. output_layer.weight draws from the stream of
// "embedding.word_embeddings.weight", so the LM head's copy starts equal to the embedding.
// Element (i, j) of the global tensor [rows, cols] is
//   static_cast<float>(counter_normal(seed, stream, i x cols + j) x std)
// (product in double, one rounding to float), hence the same bits on every TP/PP layout.
//
// Flags follow Megatron-LM: tensor_parallel is set for every column/row/vocab-parallel tensor
// whatever TP is (megatron/core/tensor_parallel/layers.py sets tensor_model_parallel = True for
// TP 1 too); sequence_parallel_grad mirrors Megatron's `sequence_parallel` parameter attribute,
// which LayerNorms and row-parallel biases carry only when sequence parallelism is on
// (config.sequence_parallel), i.e. exactly the tensors whose gradients need a TP all-reduce.
#include "exec/model_shard.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "core/checks.hpp"
#include "core/error.hpp"
#include "core/params.hpp"
#include "core/pipeline_split.hpp"
#include "core/schedule.hpp"
#include "exec/checkpoint.hpp"
#include "exec/counter_rng.hpp"
#include "exec/cpu/cpu_backend.hpp"

namespace traintwin::exec {
namespace {

constexpr const char* kWhere = "exec/model_shard";
constexpr const char* kWordEmbedding = "embedding.word_embeddings.weight";

enum class Init { kZeros, kOnes, kNormal };

/// Where the local elements of a tensor sit in its global (unsharded) tensor [*, global_cols]:
/// local row r is global row (r / block_rows) x block_stride + row_offset + r % block_rows (QKV:
/// blocks of h/t rows for q, k, v, stride h; otherwise one block), local column c is global
/// column col_offset + c. Global rows >= valid_rows (padded vocabulary) are 0.
struct GlobalMap {
  int64_t block_rows = 0;  ///< 0: the whole tensor is one block
  int64_t block_stride = 0;
  /// When set, the local rows are consecutive segments {rows, first global row} (a fused
  /// [q | k | v] or [gate | up] shard whose parts differ in size); block_* and row_offset unused.
  std::vector<std::pair<int64_t, int64_t>> segments;
  int64_t row_offset = 0;
  int64_t col_offset = 0;
  int64_t global_cols = 1;
  int64_t valid_rows = std::numeric_limits<int64_t>::max();
};

/// A tensor to lay out, with how to initialize it.
struct TensorSpec {
  ShardTensor tensor;
  Init init = Init::kZeros;
  std::string stream_name;  ///< name whose random stream it draws from (kNormal)
  double std = 0.0;
  GlobalMap map;
};

/// The stream of a tensor: stream_id({FNV-1a 64 of its global name}).
uint64_t name_stream(const std::string& name) {
  return stream_id({fnv1a64(name.data(), name.size())});
}

void require_coord(int64_t value, int64_t size, const char* coord_name, const char* size_name) {
  if (value < 0 || value >= size) {
    throw InvalidArgument(fmt::format("{}: rank coordinate {} = {} is outside [0, {} = {})", kWhere,
                                      coord_name, value, size_name, size));
  }
}

/// Fills `out` (the local tensor, row-major `shape`) as the spec says.
void initialize(const TensorSpec& spec, uint64_t seed, std::span<float> out) {
  if (spec.init == Init::kZeros) {
    std::fill(out.begin(), out.end(), 0.0f);
    return;
  }
  if (spec.init == Init::kOnes) {
    std::fill(out.begin(), out.end(), 1.0f);
    return;
  }
  const auto& shape = spec.tensor.shape;
  const int64_t rows = shape.size() == 2 ? shape[0] : 1;
  const int64_t cols = shape.size() == 2 ? shape[1] : shape[0];
  const GlobalMap& m = spec.map;
  const int64_t block_rows = m.block_rows > 0 ? m.block_rows : rows;
  const uint64_t stream = name_stream(spec.stream_name);
  auto global_row = [&](int64_t r) {
    if (m.segments.empty()) return (r / block_rows) * m.block_stride + m.row_offset + r % block_rows;
    for (const auto& [n, first] : m.segments) {
      if (r < n) return first + r;
      r -= n;
    }
    throw InvalidArgument(fmt::format("{}: {} has more rows than its segments", kWhere,
                                      spec.tensor.name));
  };
  std::vector<int64_t> global_rows(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) global_rows[static_cast<size_t>(r)] = global_row(r);
  auto fill_rows = [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      const int64_t grow = global_rows[static_cast<size_t>(r)];
      float* row = out.data() + r * cols;
      if (grow >= m.valid_rows) {
        std::fill(row, row + cols, 0.0f);
        continue;
      }
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t index = grow * m.global_cols + m.col_offset + c;
        row[c] = static_cast<float>(counter_normal(seed, stream, static_cast<uint64_t>(index)) *
                                    spec.std);
      }
    }
  };
  // Every element is a function of its global index alone, so the rows split over threads give
  // the same bits as one thread (1.3 G draws take about a minute on one core).
  constexpr int64_t kElementsPerThread = int64_t{1} << 22;
  const int64_t threads = std::clamp<int64_t>(
      rows * cols / kElementsPerThread, 1,
      std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency())));
  if (threads == 1) {
    fill_rows(0, rows);
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  for (int64_t t = 0; t < threads; ++t) {
    pool.emplace_back(fill_rows, rows * t / threads, rows * (t + 1) / threads);
  }
  for (std::thread& th : pool) th.join();
}

}  // namespace

ModelShard::ModelShard(const Scenario& s, const RankCoord& coord, uint64_t seed,
                       double init_method_std)
    : ModelShard(s, coord, seed, init_method_std, cpu::host_backend()) {}

ModelShard::ModelShard(const Scenario& s, const RankCoord& coord, uint64_t seed,
                       double init_method_std, Backend& backend)
    : backend_(&backend), scenario_(s), coord_(coord) {
  const ParallelConfig& par = s.parallel;
  const ModelSpec& model = s.model;
  require_valid_model(model);
  require_at_least_one(par.tensor_model_parallel_size, "tensor_model_parallel_size");
  require_at_least_one(par.pipeline_model_parallel_size, "pipeline_model_parallel_size");
  require_at_least_one(par.virtual_pipeline_model_parallel_size,
                       "virtual_pipeline_model_parallel_size");
  require_at_least_one(par.context_parallel_size, "context_parallel_size");
  require_at_least_one(par.data_parallel_size, "data_parallel_size");
  require_coord(coord.tp, par.tensor_model_parallel_size, "tp", "tensor_model_parallel_size");
  require_coord(coord.cp, par.context_parallel_size, "cp", "context_parallel_size");
  require_coord(coord.dp, par.data_parallel_size, "dp", "data_parallel_size");
  require_coord(coord.pp, par.pipeline_model_parallel_size, "pp", "pipeline_model_parallel_size");
  // Divisibility of layers, hidden and ffn sizes (throws InvalidArgument naming the field).
  (void)parameters_on_rank(s, coord.pp);
  if (model.num_attention_heads % par.tensor_model_parallel_size != 0) {
    throw InvalidArgument(fmt::format(
        "{}: num_attention_heads ({}) must be divisible by tensor_model_parallel_size ({})", kWhere,
        model.num_attention_heads, par.tensor_model_parallel_size));
  }
  // Mixture of experts: EP splits the experts, ETP each expert's (and TP the shared expert's)
  // width.
  const bool moe = model.is_moe();
  const int64_t ep_size = par.expert_model_parallel_size;
  const int64_t etp_size = moe ? par.expert_tp() : 1;
  const int64_t ffn_e = model.moe_expert_ffn();
  const int64_t ffn_s = model.moe_shared_expert_intermediate_size;
  if (moe) {
    require_at_least_one(ep_size, "expert_model_parallel_size");
    require_at_least_one(etp_size, "expert_tensor_parallel_size");
    auto divides = [&](int64_t d, const char* d_name, int64_t n, const char* n_name) {
      if (n % d != 0) {
        throw InvalidArgument(fmt::format("{}: {} ({}) must be divisible by {} ({})", kWhere,
                                          n_name, n, d_name, d));
      }
    };
    divides(ep_size, "expert_model_parallel_size", model.num_moe_experts, "num_moe_experts");
    divides(etp_size, "expert_tensor_parallel_size", ffn_e, "moe_ffn_hidden_size");
    divides(par.tensor_model_parallel_size, "tensor_model_parallel_size", ffn_s,
            "moe_shared_expert_intermediate_size");
    const RankLayout layout = layout_of(s);  // throws InvalidArgument for a folding that fails
    expert_ = layout.expert_coord(layout.rank(coord));
    if (model.add_bias_linear) {
      throw UnsupportedError(fmt::format(
          "{}: model.add_bias_linear with num_moe_experts > 0: MoE layers have no linear biases "
          "here (Megatron's grouped GEMM has none; set add_bias_linear: false)",
          kWhere));
    }
    local_experts_ = model.num_moe_experts / ep_size;
  }
  if (!std::isfinite(init_method_std) || init_method_std < 0.0) {
    throw InvalidArgument(fmt::format("{}: init_method_std must be finite and >= 0, got {}", kWhere,
                                      init_method_std));
  }

  const int64_t t = par.tensor_model_parallel_size;
  const int64_t p = par.pipeline_model_parallel_size;
  const int64_t v = par.virtual_pipeline_model_parallel_size;
  const int64_t h = model.hidden_size;
  const int64_t ffn = model.ffn_hidden_size;
  const int64_t hl = h / t;
  const int64_t ffnl = ffn / t;
  const int64_t tp = coord.tp;
  const bool sp = par.sequence_parallel;
  // Megatron's scaled_init_method_normal: std / sqrt(2 num_layers) for the output layers of
  // attention and MLP (linear_proj, linear_fc2).
  const double scaled_std =
      init_method_std / std::sqrt(2.0 * static_cast<double>(model.num_layers));
  vocab_local_ = padded_vocab_size(model.vocab_size, t) / t;

  // Factories for the kinds of tensors.
  auto replicated_1d = [&](std::string name, int32_t item, int64_t n, Init init, bool sp_grad) {
    TensorSpec spec;
    spec.tensor.name = std::move(name);
    spec.tensor.item = item;
    spec.tensor.shape = {n};
    spec.tensor.weight_decay = false;
    spec.tensor.sequence_parallel_grad = sp_grad && sp;
    spec.init = init;
    return spec;
  };
  auto weight = [&](std::string name, int32_t item, int64_t rows, int64_t cols, double std,
                    GlobalMap map, bool tensor_parallel) {
    TensorSpec spec;
    spec.tensor.name = name;
    spec.tensor.item = item;
    spec.tensor.shape = {rows, cols};
    spec.tensor.tensor_parallel = tensor_parallel;
    spec.init = Init::kNormal;
    spec.stream_name = std::move(name);
    spec.std = std;
    spec.map = map;
    return spec;
  };
  auto vocab_weight = [&](std::string name, int32_t item) {
    GlobalMap map;
    map.row_offset = vocab_start();
    map.global_cols = h;
    map.valid_rows = model.vocab_size;
    TensorSpec spec = weight(std::move(name), item, vocab_local_, h, init_method_std, map, true);
    spec.stream_name = kWordEmbedding;
    return spec;
  };

  const int64_t last_vstage = p * v - 1;
  const PipelineScheduleKind schedule = par.pipeline_schedule;
  // (DualPipe: the last virtual stage is on rank 0 too, and rank p - 1's loss stage shares its
  // rank with the reverse direction's embedding.)
  head_copy_ = model.untie_embeddings_and_output_weights ||
               rank_of_virtual_stage(schedule, p, last_vstage) != 0;
  for (int64_t c = 0; c < v; ++c) {
    // The Program's placement (chunk x p + rank, or the V of zb-v, dualpipev and dualpipe).
    const int64_t vs = virtual_stage_of(schedule, p, coord.pp, c);
    ChunkShard chunk;
    chunk.chunk = c;
    chunk.virtual_stage = vs;
    chunk.mirror_copy = bidirectional(schedule) && c == 1;
    std::vector<TensorSpec> specs;
    // Norms carry a bias only as LayerNorm; linear layers only with add_bias_linear
    // (Llama: RMSNorm, no biases); learned positions only without RoPE.
    const bool norm_bias = model.normalization == Normalization::kLayerNorm;
    const bool linear_bias = model.add_bias_linear;
    if (computes_loss(schedule, p, v, vs)) {
      specs.push_back(replicated_1d("final_layernorm.weight", -1, h, Init::kOnes, true));
      if (norm_bias) {
        specs.push_back(replicated_1d("final_layernorm.bias", -1, h, Init::kZeros, true));
      }
      if (model.untie_embeddings_and_output_weights) {
        // Its own weight, drawn from its own stream.
        TensorSpec head = vocab_weight("output_layer.weight", -1);
        head.stream_name = "output_layer.weight";
        specs.push_back(std::move(head));
      } else if (head_copy_) {
        TensorSpec head = vocab_weight("output_layer.weight", -1);
        head.tensor.shared_embedding = true;
        specs.push_back(std::move(head));
      }
    }
    const int64_t hd = model.head_dim();
    const int64_t heads = model.num_attention_heads;
    const int64_t groups = model.query_groups();
    const int64_t ql = heads / t * hd;   // local query rows
    const int64_t kvl = groups / t * hd; // local key (and value) rows
    const bool gated = model.activation == Activation::kSwiglu;
    const ChunkLayers layers = chunk_layers(s, coord.pp, c);  // core/pipeline_split.hpp
    for (int64_t l = layers.end_layer() - 1; l >= layers.first_layer; --l) {
      const auto item = static_cast<int32_t>(l);
      const std::string prefix = fmt::format("layers.{}.", l);
      auto name = [&](const char* suffix) { return prefix + suffix; };
      specs.push_back(replicated_1d(name("input_layernorm.weight"), item, h, Init::kOnes, true));
      if (norm_bias) {
        specs.push_back(replicated_1d(name("input_layernorm.bias"), item, h, Init::kZeros, true));
      }
      // QKV, column parallel: local [q | k | v], this rank's heads / t query heads and
      // groups / t key/value heads of the global [q (a d) | k (g d) | v (g d)].
      GlobalMap qkv{.segments = {{ql, tp * ql}, {kvl, heads * hd + tp * kvl},
                                 {kvl, (heads + groups) * hd + tp * kvl}},
                    .global_cols = h};
      const int64_t qkv_rows = ql + 2 * kvl;
      specs.push_back(weight(name("self_attention.linear_qkv.weight"), item, qkv_rows, h,
                             init_method_std, qkv, true));
      if (linear_bias) {
        TensorSpec qkv_bias = replicated_1d(name("self_attention.linear_qkv.bias"), item, qkv_rows,
                                            Init::kZeros, false);
        qkv_bias.tensor.tensor_parallel = true;
        specs.push_back(std::move(qkv_bias));
      }
      // Projection, row parallel: columns [tp h/t, (tp+1) h/t) of [h, h].
      GlobalMap proj{.col_offset = tp * hl, .global_cols = h};
      specs.push_back(
          weight(name("self_attention.linear_proj.weight"), item, h, hl, scaled_std, proj, true));
      if (linear_bias) {
        specs.push_back(
            replicated_1d(name("self_attention.linear_proj.bias"), item, h, Init::kZeros, true));
      }
      specs.push_back(replicated_1d(name("pre_mlp_layernorm.weight"), item, h, Init::kOnes, true));
      if (norm_bias) {
        specs.push_back(replicated_1d(name("pre_mlp_layernorm.bias"), item, h, Init::kZeros, true));
      }
      if (model.is_moe_layer(l)) {
        // Router [E, h], replicated over TP (std as FC1).
        TensorSpec router = weight(name("mlp.router.weight"), item, model.num_moe_experts, h,
                                   init_method_std, GlobalMap{.global_cols = h}, false);
        router.tensor.sequence_parallel_grad = sp;
        specs.push_back(std::move(router));
        if (ffn_s > 0) {
          const int64_t fsl = ffn_s / t;
          GlobalMap sfc1{.global_cols = h};
          sfc1.segments = {{fsl, tp * fsl}};
          if (gated) sfc1.segments.emplace_back(fsl, ffn_s + tp * fsl);
          specs.push_back(weight(name("mlp.shared_experts.linear_fc1.weight"), item,
                                 gated ? 2 * fsl : fsl, h, init_method_std, sfc1, true));
          GlobalMap sfc2{.col_offset = tp * fsl, .global_cols = ffn_s};
          specs.push_back(weight(name("mlp.shared_experts.linear_fc2.weight"), item, h, fsl,
                                 scaled_std, sfc2, true));
        }
        continue;
      }
      // FC1, column parallel: rows [tp ffn/t, (tp+1) ffn/t) of [ffn, h]; SwiGLU: of the gate
      // and of the up halves of [2 ffn, h] (local [gate | up], as Megatron's chunk(2)).
      GlobalMap fc1{.global_cols = h};
      fc1.segments = {{ffnl, tp * ffnl}};
      if (gated) fc1.segments.emplace_back(ffnl, ffn + tp * ffnl);
      const int64_t fc1_rows = gated ? 2 * ffnl : ffnl;
      specs.push_back(
          weight(name("mlp.linear_fc1.weight"), item, fc1_rows, h, init_method_std, fc1, true));
      if (linear_bias) {
        TensorSpec fc1_bias =
            replicated_1d(name("mlp.linear_fc1.bias"), item, fc1_rows, Init::kZeros, false);
        fc1_bias.tensor.tensor_parallel = true;
        specs.push_back(std::move(fc1_bias));
      }
      // FC2, row parallel: columns [tp ffn/t, (tp+1) ffn/t) of [h, ffn].
      GlobalMap fc2{.col_offset = tp * ffnl, .global_cols = ffn};
      specs.push_back(weight(name("mlp.linear_fc2.weight"), item, h, ffnl, scaled_std, fc2, true));
      if (linear_bias) {
        specs.push_back(replicated_1d(name("mlp.linear_fc2.bias"), item, h, Init::kZeros, true));
      }
    }
    if (takes_embedding(schedule, p, v, vs)) {
      specs.push_back(vocab_weight(kWordEmbedding, -2));
      if (model.position_embedding_type == PositionEmbedding::kLearnedAbsolute) {
        GlobalMap pos{.global_cols = h};
        specs.push_back(weight("embedding.position_embeddings.weight", -2, model.seq_length, h,
                               init_method_std, pos, false));
      }
    }

    // The expert region: local routed experts of the chunk's MoE layers, last layer first.
    if (moe) {
      const int64_t fel = ffn_e / etp_size;
      for (int64_t l = layers.end_layer() - 1; l >= layers.first_layer; --l) {
        if (!model.is_moe_layer(l)) continue;
        const auto item = static_cast<int32_t>(l);
        for (int64_t j = 0; j < local_experts_; ++j) {
          const int64_t x = first_local_expert() + j;
          GlobalMap fc1{.global_cols = h};
          fc1.segments = {{fel, expert_.etp * fel}};
          if (gated) fc1.segments.emplace_back(fel, ffn_e + expert_.etp * fel);
          TensorSpec w = weight(fmt::format("layers.{}.mlp.experts.linear_fc1.weight{}", l, x),
                                item, gated ? 2 * fel : fel, h, init_method_std, fc1, true);
          w.tensor.expert = true;
          specs.push_back(std::move(w));
        }
        for (int64_t j = 0; j < local_experts_; ++j) {
          const int64_t x = first_local_expert() + j;
          GlobalMap fc2{.col_offset = expert_.etp * fel, .global_cols = ffn_e};
          TensorSpec w = weight(fmt::format("layers.{}.mlp.experts.linear_fc2.weight{}", l, x),
                                item, h, fel, scaled_std, fc2, true);
          w.tensor.expert = true;
          specs.push_back(std::move(w));
        }
      }
    }

    int64_t offset = 0;
    for (TensorSpec& spec : specs) {
      ShardTensor& tensor = spec.tensor;
      tensor.numel = 1;
      for (const int64_t d : tensor.shape) tensor.numel *= d;
      tensor.offset = offset;
      offset += tensor.numel;
    }
    chunk.params = Tensor(backend, offset);
    chunk.grads = Tensor(backend, offset);
    chunk.exp_avg = Tensor(backend, offset);
    chunk.exp_avg_sq = Tensor(backend, offset);
    // Each tensor drawn on the host and uploaded on its own: the host holds one tensor at a
    // time, not a second copy of the chunk (the backend's buffers start zeroed).
    std::vector<float> host;
    chunk.tensors.reserve(specs.size());
    for (TensorSpec& spec : specs) {
      if (spec.init != Init::kZeros && spec.tensor.numel > 0) {
        host.resize(static_cast<size_t>(spec.tensor.numel));
        initialize(spec, seed, host);
        backend.upload(chunk.params.span().subspan(static_cast<size_t>(spec.tensor.offset),
                                                   host.size()),
                       host);
      }
      chunk.tensors.push_back(std::move(spec.tensor));
    }
    chunks_.push_back(std::move(chunk));
  }
}

namespace {

const ChunkShard& chunk_at(const std::vector<ChunkShard>& chunks, int64_t chunk) {
  if (chunk < 0 || chunk >= static_cast<int64_t>(chunks.size())) {
    throw InvalidArgument(
        fmt::format("{}: model chunk {} is outside [0, virtual_pipeline_model_parallel_size = {})",
                    kWhere, chunk, chunks.size()));
  }
  return chunks[static_cast<size_t>(chunk)];
}

/// Distinct items of a chunk's dense tensors (or of its expert region) in buffer order.
std::vector<int32_t> chunk_items(const ChunkShard& cs, bool experts = false) {
  std::vector<int32_t> items;
  for (const ShardTensor& t : cs.tensors) {
    if (t.expert != experts) continue;
    if (items.empty() || items.back() != t.item) items.push_back(t.item);
  }
  return items;
}

}  // namespace

const ShardTensor& ModelShard::tensor(int64_t chunk, const std::string& name) const {
  const ChunkShard& cs = chunk_at(chunks_, chunk);
  for (const ShardTensor& t : cs.tensors) {
    if (t.name == name) return t;
  }
  throw InvalidArgument(fmt::format(
      "{}: model chunk {} (virtual stage {}, pipeline rank {}) has no tensor '{}'; its items are "
      "[{}] (-1 final LayerNorm/LM head, -2 embeddings, else layers)",
      kWhere, chunk, cs.virtual_stage, coord_.pp, name, fmt::join(chunk_items(cs), ", ")));
}

std::span<float> ModelShard::param(int64_t chunk, const std::string& name) {
  const ShardTensor& t = tensor(chunk, name);
  return chunks_[static_cast<size_t>(chunk)].params.span()
      .subspan(static_cast<size_t>(t.offset), static_cast<size_t>(t.numel));
}

std::span<float> ModelShard::grad(int64_t chunk, const std::string& name) {
  const ShardTensor& t = tensor(chunk, name);
  return chunks_[static_cast<size_t>(chunk)].grads.span()
      .subspan(static_cast<size_t>(t.offset), static_cast<size_t>(t.numel));
}

std::pair<int64_t, int64_t> ModelShard::item_range(int64_t chunk, std::span<const int32_t> items,
                                                   bool experts) const {
  const ChunkShard& cs = chunk_at(chunks_, chunk);
  const std::vector<int32_t> order = chunk_items(cs, experts);
  auto fail = [&](const std::string& what) {
    return InvalidArgument(fmt::format(
        "{}: item_range of model chunk {} (virtual stage {}, {} parameters): {}; requested items "
        "[{}], the chunk's items in buffer order [{}]",
        kWhere, chunk, cs.virtual_stage, experts ? "expert" : "dense", what,
        fmt::join(items, ", "), fmt::join(order, ", ")));
  };
  if (items.empty()) throw fail("no items given");
  size_t pos = 0;  // index into `order` the next item must have
  for (size_t k = 0; k < items.size(); ++k) {
    const auto it = std::find(order.begin(), order.end(), items[k]);
    if (it == order.end()) throw fail(fmt::format("item {} is not in the chunk", items[k]));
    const auto at = static_cast<size_t>(it - order.begin());
    if (k > 0 && at != pos) {
      throw fail(fmt::format("item {} does not follow item {} in buffer order (not contiguous)",
                             items[k], items[k - 1]));
    }
    pos = at + 1;
  }
  int64_t begin = -1;
  int64_t end = -1;
  for (const ShardTensor& t : cs.tensors) {
    if (t.expert != experts) {
      if (begin < 0) continue;
      break;  // the region ends (dense tensors come first, then the expert region)
    }
    if (t.item != items.front() && begin < 0) continue;
    if (begin < 0) begin = t.offset;
    if (std::find(items.begin(), items.end(), t.item) == items.end()) break;
    end = t.offset + t.numel;
  }
  return {begin, end};
}

int64_t ModelShard::num_parameters() const {
  int64_t total = 0;
  for (const ChunkShard& cs : chunks_) total += static_cast<int64_t>(cs.params.size());
  return total;
}

}  // namespace traintwin::exec
