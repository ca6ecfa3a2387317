#pragma once
// What the model trains on: a character-level tokenizer, the copy task, multi-query associative
// recall, and a text corpus.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace linattn::model {

// Character level: token i is the byte vocab()[i].
class Tokenizer {
 public:
  Tokenizer() = default;
  // vocab: distinct bytes; throws linattn::Error on an empty or repeated one.
  explicit Tokenizer(std::string vocab);
  // The sorted distinct bytes of text.
  static Tokenizer from_text(std::string_view text);

  int64_t size() const { return int64_t(vocab_.size()); }
  const std::string& vocab() const { return vocab_; }
  // Throws linattn::Error naming the first byte that is not in the vocabulary.
  std::vector<int32_t> encode(std::string_view text) const;
  std::string decode(std::span<const int32_t> tokens) const;

 private:
  std::string vocab_;
  int32_t index_[256] = {};  // byte → token + 1 (0: not in vocab)
};

// tokens, targets, weights: [B, T]. targets[i] is the token after tokens[i]; weights say which
// positions the loss counts.
struct Batch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> tokens, targets;
  std::vector<float> weights;
};

class Task {
 public:
  virtual ~Task() = default;
  virtual const Tokenizer& tokenizer() const = 0;
  // Batch `index` of a stream fixed by seed: the same (seed, index) gives the same batch, which is
  // what makes a resumed run repeat an uninterrupted one.
  virtual Batch train_batch(int64_t B, int64_t T, uint64_t seed, int64_t index) const = 0;
  // Held-out batches, the same every call.
  virtual std::vector<Batch> eval_batches(int64_t B, int64_t T, int64_t max_batches) const = 0;
};

// The copy task of "Transformers are RNNs" (§4.1): L random symbols from 10, a separator, the same
// L symbols again, then padding; L uniform in [T/4, T/2), as in the paper's code (32..63 for T = 128,
// so sequences of up to 128 symbols). Only the copied half counts in the loss.
// Tokens print as "abcdefghij" (symbols), '|' (separator), '.' (padding).
class CopyTask final : public Task {
 public:
  static constexpr int32_t kSymbols = 10, kSeparator = 10, kPad = 11;
  CopyTask();
  const Tokenizer& tokenizer() const override { return tokenizer_; }
  Batch train_batch(int64_t B, int64_t T, uint64_t seed, int64_t index) const override;
  std::vector<Batch> eval_batches(int64_t B, int64_t T, int64_t max_batches) const override;

 private:
  Tokenizer tokenizer_;
};

// MQAR, multi-query associative recall (Zoology: Arora et al., 2023, §3): `pairs` key–value pairs
// k₁ v₁ … k_N v_N (distinct keys from the first half of the symbols, distinct values from the second),
// then every key once more in a random order, each followed by its value, then padding:
//   k₁ v₁ k₂ v₂ … k_N v_N  k_π₁ v_π₁ … k_πN v_πN  . . .
// Only the answers count in the loss and the accuracy: the targets at the query keys, whose next token
// is the value the pair bound to them (N of them per sequence). Needs T ≥ 4N. Symbols print as the
// bytes '!' … '~' then 0xa1 …; padding as ' '.
struct MqarShape {
  int64_t pairs = 8;    // N, key–value pairs per sequence
  int64_t vocab = 128;  // symbols: vocab / 2 keys, vocab / 2 values (even, ≤ kMaxVocab, vocab / 2 ≥ pairs)
};
class MqarTask final : public Task {
 public:
  static constexpr int64_t kMaxVocab = 188;  // the printable bytes the tokenizer spells symbols with
  // Throws linattn::Error naming a bad field of shape.
  explicit MqarTask(MqarShape shape);
  const Tokenizer& tokenizer() const override { return tokenizer_; }
  // Throws linattn::Error when T < 4 · pairs.
  Batch train_batch(int64_t B, int64_t T, uint64_t seed, int64_t index) const override;
  std::vector<Batch> eval_batches(int64_t B, int64_t T, int64_t max_batches) const override;
  const MqarShape& shape() const { return shape_; }
  int32_t pad() const { return int32_t(shape_.vocab); }

 private:
  MqarShape shape_;
  Tokenizer tokenizer_;
};
// Throws linattn::Error naming the first bad field (pairs ≥ 1; vocab even, in [2, kMaxVocab], with
// vocab / 2 ≥ pairs; seq_len ≥ 4 · pairs when seq_len > 0).
void check_mqar_shape(const MqarShape& shape, int64_t seq_len = 0);

// A text file, characters as tokens: the first 90% trains (random windows), the last 10% is held
// out (consecutive windows from its start). Every position counts.
class TextTask final : public Task {
 public:
  // Throws linattn::Error for a missing file or one shorter than 1000 bytes.
  explicit TextTask(const std::filesystem::path& path);
  TextTask(std::string text, std::string name);
  const Tokenizer& tokenizer() const override { return tokenizer_; }
  Batch train_batch(int64_t B, int64_t T, uint64_t seed, int64_t index) const override;
  std::vector<Batch> eval_batches(int64_t B, int64_t T, int64_t max_batches) const override;

 private:
  Tokenizer tokenizer_;
  std::vector<int32_t> train_, held_out_;
};

// "copy", "text" (which reads data_path) or "mqar" (of shape mqar); throws linattn::Error naming the
// choices otherwise.
std::unique_ptr<Task> make_task(std::string_view name, const std::filesystem::path& data_path,
                                const MqarShape& mqar = {});

}  // namespace linattn::model
