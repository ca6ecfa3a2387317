// The tokenizer, the copy task and the text corpus.
#include "linattn/model/data.hpp"

#include <algorithm>

#include "linattn/error.hpp"
#include "linattn/file_io.hpp"
#include "linattn/model/dataset.hpp"
#include "linattn/random.hpp"
#include "model/printable.hpp"

namespace linattn::model {

Tokenizer::Tokenizer(std::string vocab) : vocab_(std::move(vocab)) {
  if (vocab_.empty()) throw Error("linattn::model: tokenizer vocabulary is empty, expected at least one byte");
  for (size_t i = 0; i < vocab_.size(); ++i) {
    int32_t& slot = index_[static_cast<unsigned char>(vocab_[i])];
    if (slot != 0)
      throw Error("linattn::model: tokenizer vocabulary repeats byte " +
                  std::to_string(static_cast<unsigned char>(vocab_[i])) + ", expected distinct bytes");
    slot = int32_t(i) + 1;
  }
}

Tokenizer Tokenizer::from_text(std::string_view text) {
  bool seen[256] = {};
  for (char c : text) seen[static_cast<unsigned char>(c)] = true;
  std::string vocab;
  for (int c = 0; c < 256; ++c)
    if (seen[c]) vocab.push_back(char(c));
  return Tokenizer(vocab);
}

Tokenizer Tokenizer::byte_range(int64_t count) {
  if (count < 1 || count > 256)
    throw Error("linattn::model: a byte vocabulary of " + std::to_string(count) + " tokens, expected 1 to 256");
  std::string vocab(size_t(count), '\0');
  for (int64_t i = 0; i < count; ++i) vocab[size_t(i)] = char(i);
  return Tokenizer(vocab);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const int32_t slot = index_[static_cast<unsigned char>(text[i])];
    if (slot == 0)
      throw Error("linattn::model: character " + std::to_string(static_cast<unsigned char>(text[i])) + " ('" +
                  detail::printable(text.substr(i, 1)) + "') at offset " + std::to_string(i) +
                  " is not in the model's vocabulary, expected one of \"" + detail::printable(vocab_) + "\"");
    tokens[i] = slot - 1;
  }
  return tokens;
}

std::string Tokenizer::decode(std::span<const int32_t> tokens) const {
  std::string text;
  for (int32_t t : tokens) text.push_back(t >= 0 && t < size() ? vocab_[t] : '?');
  return text;
}

namespace {
Batch empty_batch(int64_t B, int64_t T) {
  Batch batch{B, T, std::vector<int32_t>(B * T), std::vector<int32_t>(B * T), std::vector<float>(B * T, 0.0f), {}};
  return batch;
}
// Held-out streams use seeds no training run uses (training seeds are small user numbers).
constexpr uint64_t kEvalSeed = 0x5eed0fe7a1u;
}  // namespace

CopyTask::CopyTask() : tokenizer_("abcdefghij|.") {}

Batch CopyTask::train_batch(int64_t B, int64_t T, uint64_t seed, int64_t index) const {
  Random rng(splitmix64(splitmix64(seed) + uint64_t(index)));
  Batch batch = empty_batch(B, T);
  std::vector<int32_t> s(T + 1);
  for (int64_t b = 0; b < B; ++b) {
    // s = x_1..x_L | x_1..x_L . . ., T + 1 tokens; inputs s[0, T), targets s[1, T]
    // L uniform in [T/4, T/2) as in the paper's code (fast-transformers' copy example): every sequence is
    // long enough that the copy needs attention over a long span.
    const int64_t lo = std::max<int64_t>(T / 4, 1), hi = std::max<int64_t>(T / 2, lo + 1);
    const int64_t L = lo + rng.below(hi - lo);
    std::fill(s.begin(), s.end(), kPad);
    for (int64_t i = 0; i < L; ++i) s[i] = int32_t(rng.below(kSymbols));
    if (L < T + 1) s[L] = kSeparator;
    for (int64_t i = 0; i < L && L + 1 + i < T + 1; ++i) s[L + 1 + i] = s[i];
    for (int64_t t = 0; t < T; ++t) {
      batch.tokens[b * T + t] = s[t];
      batch.targets[b * T + t] = s[t + 1];
      // target s[t + 1] is a copied symbol when L + 1 ≤ t + 1 ≤ 2L
      batch.weights[b * T + t] = (t >= L && t + 1 <= 2 * L) ? 1.0f : 0.0f;
    }
  }
  return batch;
}

