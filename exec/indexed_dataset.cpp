// Megatron indexed dataset writer and reader; layout documented in indexed_dataset.hpp.
#include "exec/indexed_dataset.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <csetjmp>
#include <csignal>
#include <mutex>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string_view>

#include "core/error.hpp"
#include "core/posix_file.hpp"

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

// A .bin truncated while it is mapped raises SIGBUS on the next read of a lost page. Reads from
// the mapping go through copy_from_mapping(), which turns that fault into a return value, so the
// reader can throw an error naming the file instead of the process dying without a word.
// volatile, and fenced below: the compiler must not drop the store before memcpy as dead.
thread_local sigjmp_buf* volatile t_mapping_fault = nullptr;
struct sigaction g_previous_sigbus {};

void on_sigbus(int sig, siginfo_t* info, void* context) {
  if (t_mapping_fault != nullptr) siglongjmp(*t_mapping_fault, 1);
  // Not a read of ours: behave as before the handler was installed.
  if ((g_previous_sigbus.sa_flags & SA_SIGINFO) != 0 && g_previous_sigbus.sa_sigaction != nullptr) {
    g_previous_sigbus.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN &&
      g_previous_sigbus.sa_handler != nullptr) {
    g_previous_sigbus.sa_handler(sig);
    return;
  }
  ::sigaction(SIGBUS, &g_previous_sigbus, nullptr);  // the fault repeats and ends the process
}

void install_sigbus_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous_sigbus);
  });
}

/// memcpy from a memory mapping; false when the mapped file shrank under it (SIGBUS).
bool copy_from_mapping(void* dst, const unsigned char* src, size_t size) {
  install_sigbus_handler();
  sigjmp_buf jump;
  if (sigsetjmp(jump, 1) != 0) {
    t_mapping_fault = nullptr;
    return false;
  }
  t_mapping_fault = &jump;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  std::memcpy(dst, src, size);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_mapping_fault = nullptr;
  return true;
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
  bin_ = std::make_unique<AtomicFile>(indexed_dataset_bin_path(prefix_));
}

IndexedDatasetWriter::~IndexedDatasetWriter() = default;  // an uncommitted AtomicFile removes itself

void IndexedDatasetWriter::add_document(const std::vector<int32_t>& tokens) {
  if (finalized_ || !bin_) {
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
    bin_->write(buffer_.data(), buffer_.size());
    sequence_lengths_.push_back(static_cast<int32_t>(tokens.size()));
    num_tokens_ += static_cast<int64_t>(tokens.size());
  }
  document_indices_.push_back(static_cast<int64_t>(sequence_lengths_.size()));
}

void IndexedDatasetWriter::finalize() {
  if (finalized_ || !bin_) {
    throw Error("indexed dataset " + prefix_ + ": finalize called twice");
  }
  finalized_ = true;
  const std::unique_ptr<AtomicFile> bin = std::move(bin_);  // removed on an error below
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

  AtomicFile index(indexed_dataset_idx_path(prefix_));
  index.write(idx.data(), idx.size());
  bin->commit();
  index.commit();
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

  // Copies guarded by the count: an empty vector's data() may be null, and memcpy(null, p, 0)
  // is undefined (an empty corpus has no sequences).
  const unsigned char* p = idx.data() + kHeaderBytes;
  auto copy_into = [&p](auto& vec, uint64_t count) {
    vec.resize(count);
    if (count > 0) std::memcpy(vec.data(), p, count * sizeof(vec[0]));
    p += count * sizeof(vec[0]);
  };
  copy_into(ds.sequence_lengths_, n);
  copy_into(ds.sequence_pointers_, n);
  copy_into(ds.document_indices_, d);
  if (rest == n && n > 0) {
    ds.has_modes_ = true;
    copy_into(ds.sequence_modes_, n);
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

void IndexedDataset::convert(const unsigned char* mapped, std::span<int32_t> out,
                             int64_t first_token) const {
  if (out.empty()) return;
  auto bad = [&](size_t k, int64_t value) -> Error {
    return Error("indexed dataset data " + bin_path_ + ": token " +
                 std::to_string(first_token + static_cast<int64_t>(k)) + " is " +
                 std::to_string(value) + ", not a token id (negative or beyond int32)");
  };
  const size_t n = out.size();
  // Copy the bytes out of the mapping first (one guarded read), then convert them.
  thread_local std::vector<unsigned char> bytes;
  bytes.resize(n * token_dtype_size(dtype_));
  if (!copy_from_mapping(bytes.data(), mapped, bytes.size())) {
    struct stat st {};
    const std::string now =
        ::stat(bin_path_.c_str(), &st) == 0 ? std::to_string(st.st_size) + " bytes" : errno_text();
    throw DataError("indexed dataset data " + bin_path_ + ": the file shrank while it was " +
                    "memory-mapped (" + std::to_string(bin_size_) + " bytes when opened, now " +
                    now + "): it was truncated or rewritten during the run");
  }
  const unsigned char* src = bytes.data();
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
