// Generation: the recurrent state (linear, favor; retnet, gla and mamba2 through decayed_step; deltanet,
// gated_deltanet and kda through delta_rule_step; rwkv7 through dplr_delta_rule_step) and the KV cache
// (softmax) give the logits of the parallel forward, token by token, after a prompt block, and across block boundaries;
// greedy generation writes the tokens of a full recompute.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "linattn/error.hpp"
#include "linattn/model/generate.hpp"
#include "linattn/model/transformer.hpp"
#include "support/model_configs.hpp"
#include "support/tensors.hpp"

namespace linattn::model {
namespace {

using testing::random_model;

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> tokens(n);
  for (auto& t : tokens) t = int32_t(rng() % uint64_t(vocab));
  return tokens;
}

// max |got − want| / max |want|, in fp64.
double error(std::span<const float> got, std::span<const float> want) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(double(got[i]) - double(want[i])));
    ref = std::max(ref, std::abs(double(want[i])));
  }
  return diff / ref;
}

class ModelGenerate : public ::testing::TestWithParam<AttentionKind> {};

TEST_P(ModelGenerate, StepByStepMatchesParallelForward) {
  Transformer<float> model = random_model(GetParam());
  const int64_t T = 70, V = model.config().vocab_size;  // crosses the chunk size and a 64-token tile
  const std::vector<int32_t> tokens = random_tokens(T, V, 1);
  model.forward(tokens.data(), nullptr, nullptr, 1, T);
  const std::vector<float> want(model.logits(), model.logits() + T * V);

  Generator one_by_one(model);
  std::vector<float> got;
  for (int64_t t = 0; t < T; ++t) {
    const auto logits = one_by_one.feed({tokens.data() + t, 1});
    got.insert(got.end(), logits.begin(), logits.end());
  }
  EXPECT_EQ(one_by_one.position(), T);
  EXPECT_LT(error(got, want), 1e-4) << attention_name(GetParam());

  // A prompt block, then single steps: the same logits.
  Generator prompted(model);
  std::vector<float> mixed;
  const auto block = prompted.feed({tokens.data(), 41});
  mixed.assign(block.begin(), block.end());
  for (int64_t t = 41; t < T; ++t) {
    const auto logits = prompted.feed({tokens.data() + t, 1});
    mixed.insert(mixed.end(), logits.begin(), logits.end());
  }
  EXPECT_LT(error(mixed, want), 1e-4) << attention_name(GetParam());

  // After reset, the generator starts from nothing again.
  prompted.reset();
  const auto again = prompted.feed({tokens.data(), 5});
  EXPECT_LT(error(again, {want.data(), size_t(5 * V)}), 1e-4);
}

// A prompt longer than one internal block (1024 tokens) is fed in blocks, carrying the state.
TEST_P(ModelGenerate, LongPromptMatchesParallelForward) {
  Transformer<float> model = random_model(GetParam());
  const int64_t T = 1100, V = model.config().vocab_size;
  const std::vector<int32_t> tokens = random_tokens(T, V, 2);
  model.forward(tokens.data(), nullptr, nullptr, 1, T);
  Generator generator(model);
  const auto got = generator.feed(tokens);
  EXPECT_LT(error(got, {model.logits(), size_t(T * V)}), 2e-4) << attention_name(GetParam());
}

// Linear, favor, retnet and gla hold constant state per token; softmax's cache grows by 2·C floats per layer.
TEST_P(ModelGenerate, StateMemory) {
  Transformer<float> model = random_model(GetParam());
  const ModelConfig& c = model.config();
  Generator generator(model);
  const std::vector<int32_t> tokens = random_tokens(10, c.vocab_size, 3);
  generator.feed({tokens.data(), 1});
  const int64_t after_one = generator.state_bytes();
  generator.feed({tokens.data() + 1, 9});
  if (GetParam() == AttentionKind::softmax) {
    EXPECT_EQ(generator.state_bytes() - after_one, 9 * 2 * c.d_model * c.layers * int64_t(sizeof(float)));
  } else {
    EXPECT_EQ(generator.state_bytes(), after_one);
    EXPECT_GT(after_one, 0);
  }
}

