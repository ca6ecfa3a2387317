// libFuzzer target: the dataset-file reader (docs/datasets.md) on bytes whose CRC-32 is rewritten to
// match, so the field, size, token and label checks are reached. A file that loads must serialise back
// to the same bytes (the format has one spelling), and what it holds must fit in the bytes read (no
// allocation the file's length does not pay for).
#include <cstddef>
#include <cstdint>
#include <string>

#include "checksums.hpp"
#include "linattn/error.hpp"
#include "linattn/model/dataset.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes = linattn::fuzz::with_model_checksum(std::string(reinterpret_cast<const char*>(data), size));
  try {
    linattn::model::Dataset d = linattn::model::parse_dataset(bytes, "fuzz.ds");
    size_t held = 0;
    for (const auto& split : d.splits) held += split.tokens.size() + 4 * split.labels.size();
    if (held > bytes.size()) __builtin_trap();
    if (linattn::model::serialize_dataset(d) != bytes) __builtin_trap();
  } catch (const linattn::Error&) {
  }
  return 0;
}
