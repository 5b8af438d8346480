// Megatron-LM's indexed dataset (.bin/.idx pair, "MMIDIDX" index), written by
// `traintwin preprocess` and read by the data loader, so datasets made by Megatron-LM's
// tools/preprocess_data.py load too.
//
// Layout (megatron/core/datasets/indexed_dataset.py, _IndexWriter/_IndexReader; all integers
// little-endian, no padding):
//
//   .idx  offset  size      field
//         0       9         magic b"MMIDIDX\x00\x00"
//         9       8         version, uint64, always 1
//         17      1         dtype code of the .bin, uint8 (TokenDType)
//         18      8         sequence count N, uint64
//         26      8         document-index count D, uint64 (= documents + 1; Megatron names it
//                           "document count" but stores len(document_indices))
//         34      4*N       sequence lengths, int32, in tokens
//         34+4N   8*N       sequence pointers, int64, byte offsets into the .bin
//         34+12N  8*D       document indices, int64: 0, then the end (exclusive sequence index)
//                           of each document; document d is sequences [di[d], di[d+1])
//         34+12N+8D  N      optional: sequence modes, int8 (multimodal datasets only)
//   .bin  the tokens of every sequence back to back in the dtype; pointer[i] = 2 or 4 bytes *
//         (sum of the lengths before i).
//
// Versions. The legacy reader/writer (megatron/data/indexed_dataset.py, MMapIndexedDataset.Index,
// before megatron/core) writes the same bytes: magic, version 1, code, len(sizes),
// len(doc_idx), sizes, pointers, doc_idx. The current one adds only the trailing int8 modes
// array for multimodal datasets, which the file does not flag: Megatron is told. Here the reader
// accepts both and recognises the modes array by the file size (exactly N bytes after the
// document indices); the writer writes the text-only layout (no modes), which every version
// reads. Dtype codes 1..8 are uint8, int8, int16, int32, int64, float64, float32, uint16 in
// megatron/core (the legacy table had 6 = float, 7 = double, and forks swap them): token ids
// need an integer dtype, so codes 6 and 7 are refused either way.
//
// The writer picks the dtype like Megatron's DType.optimal_dtype: uint16 when the vocabulary
// has fewer than 65500 entries, int32 otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/posix_file.hpp"

namespace traintwin {

/// Megatron's numeric dtype codes (megatron/core/datasets/indexed_dataset.py, DType).
enum class TokenDType : uint8_t {
  kUInt8 = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat64 = 6,
  kFloat32 = 7,
  kUInt16 = 8,
};

/// The dtype Megatron's preprocess_data.py picks for a vocabulary of `vocab_size` entries:
/// uint16 when vocab_size < 65500, else int32. Throws InvalidArgument for vocab_size < 1.
TokenDType optimal_token_dtype(int64_t vocab_size);

/// Bytes per element of `dtype` (1, 2, 4 or 8).
size_t token_dtype_size(TokenDType dtype);

/// Lower-case NumPy name of `dtype` ("uint16", "int32", ...).
const char* token_dtype_name(TokenDType dtype);

/// The index (.idx) and data (.bin) paths of a dataset prefix: prefix + ".idx" / ".bin".
std::string indexed_dataset_idx_path(const std::string& prefix);
std::string indexed_dataset_bin_path(const std::string& prefix);

/// Writes one dataset like Megatron's IndexedDatasetBuilder as preprocess_data.py drives it
/// without sentence splitting: each non-empty document is one sequence; an empty document adds a
/// document of zero sequences (as Megatron does for a text with no tokens).
///
/// Nothing at the prefix is touched until finalize(): tokens and the index go to temporaries
/// created exclusively beside them ("<prefix>.bin.tmp.XXXXXX", AtomicFile: a planted symlink is
/// never followed), and finalize() syncs and renames both into place. A writer destroyed before
/// finalize() (e.g. on an exception) removes its temporary files. Never prints.
class IndexedDatasetWriter {
 public:
  /// Creates the temporary .bin; the dtype follows optimal_token_dtype(vocab_size).
  /// Throws InvalidArgument for vocab_size < 1 or > 2^31, Error when the file cannot be created.
  IndexedDatasetWriter(std::string prefix, int64_t vocab_size);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  /// Appends one document of token ids. Throws InvalidArgument naming the document and position
  /// for a token outside [0, vocab_size), or a document longer than 2^31-1 tokens; Error when
  /// the write fails or after finalize().
  void add_document(const std::vector<int32_t>& tokens);

  /// Writes the .idx and moves both files into place. Throws Error naming the file on an I/O
  /// failure (the temporary files are then removed) or when called twice.
  void finalize();

