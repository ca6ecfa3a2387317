// The training loop, its options, evaluation and checkpoints.
#include "linattn/model/train.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <span>
#include <string>

#include "linattn/error.hpp"
#include "linattn/file_io.hpp"
#include "linattn/limits.hpp"
#include "linattn/model/dataset.hpp"
#include "linattn/model/model_file.hpp"
#include "model/key_values.hpp"
#include "model/rank_agreement.hpp"

namespace linattn::model {

void check_train_options(const TrainOptions& o) {
  auto require = [](bool ok, const std::string& name, const std::string& seen, const char* expected) {
    if (!ok) throw Error("linattn::model: " + name + " is " + seen + ", expected " + expected);
  };
  // Every size and count is bounded (a checkpoint is untrusted: batch = 2^62 overflowed batch ×
  // seq_len) and every real is finite (weight_decay = inf turned the weights infinite).
  const char* where = "linattn::model";
  require(o.task == "copy" || o.task == "text" || o.task == "mqar" || is_classification_task(o.task), "task",
          "\"" + o.task + "\"", kTaskChoices);
  check_bounded(where, "steps", o.steps, 1, limits::kMaxSteps);
  check_bounded(where, "batch", o.batch, 1, limits::kMaxBatch);
  check_bounded(where, "seq_len", o.seq_len, 2, limits::kMaxSeqLen);
  check_bounded(where, "batch × seq_len", o.batch * o.seq_len, 2, limits::kMaxBatchTokens, "tokens per step");
  check_bounded(where, "warmup", o.warmup, 0, limits::kMaxSteps);
  check_bounded(where, "lr", o.lr, 1e-12, 1e3);
  check_bounded(where, "min_lr", o.min_lr, 0.0, o.lr, "at most lr");
  check_bounded(where, "weight_decay", o.weight_decay, 0.0, 1e3);
  check_bounded(where, "clip", o.clip, 0.0, 1e12, "0: no clipping");
  check_bounded(where, "eval_every", o.eval_every, 0, limits::kMaxSteps);
  check_bounded(where, "eval_batches", o.eval_batches, 1, limits::kMaxEvalBatches);
  check_bounded(where, "checkpoint_every", o.checkpoint_every, 0, limits::kMaxSteps);
  if (o.task == "mqar") check_mqar_shape(o.mqar, o.seq_len);
  if (o.task == "listops")
    require(o.seq_len >= 4, "seq_len", std::to_string(o.seq_len), "≥ 4 for listops (its shortest expressions)");
  if (o.task == "pathfinder") check_pathfinder_length(o.seq_len);
  if (is_dataset_task(o.task)) check_bounded(where, "data_crc", o.data_crc, -1, int64_t(UINT32_MAX), "a CRC-32");
}

double estimated_training_bytes(const ModelConfig& config, const TrainOptions& options, int ranks) {
  const double params = double(param_count(config));
  // Weights, gradients, m, v; a checkpoint copies weights, m and v into a ModelFile and serialises them.
  const double state = 4.0 * params * (4 + 3 + 3);
  const double tokens = double(options.batch) * double((options.seq_len + ranks - 1) / std::max(ranks, 1));
  const double activations = 4.0 * tokens * double(activation_floats_per_token(config));
  return state + 1.5 * activations + 64.0 * (1 << 20);  // half again for the operators' scratch, plus a margin
}

namespace {
constexpr detail::Field<TrainOptions> kOptionFields[] = {{"task", &TrainOptions::task},
                                                         {"data", &TrainOptions::data},
                                                         {"steps", &TrainOptions::steps},
                                                         {"batch", &TrainOptions::batch},
                                                         {"seq_len", &TrainOptions::seq_len},
                                                         {"warmup", &TrainOptions::warmup},
                                                         {"lr", &TrainOptions::lr},
                                                         {"min_lr", &TrainOptions::min_lr},
                                                         {"weight_decay", &TrainOptions::weight_decay},
                                                         {"clip", &TrainOptions::clip},
                                                         {"seed", &TrainOptions::seed},
                                                         {"eval_every", &TrainOptions::eval_every},
                                                         {"eval_batches", &TrainOptions::eval_batches},
                                                         {"checkpoint", &TrainOptions::checkpoint},
                                                         {"checkpoint_every", &TrainOptions::checkpoint_every}};
// MQAR's keys are written and read only for task "mqar", so that the files of the other tasks keep
// their keys (and checkpoints from before MQAR still load).
constexpr const char* kMqarPairs = "mqar_pairs";
constexpr const char* kMqarVocab = "mqar_vocab";
// Likewise the dataset file's CRC, for the dataset tasks only.
constexpr const char* kDataCrc = "data_crc";
}  // namespace

std::string train_options_to_text(const TrainOptions& o) {
  detail::KeyValues kv;
  detail::write_fields<TrainOptions>(kv, o, kOptionFields);
  if (o.task == "mqar") {
    kv.set(kMqarPairs, o.mqar.pairs);
    kv.set(kMqarVocab, o.mqar.vocab);
  }
  if (is_dataset_task(o.task)) kv.set(kDataCrc, o.data_crc);
  return kv.text();
}

TrainOptions train_options_from_text(std::string_view text) {
  const detail::KeyValues kv(text, "training options");
  TrainOptions o;
  detail::read_fields<TrainOptions>(kv, o, kOptionFields);
  if (o.task == "mqar") o.mqar = {kv.get_int(kMqarPairs), kv.get_int(kMqarVocab)};
  if (is_dataset_task(o.task)) o.data_crc = kv.get_int(kDataCrc);
  kv.check_all_read();
  check_train_options(o);
  return o;
}

double EvalResult::bits_per_token() const { return loss / std::numbers::ln2; }

namespace {

// "nan", "inf", "2.5": a loss or norm as a person reads it.
std::string number(double x) {
  if (std::isnan(x)) return "nan";  // printf's "-nan" says nothing more
  char text[32];
  std::snprintf(text, sizeof text, "%g", x);
  return text;
}

// What the model's forward takes as targets: the labels of a classification task's batch.
const int32_t* targets_of(const Batch& batch) {
  return batch.labels.empty() ? batch.targets.data() : batch.labels.data();
}

// The positions [range.begin, range.begin + range.length) of every sequence of a [B, T] batch.
Batch shard_of(const Batch& batch, ShardRange range) {
  Batch shard;
  shard.B = batch.B;
  shard.T = range.length;
  auto take = [&](const auto& from, auto& to) {
    if (from.empty()) return;
    to.reserve(size_t(batch.B * range.length));
    for (int64_t b = 0; b < batch.B; ++b) {
      const auto row = from.begin() + b * batch.T + range.begin;
      to.insert(to.end(), row, row + range.length);
    }
  };
  take(batch.tokens, shard.tokens);
  take(batch.targets, shard.targets);
  take(batch.weights, shard.weights);
  return shard;
}

}  // namespace

Trainer::Trainer(ModelConfig config, TrainOptions options, std::shared_ptr<const SequenceParallel> parallel)
    : options_(std::move(options)), parallel_(std::move(parallel)) {
  check_train_options(options_);
  const int ranks = this->parallel().ranks();
  if (options_.seq_len < ranks)
    throw Error("linattn::model: seq_len is " + std::to_string(options_.seq_len) + ", expected ≥ " +
                std::to_string(ranks) + " (the ranks each sequence is split over: every rank needs a token)");
  shard_ = shard_range(options_.seq_len, this->parallel().rank(), ranks);
  task_ = make_task(options_.task, options_.data, options_.mqar, options_.seed);
  if (const auto* file = dynamic_cast<const DatasetTask*>(task_.get())) check_dataset(*file);
  config.vocab_size = task_->tokenizer().size();
  config.classes = task_->classes();  // a classification task trains the encoder classifier
  // Linformer's projections span the padded length: a resumed run's is its checkpoint's seq_len too.
  if (config.attention == AttentionKind::linformer) config.max_seq_len = options_.seq_len;
  if (config.classes > 0 && ranks > 1)
    throw Error("linattn::model: task \"" + options_.task +
                "\" trains the encoder classifier, which runs in one process, expected no sequence parallelism");
  model_ = std::make_unique<Transformer<float>>(config);
  model_->set_sequence_parallel(this->parallel(), shard_.begin);
  optimizer_ = AdamW(int64_t(model_->params().size()), AdamWOptions{0.9, 0.95, 1e-8, options_.weight_decay});
  if (ranks > 1) {
    // The model and the run, and the text the batches come from (by content: each rank may spell
    // its path differently; where checkpoints go is rank 0's business).
    std::vector<detail::AgreedItem> items;
    detail::add_lines(items, config_to_text(model_->config()), "model setting");
    detail::add_lines(items, train_options_to_text(options_), "training option", {"data", "checkpoint"});
    if (!options_.data.empty()) {
      std::string text = read_file(options_.data);
      const std::string shown = options_.data + " (" + std::to_string(text.size()) + " bytes)";
      items.push_back({"data file", std::move(text), shown});
    }
    detail::require_agreement(this->parallel(), items);
  }
}

void Trainer::check_dataset(const DatasetTask& file) {
  const Dataset& d = file.dataset();
  if (options_.data_crc >= 0 && uint32_t(options_.data_crc) != d.crc)
    throw Error("linattn::model: " + file.name() + " has CRC-32 " + std::to_string(d.crc) +
                ", but the run was trained on a dataset with CRC-32 " + std::to_string(options_.data_crc) +
                ", expected the same dataset file");
  options_.data_crc = d.crc;
  if (options_.seq_len != d.seq_len)
    throw Error("linattn::model: seq_len is " + std::to_string(options_.seq_len) + ", but " + file.name() +
                " holds sequences of " + std::to_string(d.seq_len) + " tokens, expected " + std::to_string(d.seq_len));
}

Trainer Trainer::resume(const std::filesystem::path& checkpoint, const ResumeOptions& resume,
                        std::shared_ptr<const SequenceParallel> parallel) {
  const std::string name = checkpoint.string();
  ModelFile f = load_model_file(checkpoint);
  if (!f.checkpoint)
    throw Error("linattn::model: " + name +
                " is a model file without training state, expected a checkpoint (saved with --checkpoint)");
  TrainOptions options;
  try {
    options = train_options_from_text(f.train_options);
  } catch (const Error& e) {
    throw Error("linattn::model: " + name + ": " + std::string(e.what()).substr(16));  // after "linattn::model: "
  }
  // The paths come from the caller: a crafted checkpoint chose which file the run overwrote.
  const bool reads_data = options.task == "text" || is_dataset_task(options.task);
  if (reads_data && resume.data.empty())
    throw Error("linattn::model: " + name + " trained task \"" + options.task + "\" on \"" + options.data +
                "\", expected the data file given again (--data FILE): a checkpoint never chooses a file to read");
  options.data = reads_data ? resume.data : std::string();
  options.checkpoint = resume.checkpoint.empty() ? name : resume.checkpoint;
  if (resume.steps > 0) {
    if (resume.steps < f.step)
      throw Error("linattn::model: steps is " + std::to_string(resume.steps) + ", expected ≥ " +
                  std::to_string(f.step) + " (the step " + name + " reached)");
    options.steps = resume.steps;
  }
  Trainer trainer(f.config, options, std::move(parallel));
  if (trainer.model_->config().classes != f.config.classes)
    throw Error("linattn::model: " + name + " holds a model of " + std::to_string(f.config.classes) +
                " classes, but its task \"" + options.task + "\" has " +
                std::to_string(trainer.model_->config().classes) + ", expected a checkpoint written by linattn train");
  if (trainer.task_->tokenizer().vocab() != f.vocab)
    throw Error("linattn::model: " + name + ": the vocabulary of task \"" + trainer.options_.task + "\" (data \"" +
                trainer.options_.data + "\") differs from the checkpoint's, expected the same data");
  trainer.model_->params() = std::move(f.params);
  trainer.optimizer_.m() = std::move(f.adam_m);
  trainer.optimizer_.v() = std::move(f.adam_v);
  trainer.optimizer_.set_step(f.step);
  if (trainer.parallel().ranks() > 1) {
    // The options agreed in the constructor; the state each rank read must be the same too.
    auto bytes = [](const std::vector<float>& x) {
      return std::string(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float));
    };
    detail::require_agreement(trainer.parallel(), {{"checkpoint state (weights, AdamW moments, step)",
                                                    bytes(trainer.model_->params()) + bytes(trainer.optimizer_.m()) +
                                                        bytes(trainer.optimizer_.v()) + std::to_string(f.step),
                                                    name + " at step " + std::to_string(f.step)}});
  }
  return trainer;
}

