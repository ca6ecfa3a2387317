#pragma once
// The whole model's gradient check: every parameter tensor's analytic gradient against central
// differences of the model's loss, one tensor at a time.
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "linattn/model/transformer.hpp"
#include "support/finite_difference.hpp"

namespace linattn::testing {

// {tensor name, max |analytic − numeric| / max |numeric|} for every tensor of model's config, where loss()
// runs the model's forward with targets (so that backward may follow) and returns the loss: the analytic
// gradient is backward's after loss() at the current parameters, the numeric one central differences of
// loss() (step `step`). The parameters are left as they were.
template <class Loss>
std::vector<std::pair<std::string, double>> parameter_gradient_errors(model::Transformer<double>& model,
                                                                      const Loss& loss, double step = 1e-5) {
  model.zero_grad();
  loss();
  model.backward();
  const std::vector<double> analytic = model.grads();
  std::vector<std::pair<std::string, double>> errors;
  for (const model::ParamTensor& t : model::param_tensors(model.config())) {
    const auto begin = model.params().begin() + t.offset;
    std::vector<double> x(begin, begin + t.size);
    const std::vector<double> a(analytic.begin() + t.offset, analytic.begin() + t.offset + t.size);
    auto tensor_loss = [&] {
      std::copy(x.begin(), x.end(), model.params().begin() + t.offset);
      return loss();
    };
    errors.push_back({t.name, finite_difference_relative_error(x, a, tensor_loss, step)});
    std::copy(x.begin(), x.end(), model.params().begin() + t.offset);
  }
  return errors;
}

// The whole-model check at B = 2, T = 5: tokens and targets in [0, 7) and the parameters moved by
// U(−0.3, 0.3) (off their initial values, zero biases and unit gains, so that every term matters), drawn
// from rng in that order; some tokens weigh 0, one 2. {tensor name, error} as parameter_gradient_errors.
inline std::vector<std::pair<std::string, double>> model_gradient_errors(model::Transformer<double>& model,
                                                                         std::mt19937_64& rng, double step = 1e-5) {
  const int64_t B = 2, T = 5;
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (auto& t : tokens) t = int32_t(rng() % 7);
  for (auto& t : targets) t = int32_t(rng() % 7);
  const std::vector<double> weights = {1, 1, 0, 1, 2, 1, 0.5, 1, 1, 0};
  for (double& p : model.params()) p += 0.3 * std::uniform_real_distribution<double>(-1, 1)(rng);
  auto loss = [&] { return model.forward(tokens.data(), targets.data(), weights.data(), B, T); };
  return parameter_gradient_errors(model, loss, step);
}

}  // namespace linattn::testing
