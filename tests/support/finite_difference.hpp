#pragma once
// Central finite differences in fp64, the check every backward's oracle passes.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace linattn::testing {

// {max |central difference of loss − grad|, max |grad|} over the entries of x (each restored).
// The step is `step`, or step·max(1, |xᵢ|) when `relative_step`.
template <class Loss>
std::pair<double, double> finite_difference_error(std::vector<double>& x, const std::vector<double>& grad,
                                                  const Loss& loss, double step = 1e-6, bool relative_step = false) {
  double err = 0, mag = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i], h = relative_step ? step * std::max(1.0, std::abs(keep)) : step;
    x[i] = keep + h;
    const double up = loss();
    x[i] = keep - h;
    const double down = loss();
    x[i] = keep;
    err = std::max(err, std::abs((up - down) / (2 * h) - grad[i]));
    mag = std::max(mag, std::abs(grad[i]));
  }
  return {err, mag};
}

}  // namespace linattn::testing
