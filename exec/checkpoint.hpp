// Checkpoint files of the trainer: one file per rank, laid out like Megatron-LM's checkpoints
// (megatron/training/checkpointing.py: iter_{:07d} folders and latest_checkpointed_iteration.txt
// holding the iteration number):
//
//   <dir>/latest_checkpointed_iteration.txt     "10"  (decimal, no newline, as Megatron writes)
//   <dir>/iter_0000010/rank_00003.ttckpt          rank 3's state after iteration 10
//
// File format (version 1; all integers little-endian):
//
//   offset      size  field
//   0           8     magic "TTCKPT01"
//   8           8     header length H, uint64
//   16          H     JSON header (UTF-8, padded with spaces so that the data starts at a
//                     multiple of 8): {"format_version": 1, "signature": {key: value, ...},
//                     "iteration", "consumed_train_samples", "seed", "data_bytes",
//                     "tensors": [{"name", "shape": [...], "offset_bytes", "count"}, ...]}
//   16+H        D     raw float32 data of the tensors back to back in table order;
//                     offset_bytes is relative to 16+H, count is in elements, D = data_bytes
//   16+H+D      8     FNV-1a 64 checksum (Fowler/Noll/Vo, offset basis 0xcbf29ce484222325,
//                     prime 0x100000001b3) of bytes [0, 16+H+D), uint64
//
// Every file is written atomically: to "<file>.tmp", fsync'd, renamed over <file>, then the
// folder is fsync'd, so a crash leaves either the old file or the new one, never a torn one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace traintwin {

/// One named float32 tensor of a rank's state (a parameter shard, an optimizer moment...).
struct CheckpointTensor {
  std::string name;
  std::vector<int64_t> shape;  ///< dims; their product is data.size() (an empty shape: 1)
  std::vector<float> data;     ///< row-major
};

/// Everything one rank saves. `signature` describes what the state belongs to (model dims,
/// parallel layout, rank coordinates, ...) and is compared with the resuming run by
/// check_signature().
struct RankCheckpoint {
  std::map<std::string, std::string> signature;
  int64_t iteration = 0;               ///< iterations completed
  int64_t consumed_train_samples = 0;  ///< Megatron's args.consumed_train_samples
  uint64_t seed = 0;
  std::vector<CheckpointTensor> tensors;  ///< names unique
};

/// FNV-1a 64 of `size` bytes, continuing from `hash` (start with kFnv1a64Basis).
inline constexpr uint64_t kFnv1a64Basis = 0xcbf29ce484222325ULL;
uint64_t fnv1a64(const void* data, size_t size, uint64_t hash = kFnv1a64Basis);

/// <dir>/iter_NNNNNNN (Megatron's 7-digit zero-padded iteration). Throws InvalidArgument for
/// iteration < 0.
std::filesystem::path checkpoint_iteration_dir(const std::filesystem::path& dir, int64_t iteration);

/// <dir>/iter_NNNNNNN/rank_RRRRR.ttckpt. Throws InvalidArgument for iteration < 0 or rank < 0.
std::filesystem::path rank_checkpoint_path(const std::filesystem::path& dir, int64_t iteration,
                                           int64_t rank);

/// <dir>/latest_checkpointed_iteration.txt.
std::filesystem::path latest_iteration_path(const std::filesystem::path& dir);

/// Writes rank `rank`'s file for `iteration` atomically (see above), creating the folders.
/// Throws InvalidArgument when ckpt.iteration != iteration, iteration or rank < 0, a tensor's
/// shape has a negative dim or does not match its data size, or two tensors share a name; Error
/// naming the file when a folder or file cannot be created, written, synced or renamed (the
/// temporary file is then removed).
void write_rank_checkpoint(const std::filesystem::path& dir, int64_t iteration, int64_t rank,
                           const RankCheckpoint& ckpt);

/// Writes latest_checkpointed_iteration.txt atomically, creating `dir`. Throws InvalidArgument
/// for iteration < 0, Error naming the file on an I/O failure.
void write_latest_iteration(const std::filesystem::path& dir, int64_t iteration);

/// The iteration in latest_checkpointed_iteration.txt. Throws DataError naming the file when it
/// is missing or does not hold one non-negative decimal integer (Megatron's "release" included).
int64_t read_latest_iteration(const std::filesystem::path& dir);

/// Reads rank `rank`'s file for `iteration`. Throws DataError naming the file and what is
/// wrong: missing or unreadable, bad magic, unknown format version, truncated (shorter than its
/// header says), longer than its header says, checksum mismatch, a malformed header (not JSON,
/// a missing or mistyped field, tensors that do not tile the data), duplicate tensor names, or
/// an iteration in the header other than `iteration`.
RankCheckpoint read_rank_checkpoint(const std::filesystem::path& dir, int64_t iteration,
                                    int64_t rank);

/// Compares the checkpoint's signature with this run's. Throws DataError, naming `origin` (e.g.
/// the file), that lists every differing key as "key: checkpoint X, this run Y", and keys
/// present on one side only as "key: checkpoint X, this run (absent)" or the reverse.
void check_signature(const RankCheckpoint& ckpt, const std::map<std::string, std::string>& run,
                     const std::string& origin);

}  // namespace traintwin
