// libFuzzer target: the state-file reader (RecurrentState::load) on arbitrary bytes must return a
// state or throw linattn::Error. Most inputs stop at a checksum; state_crc_fuzzer goes deeper.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "io/state_file.hpp"
#include "linattn/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const linattn::RecurrentState s = linattn::io::parse_state(bytes, "fuzz.state");
    if ((s.S().size() + s.z().size()) * 4 > size) __builtin_trap();  // more floats than the file holds
  } catch (const linattn::Error&) {
  }
  return 0;
}
