// Live training of one rank; see trainer.hpp.
#include "exec/trainer.hpp"

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <utility>

#include "core/error.hpp"
#include "core/pipeline_split.hpp"
#include "core/schedule.hpp"
#include "exec/checkpoint.hpp"
#include "exec/cpu/cpu_backend.hpp"
#include "exec/executor.hpp"
#include "exec/gpt_dataset.hpp"
#include "exec/model_shard.hpp"
#include "exec/tokenizer.hpp"
#include "exec/live_events.hpp"

namespace traintwin::exec {
namespace {

LearningRateSchedule::Style lr_style(LrDecayStyle s) {
  switch (s) {
    case LrDecayStyle::kConstant: return LearningRateSchedule::kConstant;
    case LrDecayStyle::kLinear: return LearningRateSchedule::kLinear;
    case LrDecayStyle::kCosine: return LearningRateSchedule::kCosine;
  }
  return LearningRateSchedule::kLinear;
}

std::string origin_of(const Scenario& s) {
  return s.source.empty() ? "scenario " + s.name : s.source.string();
}

}  // namespace

TrainingHyperparameters hyperparameters(const Scenario& s) {
  const TrainingConfig& t = s.training;
  if (!t.lr || !t.train_iters) {
    throw ConfigError(origin_of(s) + ": training.lr and training.train_iters are required to train");
  }
  TrainingHyperparameters h;
  h.seed = static_cast<uint64_t>(t.seed);
  h.hidden_dropout = t.hidden_dropout;
  h.attention_dropout = t.attention_dropout;
  h.clip_grad = t.clip_grad;
  h.adam = cpu::AdamWParams{t.adam_beta1, t.adam_beta2, t.adam_eps, t.weight_decay};
  h.lr.max_lr = *t.lr;
  h.lr.min_lr = t.min_lr;
  h.lr.warmup_iters = t.lr_warmup_iters;
  h.lr.decay_iters = t.lr_decay_iters.value_or(*t.train_iters);
  h.lr.style = lr_style(t.lr_decay_style);
  return h;
}

namespace {

/// Waits until every rank has reached this point (a world all-reduce).
/// The dataset prefix as a signature value: absolute and normalized, so that the same files
/// named from another working folder or scenario folder compare equal.
std::string data_path_identity(const std::filesystem::path& prefix) {
  std::error_code ec;
  const std::filesystem::path canonical = std::filesystem::weakly_canonical(prefix, ec);
  return (ec ? std::filesystem::absolute(prefix) : canonical).lexically_normal().string();
}

void barrier(Communicator& comm) {
  double x = 0;
  comm.all_reduce(GroupKind::kWorld, std::span<double>(&x, 1), ReduceOp::kSum)->wait();
}

}  // namespace

std::map<std::string, std::string> checkpoint_signature(const Scenario& s, const RankCoord& c) {
  const ParallelConfig& p = s.parallel;
  auto str = [](int64_t v) { return std::to_string(v); };
  // The layers of every virtual stage (core/pipeline_split.hpp): one split written by different
  // keys (e.g. an even split, or account flags with PP 1) resumes; another split does not.
  std::string split;
  for (const ChunkLayers& chunk : pipeline_layer_split(s.model, p)) {
    split += (split.empty() ? "" : ",") + str(chunk.num_layers);
  }
  // RoPE's angles: another base trains another model (shortest round-trip text).
  std::string rotary_base;
  if (s.model.position_embedding_type == PositionEmbedding::kRope) {
    rotary_base = fmt::format("{}", s.model.rotary_base);
  }
  std::map<std::string, std::string> signature = {
      {"model.num_layers", str(s.model.num_layers)},
      {"model.hidden_size", str(s.model.hidden_size)},
      {"model.num_attention_heads", str(s.model.num_attention_heads)},
      {"model.ffn_hidden_size", str(s.model.ffn_hidden_size)},
      {"model.seq_length", str(s.model.seq_length)},
      {"model.vocab_size", str(s.model.vocab_size)},
      {"model.num_query_groups", str(s.model.query_groups())},
      {"model.normalization", to_string(s.model.normalization)},
      {"model.activation", to_string(s.model.activation)},
      {"model.position_embedding_type", to_string(s.model.position_embedding_type)},
      {"model.rotary_base", rotary_base},
      {"model.untie_embeddings_and_output_weights",
       s.model.untie_embeddings_and_output_weights ? "true" : "false"},
      {"model.add_bias_linear", s.model.add_bias_linear ? "true" : "false"},
      {"parallelism.tensor_model_parallel_size", str(p.tensor_model_parallel_size)},
      {"parallelism.context_parallel_size", str(p.context_parallel_size)},
      {"parallelism.pipeline_model_parallel_size", str(p.pipeline_model_parallel_size)},
      {"parallelism.virtual_pipeline_model_parallel_size",
       str(p.virtual_pipeline_model_parallel_size)},
      {"parallelism.data_parallel_size", str(p.data_parallel_size)},
      {"parallelism.rank_order", p.rank_order},
      {"parallelism.layers_per_virtual_stage", split},
      // The data a run trains on (Megatron checks its own arguments on load the same way): the
      // same seed, dataset and split, or the resumed run would not continue the saved one.
      {"training.seed", str(s.training.seed)},
      {"data.data_path", s.data.data_path ? data_path_identity(*s.data.data_path) : ""},
      {"data.split", s.data.split},
      {"rank.tp", str(c.tp)},
      {"rank.cp", str(c.cp)},
      {"rank.pp", str(c.pp)},
      {"rank.dp", str(c.dp)},
  };
  // ZB-V's and DualPipeV's V puts other layers in a rank's chunks than interleaving does
  // (core/schedule.hpp virtual_stage_of): only a V resumes a V (either schedule). DualPipe's two
  // copies of one direction's stages are a placement of their own.
  if (v_shaped(p.pipeline_schedule)) {
    signature["parallelism.model_chunk_placement"] =
        bidirectional(p.pipeline_schedule) ? "dualpipe" : "v";
  }
  if (s.model.is_moe()) {
    const RankLayout layout = layout_of(s);
    const ExpertCoord expert = layout.expert_coord(layout.rank(c));
    std::string pattern;
    for (int64_t l = 0; l < s.model.num_layers; ++l) pattern += s.model.is_moe_layer(l) ? '1' : '0';
    signature.insert({
        {"model.num_moe_experts", str(s.model.num_moe_experts)},
        {"model.moe_router_topk", str(s.model.moe_router_topk)},
        {"model.moe_ffn_hidden_size", str(s.model.moe_expert_ffn())},
        {"model.moe_shared_expert_intermediate_size",
         str(s.model.moe_shared_expert_intermediate_size)},
        {"model.moe_layer_freq", pattern},
        {"parallelism.expert_model_parallel_size", str(p.expert_model_parallel_size)},
        {"parallelism.expert_tensor_parallel_size", str(p.expert_tp())},
        {"rank.ep", str(expert.ep)},
        {"rank.etp", str(expert.etp)},
        {"rank.edp", str(expert.edp)},
    });
  }
  return signature;
}

class Trainer::Impl {
 public:
  Impl(const Scenario& s, Communicator& comm, TrainerOptions options)
      : sc_(s), comm_(comm), opts_(std::move(options)) {
    const std::string origin = origin_of(s);
    if (!s.training.train_iters) {
      throw ConfigError(origin + ": training.train_iters is required by `traintwin train`");
    }
    if (!s.training.lr) throw ConfigError(origin + ": training.lr is required by `traintwin train`");
    if (!s.data.data_path) {
      throw ConfigError(origin + ": data.data_path is required by `traintwin train` (the prefix "
                                 "of a .bin/.idx pair written by `traintwin preprocess`)");
    }
    // Before the model is built: a dataset that was never made is the first thing a new user
    // meets, and the way to make it is named.
    const std::string prefix = s.data.data_path->string();
    if (!std::filesystem::exists(prefix + ".idx") && !std::filesystem::exists(prefix + ".bin")) {
      throw DataError(origin + ": data.data_path: no dataset at " + prefix +
                      " (neither .idx nor .bin); write one with `traintwin preprocess` (the "
                      "shipped *-tiny-brown scenarios' Brown corpus: scripts/prepare_brown.sh)");
    }
    if (comm_.world_size() != s.world_size()) {
      throw InvalidArgument(
          origin + ": cluster.num_gpus = " + std::to_string(s.world_size()) + " (TP " +
          std::to_string(s.parallel.tensor_model_parallel_size) + " x PP " +
          std::to_string(s.parallel.pipeline_model_parallel_size) + " x DP " +
          std::to_string(s.parallel.data_parallel_size) + ") but " +
          std::to_string(comm_.world_size()) +
          " processes run it; start it with mpirun -np " + std::to_string(s.world_size()) +
          " or override the layout (e.g. --tensor-model-parallel-size 1 "
          "--pipeline-model-parallel-size 1 --set cluster.num_gpus=1)");
    }
    if (s.data.vocab_file || s.data.merge_file) {
      if (!s.data.vocab_file || !s.data.merge_file) {
        throw ConfigError(origin + ": data.vocab_file and data.merge_file go together");
      }
      const Tokenizer tok = Tokenizer::load(*s.data.vocab_file, *s.data.merge_file);
      if (tok.vocab_size() > s.model.vocab_size) {
        throw DataError(origin + ": vocabulary mismatch: the tokenizer " +
                        s.data.vocab_file->string() + " has " +
                        std::to_string(tok.vocab_size()) + " ids but model.vocab_size is " +
                        std::to_string(s.model.vocab_size));
      }
    }
    program_ = std::make_unique<Program>(build_program(s, {comm_.rank()}));
    const RankCoord coord = program_->ranks.at(comm_.rank()).coord;
    Backend& backend = opts_.backend != nullptr ? *opts_.backend : cpu::host_backend();
    shard_ = std::make_unique<ModelShard>(s, coord, static_cast<uint64_t>(s.training.seed),
                                          s.training.init_method_std, backend);
    GptDatasetConfig dc;
    dc.prefix = s.data.data_path->string();
    dc.seq_length = s.model.seq_length;
    dc.seed = static_cast<uint64_t>(s.training.seed);
    dc.split = s.data.split;
    dc.vocab_size = s.model.vocab_size;
    data_ = std::make_unique<GptDataset>(
        dc,
        GptBatchConfig{s.training.global_batch_size, s.training.micro_batch_size,
                       s.parallel.data_parallel_size},
        s.training.eval_iters > 0);
    executor_ = std::make_unique<Executor>(*program_, comm_, *shard_, hyperparameters(s), backend);
    executor_->set_kernel_timing(opts_.record_timeline);
    signature_ = checkpoint_signature(s, coord);
    if (!opts_.load.empty()) load();
  }

