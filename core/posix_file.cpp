#include "core/posix_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <streambuf>
#include <vector>

#include "core/error.hpp"

namespace traintwin {

std::string errno_text() { return std::strerror(errno); }

void write_all(int fd, const void* data, size_t size, const std::string& path) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error("cannot write " + path + ": " + errno_text());
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void sync_and_close(int fd, const std::string& path) {
  if (::fsync(fd) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    throw Error("cannot sync " + path + ": " + why);
  }
  if (::close(fd) != 0) throw Error("cannot close " + path + ": " + errno_text());
}

void sync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open folder " + dir.string() + " to sync it: " + errno_text());
  if (::fsync(fd) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    throw Error("cannot sync folder " + dir.string() + ": " + why);
  }
  ::close(fd);
}

void prepare_output_directory(const std::filesystem::path& dir, const std::string& option) {
  namespace fs = std::filesystem;
  const std::string where = option + " " + dir.string();
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (fs::exists(st) && !fs::is_directory(st)) {
    throw Error(where + ": exists and is not a folder (give a folder for the output files)");
  }
  if (!fs::exists(st)) {
    // Find the deepest existing ancestor, to say "under a file" rather than a generic error.
    for (fs::path p = dir.parent_path(); !p.empty(); p = p.parent_path()) {
      const fs::file_status ps = fs::status(p, ec);
      if (fs::exists(ps)) {
        if (!fs::is_directory(ps)) {
          throw Error(where + ": cannot create the folder: " + p.string() +
                      " is a file, not a folder");
        }
        break;
      }
      if (p == p.parent_path()) break;
    }
    fs::create_directories(dir, ec);
    if (ec) throw Error(where + ": cannot create the folder: " + ec.message());
  }
  // Writable? Create (exclusively) and remove a probe file, as the writers will.
  std::string probe = (dir / ".traintwin-write-test.XXXXXX").string();
  std::vector<char> name(probe.begin(), probe.end());
  name.push_back('\0');
  const int fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) throw Error(where + ": cannot write into the folder: " + errno_text());
  ::close(fd);
  ::unlink(name.data());
}

void prepare_output_file(const std::filesystem::path& path, const std::string& option) {
  namespace fs = std::filesystem;
  const std::string where = option + " " + path.string();
  if (path.empty()) throw Error(option + ": an empty path (give a file name)");
  std::error_code ec;
  if (fs::is_directory(fs::status(path, ec))) {
    throw Error(where + ": is a folder (give a file name)");
  }
  const fs::path dir = fs::absolute(path, ec).parent_path();
  prepare_output_directory(dir, where + ": its folder");
}

/// The ostream buffer of AtomicFile: 64 KiB, flushed through AtomicFile::write.
class AtomicFile::StreamBuf : public std::streambuf {
 public:
  explicit StreamBuf(AtomicFile& file) : file_(file) { setp(buf_.data(), buf_.data() + buf_.size()); }
  void drain() {
    const auto n = static_cast<size_t>(pptr() - pbase());
    setp(buf_.data(), buf_.data() + buf_.size());
    if (n > 0) file_.write_raw(buf_.data(), n);
  }

 protected:
  int_type overflow(int_type ch) override {
    drain();
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(ch);
      pbump(1);
    }
    return traits_type::not_eof(ch);
  }
  int sync() override {
    drain();
    return 0;
  }

 private:
  AtomicFile& file_;
  std::array<char, 1 << 16> buf_{};
};

AtomicFile::AtomicFile(std::filesystem::path path) : path_(std::move(path)) {
  std::string pattern = path_.string() + ".tmp.XXXXXX";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  fd_ = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd_ < 0) throw Error("cannot create " + path_.string() + ": " + errno_text());
  tmp_.assign(name.data());
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd_, 0644 & ~mask);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::write_raw(const void* data, size_t size) {
  if (fd_ < 0) throw Error("cannot write " + path_.string() + ": the file is already committed");
  try {
    write_all(fd_, data, size, path_.string());
  } catch (const Error&) {
    // The temporary is useless now: free its space at once (a full disk).
    ::close(fd_);
    fd_ = -1;
    ::unlink(tmp_.c_str());
    throw;
  }
}

void AtomicFile::write(const void* data, size_t size) {
  flush_stream();
  write_raw(data, size);
}

std::ostream& AtomicFile::stream() {
  if (!stream_) {
    buf_ = std::make_unique<StreamBuf>(*this);
    stream_ = std::make_unique<std::ostream>(buf_.get());
    stream_->exceptions(std::ios::badbit);
  }
  return *stream_;
}

void AtomicFile::flush_stream() {
  if (buf_) buf_->drain();
}

void AtomicFile::commit() {
  flush_stream();
  if (fd_ < 0) throw Error("cannot write " + path_.string() + ": the file is already committed");
  const int fd = fd_;
  fd_ = -1;
  sync_and_close(fd, path_.string());
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    throw Error("cannot rename " + tmp_ + " to " + path_.string() + ": " + errno_text());
  }
  committed_ = true;
  sync_directory(path_.parent_path().empty() ? std::filesystem::path(".") : path_.parent_path());
}

}  // namespace traintwin
