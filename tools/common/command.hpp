#pragma once
// The subcommand registry. Each tools/commands/*.cpp defines one static Registrar; main.cpp builds
// the command line from whatever registered, so adding a command never touches main.cpp.
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace linattn::cli {

// Exit codes, the same for every subcommand (docs/cli.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;   // bad input file, rejected input, I/O failure
inline constexpr int kExitUsage = 2;    // bad flag or flag value
inline constexpr int kExitRefused = 3;  // estimated memory exceeds what the process can allocate

// A bad flag value found after parsing (e.g. two flags that do not fit together): exit 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A configuration refused up front because its estimated memory exceeds what is available: exit 3.
struct Refused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// setup adds the subcommand's options to its CLI::App (already named and described) and returns
// the action main runs when that subcommand was chosen; the action returns the exit code.
struct Command {
  std::string name;
  std::string summary;
  int order = 100;  // position in the top-level --help
  std::function<std::function<int()>(CLI::App&)> setup;
};

// Every registered command, in registration order (main sorts by order, then name).
std::vector<Command>& registry();

struct Registrar {
  explicit Registrar(Command command);
};

}  // namespace linattn::cli
