// libFuzzer target: npy::parse (what npy::load and every `linattn run` input go through) on arbitrary
// bytes must return a well-formed array or throw linattn::Error; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "linattn/error.hpp"
#include "linattn/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const linattn::npy::Array a = linattn::npy::parse(bytes, "fuzz.npy");
    int64_t elements = 1;
    for (int64_t n : a.shape) elements *= n;
    // The shape describes the data, and the data came from the file (no allocation beyond it).
    if (elements != int64_t(a.data.size()) || a.data.size() * 4 > size) __builtin_trap();
  } catch (const linattn::Error&) {
  }
  return 0;
}
