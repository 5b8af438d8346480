// Megatron-Core's pipeline split (see pipeline_split.hpp for the rules and their source).
#include "core/pipeline_split.hpp"

#include <fmt/format.h>

#include <optional>
#include <utility>

#include "core/checks.hpp"
#include "core/schedule.hpp"

namespace traintwin {
namespace {

constexpr const char* kFirstKey = "parallelism.decoder_first_pipeline_num_layers";
constexpr const char* kLastKey = "parallelism.decoder_last_pipeline_num_layers";
constexpr const char* kEmbeddingKey = "parallelism.account_for_embedding_in_pipeline_split";
constexpr const char* kLossKey = "parallelism.account_for_loss_in_pipeline_split";

/// A broken rule as a value (what PipelineSplitError would say).
std::optional<PipelineSplitProblem> fail(const char* key, std::string problem) {
  return PipelineSplitProblem{key, std::move(problem)};
}

/// Layers of each pipeline rank (before the split over chunks) with first/last stage counts, in
/// `per_rank`; the first broken rule instead when there is one.
std::optional<PipelineSplitProblem> first_last_split(const ModelSpec& m, const ParallelConfig& par,
                                                     std::vector<int64_t>& per_rank) {
  const int64_t l = m.num_layers;
  const int64_t p = par.pipeline_model_parallel_size;
  const int64_t v = par.virtual_pipeline_model_parallel_size;
  const std::optional<int64_t>& first = par.decoder_first_pipeline_num_layers;
  const std::optional<int64_t>& last = par.decoder_last_pipeline_num_layers;
  const char* given = first ? kFirstKey : kLastKey;
  if (par.account_for_embedding_in_pipeline_split || par.account_for_loss_in_pipeline_split) {
    return fail(
        given, fmt::format("cannot be combined with {} (rule: Megatron-Core sets the first/last "
                           "stage layer counts or accounts for the embedding and loss, not both)",
                           par.account_for_embedding_in_pipeline_split ? kEmbeddingKey : kLossKey));
  }
  if (p < 2) {
    return fail(given,
                fmt::format("{} needs parallelism.pipeline_model_parallel_size > 1, got {} (rule: "
                            "with one pipeline stage the first stage is also the last and holds "
                            "all model.num_layers = {})",
                            first ? *first : *last, p, l));
  }
  int64_t remaining = l;
  int64_t middle_stages = p;
  for (const auto& [key, value] : {std::pair{kFirstKey, first}, std::pair{kLastKey, last}}) {
    if (!value) continue;
    if (*value < 1) return fail(key, fmt::format("must be >= 1, got {}", *value));
    if (*value % v != 0) {
      return fail(key,
                  fmt::format("{} is not divisible by virtual_pipeline_model_parallel_size = {} "
                              "(rule: the stage's layers are split equally over its model chunks)",
                              *value, v));
    }
    remaining -= *value;
    --middle_stages;
  }
  const std::string given_text =
      first && last ? fmt::format("decoder_first_pipeline_num_layers + decoder_last_pipeline_num_"
                                  "layers = {} + {}",
                                  *first, *last)
                    : fmt::format("{} = {}", first ? "decoder_first_pipeline_num_layers"
                                                   : "decoder_last_pipeline_num_layers",
                                  first ? *first : *last);
  if (remaining < 0) {
    return fail(given,
                fmt::format("{} exceeds model.num_layers = {} (rule: the first/last stages hold "
                            "some of the model's layers)",
                            given_text, l));
  }
  if (middle_stages == 0 && remaining != 0) {
    return fail(given,
                fmt::format("{} leaves {} of model.num_layers = {} layers for no stage (rule: "
                            "with pipeline_model_parallel_size = 2 and both counts given they "
                            "must add up to num_layers)",
                            given_text, remaining, l));
  }
  if (middle_stages > 0 && remaining == 0) {
    return fail(given, fmt::format("{} leaves no layers for the {} middle pipeline stage(s) of "
                                   "model.num_layers = {} (rule: every middle stage holds layers)",
                                   given_text, middle_stages, l));
  }
  int64_t per_middle = 0;
  if (middle_stages > 0) {
    if (remaining % middle_stages != 0) {
      return fail(given,
                  fmt::format("the {} layers left by {} (of model.num_layers = {}) are not "
                              "divisible by the {} middle pipeline stage(s) (rule: the middle "
                              "stages hold the same number of layers)",
                              remaining, given_text, l, middle_stages));
    }
    per_middle = remaining / middle_stages;
    if (per_middle % v != 0) {
      return fail(given,
                  fmt::format("the middle pipeline stages hold {} layers each ((model.num_layers "
                              "- {}) / {}), not divisible by virtual_pipeline_model_parallel_size "
                              "= {} (rule: a stage's layers are split equally over its model "
                              "chunks)",
                              per_middle, given_text, middle_stages, v));
    }
  }
  per_rank.assign(static_cast<size_t>(p), per_middle);
  if (first) per_rank.front() = *first;
  if (last) per_rank.back() = *last;
  return std::nullopt;
}

}  // namespace

PipelineSplitError::PipelineSplitError(std::string key, std::string problem)
    : InvalidArgument(key + ": " + problem), key_(std::move(key)), problem_(std::move(problem)) {}

bool uneven_pipeline_split(const ParallelConfig& p) {
  return p.decoder_first_pipeline_num_layers || p.decoder_last_pipeline_num_layers ||
         p.account_for_embedding_in_pipeline_split || p.account_for_loss_in_pipeline_split;
}

std::optional<PipelineSplitProblem> try_pipeline_layer_split(const ModelSpec& m,
                                                             const ParallelConfig& par,
                                                             std::vector<ChunkLayers>& split) {
  require_at_least_one(m.num_layers, "num_layers");
  require_at_least_one(par.pipeline_model_parallel_size, "pipeline_model_parallel_size");
  require_at_least_one(par.virtual_pipeline_model_parallel_size,
                       "virtual_pipeline_model_parallel_size");
  const int64_t l = m.num_layers;
  const int64_t p = par.pipeline_model_parallel_size;
  const int64_t v = par.virtual_pipeline_model_parallel_size;

  // Layers of each virtual stage, in virtual-stage order.
  split.assign(static_cast<size_t>(p * v), ChunkLayers{});
  if (par.decoder_first_pipeline_num_layers || par.decoder_last_pipeline_num_layers) {
    std::vector<int64_t> per_rank;
    if (auto problem = first_last_split(m, par, per_rank)) return problem;
    for (int64_t vs = 0; vs < p * v; ++vs) {
      split[static_cast<size_t>(vs)].num_layers = per_rank[static_cast<size_t>(vs % p)] / v;
    }
  } else {
    const bool embedding = par.account_for_embedding_in_pipeline_split;
    const bool loss = par.account_for_loss_in_pipeline_split;
    const int64_t counted = l + (embedding ? 1 : 0) + (loss ? 1 : 0);
    if (!embedding && !loss) {
      if (l % (p * v) != 0) {
        return fail(
            "model.num_layers",
            fmt::format("{} is not divisible by pipeline_model_parallel_size x "
                        "virtual_pipeline_model_parallel_size = {} x {} = {} (rule: every model "
                        "chunk holds the same number of layers; see "
                        "decoder_first/last_pipeline_num_layers and "
                        "account_for_embedding/loss_in_pipeline_split for uneven splits)",
                        l, p, v, p * v));
      }
    } else {
      const std::string text =
          fmt::format("model.num_layers{}{} = {}{}{} = {}", embedding ? " + 1 (embedding)" : "",
                      loss ? " + 1 (loss)" : "", l, embedding ? " + 1" : "", loss ? " + 1" : "",
                      counted);
      const char* key = embedding ? kEmbeddingKey : kLossKey;
      if (counted % p != 0) {
        return fail(key,
                    fmt::format("true: {} is not divisible by pipeline_model_parallel_size = {} "
                                "(rule: the embedding and loss count as one layer each in the "
                                "split)",
                                text, p));
      }
      if ((counted / p) % v != 0) {
        return fail(key,
                    fmt::format("true: {} / pipeline_model_parallel_size = {} layers per pipeline "
                                "stage, not divisible by virtual_pipeline_model_parallel_size = {} "
                                "(rule: a stage's layers are split equally over its model chunks)",
                                text, counted / p, v));
      }
    }
    const int64_t per_chunk = counted / (p * v);
    for (auto& c : split) c.num_layers = per_chunk;
    if (embedding) --split.front().num_layers;  // >= 0: per_chunk >= 1
    if (loss) --split.back().num_layers;        // >= 0, also when p v = 1 (per_chunk = l + 2)
  }
  int64_t next = 0;
  for (auto& c : split) {
    c.first_layer = next;
    next += c.num_layers;
  }
  if (next != l) {
    throw InvalidArgument(fmt::format("pipeline_layer_split: the stages hold {} layers, the model "
                                      "has {} (internal error)",
                                      next, l));
  }
  return std::nullopt;
}

std::vector<ChunkLayers> pipeline_layer_split(const ModelSpec& m, const ParallelConfig& par) {
  std::vector<ChunkLayers> split;
  if (auto problem = try_pipeline_layer_split(m, par, split)) {
    throw PipelineSplitError(std::move(problem->key), std::move(problem->problem));
  }
  return split;
}

ChunkLayers chunk_layers(const Scenario& s, int64_t pp_rank, int64_t chunk) {
  const int64_t p = s.parallel.pipeline_model_parallel_size;
  const int64_t v = s.parallel.virtual_pipeline_model_parallel_size;
  const std::vector<ChunkLayers> split = pipeline_layer_split(s.model, s.parallel);
  if (pp_rank < 0 || pp_rank >= p) {
    throw InvalidArgument(fmt::format("pp_rank must be in [0, pipeline_model_parallel_size = {}), "
                                      "got {}",
                                      p, pp_rank));
  }
  if (chunk < 0 || chunk >= v) {
    throw InvalidArgument(fmt::format("model chunk must be in [0, "
                                      "virtual_pipeline_model_parallel_size = {}), got {}",
                                      v, chunk));
  }
  // The chunk's virtual stage: chunk x p + rank, ZB-V's V placement under zb-v.
  return split[static_cast<size_t>(
      virtual_stage_of(s.parallel.pipeline_schedule, p, pp_rank, chunk))];
}

int64_t layers_on_stage(const Scenario& s, int64_t pp_rank) {
  int64_t total = 0;
  for (int64_t c = 0; c < s.parallel.virtual_pipeline_model_parallel_size; ++c) {
    total += chunk_layers(s, pp_rank, c).num_layers;
  }
  return total;
}

std::string layers_per_stage_text(const Scenario& s) {
  std::string text;
  for (int64_t r = 0; r < s.parallel.pipeline_model_parallel_size; ++r) {
    text += (r == 0 ? "" : "/") + std::to_string(layers_on_stage(s, r));
  }
  return text;
}

}  // namespace traintwin
