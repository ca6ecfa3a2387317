#include "model/key_values.hpp"

#include <charconv>
#include <cstdio>

#include "linattn/error.hpp"
#include "model/printable.hpp"

namespace linattn::model::detail {
namespace {
[[noreturn]] void bad(const std::string& what, const std::string& message) {
  throw Error("linattn::model: " + what + ": " + message);
}

template <class N>
N parse_number(const std::string& what, const std::string& key, const std::string& value, const char* expected) {
  N result{};
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), result);
  if (ec != std::errc() || end != value.data() + value.size() || value.empty())
    bad(what, printable(key) + " is \"" + printable(value) + "\", expected " + expected);
  return result;
}
}  // namespace

KeyValues::KeyValues(std::string_view text, std::string what) : what_(std::move(what)) {
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    const std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    if (line.empty()) continue;
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos || eq == 0)
      bad(what_, "line \"" + printable(line) + "\" is not key=value, expected key=value");
    const std::string key(line.substr(0, eq));
    if (!values_.emplace(key, std::string(line.substr(eq + 1))).second)
      bad(what_, printable(key) + " appears twice, expected once");
  }
}

const std::string& KeyValues::get_string(const std::string& key) const {
  const auto it = values_.find(key);
  if (it == values_.end()) bad(what_, key + " is missing, expected a line " + key + "=...");
  read_[key] = true;
  return it->second;
}
int64_t KeyValues::get_int(const std::string& key) const {
  return parse_number<int64_t>(what_, key, get_string(key), "an integer");
}
uint64_t KeyValues::get_u64(const std::string& key) const {
  return parse_number<uint64_t>(what_, key, get_string(key), "a non-negative integer");
}
double KeyValues::get_double(const std::string& key) const {
  return parse_number<double>(what_, key, get_string(key), "a number");
}

void KeyValues::set(const std::string& key, const std::string& value) { values_[key] = value; }
void KeyValues::set_double(const std::string& key, double value) {
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);  // shortest exact round trip
  values_[key] = std::string(buffer, end);
}

void KeyValues::check_all_read() const {
  for (const auto& [key, value] : values_)
    if (!read_.count(key))
      bad(what_,
          "key " + printable(key) + " (=" + printable(value) + ") is unknown, expected only the documented keys");
}

std::string KeyValues::text() const {
  std::string out;
  for (const auto& [key, value] : values_) out += key + "=" + value + "\n";
  return out;
}

}  // namespace linattn::model::detail