  TokenDType dtype() const { return dtype_; }
  int64_t num_documents() const { return static_cast<int64_t>(document_indices_.size()) - 1; }
  int64_t num_sequences() const { return static_cast<int64_t>(sequence_lengths_.size()); }
  int64_t num_tokens() const { return num_tokens_; }

 private:
  std::string prefix_;
  int64_t vocab_size_;
  TokenDType dtype_;
  std::unique_ptr<AtomicFile> bin_;  // null after finalize()
  bool finalized_ = false;
  int64_t num_tokens_ = 0;
  std::vector<int32_t> sequence_lengths_;
  std::vector<int64_t> document_indices_{0};
  std::vector<unsigned char> buffer_;
};

/// A read-only indexed dataset: the .idx is read and validated whole on open, the .bin is
/// memory-mapped. Every structural problem is an Error naming the file and what is wrong (bad
/// magic, version or dtype code, truncated or oversized index, negative lengths, document
/// indices that do not cover the sequences, pointers outside the .bin or not back to back, a
/// .bin whose size does not match the index). A .bin truncated while mapped is reported by the
/// next read as a DataError naming it (not a SIGBUS). Movable, not copyable. Never prints.
class IndexedDataset {
 public:
  /// Opens "<prefix>.idx" and "<prefix>.bin". Throws Error as described above.
  static IndexedDataset open(const std::string& prefix);

  IndexedDataset(IndexedDataset&& other) noexcept;
  IndexedDataset& operator=(IndexedDataset&& other) noexcept;
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;
  ~IndexedDataset();

  /// Number of sequences (Megatron's len(dataset)).
  int64_t size() const { return static_cast<int64_t>(sequence_lengths_.size()); }
  /// Number of documents (document_indices().size() - 1).
  int64_t num_documents() const { return static_cast<int64_t>(document_indices_.size()) - 1; }
  /// Total tokens over all sequences.
  int64_t num_tokens() const { return num_tokens_; }
  TokenDType dtype() const { return dtype_; }
  const std::string& prefix() const { return prefix_; }

  /// Tokens per sequence (int32, as stored).
  std::span<const int32_t> sequence_lengths() const { return sequence_lengths_; }
  /// Byte offset of each sequence in the .bin.
  std::span<const int64_t> sequence_pointers() const { return sequence_pointers_; }
  /// 0, then the exclusive end sequence index of each document (num_documents() + 1 entries).
  std::span<const int64_t> document_indices() const { return document_indices_; }
  /// Sequences [first, last) of document `d`. Throws InvalidArgument for d out of range.
  std::pair<int64_t, int64_t> document_sequences(int64_t d) const;
  /// True when the index carries the multimodal int8 modes array.
  /// (recognised by the file size; a dataset of zero sequences never has it).
  bool has_sequence_modes() const { return has_modes_; }
  std::span<const int8_t> sequence_modes() const { return sequence_modes_; }

  /// The tokens of sequence `i` as int32. Throws InvalidArgument for i out of range and Error
  /// (naming the .bin and sequence) for a stored id that is negative or does not fit int32.
  std::vector<int32_t> sequence(int64_t i) const;

  /// Copies `out.size()` tokens of sequence `i` starting at token `offset` (Megatron's
  /// get(idx, offset, length)). Throws InvalidArgument when the range leaves the sequence.
  void read(int64_t i, int64_t offset, std::span<int32_t> out) const;

  /// Copies `out.size()` tokens of the whole dataset seen as one stream (sequences back to back,
  /// which the validated layout guarantees) starting at token `first`; for seq_length+1 windows
  /// that cross documents. Throws InvalidArgument when the range leaves [0, num_tokens()).
  void read_stream(int64_t first, std::span<int32_t> out) const;

 private:
  IndexedDataset() = default;
  /// Copies tokens from the mapping at `mapped` into `out` as int32. Throws DataError naming the
  /// .bin when the file shrank while mapped (the read faulted with SIGBUS, caught here).
  void convert(const unsigned char* mapped, std::span<int32_t> out, int64_t first_token) const;

  std::string prefix_;
  std::string bin_path_;
  TokenDType dtype_ = TokenDType::kUInt16;
  int64_t num_tokens_ = 0;
  std::vector<int32_t> sequence_lengths_;
  std::vector<int64_t> sequence_pointers_;
  std::vector<int64_t> document_indices_;
  std::vector<int8_t> sequence_modes_;
  bool has_modes_ = false;
  const unsigned char* bin_ = nullptr;  // mmap of the .bin; null when it is empty
  size_t bin_size_ = 0;
};

}  // namespace traintwin
