// libFuzzer target: the model / checkpoint reader (load_model_file, what `generate` and
// `train --resume` read) on arbitrary bytes must return a file or throw linattn::Error. Most inputs
// stop at the CRC; model_crc_fuzzer and checkpoint_crc_fuzzer go deeper.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "linattn/error.hpp"
#include "linattn/model/model_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const linattn::model::ModelFile f = linattn::model::parse_model_file(bytes, "fuzz.model");
    if ((f.params.size() + f.adam_m.size() + f.adam_v.size()) * 4 > size) __builtin_trap();
  } catch (const linattn::Error&) {
  }
  return 0;
}
