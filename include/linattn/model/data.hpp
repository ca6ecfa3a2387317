#pragma once
// What the model trains on: a character-level tokenizer, the copy task, multi-query associative
// recall, a text corpus, and ListOps (a classification task).
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
  // Token t is the byte t, for t < count (≤ 256): the vocabulary of pixel and sample values.
  static Tokenizer byte_range(int64_t count);

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
// positions the loss counts. A classification task (Task::classes() > 0) leaves targets empty and
// gives labels: [B], each sequence's class; its weights are then 1 on the real tokens and 0 on the
// padding, the tokens the classifier's mean pool averages.
struct Batch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> tokens, targets;
  std::vector<float> weights;
  std::vector<int32_t> labels;
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
  // A classification task's classes (its model is the encoder classifier); 0 for the next-token tasks.
  virtual int64_t classes() const { return 0; }
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

// ListOps (Nangia & Bowman, 2018) as the Long Range Arena generates it (Tay et al., 2020): nested
// prefix expressions of MAX, MIN, MED (the median, rounded down) and SM (the sum modulo 10) over the
// digits 0–9, e.g. "[MAX 2 9 [MIN 4 7 ] 0 ]" = 9; the label (10 classes) is the expression's value.
// LRA's grammar: a node is an operator with probability 1/4 below depth 10 (else a digit) with 2–10
// arguments, each a node one level deeper; trees are drawn until their length lies in [max_len / 4,
// max_len] tokens (500–2,000 at LRA's --seq-len 2000). Tokens, one byte each: the digits '0'–'9'
// (token = digit), 'X' "[MAX", 'N' "[MIN", 'D' "[MED", 'S' "[SM", ']' and the padding '.'.
// A split is LRA's size (96,000 / 2,000 / 2,000 expressions) and example i of a split is a function of
// (seed, split, i) alone: a seed fixes the three splits, nothing is stored on disk. The splits are
// independent draws, so at a small max_len (a test's) an expression can occur in two of them.
enum class ListOpsSplit { train, validation, test };
using Split = ListOpsSplit;  // every classification task's three splits (ListOps named them first)
// One labelled sequence of a classification task.
struct LabelledSequence {
  std::vector<int32_t> tokens;  // no padding
  int32_t label = 0;
};
using ListOpsExample = LabelledSequence;  // between max_len / 4 and max_len tokens, the label the value 0–9

// A classification task whose data are three fixed splits of labelled sequences (ListOps, Pathfinder,
// a dataset file): training batches draw uniformly from the train split by (seed, index); held-out
// batches are a split's first examples in order, padded to T with pad().
class SplitTask : public Task {
 public:
  virtual int64_t split_size(Split split) const = 0;
  // Example i of a split at sequence length max_len; throws linattn::Error when i is outside the split.
  virtual LabelledSequence example(Split split, int64_t i, int64_t max_len) const = 0;
  // The token that fills a sequence shorter than T (its weight is 0: the mean pool leaves it out).
  virtual int32_t pad() const = 0;
  // B training examples drawn uniformly from the train split by (seed, index), padded to T.
  Batch train_batch(int64_t B, int64_t T, uint64_t seed, int64_t index) const override;
  // The validation split's first max_batches · B examples (the last batch may be smaller).
  std::vector<Batch> eval_batches(int64_t B, int64_t T, int64_t max_batches) const override;
  // The first `count` examples of a split (all of it when count ≤ 0), in batches of B.
  std::vector<Batch> split_batches(Split split, int64_t B, int64_t T, int64_t count) const;

 protected:
  // The random stream of a generated split's example i, apart from every other (seed, split, i).
  static uint64_t example_seed(uint64_t seed, Split split, int64_t i);
  // Throws linattn::Error naming the task when i is outside the split.
  void check_index(Split split, int64_t i, std::string_view task) const;
};

