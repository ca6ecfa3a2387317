/* The C API of linattn's transformer (include/linattn/model/): load a model that `linattn train`
 * wrote and generate from it, one token at a time, with a recurrent state (linear, favor, retnet, gla,
 * deltanet, gated_deltanet, kda) or a KV cache (softmax). Part of liblinattn_c when it is built with
 * LINATTN_C_API_MODEL (the default; it then links OpenBLAS for the model's dense matmuls). Errors,
 * ownership and threads as in linattn.h (docs/c-api.md). */
#ifndef LINATTN_LINATTN_MODEL_H
#define LINATTN_LINATTN_MODEL_H

#include "linattn/linattn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct linattn_model linattn_model;
typedef struct linattn_generator linattn_generator;

/* A model or checkpoint file (docs/model-format.md); LINATTN_ERROR_IO when it cannot be read or parsed. */
LINATTN_C_API linattn_status linattn_model_load(const char* path, linattn_model** out);
LINATTN_C_API void linattn_model_free(linattn_model* model);

typedef struct linattn_model_shape {
  int64_t vocab_size, d_model, layers, heads, mlp_hidden, parameters;
  const char* attention; /* "softmax", "linear", ...: owned by the model */
} linattn_model_shape;

LINATTN_C_API linattn_status linattn_model_shape_of(const linattn_model* model, linattn_model_shape* shape);
/* The tokenizer: token i is the byte vocab[i], *size = vocab_size bytes (not NUL-terminated). */
LINATTN_C_API linattn_status linattn_model_vocab(const linattn_model* model, const char** vocab, int64_t* size);

/* A generator over the model (which must outlive it), at position 0. */
LINATTN_C_API linattn_status linattn_generator_create(const linattn_model* model, linattn_generator** out);
LINATTN_C_API void linattn_generator_free(linattn_generator* generator);
/* Feeds n >= 1 tokens at positions position() .. position() + n - 1. *logits receives their logits,
 * [n, vocab_size] row-major, owned by the generator and valid until its next feed or reset. */
LINATTN_C_API linattn_status linattn_generator_feed(linattn_generator* generator, const int32_t* tokens, int64_t n,
                                                    const float** logits);
LINATTN_C_API linattn_status linattn_generator_reset(linattn_generator* generator);
/* Tokens fed so far, and the bytes of context state held (constant for the recurrent kinds, growing
 * with the position for softmax's KV cache). */
LINATTN_C_API linattn_status linattn_generator_position(const linattn_generator* generator, int64_t* position,
                                                        int64_t* state_bytes);

/* A token drawn from softmax(logits / temperature) with the uniform number u in [0, 1); temperature 0
 * takes the argmax. */
LINATTN_C_API linattn_status linattn_sample_token(const float* logits, int64_t vocab_size, double temperature, double u,
                                                  int32_t* token);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LINATTN_LINATTN_MODEL_H */
