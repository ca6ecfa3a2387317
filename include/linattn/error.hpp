#pragma once
// linattn::Error: what every public entry point throws on bad input.
#include <stdexcept>
#include <string>

namespace linattn {

// Bad input at the public boundary. The message names the argument, the value seen and the value
// expected, e.g. "linattn: k.extent[3] (head dim) is 63, expected 64 (q's head dim)".
class Error : public std::invalid_argument {
 public:
  explicit Error(const std::string& what) : std::invalid_argument(what) {}
};

}  // namespace linattn