std::vector<Batch> CopyTask::eval_batches(int64_t B, int64_t T, int64_t max_batches) const {
  std::vector<Batch> batches;
  for (int64_t i = 0; i < max_batches; ++i) batches.push_back(train_batch(B, T, kEvalSeed, i));
  return batches;
}

TextTask::TextTask(const std::filesystem::path& path) : TextTask(read_file(path), path.string()) {}

TextTask::TextTask(std::string text, std::string name) {
  if (text.size() < 1000)
    throw Error("linattn::model: text data " + name + " has " + std::to_string(text.size()) +
                " bytes, expected at least 1000");
  tokenizer_ = Tokenizer::from_text(text);
  const std::vector<int32_t> all = tokenizer_.encode(text);
  const size_t split = all.size() * 9 / 10;
  train_.assign(all.begin(), all.begin() + int64_t(split));
  held_out_.assign(all.begin() + int64_t(split), all.end());
}

Batch TextTask::train_batch(int64_t B, int64_t T, uint64_t seed, int64_t index) const {
  if (int64_t(train_.size()) < T + 2)
    throw Error("linattn::model: text training split has " + std::to_string(train_.size()) +
                " tokens, expected more than the sequence length " + std::to_string(T + 1));
  Random rng(splitmix64(splitmix64(seed) + uint64_t(index)));
  Batch batch = empty_batch(B, T);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t start = rng.below(int64_t(train_.size()) - T);
    for (int64_t t = 0; t < T; ++t) {
      batch.tokens[b * T + t] = train_[start + t];
      batch.targets[b * T + t] = train_[start + t + 1];
      batch.weights[b * T + t] = 1.0f;
    }
  }
  return batch;
}

std::vector<Batch> TextTask::eval_batches(int64_t B, int64_t T, int64_t max_batches) const {
  // Windows of T targets from the held-out start; a last partial batch pads with weight 0.
  const int64_t windows = (int64_t(held_out_.size()) - 1) / T;
  std::vector<Batch> batches;
  for (int64_t w0 = 0; w0 < windows && int64_t(batches.size()) < max_batches; w0 += B) {
    Batch batch = empty_batch(B, T);
    for (int64_t b = 0; b < B && w0 + b < windows; ++b)
      for (int64_t t = 0; t < T; ++t) {
        batch.tokens[b * T + t] = held_out_[(w0 + b) * T + t];
        batch.targets[b * T + t] = held_out_[(w0 + b) * T + t + 1];
        batch.weights[b * T + t] = 1.0f;
      }
    batches.push_back(std::move(batch));
  }
  return batches;
}

std::unique_ptr<Task> make_task(std::string_view name, const std::filesystem::path& data_path, const MqarShape& mqar,
                                uint64_t seed) {
  if (name == "copy") return std::make_unique<CopyTask>();
  if (name == "listops") return std::make_unique<ListOpsTask>(seed);
  if (name == "mqar") return std::make_unique<MqarTask>(mqar);
  if (name == "pathfinder") return std::make_unique<PathfinderTask>(seed);
  if (name == "text" || is_dataset_task(name)) {
    if (data_path.empty())
      throw Error("linattn::model: task \"" + std::string(name) + "\" needs a data file, expected --data FILE");
    if (name == "text") return std::make_unique<TextTask>(data_path);
    auto task = std::make_unique<DatasetTask>(data_path);
    if (task->dataset().task != name)
      throw Error("linattn::model: " + data_path.string() + " is a dataset of task \"" + task->dataset().task +
                  "\", expected one of task \"" + std::string(name) + "\"");
    return task;
  }
  throw Error("linattn::model: task is \"" + std::string(name) + "\", expected " + kTaskChoices);
}

}  // namespace linattn::model
