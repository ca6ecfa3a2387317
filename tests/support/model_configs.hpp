#pragma once
// The model tests' small models, one definition for every attention kind: the gradient checks' (fp64,
// a handful of tokens), the short training runs' and the generation and model-file tests' random model
// (weights far from their initial values, so that attention patterns are far from uniform).
#include <cstdint>
#include <random>

#include "linattn/model/config.hpp"
#include "linattn/model/transformer.hpp"

namespace linattn::testing {

// A config of `kind` with these sizes, 2 layers.
inline model::ModelConfig config_of(model::AttentionKind kind, int64_t vocab, int64_t d_model, int64_t heads,
                                    int64_t mlp_hidden, int64_t favor_features, int64_t chunk) {
  model::ModelConfig c;
  c.vocab_size = vocab, c.d_model = d_model, c.heads = heads, c.layers = 2, c.mlp_hidden = mlp_hidden;
  c.attention = kind, c.favor_features = favor_features, c.chunk_size = chunk;
  return c;
}

// Vocabulary 7, d_model C, H heads, MLP 10, 8 FAVOR features, chunk 4: every path at a size finite
// differences can afford.
inline model::ModelConfig small_config(model::AttentionKind kind, int64_t C = 6, int64_t H = 2) {
  return config_of(kind, 7, C, H, 10, 8, 4);
}

// d_model 32, 2 heads, MLP 64, 32 FAVOR features, chunk 16 (the vocabulary is the task's): a model the
// trainer teaches in a few dozen steps.
inline model::ModelConfig tiny_config(model::AttentionKind kind) { return config_of(kind, 0, 32, 2, 64, 32, 16); }

// Vocabulary 11, d_model 48, 3 heads, the rest as tiny_config, its parameters moved by N(0, 0.15) (seed 3):
// larger weights than the initial 0.02.
inline model::Transformer<float> random_model(model::AttentionKind kind) {
  model::Transformer<float> model(config_of(kind, 11, 48, 3, 64, 32, 16));
  std::mt19937_64 rng(3);
  std::normal_distribution<float> n(0.0f, 0.15f);
  for (float& p : model.params()) p += n(rng);
  return model;
}

}  // namespace linattn::testing
