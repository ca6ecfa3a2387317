#pragma once
// For the file readers' tests: a file's bytes changed on purpose past its checksum, and the message a
// reader refuses bytes with.
#include <string>

#include "io/bytes.hpp"
#include "linattn/error.hpp"
#include "linattn/file_io.hpp"

namespace linattn::testing {

// bytes with the trailing CRC-32 recomputed, so that a deliberate change gets past the checksum.
inline std::string with_crc(std::string bytes) {
  bytes.resize(bytes.size() - 4);
  io::put_u32(bytes, crc32(bytes));
  return bytes;
}

// The linattn::Error message that parse(bytes) throws, or "" when it accepts them.
template <class Parse>
std::string error_of(Parse&& parse, const std::string& bytes) {
  try {
    parse(bytes);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace linattn::testing
