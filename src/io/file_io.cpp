// Atomic writes, whole-file reads and CRC-32 for every format linattn writes.
#include "linattn/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "io/input_file.hpp"
#include "core/validate.hpp"

namespace linattn {
namespace {

[[noreturn]] void fail_errno(const char* op, const std::filesystem::path& path, const char* doing, int err) {
  detail::fail(op, path.string() + ": cannot " + doing + ": " + std::strerror(err));
}

// A name beside `path` that no other writer (thread or process) picks: pid, a counter and the clock.
std::filesystem::path temp_path_for(const std::filesystem::path& path) {
  static std::atomic<uint64_t> counter{0};
  const auto ticks = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  std::string name(".");  // appended piecewise: GCC 12 misreports "." + string under -Wrestrict
  name += path.filename().string().substr(0, 200);  // leaves room under NAME_MAX (255) for the suffix
  name += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1)) + "." +
          std::to_string(ticks % 1000000007u);
  return path.parent_path() / name;
}

// Writes all of bytes to fd, retrying short writes and interrupts; returns 0 or an errno.
int write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    bytes.remove_prefix(size_t(n));
  }
  return 0;
}

}  // namespace

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes) {
  const char* op = "write_file_atomically";
  if (path.empty() || !path.has_filename()) detail::fail(op, "path '" + path.string() + "' names no file");
  std::filesystem::path temp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    temp = temp_path_for(path);
    // 0666 less the umask, as for any newly created file.
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && (errno != EEXIST || attempt == 100)) fail_errno(op, path, "create a temporary file beside it", errno);
  }
  // From here on, every failure removes the temporary file before it throws.
  auto abandon = [&](const char* doing, int err) {
    if (fd >= 0) ::close(fd);
    ::unlink(temp.c_str());
    fail_errno(op, path, doing, err);
  };
  // A replaced file keeps its permissions (a private state file stays private).
  struct stat old_file {};
  if (::stat(path.c_str(), &old_file) == 0 && S_ISREG(old_file.st_mode) && ::fchmod(fd, old_file.st_mode & 07777) != 0)
    abandon("set the permissions of the temporary file", errno);
  if (int err = write_all(fd, bytes)) abandon("write", err);
  if (::fsync(fd) != 0) abandon("flush to disk", errno);
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) abandon("close", errno);
  if (::rename(temp.c_str(), path.c_str()) != 0) abandon("rename the temporary file over it", errno);
  // The rename is durable only once the directory entry is flushed.
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) fail_errno(op, path, "open its directory to flush it", errno);
  const int synced = ::fsync(dir_fd);
  const int err = errno;
  ::close(dir_fd);
  // Some file systems cannot fsync a directory; the rename itself has still happened.
  if (synced != 0 && err != EINVAL && err != ENOTSUP) fail_errno(op, path, "flush its directory to disk", err);
}

namespace io {

InputFile::InputFile(const std::filesystem::path& path, const char* op) : path_(path), op_(op) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail_errno(op, path, "open", errno);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    fail_errno(op, path, "stat", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    detail::fail(op, path.string() + ": is not a regular file, expected a file to read");
  }
  size_ = int64_t(st.st_size);
}

InputFile::~InputFile() { ::close(fd_); }

size_t InputFile::read_some(char* dst, size_t n) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd_, dst + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail_errno(op_, path_, "read", errno);
    if (r == 0) break;
    got += size_t(r);
  }
  return got;
}

}  // namespace io

std::string read_file(const std::filesystem::path& path) {
  io::InputFile file(path, "read_file");
  // The size only sizes the first buffer (+ 1 to see the end of file without growing it): the loop
  // reads until end of file whatever the size said.
  std::string bytes(size_t(file.size()) + 1, '\0');
  size_t got = 0;
  for (;;) {
    if (got == bytes.size()) bytes.resize(2 * bytes.size());
    const size_t n = file.read_some(bytes.data() + got, bytes.size() - got);
    got += n;
    if (got < bytes.size()) break;
  }
  bytes.resize(got);
  return bytes;
}

uint32_t crc32(std::string_view bytes, uint32_t crc) {
  return uint32_t(::crc32_z(crc, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

}  // namespace linattn
