// The one random generator (linattn/random.hpp).
#include "linattn/random.hpp"

#include <cmath>
#include <numbers>

namespace linattn {

std::pair<double, double> box_muller(double u1, double u2) {
  const double radius = std::sqrt(-2.0 * std::log(u1));
  const double angle = 2.0 * std::numbers::pi * u2;
  return {radius * std::cos(angle), radius * std::sin(angle)};
}

double Random::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double u1 = uniform_open();
  const auto [first, second] = box_muller(u1, uniform_open());
  spare_ = second;
  has_spare_ = true;
  return first;
}

double Random::chi(int64_t k) {
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    const double g = normal();
    sum += g * g;
  }
  return std::sqrt(sum);
}

}  // namespace linattn
