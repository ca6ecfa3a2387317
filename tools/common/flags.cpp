#include "common/flags.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "linattn/limits.hpp"

namespace linattn::cli::flags {
namespace {

std::string number(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", x);
  return text;
}

// The value as a double; false unless the whole input is a finite number.
bool parse(const std::string& input, double& value) {
  char* end = nullptr;
  errno = 0;
  value = std::strtod(input.c_str(), &end);
  return !input.empty() && end == input.c_str() + input.size() && std::isfinite(value);
}

CLI::Validator range_check(double lo, double hi, bool open_below, bool integer, const std::string& expected) {
  return CLI::Validator(
      [=](std::string& input) -> std::string {
        double value = 0;
        if (!parse(input, value)) return "is '" + input + "', expected " + expected;
        const bool below = open_below ? !(value > lo) : value < lo;
        if (below || value > hi || (integer && value != std::floor(value)))
          return "is " + input + ", expected " + expected;
        return "";
      },
      "", "range");
}

}  // namespace

CLI::Validator positive() { return range_check(0, HUGE_VAL, true, false, "a finite number > 0"); }
CLI::Validator non_negative() { return range_check(0, HUGE_VAL, false, false, "a finite number ≥ 0"); }
CLI::Validator bounded(int64_t lo, int64_t hi) {
  return range_check(double(lo), double(hi), false, true,
                     "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}
CLI::Validator finite(double lo, double hi) {
  return range_check(lo, hi, false, false, "a finite number in [" + number(lo) + ", " + number(hi) + "]");
}
CLI::Validator threads() {
  return range_check(0, double(limits::kMaxThreads), false, true,
                     "an integer in [0, " + std::to_string(limits::kMaxThreads) + "] (0: the default)");
}

std::string not_one_of(const std::string& input, const std::vector<std::string>& names) {
  std::string lower = input;
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  std::string list;
  for (const std::string& name : names) {
    std::string key = name;
    for (char& c : key) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (key == lower) return "";
    list += (list.empty() ? "" : ", ") + name;
  }
  return "is '" + input + "', expected one of " + list;
}

CLI::Validator one_of(const std::vector<std::string>& names) {
  return CLI::Validator(
      [names](std::string& input) -> std::string {
        std::string message = not_one_of(input, names);
        if (!message.empty()) return message;
        for (const std::string& name : names)
          if (not_one_of(input, {name}).empty()) input = name;
        return "";
      },
      "", "one_of");
}

void examples(CLI::App& app, const std::vector<std::string>& lines) {
  std::string footer = app.get_footer();
  if (!footer.empty()) footer += "\n\n";
  footer += "Examples:";
  for (const std::string& line : lines) footer += "\n  " + line;
  app.footer(footer);
}

}  // namespace linattn::cli::flags
