// Training: a tiny model overfits one batch, runs repeat bit for bit, a resumed run repeats an
// uninterrupted one, and the optimizer pieces do what they say.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "linattn/error.hpp"
#include "linattn/file_io.hpp"
#include "linattn/model/data.hpp"
#include "linattn/model/optimizer.hpp"
#include "linattn/model/train.hpp"
#include "linattn/threads.hpp"
#include "support/model_configs.hpp"

namespace linattn::model {
namespace {

using testing::tiny_config;

TrainOptions tiny_options(int64_t steps) {
  TrainOptions o;
  o.task = "copy";
  o.steps = steps;
  o.batch = 3;
  o.seq_len = 20;
  o.warmup = 2;
  o.lr = 3e-3;
  o.eval_batches = 1;
  return o;
}

std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("linattn_model_training_" + std::to_string(::getpid()) + name);
}

class ModelTraining : public ::testing::TestWithParam<AttentionKind> {};

// The same batch again and again: the loss must fall close to zero.
TEST_P(ModelTraining, TinyModelOverfitsOneBatch) {
  // One thread: 150 steps of tiny operators are all parallel-region overhead on a busy machine, and
  // thread independence has its own test below.
  set_num_threads(1);
  ModelConfig config = tiny_config(GetParam());
  const CopyTask task;
  config.vocab_size = task.tokenizer().size();
  Transformer<float> model(config);
  AdamW optimizer(int64_t(model.params().size()), AdamWOptions{0.9, 0.95, 1e-8, 0.0});
  const Batch batch = task.train_batch(4, 24, 1, 0);
  float first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    model.zero_grad();
    last = model.forward(batch.tokens.data(), batch.targets.data(), batch.weights.data(), batch.B, batch.T);
    if (step == 0) first = last;
    model.backward();
    clip_grad_norm(model.grads(), 1.0);
    optimizer.update(model.params(), model.grads(), param_tensors(config), 1e-2);
  }
  set_num_threads(0);
  EXPECT_GT(first, 1.5f) << attention_name(GetParam());  // about ln 10 at the start
  EXPECT_LT(last, 0.05f) << attention_name(GetParam());
}

// Two steps then a checkpoint then a resumed trainer, against four uninterrupted steps: the same
// losses and weights, bit for bit.
TEST_P(ModelTraining, ResumedRunRepeatsUninterruptedRun) {
  const std::filesystem::path path = temp_path(std::string("resume_") + attention_name(GetParam()));
  Trainer whole(tiny_config(GetParam()), tiny_options(4));
  std::vector<double> want;
  for (int i = 0; i < 4; ++i) want.push_back(whole.train_step());

  Trainer first(tiny_config(GetParam()), tiny_options(4));
  std::vector<double> got = {first.train_step(), first.train_step()};
  first.save_checkpoint(path);
  Trainer resumed = Trainer::resume(path);
  EXPECT_EQ(resumed.step(), 2);
  got.push_back(resumed.train_step());
  got.push_back(resumed.train_step());
  std::filesystem::remove(path);
  EXPECT_EQ(got, want);
  EXPECT_TRUE(resumed.model().params() == whole.model().params());
  EXPECT_NE(want[0], want[3]);  // the steps did change the model
}

// Bitwise the same losses with 1 and 2 threads.
TEST_P(ModelTraining, LossesDoNotDependOnThreadCount) {
  std::vector<double> losses[2];
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    Trainer trainer(tiny_config(GetParam()), tiny_options(3));
    for (int i = 0; i < 3; ++i) losses[threads - 1].push_back(trainer.train_step());
  }
  set_num_threads(0);
  EXPECT_EQ(losses[0], losses[1]);
}

INSTANTIATE_TEST_SUITE_P(Kinds, ModelTraining,
                         ::testing::Values(AttentionKind::softmax, AttentionKind::linear, AttentionKind::favor,
                                           AttentionKind::retnet, AttentionKind::gla, AttentionKind::deltanet,
                                           AttentionKind::gated_deltanet, AttentionKind::kda),
                         [](const ::testing::TestParamInfo<AttentionKind>& p) {
                           return std::string(attention_name(p.param));
                         });

