// Megatron-Core's pipeline split (see pipeline_split.hpp for the rules and their source).
#include "core/pipeline_split.hpp"

#include <fmt/format.h>

#include <algorithm>
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

constexpr const char* kLayoutKey = "parallelism.pipeline_model_parallel_layout";

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

/// Expands a layout's repeats (X*N, (...)*N) into its symbols, ',' and blanks dropped: the
/// symbols in `out`, or the first problem. Recursive descent over
///   seq := item*;  item := atom ('*' N)?;  atom := 't' | 'E' | 'L' | 'm' | '|' | '(' seq ')'.
class LayoutExpander {
 public:
  explicit LayoutExpander(const std::string& text) : text_(text) {}

  std::optional<std::string> expand(std::string& out) {
    if (auto problem = sequence(out, 0)) return problem;
    if (pos_ < text_.size()) return at("a ')' without its '('");
    return std::nullopt;
  }

 private:
  std::optional<std::string> at(const std::string& what) const {
    return fmt::format("\"{}\": {} at position {} (allowed: t, E, L, |, (...), X*N, (...)*N, ',')",
                       text_, what, pos_ + 1);
  }

  void skip() {
    while (pos_ < text_.size() && (text_[pos_] == ',' || text_[pos_] == ' ')) ++pos_;
  }

  std::optional<std::string> sequence(std::string& out, int depth) {
    if (depth > 16) return at("parentheses nested deeper than 16");
    for (skip(); pos_ < text_.size() && text_[pos_] != ')'; skip()) {
      std::string item;
      const char c = text_[pos_];
      if (c == '(') {
        ++pos_;
        if (auto problem = sequence(item, depth + 1)) return problem;
        if (pos_ >= text_.size()) return at("a '(' without its ')'");
        ++pos_;  // ')'
      } else if (c == 't' || c == 'E' || c == 'L' || c == 'm' || c == '|') {
        item = std::string(1, c);
        ++pos_;
      } else {
        return at(fmt::format("unexpected '{}'", c));
      }
      skip();
      int64_t n = 1;
      if (pos_ < text_.size() && text_[pos_] == '*') {
        ++pos_;
        const size_t start = pos_;
        n = 0;
        while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9' && n <= 1000000) {
          n = n * 10 + (text_[pos_] - '0');
          ++pos_;
        }
        if (pos_ == start) return at("a '*' without a count");
        if (n > 1000000) return at("a repeat count above 1000000");
      }
      if (out.size() + item.size() * static_cast<size_t>(n) > 10000000) {
        return at("a layout of more than 10^7 symbols");
      }
      for (int64_t k = 0; k < n; ++k) out += item;
    }
    return std::nullopt;
  }

  const std::string& text_;
  size_t pos_ = 0;
};

