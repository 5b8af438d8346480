// GPT dataset: split, windows, seeded shuffle and Megatron's batch order; rules in
// gpt_dataset.hpp.
#include "exec/gpt_dataset.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <random>
#include <string_view>

#include "core/error.hpp"
#include "core/scenario.hpp"

namespace traintwin {
namespace {

constexpr int64_t kVocabularyChunkTokens = int64_t{1} << 20;


/// Python's round(): to the nearest integer, ties to even.
int64_t round_half_even(double x) {
  const double lower = std::floor(x);
  const double diff = x - lower;
  auto r = static_cast<int64_t>(lower);
  if (diff > 0.5 || (diff == 0.5 && r % 2 != 0)) ++r;
  return r;
}

/// Uniform in [0, bound) from a 64-bit engine by rejection (no modulo bias); bound >= 1.
uint64_t uniform_below(std::mt19937_64& engine, uint64_t bound) {
  const uint64_t threshold = (uint64_t{0} - bound) % bound;  // 2^64 mod bound
  for (;;) {
    const uint64_t r = engine();
    if (r >= threshold) return r % bound;
  }
}

}  // namespace

const char* data_split_name(DataSplit split) {
  switch (split) {
    case DataSplit::kTrain:
      return "train";
    case DataSplit::kValidation:
      return "validation";
    case DataSplit::kTest:
      return "test";
  }
  return "unknown";
}

std::array<double, 3> parse_split_weights(const std::string& split) {
  try {
    return split_fractions(split);  // the scenario loader's rule (core/scenario.hpp)
  } catch (const InvalidArgument& e) {
    throw ConfigError(std::string("data split: ") + e.what());
  }
}

std::array<int64_t, 4> split_document_bounds(const std::array<double, 3>& weights,
                                             int64_t num_documents) {
  if (num_documents < 0) {
    throw InvalidArgument("split_document_bounds: num_documents must be >= 0, got " +
                          std::to_string(num_documents));
  }
  std::array<int64_t, 4> idx{0, 0, 0, 0};
  for (size_t k = 0; k < 3; ++k) {
    idx[k + 1] = idx[k] + round_half_even(weights[k] * static_cast<double>(num_documents));
  }
  const int64_t excess = idx[3] - num_documents;
  for (size_t k = 1; k < 4; ++k) {
    idx[k] = std::clamp(idx[k] - excess, idx[k - 1], num_documents);
  }
  return idx;
}

std::vector<int64_t> shuffled_sample_order(uint64_t seed, DataSplit split, int64_t epoch,
                                           int64_t num_samples) {
  if (num_samples < 0 || epoch < 0) {
    throw InvalidArgument("shuffled_sample_order: num_samples and epoch must be >= 0, got " +
                          std::to_string(num_samples) + " and " + std::to_string(epoch));
  }
  const auto e = static_cast<uint64_t>(epoch);
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(split), static_cast<uint32_t>(e),
                    static_cast<uint32_t>(e >> 32)};
  std::mt19937_64 engine(seq);
  std::vector<int64_t> order(static_cast<size_t>(num_samples));
  for (int64_t i = 0; i < num_samples; ++i) order[static_cast<size_t>(i)] = i;
  for (int64_t i = num_samples - 1; i >= 1; --i) {
    const auto j = uniform_below(engine, static_cast<uint64_t>(i) + 1);
    std::swap(order[static_cast<size_t>(i)], order[j]);
  }
  return order;
}

// --- GptDataset -----------------------------------------------------------------------------

GptDataset::GptDataset(const GptDatasetConfig& config, const GptBatchConfig& batch,
                       bool need_validation)
    : config_(config), batch_(batch), dataset_([&config, &batch] {
        if (config.seq_length < 1) {
          throw ConfigError("GPT dataset " + config.prefix + ": seq_length must be >= 1, got " +
                            std::to_string(config.seq_length));
        }
        if (config.vocab_size < 1) {
          throw ConfigError("GPT dataset " + config.prefix + ": vocab_size must be >= 1, got " +
                            std::to_string(config.vocab_size));
        }
        const std::pair<const char*, int64_t> sizes[] = {
            {"global_batch_size", batch.global_batch_size},
            {"micro_batch_size", batch.micro_batch_size},
            {"data_parallel_size", batch.data_parallel_size}};
        for (const auto& [key, value] : sizes) {
          if (value < 1) {
            throw ConfigError(std::string(key) + " must be >= 1, got " + std::to_string(value));
          }
        }
        const int64_t per_step = batch.micro_batch_size * batch.data_parallel_size;
        if (batch.global_batch_size % per_step != 0) {
          throw ConfigError("global_batch_size " + std::to_string(batch.global_batch_size) +
                            " is not divisible by micro_batch_size * data_parallel_size = " +
                            std::to_string(batch.micro_batch_size) + " * " +
                            std::to_string(batch.data_parallel_size) + " = " +
                            std::to_string(per_step));
        }
        const std::array<double, 3> w = parse_split_weights(config.split);
        if (w[0] == 0) {
          throw ConfigError("data split \"" + config.split +
                            "\" gives the train split weight 0; training needs it");
        }
        return IndexedDataset::open(config.prefix);
      }()) {
  const std::array<double, 3> weights = parse_split_weights(config_.split);
  if (need_validation && weights[1] == 0) {
    throw ConfigError("data split \"" + config_.split +
                      "\" gives the validation split weight 0; evaluation needs it (give it a "
                      "weight, e.g. \"969,30,1\", or turn evaluation off)");
  }
  check_vocabulary();
  document_bounds_ = split_document_bounds(weights, dataset_.num_documents());
  const auto doc_indices = dataset_.document_indices();
  const auto pointers = dataset_.sequence_pointers();
  const auto item = static_cast<int64_t>(token_dtype_size(dataset_.dtype()));
  for (size_t k = 0; k < 4; ++k) {
    const int64_t sequence = doc_indices[static_cast<size_t>(document_bounds_[k])];
    token_bounds_[k] = sequence < dataset_.size() ? pointers[static_cast<size_t>(sequence)] / item
                                                  : dataset_.num_tokens();
  }
  check_split_size(DataSplit::kTrain);
  if (need_validation) check_split_size(DataSplit::kValidation);
}

