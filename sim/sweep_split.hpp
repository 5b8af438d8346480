// The pipeline-split axis of a sweep (`traintwin sweep --pipeline-split`): uneven splits of the
// transformer layers over the pipeline stages, written as Megatron-Core's
// pipeline_model_parallel_layout (core/pipeline_split.hpp), added beside each enumerated layout
// so that the ranking compares them with its even split. On a mixed cluster (node groups of
// different GPUs) a stage on slower GPUs should hold fewer layers; `auto` searches that.
//
// The flow: enumerate_configurations (sim/sweep.hpp) -> add_pipeline_splits (here: for each
// valid layout with PP > 1, the searched or listed layouts as new configurations, each checked
// by check_configuration: rules, per-stage memory) -> run_sweep ranks them all.
//
// The automatic search (balanced_layers, split_family): each stage's compute time is modelled as
// fixed_s + layers x per_layer_s (StageCost, per stage: what its GPUs take per transformer
// layer, and what it takes besides them: the embedding, the LM head and loss, the optimizer).
// The balanced split minimises the largest stage time with the layers summing to num_layers
// (water-filling over integers: repeatedly give the next layer to the stage whose time after
// taking it is smallest). The family is the even split moved towards the balanced one and past
// it: for t = 0, 1/8, ..., 3/2, layers_i = round(even_i + t (balanced_i - even_i)), rounded by
// largest remainders so that they still sum to num_layers; each distinct split once. The
// engines rank the family: the model only points the search in a direction (pipeline bubbles,
// p2p and DP tails are left to the estimator or replay). Under interleaving a stage's layers are
// spread over its v chunks as evenly as they go (the first chunks one more).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/scenario.hpp"
#include "sim/cost_model.hpp"
#include "sim/sweep.hpp"
#include "topologies/topology.hpp"

namespace traintwin {

/// What `--pipeline-split` asks: `auto` (search per layout, split_family) or an explicit list
/// of pipeline_model_parallel_layout strings (each tried on every layout; one whose stage count
/// is not PP x VPP is an invalid row with Megatron's rule).
struct PipelineSplitAxis {
  bool automatic = false;
  std::vector<std::string> layouts;
  bool empty() const { return !automatic && layouts.empty(); }
};

/// Parses `auto` or a ';'-separated list of layouts (';' because a layout uses ',' itself):
/// "Et*5|t*5|t*19|t*19L;Et*6|t*6|t*18|t*18L". Throws ConfigError naming `flag` for an empty
/// text, an empty item or a duplicate (the layouts themselves are checked per row).
PipelineSplitAxis parse_pipeline_split_axis(const std::string& flag, const std::string& text);

/// A pipeline stage's compute in the search's model: fixed_s + layers x per_layer_s (seconds).
struct StageCost {
  double fixed_s = 0;
  double per_layer_s = 0;  ///< > 0
};

/// The integer split (layers per stage, summing to `num_layers`) that minimises the largest
/// fixed_s + layers x per_layer_s, by water-filling (file comment); ties to the lower stage.
/// Throws InvalidArgument for no stage, num_layers < 0 or a per_layer_s <= 0.
std::vector<int64_t> balanced_layers(const std::vector<StageCost>& stages, int64_t num_layers);

/// The splits between `even` and `balanced` and past it (file comment), each once, the even one
/// first. Throws InvalidArgument when the sizes differ or the sums differ.
std::vector<std::vector<int64_t>> split_family(const std::vector<int64_t>& even,
                                               const std::vector<int64_t>& balanced);

/// Megatron-Core's layout string of `layers` per pipeline stage with `v` chunks per stage:
/// virtual stage vs = chunk x PP + stage in order, E in the first, L in the last, a stage's
/// layers over its chunks as evenly as they go (the first chunks one more): {5, 19} with v 1 is
/// "E,t*5|t*19,L". Throws InvalidArgument for no stage, v < 1 or a negative count.
std::string layout_of_layers(const std::vector<int64_t>& layers, int64_t v);

/// The layers per pipeline stage of `s`'s split (core/pipeline_split.hpp), stage 0 first.
std::vector<int64_t> stage_layers(const Scenario& s);

/// Per configuration: the StageCost of each of its pipeline stages (e.g. from an estimate of its
/// even split), or an empty vector when it has none (the search then skips the configuration).
using StageCostFunction = std::function<std::vector<StageCost>(const Scenario&)>;

/// StageCosts from the analytical estimate (sim/analytical.hpp) of a configuration as it is (its
/// even split) on `topo` with `costs`: per stage, per_layer_s = the compute seconds of a middle
/// stage of the same node group (neither first nor last; the stage itself when it has none) per
/// transformer layer it holds (its optimizer step included: it scales with the parameters), and
/// fixed_s = the stage's compute seconds less its layers x per_layer_s (the embedding, LM head
/// and loss on the end stages). Empty (no search for that configuration) when the estimator
/// refuses it (a stage across node groups, CP > 1, ...) or a stage holds no layer. `topo` must
/// outlive the function.
StageCostFunction estimated_stage_costs(const TopologySpec& topo,
                                        std::shared_ptr<const CostModel> costs);

/// `configurations` followed by, for each valid one with PP > 1 and no split of its own, one new
/// configuration per layout of `axis` (auto: the split_family of its even split and
/// balanced_layers(costs(s)), the even split itself left out), indices continuing after the
/// last. Each new one has s.parallel.pipeline_model_parallel_layout set and is checked by
/// check_configuration (gpu_memory_bytes, stage_capacity). An empty axis returns them as they
/// are. `uncosted` (optional): set to the number of valid layouts with PP > 1 that auto could
/// not search because `costs` gave none (the caller says so: nothing is dropped silently).
/// Throws ConfigError when the axis is given and the base of a configuration already sets
/// an uneven-split key (naming it: the layout cannot be combined with them).
std::vector<SweepConfiguration> add_pipeline_splits(std::vector<SweepConfiguration> configurations,
                                                    const PipelineSplitAxis& axis,
                                                    const StageCostFunction& costs,
                                                    double gpu_memory_bytes,
                                                    const StageMemoryCapacity& stage_capacity,
                                                    int64_t* uncosted = nullptr);

}  // namespace traintwin
