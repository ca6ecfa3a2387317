// AdamW, gradient clipping and the learning-rate schedule.
#include "linattn/model/optimizer.hpp"

#include <cmath>
#include <numbers>

namespace linattn::model {

void AdamW::update(std::span<float> params, std::span<const float> grads, const std::vector<ParamTensor>& tensors,
                   double lr) {
  ++step_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double c1 = 1.0 - std::pow(b1, double(step_)), c2 = 1.0 - std::pow(b2, double(step_));
  for (const ParamTensor& t : tensors) {
    const double wd = t.decay ? options_.weight_decay : 0.0;
    for (int64_t i = t.offset; i < t.offset + t.size; ++i) {
      const double g = grads[i];
      const double m = b1 * m_[i] + (1 - b1) * g;
      const double v = b2 * v_[i] + (1 - b2) * g * g;
      m_[i] = float(m);
      v_[i] = float(v);
      params[i] -= float(lr * ((m / c1) / (std::sqrt(v / c2) + options_.eps) + wd * params[i]));
    }
  }
}

double clip_grad_norm(std::span<float> grads, double max_norm) {
  double sum = 0;
  for (float g : grads) sum += double(g) * g;
  const double norm = std::sqrt(sum);
  if (max_norm > 0 && norm > max_norm) {
    const float scale = float(max_norm / norm);
    for (float& g : grads) g *= scale;
  }
  return norm;
}

double learning_rate(int64_t step, int64_t warmup, int64_t total, double lr, double min_lr) {
  if (step < warmup) return lr * double(step + 1) / double(warmup);
  if (total <= warmup) return lr;
  const double progress = std::min(1.0, double(step - warmup) / double(total - warmup));
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace linattn::model
