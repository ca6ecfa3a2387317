// libFuzzer target: what `train --resume` reads from a checkpoint before it builds anything: the
// model-file reader with the kind forced to checkpoint and the CRC-32 rewritten to match, then the
// stored training options (train_options_from_text, which runs check_train_options).
#include <cstddef>
#include <cstdint>
#include <string>

#include "checksums.hpp"
#include "linattn/error.hpp"
#include "linattn/model/model_file.hpp"
#include "linattn/model/train.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace linattn;
  const std::string bytes =
      fuzz::with_model_checksum(fuzz::as_checkpoint(std::string(reinterpret_cast<const char*>(data), size)));
  try {
    const model::ModelFile f = model::parse_model_file(bytes, "fuzz.ckpt");
    if (!f.checkpoint || f.adam_m.size() != f.params.size() || f.adam_v.size() != f.params.size()) __builtin_trap();
    const model::TrainOptions o = model::train_options_from_text(f.train_options);
    // The options that were read write back to text that reads the same.
    if (model::train_options_to_text(model::train_options_from_text(model::train_options_to_text(o))) !=
        model::train_options_to_text(o))
      __builtin_trap();
  } catch (const Error&) {
  }
  return 0;
}
