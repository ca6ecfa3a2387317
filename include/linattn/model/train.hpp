#pragma once
// The training loop: batches from a task, forward, backward, clipping, AdamW on a warmup + cosine
// schedule, periodic evaluation and checkpoints. Deterministic given the seed: a run resumed from
// a checkpoint takes the same steps, bit for bit, as one that was never interrupted.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "linattn/model/config.hpp"
#include "linattn/model/data.hpp"
#include "linattn/model/dataset.hpp"
#include "linattn/model/optimizer.hpp"
#include "linattn/model/sequence_parallel.hpp"
#include "linattn/model/transformer.hpp"

namespace linattn::model {

struct TrainOptions {
  // "copy", "text", "mqar", or a classification task (the encoder): "listops", "pathfinder" (an image of
  // sqrt(seq_len)² pixels), "image" or "speech" (a dataset file, dataset.hpp)
  std::string task = "copy";
  std::string data;       // the text file (task "text") or the dataset file (tasks "image", "speech")
  int64_t data_crc = -1;  // a dataset file's CRC-32, recorded on the first run (-1: not read yet)
  MqarShape mqar;         // task "mqar": key–value pairs and symbols (stored only for that task)
  int64_t steps = 1000, batch = 16, seq_len = 128, warmup = 100;
  double lr = 1e-3, min_lr = 1e-4, weight_decay = 0.01, clip = 1.0;
  uint64_t seed = 1;
  int64_t eval_every = 0, eval_batches = 8;  // 0: evaluate only at the end
  std::string checkpoint;                    // where checkpoints go ("": none)
  int64_t checkpoint_every = 0;              // 0: only at the end
};
// Throws linattn::Error naming the first bad option.
void check_train_options(const TrainOptions& options);
// The bytes a Trainer of this config and these options reaches, erring high: the weights, gradients
// and AdamW moments, a checkpoint being written, and a step's activations over batch × this rank's
// share of seq_len tokens (with an allowance for the attention operators' scratch). For refusing a
// run before it allocates (a checkpoint with batch 65536 passes every bound).
double estimated_training_bytes(const ModelConfig& config, const TrainOptions& options, int ranks = 1);
std::string train_options_to_text(const TrainOptions& options);
TrainOptions train_options_from_text(std::string_view text);

struct EvalResult {
  double loss = 0;      // mean weighted cross-entropy, nats per token
  double accuracy = 0;  // argmax = target, over the weighted positions
  double bits_per_token() const;
};

// The encoder classifier's mean cross-entropy and accuracy (argmax = label) over every sequence of
// batches (a classification task's: labels and the real-token mask).
EvalResult evaluate_classifier(Transformer<float>& model, const std::vector<Batch>& batches);

struct Progress {
  int64_t step = 0, steps = 0;  // steps done, of
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0, eta_s = 0;
  std::optional<EvalResult> eval;
};

// What a resumed run takes from the command line rather than from the checkpoint. A checkpoint is
// untrusted: its stored data= and checkpoint= paths are never opened or written.
struct ResumeOptions {
  std::string data;        // the text file of task "text" (its vocabulary must match the checkpoint's)
  std::string checkpoint;  // where the resumed run's checkpoints go ("": over the checkpoint it resumes)
  int64_t steps = 0;       // > 0: a stated override of the stored steps (≥ the step reached)
};

// With a SequenceParallel of P ranks (sequence_parallel.hpp), every rank runs its own Trainer on the
// same options: each draws the same batches, keeps shard_range(seq_len, rank, P) of every sequence,
// and the gradients are summed over the ranks before clipping and AdamW, so the replicated weights stay
// bitwise identical on every rank and the losses equal one process's within fp32 rounding. Files are
// written by rank 0 only; a stop (run's `stop`) asked on any rank stops every rank at the same step.
class Trainer {
 public:
  // config.vocab_size is taken from the task's tokenizer. parallel: null, one process.
  Trainer(ModelConfig config, TrainOptions options, std::shared_ptr<const SequenceParallel> parallel = {});
  // Continues the run saved in a checkpoint: its config, options, weights, step and moments.
  static Trainer resume(const std::filesystem::path& checkpoint, const ResumeOptions& resume = {},
                        std::shared_ptr<const SequenceParallel> parallel = {});

  // One optimizer step on the next batch; returns its loss (before the update). A diverged run throws
  // linattn::Error naming the step: before the update when the loss or the gradient is not finite
  // (weights and moments unchanged), after it when the update made a weight non-finite.
  double train_step();
  // Held-out loss and accuracy (reuses the model's activation buffers).
  EvalResult evaluate(int64_t max_batches);
  // Trains to options().steps, calling report after every log_every steps, after each evaluation
  // and at the end, and saving checkpoints as the options say (rank 0's job when sequence-parallel). `stop` is asked
  // after every step; when it says true, run saves a checkpoint (if the options name one) and returns false. Returns
  // true once the last step is done. A train_step error is rethrown naming the last checkpoint this run wrote (the
  // last good state).
  bool run(const std::function<void(const Progress&)>& report, int64_t log_every = 10,
           const std::function<bool()>& stop = {});

  void save_checkpoint(const std::filesystem::path& path) const;
  // Weights only: what `linattn generate` reads.
  void save_model(const std::filesystem::path& path) const;

  int64_t step() const { return optimizer_.step(); }
  const TrainOptions& options() const { return options_; }
  const Transformer<float>& model() const { return *model_; }
  const Task& task() const { return *task_; }
  double last_grad_norm() const { return grad_norm_; }
  // The group the sequences are split over (single_process() when there is none).
  const SequenceParallel& parallel() const { return parallel_ ? *parallel_ : single_process(); }

 private:
  // Records a dataset file's CRC (a resumed run's must be the checkpoint's) and checks its length.
  void check_dataset(const DatasetTask& file);
  TrainOptions options_;
  std::shared_ptr<const SequenceParallel> parallel_;
  ShardRange shard_;  // this rank's positions of every sequence

  bool stop_requested(const std::function<bool()>& stop) const;
  std::unique_ptr<Task> task_;
  std::unique_ptr<Transformer<float>> model_;
  AdamW optimizer_;
  double grad_norm_ = 0;
};

}  // namespace linattn::model