class ListOpsTask final : public SplitTask {
 public:
  static constexpr int64_t kClasses = 10;
  static constexpr int32_t kMax = 10, kMin = 11, kMed = 12, kSumMod = 13, kClose = 14, kPad = 15;
  static constexpr int64_t kMaxDepth = 10, kMaxArgs = 10;
  static constexpr int64_t kSplitSize[3] = {96000, 2000, 2000};  // train, validation, test
  explicit ListOpsTask(uint64_t seed);
  const Tokenizer& tokenizer() const override { return tokenizer_; }
  int64_t classes() const override { return kClasses; }
  int64_t split_size(Split split) const override { return kSplitSize[int(split)]; }
  // Throws linattn::Error when max_len < 4 (no expression fits) or i is outside the split.
  ListOpsExample example(ListOpsSplit split, int64_t i, int64_t max_len) const override;
  int32_t pad() const override { return kPad; }
  // LRA's spelling of tokens: "[MAX 2 9 [MIN 4 7 ] 0 ]" (padding is left out).
  static std::string text(std::span<const int32_t> tokens);

 private:
  uint64_t seed_;
  Tokenizer tokenizer_;
};

// Pathfinder (Linsley et al., 2018), as the Long Range Arena poses it (Tay et al., 2020): a side × side
// 8-bit image holding two marked dots and several curves; label 1 when one curve joins the two dots, 0
// when each dot ends a curve of its own. The image is the sequence, pixel by pixel in raster order
// (side² tokens, the pixel value 0–255 the token). Drawn here, and checkable by a flood fill: curves are
// 8-connected runs of pixels (value 96–192), the dots 3 × 3 squares of 255 at curve ends, the background
// 0, and no curve comes within one pixel of another, so the dots' 8-connected components answer the
// label. Positive and negative images hold the same number of curves from the same length
// distribution: only whether the dots share a curve tells them apart. Example i of a split is a function
// of (seed, split, i) alone; the splits have LRA's 160,000 / 20,000 / 20,000 images.
class PathfinderTask final : public SplitTask {
 public:
  static constexpr int64_t kClasses = 2, kMinSide = 16, kMaxSide = 256;
  static constexpr int32_t kBackground = 0, kDot = 255, kMinPath = 96, kMaxPath = 192;
  static constexpr int64_t kSplitSize[3] = {160000, 20000, 20000};  // train, validation, test
  explicit PathfinderTask(uint64_t seed);
  const Tokenizer& tokenizer() const override { return tokenizer_; }
  int64_t classes() const override { return kClasses; }
  int64_t split_size(Split split) const override { return kSplitSize[int(split)]; }
  // max_len = side² (check_pathfinder_length); throws linattn::Error otherwise or when i is outside the split.
  LabelledSequence example(Split split, int64_t i, int64_t max_len) const override;
  int32_t pad() const override { return kBackground; }  // never used: every image fills side² tokens
  // The image as side lines of side characters: '.' background, '#' a curve, 'O' a dot.
  static std::string text(std::span<const int32_t> pixels, int64_t side);

 private:
  uint64_t seed_;
  Tokenizer tokenizer_;
};
// The image side of a Pathfinder sequence length; throws linattn::Error unless seq_len = side² with side
// in [kMinSide, kMaxSide].
int64_t check_pathfinder_length(int64_t seq_len);

// The tasks by name, as train's --task spells them.
inline constexpr const char* kTaskChoices =
    "\"copy\", \"text\", \"mqar\", \"listops\", \"pathfinder\", \"image\" or \"speech\"";
// The tasks whose data is a dataset file (dataset.hpp), named in the file.
inline bool is_dataset_task(std::string_view name) { return name == "image" || name == "speech"; }
// A task that trains the encoder classifier.
inline bool is_classification_task(std::string_view name) {
  return name == "listops" || name == "pathfinder" || is_dataset_task(name);
}

// "copy", "text" (which reads data_path), "mqar" (of shape mqar), "listops" and "pathfinder" (their
// splits fixed by seed), or "image" and "speech" (a dataset file at data_path whose task is that name);
// throws linattn::Error naming the choices otherwise.
std::unique_ptr<Task> make_task(std::string_view name, const std::filesystem::path& data_path,
                                const MqarShape& mqar = {}, uint64_t seed = 1);

}  // namespace linattn::model
