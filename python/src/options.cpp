// Keyword arguments to operator options, and feature maps by name (with "favor" when its header is built).
#if __has_include("linattn/performer.hpp")
#include "linattn/performer.hpp"
#define LINATTN_PYTHON_FAVOR 1
#else
#define LINATTN_PYTHON_FAVOR 0
#endif

#include "bindings.hpp"
#include "family_args.hpp"

namespace linattn::python {

bool has_favor() { return LINATTN_PYTHON_FAVOR != 0; }

FeatureMapPtr feature_map_arg(const std::string& name, int64_t dim, std::optional<int64_t> n_features, uint64_t seed) {
  if (name == "favor") {
#if LINATTN_PYTHON_FAVOR
    FavorOptions options;
    options.n_features = n_features.value_or(0);
    options.seed = seed;
    return favor_feature_map(dim, options);
#else
    (void)dim, (void)seed;
    throw py::value_error("feature_map: \"favor\" is not in this build (no include/linattn/performer.hpp)");
#endif
  }
  if (n_features)
    throw py::value_error("n_features: only feature_map=\"favor\" takes it, got feature_map=\"" + name + "\"");
  return feature_map_by_name(name);
}

SoftmaxAttentionOptions softmax_options(std::span<const int64_t> key_lengths, bool causal, std::optional<float> scale,
                                        std::span<const int64_t> cu_seqlens) {
  SoftmaxAttentionOptions options;
  options.scale = scale;
  options.causal = causal;
  options.key_lengths = key_lengths;
  options.cu_seqlens = cu_seqlens;
  return options;
}

LinearAttentionOptions linear_options(std::span<const int64_t> key_lengths, int64_t dim, const std::string& feature_map,
                                      bool causal, float eps, std::optional<int64_t> n_features, uint64_t seed,
                                      std::span<const int64_t> cu_seqlens) {
  LinearAttentionOptions options;
  options.feature_map = feature_map_arg(feature_map, dim, n_features, seed);
  options.eps = eps;
  options.causal = causal;
  options.key_lengths = key_lengths;
  options.cu_seqlens = cu_seqlens;
  return options;
}

std::vector<int64_t> cu_seqlens_arg(const py::object& cu_seqlens) {
  return vector_arg<int64_t>(cu_seqlens, "cu_seqlens", "[N + 1]");
}

}  // namespace linattn::python
