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

// Every number is read in plain decimal alone: an optional '-', digits without a leading zero,
// and for a real a fraction and an exponent. CLI11 reads integers in base 0 ("010" is 8, "0x10" is
// 16) and strtod skips leading spaces (" 16" passed, "16 " did not); each validator below refuses
// any other spelling, so the value used is the one the user sees.

// A finite number > 0, or ≥ 0.
CLI::Validator positive();
CLI::Validator non_negative();
// An integer in [lo, hi], or ≥ lo (compared exactly, never through a double).
CLI::Validator bounded(int64_t lo, int64_t hi);
CLI::Validator at_least(int64_t lo);
// A seed: an integer in [0, 2^64 - 1] (CLI11 took "-1" and 2^64 as 2^64 - 1).
CLI::Validator seed();
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
// A string option that must be one of names (exact case as listed, any case accepted). Use with
// ->transform, so that the option holds the name as listed ("GLA" → "gla").
CLI::Validator one_of(const std::vector<std::string>& names);

// "0.001", "1e+06", "nan": a number for a message.
std::string number(double x);

// The elements of a comma-separated list flag's values, each checked (and rewritten) by element;
// throws CLI::ValidationError naming the flag for an empty element ("gla,,gla", a trailing comma),
// which CLI11's own ->delimiter drops without a word.
std::vector<std::string> list_elements(const std::string& flag, const std::vector<std::string>& values,
                                       const CLI::Validator& element);

// A comma-separated list option (also repeatable: --seq 16,32 --seq 64) into values, each element
// checked by element (a range, or a choice that maps names to values).
template <class T>
CLI::Option* add_list(CLI::App& app, const std::string& flag, std::vector<T>& values, const std::string& description,
                      CLI::Validator element) {
  return app
      .add_option_function<std::vector<std::string>>(
          flag,
          [flag, &values, element](const std::vector<std::string>& given) {
            std::vector<T> parsed;
            for (const std::string& text : list_elements(flag, given, element)) {
              T value{};
              if (!CLI::detail::lexical_cast(text, value)) throw CLI::ConversionError(flag, text);
              parsed.push_back(value);
            }
            values = std::move(parsed);
          },
          description)
      ->type_name(CLI::detail::type_name<T>());  // "INT ...", not the TEXT it reads
}

// Appends "Examples:" and the lines (each a full command line) to the app's footer, so that every
// --help ends with runnable examples.
void examples(CLI::App& app, const std::vector<std::string>& lines);

}  // namespace linattn::cli::flags
