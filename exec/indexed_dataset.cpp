// Megatron indexed dataset writer and reader; layout documented in indexed_dataset.hpp.
#include "exec/indexed_dataset.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string_view>

#include "core/error.hpp"
#include "exec/posix_file.hpp"

namespace traintwin {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the indexed dataset is little-endian; big-endian hosts are not supported");

constexpr std::string_view kMagic{"MMIDIDX\x00\x00", 9};
constexpr uint64_t kVersion = 1;
constexpr int64_t kHeaderBytes = 34;     // magic 9 + version 8 + code 1 + two counts 8 + 8
constexpr int64_t kUInt16Limit = 65500;  // Megatron's DType.optimal_dtype threshold

template <typename T>
void append_pod(std::vector<unsigned char>& out, const T& value) {
  const auto* p = reinterpret_cast<const unsigned char*>(&value);
  out.insert(out.end(), p, p + sizeof(T));
}

template <typename T>
T load(const unsigned char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

/// The whole content of `path`; throws Error naming it when it is missing or unreadable.
std::vector<unsigned char> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open indexed dataset index " + path + ": " + errno_text());
  std::vector<unsigned char> data;
  unsigned char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string why = errno_text();
      ::close(fd);
      throw Error("cannot read " + path + ": " + why);
    }
    if (n == 0) break;
    data.insert(data.end(), chunk, chunk + n);
  }
  ::close(fd);
  return data;
}

bool known_code(uint8_t code) { return code >= 1 && code <= 8; }

}  // namespace

TokenDType optimal_token_dtype(int64_t vocab_size) {
  if (vocab_size < 1) {
    throw InvalidArgument("vocab_size must be >= 1, got " + std::to_string(vocab_size));
  }
  return vocab_size < kUInt16Limit ? TokenDType::kUInt16 : TokenDType::kInt32;
}

size_t token_dtype_size(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::kUInt8:
    case TokenDType::kInt8:
      return 1;
    case TokenDType::kInt16:
    case TokenDType::kUInt16:
      return 2;
    case TokenDType::kInt32:
    case TokenDType::kFloat32:
      return 4;
    case TokenDType::kInt64:
    case TokenDType::kFloat64:
      return 8;
  }
  throw InvalidArgument("unknown dtype code " + std::to_string(static_cast<int>(dtype)));
}

const char* token_dtype_name(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::kUInt8:
      return "uint8";
    case TokenDType::kInt8:
      return "int8";
    case TokenDType::kInt16:
      return "int16";
    case TokenDType::kInt32:
      return "int32";
    case TokenDType::kInt64:
      return "int64";
    case TokenDType::kFloat64:
      return "float64";
    case TokenDType::kFloat32:
      return "float32";
    case TokenDType::kUInt16:
      return "uint16";
  }
  return "unknown";
}

std::string indexed_dataset_idx_path(const std::string& prefix) { return prefix + ".idx"; }
std::string indexed_dataset_bin_path(const std::string& prefix) { return prefix + ".bin"; }

// --- writer ---------------------------------------------------------------------------------

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, int64_t vocab_size)
    : prefix_(std::move(prefix)), vocab_size_(vocab_size), dtype_(optimal_token_dtype(vocab_size)) {
  if (vocab_size > int64_t{1} << 31) {
    throw InvalidArgument("vocab_size must be <= 2^31 (token ids are int32), got " +
                          std::to_string(vocab_size));
  }
  const std::string tmp = indexed_dataset_bin_path(prefix_) + ".tmp";
  bin_fd_ = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (bin_fd_ < 0) throw Error("cannot create " + tmp + ": " + errno_text());
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (!finalized_) remove_temporaries();
}

void IndexedDatasetWriter::remove_temporaries() noexcept {
  if (bin_fd_ >= 0) {
    ::close(bin_fd_);
    bin_fd_ = -1;
  }
  ::unlink((indexed_dataset_bin_path(prefix_) + ".tmp").c_str());
  ::unlink((indexed_dataset_idx_path(prefix_) + ".tmp").c_str());
}

