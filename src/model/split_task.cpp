// The batches of a classification task with fixed splits (data.hpp's SplitTask): ListOps, Pathfinder
// and the dataset files share them.
#include <algorithm>
#include <string>

#include "linattn/error.hpp"
#include "linattn/model/data.hpp"
#include "linattn/random.hpp"

namespace linattn::model {
namespace {

// B examples padded to T: tokens, the real-token mask as weights, the labels.
template <class Example>
Batch pack(int64_t B, int64_t T, int32_t pad, Example&& example) {
  Batch batch;
  batch.B = B, batch.T = T;
  batch.tokens.assign(size_t(B * T), pad);
  batch.weights.assign(size_t(B * T), 0.0f);
  for (int64_t b = 0; b < B; ++b) {
    const LabelledSequence e = example(b);
    std::copy(e.tokens.begin(), e.tokens.end(), batch.tokens.begin() + b * T);
    std::fill_n(batch.weights.begin() + b * T, e.tokens.size(), 1.0f);
    batch.labels.push_back(e.label);
  }
  return batch;
}

}  // namespace

// Keeps held-out and training streams apart: split s's example i comes from (seed, s, i).
uint64_t SplitTask::example_seed(uint64_t seed, Split split, int64_t i) {
  return splitmix64(splitmix64(splitmix64(seed) + uint64_t(split) + 1) + uint64_t(i));
}

void SplitTask::check_index(Split split, int64_t i, std::string_view task) const {
  if (i < 0 || i >= split_size(split))
    throw Error("linattn::model: " + std::string(task) + " example " + std::to_string(i) +
                " is outside its split, expected [0, " + std::to_string(split_size(split)) + ")");
}

Batch SplitTask::train_batch(int64_t B, int64_t T, uint64_t seed, int64_t index) const {
  Random rng(splitmix64(splitmix64(seed) + uint64_t(index)));
  std::vector<int64_t> picks;
  for (int64_t b = 0; b < B; ++b) picks.push_back(rng.below(split_size(Split::train)));
  return pack(B, T, pad(), [&](int64_t b) { return example(Split::train, picks[size_t(b)], T); });
}

std::vector<Batch> SplitTask::split_batches(Split split, int64_t B, int64_t T, int64_t count) const {
  const int64_t size = split_size(split);
  const int64_t n = count > 0 ? std::min(count, size) : size;
  std::vector<Batch> batches;
  for (int64_t first = 0; first < n; first += B)
    batches.push_back(pack(std::min(B, n - first), T, pad(), [&](int64_t b) { return example(split, first + b, T); }));
  return batches;
}

std::vector<Batch> SplitTask::eval_batches(int64_t B, int64_t T, int64_t max_batches) const {
  return split_batches(Split::validation, B, T, B * max_batches);
}

}  // namespace linattn::model