/// Transformer layers of each virtual stage from parallelism.pipeline_model_parallel_layout, in
/// `per_stage`; the first broken rule instead.
std::optional<PipelineSplitProblem> layout_split(const ModelSpec& m, const ParallelConfig& par,
                                                 std::vector<int64_t>& per_stage) {
  const std::string& layout = par.pipeline_model_parallel_layout;
  if (par.decoder_first_pipeline_num_layers || par.decoder_last_pipeline_num_layers ||
      par.account_for_embedding_in_pipeline_split || par.account_for_loss_in_pipeline_split) {
    const char* other = par.decoder_first_pipeline_num_layers  ? kFirstKey
                        : par.decoder_last_pipeline_num_layers ? kLastKey
                        : par.account_for_embedding_in_pipeline_split ? kEmbeddingKey
                                                                      : kLossKey;
    return fail(kLayoutKey, fmt::format("cannot be combined with {} (rule: the layout places every "
                                        "layer itself, as Megatron-Core requires)",
                                        other));
  }
  std::string symbols;
  if (auto problem = LayoutExpander(layout).expand(symbols)) return fail(kLayoutKey, *problem);
  std::vector<std::string> stages(1);
  for (char c : symbols) {
    if (c == '|') {
      stages.emplace_back();
    } else {
      stages.back() += c;
    }
  }
  const int64_t p = par.pipeline_model_parallel_size;
  const int64_t v = par.virtual_pipeline_model_parallel_size;
  if (static_cast<int64_t>(stages.size()) != p * v) {
    return fail(kLayoutKey,
                fmt::format("\"{}\" gives {} virtual stages, but pipeline_model_parallel_size x "
                            "virtual_pipeline_model_parallel_size = {} x {} = {} (rule: one '|'-"
                            "separated stage per virtual stage, in order)",
                            layout, stages.size(), p, v, p * v));
  }
  per_stage.assign(stages.size(), 0);
  int64_t layers = 0;
  for (size_t i = 0; i < stages.size(); ++i) {
    for (char c : stages[i]) {
      if (c == 'm') {
        return fail(kLayoutKey, fmt::format("\"{}\": stage {} holds an MTP layer (m), which "
                                            "traintwin does not model (allowed: t, E, L)",
                                            layout, i));
      }
      const bool first = i == 0, last = i + 1 == stages.size();
      if ((c == 'E' && !first) || (c == 'L' && !last)) {
        return fail(kLayoutKey,
                    fmt::format("\"{}\": '{}' in stage {} (rule: the embedding E is in the first "
                                "stage and the loss L in the last, {})",
                                layout, c, i, stages.size() - 1));
      }
      if (c == 't') ++per_stage[i];
    }
    layers += per_stage[i];
  }
  if (std::count(symbols.begin(), symbols.end(), 'E') != 1 ||
      std::count(symbols.begin(), symbols.end(), 'L') != 1) {
    return fail(kLayoutKey, fmt::format("\"{}\" must hold one E (the embedding, in the first "
                                        "stage) and one L (the loss, in the last)",
                                        layout));
  }
  if (layers != m.num_layers) {
    return fail(kLayoutKey, fmt::format("\"{}\" places {} transformer layers, but "
                                        "model.num_layers = {} (rule: every layer once)",
                                        layout, layers, m.num_layers));
  }
  return std::nullopt;
}

}  // namespace

PipelineSplitError::PipelineSplitError(std::string key, std::string problem)
    : InvalidArgument(key + ": " + problem), key_(std::move(key)), problem_(std::move(problem)) {}

bool uneven_pipeline_split(const ParallelConfig& p) {
  return p.decoder_first_pipeline_num_layers || p.decoder_last_pipeline_num_layers ||
         p.account_for_embedding_in_pipeline_split || p.account_for_loss_in_pipeline_split ||
         !p.pipeline_model_parallel_layout.empty();
}

std::optional<PipelineSplitProblem> try_pipeline_layer_split(const ModelSpec& m,
                                                             const ParallelConfig& par,
                                                             std::vector<ChunkLayers>& split) {
  require_at_least_one(m.num_layers, "num_layers");
  require_at_least_one(par.pipeline_model_parallel_size, "pipeline_model_parallel_size");
  require_at_least_one(par.virtual_pipeline_model_parallel_size,
                       "virtual_pipeline_model_parallel_size");
  if (bidirectional(par.pipeline_schedule)) {
    // DualPipe: the split of one direction's p stages (v = 1), held twice: virtual stage p + s is
    // the reverse direction's copy of stage s.
    ParallelConfig one_direction = par;
    one_direction.pipeline_schedule = PipelineScheduleKind::k1F1B;
    one_direction.virtual_pipeline_model_parallel_size = 1;
    if (auto problem = try_pipeline_layer_split(m, one_direction, split)) return problem;
    const std::vector<ChunkLayers> forward = split;
    split.insert(split.end(), forward.begin(), forward.end());
    return std::nullopt;
  }
  const int64_t l = m.num_layers;
  const int64_t p = par.pipeline_model_parallel_size;
  const int64_t v = par.virtual_pipeline_model_parallel_size;

  // Layers of each virtual stage, in virtual-stage order.
  split.assign(static_cast<size_t>(p * v), ChunkLayers{});
  if (!par.pipeline_model_parallel_layout.empty()) {
    std::vector<int64_t> per_stage;
    if (auto problem = layout_split(m, par, per_stage)) return problem;
    for (size_t vs = 0; vs < split.size(); ++vs) split[vs].num_layers = per_stage[vs];
  } else if (par.decoder_first_pipeline_num_layers || par.decoder_last_pipeline_num_layers) {
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
