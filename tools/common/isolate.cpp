#include "common/isolate.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "common/command.hpp"
#include "linattn/error.hpp"

namespace linattn::cli {

namespace {

void write_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += size_t(n);
  }
}

}  // namespace

std::string run_isolated(const std::function<std::string()>& body) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  std::fflush(nullptr);  // or the child's exit would print buffered output twice
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::close(fds[0]);
    // First byte: 'O' result, 'U' UsageError, 'L' linattn::Error, 'E' anything else.
    std::string reply(1, 'O');
    try {
      reply += body();
    } catch (const UsageError& e) {
      reply.assign(1, 'U').append(e.what());
    } catch (const linattn::Error& e) {
      reply.assign(1, 'L').append(e.what());
    } catch (const std::exception& e) {
      reply.assign(1, 'E').append(e.what());
    }
    write_all(fds[1], reply);
    ::close(fds[1]);
    std::fflush(nullptr);
    ::_exit(0);  // skip static destructors and atexit handlers that belong to the parent
  }
  ::close(fds[1]);
  std::string reply;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    reply.append(buffer, size_t(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    throw std::runtime_error(std::string("measurement process killed by signal ") + std::to_string(sig) + " (" +
                             strsignal(sig) + ")" + (sig == SIGKILL ? ", perhaps out of memory" : ""));
  }
  if (reply.empty()) throw std::runtime_error("measurement process exited without a result");
  const std::string message = reply.substr(1);
  switch (reply[0]) {
    case 'O':
      return message;
    case 'U':
      throw UsageError(message);
    case 'L':
      throw linattn::Error(message);
    default:
      throw std::runtime_error(message);
  }
}

}  // namespace linattn::cli
