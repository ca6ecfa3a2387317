// FAVOR+ positive random features (Performer) with a causal-safe stabiliser; the formula and why it
// is safe are in include/linattn/favor.hpp and docs/performer-linformer.md.
#include "linattn/favor.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "core/random_draws.hpp"
#include "core/validate.hpp"
#include "feature_maps/favor_reference.hpp"
#include "feature_maps/random_projection.hpp"
#include "kernels/rows.hpp"

namespace linattn {
namespace {

// |x̂|²/2 = Σ x²/(2√D) for one row x: [D]. Every exponent is aᵢ = tᵢ − |x̂|²/2 with t = ω x̂.
template <class T>
T half_squared_norm(const T* x, int64_t dim) {
  T squares = 0;
  for (int64_t d = 0; d < dim; ++d) squares += x[d] * x[d];
  return squares / (T(2) * std::sqrt(T(dim)));
}

// φ: [m] of one row from t: [m]; fp32 with one vector exp. A query row is shifted so that its largest
// exponent is kFavorQueryBand: φᵢ = exp(tᵢ − t* + band)/√m (the |x̂|²/2 term is a per-row constant and
// drops out with the shift). Returns the index of t* for a query row (c = a* − band moves with it),
// −1 for a key row.
int64_t features_row(float* phi, const float* t, float half_norm, int64_t m, FeatureRole role) {
  const float norm = 1.0f / std::sqrt(float(m));
  if (role == FeatureRole::key) {
    kernels::exp_shifted(phi, t, m, half_norm, float(kFavorKeyCap), norm);
    return -1;
  }
  const float top = kernels::row_max(t, m);
  kernels::exp_shifted(phi, t, m, top - float(kFavorQueryBand), std::numeric_limits<float>::infinity(), norm);
  // top is NaN (and found nowhere) when the row holds NaN: then no index, and NaN flows through φ.
  const int64_t index = int64_t(std::find(t, t + m, top) - t);
  return index < m ? index : -1;
}
// g: [m], holding φ, becomes the exponents' gradient gᵢ = dφᵢ φᵢ (0 where a key exponent is capped:
// the cap is flat there). For a query row, c = a_top − band moves with a_top and φ_top = e^band/√m
// is flat, so g_top = −Σ_{i≠top} gᵢ, summed without g_top (which can be e³⁰ times
// larger: folding it in as g_top − Σ g would cancel catastrophically). Returns what multiplies
// ∂(−|x̂|²/2)/∂x: Σ g after that fold.
template <class T>
T exponent_grads(T* g, const T* dphi, const T* t, T half_norm, int64_t m, FeatureRole role, int64_t top) {
  T others = 0;
  for (int64_t i = 0; i < m; ++i) {
    const bool capped = role == FeatureRole::key && t[i] - half_norm > T(kFavorKeyCap);
    g[i] = capped ? T(0) : dphi[i] * g[i];
    if (i != top) others += g[i];
  }
  if (top < 0) return others;
  g[top] = -others;
  return 0;
}

class FavorMap final : public detail::RandomProjectionMap {
 public:
  FavorMap(int64_t dim, const FavorOptions& options)
      : RandomProjectionMap(dim, options.seed,
                            options.orthogonal ? detail::orthogonal_omega(options.n_features, dim, options.seed)
                                               : detail::gaussian_omega(options.n_features, dim, options.seed)),
        options_(options) {}

  std::string name() const override { return draw_name(rows_, options_.orthogonal ? ",orthogonal" : ",iid"); }
  std::string kind() const override { return "favor"; }
  int64_t feature_dim(int64_t dim) const override {
    check_dim(dim);
    return rows_;
  }

  void forward(float* phi, const float* x, int64_t rows, int64_t dim, FeatureRole role) const override {
    detail::check_map_forward(phi, x, rows, dim_, rows_);
    assert(dim == dim_);
    (void)dim;  // checked by feature_dim at the boundary
    forward_rows(phi, x, rows, role);
  }
  void backward(float* dx, const float* dphi, const float* x, int64_t rows, int64_t dim,
                FeatureRole role) const override {
    detail::check_map_backward(dx, dphi, x, rows, dim_, rows_);
    assert(dim == dim_);
    (void)dim;  // checked by feature_dim at the boundary
    backward_rows(dx, dphi, x, rows, role);
  }
  // The oracle: favor_reference.cpp, which shares no code with forward_rows / backward_rows.
  void forward_reference(double* phi, const double* x, int64_t rows, int64_t dim, FeatureRole role) const override {
    assert(dim == dim_);
    (void)dim;  // checked by feature_dim at the boundary
    detail::favor_forward_reference(phi, x, rows, dim_, omega_, role);
  }
  void backward_reference(double* dx, const double* dphi, const double* x, int64_t rows, int64_t dim,
                          FeatureRole role) const override {
    assert(dim == dim_);
    (void)dim;  // checked by feature_dim at the boundary
    detail::favor_backward_reference(dx, dphi, x, rows, dim_, omega_, role);
  }