void IndexedDatasetWriter::add_document(const std::vector<int32_t>& tokens) {
  const std::string tmp = indexed_dataset_bin_path(prefix_) + ".tmp";
  if (finalized_ || bin_fd_ < 0) {
    throw Error("indexed dataset " + prefix_ + ": add_document after finalize");
  }
  const int64_t doc = num_documents();
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw InvalidArgument("indexed dataset " + prefix_ + ": document " + std::to_string(doc) +
                          " has " + std::to_string(tokens.size()) +
                          " tokens; a sequence holds at most 2^31-1");
  }
  const size_t item = token_dtype_size(dtype_);
  buffer_.resize(tokens.size() * item);
  for (size_t k = 0; k < tokens.size(); ++k) {
    const int32_t t = tokens[k];
    if (t < 0 || t >= vocab_size_) {
      throw InvalidArgument("indexed dataset " + prefix_ + ": document " + std::to_string(doc) +
                            ", token " + std::to_string(k) + " is " + std::to_string(t) +
                            ", outside the vocabulary [0, " + std::to_string(vocab_size_) + ")");
    }
    if (dtype_ == TokenDType::kUInt16) {
      const auto v = static_cast<uint16_t>(t);
      std::memcpy(&buffer_[k * item], &v, item);
    } else {
      std::memcpy(&buffer_[k * item], &t, item);
    }
  }
  if (!tokens.empty()) {
    write_all(bin_fd_, buffer_.data(), buffer_.size(), tmp);
    sequence_lengths_.push_back(static_cast<int32_t>(tokens.size()));
    num_tokens_ += static_cast<int64_t>(tokens.size());
  }
  document_indices_.push_back(static_cast<int64_t>(sequence_lengths_.size()));
}