TEST(ModelTrainingLoop, RunReportsProgressEvaluatesAndSavesCheckpoint) {
  const std::filesystem::path path = temp_path("run");
  TrainOptions options = tiny_options(6);
  options.eval_every = 3;
  options.checkpoint = path.string();
  Trainer trainer(tiny_config(AttentionKind::linear), options);
  std::vector<Progress> reports;
  trainer.run([&](const Progress& p) { reports.push_back(p); }, 2);
  ASSERT_EQ(reports.size(), 4u);  // steps 2, 3 (eval), 4, 6 (eval, end)
  EXPECT_EQ(reports.back().step, 6);
  EXPECT_EQ(reports.back().steps, 6);
  EXPECT_TRUE(reports[1].eval.has_value());
  EXPECT_TRUE(reports[3].eval.has_value());
  EXPECT_FALSE(reports[0].eval.has_value());
  EXPECT_GE(reports.back().eval->accuracy, 0.0);
  EXPECT_LE(reports.back().eval->accuracy, 1.0);
  EXPECT_GT(reports.back().tokens_per_s, 0.0);
  EXPECT_EQ(reports.back().eta_s, 0.0);
  EXPECT_EQ(Trainer::resume(path).step(), 6);
  std::filesystem::remove(path);
}

// Issue 42, item 7: a run that diverged went on with NaN weights and exited 0. train_step stops at
// the first non-finite loss or gradient before the update (weights, moments and step as they were),
// and run names the last checkpoint it wrote, which loads (finite) at the step before.
TEST(ModelTrainingLoop, DefectNonFiniteLossStopsBeforeTheUpdate) {
  const std::filesystem::path path = temp_path("diverge");
  TrainOptions options = tiny_options(200);
  options.lr = 1000;
  options.clip = 0;
  options.warmup = 0;
  options.checkpoint = path.string();
  options.checkpoint_every = 1;
  Trainer trainer(tiny_config(AttentionKind::linear), options);
  std::vector<float> before;
  std::string message;
  try {
    trainer.run([&](const Progress&) { before = trainer.model().params(); }, 1);
  } catch (const Error& e) {
    message = e.what();
  }
  ASSERT_NE(message.find("the loss at step " + std::to_string(trainer.step() + 1) + " is "), std::string::npos)
      << message;
  EXPECT_NE(message.find("the last good checkpoint, " + path.string() + " (step " + std::to_string(trainer.step()) +
                         "), is kept"),
            std::string::npos)
      << message;
  EXPECT_EQ(trainer.model().params(), before);  // the bad step changed nothing
  EXPECT_EQ(Trainer::resume(path).step(), trainer.step());
  std::filesystem::remove(path);
}

TEST(ModelTrainingLoop, ResumeRejectsModelFilesAndOtherData) {
  const std::filesystem::path model_path = temp_path("model_only"), text_path = temp_path("corpus.txt"),
                              ckpt_path = temp_path("text_ckpt");
  Trainer trainer(tiny_config(AttentionKind::linear), tiny_options(2));
  trainer.save_model(model_path);
  try {
    Trainer::resume(model_path);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected a checkpoint"), std::string::npos) << e.what();
  }
  // A text run whose data file changed its alphabet since the checkpoint.
  write_file_atomically(text_path, std::string(3000, 'a') + "bc");
  TrainOptions options = tiny_options(2);
  options.task = "text";
  options.data = text_path.string();
  Trainer text(tiny_config(AttentionKind::linear), options);
  text.save_checkpoint(ckpt_path);
  write_file_atomically(text_path, std::string(3000, 'a') + "bd");
  try {
    Trainer::resume(ckpt_path, ResumeOptions{text_path.string(), "", 0});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("differs from the checkpoint's"), std::string::npos) << e.what();
  }
  for (const auto& p : {model_path, text_path, ckpt_path}) std::filesystem::remove(p);
}

