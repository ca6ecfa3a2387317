// The C API of the transformer (include/linattn/linattn_model.h): model files and generation.
#include <memory>
#include <string>

#include "capi/capi_support.hpp"
#include "linattn/linattn_model.h"
#include "linattn/model/config.hpp"
#include "linattn/model/generate.hpp"
#include "linattn/model/model_file.hpp"
#include "linattn/model/transformer.hpp"

struct linattn_model {
  linattn::model::ModelConfig config;
  std::string vocab;
  std::unique_ptr<linattn::model::Transformer<float>> net;
};

struct linattn_generator {
  linattn::model::Generator generator;
  int64_t vocab_size;
};

using namespace linattn::capi;

extern "C" {

linattn_status linattn_model_load(const char* path, linattn_model** out) {
  const char* f = "linattn_model_load";
  return guard(
      [&] {
        require(out, f, "out");
        *out = nullptr;
        require(path, f, "path");
        linattn::model::ModelFile file = linattn::model::load_model_file(path);
        auto handle = std::make_unique<linattn_model>();
        handle->config = file.config;
        handle->vocab = std::move(file.vocab);
        handle->net = std::make_unique<linattn::model::Transformer<float>>(file.config);
        handle->net->params() = std::move(file.params);
        *out = handle.release();
      },
      /*io_errors=*/true);
}

void linattn_model_free(linattn_model* model) { delete model; }

linattn_status linattn_model_shape_of(const linattn_model* model, linattn_model_shape* shape) {
  const char* f = "linattn_model_shape_of";
  return guard([&] {
    require(model, f, "model");
    require(shape, f, "shape");
    const linattn::model::ModelConfig& c = model->config;
    *shape = linattn_model_shape{c.vocab_size,
                                 c.d_model,
                                 c.layers,
                                 c.heads,
                                 c.mlp_hidden,
                                 int64_t(model->net->params().size()),
                                 linattn::model::attention_name(c.attention)};
  });
}

linattn_status linattn_model_vocab(const linattn_model* model, const char** vocab, int64_t* size) {
  const char* f = "linattn_model_vocab";
  return guard([&] {
    require(model, f, "model");
    require(vocab, f, "vocab");
    require(size, f, "size");
    *vocab = model->vocab.data();
    *size = int64_t(model->vocab.size());
  });
}

linattn_status linattn_generator_create(const linattn_model* model, linattn_generator** out) {
  const char* f = "linattn_generator_create";
  return guard([&] {
    require(out, f, "out");
    *out = nullptr;
    require(model, f, "model");
    *out = new linattn_generator{linattn::model::Generator(*model->net), model->config.vocab_size};
  });
}

void linattn_generator_free(linattn_generator* generator) { delete generator; }

linattn_status linattn_generator_feed(linattn_generator* generator, const int32_t* tokens, int64_t n,
                                      const float** logits) {
  const char* f = "linattn_generator_feed";
  return guard([&] {
    require(generator, f, "generator");
    require(logits, f, "logits");
    if (n < 1) fail(LINATTN_ERROR_INVALID_ARGUMENT, f, "n is " + std::to_string(n) + ", expected >= 1");
    require(tokens, f, "tokens");
    *logits = generator->generator.feed({tokens, size_t(n)}).data();
  });
}

linattn_status linattn_generator_reset(linattn_generator* generator) {
  return guard([&] {
    require(generator, "linattn_generator_reset", "generator");
    generator->generator.reset();
  });
}

linattn_status linattn_generator_position(const linattn_generator* generator, int64_t* position, int64_t* state_bytes) {
  return guard([&] {
    require(generator, "linattn_generator_position", "generator");
    if (position) *position = generator->generator.position();
    if (state_bytes) *state_bytes = generator->generator.state_bytes();
  });
}

linattn_status linattn_sample_token(const float* logits, int64_t vocab_size, double temperature, double u,
                                    int32_t* token) {
  const char* f = "linattn_sample_token";
  return guard([&] {
    require(logits, f, "logits");
    require(token, f, "token");
    if (vocab_size < 1)
      fail(LINATTN_ERROR_INVALID_ARGUMENT, f, "vocab_size is " + std::to_string(vocab_size) + ", expected >= 1");
    if (!(temperature >= 0))
      fail(LINATTN_ERROR_INVALID_ARGUMENT, f, "temperature is " + std::to_string(temperature) + ", expected >= 0");
    if (!(u >= 0 && u < 1))
      fail(LINATTN_ERROR_INVALID_ARGUMENT, f, "u is " + std::to_string(u) + ", expected in [0, 1)");
    *token = linattn::model::sample_token({logits, size_t(vocab_size)}, temperature, u);
  });
}

}  // extern "C"
