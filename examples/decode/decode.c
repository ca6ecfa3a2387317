/* decode: generate text from a model trained by `linattn train`, one thread, through linattn's C API
 * only (linattn_model.h). A linear, favor, retnet, gla or delta-rule model decodes with a recurrent
 * state of constant size; a softmax model with a KV cache that grows with the context.
 *
 *   decode MODEL [PROMPT [TOKENS [TEMPERATURE [SEED]]]]     sample and print text
 *   decode MODEL --context N [STEPS]                        time STEPS tokens after a context of N
 *
 * Reports tokens/s, the bytes of context state and the peak resident memory (getrusage) on stderr,
 * and with --context one line "attention context tokens_per_s tokens_per_cpu_s state_bytes max_rss_kib"
 * on stdout. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "linattn/linattn_model.h"

static double clock_seconds(clockid_t clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static double now(void) { return clock_seconds(CLOCK_MONOTONIC); }
/* CPU seconds of this process: on a busy machine it counts the work, not the waits for a core. */
static double cpu_now(void) { return clock_seconds(CLOCK_PROCESS_CPUTIME_ID); }

static long max_rss_kib(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss; /* KiB on Linux */
}

/* splitmix64: the sampling's uniform numbers, a pure function of the seed. */
static uint64_t rng_state;
static double uniform(void) {
  uint64_t x = (rng_state += 0x9e3779b97f4a7c15ull);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return (double)(x >> 11) * (1.0 / 9007199254740992.0);
}

static int fail(const char* what) {
  fprintf(stderr, "decode: %s: %s\n", what, linattn_last_error());
  return 1;
}

/* Context mode: N tokens of a fixed pattern in blocks of 256 (the parallel operators), then STEPS
 * single-token steps, timed. */
static int context_mode(linattn_generator* g, const linattn_model_shape* shape, int64_t context, int64_t steps) {
  enum { BLOCK = 256 };
  int32_t block[BLOCK], token = 0;
  const float* logits = NULL;
  int64_t fed = 0, i, state_bytes = 0;
  double start, cpu_start, seconds, cpu_seconds;
  while (fed < context) {
    const int64_t n = context - fed < BLOCK ? context - fed : BLOCK;
    for (i = 0; i < n; ++i) block[i] = (int32_t)((fed + i) * 7 % shape->vocab_size);
    if (linattn_generator_feed(g, block, n, &logits) != LINATTN_OK) return fail("prefill");
    fed += n;
  }
  start = now();
  cpu_start = cpu_now();
  for (i = 0; i < steps; ++i) {
    if (linattn_generator_feed(g, &token, 1, &logits) != LINATTN_OK) return fail("step");
    if (linattn_sample_token(logits, shape->vocab_size, 0.0, 0.0, &token) != LINATTN_OK) return fail("sample");
  }
  seconds = now() - start;
  cpu_seconds = cpu_now() - cpu_start;
  if (linattn_generator_position(g, NULL, &state_bytes) != LINATTN_OK) return fail("position");
  printf("%s %lld %.1f %.1f %lld %ld\n", shape->attention, (long long)context, (double)steps / seconds,
         (double)steps / cpu_seconds, (long long)state_bytes, max_rss_kib());
  return 0;
}

int main(int argc, char** argv) {
  linattn_model* model = NULL;
  linattn_generator* g = NULL;
  linattn_model_shape shape;
  const char *vocab = NULL, *prompt = argc > 2 ? argv[2] : "";
  int64_t vocab_size = 0, n_prompt = 0, tokens = argc > 3 ? atoll(argv[3]) : 200, i, state_bytes = 0;
  double temperature = argc > 4 ? atof(argv[4]) : 1.0, start, seconds;
  int32_t *ids = NULL, token = 0;
  const float* logits = NULL;
  int status = 0;
  if (argc < 2) {
    fprintf(stderr, "usage: decode MODEL [PROMPT [TOKENS [TEMPERATURE [SEED]]]] | decode MODEL --context N [STEPS]\n");
    return 2;
  }
  rng_state = argc > 5 ? strtoull(argv[5], NULL, 10) : 1;
  linattn_set_num_threads(1);
  if (linattn_model_load(argv[1], &model) != LINATTN_OK) return fail("load");
  if (linattn_model_shape_of(model, &shape) != LINATTN_OK ||
      linattn_model_vocab(model, &vocab, &vocab_size) != LINATTN_OK ||
      linattn_generator_create(model, &g) != LINATTN_OK) {
    status = fail("model");
    goto done;
  }
  if (argc > 3 && strcmp(argv[2], "--context") == 0) {
    status = context_mode(g, &shape, atoll(argv[3]), argc > 4 ? atoll(argv[4]) : 64);
    goto done;
  }
  /* The tokenizer: token i is the byte vocab[i]; no prompt starts from token 0. */
  n_prompt = (int64_t)strlen(prompt);
  ids = malloc(sizeof(int32_t) * (size_t)(n_prompt > 0 ? n_prompt : 1));
  if (ids == NULL) {
    status = 1;
    goto done;
  }
  for (i = 0; i < n_prompt; ++i) {
    const char* at = memchr(vocab, prompt[i], (size_t)vocab_size);
    if (at == NULL) {
      fprintf(stderr, "decode: the prompt's byte %d ('%c') is not in the model's vocabulary\n", (int)i, prompt[i]);
      status = 1;
      goto done;
    }
    ids[i] = (int32_t)(at - vocab);
  }
  if (n_prompt == 0) ids[0] = 0, n_prompt = 1;
  for (i = 0; i < n_prompt; ++i) putchar(vocab[ids[i]]);
  if (linattn_generator_feed(g, ids, n_prompt, &logits) != LINATTN_OK) {
    status = fail("prompt");
    goto done;
  }
  logits += (n_prompt - 1) * shape.vocab_size; /* the last position's */
  start = now();
  for (i = 0; i < tokens; ++i) {
    if (linattn_sample_token(logits, shape.vocab_size, temperature, uniform(), &token) != LINATTN_OK) {
      status = fail("sample");
      goto done;
    }
    putchar(vocab[token]);
    fflush(stdout);
    if (i + 1 < tokens && linattn_generator_feed(g, &token, 1, &logits) != LINATTN_OK) {
      status = fail("step");
      goto done;
    }
  }
  seconds = now() - start;
  linattn_generator_position(g, NULL, &state_bytes);
  fprintf(stderr,
          "\ndecode: %lld tokens in %.3f s: %.1f tokens/s, %s attention, %lld bytes of state, %ld KiB peak RSS\n",
          (long long)tokens, seconds, (double)tokens / seconds, shape.attention, (long long)state_bytes, max_rss_kib());
done:
  free(ids);
  linattn_generator_free(g);
  linattn_model_free(model);
  return status;
}
