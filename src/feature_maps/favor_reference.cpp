// The FAVOR+ oracle, straight from the definition in include/linattn/favor.hpp, one row at a time:
//   x̂ = x·D^(−1/4),  aᵢ = ωᵢ·x̂ − |x̂|²/2,  ∂aᵢ/∂x = ωᵢ·D^(−1/4) − x/√D
//   key   φᵢ = exp(min(aᵢ, cap)) / √m                       ∂φᵢ/∂x = [aᵢ < cap] φᵢ ∂aᵢ/∂x
//   query φᵢ = exp(aᵢ − c) / √m, c = a* − band              ∂φᵢ/∂x = φᵢ (∂aᵢ/∂x − ∂c/∂x)
// where a* = a_top is the largest exponent and ∂c/∂x = ∂a_top/∂x. The query gradient is therefore
// Σᵢ dφᵢ φᵢ (ωᵢ − ω_top)·D^(−1/4): the x/√D terms cancel exactly and the top feature's own term is 0,
// so no huge term is subtracted from another.
#include "feature_maps/favor_reference.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "linattn/favor.hpp"

namespace linattn::detail {
namespace {

// The exponents a: [m] of one row x: [D], and the index of the largest (the first of equals).
int64_t exponents(std::vector<double>& a, const double* x, int64_t dim, std::span<const double> omega) {
  const int64_t m = int64_t(a.size());
  const double scale = std::pow(double(dim), -0.25);
  double norm2 = 0;  // |x̂|²
  for (int64_t d = 0; d < dim; ++d) norm2 += (x[d] * scale) * (x[d] * scale);
  int64_t top = 0;
  for (int64_t i = 0; i < m; ++i) {
    double dot = 0;
    for (int64_t d = 0; d < dim; ++d) dot += omega[size_t(i * dim + d)] * (x[d] * scale);
    a[size_t(i)] = dot - norm2 / 2;
    if (a[size_t(i)] > a[size_t(top)]) top = i;
  }
  return top;
}

// c(q): the shift that puts the row's largest exponent at the band's top.
double query_offset(double top_exponent) { return top_exponent - kFavorQueryBand; }

}  // namespace

void favor_forward_reference(double* phi, const double* x, int64_t rows, int64_t dim, std::span<const double> omega,
                             FeatureRole role) {
  const int64_t m = int64_t(omega.size()) / dim;
  std::vector<double> a(static_cast<size_t>(m));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t top = exponents(a, x + r * dim, dim, omega);
    const double c = role == FeatureRole::query ? query_offset(a[size_t(top)]) : 0.0;
    for (int64_t i = 0; i < m; ++i) {
      const double e = role == FeatureRole::key ? std::min(a[size_t(i)], kFavorKeyCap) : a[size_t(i)] - c;
      phi[r * m + i] = std::exp(e) / std::sqrt(double(m));
    }
  }
}

void favor_backward_reference(double* dx, const double* dphi, const double* x, int64_t rows, int64_t dim,
                              std::span<const double> omega, FeatureRole role) {
  const int64_t m = int64_t(omega.size()) / dim;
  const double scale = std::pow(double(dim), -0.25), inv_sqrt_d = 1.0 / std::sqrt(double(dim));
  std::vector<double> a(static_cast<size_t>(m));
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x + r * dim;
    double* g = dx + r * dim;
    std::fill(g, g + dim, 0.0);
    const int64_t top = exponents(a, xr, dim, omega);
    const double c = role == FeatureRole::query ? query_offset(a[size_t(top)]) : 0.0;
    const bool shifted = role == FeatureRole::query;
    for (int64_t i = 0; i < m; ++i) {
      if (role == FeatureRole::key && a[size_t(i)] >= kFavorKeyCap) continue;  // the cap is flat
      const double e = role == FeatureRole::key ? a[size_t(i)] : a[size_t(i)] - c;
      const double w = dphi[r * m + i] * std::exp(e) / std::sqrt(double(m));  // dφᵢ φᵢ
      for (int64_t d = 0; d < dim; ++d) {
        const double da = shifted ? (omega[size_t(i * dim + d)] - omega[size_t(top * dim + d)]) * scale
                                  : omega[size_t(i * dim + d)] * scale - xr[d] * inv_sqrt_d;
        g[d] += w * da;
      }
    }
  }
}

}  // namespace linattn::detail
