// The elementwise feature maps: elu+1, relu and identity (M = D).
#include <cmath>
#include <string>

#include "linattn/error.hpp"
#include "linattn/feature_map.hpp"

namespace linattn {
namespace {

// Elementwise map given by f (value) and df (derivative), in fp32 and fp64 alike.
template <class Map>
class ElementwiseMap final : public FeatureMap {
 public:
  std::string name() const override { return Map::name; }
  void forward(float* phi, const float* x, int64_t rows, int64_t dim,
               FeatureRole) const override {
    for (int64_t i = 0; i < rows * dim; ++i) phi[i] = Map::f(x[i]);
  }
  void backward(float* dx, const float* dphi, const float* x, int64_t rows, int64_t dim,
               FeatureRole) const override {
    for (int64_t i = 0; i < rows * dim; ++i) dx[i] = dphi[i] * Map::df(x[i]);
  }
  void forward_reference(double* phi, const double* x, int64_t rows, int64_t dim,
               FeatureRole) const override {
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
  template <class T>
  static T f(T x) { return x > T(0) ? x + T(1) : std::exp(x); }
  template <class T>
  static T df(T x) { return x > T(0) ? T(1) : std::exp(x); }
};

struct Relu {
  static constexpr const char* name = "relu";
  template <class T>
  static T f(T x) { return x > T(0) ? x : T(0); }
  template <class T>
  static T df(T x) { return x > T(0) ? T(1) : T(0); }
};

struct Identity {
  static constexpr const char* name = "identity";
  template <class T>
  static T f(T x) { return x; }
  template <class T>
  static T df(T) { return T(1); }
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
