// linattn: the command. Subcommands live in tools/commands/, one file each, and register themselves.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <new>
#include <string>
#include <vector>

#include "common/command.hpp"
#include "common/flags.hpp"
#include "linattn/error.hpp"
#include "linattn/version.hpp"

namespace {

// One line, whatever the error: multi-line messages would break scripts that grep stderr.
void print_error(const std::string& message) {
  std::string line = message;
  std::replace(line.begin(), line.end(), '\n', ' ');
  std::fprintf(stderr, "linattn: error: %s\n", line.c_str());
}

// Edit distance, for "did you mean": the subcommand closest to a mistyped one.
size_t distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// "unknown subcommand 'x'; did you mean 'y'?" for a first argument that is no subcommand and no flag.
std::string unknown_subcommand(int argc, char** argv, const std::vector<linattn::cli::Command>& commands) {
  if (argc < 2 || argv[1][0] == '-') return "";
  const std::string word = argv[1];
  const linattn::cli::Command* nearest = nullptr;
  size_t best = SIZE_MAX;
  for (const auto& command : commands) {
    if (command.name == word) return "";
    if (const size_t d = distance(word, command.name); d < best) best = d, nearest = &command;
  }
  std::string message = "unknown subcommand '" + word + "'";
  if (nearest && best <= std::max<size_t>(2, nearest->name.size() / 2))
    message += "; did you mean '" + nearest->name + "'?";
  std::string names;
  for (const auto& command : commands) names += (names.empty() ? "" : ", ") + command.name;
  return message + " (subcommands: " + names + "; see linattn --help)";
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
  linattn::cli::flags::examples(
      app, {"linattn compare --max-seq 4096 --out out/compare",
            "linattn bench --op causal --batch 1 --heads 8 --seq 4096 --dim 64",
            "linattn train --task copy --attention linear --steps 3000 --out copy.model", "linattn COMMAND --help"});
  if (const std::string why = unknown_subcommand(argc, argv, commands); !why.empty()) {
    print_error(why);
    return kExitUsage;
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
  } catch (const std::bad_alloc&) {
    print_error("out of memory (std::bad_alloc): the inputs or flags ask for more memory than this machine can give");
    return kExitFailed;
  } catch (const std::exception& e) {
    print_error(e.what());
    return kExitFailed;
  }
}
