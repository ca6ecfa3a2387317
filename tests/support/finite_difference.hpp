#pragma once
// Central finite differences in fp64, the check every backward's oracle passes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <random>
#include <utility>
#include <vector>

namespace linattn::testing {

// The numeric gradient: (loss(xᵢ + h) − loss(xᵢ − h)) / 2h for every entry of x (each restored).
// The step h is `step`, or step·max(1, |xᵢ|) when `relative_step`.
template <class Loss>
std::vector<double> central_differences(std::vector<double>& x, const Loss& loss, double step = 1e-6,
                                        bool relative_step = false) {
  std::vector<double> numeric(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i], h = relative_step ? step * std::max(1.0, std::abs(keep)) : step;
    x[i] = keep + h;
    const double up = loss();
    x[i] = keep - h;
    const double down = loss();
    x[i] = keep;
    numeric[i] = (up - down) / (2 * h);
  }
  return numeric;
}

// max |aᵢ − bᵢ|; infinite when the sizes differ or any difference is not finite (a NaN must fail a
// check, and std::max would drop it).
inline double max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double err = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(a[i] - b[i]);
    if (!std::isfinite(d)) return std::numeric_limits<double>::infinity();
    err = std::max(err, d);
  }
  return err;
}

inline double max_magnitude(const std::vector<double>& a) {
  double mag = 0;
  for (double v : a) mag = std::max(mag, std::abs(v));
  return mag;
}

// {max |central difference of loss − grad|, max |grad|} over the entries of x: the caller scales.
template <class Loss>
std::pair<double, double> finite_difference_error(std::vector<double>& x, const std::vector<double>& grad,
                                                  const Loss& loss, double step = 1e-6, bool relative_step = false) {
  return {max_difference(central_differences(x, loss, step, relative_step), grad), max_magnitude(grad)};
}

// max |grad − numeric| / max |numeric| (the absolute error when numeric is all 0): the suite's
// relative error, with the finite differences as the reference.
template <class Loss>
double finite_difference_relative_error(std::vector<double>& x, const std::vector<double>& grad, const Loss& loss,
                                        double step = 1e-6) {
  const std::vector<double> numeric = central_differences(x, loss, step);
  const double err = max_difference(grad, numeric), mag = max_magnitude(numeric);
  return mag > 0 ? err / mag : err;
}

// The loss whose gradients a recurrence oracle's backward returns: Σ out·dout + Σ final·dfinal.
inline double output_loss(const std::vector<double>& out, const std::vector<double>& dout,
                          const std::vector<double>& final_state, const std::vector<double>& dfinal) {
  double l = 0;
  for (size_t i = 0; i < out.size(); ++i) l += out[i] * dout[i];
  for (size_t i = 0; i < dfinal.size(); ++i) l += final_state[i] * dfinal[i];
  return l;
}

// For each (x, analytic gradient) of `checks`: max |numeric − analytic| / max(1, max |numeric|), numeric the
// central differences of loss over x; a null x (a tensor not given) is skipped.
template <class Loss>
std::vector<double> scaled_gradient_errors(
    std::initializer_list<std::pair<std::vector<double>*, const std::vector<double>*>> checks, const Loss& loss) {
  std::vector<double> errors;
  for (const auto& [x, analytic] : checks) {
    if (!x) continue;
    const std::vector<double> numeric = central_differences(*x, loss);
    errors.push_back(max_difference(numeric, *analytic) / std::max(1.0, max_magnitude(numeric)));
  }
  return errors;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// An elementwise map's check: n values x drawn uniform in [lo, hi) with x[0] = 0, its fp64 forward(y, x)
// within value_tol of want(x) everywhere, and its backward(dx, dy, y) against central differences (step 1e-5)
// of Σ y·dy within 1e-6. The values, for the caller's own checks of its range.
struct Elementwise {
  std::vector<double> x, y, dy, dx;
};
template <class Forward, class Backward, class Want>
Elementwise expect_elementwise(size_t n, std::mt19937_64& rng, double lo, double hi, Forward forward, Backward backward,
                               Want want, double value_tol) {
  Elementwise e{std::vector<double>(n), std::vector<double>(n), std::vector<double>(n), std::vector<double>(n)};
  std::uniform_real_distribution<double> u(lo, hi), unit(-1, 1);
  for (double& v : e.x) v = u(rng);
  for (double& v : e.dy) v = unit(rng);
  e.x[0] = 0;
  auto loss = [&] {
    forward(e.y, e.x);
    return dot(e.y, e.dy);
  };
  loss();
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(e.y[i], want(e.x[i]), value_tol) << "x = " << e.x[i];
  backward(e.dx, e.dy, e.y);
  EXPECT_LT(finite_difference_relative_error(e.x, e.dx, loss, 1e-5), 1e-6);
  return e;
}

}  // namespace linattn::testing
