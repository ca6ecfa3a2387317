// Atomic writes, whole-file reads and CRC-32 for every format linattn writes.
#include "linattn/file_io.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/validate.hpp"
#include "io/input_file.hpp"

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

// Removes the temporary files beside `path` that a killed writer left: ".NAME.tmp.PID.*" whose PID
// no longer runs. A live process's (or one we may not signal) is left alone; so is everything else.
void remove_stale_temps(const std::filesystem::path& path) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::string prefix(".");  // piecewise: GCC 12 misreports "." + string under -Wrestrict
  prefix += path.filename().string().substr(0, 200);
  prefix += ".tmp.";
  std::error_code error;
  for (std::filesystem::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    const size_t dot = rest.find('.');
    if (dot == 0 || dot == std::string::npos || rest.find_first_not_of("0123456789") != dot) continue;
    const long pid = std::strtol(rest.substr(0, dot).c_str(), nullptr, 10);
    if (pid <= 0 || pid == long(::getpid())) continue;
    if (::kill(pid_t(pid), 0) != 0 && errno == ESRCH) ::unlink(it->path().c_str());
  }
}

}  // namespace

namespace {

// Writes bytes to a new temporary file beside path and flushes it to disk; returns its name. A
// failure removes it and throws naming path.
std::filesystem::path write_temp(const char* op, const std::filesystem::path& path, std::string_view bytes) {
  if (path.empty() || !path.has_filename()) detail::fail(op, "path '" + path.string() + "' names no file");
  remove_stale_temps(path);
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
  return temp;
}

// The rename is durable only once the directory entry is flushed.
void flush_directory(const char* op, const std::filesystem::path& path) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) fail_errno(op, path, "open its directory to flush it", errno);
  const int synced = ::fsync(dir_fd);
  const int err = errno;
  ::close(dir_fd);
  // Some file systems cannot fsync a directory; the rename itself has still happened.
  if (synced != 0 && err != EINVAL && err != ENOTSUP) fail_errno(op, path, "flush its directory to disk", err);
}

// Renames temp over path and flushes the directory; a failed rename removes temp.
void publish(const char* op, const std::filesystem::path& temp, const std::filesystem::path& path) {
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    fail_errno(op, path, "rename the temporary file over it", err);
  }
  flush_directory(op, path);
}

}  // namespace

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes) {
  const char* op = "write_file_atomically";
  publish(op, write_temp(op, path, bytes), path);
}

std::filesystem::path FileSet::journal_for(const std::filesystem::path& first) {
  std::string name(".");  // piecewise, as in temp_path_for
  name += first.filename().string().substr(0, 200);
  name += ".set";
  return (first.has_parent_path() ? first.parent_path() : std::filesystem::path(".")) / name;
}

FileSet::~FileSet() {
  for (const auto& [temp, path] : files_) ::unlink(temp.c_str());
}

void FileSet::add(const std::filesystem::path& path, std::string_view bytes) {
  if (files_.empty()) recover(path);  // an earlier set of these files, interrupted mid-commit
  files_.emplace_back(write_temp("FileSet::add", path, bytes), path);
}

void FileSet::commit() {
  const char* op = "FileSet::commit";
  if (files_.empty()) return;
  // Every new file is whole on disk. The journal names each temporary and its final name, so that a
  // kill between two renames is finished by recover(); until then the journal marks the set as
  // being replaced.
  std::string journal;
  for (const auto& [temp, path] : files_) journal += temp.string() + '\t' + path.string() + '\n';
  const std::filesystem::path journal_path = journal_for(files_.front().second);
  write_file_atomically(journal_path, journal);
  const auto files = std::move(files_);
  files_.clear();  // from here the temporaries belong to the journal: recover() may still need them
  for (const auto& [temp, path] : files)
    if (::rename(temp.c_str(), path.c_str()) != 0) fail_errno(op, path, "rename the temporary file over it", errno);
  for (const auto& [temp, path] : files) flush_directory(op, path);
  ::unlink(journal_path.c_str());
}

void FileSet::recover(const std::filesystem::path& first) {
  const std::filesystem::path journal_path = journal_for(first);
  std::error_code error;
  if (!std::filesystem::is_regular_file(journal_path, error)) return;
  const std::string journal = read_file(journal_path);
  // Roll forward: every temporary named there was complete before the journal was written.
  for (size_t at = 0; at < journal.size();) {
    const size_t tab = journal.find('\t', at), eol = journal.find('\n', at);
    if (tab == std::string::npos || eol == std::string::npos || tab > eol) break;
    const std::string temp = journal.substr(at, tab - at), path = journal.substr(tab + 1, eol - tab - 1);
    if (std::filesystem::exists(temp, error)) publish("FileSet::recover", temp, path);
    at = eol + 1;
  }
  ::unlink(journal_path.c_str());
}

namespace io {

InputFile::InputFile(const std::filesystem::path& path, const char* op) : path_(path), op_(op) {
  // O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer, forever. It is cleared
  // once the file is known to be regular (where it changes nothing anyway).
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
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
  if (const int flags = ::fcntl(fd_, F_GETFL); flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
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