TEST(ModelOptimizer, ScheduleWarmsUpThenDecaysToMinimum) {
  EXPECT_DOUBLE_EQ(learning_rate(0, 10, 110, 1.0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(9, 10, 110, 1.0, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(10, 10, 110, 1.0, 0.1), 1.0);
  EXPECT_NEAR(learning_rate(60, 10, 110, 1.0, 0.1), 0.55, 1e-12);
  EXPECT_DOUBLE_EQ(learning_rate(110, 10, 110, 1.0, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(500, 10, 110, 1.0, 0.1), 0.1);
}

TEST(ModelOptimizer, ClipScalesToMaxNorm) {
  std::vector<float> g = {3, 4};
  EXPECT_DOUBLE_EQ(clip_grad_norm(g, 1.0), 5.0);
  EXPECT_NEAR(g[0], 0.6f, 1e-7);
  EXPECT_NEAR(g[1], 0.8f, 1e-7);
  std::vector<float> small = {0.3f, 0.4f};
  clip_grad_norm(small, 1.0);
  EXPECT_EQ(small, (std::vector<float>{0.3f, 0.4f}));
}

// One AdamW step from zero moments moves each parameter by lr·sign(g) (plus decay where marked).
TEST(ModelOptimizer, AdamWFirstStepIsSignStep) {
  std::vector<float> p = {1, 1, 1}, g = {0.5f, -2, 0};
  const std::vector<ParamTensor> tensors = {{"w", 0, 2, true}, {"b", 2, 1, false}};
  AdamW adam(3, AdamWOptions{0.9, 0.95, 1e-12, 0.1});
  adam.update(p, g, tensors, 0.01);
  EXPECT_NEAR(p[0], 1 - 0.01 * (1 + 0.1), 1e-6);
  EXPECT_NEAR(p[1], 1 + 0.01 - 0.01 * 0.1, 1e-6);
  EXPECT_EQ(p[2], 1.0f);  // no gradient, no decay
  EXPECT_EQ(adam.step(), 1);
}

TEST(ModelTrainingErrors, BadOptionsNameTheOption) {
  auto message = [](TrainOptions o) {
    try {
      check_train_options(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  TrainOptions o;
  o.task = "sort";
  EXPECT_NE(message(o).find("task is \"sort\""), std::string::npos);
  o = {};
  o.steps = 0;
  EXPECT_NE(message(o).find("steps is 0"), std::string::npos);
  o = {};
  o.batch = -1;
  EXPECT_NE(message(o).find("batch is -1"), std::string::npos);
  o = {};
  o.seq_len = 1;
  EXPECT_NE(message(o).find("seq_len is 1"), std::string::npos);
  o = {};
  o.lr = 0;
  EXPECT_NE(message(o).find("lr is"), std::string::npos);
  o = {};
  o.min_lr = 1;
  EXPECT_NE(message(o).find("min_lr is"), std::string::npos);
  o = {};
  o.warmup = -1;
  EXPECT_NE(message(o).find("warmup is -1"), std::string::npos);
  o = {};
  o.weight_decay = -1;
  EXPECT_NE(message(o).find("weight_decay is"), std::string::npos);
  o = {};
  o.clip = -1;
  EXPECT_NE(message(o).find("clip is"), std::string::npos);
  o = {};
  o.eval_every = -1;
  EXPECT_NE(message(o).find("eval_every is -1"), std::string::npos);
  o = {};
  o.eval_batches = 0;
  EXPECT_NE(message(o).find("eval_batches is 0"), std::string::npos);
  o = {};
  o.checkpoint_every = -1;
  EXPECT_NE(message(o).find("checkpoint_every is -1"), std::string::npos);
  EXPECT_EQ(message(TrainOptions{}), "no error");
  // Options survive their text form exactly.
  TrainOptions custom;
  custom.lr = 0.1 + 0.2;
  custom.data = "x y.txt";
  const TrainOptions back = train_options_from_text(train_options_to_text(custom));
  EXPECT_EQ(back.lr, custom.lr);
  EXPECT_EQ(back.data, custom.data);
}

TEST(ModelTrainingErrors, TasksRejectBadInput) {
  EXPECT_THROW(make_task("sort", ""), Error);
  EXPECT_THROW(make_task("text", ""), Error);
  EXPECT_THROW(make_task("text", "/nonexistent/linattn/corpus.txt"), Error);
  EXPECT_THROW(TextTask(std::string(999, 'a'), "short"), Error);
  const TextTask text(std::string(2000, 'a') + "b", "ab");
  EXPECT_EQ(text.tokenizer().vocab(), "ab");
  EXPECT_THROW(text.train_batch(1, 1800, 1, 0), Error);  // longer than the training split
}

TEST(ModelData, CopyBatchesCopyTheFirstHalf) {
  const CopyTask task;
  const Batch batch = task.train_batch(8, 128, 3, 5);
  for (int64_t b = 0; b < 8; ++b) {
    const int32_t* x = batch.tokens.data() + b * 128;
    int64_t L = 0;
    while (x[L] != CopyTask::kSeparator) ++L;
    ASSERT_GE(L, 32);
    ASSERT_LT(L, 64);
    for (int64_t t = 0; t < 128; ++t) {
      const bool copied = t >= L && t < 2 * L;
      EXPECT_EQ(batch.weights[b * 128 + t], copied ? 1.0f : 0.0f);
      if (copied) {
        EXPECT_EQ(batch.targets[b * 128 + t], x[t - L]);
      }
      if (t + 1 < 128) {
        EXPECT_EQ(batch.targets[b * 128 + t], x[t + 1]);
      }
    }
  }
  // The same (seed, index) gives the same batch; another index another.
  EXPECT_EQ(task.train_batch(8, 128, 3, 5).tokens, batch.tokens);
  EXPECT_NE(task.train_batch(8, 128, 3, 6).tokens, batch.tokens);
}

}  // namespace
}  // namespace linattn::model
