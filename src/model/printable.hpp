#pragma once
// Bytes as readable text for messages: printable ASCII as is, every other byte as \xNN, so that a
// trailing CR, a tab or a NUL in a file's value shows in the error that quotes it.
#include <string>
#include <string_view>

namespace linattn::model::detail {

inline std::string printable(std::string_view bytes) {
  std::string out;
  for (char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      out.push_back(c);
    } else {
      static const char* const hex = "0123456789abcdef";
      out += {'\\', 'x', hex[u >> 4], hex[u & 15]};
    }
  }
  return out;
}

}  // namespace linattn::model::detail
