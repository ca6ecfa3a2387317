// linattn eval: the accuracy of an encoder classifier (linattn train --task listops) on a split of its
// task, the test split by default; and linattn listops, which prints a split's expressions and labels
// (the data train and eval see, for reading and for checking the generator).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/command.hpp"
#include "common/flags.hpp"
#include "linattn/error.hpp"
#include "linattn/limits.hpp"
#include "linattn/model/data.hpp"
#include "linattn/model/model_file.hpp"
#include "linattn/model/train.hpp"
#include "linattn/threads.hpp"

namespace linattn::cli {
namespace {

const std::map<std::string, model::ListOpsSplit>& split_names() {
  static const std::map<std::string, model::ListOpsSplit> names{{"train", model::ListOpsSplit::train},
                                                                {"validation", model::ListOpsSplit::validation},
                                                                {"test", model::ListOpsSplit::test}};
  return names;
}
const char* split_name(model::ListOpsSplit split) {
  for (const auto& [name, value] : split_names())
    if (value == split) return name.c_str();
  return "?";
}

struct EvalArgs {
  std::string model;
  model::ListOpsSplit split = model::ListOpsSplit::test;
  int64_t examples = 0, batch = 16, seq_len = 0;
  uint64_t seed = 1;
  int threads = 0;
  bool json = false;
};

// The split's length and seed: a checkpoint's own unless the flags say otherwise; a model file records
// neither, so --seq-len is then required.
struct Source {
  int64_t seq_len = 0;
  uint64_t seed = 1;
};

Source source_of(const CLI::App& app, const EvalArgs& a, const model::ModelFile& f) {
  Source s{a.seq_len, a.seed};
  if (f.checkpoint) {
    const model::TrainOptions o = model::train_options_from_text(f.train_options);
    if (o.task != "listops")
      throw Error(a.model + " is a checkpoint of task \"" + o.task +
                  "\", expected a checkpoint of task \"listops\" (eval scores the encoder classifier of "
                  "linattn train --task listops)");
    if (!app.count("--seq-len")) s.seq_len = o.seq_len;
    if (!app.count("--seed")) s.seed = o.seed;
  } else {
    if (f.config.classes == 0)
      throw Error(a.model + " is a decoder (a next-token model of " + std::to_string(f.config.vocab_size) +
                  " symbols), expected the encoder classifier of linattn train --task listops");
    if (!app.count("--seq-len"))
      throw UsageError("--seq-len: " + a.model +
                       " is a model file, which does not record its training length: give the --seq-len (and --seed) "
                       "it was trained with, or eval its checkpoint");
  }
  return s;
}

int eval(const CLI::App& app, const EvalArgs& a) {
  set_num_threads(a.threads);
  model::ModelFile f = model::load_model_file(a.model);
  const Source s = source_of(app, a, f);
  const model::ListOpsTask task(s.seed);
  if (f.vocab != task.tokenizer().vocab() || f.config.classes != model::ListOpsTask::kClasses)
    throw Error(a.model + " is a classifier of " + std::to_string(f.config.classes) + " classes over \"" + f.vocab +
                "\", expected one of task \"listops\" (10 classes over \"" + task.tokenizer().vocab() + "\")");
  model::Transformer<float> net(f.config);
  net.params() = std::move(f.params);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<model::Batch> batches = task.split_batches(a.split, a.batch, s.seq_len, a.examples);
  const model::EvalResult r = model::evaluate_classifier(net, batches);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int64_t examples = 0;
  for (const model::Batch& b : batches) examples += b.B;
  if (a.json) {
    const nlohmann::json j = {{"model", a.model},
                              {"task", "listops"},
                              {"attention", model::attention_name(f.config.attention)},
                              {"split", split_name(a.split)},
                              {"examples", examples},
                              {"seq_len", s.seq_len},
                              {"seed", s.seed},
                              {"accuracy", r.accuracy},
                              {"loss", r.loss},
                              {"seconds", seconds}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("eval: %s (%s attention), listops %s split: %" PRId64 " expressions of %" PRId64 " to %" PRId64
                " tokens (seed %" PRIu64 "): accuracy %.4f (chance 0.1), loss %.4f, %.1f s\n",
                a.model.c_str(), model::attention_name(f.config.attention), split_name(a.split), examples,
                s.seq_len / 4, s.seq_len, s.seed, r.accuracy, r.loss, seconds);
  }
  return kExitOk;
}

void add_split_flags(CLI::App& app, model::ListOpsSplit& split, int64_t& examples) {
  app.add_option("--split", split, "train, validation or test (LRA's 96,000 / 2,000 / 2,000 expressions)")
      ->transform(flags::choice(split_names()))
      ->option_text("NAME");
  app.add_option("--examples", examples, "The split's first N expressions (0: all of it)")
      ->check(flags::bounded(0, 96000))
      ->capture_default_str();
}

const Registrar eval_registrar{
    {"eval", "Accuracy of an encoder classifier (train --task listops) on the test split of its task", 52,
     [](CLI::App& app) {
       auto a = std::make_shared<EvalArgs>();
       // Positional or --model (generate's spelling).
       app.add_option("model,--model", a->model, "Model or checkpoint file from linattn train --task listops")
           ->required();
       add_split_flags(app, a->split, a->examples);
       app.add_option("--seq-len", a->seq_len,
                      "Longest expression (they run seq-len/4 to seq-len tokens); default: the checkpoint's, "
                      "required for a model file")
           ->check(flags::bounded(4, limits::kMaxSeqLen));
       app.add_option("--seed", a->seed, "The seed that fixes the splits; default: the checkpoint's")
           ->check(flags::seed());
       app.add_option("--batch", a->batch, "Sequences per forward")
           ->check(flags::bounded(1, limits::kMaxBatch))
           ->capture_default_str();
       app.add_option("--threads", a->threads, "Threads (linattn::set_num_threads); 0: the default")
           ->check(flags::threads());
       app.add_flag("--json", a->json, "Print one JSON object (split, examples, accuracy, loss, seconds)");
       app.footer(
           "A checkpoint of another task, a decoder model file, or a classifier of another vocabulary is refused "
           "(exit 1), naming what the file is.");
       flags::examples(app, {"linattn eval listops.model.ckpt",
                             "linattn eval listops.model --seq-len 2000 --seed 1 --split validation --json"});
       return [a, &app] { return eval(app, *a); };
     }}};

struct ListOpsArgs {
  model::ListOpsSplit split = model::ListOpsSplit::test;
  int64_t examples = 10, seq_len = 2000;
  uint64_t seed = 1;
};

const Registrar listops_registrar{
    {"listops", "Print ListOps expressions and labels of a split (the data of train --task listops)", 53,
     [](CLI::App& app) {
       auto a = std::make_shared<ListOpsArgs>();
       add_split_flags(app, a->split, a->examples);
       app.add_option("--seq-len", a->seq_len, "Longest expression (they run seq-len/4 to seq-len tokens)")
           ->check(flags::bounded(4, limits::kMaxSeqLen))
           ->capture_default_str();
       app.add_option("--seed", a->seed, "The seed that fixes the splits (train's --seed)")
           ->check(flags::seed())
           ->capture_default_str();
       app.footer("One line per expression: its label (its value, 0-9), a tab, the expression in LRA's spelling.");
       flags::examples(app, {"linattn listops --split test --examples 5 --seq-len 64"});
       return [a] {
         const model::ListOpsTask task(a->seed);
         const int64_t n = a->examples > 0 ? a->examples : model::ListOpsTask::kSplitSize[int(a->split)];
         for (int64_t i = 0; i < std::min(n, model::ListOpsTask::kSplitSize[int(a->split)]); ++i) {
           const model::ListOpsExample e = task.example(a->split, i, a->seq_len);
           std::printf("%d\t%s\n", e.label, model::ListOpsTask::text(e.tokens).c_str());
         }
         return kExitOk;
       };
     }}};

}  // namespace
}  // namespace linattn::cli
