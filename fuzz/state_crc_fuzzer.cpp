// libFuzzer target: the state-file reader on bytes whose header and file CRC-32 are rewritten to
// match, so the size, name, position and length checks behind the checksums are reached. A state
// that loads must save again to the same bytes (the reader accepts only what the writer writes).
#include <cstddef>
#include <cstdint>
#include <string>

#include "checksums.hpp"
#include "io/state_file.hpp"
#include "linattn/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes = linattn::fuzz::with_state_checksums(std::string(reinterpret_cast<const char*>(data), size));
  try {
    const linattn::RecurrentState s = linattn::io::parse_state(bytes, "fuzz.state");
    if ((s.S().size() + s.z().size()) * 4 > size) __builtin_trap();
    if (linattn::io::serialize_state(s) != bytes) __builtin_trap();
  } catch (const linattn::Error&) {
  }
  return 0;
}
