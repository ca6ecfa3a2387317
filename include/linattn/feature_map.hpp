#pragma once
// Feature maps φ for linear attention: φ(q)ᵀφ(k) stands in for the softmax kernel.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace linattn {

// Whether a map is applied to queries or to keys. Random-feature maps (Performer) stabilise the two
// differently: a per-row shift is safe for a query (it cancels in the normaliser and touches only
// its own output row) but not for a key, whose features enter every later output.
enum class FeatureRole { query, key };

// One feature map: rows of D inputs to rows of M = feature_dim(D) non-negative features.
// Implementations provide a fast fp32 path and a plain fp64 path; the fp64 path is the oracle
// that tests compare the fp32 path against, so it is written straight from the formula.
class FeatureMap {
 public:
  virtual ~FeatureMap() = default;

  // "elu", "relu", "identity", ...: the name used by the CLI, Python and the state file.
  virtual std::string name() const = 0;
  // M, the feature dim, for head dim D.
  virtual int64_t feature_dim(int64_t dim) const { return dim; }

  // phi: [rows, M] = φ(x: [rows, D]); both contiguous.
  virtual void forward(float* phi, const float* x, int64_t rows, int64_t dim, FeatureRole role) const = 0;
  // dx: [rows, D] = (∂φ/∂x)ᵀ dphi, overwriting dx; dphi: [rows, M]; x: [rows, D].
  virtual void backward(float* dx, const float* dphi, const float* x, int64_t rows, int64_t dim,
                        FeatureRole role) const = 0;

  // fp64 oracle of forward and backward, same shapes.
  virtual void forward_reference(double* phi, const double* x, int64_t rows, int64_t dim, FeatureRole role) const = 0;
  virtual void backward_reference(double* dx, const double* dphi, const double* x, int64_t rows, int64_t dim,
                                  FeatureRole role) const = 0;
};

using FeatureMapPtr = std::shared_ptr<const FeatureMap>;

// φ(x) = elu(x) + 1 (the seed's map, the default).
FeatureMapPtr elu_feature_map();
// φ(x) = max(x, 0).
FeatureMapPtr relu_feature_map();
// φ(x) = x (no normaliser guarantee: its features may be negative).
FeatureMapPtr identity_feature_map();
// By name: "elu", "relu" or "identity". Throws linattn::Error naming the choices otherwise.
FeatureMapPtr feature_map_by_name(std::string_view name);

}  // namespace linattn