void GptDataset::check_vocabulary() const {
  std::vector<int32_t> chunk;
  const int64_t total = dataset_.num_tokens();
  for (int64_t first = 0; first < total; first += kVocabularyChunkTokens) {
    chunk.resize(static_cast<size_t>(std::min(kVocabularyChunkTokens, total - first)));
    dataset_.read_stream(first, chunk);
    const auto it = std::find_if(chunk.begin(), chunk.end(),
                                 [this](int32_t t) { return t >= config_.vocab_size; });
    if (it != chunk.end()) {
      throw DataError("vocabulary mismatch: " + indexed_dataset_bin_path(config_.prefix) +
                      " holds token id " + std::to_string(*it) + " at token " +
                      std::to_string(first + (it - chunk.begin())) +
                      ", outside the model's vocabulary [0, " + std::to_string(config_.vocab_size) +
                      ") (preprocessed with another tokenizer?)");
    }
  }
}

void GptDataset::check_split_size(DataSplit split) const {
  const auto [doc_first, doc_last] = document_range(split);
  const auto [tok_first, tok_last] = token_range(split);
  if (tok_last - tok_first < config_.seq_length + 1) {
    throw DataError("GPT dataset " + config_.prefix + ", split \"" + config_.split + "\": the " +
                    data_split_name(split) + " split (documents [" + std::to_string(doc_first) +
                    ", " + std::to_string(doc_last) + ") of " +
                    std::to_string(dataset_.num_documents()) + ") has " +
                    std::to_string(tok_last - tok_first) +
                    " tokens, fewer than one sample of seq_length + 1 = " +
                    std::to_string(config_.seq_length + 1));
  }
}

int64_t GptDataset::num_micro_batches() const {
  return batch_.global_batch_size / (batch_.micro_batch_size * batch_.data_parallel_size);
}

std::pair<int64_t, int64_t> GptDataset::document_range(DataSplit split) const {
  const auto k = static_cast<size_t>(split);
  return {document_bounds_[k], document_bounds_[k + 1]};
}

std::pair<int64_t, int64_t> GptDataset::token_range(DataSplit split) const {
  const auto k = static_cast<size_t>(split);
  return {token_bounds_[k], token_bounds_[k + 1]};
}

int64_t GptDataset::num_samples(DataSplit split) const {
  const auto [first, last] = token_range(split);
  const int64_t tokens = last - first;
  return tokens < config_.seq_length + 1 ? 0 : (tokens - 1) / config_.seq_length;
}

void GptDataset::read_sample(DataSplit split, int64_t index, std::span<int32_t> window) const {
  const int64_t n = num_samples(split);
  if (index < 0 || index >= n) {
    throw InvalidArgument("GPT dataset " + config_.prefix + ": " + data_split_name(split) +
                          " sample " + std::to_string(index) + " out of range [0, " +
                          std::to_string(n) + ")");
  }
  if (static_cast<int64_t>(window.size()) != config_.seq_length + 1) {
    throw InvalidArgument("GPT dataset " + config_.prefix + ": the sample window holds " +
                          std::to_string(window.size()) + " tokens, seq_length + 1 = " +
                          std::to_string(config_.seq_length + 1) + " needed");
  }
  dataset_.read_stream(token_range(split).first + index * config_.seq_length, window);
}

std::vector<int64_t> GptDataset::epoch_order(int64_t epoch) const {
  return shuffled_sample_order(config_.seed, DataSplit::kTrain, epoch,
                               num_samples(DataSplit::kTrain));
}

