#pragma once
// AdamW, global-norm gradient clipping, and the warmup + cosine learning-rate schedule.
#include <cstdint>
#include <span>
#include <vector>

#include "linattn/model/transformer.hpp"

namespace linattn::model {

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.01;  // decoupled, applied to tensors marked decay only
};

class AdamW {
 public:
  AdamW() = default;
  AdamW(int64_t n_params, AdamWOptions options) : options_(options), m_(n_params, 0.0f), v_(n_params, 0.0f) {}

  // One step at learning rate lr: params −= lr · (m̂ / (√v̂ + eps) + wd · params).
  void update(std::span<float> params, std::span<const float> grads, const std::vector<ParamTensor>& tensors,
              double lr);

  const AdamWOptions& options() const { return options_; }
  int64_t step() const { return step_; }
  // The moments, for checkpoints.
  std::vector<float>& m() { return m_; }
  std::vector<float>& v() { return v_; }
  const std::vector<float>& m() const { return m_; }
  const std::vector<float>& v() const { return v_; }
  void set_step(int64_t step) { step_ = step; }

 private:
  AdamWOptions options_;
  int64_t step_ = 0;
  std::vector<float> m_, v_;
};

// Scales grads so that their L2 norm is at most max_norm (no-op when max_norm ≤ 0); returns the
// norm before clipping. Summed in fp64 in index order: the same for any thread count.
double clip_grad_norm(std::span<float> grads, double max_norm);

// Linear warmup from lr/warmup to lr over `warmup` steps, then cosine decay to min_lr at `total`.
double learning_rate(int64_t step, int64_t warmup, int64_t total, double lr, double min_lr);

}  // namespace linattn::model
