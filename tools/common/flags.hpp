#pragma once
// Flag checks with messages a person can act on: CLI11's own say "Check flash value in
// {causal->2,...} FAILED" or print a 309-digit range, accept NaN for "a positive number" and take
// an enum's number ("--op 3") for its name. Each of these names the value seen and the one expected.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

namespace linattn::cli::flags {

// A finite number > 0, or ≥ 0.
CLI::Validator positive();
CLI::Validator non_negative();
// An integer in [lo, hi].
CLI::Validator bounded(int64_t lo, int64_t hi);
// A finite number in [lo, hi].
CLI::Validator finite(double lo, double hi);
// --threads: 0 (the default) .. limits::kMaxThreads.
CLI::Validator threads();

// "is 'x', expected one of a, b, c" unless lowercase(input) is one of names.
std::string not_one_of(const std::string& input, const std::vector<std::string>& names);

// One of the names (any case), never a value's number: replaces the input by the name's value for
// CLI11's conversion. Use with ->transform.
template <class T>
CLI::Validator choice(const std::map<std::string, T>& names) {
  std::vector<std::string> keys;
  for (const auto& [name, value] : names) keys.push_back(name);
  return CLI::Validator(
      [names, keys](std::string& input) -> std::string {
        std::string message = not_one_of(input, keys);
        if (!message.empty()) return message;
        std::string key = input;
        for (char& c : key) c = char(std::tolower(static_cast<unsigned char>(c)));
        const T& value = names.at(key);
        if constexpr (std::is_enum_v<T>)
          input = std::to_string(static_cast<std::underlying_type_t<T>>(value));
        else
          input = value;
        return "";
      },
      "", "choice");
}
// A string option that must be one of names (exact case as listed, any case accepted).
CLI::Validator one_of(const std::vector<std::string>& names);

// Appends "Examples:" and the lines (each a full command line) to the app's footer, so that every
// --help ends with runnable examples.
void examples(CLI::App& app, const std::vector<std::string>& lines);

}  // namespace linattn::cli::flags
