#include "core/input_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.hpp"

namespace traintwin {

namespace {

/// Closes a file descriptor at scope exit.
struct Fd {
  int fd = -1;
  explicit Fd(int d) : fd(d) {}
  Fd(Fd&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd& operator=(Fd&&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

/// Opens `file` for reading (without waiting on a FIFO) and refuses anything but a regular file;
/// its size in `st`.
Fd open_regular_file(const std::filesystem::path& file, std::string_view what, struct stat& st) {
  const std::string name = file.string();
  // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it.
  Fd f{::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (f.fd < 0) {
    throw ConfigError(fmt::format("{}: cannot open {}: {}", name, what, std::strerror(errno)));
  }
  if (::fstat(f.fd, &st) != 0) {
    throw ConfigError(fmt::format("{}: cannot stat {}: {}", name, what, std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) throw ConfigError(fmt::format("{}: is a folder, not a {}", name, what));
  if (!S_ISREG(st.st_mode)) {
    throw ConfigError(fmt::format("{}: is not a regular file (a device, FIFO or socket); a {} "
                                  "must be a regular file",
                                  name, what));
  }
  return f;
}

}  // namespace

uint64_t check_input_file(const std::filesystem::path& file, std::string_view what) {
  struct stat st {};
  const Fd f = open_regular_file(file, what, st);
  return static_cast<uint64_t>(st.st_size);
}

std::string read_input_file(const std::filesystem::path& file, std::string_view what,
                            uint64_t max_bytes) {
  const std::string name = file.string();
  struct stat st {};
  const Fd f = open_regular_file(file, what, st);
  const int fd = f.fd;
  const auto too_large = [&](uint64_t bytes) {
    return ConfigError(fmt::format("{}: {} bytes, more than the {} bytes a {} may have", name,
                                   bytes, max_bytes, what));
  };
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    throw too_large(static_cast<uint64_t>(st.st_size));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string text;
  text.reserve(static_cast<size_t>(st.st_size));
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw ConfigError(fmt::format("{}: cannot read {}: {}", name, what, std::strerror(errno)));
    }
    if (n == 0) break;
    text.append(chunk, static_cast<size_t>(n));
    if (text.size() > max_bytes) throw too_large(text.size());  // it grew while being read
  }
  return text;
}

}  // namespace traintwin
