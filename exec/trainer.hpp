// Live training of one rank: the scenario's Program run by the Executor over the GPT dataset,
// with evaluation, checkpoints (save / resume) and a timeline of every op. The CLI
// (`traintwin train`) prints what the callbacks report; this library prints nothing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/program.hpp"
#include "core/scenario.hpp"
#include "exec/backend.hpp"
#include "exec/communicator.hpp"
#include "exec/executor.hpp"
#include "exec/gpt_model.hpp"
#include "traces/timeline.hpp"

namespace traintwin::exec {

/// Where checkpoints go and what to record.
struct TrainerOptions {
  std::filesystem::path save;  ///< Megatron --save: checkpoint folder ("" = never save)
  /// Megatron --load: resume from its latest checkpoint ("" = fresh). A folder without
  /// latest_checkpointed_iteration.txt (not yet saved to, or absent) starts from scratch, as
  /// Megatron-LM does, so that `--save D --load D` runs the first time as after every restart.
  std::filesystem::path load;
  bool record_timeline = false;  ///< keep every op's span for timeline()
  /// The backend every kernel runs on and whose memory holds the model (null: the CPU backend,
  /// cpu::host_backend()); it must outlive the Trainer.
  Backend* backend = nullptr;
};

/// One training iteration as the log line reports it.
struct IterationLog {
  int64_t iteration = 0;         ///< 1-based
  int64_t train_iters = 0;
  int64_t consumed_samples = 0;  ///< after this iteration
  double lm_loss = 0;            ///< mean over the global batch (nats)
  double learning_rate = 0;
  double grad_norm = 0;          ///< before clipping
  /// MoE models: the Switch aux loss (x its coefficient), mean over MoE layers and micro-batches
  /// (Megatron's load_balancing_loss); unset for a dense model.
  std::optional<double> load_balancing_loss;
  double elapsed_ms = 0;         ///< wall time of the iteration on this rank
  double tokens_per_s = 0;       ///< global batch tokens / elapsed
};

/// One evaluation over the validation split.
struct ValidationLog {
  int64_t iteration = 0;
  double lm_loss = 0;  ///< mean over eval_iters global batches (nats)
};

/// A checkpoint written (or resumed).
struct CheckpointLog {
  int64_t iteration = 0;
  std::filesystem::path dir;
  bool loaded = false;  ///< true when resumed from it
};

/// Callbacks; any may be empty.
struct TrainerCallbacks {
  std::function<void(const IterationLog&)> on_iteration;
  std::function<void(const ValidationLog&)> on_validation;
  std::function<void(const CheckpointLog&)> on_checkpoint;
};

/// The checkpoint signature of a rank: what must match for a checkpoint to load (model sizes,
/// parallel layout with the layers of every virtual pipeline stage, this rank's coordinates, and
/// the data: training.seed, data.data_path as an absolute normalized path, data.split; for an
/// MoE model also the expert keys that shape its parameters — num_moe_experts, moe_router_topk,
/// moe_ffn_hidden_size, moe_shared_expert_intermediate_size, moe_layer_freq (the per-layer 0/1
/// pattern), expert_model_parallel_size, expert_tensor_parallel_size — and the rank's expert
/// coordinates rank.ep, rank.etp, rank.edp from layout_of(s)). Loading also refuses a
/// training.train_iters that is not past the checkpoint's iteration (ConfigError: nothing would
/// be trained). Throws PipelineSplitError for an impossible pipeline split.
std::map<std::string, std::string> checkpoint_signature(const Scenario& s, const RankCoord& coord);

/// The executor's hyper-parameters from the scenario's training section (Megatron's defaults
/// where the file is silent). Throws ConfigError naming the scenario when training.lr or
/// training.train_iters is missing.
TrainingHyperparameters hyperparameters(const Scenario& s);

/// Trains the scenario on this rank. Requires training.train_iters, training.lr and
/// data.data_path (ConfigError naming the key otherwise) and a communicator whose world is the
/// scenario's (num_gpus ranks; InvalidArgument otherwise). Data errors (missing or corrupt
/// dataset, a token id >= model.vocab_size, a tokenizer (data.vocab_file + data.merge_file) with
/// more ids than model.vocab_size) are DataError; a checkpoint from another model or layout is
/// DataError listing the differing keys; nothing is overwritten before these checks pass.
class Trainer {
 public:
  Trainer(const Scenario& s, Communicator& comm, TrainerOptions options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// The first iteration train() will run (1, or the loaded checkpoint's + 1).
  int64_t first_iteration() const;
  /// True when TrainerOptions::load named a folder with no checkpoint (the run started from
  /// scratch, for the command to say so).
  bool load_found_no_checkpoint() const;

  /// Runs iterations first_iteration() .. train_iters, evaluating every eval_interval iterations
  /// and after the last one (when eval_iters > 0), saving every save_interval iterations and
  /// after the last one (when `save` is set).
  void train(const TrainerCallbacks& callbacks);

  /// This rank's ops as timeline events (empty unless record_timeline), times in seconds since
  /// train() started (after a barrier, so
  /// ranks share the origin); names are prefixed with "it N ".
  const std::vector<TimelineEvent>& timeline() const;

  /// The op spans of the last training iteration (empty unless record_timeline).
  const std::vector<OpSpan>& last_iteration_spans() const;

  /// The Program this rank executes.
  const Program& program() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace traintwin::exec