  int64_t first_iteration() const { return first_iteration_; }
  bool load_found_no_checkpoint() const { return load_found_no_checkpoint_; }

  void train(const TrainerCallbacks& cb) {
    const int64_t last = *sc_.training.train_iters;
    const int64_t gbs = sc_.training.global_batch_size;
    const int64_t dp_rank = program_->ranks.at(comm_.rank()).coord.dp;
    barrier(comm_);
    executor_->reset_clock();  // timeline times from a common start on every rank
    for (int64_t it = first_iteration_; it <= last; ++it) {
      const auto t0 = std::chrono::steady_clock::now();
      IterationResult r = executor_->train_iteration(
          it, [&](int64_t mb, std::span<int32_t> tokens, std::span<int32_t> labels) {
            data_->micro_batch(it - 1, mb, dp_rank, tokens, labels);
          });
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      record(it, r);
      if (cb.on_iteration) {
        IterationLog log;
        log.iteration = it;
        log.train_iters = last;
        log.consumed_samples = it * gbs;
        log.lm_loss = r.lm_loss;
        log.learning_rate = r.learning_rate;
        log.grad_norm = r.grad_norm;
        if (sc_.model.is_moe()) log.load_balancing_loss = r.load_balancing_loss;
        log.elapsed_ms = ms;
        log.tokens_per_s =
            static_cast<double>(gbs * sc_.model.seq_length) / (ms / 1000.0);
        cb.on_iteration(log);
      }
      const bool eval = sc_.training.eval_iters > 0 &&
                        (it % sc_.training.eval_interval == 0 || it == last);
      const bool save = !opts_.save.empty() &&
                        ((sc_.training.save_interval && it % *sc_.training.save_interval == 0) ||
                         it == last);
      if ((eval && cb.on_validation) || save) executor_->synchronize_parameters();
      if (eval && cb.on_validation) cb.on_validation({it, evaluate()});
      if (save) {
        // The whole state of this rank's TP/PP shard (sharded pieces gathered over DP), so the
        // checkpoint resumes under any data_parallel_sharding_strategy.
        executor_->gather_sharded_state();
        this->save(it);
        if (cb.on_checkpoint) cb.on_checkpoint({it, opts_.save, false});
      }
    }
  }