  FeatureMapPtr redraw(uint64_t seed) const override {
    FavorOptions options = options_;
    options.seed = seed;
    return std::make_shared<FavorMap>(dim_, options);
  }

 private:
  // φ: [rows, m] = favor(x: [rows, D]), projecting kBlockRows rows at a time.
  template <class T>
  void forward_rows(T* phi, const T* x, int64_t rows, FeatureRole role) const {
    std::vector<T> t(static_cast<size_t>(std::min(rows, kBlockRows) * ldt_));
    for (int64_t first = 0; first < rows; first += kBlockRows) {
      const int64_t n = std::min(kBlockRows, rows - first);
      project_block(t.data(), x + first * dim_, n);
      for (int64_t r = first; r < first + n; ++r) {
        const T* xr = x + r * dim_;
        features_row(phi + r * rows_, t.data() + (r - first) * ldt_, half_squared_norm(xr, dim_), rows_, role);
      }
    }
  }

  // dx: [rows, D] = (∂φ/∂x)ᵀ dphi. With aᵢ = ωᵢᵀx̂ − |x̂|²/2, ∂aᵢ/∂x = D^(−1/4)ωᵢ − x/√D, so
  // dx = Σᵢ gᵢ D^(−1/4)ωᵢ − (Σᵢ gᵢ) x/√D with g from exponent_grads.
  template <class T>
  void backward_rows(T* dx, const T* dphi, const T* x, int64_t rows, FeatureRole role) const {
    const int64_t block = std::min(rows, kBlockRows);
    std::vector<T> t(static_cast<size_t>(block * ldt_)), g(t.size()), total(static_cast<size_t>(block));
    const T inv_sqrt_d = T(1) / std::sqrt(T(dim_));
    for (int64_t first = 0; first < rows; first += kBlockRows) {
      const int64_t n = std::min(kBlockRows, rows - first);
      project_block(t.data(), x + first * dim_, n);
      for (int64_t r = 0; r < n; ++r) {
        const T* tr = t.data() + r * ldt_;
        T* gr = g.data() + r * ldt_;
        const T half_norm = half_squared_norm(x + (first + r) * dim_, dim_);
        const int64_t top = features_row(gr, tr, half_norm, rows_, role);
        total[size_t(r)] = exponent_grads(gr, dphi + (first + r) * rows_, tr, half_norm, rows_, role, top);
      }
      project_backward(dx + first * dim_, g.data(), n);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t d = 0; d < dim_; ++d)
          dx[(first + r) * dim_ + d] -= total[size_t(r)] * x[(first + r) * dim_ + d] * inv_sqrt_d;
    }
  }

  FavorOptions options_;  // n_features resolved
};

}  // namespace

int64_t default_favor_features(int64_t dim) {
  if (dim < 1) detail::fail("default_favor_features", "dim is " + std::to_string(dim) + ", expected ≥ 1");
  return std::max(dim, int64_t(std::ceil(double(dim) * std::log(double(dim)))));
}

FeatureMapPtr favor_feature_map(int64_t dim, const FavorOptions& options) {
  const char* op = "favor_feature_map";
  if (dim < 1) detail::fail(op, "dim is " + std::to_string(dim) + ", expected ≥ 1");
  if (options.n_features < 0) {
    detail::fail(op, "n_features is " + std::to_string(options.n_features) + ", expected ≥ 1 (or 0 for the default)");
  }
  FavorOptions resolved = options;
  if (resolved.n_features == 0) resolved.n_features = default_favor_features(dim);
  detail::checked_mul(op, "n_features × dim", resolved.n_features, dim);
  return std::make_shared<FavorMap>(dim, resolved);
}

const RandomFeatureMap& as_random_feature_map(const FeatureMap& map) {
  const auto* random = dynamic_cast<const RandomFeatureMap*>(&map);
  if (random == nullptr) {
    detail::fail("as_random_feature_map",
                 "map is \"" + map.name() + "\", expected a random-feature map (\"favor\" or \"random_fourier\")");
  }
  return *random;
}

}  // namespace linattn
