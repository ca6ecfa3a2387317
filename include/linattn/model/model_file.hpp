#pragma once
// Model files and checkpoints (format in docs/model-format.md): magic, version, the config as
// key=value text, the vocabulary, fp32 weights and, for a checkpoint, the training options, step
// and AdamW moments; a CRC-32 over all of it. Written atomically. Untrusted when read: every size,
// the checksum and the config are checked, and any mismatch throws linattn::Error saying what.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "linattn/model/config.hpp"

namespace linattn::model {

inline constexpr char kModelMagic[9] = "LATNMODL";
inline constexpr uint32_t kModelFormatVersion = 1;

struct ModelFile {
  ModelConfig config;
  std::string vocab;          // the tokenizer's bytes, config.vocab_size of them
  std::vector<float> params;  // param_count(config) weights, in param_tensors order
  // Checkpoint only:
  bool checkpoint = false;
  std::string train_options;  // the run's options as key=value text
  int64_t step = 0;           // optimizer steps taken
  std::vector<float> adam_m, adam_v;
};

std::string serialize_model_file(const ModelFile& file);
// name: used in error messages (the path).
ModelFile parse_model_file(std::string_view bytes, std::string_view name = "<bytes>");

void save_model_file(const std::filesystem::path& path, const ModelFile& file);
ModelFile load_model_file(const std::filesystem::path& path);

}  // namespace linattn::model
