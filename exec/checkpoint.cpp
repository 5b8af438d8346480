// Checkpoint files: atomic per-rank writer, checked reader, signature comparison; format in
// checkpoint.hpp.
#include "exec/checkpoint.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "core/error.hpp"
#include "core/posix_file.hpp"

namespace traintwin {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

static_assert(std::endian::native == std::endian::little,
              "checkpoint files are little-endian; big-endian hosts are not supported");

constexpr std::string_view kMagic = "TTCKPT01";
constexpr std::string_view kMagicStem = "TTCKPT";
constexpr int64_t kFormatVersion = 1;
constexpr size_t kPrefixBytes = 16;   // magic + header length
constexpr size_t kChecksumBytes = 8;  // trailing FNV-1a 64
constexpr uint64_t kFnvPrime = 0x100000001b3ULL;

/// Creates `dir` and its missing parents, syncing each parent that gained an entry.
void create_directories_durably(const fs::path& dir) {
  if (dir.empty() || fs::is_directory(dir)) return;
  create_directories_durably(dir.parent_path());
  std::error_code ec;
  if (!fs::create_directory(dir, ec) && ec) {
    throw Error("cannot create folder " + dir.string() + ": " + ec.message());
  }
  sync_directory(dir.parent_path().empty() ? fs::path(".") : dir.parent_path());
}

/// An AtomicFile (core/posix_file.hpp) that keeps a running FNV-1a 64 of what was written.
class HashedAtomicFile {
 public:
  explicit HashedAtomicFile(fs::path path) : file_(std::move(path)) {}
  void write(const void* data, size_t size) {
    hash_ = fnv1a64(data, size, hash_);
    file_.write(data, size);
  }
  uint64_t hash() const { return hash_; }
  void commit() { file_.commit(); }

 private:
  AtomicFile file_;
  uint64_t hash_ = kFnv1a64Basis;
};

template <typename T>
void put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

template <typename T>
T load(const unsigned char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

/// The element count of `shape` (1 for an empty shape), or -1 when a dim is negative or the
/// product overflows int64.
int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && count > std::numeric_limits<int64_t>::max() / d) return -1;
    count *= d;
  }
  return count;
}

/// `j` as an integer of type T; throws json::type_error unless it is a JSON integer that T
/// holds (a float such as 1e300 would be an undefined conversion).
template <typename T>
T integer(const json& j) {
  if (j.is_number_unsigned()) {
    const auto v = j.get<uint64_t>();
    if (v <= static_cast<uint64_t>(std::numeric_limits<T>::max())) return static_cast<T>(v);
  } else if (j.is_number_integer()) {
    const auto v = j.get<int64_t>();
    if (v >= 0 || std::numeric_limits<T>::is_signed) return static_cast<T>(v);
  }
  throw json::type_error::create(302, "expected an integer in range, got " + j.dump(), &j);
}

std::vector<int64_t> integers(const json& j) {
  if (!j.is_array()) throw json::type_error::create(302, "expected an array, got " + j.dump(), &j);
  std::vector<int64_t> out;
  for (const json& e : j) out.push_back(integer<int64_t>(e));
  return out;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return "[" + fmt::format("{}", fmt::join(shape, ", ")) + "]";
}

/// The bytes of a checkpoint file: a regular file of at most `max_bytes` (a FIFO or a device such
/// as /dev/zero planted in its place is refused before any read: opened non-blocking, checked
/// with fstat). Throws DataError naming the file.
std::vector<unsigned char> read_whole_file(const fs::path& path, uint64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    throw DataError("checkpoint file " + path.string() + ": cannot open: " + errno_text());
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw DataError("checkpoint file " + path.string() +
                    ": is not a regular file (a device, FIFO or socket)");
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    throw DataError("checkpoint file " + path.string() + ": " + std::to_string(st.st_size) +
                    " bytes, more than the " + std::to_string(max_bytes) + " it may have");
  }
  std::vector<unsigned char> data;
  data.reserve(static_cast<size_t>(st.st_size));
  unsigned char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string why = errno_text();
      ::close(fd);
      throw DataError("checkpoint file " + path.string() + ": cannot read: " + why);
    }
    if (n == 0) break;
    data.insert(data.end(), chunk, chunk + n);
  }
  ::close(fd);
  return data;
}

}  // namespace

