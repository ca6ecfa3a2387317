// Sequence-parallel training (linattn::distributed::sequence_parallel, model::Trainer): every
// attention kind, each sequence split over the ranks, trains with the losses, held-out results and
// weights of one process, and the replicated weights stay bitwise identical on every rank.
#include "linattn/model/train.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "linattn/distributed/sequence_parallel.hpp"
#include "linattn/error.hpp"
#include "support/mpi_support.hpp"

namespace linattn {
namespace {

using model::AttentionKind;

model::ModelConfig tiny_config(AttentionKind kind) {
  model::ModelConfig c;
  c.attention = kind;
  c.d_model = 16;
  c.heads = 2;
  c.layers = 2;
  c.mlp_hidden = 24;
  c.favor_features = 8;
  c.chunk_size = 4;  // several chunks inside a shard, and shards that end inside a chunk
  return c;
}

model::TrainOptions tiny_options(int64_t seq_len) {
  model::TrainOptions o;
  o.task = "copy";
  o.steps = 4;
  o.batch = 2;
  o.seq_len = seq_len;
  o.warmup = 1;
  o.lr = 3e-3;
  o.eval_batches = 1;
  return o;
}

struct Run {
  std::vector<double> losses;
  model::EvalResult eval;
  std::vector<float> params;
};

Run train(const model::ModelConfig& config, const model::TrainOptions& options,
          std::shared_ptr<const model::SequenceParallel> parallel) {
  model::Trainer trainer(config, options, std::move(parallel));
  Run run;
  for (int64_t s = 0; s < options.steps; ++s) run.losses.push_back(trainer.train_step());
  run.eval = trainer.evaluate(options.eval_batches);
  run.params = trainer.model().params();
  return run;
}

class SequenceParallelTraining : public ::testing::TestWithParam<AttentionKind> {};

void expect_one_process_results(AttentionKind kind, int64_t seq_len) {
  const model::ModelConfig config = tiny_config(kind);
  const model::TrainOptions options = tiny_options(seq_len);
  const Run alone = train(config, options, nullptr);
  const Run split = train(config, options, distributed::sequence_parallel(MPI_COMM_WORLD));
  // The losses are the whole batch's on every rank, and one process's within fp32 rounding (the
  // sums over the sequence run in another order).
  bool ok = true;
  for (size_t s = 0; s < alone.losses.size(); ++s) {
    const bool close = std::abs(split.losses[s] - alone.losses[s]) <= 2e-5 * std::abs(alone.losses[s]);
    EXPECT_TRUE(close) << "step " << s << ": " << split.losses[s] << " vs " << alone.losses[s];
    ok = ok && close;
  }
  EXPECT_NEAR(split.eval.loss, alone.eval.loss, 2e-5 * alone.eval.loss);
  EXPECT_NEAR(split.eval.accuracy, alone.eval.accuracy, 0.02);  // an argmax may tie within rounding
  double worst = 0;
  for (size_t i = 0; i < alone.params.size(); ++i)
    worst = std::max(worst, double(std::abs(split.params[i] - alone.params[i])));
  EXPECT_LT(worst, 1e-4) << "weights after " << options.steps << " steps";
  // Replicated weights: rank 0's bits on every rank.
  std::vector<float> first = split.params;
  MPI_Bcast(first.data(), int(first.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  const bool same = std::memcmp(first.data(), split.params.data(), first.size() * sizeof(float)) == 0;
  EXPECT_TRUE(same) << "rank " << test::world_rank() << "'s weights differ from rank 0's";
  EXPECT_TRUE(test::all_ranks(ok && same && worst < 1e-4));
}

// 23 tokens: shards of 6 / 6 / 6 / 5 at P = 4, 8 / 8 / 7 at P = 3 (uneven, not multiples of the chunk).
TEST_P(SequenceParallelTraining, MatchesOneProcess) { expect_one_process_results(GetParam(), 23); }

// As few tokens as ranks allow: shards of one token (P = 4: 2, 1, 1, 1).
TEST_P(SequenceParallelTraining, ShardsOfOneToken) { expect_one_process_results(GetParam(), test::world_size() + 1); }

INSTANTIATE_TEST_SUITE_P(EveryKind, SequenceParallelTraining,
                         ::testing::Values(AttentionKind::softmax, AttentionKind::linear, AttentionKind::favor,
                                           AttentionKind::retnet, AttentionKind::gla, AttentionKind::deltanet,
                                           AttentionKind::gated_deltanet, AttentionKind::kda),
                         [](const auto& kind) { return std::string(model::attention_name(kind.param)); });

TEST(SequenceParallelTrainingErrors, TooFewTokensForTheRanksIsRefusedByName) {
  if (test::world_size() < 3) GTEST_SKIP() << "seq_len ≥ 2 always covers 1 or 2 ranks";
  try {
    model::Trainer trainer(tiny_config(AttentionKind::linear), tiny_options(2),
                           distributed::sequence_parallel(MPI_COMM_WORLD));
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("seq_len is 2, expected ≥ " + std::to_string(test::world_size())),
              std::string::npos)
        << e.what();
  }
}

TEST(SequenceParallelTrainingErrors, TheFp64ModelRunsOnOneProcess) {
  model::ModelConfig config = tiny_config(AttentionKind::linear);
  config.vocab_size = 5;
  model::Transformer<double> m(config);
  const auto parallel = distributed::sequence_parallel(MPI_COMM_WORLD);
  EXPECT_THROW(m.set_sequence_parallel(*parallel, 0), Error);
}

}  // namespace
}  // namespace linattn
