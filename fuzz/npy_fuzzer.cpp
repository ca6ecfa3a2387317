// libFuzzer target: npy::parse on arbitrary bytes must parse or throw linattn::Error, nothing else.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "linattn/error.hpp"
#include "linattn/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const linattn::npy::Array a = linattn::npy::parse(bytes, "fuzz.npy");
    if (a.data.size() * 4 > size) __builtin_trap();  // more data than the file holds
  } catch (const linattn::Error&) {
  }
  return 0;
}