  const std::vector<TimelineEvent>& timeline() const { return events_; }
  const std::vector<OpSpan>& last_iteration_spans() const { return last_spans_; }
  const Program& program() const { return *program_; }

 private:
  double evaluate() {
    const int64_t dp_rank = program_->ranks.at(comm_.rank()).coord.dp;
    double sum = 0;
    for (int64_t k = 0; k < sc_.training.eval_iters; ++k) {
      sum += executor_
                 ->evaluate([&](int64_t mb, std::span<int32_t> tokens, std::span<int32_t> labels) {
                   data_->eval_micro_batch(k, mb, dp_rank, tokens, labels);
                 })
                 .lm_loss;
    }
    return sum / static_cast<double>(sc_.training.eval_iters);
  }

  void record(int64_t it, const IterationResult& r) {
    if (!opts_.record_timeline) return;
    for (const OpSpan& span : r.spans) {
      events_.push_back(live_event(*program_, comm_.rank(), comm_.world_size(), span, it));
    }
    last_spans_ = r.spans;
  }

  // ---- checkpoints -----------------------------------------------------------------------------

  RankCheckpoint snapshot(int64_t it) const {
    RankCheckpoint ck;
    ck.signature = signature_;
    ck.iteration = it;
    ck.consumed_train_samples = it * sc_.training.global_batch_size;
    ck.seed = static_cast<uint64_t>(sc_.training.seed);
    Backend& backend = shard_->backend();
    for (const ChunkShard& c : shard_->chunks()) {
      const std::string pre = "chunk" + std::to_string(c.chunk) + ".";
      for (const ShardTensor& t : c.tensors) {
        auto piece = [&](const Tensor& buf) {  // the tensor's elements, downloaded
          std::vector<float> host(static_cast<size_t>(t.numel));
          backend.download(host, buf.span().subspan(static_cast<size_t>(t.offset), host.size()));
          return host;
        };
        ck.tensors.push_back({pre + t.name, t.shape, piece(c.params)});
        ck.tensors.push_back({pre + t.name + ".exp_avg", t.shape, piece(c.exp_avg)});
        ck.tensors.push_back({pre + t.name + ".exp_avg_sq", t.shape, piece(c.exp_avg_sq)});
      }
    }
    return ck;
  }

