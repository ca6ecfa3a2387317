// linattn eval: the accuracy of an encoder classifier (linattn train --task listops|pathfinder|image|speech)
// on a split of its task, the test split by default; linattn listops and linattn pathfinder print a
// split's examples and labels (the data train and eval see, for reading and for checking the generators).
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
#include "linattn/model/dataset.hpp"
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
  std::string model, task = "listops", data;
  model::ListOpsSplit split = model::ListOpsSplit::test;
  int64_t examples = 0, batch = 16, seq_len = 0;
  uint64_t seed = 1;
  int threads = 0;
  bool json = false;
};

// The task, its length and seed: a checkpoint's own unless the flags say otherwise; a model file records
// none of them, so --task (listops by default) and --seq-len are then required. A dataset task's
// sequences are its file's length; its file is always named on the command line (--data).
struct Source {
  std::string task;
  int64_t seq_len = 0;
  uint64_t seed = 1;
  int64_t data_crc = -1;  // the checkpoint's record of its dataset file (-1: none)
};

Source source_of(const CLI::App& app, const EvalArgs& a, const model::ModelFile& f) {
  Source s{a.task, a.seq_len, a.seed};
  if (f.checkpoint) {
    const model::TrainOptions o = model::train_options_from_text(f.train_options);
    if (!model::is_classification_task(o.task))
      throw Error(a.model + " is a checkpoint of task \"" + o.task +
                  "\", expected a checkpoint of a classification task (\"listops\", \"pathfinder\", \"image\" or "
                  "\"speech\": eval scores the encoder classifier of linattn train --task listops|pathfinder|...)");
    if (app.count("--task") && a.task != o.task)
      throw Error(a.model + " is a checkpoint of task \"" + o.task + "\", expected a checkpoint of task \"" + a.task +
                  "\" (--task); drop --task to score it on its own task");
    s.task = o.task;
    if (!app.count("--seq-len")) s.seq_len = o.seq_len;
    if (!app.count("--seed")) s.seed = o.seed;
    s.data_crc = o.data_crc;
  } else {
    if (f.config.classes == 0)
      throw Error(a.model + " is a decoder (a next-token model of " + std::to_string(f.config.vocab_size) +
                  " symbols), expected the encoder classifier of linattn train --task listops|pathfinder|image|speech");
    if (!app.count("--seq-len") && !model::is_dataset_task(s.task))
      throw UsageError("--seq-len: " + a.model +
                       " is a model file, which does not record its training length: give the --seq-len (and --seed) "
                       "it was trained with, or eval its checkpoint");
  }
  if (model::is_dataset_task(s.task) && a.data.empty())
    throw UsageError("--data: " + a.model + " is a classifier of task \"" + s.task +
                     "\", expected its dataset file (--data FILE): a model never chooses a file to read");
  if (!model::is_dataset_task(s.task) && !a.data.empty())
    throw UsageError("--data: " + a.model + " is a classifier of task \"" + s.task +
                     "\", whose data is generated (from --seed), not read from a file: drop --data");
  return s;
}

// The task's splits; a dataset file must be the one the checkpoint recorded.
std::unique_ptr<model::SplitTask> task_of(const EvalArgs& a, Source& s) {
  std::unique_ptr<model::Task> task = model::make_task(s.task, a.data, {}, s.seed);
  if (const auto* file = dynamic_cast<const model::DatasetTask*>(task.get())) {
    if (s.data_crc >= 0 && uint32_t(s.data_crc) != file->dataset().crc)
      throw Error(a.data + " has CRC-32 " + std::to_string(file->dataset().crc) + ", but " + a.model +
                  " was trained on a dataset with CRC-32 " + std::to_string(s.data_crc) +
                  ", expected the same dataset file");
    if (s.seq_len == 0) s.seq_len = file->dataset().seq_len;
  }
  return std::unique_ptr<model::SplitTask>(dynamic_cast<model::SplitTask*>(task.release()));
}

int eval(const CLI::App& app, const EvalArgs& a) {
  set_num_threads(a.threads);
  model::ModelFile f = model::load_model_file(a.model);
  Source s = source_of(app, a, f);
  const std::unique_ptr<model::SplitTask> owned = task_of(a, s);
  const model::SplitTask& task = *owned;
  if (f.vocab != task.tokenizer().vocab() || f.config.classes != task.classes())
    throw Error(a.model + " is a classifier of " + std::to_string(f.config.classes) + " classes over " +
                std::to_string(f.vocab.size()) + " symbols, expected one of task \"" + s.task + "\" (" +
                std::to_string(task.classes()) + " classes over " + std::to_string(task.tokenizer().size()) +
                " symbols" + (f.vocab.size() == size_t(task.tokenizer().size()) ? ", another vocabulary" : "") + ")");
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
                              {"task", s.task},
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
    const std::string what =
        s.task == "listops" ? " expressions of " + std::to_string(s.seq_len / 4) + " to " + std::to_string(s.seq_len) +
                                  " tokens (seed " + std::to_string(s.seed) + ")"
        : model::is_dataset_task(s.task)
            ? " sequences of " + std::to_string(s.seq_len) + " tokens from " + a.data
            : " images of " + std::to_string(s.seq_len) + " pixels (seed " + std::to_string(s.seed) + ")";
    std::printf("eval: %s (%s attention), %s %s split: %" PRId64 "%s: accuracy %.4f (chance %.3g), loss %.4f, %.1f s\n",
                a.model.c_str(), model::attention_name(f.config.attention), s.task.c_str(), split_name(a.split),
                examples, what.c_str(), r.accuracy, 1.0 / double(task.classes()), r.loss, seconds);
  }
  return kExitOk;
}