double Trainer::train_step() {
  const TrainOptions& o = options_;
  const int64_t step = optimizer_.step();
  const Batch whole = task_->train_batch(o.batch, o.seq_len, o.seed, step);
  const Batch batch = parallel_ ? shard_of(whole, shard_) : whole;
  model_->zero_grad();
  const float loss = model_->forward(batch.tokens.data(), targets_of(batch), batch.weights.data(), batch.B, batch.T);
  model_->backward();
  parallel().sum(model_->grads());  // every rank's shard's part of the gradient, the same sum on every rank
  grad_norm_ = clip_grad_norm(model_->grads(), o.clip);
  // A diverged run stops before the update that would carry NaN into the weights and moments (and
  // from there into every later checkpoint). The loss and the summed gradient are the same on every
  // rank, so every rank stops at the same step.
  if (!std::isfinite(loss) || !std::isfinite(grad_norm_))
    throw Error("linattn::model: the loss at step " + std::to_string(step + 1) + " is " + number(loss) +
                " (gradient norm " + number(grad_norm_) + "): training diverged; stopped before updating the weights");
  const double lr = learning_rate(step, o.warmup, o.steps, o.lr, o.min_lr);
  optimizer_.update(model_->params(), model_->grads(), param_tensors(model_->config()), lr);
  for (float w : model_->params())
    if (!std::isfinite(w))
      throw Error("linattn::model: the update of step " + std::to_string(step + 1) +
                  " made a weight non-finite (loss " + number(loss) + ", gradient norm " + number(grad_norm_) +
                  "): training diverged; stopped");
  return loss;
}

