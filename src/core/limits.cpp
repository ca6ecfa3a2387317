// check_bounded: the one "field within its bound" check of every file reader and flag.
#include "linattn/limits.hpp"

#include <cmath>
#include <cstdio>
#include <string>

#include "linattn/error.hpp"

namespace linattn {
namespace {
std::string number(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", x);
  return text;
}
[[noreturn]] void out_of_bounds(std::string_view where, std::string_view field, const std::string& value,
                                const std::string& lo, const std::string& hi, std::string_view why) {
  std::string message(where);
  message += ": ";
  message += field;
  message += " is " + value + ", expected in [" + lo + ", " + hi + "]";
  if (!why.empty()) message += " (" + std::string(why) + ")";
  throw Error(message);
}
}  // namespace

void check_bounded(std::string_view where, std::string_view field, int64_t value, int64_t lo, int64_t hi,
                   std::string_view why) {
  if (value < lo || value > hi)
    out_of_bounds(where, field, std::to_string(value), std::to_string(lo), std::to_string(hi), why);
}

void check_bounded(std::string_view where, std::string_view field, double value, double lo, double hi,
                   std::string_view why) {
  if (!(value >= lo && value <= hi))  // false for NaN too
    out_of_bounds(where, field, number(value), number(lo), number(hi), why);
}

}  // namespace linattn
