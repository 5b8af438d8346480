// GPT pretraining data for the trainer: an indexed dataset (exec/indexed_dataset.hpp) split by
// documents into train / validation / test, cut into windows of seq_length + 1 tokens, shuffled
// per epoch by seed and handed out in Megatron's micro-batch order.
//
// Split (Megatron-LM --split, megatron/core/datasets/utils.py parse_and_normalize_split and
// blended_megatron_dataset_builder.py _get_split_indices): the string holds up to three
// non-negative weights "train,validation,test" (',' or '/' between them, missing ones are 0),
// normalized to sum 1. Over n documents the bounds are
//   idx[0] = 0, idx[k+1] = idx[k] + round(w[k] * n)   (round: half to even, as Python's round)
// then idx[1..3] all shift by (idx[3] - n) so that idx[3] = n; train = documents [idx[0], idx[1]),
// validation [idx[1], idx[2]), test [idx[2], idx[3]). Difference from Megatron: after the shift
// each bound is clamped into [previous bound, n] (Megatron can produce a negative bound when a
// zero weight meets two halves rounded up, e.g. "0,1,1" over 3 documents). Megatron-core counts
// sequences, this counts documents: the same for a dataset preprocessed without sentence
// splitting, except that an empty document (zero sequences) counts here.
//
// Samples (a simplification of Megatron's GPTDataset, which shuffles documents and builds a
// sample index over several epochs): within a split the documents' tokens are concatenated (they
// are contiguous in the .bin); sample i is tokens [i*s, i*s + s + 1) of that stream, s =
// seq_length, so consecutive samples overlap by one token and a sample may cross documents (the
// end-of-text token, from preprocess --append-eod, separates them). num_samples = (T - 1) / s
// for a split of T >= s + 1 tokens. tokens = window[0, s), labels = window[1, s + 1).
//
// Shuffle (training split only): epoch e uses a permutation perm_e of [0, n) made by
// Fisher-Yates (for i = n-1 down to 1: j = uniform in [0, i]; swap perm[i], perm[j]) driven by a
// std::mt19937_64 seeded with std::seed_seq{lo32(seed), hi32(seed), split, lo32(e), hi32(e)};
// "uniform in [0, i]" takes r = engine() and rejects r < 2^64 mod (i+1), then r mod (i+1). Both
// std::mt19937_64 and std::seed_seq are specified exactly by the C++ standard, so the order is the
// same on every platform (std::shuffle and std::uniform_int_distribution are not). Global sample
// k is sample perm_{k/n}[k % n].
//
// Batches (Megatron's MegatronPretrainingSampler, megatron/legacy/data/data_samplers.py): with
// global batch B, micro-batch b and DP size D, iteration `it` (0-based) consumes global samples
// [it*B, (it+1)*B); micro-batch j of DP rank d holds global samples it*B + j*b*D + d*b + [0, b).
// Evaluation batch k holds validation samples k*B .. (k+1)*B - 1 modulo the validation sample
// count, unshuffled, sharded the same way.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "exec/indexed_dataset.hpp"

namespace traintwin {

/// The three document splits, in the order of the --split weights.
enum class DataSplit : int { kTrain = 0, kValidation = 1, kTest = 2 };

/// "train", "validation" or "test".
const char* data_split_name(DataSplit split);

/// Where the data comes from and how it is cut (Megatron's --data-path, --seq-length, --seed,
/// --split; vocab_size is the model's padded or unpadded vocabulary, every token id must be
/// below it).
struct GptDatasetConfig {
  std::string prefix;      ///< dataset prefix: prefix.bin / prefix.idx
  int64_t seq_length = 0;  ///< tokens per sample fed to the model (s)
  uint64_t seed = 0;       ///< shuffle seed
  std::string split = "969,30,1";
  int64_t vocab_size = 0;  ///< every token id read must be < vocab_size
};

/// Megatron's batch sizes: --global-batch-size, --micro-batch-size and the DP size. The number
/// of micro-batches per iteration is global / (micro * data_parallel).
struct GptBatchConfig {
  int64_t global_batch_size = 0;   ///< B, samples per iteration over all DP ranks
  int64_t micro_batch_size = 0;    ///< b, samples per micro-batch per DP rank
  int64_t data_parallel_size = 0;  ///< D
};

/// Parses a Megatron --split string into three weights normalized to sum 1: split_fractions()
/// of core/scenario.hpp, whose InvalidArgument (an empty string or field, a field that is not a
/// finite number >= 0, more than three weights, all zero) becomes a ConfigError naming the string.
std::array<double, 3> parse_split_weights(const std::string& split);

/// Megatron's _get_split_indices over `num_documents` documents: {0, a, b, num_documents}
/// (train [0, a), validation [a, b), test [b, n)), with the clamp described above. Throws
/// InvalidArgument for num_documents < 0.
std::array<int64_t, 4> split_document_bounds(const std::array<double, 3>& weights,
                                             int64_t num_documents);

/// The order of the samples of `split` in epoch `epoch`: a permutation of [0, num_samples) by
/// the seeded Fisher-Yates shuffle described above. Throws InvalidArgument for num_samples < 0
/// or epoch < 0.
std::vector<int64_t> shuffled_sample_order(uint64_t seed, DataSplit split, int64_t epoch,
                                           int64_t num_samples);

/// A GPT dataset opened for training (see the header comment for the rules). Reads through the
/// memory-mapped .bin; the permutations of the last two epochs used are cached (guarded by a
/// mutex, so the const methods may be called from several threads). Never prints.
class GptDataset {
 public:
  /// Opens config.prefix, checks every token id of the dataset against config.vocab_size, and
  /// splits it.
  /// Throws:
  ///   ConfigError — seq_length < 1, vocab_size < 1, a batch size < 1, a global batch size not
  ///     divisible by micro_batch_size * data_parallel_size, a bad split string (see
  ///     parse_split_weights), or a zero weight for the training split (or the validation split
  ///     when need_validation);
  ///   DataError — a token id >= vocab_size ("vocabulary mismatch", naming the .bin, the token
  ///     position and value), or the training split (or, when need_validation, the validation
  ///     split) holding fewer than seq_length + 1 tokens (naming the prefix, the split string,
  ///     the split, its documents and tokens);
  ///   Error — the files cannot be opened or are corrupt (IndexedDataset::open).
  GptDataset(const GptDatasetConfig& config, const GptBatchConfig& batch,
             bool need_validation = true);

