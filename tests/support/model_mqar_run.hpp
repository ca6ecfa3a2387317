#pragma once
// A short MQAR run through the trainer (fresh batches each step, 2 pairs of 16 symbols, 8 tokens, batch 8, lr
// 1e-2, one thread): the held-out loss on the answers before and after, which the model tests of the recurrent
// kinds compare (about ln 17 at the start, a uniform guess among the symbols).
#include <cstdint>
#include <utility>

#include "linattn/model/train.hpp"
#include "linattn/threads.hpp"

namespace linattn::testing {

inline std::pair<double, double> short_mqar_run(const model::ModelConfig& config, int64_t steps) {
  set_num_threads(1);
  model::TrainOptions o;
  o.task = "mqar";
  o.mqar = {2, 16};
  o.steps = steps;
  o.batch = 8;
  o.seq_len = 8;
  o.warmup = 5;
  o.lr = 1e-2;
  o.eval_batches = 4;
  model::Trainer trainer(config, o);
  const double before = trainer.evaluate(o.eval_batches).loss;
  trainer.run(nullptr);
  const double after = trainer.evaluate(o.eval_batches).loss;
  set_num_threads(0);
  return {before, after};
}

}  // namespace linattn::testing
