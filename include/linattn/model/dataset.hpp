#pragma once
// A dataset file for token-sequence classification (docs/datasets.md): the train, validation and test
// splits of fixed-length sequences (images as 8-bit pixel tokens, speech as 8-bit mu-law samples), the
// vocabulary size, the class count and names, the task's name, a format version and a CRC-32. Written
// by scripts/applications/dataset_file.py (or save_dataset); read by train --task image|speech.
#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "linattn/model/data.hpp"

namespace linattn::model {

inline constexpr char kDatasetMagic[9] = "LATNDSET";
inline constexpr uint32_t kDatasetFormatVersion = 1;
// Bounds a reader holds a file to (a file is untrusted; docs/datasets.md).
inline constexpr int64_t kMaxDatasetVocab = 65536, kMaxDatasetClasses = 65536;
inline constexpr int64_t kMaxDatasetTaskName = 64, kMaxDatasetClassName = 256;

struct DatasetSplit {
  int64_t count = 0;             // sequences, ≥ 1
  std::vector<uint16_t> tokens;  // [count, seq_len], each < vocab
  std::vector<int32_t> labels;   // [count], each < classes
};

struct Dataset {
  std::string task;                      // e.g. "image", "speech": 1–64 bytes of [a-z0-9_-]
  int64_t seq_len = 0, vocab = 0;        // L ≥ 1; vocab in [2, 65536] (≤ 256 stores one byte a token)
  std::vector<std::string> class_names;  // one per class, at least two; 1–256 printable bytes each
  std::array<DatasetSplit, 3> splits;    // train, validation, test (Split's order)
  uint32_t crc = 0;                      // the file's CRC-32 (set by parse and serialize): its identity
  int64_t classes() const { return int64_t(class_names.size()); }
};

// Throws linattn::Error naming the file (name) and the first bad field: magic, version, CRC-32, any size
// that does not fit in the bytes left (checked before anything is allocated), a token ≥ vocab, a label ≥
// classes, bytes after the last split.
Dataset parse_dataset(std::string_view bytes, std::string_view name);
Dataset load_dataset(const std::filesystem::path& path);
// The file's bytes; sets dataset.crc. Throws linattn::Error naming a bad field (the reader's rules).
std::string serialize_dataset(Dataset& dataset);
// Written atomically (a temporary beside path, renamed over it).
void save_dataset(const std::filesystem::path& path, Dataset& dataset);

// The classification task of a dataset file: its splits as they are, vocabulary the tokens 0 … vocab − 1
// (at most 256: the model's tokenizer holds one byte per token), every sequence seq_len tokens long.
class DatasetTask final : public SplitTask {
 public:
  // Throws linattn::Error naming the file when it does not load or its vocabulary is over 256.
  explicit DatasetTask(const std::filesystem::path& path);
  DatasetTask(Dataset dataset, std::string name);
  const Tokenizer& tokenizer() const override { return tokenizer_; }
  int64_t classes() const override { return dataset_.classes(); }
  int64_t split_size(Split split) const override { return dataset_.splits[size_t(split)].count; }
  // Throws linattn::Error when max_len is not the file's seq_len or i is outside the split.
  LabelledSequence example(Split split, int64_t i, int64_t max_len) const override;
  int32_t pad() const override { return 0; }  // never used: every sequence fills seq_len
  const Dataset& dataset() const { return dataset_; }
  const std::string& name() const { return name_; }

 private:
  Dataset dataset_;
  std::string name_;
  Tokenizer tokenizer_;
};

}  // namespace linattn::model
