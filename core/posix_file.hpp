// POSIX file helpers of every writer (indexed datasets, checkpoints, simulate/sweep outputs, the
// report): complete writes, durable closes and folder syncs, and AtomicFile, the one way the
// project writes a file whole or not at all. Each throws Error naming the path and the system's
// reason ("No space left on device").
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>

namespace traintwin {

/// strerror(errno).
std::string errno_text();

/// Writes all `size` bytes to `fd`, retrying on EINTR and short writes; throws Error
/// "cannot write <path>: <reason>".
void write_all(int fd, const void* data, size_t size, const std::string& path);

/// fsync + close of `fd` (closed in every case); throws Error naming `path`.
void sync_and_close(int fd, const std::string& path);

/// fsync of a folder, so that a rename or a new entry in it is durable; throws Error naming it.
void sync_directory(const std::filesystem::path& dir);

/// Checks that `dir` can hold output files before any work is done: creates it (and its
/// parents) when missing, and throws Error naming `option` (e.g. "--out") and `dir` when it is a
/// file, lies under a file, or cannot be created or written to (read-only, /proc, permissions).
void prepare_output_directory(const std::filesystem::path& dir, const std::string& option);

/// Checks that the file `path` can be written (by AtomicFile) before any work is done: its
/// folder is created when missing (prepare_output_directory's checks, naming `option` and
/// `path`), and throws Error naming `option` and `path` when `path` is a folder or its folder
/// cannot hold a new file. An existing file at `path` is left as it is (AtomicFile replaces it).
void prepare_output_file(const std::filesystem::path& path, const std::string& option);

/// A file written whole or not at all. The bytes go to a temporary "<path>.tmp.XXXXXX" in the
/// same folder, created exclusively (mkostemp: O_CREAT | O_EXCL, so a planted file or symlink
/// of that name is never followed, truncated or reused), mode 0644 less the umask; commit()
/// fsyncs it and renames it over `path` (then syncs the folder); destroying it before commit()
/// removes the temporary. Every failure throws Error naming `path` and the system's reason.
class AtomicFile {
 public:
  /// Creates the temporary; throws Error "cannot create <path>: <reason>".
  explicit AtomicFile(std::filesystem::path path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Appends `size` bytes (after what stream() buffered); throws Error on a failed write.
  void write(const void* data, size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }

  /// A buffered std::ostream over write(): a failed write throws the same Error out of the
  /// stream operation (badbit is in the stream's exceptions()).
  std::ostream& stream();

  /// Flushes, fsyncs, closes and renames the temporary over `path`.
  void commit();

  const std::filesystem::path& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }

 private:
  class StreamBuf;
  void write_raw(const void* data, size_t size);
  void flush_stream();
  std::filesystem::path path_;
  std::string tmp_;
  int fd_ = -1;
  bool committed_ = false;
  std::unique_ptr<StreamBuf> buf_;
  std::unique_ptr<std::ostream> stream_;
};

}  // namespace traintwin
