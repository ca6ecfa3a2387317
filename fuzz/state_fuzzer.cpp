// libFuzzer target: the state-file reader on arbitrary bytes must parse or throw linattn::Error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "io/state_file.hpp"
#include "linattn/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const linattn::RecurrentState s = linattn::io::parse_state(bytes, "fuzz.state");
    if ((s.S().size() + s.z().size()) * 4 > size) __builtin_trap();
  } catch (const linattn::Error&) {
  }
  return 0;
}
