// Linformer in the encoder classifier (issue 41): the whole model's gradient (the learned projections
// E and F included) against finite differences, the fp32 operator path against the fp64 reference over a
// sequence shorter than the projections' N_max, and the decoder's refusal.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "linattn/error.hpp"
#include "linattn/model/layers.hpp"
#include "linattn/model/transformer.hpp"
#include "support/model_attention.hpp"
#include "support/model_gradients.hpp"
#include "support/tensors.hpp"

namespace linattn::model {
namespace {

using testing::random_vector;

ModelConfig linformer_config(int64_t P = 3, int64_t N_max = 7) {
  ModelConfig c;
  c.vocab_size = 7;
  c.d_model = 6;
  c.heads = 2;
  c.layers = 2;
  c.mlp_hidden = 8;
  c.attention = AttentionKind::linformer;
  c.classes = 3;
  c.linformer_length = P;
  c.max_seq_len = N_max;
  return c;
}

TEST(Linformer, ClassifierBackwardMatchesFiniteDifferences) {
  std::mt19937_64 rng(21);
  Transformer<double> model(linformer_config());
  const int64_t B = 2, T = 5;  // shorter than N_max = 7: E and F's leading columns
  std::vector<int32_t> tokens(B * T), labels = {1, 2};
  for (auto& t : tokens) t = int32_t(rng() % 7);
  const std::vector<double> mask = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
  for (double& p : model.params()) p += 0.3 * std::uniform_real_distribution<double>(-1, 1)(rng);
  auto loss = [&] { return model.forward(tokens.data(), labels.data(), mask.data(), B, T); };
  bool has_projections = false;
  for (const auto& [name, error] : testing::parameter_gradient_errors(model, loss)) {
    EXPECT_LT(error, 1e-5) << name;
    has_projections = has_projections || name == "linproj";
  }
  EXPECT_TRUE(has_projections);
  EXPECT_EQ(linformer_layer_size(model.config()), 2 * 2 * 3 * 7);
}

// fp32 (linattn's operator) against fp64 (the reference), forward and backward, dE and dF included.
TEST(Linformer, OperatorPathMatchesTheReference) {
  std::mt19937_64 rng(22);
  const ModelConfig c = linformer_config(4, 9);
  const AttentionSpec spec{c.attention, c.heads, nullptr, c.chunk_size, false, c.linformer_length, c.max_seq_len};
  const int64_t B = 2, T = 7, C = c.d_model, H = c.heads, n = linformer_layer_size(c);
  // E and F go where the other kinds' gate goes, and come back as its gradient.
  const testing::AttentionLayerInputs in{
      random_vector(B * T * 3 * C, rng), random_vector(B * T * C, rng), random_vector(n, rng, -0.5, 0.5), {}};
  testing::expect_fp32_matches_fp64(spec, B, T, C, in, true, "linformer");
  const std::vector<float> dproj32 = testing::run_attention_layer<float>(spec, B, T, C, in, true).dgate;
  // Columns past T (positions no sequence of this batch has) get no gradient.
  for (int64_t row = 0; row < 2 * H * c.linformer_length; ++row)
    for (int64_t j = T; j < c.max_seq_len; ++j) EXPECT_EQ(dproj32[size_t(row * c.max_seq_len + j)], 0.0f);
}

TEST(Linformer, ConfigKeepsItsShapeAndTheDecoderRefusesIt) {
  const ModelConfig c = linformer_config(5, 11);
  const ModelConfig back = config_from_text(config_to_text(c));
  EXPECT_EQ(back.attention, AttentionKind::linformer);
  EXPECT_EQ(back.linformer_length, 5);
  EXPECT_EQ(back.max_seq_len, 11);
  ModelConfig decoder = c;
  decoder.classes = 0;
  try {
    check_config(decoder);
    ADD_FAILURE() << "a linformer decoder was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("causal"), std::string::npos) << e.what();
  }
  ModelConfig huge = c;
  huge.max_seq_len = int64_t(1) << 20;
  huge.linformer_length = 4096;
  EXPECT_THROW(check_config(huge), Error);  // refused before its weights are allocated
  // The other kinds' files keep their keys: no linformer key is written for them.
  ModelConfig linear = c;
  linear.attention = AttentionKind::linear;
  EXPECT_EQ(config_to_text(linear).find("linformer_length"), std::string::npos);
}

}  // namespace
}  // namespace linattn::model
