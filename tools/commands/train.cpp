// linattn train: trains the small decoder-only transformer (src/model/) on the copy task, MQAR or a
// text file with softmax, linear, favor, retnet, gla, deltanet, gated_deltanet or kda attention; prints
// progress, writes checkpoints, the final model and optionally the loss curve as CSV.
#include "linattn/model/train.hpp"

#include <CLI/CLI.hpp>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "common/command.hpp"
#include "linattn/error.hpp"
#include "linattn/file_io.hpp"
#include "linattn/threads.hpp"

namespace linattn::cli {
namespace {

struct TrainArgs {
  model::ModelConfig config;
  model::TrainOptions options;
  std::string attention = "linear";
  std::string resume, out, csv;
  int64_t log_every = 50;
  int threads = 0;
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

int train(TrainArgs& a) {
  set_num_threads(a.threads);
  if (!a.resume.empty()) {
    // A resumed run takes its config and options from the checkpoint, so that it repeats exactly.
  } else {
    a.config.attention = model::attention_by_name(a.attention);
    if (a.options.task == "text" && a.options.data.empty()) throw UsageError("--task text needs --data FILE");
    if (a.options.min_lr > a.options.lr) a.options.min_lr = a.options.lr;
    // Flags that do not fit together are usage errors (exit 2), found before any data is read.
    try {
      model::ModelConfig shape = a.config;
      shape.vocab_size = 1;
      model::check_config(shape);
      model::check_train_options(a.options);
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
  }
  model::Trainer trainer = a.resume.empty() ? model::Trainer(a.config, a.options) : model::Trainer::resume(a.resume);
  const model::ModelConfig& c = trainer.model().config();
  const model::TrainOptions& o = trainer.options();
  std::printf("train: task %s%s%s, attention %s, d_model %" PRId64 ", layers %" PRId64 ", heads %" PRId64
              ", %zu parameters; batch %" PRId64 " x %" PRId64 " tokens, %" PRId64 " steps%s\n",
              o.task.c_str(), o.data.empty() ? "" : " ", o.data.c_str(), model::attention_name(c.attention), c.d_model,
              c.layers, c.heads, trainer.model().params().size(), o.batch, o.seq_len, o.steps,
              a.resume.empty() ? "" : (" (resumed at step " + std::to_string(trainer.step()) + ")").c_str());
  std::fflush(stdout);
  std::string curve = "step,loss,lr,grad_norm,tokens_per_s,eval_loss,eval_bits_per_token,eval_accuracy\n";
  std::optional<model::EvalResult> last_eval;
  trainer.run(
      [&](const model::Progress& p) {
        if (p.eval) last_eval = p.eval;
        std::printf("step %6" PRId64 "/%" PRId64 "  loss %.4f  lr %.2e  tok/s %8.0f  ETA %s", p.step, p.steps, p.loss,
                    p.lr, p.tokens_per_s, duration(p.eta_s).c_str());
        char row[256];
        std::snprintf(row, sizeof row, "%" PRId64 ",%.6f,%.6g,%.4f,%.1f", p.step, p.loss, p.lr, p.grad_norm,
                      p.tokens_per_s);
        curve += row;
        if (p.eval) {
          std::printf("  | held-out loss %.4f (%.3f bits/token) accuracy %.4f", p.eval->loss, p.eval->bits_per_token(),
                      p.eval->accuracy);
          std::snprintf(row, sizeof row, ",%.6f,%.6f,%.6f", p.eval->loss, p.eval->bits_per_token(), p.eval->accuracy);
          curve += row;
        } else {
          curve += ",,,";
        }
        curve += "\n";
        std::printf("\n");
        std::fflush(stdout);
      },
      a.log_every);
  if (o.task == "mqar" && last_eval)
    std::printf("mqar: %" PRId64 " pairs, %" PRId64 " symbols: held-out accuracy on the answers %.4f (%" PRId64
                " sequences x %" PRId64 " answers), loss %.4f\n",
                o.mqar.pairs, o.mqar.vocab, last_eval->accuracy, o.eval_batches * o.batch, o.mqar.pairs,
                last_eval->loss);
  if (!a.out.empty()) {
    trainer.save_model(a.out);
    std::printf("model: %s\n", a.out.c_str());
  }
  if (!o.checkpoint.empty()) std::printf("checkpoint: %s\n", o.checkpoint.c_str());
  if (!a.csv.empty()) {
    write_file_atomically(a.csv, curve);
    std::printf("loss curve: %s\n", a.csv.c_str());
  }
  return kExitOk;
}

const Registrar registrar{
    {"train",
     "Train the small transformer (softmax, linear, favor, retnet, gla, deltanet, gated_deltanet or kda attention) "
     "on the copy task, MQAR or a text",
     50, [](CLI::App& app) {
       auto a = std::make_shared<TrainArgs>();
       model::TrainOptions& o = a->options;
       model::ModelConfig& c = a->config;
       app.add_option("--task", o.task,
                      "copy (repeat the first half), mqar (multi-query associative recall: key-value pairs, then "
                      "queries of the keys) or text (character level, needs --data)")
           ->check(CLI::IsMember({"copy", "mqar", "text"}))
           ->capture_default_str();
       app.add_option("--mqar-pairs", o.mqar.pairs, "MQAR: key-value pairs per sequence (--seq-len must be >= 4x)")
           ->check(CLI::Range(1, 94))
           ->capture_default_str();
       app.add_option("--mqar-vocab", o.mqar.vocab, "MQAR: symbols, half keys and half values (even, <= 188)")
           ->check(CLI::Range(2, 188))
           ->capture_default_str();
       app.add_option("--data", o.data, "Text file for --task text (e.g. data/devils_dictionary.txt)");
       app.add_option("--attention", a->attention,
                      "softmax, linear (elu+1), favor (Performer), retnet (retention, a fixed decay per head), gla "
                      "(gated linear attention, a learned decay per key dimension), deltanet (the delta rule), "
                      "gated_deltanet (the delta rule with a learned decay per head) or kda (Kimi Delta Attention: "
                      "a learned decay per key dimension)")
           ->check(CLI::IsMember({"softmax", "linear", "favor", "retnet", "gla", "deltanet", "gated_deltanet", "kda"}))
           ->capture_default_str();
       app.add_option("--steps", o.steps, "Optimizer steps")->check(CLI::PositiveNumber)->capture_default_str();
       app.add_option("--batch", o.batch, "Sequences per step")->check(CLI::PositiveNumber)->capture_default_str();
       app.add_option("--seq-len", o.seq_len, "Tokens per sequence")
           ->check(CLI::Range(2, 1 << 20))
           ->capture_default_str();
       app.add_option("--lr", o.lr, "Peak learning rate")->check(CLI::PositiveNumber)->capture_default_str();
       app.add_option("--min-lr", o.min_lr, "Learning rate at the end of the cosine")
           ->check(CLI::NonNegativeNumber)
           ->capture_default_str();
       app.add_option("--warmup", o.warmup, "Linear warmup steps")
           ->check(CLI::NonNegativeNumber)
           ->capture_default_str();
       app.add_option("--weight-decay", o.weight_decay, "AdamW decoupled weight decay")
           ->check(CLI::NonNegativeNumber)
           ->capture_default_str();
       app.add_option("--clip", o.clip, "Global gradient-norm clip (0: none)")
           ->check(CLI::NonNegativeNumber)
           ->capture_default_str();
       app.add_option("--seed", o.seed, "Data seed (batches are a function of seed and step)")->capture_default_str();
       app.add_option("--init-seed", c.init_seed, "Weight initialisation seed")->capture_default_str();
       app.add_option("--d-model", c.d_model, "Model width C")->check(CLI::Range(1, 4096))->capture_default_str();
       app.add_option("--layers", c.layers, "Blocks")->check(CLI::Range(1, 64))->capture_default_str();
       app.add_option("--heads", c.heads, "Attention heads (must divide --d-model)")
           ->check(CLI::Range(1, 256))
           ->capture_default_str();
       app.add_option("--mlp-hidden", c.mlp_hidden, "MLP inner width")
           ->check(CLI::Range(1, 65536))
           ->capture_default_str();
       app.add_option("--favor-features", c.favor_features, "Performer random features per head")
           ->check(CLI::Range(1, 65536))
           ->capture_default_str();
       app.add_option("--chunk-size", c.chunk_size, "Causal linear / decayed / delta attention chunk")
           ->check(CLI::Range(1, 65536))
           ->capture_default_str();
       app.add_option("--eval-every", o.eval_every, "Held-out evaluation every N steps (0: at the end only)")
           ->check(CLI::NonNegativeNumber)
           ->capture_default_str();
       app.add_option("--eval-batches", o.eval_batches, "Held-out batches per evaluation")
           ->check(CLI::PositiveNumber)
           ->capture_default_str();
       app.add_option("--checkpoint", o.checkpoint, "Checkpoint file (weights, AdamW state, step, options)");
       app.add_option("--checkpoint-every", o.checkpoint_every, "Checkpoint every N steps (0: at the end only)")
           ->check(CLI::NonNegativeNumber)
           ->capture_default_str();
       app.add_option("--resume", a->resume, "Continue the run saved in this checkpoint (its options win)");
       app.add_option("--out", a->out, "Write the trained model here (for linattn generate)");
       app.add_option("--csv", a->csv, "Write the loss curve (one row per report) here");
       app.add_option("--log-every", a->log_every, "Print progress every N steps")
           ->check(CLI::PositiveNumber)
           ->capture_default_str();
       app.add_option("--threads", a->threads, "Threads (linattn::set_num_threads); 0: the default")
           ->check(CLI::NonNegativeNumber);
       return [a] { return train(*a); };
     }}};

}  // namespace
}  // namespace linattn::cli