void IndexedDatasetWriter::finalize() {
  if (finalized_ || bin_fd_ < 0) {
    throw Error("indexed dataset " + prefix_ + ": finalize called twice");
  }
  const std::string bin_tmp = indexed_dataset_bin_path(prefix_) + ".tmp";
  const std::string idx_tmp = indexed_dataset_idx_path(prefix_) + ".tmp";
  try {
    const int fd = bin_fd_;
    bin_fd_ = -1;
    sync_and_close(fd, bin_tmp);

    const uint64_t n = sequence_lengths_.size();
    std::vector<unsigned char> idx;
    idx.reserve(static_cast<size_t>(kHeaderBytes) + n * 12 + document_indices_.size() * 8);
    idx.insert(idx.end(), kMagic.begin(), kMagic.end());
    append_pod(idx, kVersion);
    append_pod(idx, static_cast<uint8_t>(dtype_));
    append_pod(idx, n);
    append_pod(idx, static_cast<uint64_t>(document_indices_.size()));
    for (int32_t len : sequence_lengths_) append_pod(idx, len);
    const auto item = static_cast<int64_t>(token_dtype_size(dtype_));
    int64_t pointer = 0;
    for (int32_t len : sequence_lengths_) {
      append_pod(idx, pointer);
      pointer += len * item;
    }
    for (int64_t d : document_indices_) append_pod(idx, d);

    const int idx_fd = ::open(idx_tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (idx_fd < 0) throw Error("cannot create " + idx_tmp + ": " + errno_text());
    try {
      write_all(idx_fd, idx.data(), idx.size(), idx_tmp);
    } catch (...) {
      ::close(idx_fd);
      throw;
    }
    sync_and_close(idx_fd, idx_tmp);

    const std::string bin = indexed_dataset_bin_path(prefix_);
    const std::string index = indexed_dataset_idx_path(prefix_);
    if (std::rename(bin_tmp.c_str(), bin.c_str()) != 0) {
      throw Error("cannot rename " + bin_tmp + " to " + bin + ": " + errno_text());
    }
    if (std::rename(idx_tmp.c_str(), index.c_str()) != 0) {
      throw Error("cannot rename " + idx_tmp + " to " + index + ": " + errno_text());
    }
  } catch (...) {
    remove_temporaries();
    finalized_ = true;
    throw;
  }
  finalized_ = true;
}

// --- reader ---------------------------------------------------------------------------------

IndexedDataset IndexedDataset::open(const std::string& prefix) {
  IndexedDataset ds;
  ds.prefix_ = prefix;
  ds.bin_path_ = indexed_dataset_bin_path(prefix);
  const std::string idx_path = indexed_dataset_idx_path(prefix);
  auto fail = [&idx_path](const std::string& what) -> Error {
    return Error("indexed dataset index " + idx_path + ": " + what);
  };

  const std::vector<unsigned char> idx = read_file(idx_path);
  const auto file_size = static_cast<int64_t>(idx.size());
  if (file_size < kHeaderBytes) {
    throw fail("truncated: the header needs " + std::to_string(kHeaderBytes) +
               " bytes, the file has " + std::to_string(file_size));
  }
  if (std::memcmp(idx.data(), kMagic.data(), kMagic.size()) != 0) {
    throw fail(
        "bad magic: the first 9 bytes are not \"MMIDIDX\\0\\0\" (not a Megatron "
        "indexed dataset index)");
  }
  const auto version = load<uint64_t>(&idx[9]);
  if (version != kVersion) {
    throw fail("unsupported version " + std::to_string(version) + " (only version 1 exists)");
  }
  const auto code = load<uint8_t>(&idx[17]);
  if (!known_code(code)) {
    throw fail("unknown dtype code " + std::to_string(code) + " (Megatron codes are 1..8)");
  }
  ds.dtype_ = static_cast<TokenDType>(code);
  if (ds.dtype_ == TokenDType::kFloat32 || ds.dtype_ == TokenDType::kFloat64) {
    throw fail("dtype code " + std::to_string(code) +
               " is floating point; token ids need an integer dtype");
  }
  const auto n = load<uint64_t>(&idx[18]);
  const auto d = load<uint64_t>(&idx[26]);
  // Bound the counts by the file size before multiplying, so that nothing overflows.
  const auto body = static_cast<uint64_t>(file_size - kHeaderBytes);
  if (n > body / 12 || d > body / 8 || n * 12 + d * 8 > body) {
    throw fail("truncated: " + std::to_string(n) + " sequences and " + std::to_string(d) +
               " document indices need " + std::to_string(kHeaderBytes) + " + 12*" +
               std::to_string(n) + " + 8*" + std::to_string(d) + " bytes, the file has " +
               std::to_string(file_size));
  }
  const uint64_t rest = body - n * 12 - d * 8;
  if (rest != 0 && !(rest == n && n > 0)) {
    throw fail(std::to_string(rest) +
               " unexpected trailing bytes after the document indices "
               "(neither none nor a " +
               std::to_string(n) + "-byte multimodal modes array)");
  }
  if (d < 1) throw fail("the document indices are empty (they start with 0)");

  const unsigned char* p = idx.data() + kHeaderBytes;
  ds.sequence_lengths_.resize(n);
  std::memcpy(ds.sequence_lengths_.data(), p, n * 4);
  p += n * 4;
  ds.sequence_pointers_.resize(n);
  std::memcpy(ds.sequence_pointers_.data(), p, n * 8);
  p += n * 8;
  ds.document_indices_.resize(d);
  std::memcpy(ds.document_indices_.data(), p, d * 8);
  p += d * 8;
  if (rest == n && n > 0) {
    ds.has_modes_ = true;
    ds.sequence_modes_.resize(n);
    std::memcpy(ds.sequence_modes_.data(), p, n);
  }

  // Document indices: 0, non-decreasing, ending at the sequence count.
  if (ds.document_indices_.front() != 0) {
    throw fail("document indices must start at 0, found " +
               std::to_string(ds.document_indices_.front()));
  }
  for (uint64_t k = 1; k < d; ++k) {
    if (ds.document_indices_[k] < ds.document_indices_[k - 1]) {
      throw fail("document index " + std::to_string(k) + " (" +
                 std::to_string(ds.document_indices_[k]) + ") is smaller than the one before (" +
                 std::to_string(ds.document_indices_[k - 1]) + ")");
    }
  }
  if (ds.document_indices_.back() != static_cast<int64_t>(n)) {
    throw fail("the last document index is " + std::to_string(ds.document_indices_.back()) +
               ", not the sequence count " + std::to_string(n));
  }

  // The .bin: size, then every sequence inside it and back to back.
  const int fd = ::open(ds.bin_path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw Error("cannot open indexed dataset data " + ds.bin_path_ + ": " + errno_text());
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    throw Error("cannot stat " + ds.bin_path_ + ": " + why);
  }
  const auto bin_size = static_cast<int64_t>(st.st_size);
  const auto item = static_cast<int64_t>(token_dtype_size(ds.dtype_));
  try {
    int64_t expected = 0;
    for (uint64_t i = 0; i < n; ++i) {
      const int64_t len = ds.sequence_lengths_[i];
      const int64_t ptr = ds.sequence_pointers_[i];
      if (len < 0) {
        throw fail("sequence " + std::to_string(i) + " has negative length " + std::to_string(len));
      }
      if (ptr < 0 || ptr > bin_size || len * item > bin_size - ptr) {
        throw Error("indexed dataset " + prefix + ": sequence " + std::to_string(i) + " at byte " +
                    std::to_string(ptr) + " with " + std::to_string(len) + " " +
                    token_dtype_name(ds.dtype_) + " tokens lies outside " + ds.bin_path_ + " (" +
                    std::to_string(bin_size) + " bytes)");
      }
      if (ptr != expected) {
        throw fail("sequence " + std::to_string(i) + " starts at byte " + std::to_string(ptr) +
                   ", not right after the previous sequence (byte " + std::to_string(expected) +
                   ")");
      }
      expected += len * item;
    }
    if (expected != bin_size) {
      throw Error("indexed dataset " + prefix + ": " + ds.bin_path_ + " has " +
                  std::to_string(bin_size) + " bytes but " + idx_path + " describes " +
                  std::to_string(expected) + " (" + std::to_string(expected / item) + " " +
                  token_dtype_name(ds.dtype_) + " tokens); .bin and .idx do not belong together");
    }
    ds.num_tokens_ = expected / item;
    if (bin_size > 0) {
      void* map = ::mmap(nullptr, static_cast<size_t>(bin_size), PROT_READ, MAP_PRIVATE, fd, 0);
      if (map == MAP_FAILED) throw Error("cannot mmap " + ds.bin_path_ + ": " + errno_text());
      ds.bin_ = static_cast<const unsigned char*>(map);
      ds.bin_size_ = static_cast<size_t>(bin_size);
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return ds;
}

IndexedDataset::IndexedDataset(IndexedDataset&& other) noexcept { *this = std::move(other); }

IndexedDataset& IndexedDataset::operator=(IndexedDataset&& other) noexcept {
  if (this == &other) return *this;
  if (bin_ != nullptr) ::munmap(const_cast<unsigned char*>(bin_), bin_size_);
  prefix_ = std::move(other.prefix_);
  bin_path_ = std::move(other.bin_path_);
  dtype_ = other.dtype_;
  num_tokens_ = other.num_tokens_;
  sequence_lengths_ = std::move(other.sequence_lengths_);
  sequence_pointers_ = std::move(other.sequence_pointers_);
  document_indices_ = std::move(other.document_indices_);
  sequence_modes_ = std::move(other.sequence_modes_);
  has_modes_ = other.has_modes_;
  bin_ = std::exchange(other.bin_, nullptr);
  bin_size_ = std::exchange(other.bin_size_, 0);
  return *this;
}

IndexedDataset::~IndexedDataset() {
  if (bin_ != nullptr) ::munmap(const_cast<unsigned char*>(bin_), bin_size_);
}

std::pair<int64_t, int64_t> IndexedDataset::document_sequences(int64_t d) const {
  if (d < 0 || d >= num_documents()) {
    throw InvalidArgument("indexed dataset " + prefix_ + ": document " + std::to_string(d) +
                          " out of range [0, " + std::to_string(num_documents()) + ")");
  }
  const auto k = static_cast<size_t>(d);
  return {document_indices_[k], document_indices_[k + 1]};
}

std::vector<int32_t> IndexedDataset::sequence(int64_t i) const {
  if (i < 0 || i >= size()) {
    throw InvalidArgument("indexed dataset " + prefix_ + ": sequence " + std::to_string(i) +
                          " out of range [0, " + std::to_string(size()) + ")");
  }
  std::vector<int32_t> out(static_cast<size_t>(sequence_lengths_[static_cast<size_t>(i)]));
  read(i, 0, out);
  return out;
}

void IndexedDataset::read(int64_t i, int64_t offset, std::span<int32_t> out) const {
  if (i < 0 || i >= size()) {
    throw InvalidArgument("indexed dataset " + prefix_ + ": sequence " + std::to_string(i) +
                          " out of range [0, " + std::to_string(size()) + ")");
  }
  const int64_t len = sequence_lengths_[static_cast<size_t>(i)];
  const auto count = static_cast<int64_t>(out.size());
  if (offset < 0 || offset > len || count > len - offset) {
    throw InvalidArgument("indexed dataset " + prefix_ + ": tokens [" + std::to_string(offset) +
                          ", " + std::to_string(offset + count) + ") of sequence " +
                          std::to_string(i) + " leave its " + std::to_string(len) + " tokens");
  }
  const auto item = static_cast<int64_t>(token_dtype_size(dtype_));
  const int64_t ptr = sequence_pointers_[static_cast<size_t>(i)];
  convert(bin_ + ptr + offset * item, out, ptr / item + offset);
}

void IndexedDataset::read_stream(int64_t first, std::span<int32_t> out) const {
  const auto count = static_cast<int64_t>(out.size());
  if (first < 0 || first > num_tokens_ || count > num_tokens_ - first) {
    throw InvalidArgument("indexed dataset " + prefix_ + ": tokens [" + std::to_string(first) +
                          ", " + std::to_string(first + count) + ") leave the " +
                          std::to_string(num_tokens_) + " tokens of the dataset");
  }
  const auto item = static_cast<int64_t>(token_dtype_size(dtype_));
  convert(bin_ + first * item, out, first);
}

void IndexedDataset::convert(const unsigned char* src, std::span<int32_t> out,
                             int64_t first_token) const {
  if (out.empty()) return;
  auto bad = [&](size_t k, int64_t value) -> Error {
    return Error("indexed dataset data " + bin_path_ + ": token " +
                 std::to_string(first_token + static_cast<int64_t>(k)) + " is " +
                 std::to_string(value) + ", not a token id (negative or beyond int32)");
  };
  const size_t n = out.size();
  switch (dtype_) {
    case TokenDType::kUInt8:
      for (size_t k = 0; k < n; ++k) out[k] = src[k];
      return;
    case TokenDType::kInt8:
      for (size_t k = 0; k < n; ++k) {
        const auto v = load<int8_t>(src + k);
        if (v < 0) throw bad(k, v);
        out[k] = v;
      }
      return;
    case TokenDType::kInt16:
      for (size_t k = 0; k < n; ++k) {
        const auto v = load<int16_t>(src + 2 * k);
        if (v < 0) throw bad(k, v);
        out[k] = v;
      }
      return;
    case TokenDType::kUInt16:
      for (size_t k = 0; k < n; ++k) out[k] = load<uint16_t>(src + 2 * k);
      return;
    case TokenDType::kInt32:
      std::memcpy(out.data(), src, n * 4);
      for (size_t k = 0; k < n; ++k) {
        if (out[k] < 0) throw bad(k, out[k]);
      }
      return;
    case TokenDType::kInt64:
      for (size_t k = 0; k < n; ++k) {
        const auto v = load<int64_t>(src + 8 * k);
        if (v < 0 || v > std::numeric_limits<int32_t>::max()) throw bad(k, v);
        out[k] = static_cast<int32_t>(v);
      }
      return;
    case TokenDType::kFloat32:
    case TokenDType::kFloat64:
      break;
  }
  throw Error("indexed dataset data " + bin_path_ + ": dtype " + token_dtype_name(dtype_) +
              " holds no token ids");
}

}  // namespace traintwin