const std::vector<int64_t>& GptDataset::cached_order(int64_t epoch) const {
  for (const auto& [e, order] : order_cache_) {
    if (e == epoch) return order;
  }
  auto& slot = order_cache_[order_cache_next_];
  order_cache_next_ = (order_cache_next_ + 1) % order_cache_.size();
  slot.first = -1;
  slot.second = epoch_order(epoch);
  slot.first = epoch;
  return slot.second;
}

int64_t GptDataset::train_sample(int64_t global_sample) const {
  if (global_sample < 0) {
    throw InvalidArgument("GPT dataset " + config_.prefix + ": global sample " +
                          std::to_string(global_sample) + " is negative");
  }
  const int64_t n = num_samples(DataSplit::kTrain);
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_order(global_sample / n)[static_cast<size_t>(global_sample % n)];
}

void GptDataset::check_batch_position(int64_t micro_batch, int64_t dp_rank, int64_t row) const {
  auto check = [](const char* what, int64_t value, int64_t limit) {
    if (value < 0 || value >= limit) {
      throw InvalidArgument(std::string(what) + " " + std::to_string(value) + " out of range [0, " +
                            std::to_string(limit) + ")");
    }
  };
  check("micro-batch", micro_batch, num_micro_batches());
  check("DP rank", dp_rank, batch_.data_parallel_size);
  check("micro-batch row", row, batch_.micro_batch_size);
}

int64_t GptDataset::global_sample_index(int64_t iteration, int64_t micro_batch, int64_t dp_rank,
                                        int64_t row) const {
  if (iteration < 0) {
    throw InvalidArgument("iteration " + std::to_string(iteration) + " is negative");
  }
  check_batch_position(micro_batch, dp_rank, row);
  return iteration * batch_.global_batch_size +
         micro_batch * batch_.micro_batch_size * batch_.data_parallel_size +
         dp_rank * batch_.micro_batch_size + row;
}

int64_t GptDataset::eval_sample_index(int64_t eval_batch, int64_t micro_batch, int64_t dp_rank,
                                      int64_t row) const {
  if (eval_batch < 0) {
    throw InvalidArgument("evaluation batch " + std::to_string(eval_batch) + " is negative");
  }
  check_batch_position(micro_batch, dp_rank, row);
  const int64_t n = num_samples(DataSplit::kValidation);
  if (n == 0) check_split_size(DataSplit::kValidation);  // throws the DataError
  const int64_t k = eval_batch * batch_.global_batch_size +
                    micro_batch * batch_.micro_batch_size * batch_.data_parallel_size +
                    dp_rank * batch_.micro_batch_size + row;
  return k % n;
}

void GptDataset::fill_rows(DataSplit split, std::span<const int64_t> samples,
                           std::span<int32_t> tokens, std::span<int32_t> labels) const {
  const int64_t s = config_.seq_length;
  const auto expected = static_cast<size_t>(batch_.micro_batch_size * s);
  if (tokens.size() != expected || labels.size() != expected) {
    throw InvalidArgument("micro-batch buffers hold " + std::to_string(tokens.size()) +
                          " tokens and " + std::to_string(labels.size()) +
                          " labels; micro_batch_size * seq_length = " + std::to_string(expected) +
                          " each needed");
  }
  std::vector<int32_t> window(static_cast<size_t>(s + 1));
  for (size_t r = 0; r < samples.size(); ++r) {
    read_sample(split, samples[r], window);
    const auto row = static_cast<size_t>(r * static_cast<size_t>(s));
    std::copy(window.begin(), window.end() - 1, tokens.begin() + static_cast<ptrdiff_t>(row));
    std::copy(window.begin() + 1, window.end(), labels.begin() + static_cast<ptrdiff_t>(row));
  }
}

void GptDataset::micro_batch(int64_t iteration, int64_t micro_batch, int64_t dp_rank,
                             std::span<int32_t> tokens, std::span<int32_t> labels) const {
  std::vector<int64_t> samples(static_cast<size_t>(batch_.micro_batch_size));
  for (int64_t r = 0; r < batch_.micro_batch_size; ++r) {
    samples[static_cast<size_t>(r)] =
        train_sample(global_sample_index(iteration, micro_batch, dp_rank, r));
  }
  fill_rows(DataSplit::kTrain, samples, tokens, labels);
}

void GptDataset::eval_micro_batch(int64_t eval_batch, int64_t micro_batch, int64_t dp_rank,
                                  std::span<int32_t> tokens, std::span<int32_t> labels) const {
  std::vector<int64_t> samples(static_cast<size_t>(batch_.micro_batch_size));
  for (int64_t r = 0; r < batch_.micro_batch_size; ++r) {
    samples[static_cast<size_t>(r)] = eval_sample_index(eval_batch, micro_batch, dp_rank, r);
  }
  fill_rows(DataSplit::kValidation, samples, tokens, labels);
}

}  // namespace traintwin
