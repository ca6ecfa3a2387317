// The random Fourier features oracle, straight from the definition in include/linattn/favor.hpp,
// one row at a time, with h = m/2 rows of ω:
//   x̂ = x·D^(−1/4),  tᵢ = ωᵢ·x̂,  ∂tᵢ/∂x = ωᵢ·D^(−1/4)
//   φᵢ = √(2/m) cos tᵢ,  φ_{h+i} = √(2/m) sin tᵢ
//   ∂φᵢ/∂x = −√(2/m) sin tᵢ ∂tᵢ/∂x,  ∂φ_{h+i}/∂x = √(2/m) cos tᵢ ∂tᵢ/∂x
#include "feature_maps/random_fourier_reference.hpp"

#include <algorithm>
#include <cmath>

namespace linattn::detail {
namespace {

// tᵢ = ωᵢ·x̂ for one row x: [D].
double argument(const double* x, int64_t dim, std::span<const double> omega, int64_t i) {
  const double scale = std::pow(double(dim), -0.25);
  double t = 0;
  for (int64_t d = 0; d < dim; ++d) t += omega[size_t(i * dim + d)] * (x[d] * scale);
  return t;
}

}  // namespace

void random_fourier_forward_reference(double* phi, const double* x, int64_t rows, int64_t dim,
                                      std::span<const double> omega) {
  const int64_t half = int64_t(omega.size()) / dim, m = 2 * half;
  const double norm = std::sqrt(2.0 / double(m));
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x + r * dim;
    for (int64_t i = 0; i < half; ++i) {
      const double t = argument(xr, dim, omega, i);
      phi[r * m + i] = norm * std::cos(t);
      phi[r * m + half + i] = norm * std::sin(t);
    }
  }
}

void random_fourier_backward_reference(double* dx, const double* dphi, const double* x, int64_t rows, int64_t dim,
                                       std::span<const double> omega) {
  const int64_t half = int64_t(omega.size()) / dim, m = 2 * half;
  const double scale = std::pow(double(dim), -0.25), norm = std::sqrt(2.0 / double(m));
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x + r * dim;
    const double* dpr = dphi + r * m;
    double* g = dx + r * dim;
    std::fill(g, g + dim, 0.0);
    for (int64_t i = 0; i < half; ++i) {
      const double t = argument(xr, dim, omega, i);
      // Σ over φᵢ and φ_{h+i} of dφ·∂φ/∂tᵢ.
      const double dt = norm * (dpr[half + i] * std::cos(t) - dpr[i] * std::sin(t));
      for (int64_t d = 0; d < dim; ++d) g[d] += dt * omega[size_t(i * dim + d)] * scale;
    }
  }
}

}  // namespace linattn::detail
