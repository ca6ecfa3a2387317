// linattn generate: samples text from a trained model (linattn train --out or --checkpoint),
// streaming each token as it is made, and reports tokens/s. --speed-contexts times single-token
// steps after contexts of growing length instead: the KV cache (softmax) against the recurrent
// state (linear, favor, the decaying state of retnet and gla, the delta rule's of deltanet,
// gated_deltanet and kda).
#include "linattn/model/generate.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "common/command.hpp"
#include "common/flags.hpp"
#include "common/paths.hpp"
#include "linattn/error.hpp"
#include "linattn/file_io.hpp"
#include "linattn/limits.hpp"
#include "linattn/model/data.hpp"
#include "linattn/model/model_file.hpp"
#include "linattn/random.hpp"
#include "linattn/threads.hpp"

namespace linattn::cli {
namespace {

using clock_type = std::chrono::steady_clock;

struct GenerateArgs {
  std::string model, prompt, speed_csv, attention;
  int64_t tokens = 200;
  double temperature = 1.0;
  uint64_t seed = 1;
  int threads = 0;
  std::vector<int64_t> speed_contexts;
  int64_t speed_tokens = 64;
};

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

// CPU seconds of this process: on a shared machine it counts the work, not the waits for a core.
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// Time per generated token after a context of n tokens, for each n: prefill to n tokens (blocks
// through the parallel operators), then time `speed_tokens` single-token steps.
int speed(const GenerateArgs& a, const model::Transformer<float>& net) {
  model::Generator generator(net);
  Random rng(splitmix64(a.seed));  // the model's seeding (model/data.cpp, transformer.cpp)
  const int64_t V = net.config().vocab_size;
  std::string csv = "attention,context,tokens,seconds,tokens_per_s,ms_per_token,cpu_ms_per_token,state_bytes\n";
  std::printf("%-9s %9s %12s %12s %16s %14s\n", "attention", "context", "tokens/s", "ms/token", "CPU ms/token",
              "state bytes");
  std::vector<int64_t> contexts = a.speed_contexts;
  std::sort(contexts.begin(), contexts.end());
  int32_t token = 0;
  for (int64_t context : contexts) {
    // One growing context: each length extends the last (prompt blocks of random tokens), so the
    // quadratic prefill of the KV cache is paid once, for the longest context.
    if (context > generator.position()) {
      std::vector<int32_t> prompt(context - generator.position());
      for (auto& t : prompt) t = int32_t(rng.below(V));
      generator.feed(prompt);
      token = prompt.back();
    }
    const int64_t at = generator.position();
    const auto start = clock_type::now();
    const double cpu_start = cpu_seconds();
    for (int64_t i = 0; i < a.speed_tokens; ++i) {
      const auto logits = generator.feed({&token, 1});
      token = model::sample_token(logits, a.temperature, rng.uniform());
    }
    const double s = seconds_since(start), cpu_ms = 1e3 * (cpu_seconds() - cpu_start) / double(a.speed_tokens);
    const char* kind = model::attention_name(net.config().attention);
    std::printf("%-9s %9" PRId64 " %12.1f %12.4f %16.4f %14" PRId64 "\n", kind, at, double(a.speed_tokens) / s,
                1e3 * s / double(a.speed_tokens), cpu_ms, generator.state_bytes());
    std::fflush(stdout);
    char row[256];
    std::snprintf(row, sizeof row, "%s,%" PRId64 ",%" PRId64 ",%.6f,%.2f,%.6f,%.6f,%" PRId64 "\n", kind, at,
                  a.speed_tokens, s, double(a.speed_tokens) / s, 1e3 * s / double(a.speed_tokens), cpu_ms,
                  generator.state_bytes());
    csv += row;
  }
  if (!a.speed_csv.empty()) write_file_atomically(a.speed_csv, csv);
  return kExitOk;
}

int generate(const GenerateArgs& a) {
  check_distinct({{"--speed-csv", a.speed_csv}}, {{"--model", a.model}});  // the table written over the model
  set_num_threads(a.threads);
  model::ModelFile file = model::load_model_file(a.model);
  // The kind lives in the model file; --attention only states what the caller expects.
  if (!a.attention.empty() && model::attention_by_name(a.attention) != file.config.attention)
    throw UsageError("--attention is " + a.attention + ", but " + a.model + " is a model with " +
                     model::attention_name(file.config.attention) + " attention");
  model::Transformer<float> net(file.config);
  net.params() = std::move(file.params);
  if (!a.speed_contexts.empty()) return speed(a, net);

  const model::Tokenizer tokenizer(file.vocab);
  std::vector<int32_t> prompt;
  try {
    prompt = tokenizer.encode(a.prompt);
  } catch (const linattn::Error& e) {  // the tokenizer knows neither the flag nor the file its vocabulary came from
    throw UsageError("--prompt: " + std::string(e.what()) + " (the vocabulary of " + a.model + ")");
  }
  if (prompt.empty()) prompt.push_back(0);  // no prompt: start from the first symbol
  model::Generator generator(net);
  Random rng(splitmix64(a.seed));  // the model's seeding (model/data.cpp, transformer.cpp)
  std::fputs(tokenizer.decode(prompt).c_str(), stdout);
  std::fflush(stdout);
  const auto start = clock_type::now();
  auto logits = generator.feed(prompt);
  const double prompt_seconds = seconds_since(start);
  const int64_t V = file.config.vocab_size;
  std::span<const float> last = logits.subspan(logits.size() - size_t(V));
  const auto gen_start = clock_type::now();
  for (int64_t i = 0; i < a.tokens; ++i) {
    int32_t token = model::sample_token(last, a.temperature, rng.uniform());
    std::fputs(tokenizer.decode({&token, 1}).c_str(), stdout);
    std::fflush(stdout);  // stream: each token appears as it is made
    if (i + 1 < a.tokens) last = generator.feed({&token, 1});
  }
  const double s = seconds_since(gen_start);
  std::fprintf(
      stderr,
      "\ngenerate: %" PRId64 " tokens in %.3f s: %.1f tokens/s (%s attention; prompt of %zu tokens in %.3f s)\n",
      a.tokens, s, double(a.tokens) / s, model::attention_name(file.config.attention), prompt.size(), prompt_seconds);
  return kExitOk;
}

const Registrar registrar{
    {"generate", "Sample from a trained model, streaming tokens, or time generation against context length", 51,
     [](CLI::App& app) {
       auto a = std::make_shared<GenerateArgs>();
       app.add_option("--model", a->model, "Model or checkpoint file from linattn train")->required();
       app.add_option("--attention", a->attention,
                      "The attention the model must have (softmax, linear, favor, retnet, gla, deltanet, "
                      "gated_deltanet, kda, mamba2, rwkv7; the model file records it): refuse a model of another kind")
           ->transform(flags::one_of({"softmax", "linear", "favor", "retnet", "gla", "deltanet", "gated_deltanet",
                                      "kda", "mamba2", "rwkv7"}));
       app.add_option("--prompt", a->prompt, "Text to start from (characters of the model's vocabulary)");
       app.add_option("--tokens", a->tokens, "Tokens to generate")
           ->check(flags::bounded(1, limits::kMaxGenerateTokens))
           ->capture_default_str();
       app.add_option("--temperature", a->temperature, "Sampling temperature (0: always the most likely token)")
           ->check(flags::non_negative())
           ->capture_default_str();
       app.add_option("--seed", a->seed, "Sampling seed")->check(flags::seed())->capture_default_str();
       app.add_option("--threads", a->threads, "Threads (linattn::set_num_threads); 0: the default")
           ->check(flags::threads());
       flags::add_list(app, "--speed-contexts", a->speed_contexts,
                       "Instead of sampling: time single-token steps after each of these context lengths",
                       flags::bounded(1, limits::kMaxGenerateTokens));
       app.add_option("--speed-tokens", a->speed_tokens, "Timed steps per context")
           ->check(flags::bounded(1, limits::kMaxGenerateTokens))
           ->capture_default_str();
       app.add_option("--speed-csv", a->speed_csv, "Write the speed table here as CSV");
       flags::examples(app,
                       {"linattn generate --model copy.model --prompt \"abc|\" --tokens 20",
                        "linattn generate --model text.model --prompt \"Love, n.\" --tokens 200 --temperature 0.8"});
       return [a] { return generate(*a); };
     }}};

}  // namespace
}  // namespace linattn::cli
