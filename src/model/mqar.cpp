// MQAR, multi-query associative recall (Zoology): key–value pairs, then queries of the keys.
#include <numeric>

#include "linattn/error.hpp"
#include "linattn/model/data.hpp"
#include "linattn/random.hpp"

namespace linattn::model {
namespace {

// Symbol i as a printable byte: '!' (0x21) … '~' (0x7e), then 0xa1 … 0xfe; padding is ' '.
std::string mqar_vocabulary(int64_t vocab) {
  std::string bytes;
  for (int64_t i = 0; i < vocab; ++i) bytes.push_back(char(i < 94 ? 0x21 + i : 0xa1 + (i - 94)));
  bytes.push_back(' ');
  return bytes;
}

// Held-out streams use a seed no training run uses (training seeds are small user numbers).
constexpr uint64_t kMqarEvalSeed = 0x5eed0fe7a2u;

// The first n of a uniform random permutation of [lo, lo + count) (a partial Fisher–Yates shuffle).
std::vector<int32_t> distinct(Random& rng, int32_t lo, int64_t count, int64_t n) {
  std::vector<int32_t> pool(static_cast<size_t>(count));
  std::iota(pool.begin(), pool.end(), lo);
  for (int64_t i = 0; i < n; ++i) std::swap(pool[size_t(i)], pool[size_t(i + rng.below(count - i))]);
  pool.resize(size_t(n));
  return pool;
}

}  // namespace

void check_mqar_shape(const MqarShape& s, int64_t seq_len) {
  auto fail = [](const std::string& what, int64_t seen, const std::string& expected) {
    throw Error("linattn::model: mqar " + what + " is " + std::to_string(seen) + ", expected " + expected);
  };
  if (s.pairs < 1) fail("pairs", s.pairs, "≥ 1");
  if (s.vocab < 2 || s.vocab % 2 != 0 || s.vocab > MqarTask::kMaxVocab)
    fail("vocab", s.vocab, "an even number in [2, " + std::to_string(MqarTask::kMaxVocab) + "]");
  if (s.vocab / 2 < s.pairs)
    fail("vocab", s.vocab,
         "at least 2 · pairs = " + std::to_string(2 * s.pairs) + " (pairs need distinct keys and values)");
  if (seq_len > 0 && seq_len < 4 * s.pairs)
    fail("seq_len", seq_len,
         "at least 4 · pairs = " + std::to_string(4 * s.pairs) + " (the pairs, then a query and answer for each)");
}

MqarTask::MqarTask(MqarShape shape) : shape_(shape) {
  check_mqar_shape(shape);
  tokenizer_ = Tokenizer(mqar_vocabulary(shape.vocab));
}

Batch MqarTask::train_batch(int64_t B, int64_t T, uint64_t seed, int64_t index) const {
  check_mqar_shape(shape_, T);
  const int64_t N = shape_.pairs, half = shape_.vocab / 2;
  Random rng(splitmix64(splitmix64(seed) + uint64_t(index)));
  Batch batch{B, T, std::vector<int32_t>(B * T), std::vector<int32_t>(B * T), std::vector<float>(B * T, 0.0f), {}};
  std::vector<int32_t> s(size_t(T + 1));
  for (int64_t b = 0; b < B; ++b) {
    // s: T + 1 tokens, inputs s[0, T), targets s[1, T]: the pairs, the queries with their answers, padding.
    const std::vector<int32_t> keys = distinct(rng, 0, half, N), values = distinct(rng, int32_t(half), half, N);
    const std::vector<int32_t> order = distinct(rng, 0, N, N);
    std::fill(s.begin(), s.end(), pad());
    for (int64_t i = 0; i < N; ++i) {
      s[size_t(2 * i)] = keys[size_t(i)];
      s[size_t(2 * i + 1)] = values[size_t(i)];
      s[size_t(2 * N + 2 * i)] = keys[size_t(order[size_t(i)])];
      s[size_t(2 * N + 2 * i + 1)] = values[size_t(order[size_t(i)])];
    }
    for (int64_t t = 0; t < T; ++t) {
      batch.tokens[b * T + t] = s[size_t(t)];
      batch.targets[b * T + t] = s[size_t(t + 1)];
      // the query key at 2N + 2i: its target is the answer
      batch.weights[b * T + t] = (t >= 2 * N && t < 4 * N && (t - 2 * N) % 2 == 0) ? 1.0f : 0.0f;
    }
  }
  return batch;
}

std::vector<Batch> MqarTask::eval_batches(int64_t B, int64_t T, int64_t max_batches) const {
  std::vector<Batch> batches;
  for (int64_t i = 0; i < max_batches; ++i) batches.push_back(train_batch(B, T, kMqarEvalSeed, i));
  return batches;
}

}  // namespace linattn::model