// Greedy generation through the generator (recurrent state or KV cache, one token per step) writes
// the same tokens as recomputing the whole prefix with the parallel forward before each token.
TEST_P(ModelGenerate, GreedyTokensEqualFullRecompute) {
  Transformer<float> model = random_model(GetParam());
  const int64_t V = model.config().vocab_size, prompt = 7, steps = 40;  // to 47 tokens: past two chunks of 16
  const std::vector<int32_t> start = random_tokens(prompt, V, 4);
  auto argmax = [](std::span<const float> logits) { return sample_token(logits, 0.0, 0.0); };

  Generator generator(model);
  std::vector<int32_t> stepped = start;
  std::span<const float> logits = generator.feed(start);
  for (int64_t i = 0; i < steps; ++i) {
    const int32_t token = argmax(logits.subspan(logits.size() - size_t(V)));
    stepped.push_back(token);
    logits = generator.feed({&token, 1});
  }

  std::vector<int32_t> recomputed = start;
  for (int64_t i = 0; i < steps; ++i) {
    const int64_t T = int64_t(recomputed.size());
    model.forward(recomputed.data(), nullptr, nullptr, 1, T);
    recomputed.push_back(argmax({model.logits() + (T - 1) * V, size_t(V)}));
  }
  EXPECT_EQ(stepped, recomputed) << attention_name(GetParam());
  // Not a degenerate run: the model writes more than one distinct token.
  EXPECT_GT(std::set<int32_t>(stepped.begin() + prompt, stepped.end()).size(), 1u) << attention_name(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Kinds, ModelGenerate,
                         ::testing::Values(AttentionKind::softmax, AttentionKind::linear, AttentionKind::favor,
                                           AttentionKind::retnet, AttentionKind::gla, AttentionKind::deltanet,
                                           AttentionKind::gated_deltanet, AttentionKind::kda, AttentionKind::mamba2,
                                           AttentionKind::rwkv7),
                         [](const ::testing::TestParamInfo<AttentionKind>& p) {
                           return std::string(attention_name(p.param));
                         });

TEST(ModelGenerateErrors, TokensOutsideTheVocabularyAreRejected) {
  Transformer<float> model = random_model(AttentionKind::linear);
  Generator generator(model);
  const std::vector<int32_t> bad = {1, 11, 2};
  try {
    generator.feed(bad);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokens[1] is 11, expected a token in [0, 11)"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(generator.position(), 0);
  const std::vector<int32_t> good = {1, 2, 3}, negative = {0, -1, 0};
  EXPECT_THROW(model.forward(bad.data(), nullptr, nullptr, 1, 3), Error);
  EXPECT_THROW(model.forward(good.data(), negative.data(), nullptr, 1, 3), Error);
  EXPECT_THROW(model.forward(good.data(), nullptr, nullptr, 0, 3), Error);
  EXPECT_NO_THROW(model.forward(good.data(), good.data(), nullptr, 1, 3));
}

TEST(ModelSample, TemperatureZeroIsArgmaxAndSamplingFollowsSoftmax) {
  const std::vector<float> logits = {0.0f, std::log(3.0f), 0.0f, -1e30f};
  EXPECT_EQ(sample_token(logits, 0.0, 0.99), 1);
  // p = (1/5, 3/5, 1/5, 0): u splits [0, 1) into those intervals.
  EXPECT_EQ(sample_token(logits, 1.0, 0.0), 0);
  EXPECT_EQ(sample_token(logits, 1.0, 0.19), 0);
  EXPECT_EQ(sample_token(logits, 1.0, 0.21), 1);
  EXPECT_EQ(sample_token(logits, 1.0, 0.79), 1);
  EXPECT_EQ(sample_token(logits, 1.0, 0.81), 2);
  EXPECT_EQ(sample_token(logits, 1.0, 0.999999), 2);
  // A high temperature flattens: p(1) = 3^(1/100) / (2 + 3^(1/100)) ≈ 0.337.
  EXPECT_EQ(sample_token(logits, 100.0, 0.30), 0);
  EXPECT_EQ(sample_token(logits, 100.0, 0.40), 1);
}

}  // namespace
}  // namespace linattn::model
