#pragma once
// The whole model's gradient check: every parameter tensor's analytic gradient against central
// differences of the model's loss, one tensor at a time.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "linattn/model/transformer.hpp"
#include "support/finite_difference.hpp"

namespace linattn::testing {

// {tensor name, max |analytic − numeric| / max |numeric|} for every tensor of model's config, where loss()
// runs the model's forward with targets (so that backward may follow) and returns the loss: the analytic
// gradient is backward's after loss() at the current parameters, the numeric one central differences of
// loss() (step 1e-5). The parameters are left as they were.
template <class Loss>
std::vector<std::pair<std::string, double>> parameter_gradient_errors(model::Transformer<double>& model,
                                                                      const Loss& loss) {
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
    errors.push_back({t.name, finite_difference_relative_error(x, a, tensor_loss, 1e-5)});
    std::copy(x.begin(), x.end(), model.params().begin() + t.offset);
  }
  return errors;
}

}  // namespace linattn::testing
