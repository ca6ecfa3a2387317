// linattn: the command. Subcommands live in tools/commands/, one file each, and register themselves.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>
#include <string>

#include "common/command.hpp"
#include "linattn/error.hpp"
#include "linattn/version.hpp"

namespace {

// One line, whatever the error: multi-line messages would break scripts that grep stderr.
void print_error(const std::string& message) {
  std::string line = message;
  std::replace(line.begin(), line.end(), '\n', ' ');
  std::fprintf(stderr, "linattn: error: %s\n", line.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  using namespace linattn::cli;
  CLI::App app{"linattn: exact softmax and linear attention over long sequences"};
  app.name("linattn");
  app.require_subcommand(1);
  // `linattn --version` prints the version alone; it needs no subcommand (CLI11 stops at the flag).
  app.set_version_flag("--version", std::string("linattn ") + linattn::kVersion);
  app.set_help_all_flag("--help-all", "Print the help of every subcommand");
  auto commands = registry();
  std::stable_sort(commands.begin(), commands.end(), [](const Command& a, const Command& b) {
    return a.order != b.order ? a.order < b.order : a.name < b.name;
  });
  std::map<CLI::App*, std::function<int()>> actions;
  for (const Command& command : commands) {
    CLI::App* sub = app.add_subcommand(command.name, command.summary);
    actions[sub] = command.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    print_error(std::string(e.what()) + " (see linattn --help)");
    return kExitUsage;
  }
  try {
    for (const auto& [sub, action] : actions)
      if (sub->parsed()) return action();
    return kExitUsage;  // unreachable: require_subcommand(1)
  } catch (const UsageError& e) {
    print_error(e.what());
    return kExitUsage;
  } catch (const Refused& e) {
    print_error(e.what());
    return kExitRefused;
  } catch (const linattn::Error& e) {
    print_error(e.what());
    return kExitFailed;
  } catch (const std::exception& e) {
    print_error(e.what());
    return kExitFailed;
  }
}