uint64_t fnv1a64(const void* data, size_t size, uint64_t hash) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t k = 0; k < size; ++k) {
    hash ^= p[k];
    hash *= kFnvPrime;
  }
  return hash;
}

fs::path checkpoint_iteration_dir(const fs::path& dir, int64_t iteration) {
  if (iteration < 0) {
    throw InvalidArgument("checkpoint iteration must be >= 0, got " + std::to_string(iteration));
  }
  return dir / fmt::format("iter_{:07d}", iteration);
}

fs::path rank_checkpoint_path(const fs::path& dir, int64_t iteration, int64_t rank) {
  if (rank < 0) throw InvalidArgument("checkpoint rank must be >= 0, got " + std::to_string(rank));
  return checkpoint_iteration_dir(dir, iteration) / fmt::format("rank_{:05d}.ttckpt", rank);
}

fs::path latest_iteration_path(const fs::path& dir) {
  return dir / "latest_checkpointed_iteration.txt";
}

void write_rank_checkpoint(const fs::path& dir, int64_t iteration, int64_t rank,
                           const RankCheckpoint& ckpt) {
  const fs::path path = rank_checkpoint_path(dir, iteration, rank);
  if (ckpt.iteration != iteration) {
    throw InvalidArgument("checkpoint " + path.string() + ": the state says iteration " +
                          std::to_string(ckpt.iteration) + ", written as iteration " +
                          std::to_string(iteration));
  }
  json table = json::array();
  std::set<std::string> names;
  uint64_t offset_bytes = 0;
  for (const CheckpointTensor& t : ckpt.tensors) {
    const int64_t count = element_count(t.shape);
    if (count < 0 || static_cast<uint64_t>(count) != t.data.size()) {
      throw InvalidArgument("checkpoint " + path.string() + ": tensor \"" + t.name +
                            "\" has shape " + shape_text(t.shape) + " but " +
                            std::to_string(t.data.size()) + " values");
    }
    if (!names.insert(t.name).second) {
      throw InvalidArgument("checkpoint " + path.string() + ": two tensors are named \"" + t.name +
                            "\"");
    }
    table.push_back(
        {{"name", t.name}, {"shape", t.shape}, {"offset_bytes", offset_bytes}, {"count", count}});
    offset_bytes += static_cast<uint64_t>(count) * sizeof(float);
  }
  const json header = {{"format_version", kFormatVersion},
                       {"signature", ckpt.signature},
                       {"iteration", ckpt.iteration},
                       {"consumed_train_samples", ckpt.consumed_train_samples},
                       {"seed", ckpt.seed},
                       {"data_bytes", offset_bytes},
                       {"tensors", std::move(table)}};
  std::string text = header.dump();
  text.append((8 - (kPrefixBytes + text.size()) % 8) % 8, ' ');

  create_directories_durably(path.parent_path());
  HashedAtomicFile file(path);
  std::string prefix(kMagic);
  put<uint64_t>(prefix, text.size());
  file.write(prefix.data(), prefix.size());
  file.write(text.data(), text.size());
  for (const CheckpointTensor& t : ckpt.tensors) {
    file.write(t.data.data(), t.data.size() * sizeof(float));
  }
  std::string checksum;
  put<uint64_t>(checksum, file.hash());
  file.write(checksum.data(), checksum.size());
  file.commit();
}

void write_latest_iteration(const fs::path& dir, int64_t iteration) {
  if (iteration < 0) {
    throw InvalidArgument("checkpoint iteration must be >= 0, got " + std::to_string(iteration));
  }
  create_directories_durably(dir);
  AtomicFile file(latest_iteration_path(dir));
  const std::string text = std::to_string(iteration);
  file.write(text.data(), text.size());
  file.commit();
}