EvalResult evaluate_classifier(Transformer<float>& model, const std::vector<Batch>& batches) {
  const int64_t O = model.config().classes;
  double loss = 0, correct = 0, total = 0;
  for (const Batch& batch : batches) {
    loss += double(batch.B) *
            model.forward(batch.tokens.data(), batch.labels.data(), batch.weights.data(), batch.B, batch.T);
    for (int64_t b = 0; b < batch.B; ++b) {
      const float* row = model.logits() + b * O;
      correct += std::max_element(row, row + O) - row == batch.labels[size_t(b)] ? 1 : 0;
    }
    total += double(batch.B);
  }
  return total > 0 ? EvalResult{loss / total, correct / total} : EvalResult{};
}

EvalResult Trainer::evaluate(int64_t max_batches) {
  if (model_->config().classes > 0)
    return evaluate_classifier(*model_, task_->eval_batches(options_.batch, options_.seq_len, max_batches));
  const int64_t V = model_->config().vocab_size;
  double loss = 0, correct = 0, total = 0;
  for (const Batch& whole : task_->eval_batches(options_.batch, options_.seq_len, max_batches)) {
    double weight = 0;  // the whole batch's, which every rank holds
    for (float w : whole.weights) weight += w;
    if (weight == 0) continue;
    const Batch batch = parallel_ ? shard_of(whole, shard_) : whole;
    loss += weight * model_->forward(batch.tokens.data(), batch.targets.data(), batch.weights.data(), batch.B, batch.T);
    const float* logits = model_->logits();
    for (int64_t i = 0; i < batch.B * batch.T; ++i) {
      if (batch.weights[i] == 0) continue;
      const float* row = logits + i * V;
      const int64_t best = std::max_element(row, row + V) - row;
      correct += batch.weights[i] * (best == batch.targets[i] ? 1.0 : 0.0);
    }
    total += weight;
  }
  parallel().sum(std::span<double>(&correct, 1));  // over the ranks' shards (the loss already is)
  return total > 0 ? EvalResult{loss / total, correct / total} : EvalResult{};
}

