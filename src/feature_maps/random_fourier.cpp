// Random Fourier features for the Gaussian kernel (Rahimi & Recht 2007), [cos, sin]·√(2/m).
#include <algorithm>
#include <cassert>
#include <cmath>
#include <memory>
#include <vector>

#include "core/random_draws.hpp"
#include "core/validate.hpp"
#include "feature_maps/random_fourier_reference.hpp"
#include "feature_maps/random_projection.hpp"
#include "linattn/favor.hpp"

namespace linattn {
namespace {

// φ: [m] = √(2/m)[cos t, sin t] for one row, t: [m/2].
void fourier_features_row(float* phi, const float* t, int64_t half) {
  const float scale = std::sqrt(1.0f / float(half));  // √(2/m)
  for (int64_t i = 0; i < half; ++i) {
    phi[i] = scale * std::cos(t[i]);
    phi[half + i] = scale * std::sin(t[i]);
  }
}

// g: [m/2] = √(2/m)(−dcosᵢ sin tᵢ + dsinᵢ cos tᵢ), the gradient of tᵢ.
void fourier_grads_row(float* g, const float* dphi, const float* t, int64_t half) {
  const float scale = std::sqrt(1.0f / float(half));
  for (int64_t i = 0; i < half; ++i) g[i] = scale * (dphi[half + i] * std::cos(t[i]) - dphi[i] * std::sin(t[i]));
}

class FourierMap final : public detail::RandomProjectionMap {
 public:
  FourierMap(int64_t dim, int64_t n_features, uint64_t seed)
      : RandomProjectionMap(dim, seed, detail::gaussian_omega(n_features / 2, dim, seed)) {}

  std::string name() const override { return draw_name(2 * rows_, ""); }
  std::string kind() const override { return "random_fourier"; }
  int64_t feature_dim(int64_t dim) const override {
    check_dim(dim);
    return 2 * rows_;
  }

  void forward(float* phi, const float* x, int64_t rows, int64_t dim, FeatureRole) const override {
    detail::check_map_forward(phi, x, rows, dim_, 2 * rows_);
    assert(dim == dim_);
    (void)dim;  // checked by feature_dim at the boundary
    rows_apply(x, rows, [&](int64_t r, const float* t) { fourier_features_row(phi + r * 2 * rows_, t, rows_); });
  }
  void backward(float* dx, const float* dphi, const float* x, int64_t rows, int64_t dim, FeatureRole) const override {
    detail::check_map_backward(dx, dphi, x, rows, dim_, 2 * rows_);
    assert(dim == dim_);
    (void)dim;  // checked by feature_dim at the boundary
    backward_rows(dx, dphi, x, rows);
  }
  // The oracle: random_fourier_reference.cpp, which shares no code with rows_apply / backward_rows.
  void forward_reference(double* phi, const double* x, int64_t rows, int64_t dim, FeatureRole) const override {
    assert(dim == dim_);
    (void)dim;  // checked by feature_dim at the boundary
    detail::random_fourier_forward_reference(phi, x, rows, dim_, omega_);
  }
  void backward_reference(double* dx, const double* dphi, const double* x, int64_t rows, int64_t dim,
                          FeatureRole) const override {
    assert(dim == dim_);
    (void)dim;  // checked by feature_dim at the boundary
    detail::random_fourier_backward_reference(dx, dphi, x, rows, dim_, omega_);
  }

  FeatureMapPtr redraw(uint64_t seed) const override { return std::make_shared<FourierMap>(dim_, 2 * rows_, seed); }

 private:
  // f(r, t) for each row r of x: [rows, D], with t: [m/2] = ω x̂ projected kBlockRows rows at a time.
  template <class F>
  void rows_apply(const float* x, int64_t rows, const F& f) const {
    std::vector<float> t(static_cast<size_t>(std::min(rows, kBlockRows) * ldt_));
    for (int64_t first = 0; first < rows; first += kBlockRows) {
      const int64_t n = std::min(kBlockRows, rows - first);
      project_block(t.data(), x + first * dim_, n);
      for (int64_t r = first; r < first + n; ++r) f(r, t.data() + (r - first) * ldt_);
    }
  }
  // dx: [rows, D] = Σᵢ gᵢ ∂tᵢ/∂x.
  void backward_rows(float* dx, const float* dphi, const float* x, int64_t rows) const {
    const int64_t block = std::min(rows, kBlockRows);
    std::vector<float> t(static_cast<size_t>(block * ldt_)), g(t.size());
    for (int64_t first = 0; first < rows; first += kBlockRows) {
      const int64_t n = std::min(kBlockRows, rows - first);
      project_block(t.data(), x + first * dim_, n);
      for (int64_t r = 0; r < n; ++r)
        fourier_grads_row(g.data() + r * ldt_, dphi + (first + r) * 2 * rows_, t.data() + r * ldt_, rows_);
      project_backward(dx + first * dim_, g.data(), n);
    }
  }
};

}  // namespace

FeatureMapPtr random_fourier_feature_map(int64_t dim, int64_t n_features, uint64_t seed) {
  const char* op = "random_fourier_feature_map";
  if (dim < 1) detail::fail(op, "dim is " + std::to_string(dim) + ", expected ≥ 1");
  if (n_features < 2 || n_features % 2 != 0) {
    detail::fail(op,
                 "n_features is " + std::to_string(n_features) + ", expected an even number ≥ 2 (cos and sin pairs)");
  }
  detail::checked_mul(op, "n_features × dim", n_features, dim);
  return std::make_shared<FourierMap>(dim, n_features, seed);
}

}  // namespace linattn
