// linattn train: trains the small decoder-only transformer (src/model/) on the copy task, MQAR or a
// text file, or its encoder classifier on ListOps, Pathfinder or a dataset file (images, speech), with softmax,
// linear, favor, retnet, gla, deltanet, gated_deltanet, kda, mamba2 or rwkv7 attention (and linformer in the
// encoder); prints
// progress (a bar on a terminal), writes checkpoints, the final model and optionally the loss curve as CSV and the
// accuracy curve as a PNG. Under
// `mpirun -np P ... --seq-parallel` every sequence is split over the P ranks (linattn_mpi's
// distributed::sequence_parallel); rank 0 prints and writes the files.
#include "linattn/model/train.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "commands/mpi_session.hpp"
#include "common/command.hpp"
#include "common/flags.hpp"
#include "common/memory.hpp"
#include "common/output.hpp"
#include "common/paths.hpp"
#include "common/progress.hpp"
#include "linattn/error.hpp"
#include "linattn/file_io.hpp"
#include "linattn/limits.hpp"
#include "linattn/threads.hpp"

#if defined(LINATTN_HAS_MPI)
#include "linattn/distributed/sequence_parallel.hpp"
#endif

namespace linattn::cli {
namespace {

struct TrainArgs {
  model::ModelConfig config;
  model::TrainOptions options;
  std::string attention = "linear";
  std::string resume, out = "linattn.model", csv, plot;
  int64_t log_every = 50, image_size = 32;
  int threads = 0;
  bool seq_parallel = false;
};

std::string duration(double seconds) {
  char text[32];
  const int64_t s = int64_t(seconds + 0.5);
  if (s >= 3600)
    std::snprintf(text, sizeof text, "%" PRId64 "h%02" PRId64 "m", s / 3600, s / 60 % 60);
  else
    std::snprintf(text, sizeof text, "%" PRId64 "m%02" PRId64 "s", s / 60, s % 60);
  return text;
}

// printf and flush, on the rank that speaks (all but rank 0 are quiet under --seq-parallel).
[[gnu::format(printf, 2, 3)]] void say(bool speaks, const char* format, ...) {
  if (!speaks) return;
  va_list values;
  va_start(values, format);
  std::vprintf(format, values);
  va_end(values);
  std::fflush(stdout);
}

// Set by SIGINT / SIGTERM: the loop saves a checkpoint after the step in flight and stops.
volatile std::sig_atomic_t g_stop = 0;
extern "C" void request_stop(int signal) { g_stop = signal; }

// With --resume, a flag given on the command line that fixes the model or the run must agree with the
// checkpoint (a resumed run repeats the original exactly); --steps is the one stated override.
void check_resume_flags(const CLI::App& app, const TrainArgs& a, const model::Trainer& t) {
  const model::ModelConfig& c = t.model().config();
  const model::TrainOptions& o = t.options();
  const std::pair<const char*, std::pair<std::string, std::string>> fixed[] = {
      {"--task", {a.options.task, o.task}},
      {"--attention", {a.attention, model::attention_name(c.attention)}},
      {"--batch", {std::to_string(a.options.batch), std::to_string(o.batch)}},
      {"--seq-len", {std::to_string(a.options.seq_len), std::to_string(o.seq_len)}},
      {"--d-model", {std::to_string(a.config.d_model), std::to_string(c.d_model)}},
      {"--layers", {std::to_string(a.config.layers), std::to_string(c.layers)}},
      {"--heads", {std::to_string(a.config.heads), std::to_string(c.heads)}},
      {"--mlp-hidden", {std::to_string(a.config.mlp_hidden), std::to_string(c.mlp_hidden)}},
      {"--favor-features", {std::to_string(a.config.favor_features), std::to_string(c.favor_features)}},
      {"--chunk-size", {std::to_string(a.config.chunk_size), std::to_string(c.chunk_size)}},
      {"--projected", {std::to_string(a.config.linformer_length), std::to_string(c.linformer_length)}},
      {"--image-size",
       {std::to_string(a.image_size),
        o.task == "pathfinder" ? std::to_string(model::check_pathfinder_length(o.seq_len)) : "none (not pathfinder)"}},
      {"--seed", {std::to_string(a.options.seed), std::to_string(o.seed)}},
      {"--init-seed", {std::to_string(a.config.init_seed), std::to_string(c.init_seed)}},
      {"--warmup", {std::to_string(a.options.warmup), std::to_string(o.warmup)}},
      {"--lr", {std::to_string(a.options.lr), std::to_string(o.lr)}},
      {"--min-lr", {std::to_string(a.options.min_lr), std::to_string(o.min_lr)}},
      {"--weight-decay", {std::to_string(a.options.weight_decay), std::to_string(o.weight_decay)}},
      {"--clip", {std::to_string(a.options.clip), std::to_string(o.clip)}}};
  for (const auto& [flag, values] : fixed)
    if (app.count(flag) > 0 && values.first != values.second)
      throw UsageError(std::string(flag) + " is " + values.first + ", but the checkpoint " + a.resume + " has " +
                       values.second + ": a resumed run keeps the checkpoint's model and options (drop " + flag +
                       "; only --steps may change)");
}

// The length a task fixes: pathfinder's --image-size squared, a dataset file's own; --seq-len, when given,
// must say the same.
void sequence_length(const CLI::App& app, TrainArgs& a) {
  const std::string& task = a.options.task;
  if (app.count("--image-size") > 0 && task != "pathfinder")
    throw UsageError("--image-size is pathfinder's, but --task is " + task + ": drop --image-size");
  if (task != "pathfinder" && !model::is_dataset_task(task)) return;
  int64_t fixed = a.image_size * a.image_size;
  std::string why = "--image-size " + std::to_string(a.image_size);
  if (model::is_dataset_task(task)) {
    fixed = model::load_dataset(a.options.data).seq_len;  // a bad file is named here, before anything is written
    why = a.options.data + "'s sequence length";
  }
  if (app.count("--seq-len") > 0 && a.options.seq_len != fixed)
    throw UsageError("--seq-len is " + std::to_string(a.options.seq_len) + ", but " + why + " gives " +
                     std::to_string(fixed) + " tokens: drop --seq-len");
  a.options.seq_len = fixed;
}

// What a classification task's sequences are, for the first lines of a run.
std::string data_summary(const model::TrainOptions& o) {
  if (o.task == "listops")
    return "expressions of " + std::to_string(o.seq_len / 4) + " to " + std::to_string(o.seq_len) + " tokens";
  if (o.task == "pathfinder") {
    const int64_t side = model::check_pathfinder_length(o.seq_len);
    return std::to_string(side) + " x " + std::to_string(side) + " images, " + std::to_string(o.seq_len) +
           " pixels a sequence";
  }
  return "sequences of " + std::to_string(o.seq_len) + " tokens from " + o.data + " (CRC-32 " +
         std::to_string(o.data_crc) + ")";
}

// gnuplot's script for --plot: the validation accuracy at each evaluation and the training loss, by step.
std::string curve_plot(const model::Trainer& trainer, const std::string& rows, const std::string& stem) {
  const model::TrainOptions& o = trainer.options();
  const int64_t classes = trainer.model().config().classes;
  std::string s = "set terminal pngcairo size 900,600 font ',10'\n" + plot_output(stem);
  s += "set title \"linattn train --task " + o.task + " --attention " +
       model::attention_name(trainer.model().config().attention) + ": validation accuracy\"\n";
  s += "set xlabel 'step'\nset ylabel 'validation accuracy'\nset yrange [0:1]\nset y2label 'training loss'\n"
       "set y2tics\nset ytics nomirror\nset grid\nset key bottom right\nset datafile missing 'nan'\n";
  s += "$curve << EOD\n" + rows + "EOD\n";
  s += "plot $curve using 1:3 with linespoints pt 7 title 'validation accuracy', "
       "$curve using 1:2 axes x1y2 with lines title 'training loss (mean since the last point)'";
  if (classes > 0) s += ", " + std::to_string(1.0 / double(classes)) + " dt 2 title 'chance'";
  return s + "\n";
}

// parallel: the ranks the sequences are split over (null: this process alone).
int train(const CLI::App& app, TrainArgs& a, std::shared_ptr<const model::SequenceParallel> parallel) {
  set_num_threads(a.threads);
  // Every rank trains; rank 0 alone prints and writes files (the others' copies are the same bits).
  const bool speaks = !parallel || parallel->rank() == 0;
  const bool resuming = !a.resume.empty();
  // Issue 41's names: performer is favor.
  if (a.attention == "performer") a.attention = "favor";
  if (!resuming && a.attention == "linformer" && !model::is_classification_task(a.options.task))
    throw UsageError("--attention linformer: task " + a.options.task +
                     " trains the decoder, whose attention is causal, and Linformer has no causal form (each "
                     "projected key mixes every position, later ones included); it trains the encoder of "
                     "--task listops, pathfinder, image or speech");
  if (!resuming && (a.attention == "mamba2" || a.attention == "rwkv7") && model::is_classification_task(a.options.task))
    throw UsageError("--attention " + a.attention + ": task " + a.options.task +
                     " trains the encoder classifier, and " + a.attention +
                     " runs in the decoder only (a next-token task: copy, mqar, text); for the encoder pick retnet, "
                     "gla or a delta kind, which run in both directions");
  if (!resuming && app.count("--projected") > 0 && a.attention != "linformer")
    throw UsageError("--projected applies to --attention linformer only: drop it");
  if (resuming) {
    // A resumed run takes its config and options from the checkpoint, so that it repeats exactly;
    // the paths (data, checkpoints) come from this command line, never from the file.
    if (app.count("--checkpoint-every") > 0 || app.count("--eval-every") > 0 || app.count("--eval-batches") > 0)
      throw UsageError("--checkpoint-every/--eval-every/--eval-batches: a resumed run keeps the checkpoint's");
  } else {
    a.config.attention = model::attention_by_name(a.attention);
    const bool reads_file = a.options.task == "text" || model::is_dataset_task(a.options.task);
    if (reads_file && a.options.data.empty()) throw UsageError("--task " + a.options.task + " needs --data FILE");
    // A generated task given a file would train on its generator while the user believes it read the file.
    if (!reads_file && !a.options.data.empty())
      throw UsageError("--data: --task " + a.options.task +
                       " generates its data (from --seed), it reads no file: drop --data, or pick the task of the "
                       "file (text, image or speech)");
    sequence_length(app, a);
    // The default --min-lr follows a smaller --lr down; one given is never changed behind the user's back.
    if (a.options.min_lr > a.options.lr) {
      if (app.count("--min-lr") > 0)
        throw UsageError("--min-lr is " + flags::number(a.options.min_lr) + ", greater than --lr " +
                         flags::number(a.options.lr) + ": the cosine ends at --min-lr, expected ≤ --lr");
      a.options.min_lr = a.options.lr;
    }
    // A killed run loses at most --checkpoint-every steps: checkpoints go beside the model by default.
    if (a.options.checkpoint.empty()) a.options.checkpoint = a.out + ".ckpt";
    // Flags that do not fit together are usage errors (exit 2), found before any data is read.
    try {
      model::ModelConfig shape = a.config;
      shape.vocab_size = 1;
      if (model::is_classification_task(a.options.task)) shape.classes = 2;  // the task's count comes later
      shape.max_seq_len = a.options.seq_len;
      model::check_config(shape);
      model::check_train_options(a.options);
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
  }
  // The final model written over the checkpoint lost the training state; the checkpoint may be the
  // file resumed (a run continues in place), no other file written may be one the run reads.
  const std::string checkpoint = resuming && a.options.checkpoint.empty() ? a.resume : a.options.checkpoint;
  const NamedFile out{"--out", a.out}, csv{"--csv", a.csv}, plot{"--plot", a.plot}, data{"--data", a.options.data};
  check_distinct({out, {resuming && !app.count("--checkpoint") ? "--resume" : "--checkpoint", checkpoint}, csv, plot},
                 {data});
  check_distinct({out, csv, plot}, {{"--resume", a.resume}});
  if (!a.plot.empty() && std::filesystem::path(a.plot).extension() != ".png")
    throw UsageError("--plot is " + a.plot + ", expected a .png file (gnuplot's script goes beside it as .gp)");
  const int ranks = parallel ? parallel->ranks() : 1;
  auto check_training_memory = [&](const model::ModelConfig& config, const model::TrainOptions& options) {
    check_memory(model::estimated_training_bytes(config, options, ranks),
                 "train (" + std::to_string(model::param_count(config)) + " parameters, batch " +
                     std::to_string(options.batch) + " x " + std::to_string(options.seq_len) + " tokens)");
  };
  if (!resuming) {  // before the weights are allocated; the vocabulary is at most 256 symbols
    model::ModelConfig largest = a.config;
    largest.vocab_size = 256;
    largest.max_seq_len = a.options.seq_len;  // linformer's projections span it
    check_training_memory(largest, a.options);
  }
  model::Trainer trainer =
      resuming ? model::Trainer::resume(a.resume,
                                        model::ResumeOptions{a.options.data, a.options.checkpoint,
                                                             app.count("--steps") ? a.options.steps : 0},
                                        parallel)
               : model::Trainer(a.config, a.options, parallel);
  if (resuming) {
    check_resume_flags(app, a, trainer);
    // The weights are read; a step's activations, the large part, are not yet allocated.
    check_training_memory(trainer.model().config(), trainer.options());
  }
  const model::ModelConfig& c = trainer.model().config();
  const model::TrainOptions& o = trainer.options();
  say(speaks,
      "train: task %s%s%s, attention %s, d_model %" PRId64 ", layers %" PRId64 ", heads %" PRId64
      ", %zu parameters; batch %" PRId64 " x %" PRId64 " tokens, %" PRId64 " steps%s\n",
      o.task.c_str(), o.data.empty() ? "" : " ", o.data.c_str(), model::attention_name(c.attention), c.d_model,
      c.layers, c.heads, trainer.model().params().size(), o.batch, o.seq_len, o.steps,
      resuming ? (" (resumed at step " + std::to_string(trainer.step()) + ")").c_str() : "");
  if (c.classes > 0)
    say(speaks,
        "encoder classifier: non-causal attention%s, the mean over each sequence's tokens, a head to %" PRId64
        " classes; %s\n",
        model::is_decayed(c.attention) || model::is_delta(c.attention) ? " (this kind runs both directions, summed)"
                                                                       : "",
        c.classes, data_summary(o).c_str());
  if (parallel) {
    const model::ShardRange first = model::shard_range(o.seq_len, 0, parallel->ranks());
    say(speaks,
        "sequence parallel: %d ranks, each holding %" PRId64 "%s tokens of every sequence (rank 0 positions 0..%" PRId64
        ")\n",
        parallel->ranks(), first.length, o.seq_len % parallel->ranks() ? " or one fewer" : "", first.length - 1);
  }
  if (resuming && app.count("--steps"))
    say(speaks, "steps: %" PRId64 " (--steps overrides the checkpoint's; the learning-rate schedule follows it)\n",
        o.steps);
  say(speaks, "model: %s%s; checkpoints: %s every %" PRId64 " steps and on SIGINT/SIGTERM\n", a.out.c_str(),
      app.count("--out") ? "" : " (the default; --out FILE to choose)", o.checkpoint.c_str(),
      o.checkpoint_every > 0 ? o.checkpoint_every : o.steps);
  std::signal(SIGINT, request_stop);
  std::signal(SIGTERM, request_stop);
  std::string curve = "step,loss,lr,grad_norm,tokens_per_s,eval_loss,eval_bits_per_token,eval_accuracy\n";
  std::optional<model::EvalResult> last_eval;
  // The run reports every step: a bar (on a terminal) moves each step, and the lines and the curve's
  // rows come every --log-every steps and at each evaluation, each with the mean loss since the last.
  Progress bar(int(std::min<int64_t>(o.steps - trainer.step(), int64_t(1) << 26)), speaks);
  double loss_sum = 0;
  int64_t loss_count = 0;
  std::string plot_rows;  // step, mean training loss, validation accuracy (or NaN)
  const bool finished = trainer.run(
      [&](const model::Progress& p) {
        loss_sum += p.loss;
        ++loss_count;
        char row[256];
        std::snprintf(row, sizeof row, "step %" PRId64 "/%" PRId64 " loss %.4f ETA %s", p.step, p.steps, p.loss,
                      duration(p.eta_s).c_str());
        bar.step(row);
        if (p.step % a.log_every != 0 && !p.eval) return;
        const double loss = loss_sum / double(loss_count);
        loss_sum = 0;
        loss_count = 0;
        bar.clear();
        if (p.eval) last_eval = p.eval;
        say(speaks, "step %6" PRId64 "/%" PRId64 "  loss %.4f  lr %.2e  tok/s %8.0f  ETA %s", p.step, p.steps, loss,
            p.lr, p.tokens_per_s, duration(p.eta_s).c_str());
        std::snprintf(row, sizeof row, "%" PRId64 " %.6f %.6f\n", p.step, loss, p.eval ? p.eval->accuracy : NAN);
        plot_rows += row;
        std::snprintf(row, sizeof row, "%" PRId64 ",%.6f,%.6g,%.4f,%.1f", p.step, loss, p.lr, p.grad_norm,
                      p.tokens_per_s);
        curve += row;
        if (p.eval) {
          say(speaks, "  | held-out loss %.4f (%.3f bits/token) accuracy %.4f", p.eval->loss, p.eval->bits_per_token(),
              p.eval->accuracy);
          std::snprintf(row, sizeof row, ",%.6f,%.6f,%.6f", p.eval->loss, p.eval->bits_per_token(), p.eval->accuracy);
          curve += row;
        } else {
          curve += ",,,";
        }
        curve += "\n";
        say(speaks, "\n");
      },
      1, [] { return g_stop != 0; });
  bar.clear();
  if (!finished) {
    say(speaks,
        "stopped by a signal at step %" PRId64 ": checkpoint %s (continue with: linattn train --resume %s%s%s)\n",
        trainer.step(), o.checkpoint.c_str(), o.checkpoint.c_str(), o.data.empty() ? "" : " --data ", o.data.c_str());
    return 128 + int(g_stop ? g_stop : SIGTERM);  // the shell's code for a command ended by that signal  // the shell's
                                                  // code for a command ended by that signal
  }
  if (o.task == "mqar" && last_eval)
    say(speaks,
        "mqar: %" PRId64 " pairs, %" PRId64 " symbols: held-out accuracy on the answers %.4f (%" PRId64
        " sequences x %" PRId64 " answers), loss %.4f\n",
        o.mqar.pairs, o.mqar.vocab, last_eval->accuracy, o.eval_batches * o.batch, o.mqar.pairs, last_eval->loss);
  if (c.classes > 0 && last_eval) {
    const auto& task = dynamic_cast<const model::SplitTask&>(trainer.task());
    say(speaks,
        "%s: validation accuracy %.4f over %" PRId64 " %s (chance %.3g), loss %.4f; test split: linattn eval %s%s%s\n",
        o.task.c_str(), last_eval->accuracy,
        std::min<int64_t>(o.eval_batches * o.batch, task.split_size(model::Split::validation)),
        o.task == "listops" ? "expressions" : "sequences", 1.0 / double(c.classes), last_eval->loss,
        o.checkpoint.c_str(), o.data.empty() || o.task == "text" ? "" : " --data ",
        o.task == "text" ? "" : o.data.c_str());
  }
  if (!speaks) return kExitOk;
  trainer.save_model(a.out);
  say(speaks, "model: %s\n", a.out.c_str());
  say(speaks, "checkpoint: %s\n", o.checkpoint.c_str());
  if (!a.csv.empty()) {
    write_file_atomically(a.csv, curve);
    say(speaks, "loss curve: %s\n", a.csv.c_str());
  }
  if (!a.plot.empty()) {
    const std::filesystem::path png = std::filesystem::absolute(a.plot);
    write_plot(png.parent_path(), png.stem().string(), curve_plot(trainer, plot_rows, png.stem().string()));
  }
  return kExitOk;
}

// --seq-parallel: MPI for the command's lifetime, and a failure on any rank ends every rank (the
// others may be waiting in a collective for it), naming the rank.
int train_command(const CLI::App& app, TrainArgs& a) {
  if (!a.seq_parallel) return train(app, a, nullptr);
#if defined(LINATTN_HAS_MPI)
  MpiSession session;
  const std::shared_ptr<const model::SequenceParallel> parallel = distributed::sequence_parallel(MPI_COMM_WORLD);
  try {
    return train(app, a, parallel);
  } catch (const std::exception& e) {
    if (parallel->ranks() == 1) throw;
    std::fprintf(stderr, "linattn: rank %d: train --seq-parallel: %s\n", parallel->rank(), e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, dynamic_cast<const UsageError*>(&e) ? kExitUsage : kExitFailed);
    return kExitFailed;
  }
#else
  throw UsageError("--seq-parallel: this linattn was built without MPI (configure with -DLINATTN_MPI=ON)");
#endif
}

const Registrar registrar{
    {"train",
     "Train the small transformer (softmax, linear, favor, retnet, gla, deltanet, gated_deltanet, kda, mamba2 or "
     "rwkv7 attention) on the copy task, MQAR or a text, or its encoder classifier on ListOps",
     50, [](CLI::App& app) {
       auto a = std::make_shared<TrainArgs>();
       model::TrainOptions& o = a->options;
       model::ModelConfig& c = a->config;
       o.checkpoint_every = 500;  // the command's default: a killed run loses at most 500 steps
       app.add_option("--task", o.task,
                      "copy (repeat the first half), mqar (multi-query associative recall: key-value pairs, then "
                      "queries of the keys), text (character level, needs --data), or a classification task, "
                      "which trains the encoder classifier: listops (LRA's ListOps, 10 classes, expressions of "
                      "seq-len/4 to seq-len tokens, splits fixed by --seed), pathfinder (LRA's Pathfinder: are the "
                      "two dots joined? --image-size squared pixels, splits fixed by --seed), image or speech (a "
                      "dataset file, --data FILE: docs/datasets.md)")
           ->transform(flags::one_of({"copy", "mqar", "text", "listops", "pathfinder", "image", "speech"}))
           ->capture_default_str();
       app.add_option("--mqar-pairs", o.mqar.pairs, "MQAR: key-value pairs per sequence (--seq-len must be >= 4x)")
           ->check(flags::bounded(1, 94))
           ->capture_default_str();
       app.add_option("--mqar-vocab", o.mqar.vocab, "MQAR: symbols, half keys and half values (even, <= 188)")
           ->check(flags::bounded(2, 188))
           ->capture_default_str();
       app.add_option("--data", o.data,
                      "Text file for --task text (e.g. data/devils_dictionary.txt); dataset file for --task image "
                      "or speech (scripts/applications/make_image_data.py writes one)");
       app.add_option("--image-size", a->image_size,
                      "Pathfinder: the image side (32: 1,024 pixels; 64: 4,096); --seq-len is its square")
           ->check(flags::bounded(model::PathfinderTask::kMinSide, model::PathfinderTask::kMaxSide))
           ->capture_default_str();
       app.add_option("--attention", a->attention,
                      "softmax, linear (elu+1), favor or performer (Performer), retnet (retention, a fixed decay per "
                      "head), gla (gated linear attention, a learned decay per key dimension), deltanet (the delta "
                      "rule), gated_deltanet (the delta rule with a learned decay per head), kda (Kimi Delta "
                      "Attention: a learned decay per key dimension), mamba2 (the decoder only: Mamba-2's SSD mixer, "
                      "a decay dt·A per head and token, a D skip), rwkv7 (the decoder only: RWKV-7's generalized "
                      "delta rule, a decay per key dimension), or linformer (the encoder only: keys and values "
                      "projected to --projected positions, then softmax). In the encoder (the classification "
                      "tasks) the recurrent kinds, retnet, gla and the delta kinds, run in both directions and add "
                      "the two outputs; softmax, linear, favor and linformer attend non-causally")
           ->transform(flags::one_of({"softmax", "linear", "favor", "performer", "linformer", "retnet", "gla",
                                      "deltanet", "gated_deltanet", "kda", "mamba2", "rwkv7"}))
           ->capture_default_str();
       app.add_option("--steps", o.steps, "Optimizer steps")
           ->check(flags::bounded(1, limits::kMaxSteps))
           ->capture_default_str();
       app.add_option("--batch", o.batch, "Sequences per step")
           ->check(flags::bounded(1, limits::kMaxBatch))
           ->capture_default_str();
       app.add_option("--seq-len", o.seq_len, "Tokens per sequence")
           ->check(flags::bounded(2, limits::kMaxSeqLen))
           ->capture_default_str();
       app.add_option("--lr", o.lr, "Peak learning rate")->check(flags::positive())->capture_default_str();
       app.add_option("--min-lr", o.min_lr, "Learning rate at the end of the cosine")
           ->check(flags::non_negative())
           ->capture_default_str();
       app.add_option("--warmup", o.warmup, "Linear warmup steps")
           ->check(flags::bounded(0, limits::kMaxSteps))
           ->capture_default_str();
       app.add_option("--weight-decay", o.weight_decay, "AdamW decoupled weight decay")
           ->check(flags::non_negative())
           ->capture_default_str();
       app.add_option("--clip", o.clip, "Global gradient-norm clip (0: none)")
           ->check(flags::non_negative())
           ->capture_default_str();
       app.add_option("--seed", o.seed, "Data seed (batches are a function of seed and step)")
           ->check(flags::seed())
           ->capture_default_str();
       app.add_option("--init-seed", c.init_seed, "Weight initialisation seed")
           ->check(flags::seed())
           ->capture_default_str();
       app.add_option("--d-model", c.d_model, "Model width C")->check(flags::bounded(1, 4096))->capture_default_str();
       app.add_option("--layers", c.layers, "Blocks")->check(flags::bounded(1, 64))->capture_default_str();
       app.add_option("--heads", c.heads, "Attention heads (must divide --d-model)")
           ->check(flags::bounded(1, 256))
           ->capture_default_str();
       app.add_option("--mlp-hidden", c.mlp_hidden, "MLP inner width")
           ->check(flags::bounded(1, 65536))
           ->capture_default_str();
       app.add_option("--favor-features", c.favor_features, "Performer random features per head")
           ->check(flags::bounded(1, limits::kMaxFavorFeatures))
           ->capture_default_str();
       app.add_option("--chunk-size", c.chunk_size, "Causal linear / decayed / delta attention chunk")
           ->check(flags::bounded(1, limits::kMaxChunkSize))
           ->capture_default_str();
       app.add_option("--projected", c.linformer_length,
                      "Linformer: projected length P (keys and values are projected from --seq-len positions to P "
                      "by learned E, F per layer and head)")
           ->check(flags::bounded(1, 4096))
           ->capture_default_str();
       app.add_option("--eval-every", o.eval_every, "Held-out evaluation every N steps (0: at the end only)")
           ->check(flags::bounded(0, limits::kMaxSteps))
           ->capture_default_str();
       app.add_option("--eval-batches", o.eval_batches, "Held-out batches per evaluation")
           ->check(flags::bounded(1, limits::kMaxEvalBatches))
           ->capture_default_str();
       app.add_option("--checkpoint", o.checkpoint,
                      "Checkpoint file (weights, AdamW state, step, options); default: --out's path + .ckpt, with "
                      "--resume: the resumed file");
       app.add_option("--checkpoint-every", o.checkpoint_every,
                      "Checkpoint every N steps (0: at the end only); also on SIGINT/SIGTERM")
           ->check(flags::bounded(0, limits::kMaxSteps))
           ->capture_default_str();
       app.add_option("--resume", a->resume,
                      "Continue the run saved in this checkpoint: its model and options (flags that differ are an "
                      "error; --steps extends the run; --data must name the text file again)");
       app.add_option("--out", a->out, "Write the trained model here (for linattn generate)")->capture_default_str();
       app.add_option("--csv", a->csv, "Write the loss curve (one row per report) here");
       app.add_option("--plot", a->plot,
                      "Draw the validation accuracy (at each --eval-every) and the training loss as a PNG here, "
                      "with gnuplot (its script beside it, .gp); no gnuplot: a warning, the run still succeeds");
       app.add_option("--log-every", a->log_every, "Print progress every N steps")
           ->check(flags::at_least(1))
           ->capture_default_str();
       app.add_option("--threads", a->threads, "Threads (linattn::set_num_threads); 0: the default")
           ->check(flags::threads());
       app.add_flag("--seq-parallel", a->seq_parallel,
                    "Under mpirun -np P: split every sequence over the P ranks (sequence parallelism; the losses are "
                    "one process's; rank 0 prints and writes the files)");
       flags::examples(app,
                       {"linattn train --task copy --attention linear --steps 3000 --out copy.model",
                        "linattn train --task listops --attention gated_deltanet --seq-len 2000 --out listops.model",
                        "linattn train --task pathfinder --image-size 32 --attention linear --out pf32.model",
                        "linattn train --task image --data digits64.ds --attention softmax --out image.model",
                        "linattn train --task text --data data/devils_dictionary.txt --attention softmax --out "
                        "text.model",
                        "linattn train --resume copy.model.ckpt --out copy.model   # after Ctrl-C or a kill",
                        "linattn train --resume copy.model.ckpt --steps 6000 --out copy.model",
                        "mpirun -np 4 linattn train --seq-parallel --task copy --attention gated_deltanet "
                        "--seq-len 1024 --threads 1"});
       return [a, &app] { return train_command(app, *a); };
     }}};

}  // namespace
}  // namespace linattn::cli
