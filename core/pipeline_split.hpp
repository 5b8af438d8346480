// Which transformer layers each (virtual) pipeline stage holds: Megatron-Core's rules for even
// and uneven pipeline splits, as one pure function. Every engine (Program lowering, memory and
// parameter models, the executor's model shard) asks this file for a chunk's layers.
//
// Source: Megatron-Core, megatron/core/transformer/transformer_block.py (get_num_layers_to_build),
// transformer_layer.py (get_transformer_layer_offset) and transformer_config.py /
// megatron/training/arguments.py (the validation of --decoder-first-pipeline-num-layers,
// --decoder-last-pipeline-num-layers, --account-for-embedding-in-pipeline-split,
// --account-for-loss-in-pipeline-split). Notation: l = num_layers, p = PP, v = model chunks per
// pipeline rank; virtual stage vs = chunk x p + pp_rank; a micro-batch's forward runs through
// virtual stages 0 .. p v - 1, and the layers are numbered along that path (vs 0 holds layers
// 0.., vs 1 the next ones, ...), so each virtual stage's first layer is the sum of the layer
// counts of the virtual stages before it (Megatron's offset formulas reduce to that sum).
//
// The rules (whichever applies):
//  - a custom layout (pipeline_model_parallel_layout, Megatron-Core's --pipeline-model-parallel-
//    layout, megatron/core/transformer/pipeline_parallel_layer_layout.py): the virtual stages in
//    order separated by '|', each listing its layers: t a transformer layer, E the embedding, L
//    the loss; X*N repeats a symbol, (...)*N a group, ',' and blanks separate. Rules: p x v
//    stages; one E, in the first stage, one L, in the last; num_layers t's in all; no MTP layer
//    (m: not modelled); not together with the other uneven-split keys. A stage may hold no t.
//  - first/last stage layer counts (decoder_first_pipeline_num_layers F and/or
//    decoder_last_pipeline_num_layers L given): pipeline rank 0 holds F layers, rank p - 1 holds
//    L, and the other ("middle") ranks share the rest equally, M = (l - F - L) / (p - #given);
//    each rank's count is split equally over its v chunks.
//    Rules: p > 1; F, L >= 1 and divisible by v; F (+ L) <= l; middle ranks exist exactly when
//    layers remain for them; the remaining layers divisible by the middle ranks and M by v; not
//    together with the account_for_* flags (Megatron refuses the combination).
//  - otherwise (even split, optionally accounting for the embedding and/or the loss as one layer
//    each): l' = l + [account_for_embedding] + [account_for_loss] must be divisible by p and
//    l'/p by v; every virtual stage holds l'/(p v) layers, less one on virtual stage 0 for the
//    embedding and one on the last virtual stage for the loss (a chunk may be left with 0
//    transformer layers: the embedding or the loss alone, as Megatron allows). Without the flags
//    this is the plain rule l % (p v) == 0.
// DualPipe (bidirectional(), core/schedule.hpp): the rules above split the layers over the p
// stages of one direction (v = 1: the two model chunks are two copies of whole stages, not
// halves), and the split has 2p entries: virtual stage p + s (the reverse direction's stage s)
// holds the same layers as s. A layout then lists p stages.
// Example (NVIDIA's Llama 3.1 405B recipe): l = 126, p = 8, v = 8, both flags: l' = 128, 2 per
// virtual stage; virtual stage 0 holds the embedding + layer 0, virtual stage 63 layer 125 + the
// loss, every other virtual stage 2 layers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/scenario.hpp"

namespace traintwin {

/// The transformer layers of one virtual pipeline stage (one model chunk of one pipeline rank):
/// global layer indices [first_layer, first_layer + num_layers). num_layers may be 0 (a chunk
/// holding only the embedding or only the LM head and loss).
struct ChunkLayers {
  int64_t first_layer = 0;
  int64_t num_layers = 0;
  int64_t end_layer() const { return first_layer + num_layers; }  ///< one past the last
  bool operator==(const ChunkLayers&) const = default;
};

/// A broken rule of the pipeline split: `key()` is the scenario key at fault (e.g.
/// "parallelism.decoder_first_pipeline_num_layers", "model.num_layers"), `problem()` the value,
/// the rule and the numbers. what() is "<key>: <problem>".
class PipelineSplitError : public InvalidArgument {
 public:
  PipelineSplitError(std::string key, std::string problem);
  const std::string& key() const { return key_; }
  const std::string& problem() const { return problem_; }

 private:
  std::string key_;
  std::string problem_;
};

/// A broken rule of the pipeline split as a value: what PipelineSplitError holds.
struct PipelineSplitProblem {
  std::string key;      ///< the scenario key at fault
  std::string problem;  ///< the value, the rule and the numbers
};

/// pipeline_layer_split() without the exception for a broken rule: fills `split` (size PP x v)
/// and returns nullopt, or returns the first broken rule (`split` then unspecified). Throws
/// InvalidArgument for sizes < 1, as pipeline_layer_split.
std::optional<PipelineSplitProblem> try_pipeline_layer_split(const ModelSpec& m,
                                                             const ParallelConfig& p,
                                                             std::vector<ChunkLayers>& split);

/// The layers of every virtual stage, indexed by vs = chunk x PP + pp_rank (size PP x v; the V
/// placement's virtual stages under ZB-V, DualPipeV and DualPipe, core/schedule.hpp
/// virtual_stage_of), under the rules in the file comment (DualPipe: the two copies' layers). Throws PipelineSplitError naming the key and the rule when the
/// split is impossible, InvalidArgument for sizes < 1.
std::vector<ChunkLayers> pipeline_layer_split(const ModelSpec& m, const ParallelConfig& p);

/// The layers of model chunk `chunk` of pipeline rank `pp_rank` (virtual stage chunk x PP +
/// pp_rank). Throws as pipeline_layer_split, and InvalidArgument when pp_rank or chunk is out of
/// range.
ChunkLayers chunk_layers(const Scenario& s, int64_t pp_rank, int64_t chunk);

/// Transformer layers pipeline rank `pp_rank` holds over all its model chunks. Throws as
/// chunk_layers.
int64_t layers_on_stage(const Scenario& s, int64_t pp_rank);

/// True when any of the five uneven-split keys is set (the split may still come out even, e.g.
/// both account flags with PP 1).
bool uneven_pipeline_split(const ParallelConfig& p);

/// The transformer layers of each pipeline rank joined by '/', rank 0 first, for summaries and
/// messages: "15/16/16/16/16/16/16/15" for the Llama 3.1 405B recipe. Throws as
/// pipeline_layer_split.
std::string layers_per_stage_text(const Scenario& s);

}  // namespace traintwin