void add_split_flags(CLI::App& app, model::ListOpsSplit& split, int64_t& examples) {
  app.add_option("--split", split, "train, validation or test (ListOps: LRA's 96,000 / 2,000 / 2,000)")
      ->transform(flags::choice(split_names()))
      ->option_text("NAME");
  app.add_option("--examples", examples, "The split's first N examples (0: all of it)")
      ->check(flags::bounded(0, 160000))
      ->capture_default_str();
}

const Registrar eval_registrar{
    {"eval",
     "Accuracy of an encoder classifier (train --task listops|pathfinder|image|speech) on the test split of its task",
     52, [](CLI::App& app) {
       auto a = std::make_shared<EvalArgs>();
       // Positional or --model (generate's spelling).
       app.add_option("model,--model", a->model,
                      "Model or checkpoint file from linattn train --task listops|pathfinder|image|speech")
           ->required();
       app.add_option("--task", a->task,
                      "The task of a model file (a checkpoint records its own): listops, pathfinder (give "
                      "--seq-len, the image's pixels), image or speech (give --data)")
           ->transform(flags::one_of({"listops", "pathfinder", "image", "speech"}))
           ->capture_default_str();
       app.add_option("--data", a->data,
                      "The dataset file of an image or speech classifier (a checkpoint's must have the CRC-32 it "
                      "recorded)");
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
           "A checkpoint of another task, a decoder model file, a classifier of another vocabulary, or a dataset "
           "file other than the one the checkpoint trained on is refused (exit 1), naming what the file is.");
       flags::examples(app, {"linattn eval listops.model.ckpt", "linattn eval image.model.ckpt --data digits64.ds",
                             "linattn eval listops.model --seq-len 2000 --seed 1 --split validation --json"});
       return [a, &app] { return eval(app, *a); };
     }}};

// The flags of a command that prints a generated split, and its loop over the split's first examples.
void add_printer_flags(CLI::App& app, model::Split& split, int64_t& examples, uint64_t& seed) {
  add_split_flags(app, split, examples);
  app.add_option("--seed", seed, "The seed that fixes the splits (train's --seed)")
      ->check(flags::seed())
      ->capture_default_str();
}
template <class Print>
int print_split(const model::SplitTask& task, model::Split split, int64_t examples, int64_t max_len, Print&& print) {
  const int64_t size = task.split_size(split);
  const int64_t n = examples > 0 ? std::min(examples, size) : size;
  for (int64_t i = 0; i < n; ++i) print(task.example(split, i, max_len));
  return kExitOk;
}

struct ListOpsArgs {
  model::ListOpsSplit split = model::ListOpsSplit::test;
  int64_t examples = 10, seq_len = 2000;
  uint64_t seed = 1;
};

const Registrar listops_registrar{
    {"listops", "Print ListOps expressions and labels of a split (the data of train --task listops)", 53,
     [](CLI::App& app) {
       auto a = std::make_shared<ListOpsArgs>();
       add_printer_flags(app, a->split, a->examples, a->seed);
       app.add_option("--seq-len", a->seq_len, "Longest expression (they run seq-len/4 to seq-len tokens)")
           ->check(flags::bounded(4, limits::kMaxSeqLen))
           ->capture_default_str();
       app.footer("One line per expression: its label (its value, 0-9), a tab, the expression in LRA's spelling.");
       flags::examples(app, {"linattn listops --split test --examples 5 --seq-len 64"});
       return [a] {
         return print_split(model::ListOpsTask(a->seed), a->split, a->examples, a->seq_len,
                            [](const model::LabelledSequence& e) {
                              std::printf("%d\t%s\n", e.label, model::ListOpsTask::text(e.tokens).c_str());
                            });
       };
     }}};

struct PathfinderArgs {
  model::Split split = model::Split::test;
  int64_t examples = 4, image_size = 32;
  uint64_t seed = 1;
};

const Registrar pathfinder_registrar{
    {"pathfinder", "Print Pathfinder images and labels of a split (the data of train --task pathfinder)", 54,
     [](CLI::App& app) {
       auto a = std::make_shared<PathfinderArgs>();
       add_printer_flags(app, a->split, a->examples, a->seed);
       app.add_option("--image-size", a->image_size, "The image side (32: 1,024 pixels; 64: 4,096)")
           ->check(flags::bounded(model::PathfinderTask::kMinSide, model::PathfinderTask::kMaxSide))
           ->capture_default_str();
       app.footer(
           "Per image: a line \"label L\" (1: one curve joins the two dots, 0: it does not), then the image, one "
           "line per row: '.' background, '#' a curve, 'O' a dot; a blank line after it.");
       flags::examples(app, {"linattn pathfinder --split test --examples 3 --image-size 32"});
       return [a] {
         const int64_t side = a->image_size;
         return print_split(model::PathfinderTask(a->seed), a->split, a->examples, side * side,
                            [side](const model::LabelledSequence& e) {
                              std::printf("label %d\n%s\n", e.label,
                                          model::PathfinderTask::text(e.tokens, side).c_str());
                            });
       };
     }}};

}  // namespace
}  // namespace linattn::cli
