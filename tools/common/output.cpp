#include "common/output.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include "linattn/file_io.hpp"

extern char** environ;

namespace linattn::cli {

void make_folder(const std::filesystem::path& folder) {
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  if (error || !std::filesystem::is_directory(folder))
    throw std::runtime_error("cannot create output folder '" + folder.string() +
                             "': " + (error ? error.message() : std::string("not a folder")));
}

std::string csv_field(const std::string& value) {
  if (value.find_first_of(",\"\n\r") == std::string::npos) return value;
  std::string quoted = "\"";
  for (char c : value) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

std::string run_gnuplot(const std::filesystem::path& folder, const std::string& script, const std::string& temp_png,
                        const std::string& png) {
  // gnuplot's own messages go to /dev/null: a failure is reported in one line below instead.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  const std::string folder_name = folder.string();
  posix_spawn_file_actions_addchdir_np(&actions, folder_name.c_str());
  const std::string script_path = script;
  char arg0[] = "gnuplot", arg1[] = "-e";
  const std::string set_png = "png='" + temp_png + "'";
  char* argv[] = {arg0, arg1, const_cast<char*>(set_png.c_str()), const_cast<char*>(script_path.c_str()), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return std::string("cannot run gnuplot: ") + std::strerror(spawned);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::error_code error;
  const std::filesystem::path temp = folder / temp_png;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !std::filesystem::exists(temp)) {
    std::filesystem::remove(temp, error);
    return "gnuplot failed on " + (folder / script).string();
  }
  std::filesystem::rename(temp, folder / png, error);
  if (error) {
    std::filesystem::remove(temp, error);
    return "cannot rename the plot to " + (folder / png).string() + ": " + error.message();
  }
  return "";
}

std::string plot_output(const std::string& stem) {
  return "if (!exists('png')) png = '" + stem + ".png'\nset output png\n";
}

void write_plot(const std::filesystem::path& folder, const std::string& stem, const std::string& script) {
  write_file_atomically(folder / (stem + ".gp"), script);
  // gnuplot runs in the folder so that the script's relative names work when rerun by hand.
  std::fflush(stdout);
  const std::string why = run_gnuplot(folder, stem + ".gp", stem + ".png.tmp", stem + ".png");
  if (why.empty())
    std::printf("wrote %s\n", (folder / (stem + ".png")).c_str());
  else
    std::fprintf(stderr, "linattn: warning: no plot: %s\n", why.c_str());
}

}  // namespace linattn::cli