  const GptDatasetConfig& config() const { return config_; }
  const GptBatchConfig& batch() const { return batch_; }
  const IndexedDataset& indexed_dataset() const { return dataset_; }

  /// Micro-batches per iteration per DP rank: B / (b * D).
  int64_t num_micro_batches() const;

  /// Documents [first, last) of `split`.
  std::pair<int64_t, int64_t> document_range(DataSplit split) const;
  /// Tokens [first, last) of `split` in the dataset's token stream.
  std::pair<int64_t, int64_t> token_range(DataSplit split) const;
  /// Samples of `split`: (tokens - 1) / seq_length, or 0 when the split has fewer than
  /// seq_length + 1 tokens.
  int64_t num_samples(DataSplit split) const;

  /// Copies sample `index` of `split` (unshuffled), seq_length + 1 tokens, into `window`.
  /// Throws InvalidArgument for an index outside [0, num_samples(split)) or a window of another
  /// size.
  void read_sample(DataSplit split, int64_t index, std::span<int32_t> window) const;

  /// The permutation of the training samples for epoch `epoch` (shuffled_sample_order with this
  /// dataset's seed). Throws InvalidArgument for epoch < 0.
  std::vector<int64_t> epoch_order(int64_t epoch) const;

  /// The training sample behind global sample k: perm_{k / n}[k % n], n = num_samples(kTrain).
  /// Throws InvalidArgument for k < 0.
  int64_t train_sample(int64_t global_sample) const;

  /// The global sample at row `row` of micro-batch `micro_batch` of DP rank `dp_rank` in
  /// iteration `iteration`: iteration*B + micro_batch*b*D + dp_rank*b + row. Throws
  /// InvalidArgument for an argument outside its range (iteration >= 0, micro_batch in
  /// [0, num_micro_batches()), dp_rank in [0, D), row in [0, b)).
  int64_t global_sample_index(int64_t iteration, int64_t micro_batch, int64_t dp_rank,
                              int64_t row) const;

  /// Fills one training micro-batch: row r of `tokens` / `labels` ([b, s] row-major each) is
  /// window[0, s) / window[1, s + 1) of training sample train_sample(global_sample_index(
  /// iteration, micro_batch, dp_rank, r)). Throws InvalidArgument as global_sample_index, or for
  /// spans that are not b * s long.
  void micro_batch(int64_t iteration, int64_t micro_batch, int64_t dp_rank,
                   std::span<int32_t> tokens, std::span<int32_t> labels) const;

  /// The validation sample at row `row` of micro-batch `micro_batch` of DP rank `dp_rank` in
  /// evaluation batch `eval_batch`: (eval_batch*B + micro_batch*b*D + dp_rank*b + row) modulo
  /// num_samples(kValidation). Throws InvalidArgument as global_sample_index, and DataError when
  /// the validation split has no sample.
  int64_t eval_sample_index(int64_t eval_batch, int64_t micro_batch, int64_t dp_rank,
                            int64_t row) const;

  /// Fills one evaluation micro-batch like micro_batch(), from the validation samples
  /// eval_sample_index(eval_batch, micro_batch, dp_rank, r). Throws as eval_sample_index and
  /// for spans that are not b * s long.
  void eval_micro_batch(int64_t eval_batch, int64_t micro_batch, int64_t dp_rank,
                        std::span<int32_t> tokens, std::span<int32_t> labels) const;

 private:
  void check_vocabulary() const;
  void check_split_size(DataSplit split) const;
  void check_batch_position(int64_t micro_batch, int64_t dp_rank, int64_t row) const;
  void fill_rows(DataSplit split, std::span<const int64_t> samples, std::span<int32_t> tokens,
                 std::span<int32_t> labels) const;
  const std::vector<int64_t>& cached_order(int64_t epoch) const;  // caller holds mutex_

  GptDatasetConfig config_;
  GptBatchConfig batch_;
  IndexedDataset dataset_;
  std::array<int64_t, 4> document_bounds_{};
  std::array<int64_t, 4> token_bounds_{};

  mutable std::mutex mutex_;
  mutable std::array<std::pair<int64_t, std::vector<int64_t>>, 2> order_cache_{
      std::pair<int64_t, std::vector<int64_t>>{-1, {}},
      std::pair<int64_t, std::vector<int64_t>>{-1, {}}};
  mutable size_t order_cache_next_ = 0;
};

}  // namespace traintwin