bool Trainer::run(const std::function<void(const Progress&)>& report, int64_t log_every,
                  const std::function<bool()>& stop) {
  using clock = std::chrono::steady_clock;
  const TrainOptions& o = options_;
  const int64_t first = step();
  const auto start = clock::now();
  double loss_sum = 0;
  int64_t loss_count = 0;
  int64_t saved = -1;  // the step of the last checkpoint this run wrote
  while (step() < o.steps) {
    try {
      loss_sum += train_step();
    } catch (const Error& e) {
      // What a person needs to go on: which file still holds a good state (a stop never overwrites it).
      throw Error(std::string(e.what()) +
                  (o.checkpoint.empty() ? std::string("; no checkpoint is written by this run")
                   : saved >= 0 ? "; the last good checkpoint, " + o.checkpoint + " (step " + std::to_string(saved) +
                                      "), is kept"
                                : "; no checkpoint was written by this run (" + o.checkpoint + " is untouched)"));
    }
    ++loss_count;
    const int64_t s = step();
    Progress p;
    p.step = s;
    p.steps = o.steps;
    p.lr = learning_rate(s - 1, o.warmup, o.steps, o.lr, o.min_lr);
    p.grad_norm = grad_norm_;
    const double seconds = std::chrono::duration<double>(clock::now() - start).count();
    p.tokens_per_s = seconds > 0 ? double((s - first) * o.batch * o.seq_len) / seconds : 0;
    p.eta_s = s > first ? seconds / double(s - first) * double(o.steps - s) : 0;
    const bool eval_now = (o.eval_every > 0 && s % o.eval_every == 0) || s == o.steps;
    if (eval_now) p.eval = evaluate(o.eval_batches);
    if (!o.checkpoint.empty() && ((o.checkpoint_every > 0 && s % o.checkpoint_every == 0) || s == o.steps)) {
      if (parallel().rank() == 0) save_checkpoint(o.checkpoint);
      saved = s;
    }
    if (s % std::max<int64_t>(log_every, 1) == 0 || eval_now) {
      p.loss = loss_sum / double(loss_count);
      loss_sum = 0;
      loss_count = 0;
      if (report) report(p);
    }
    if (step() < o.steps && stop_requested(stop)) {
      if (parallel().rank() == 0 && !o.checkpoint.empty()) save_checkpoint(o.checkpoint);
      return false;
    }
  }
  return true;
}

bool Trainer::stop_requested(const std::function<bool()>& stop) const {
  double asked = stop && stop() ? 1 : 0;
  parallel().sum(std::span<double>(&asked, 1));  // any rank's request stops all of them at this step
  return asked > 0;
}

void Trainer::save_checkpoint(const std::filesystem::path& path) const {
  ModelFile f;
  f.config = model_->config();
  f.vocab = task_->tokenizer().vocab();
  f.params = model_->params();
  f.checkpoint = true;
  f.train_options = train_options_to_text(options_);
  f.step = optimizer_.step();
  f.adam_m = optimizer_.m();
  f.adam_v = optimizer_.v();
  save_model_file(path, f);
}

void Trainer::save_model(const std::filesystem::path& path) const {
  ModelFile f;
  f.config = model_->config();
  f.vocab = task_->tokenizer().vocab();
  f.params = model_->params();
  save_model_file(path, f);
}

}  // namespace linattn::model