int64_t read_latest_iteration(const fs::path& dir) {
  const fs::path path = latest_iteration_path(dir);
  // The tracker holds one decimal number: a few bytes.
  const std::vector<unsigned char> bytes = read_whole_file(path, 4096);
  std::string text(bytes.begin(), bytes.end());
  const auto first = text.find_first_not_of(" \t\r\n");
  const auto last = text.find_last_not_of(" \t\r\n");
  text = first == std::string::npos ? std::string() : text.substr(first, last - first + 1);
  const bool digits = !text.empty() && text.size() <= 18 &&
                      text.find_first_not_of("0123456789") == std::string::npos;
  if (!digits) {
    throw DataError("checkpoint file " + path.string() + ": holds \"" + text.substr(0, 40) +
                    "\", not an iteration number (one non-negative decimal integer)");
  }
  return std::stoll(text);
}

RankCheckpoint read_rank_checkpoint(const fs::path& dir, int64_t iteration, int64_t rank) {
  const fs::path path = rank_checkpoint_path(dir, iteration, rank);
  auto fail = [&path](const std::string& what) {
    return DataError("checkpoint file " + path.string() + ": " + what);
  };
  if (!fs::exists(path)) throw fail("missing (no checkpoint of this rank at this iteration)");
  const std::vector<unsigned char> bytes =
      read_whole_file(path, std::numeric_limits<uint64_t>::max());
  const size_t size = bytes.size();
  if (size < kMagic.size() ||
      std::memcmp(bytes.data(), kMagicStem.data(), kMagicStem.size()) != 0) {
    throw fail("bad magic: not a traintwin checkpoint (it does not start with \"TTCKPT\")");
  }
  if (std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) != 0) {
    throw fail("unknown format version \"" +
               std::string(bytes.begin() + kMagicStem.size(), bytes.begin() + kMagic.size()) +
               "\" in the magic (this build reads \"TTCKPT01\")");
  }
  if (size < kPrefixBytes + kChecksumBytes) {
    throw fail("truncated: " + std::to_string(size) + " bytes, less than the " +
               std::to_string(kPrefixBytes + kChecksumBytes) + " of an empty checkpoint");
  }
  const auto header_bytes = load<uint64_t>(bytes.data() + kMagic.size());
  if (header_bytes > size - kPrefixBytes - kChecksumBytes) {
    throw fail("truncated: the header says it is " + std::to_string(header_bytes) +
               " bytes long, the file has " + std::to_string(size) + " bytes in all");
  }
  auto checksum_ok = [&bytes, size] {
    return fnv1a64(bytes.data(), size - kChecksumBytes) ==
           load<uint64_t>(bytes.data() + size - kChecksumBytes);
  };

  json header;
  try {
    header = json::parse(bytes.begin() + kPrefixBytes,
                         bytes.begin() + static_cast<ptrdiff_t>(kPrefixBytes + header_bytes));
  } catch (const json::exception& e) {  // parse_error, and out_of_range for 1e999
    throw fail(std::string(checksum_ok() ? "" : "checksum mismatch, and ") +
               "the header is not valid JSON: " + e.what());
  }
  RankCheckpoint ckpt;
  uint64_t data_bytes = 0;
  struct Entry {
    uint64_t offset_bytes;
    int64_t count;
  };
  std::vector<Entry> entries;
  try {
    const auto version = integer<int64_t>(header.at("format_version"));
    if (version != kFormatVersion) {
      throw fail("unknown format version " + std::to_string(version) + " (this build reads " +
                 std::to_string(kFormatVersion) + ")");
    }
    data_bytes = integer<uint64_t>(header.at("data_bytes"));
    const uint64_t expected = kPrefixBytes + header_bytes + data_bytes + kChecksumBytes;
    if (data_bytes > size || size < expected) {
      throw fail("truncated: the header describes " + std::to_string(kPrefixBytes + header_bytes) +
                 " + " + std::to_string(data_bytes) + " + " + std::to_string(kChecksumBytes) +
                 " bytes, the file has " + std::to_string(size));
    }
    if (size > expected) {
      throw fail(std::to_string(size - expected) + " bytes more than the header describes (" +
                 std::to_string(expected) + ")");
    }
    if (!checksum_ok()) {
      throw fail(
          "checksum mismatch: the FNV-1a 64 of the content differs from the stored one (the "
          "file is corrupt)");
    }
    ckpt.signature = header.at("signature").get<std::map<std::string, std::string>>();
    ckpt.iteration = integer<int64_t>(header.at("iteration"));
    ckpt.consumed_train_samples = integer<int64_t>(header.at("consumed_train_samples"));
    ckpt.seed = integer<uint64_t>(header.at("seed"));
    std::set<std::string> names;
    uint64_t next = 0;
    for (const json& t : header.at("tensors")) {
      CheckpointTensor tensor;
      tensor.name = t.at("name").get<std::string>();
      tensor.shape = integers(t.at("shape"));
      Entry entry{integer<uint64_t>(t.at("offset_bytes")), integer<int64_t>(t.at("count"))};
      if (!names.insert(tensor.name).second) {
        throw fail("duplicate tensor name \"" + tensor.name + "\"");
      }
      if (element_count(tensor.shape) != entry.count || entry.offset_bytes != next ||
          static_cast<uint64_t>(entry.count) > (data_bytes - next) / sizeof(float)) {
        throw fail("tensor \"" + tensor.name + "\" (shape " + shape_text(tensor.shape) +
                   ", count " + std::to_string(entry.count) + ", offset_bytes " +
                   std::to_string(entry.offset_bytes) +
                   ") does not follow the previous tensor inside the " +
                   std::to_string(data_bytes) + " data bytes");
      }
      next += static_cast<uint64_t>(entry.count) * sizeof(float);
      ckpt.tensors.push_back(std::move(tensor));
      entries.push_back(entry);
    }
    if (next != data_bytes) {
      throw fail("the tensors cover " + std::to_string(next) + " of the " +
                 std::to_string(data_bytes) + " data bytes");
    }
  } catch (const json::exception& e) {
    throw fail(std::string("malformed header: ") + e.what());
  }
  if (ckpt.iteration != iteration) {
    throw fail("holds iteration " + std::to_string(ckpt.iteration) + ", expected " +
               std::to_string(iteration));
  }
  const unsigned char* data = bytes.data() + kPrefixBytes + header_bytes;
  for (size_t k = 0; k < entries.size(); ++k) {
    auto& values = ckpt.tensors[k].data;
    values.resize(static_cast<size_t>(entries[k].count));
    if (values.empty()) continue;  // data() may be null: no memcpy(null, ..., 0)
    std::memcpy(values.data(), data + entries[k].offset_bytes, values.size() * sizeof(float));
  }
  return ckpt;
}

void check_signature(const RankCheckpoint& ckpt, const std::map<std::string, std::string>& run,
                     const std::string& origin) {
  std::set<std::string> keys;
  for (const auto& [key, value] : ckpt.signature) keys.insert(key);
  for (const auto& [key, value] : run) keys.insert(key);
  std::string differences;
  int count = 0;
  for (const std::string& key : keys) {
    const auto c = ckpt.signature.find(key);
    const auto r = run.find(key);
    const bool in_c = c != ckpt.signature.end();
    const bool in_r = r != run.end();
    if (in_c && in_r && c->second == r->second) continue;
    differences += "\n  " + key + ": checkpoint " + (in_c ? c->second : "(absent)") +
                   ", this run " + (in_r ? r->second : "(absent)");
    ++count;
  }
  if (count > 0) {
    throw DataError(origin + ": the checkpoint does not belong to this run; " +
                    std::to_string(count) + " signature key" + (count == 1 ? "" : "s") +
                    " differ:" + differences);
  }
}

}  // namespace traintwin