  void save(int64_t it) {
    write_rank_checkpoint(opts_.save, it, comm_.rank(), snapshot(it));
    barrier(comm_);  // every rank's file is in place before the tracker names the iteration
    if (comm_.rank() == 0) write_latest_iteration(opts_.save, it);
    barrier(comm_);
  }

  void load() {
    // No tracker: nothing saved there yet (Megatron-LM: "could not find the metadata file ...
    // will not load any checkpoints and will start from random"). Every rank sees the same
    // folder, so every rank takes this branch or none.
    if (!std::filesystem::exists(latest_iteration_path(opts_.load))) {
      load_found_no_checkpoint_ = true;
      return;
    }
    const int64_t it = read_latest_iteration(opts_.load);
    const RankCheckpoint ck = read_rank_checkpoint(opts_.load, it, comm_.rank());
    const std::string origin = rank_checkpoint_path(opts_.load, it, comm_.rank()).string();
    check_signature(ck, signature_, origin);
    if (ck.seed != static_cast<uint64_t>(sc_.training.seed)) {
      throw DataError(origin + ": the checkpoint was trained with training.seed " +
                      std::to_string(ck.seed) + ", this run has " +
                      std::to_string(sc_.training.seed) +
                      " (resuming with another seed is not supported)");
    }
    if (*sc_.training.train_iters <= ck.iteration) {
      throw ConfigError(origin + ": the checkpoint is at iteration " +
                        std::to_string(ck.iteration) + " and training.train_iters is " +
                        std::to_string(*sc_.training.train_iters) +
                        ": nothing is left to train (rule: train_iters > the checkpoint's "
                        "iteration; raise --train-iters to continue)");
    }
    if (ck.consumed_train_samples != ck.iteration * sc_.training.global_batch_size) {
      throw DataError(origin + ": " + std::to_string(ck.consumed_train_samples) +
                      " samples consumed in " + std::to_string(ck.iteration) +
                      " iterations, but this run's training.global_batch_size is " +
                      std::to_string(sc_.training.global_batch_size) +
                      " (resuming with another global batch size is not supported)");
    }
    std::map<std::string, const CheckpointTensor*> by_name;
    for (const CheckpointTensor& t : ck.tensors) by_name[t.name] = &t;
    for (ChunkShard& c : shard_->chunks()) {
      const std::string pre = "chunk" + std::to_string(c.chunk) + ".";
      for (const ShardTensor& t : c.tensors) {
        for (auto [suffix, buf] : {std::pair{"", &c.params}, std::pair{".exp_avg", &c.exp_avg},
                                   std::pair{".exp_avg_sq", &c.exp_avg_sq}}) {
          const std::string name = pre + t.name + suffix;
          auto f = by_name.find(name);
          if (f == by_name.end()) throw DataError(origin + ": tensor " + name + " is missing");
          if (f->second->shape != t.shape ||
              static_cast<int64_t>(f->second->data.size()) != t.numel) {
            throw DataError(origin + ": tensor " + name + " has another shape than this run's");
          }
          shard_->backend().upload(
              buf->span().subspan(static_cast<size_t>(t.offset), f->second->data.size()),
              f->second->data);
        }
      }
    }
    if (ck.tensors.size() != by_name.size() ||
        static_cast<int64_t>(ck.tensors.size()) != 3 * num_tensors()) {
      throw DataError(origin + ": holds " + std::to_string(ck.tensors.size()) +
                      " tensors, this run has " + std::to_string(3 * num_tensors()));
    }
    first_iteration_ = ck.iteration + 1;
  }

