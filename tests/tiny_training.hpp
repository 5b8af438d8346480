// A tiny GPT and a synthetic, learnable token dataset for the live-training tests (tests/exec,
// tests/cli): fast enough for 20 steps on every parallel layout on 2 cores.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "exec/indexed_dataset.hpp"

namespace traintwin::testing {

/// Vocabulary of the synthetic data and the tiny model (a multiple of 128 x 2, so TP 1 and 2 pad
/// it differently only in the padding the executor masks).
inline constexpr int64_t kTinyVocab = 1000;

/// Writes `dir`/synthetic.bin/.idx: 120 documents of 40..199 tokens from a deterministic
/// first-order Markov chain over 64 states (next = (7 x state + 3 + small noise) mod 64, with an
/// occasional restart), state k emitted as token id 15 k + 7 of the kTinyVocab ids. The untrained
/// model's loss is ln V; learning which 64 ids occur and the chain brings it far below.
/// Returns the prefix.
inline std::string write_synthetic_dataset(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const std::string prefix = (dir / "synthetic").string();
  IndexedDatasetWriter w(prefix, kTinyVocab);
  uint64_t state = 12345;
  auto next_rand = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<int64_t>(state >> 33);
  };
  constexpr int64_t kStates = 64;
  for (int d = 0; d < 120; ++d) {
    std::vector<int32_t> doc;
    int64_t k = next_rand() % kStates;
    const int64_t len = 40 + next_rand() % 160;
    for (int64_t i = 0; i < len; ++i) {
      doc.push_back(static_cast<int32_t>(15 * k + 7));
      const int64_t r = next_rand() % 16;
      k = r == 0 ? next_rand() % kStates : (7 * k + 3 + r % 3) % kStates;
    }
    w.add_document(doc);
  }
  w.finalize();
  return prefix;
}

/// A scenario file for the tiny GPT (4 layers, h 64, 4 heads, s 32, V 1000, global batch 8 of
/// micro-batches of 2, fp32, 20 iterations, hidden and attention dropout 0.1) on the dataset at `prefix`,
/// single rank; layouts come from command-line overrides. Returns its path.
inline std::string write_tiny_scenario(const std::filesystem::path& dir, const std::string& prefix,
                                       const std::string& extra_training = "") {
  const std::string path = (dir / "tiny.yaml").string();
  std::ofstream f(path);
  f << "name: tiny\n"
       "model: {num_layers: 4, hidden_size: 64, num_attention_heads: 4, seq_length: 32, "
       "vocab_size: " << kTinyVocab << "}\n"
       "training:\n"
       "  micro_batch_size: 2\n"
       "  global_batch_size: 8\n"
       "  precision: fp32\n"
       "  train_iters: 20\n"
       "  lr: 3.0e-3\n"
       "  min_lr: 3.0e-4\n"
       "  lr_decay_style: cosine\n"
       "  lr_warmup_iters: 2\n"
       "  hidden_dropout: 0.1\n"
       "  attention_dropout: 0.1\n"
       "  log_interval: 1\n"
       "  eval_interval: 10\n"
       "  eval_iters: 1\n"
    << extra_training
    << "data: {data_path: " << prefix << ", split: \"90,10,0\"}\n"
       "cluster: {topology: " << TRAINTWIN_SOURCE_DIR << "/topologies/dgx-h100-superpod.yaml, "
       "num_gpus: 1}\n";
  return path;
}

}  // namespace traintwin::testing
