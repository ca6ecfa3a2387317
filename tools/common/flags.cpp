#include "common/flags.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string_view>

#include "linattn/limits.hpp"

namespace linattn::cli::flags {

std::string number(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", x);
  return text;
}

namespace {

// The one spelling of a number every flag takes: -?(0|[1-9][0-9]*), then for a real an optional
// .[0-9]+ and [eE][+-]?[0-9]+.
bool plain_decimal(std::string_view text, bool integer) {
  size_t i = 0;
  auto digits = [&] {
    const size_t start = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    return i - start;
  };
  if (i < text.size() && text[i] == '-') ++i;
  const size_t lead = i;
  const size_t whole = digits();
  if (whole == 0 || (whole > 1 && text[lead] == '0')) return false;
  if (!integer && i < text.size() && text[i] == '.') {
    ++i;
    if (digits() == 0) return false;
  }
  if (!integer && i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  return i == text.size();
}

constexpr const char* kSpelling = " in plain decimal (no leading zero, '+', space or 0x)";

// The value as a double; false unless the whole input is a finite number in plain decimal.
bool parse(const std::string& input, double& value) {
  if (!plain_decimal(input, false)) return false;
  value = std::strtod(input.c_str(), nullptr);
  return std::isfinite(value);
}

CLI::Validator real_range(double lo, double hi, bool open_below, const std::string& expected) {
  return CLI::Validator(
      [=](std::string& input) -> std::string {
        double value = 0;
        if (!parse(input, value)) return "is '" + input + "', expected " + expected + kSpelling;
        const bool below = open_below ? !(value > lo) : value < lo;
        if (below || value > hi) return "is " + input + ", expected " + expected;
        return "";
      },
      "", "range");
}

// An integer of type T in [lo, hi], parsed exactly (from_chars: no rounding through a double).
template <class T>
CLI::Validator integer_range(T lo, T hi, const std::string& expected) {
  return CLI::Validator(
      [=](std::string& input) -> std::string {
        T value{};
        const char* end = input.data() + input.size();
        if (!plain_decimal(input, true)) return "is '" + input + "', expected " + expected + kSpelling;
        const auto [stop, error] = std::from_chars(input.data(), end, value);
        if (error != std::errc() || stop != end || value < lo || value > hi)
          return "is " + input + ", expected " + expected;
        return "";
      },
      "", "range");
}

}  // namespace

CLI::Validator positive() { return real_range(0, HUGE_VAL, true, "a finite number > 0"); }
CLI::Validator non_negative() { return real_range(0, HUGE_VAL, false, "a finite number ≥ 0"); }
CLI::Validator bounded(int64_t lo, int64_t hi) {
  return integer_range(lo, hi, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}
CLI::Validator at_least(int64_t lo) {
  return integer_range(lo, std::numeric_limits<int64_t>::max(), "an integer ≥ " + std::to_string(lo));
}
CLI::Validator seed() {
  return integer_range<uint64_t>(0, std::numeric_limits<uint64_t>::max(),
                                 "an integer in [0, " + std::to_string(std::numeric_limits<uint64_t>::max()) + "]");
}
CLI::Validator finite(double lo, double hi) {
  return real_range(lo, hi, false, "a finite number in [" + number(lo) + ", " + number(hi) + "]");
}
CLI::Validator threads() {
  return integer_range<int64_t>(0, limits::kMaxThreads,
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

std::vector<std::string> list_elements(const std::string& flag, const std::vector<std::string>& values,
                                       const CLI::Validator& element) {
  std::vector<std::string> elements;
  for (const std::string& value : values) {
    size_t start = 0;
    while (true) {
      const size_t comma = value.find(',', start);
      std::string item = value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (item.empty())
        throw CLI::ValidationError(flag, "'" + value + "' has an empty element, expected comma-separated values (" +
                                             "no ',,' and no leading or trailing comma)");
      if (std::string why = element(item); !why.empty()) throw CLI::ValidationError(flag, why);
      elements.push_back(std::move(item));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return elements;
}

void examples(CLI::App& app, const std::vector<std::string>& lines) {
  std::string footer = app.get_footer();
  if (!footer.empty()) footer += "\n\n";
  footer += "Examples:";
  for (const std::string& line : lines) footer += "\n  " + line;
  app.footer(footer);
}

}  // namespace linattn::cli::flags