  int64_t num_tensors() const {
    int64_t n = 0;
    for (const ChunkShard& c : shard_->chunks()) n += static_cast<int64_t>(c.tensors.size());
    return n;
  }

  Scenario sc_;
  Communicator& comm_;
  TrainerOptions opts_;
  std::unique_ptr<Program> program_;
  std::unique_ptr<ModelShard> shard_;
  std::unique_ptr<GptDataset> data_;
  std::unique_ptr<Executor> executor_;
  std::map<std::string, std::string> signature_;
  int64_t first_iteration_ = 1;
  bool load_found_no_checkpoint_ = false;
  std::vector<TimelineEvent> events_;
  std::vector<OpSpan> last_spans_;  // of the last iteration recorded
};

Trainer::Trainer(const Scenario& s, Communicator& comm, TrainerOptions options)
    : impl_(std::make_unique<Impl>(s, comm, std::move(options))) {}
Trainer::~Trainer() = default;
int64_t Trainer::first_iteration() const { return impl_->first_iteration(); }
bool Trainer::load_found_no_checkpoint() const { return impl_->load_found_no_checkpoint(); }
void Trainer::train(const TrainerCallbacks& callbacks) { impl_->train(callbacks); }
const std::vector<TimelineEvent>& Trainer::timeline() const { return impl_->timeline(); }
const std::vector<OpSpan>& Trainer::last_iteration_spans() const {
  return impl_->last_iteration_spans();
}
const Program& Trainer::program() const { return impl_->program(); }

}  // namespace traintwin::exec
