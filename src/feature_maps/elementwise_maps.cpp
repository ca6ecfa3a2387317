// The elementwise feature maps: elu+1, relu and identity (M = D). The fp32 path runs the SIMD
// kernels of kernels/feature_map_elementwise; the fp64 path is the plain formula (the oracle).
#include <cmath>
#include <cstring>
#include <string>

#include "core/validate.hpp"
#include "kernels/feature_map_elementwise.hpp"
#include "linattn/error.hpp"
#include "linattn/feature_map.hpp"

namespace linattn {
namespace {

// Elementwise map given by f (value) and df (derivative) in fp64, and by the SIMD kernels
// Map::forward32 / Map::backward32 in fp32.
template <class Map>
class ElementwiseMap final : public FeatureMap {
 public:
  std::string name() const override { return Map::name; }
  void forward(float* phi, const float* x, int64_t rows, int64_t dim, FeatureRole) const override {
    detail::check_map_forward(phi, x, rows, dim, dim);
    Map::forward32(phi, x, rows * dim);
  }
  void backward(float* dx, const float* dphi, const float* x, int64_t rows, int64_t dim, FeatureRole) const override {
    detail::check_map_backward(dx, dphi, x, rows, dim, dim);
    Map::backward32(dx, dphi, x, rows * dim);
  }
  void forward_reference(double* phi, const double* x, int64_t rows, int64_t dim, FeatureRole) const override {
    for (int64_t i = 0; i < rows * dim; ++i) phi[i] = Map::f(x[i]);
  }
  void backward_reference(double* dx, const double* dphi, const double* x, int64_t rows, int64_t dim,
                          FeatureRole) const override {
    for (int64_t i = 0; i < rows * dim; ++i) dx[i] = dphi[i] * Map::df(x[i]);
  }
};

struct EluPlusOne {
  static constexpr const char* name = "elu";
  // φ(x) = elu(x) + 1 = x + 1 for x > 0, exp(x) otherwise.
  static double f(double x) { return x > 0 ? x + 1 : std::exp(x); }
  static double df(double x) { return x > 0 ? 1 : std::exp(x); }
  static void forward32(float* phi, const float* x, int64_t n) { kernels::elu_forward(phi, x, n); }
  static void backward32(float* dx, const float* dphi, const float* x, int64_t n) {
    kernels::elu_backward(dx, dphi, x, n);
  }
};

struct Relu {
  static constexpr const char* name = "relu";
  // NaN passes through (x != x), as it does in every other map.
  static double f(double x) { return x > 0 || x != x ? x : 0; }
  static double df(double x) { return x > 0 ? 1 : 0; }
  static void forward32(float* phi, const float* x, int64_t n) { kernels::relu_forward(phi, x, n); }
  static void backward32(float* dx, const float* dphi, const float* x, int64_t n) {
    kernels::relu_backward(dx, dphi, x, n);
  }
};

struct Identity {
  static constexpr const char* name = "identity";
  static double f(double x) { return x; }
  static double df(double) { return 1; }
  static void forward32(float* phi, const float* x, int64_t n) { std::memmove(phi, x, size_t(n) * sizeof(float)); }
  static void backward32(float* dx, const float* dphi, const float*, int64_t n) {
    std::memmove(dx, dphi, size_t(n) * sizeof(float));
  }
};

}  // namespace

FeatureMapPtr elu_feature_map() {
  static const FeatureMapPtr map = std::make_shared<ElementwiseMap<EluPlusOne>>();
  return map;
}
FeatureMapPtr relu_feature_map() {
  static const FeatureMapPtr map = std::make_shared<ElementwiseMap<Relu>>();
  return map;
}
FeatureMapPtr identity_feature_map() {
  static const FeatureMapPtr map = std::make_shared<ElementwiseMap<Identity>>();
  return map;
}

FeatureMapPtr feature_map_by_name(std::string_view name) {
  if (name == "elu") return elu_feature_map();
  if (name == "relu") return relu_feature_map();
  if (name == "identity") return identity_feature_map();
  throw Error("linattn::feature_map_by_name: feature_map is \"" + std::string(name) +
              "\", expected one of \"elu\", \"relu\", \"identity\"");
}

}  // namespace linattn
