// The C API's feature maps: elementwise by name, FAVOR+, random Fourier features, and φ itself.
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>

#include "capi/capi_support.hpp"
#include "linattn/favor.hpp"

using namespace linattn::capi;

namespace {

// A new handle for the map create() returns; *out is NULL on failure.
template <class Create>
linattn_status make(const char* function, linattn_feature_map** out, Create create) {
  return guard([&] {
    require(out, function, "out");
    *out = nullptr;
    auto handle = std::make_unique<linattn_feature_map>();
    handle->map = create();
    handle->name = handle->map->name();
    *out = handle.release();
  });
}

// A random-feature map holds its [features, dim] projection: a size argument that passes the map's own
// checks can still ask for more than the process may allocate, which is refused first (invalid sizes
// are left to the map, whose message names them).
void check_projection(const char* function, int64_t dim, int64_t features) {
  if (dim >= 1 && features >= 1)
    linattn::check_allocation(
        std::string(function) + " of a [" + std::to_string(features) + ", " + std::to_string(dim) + "] projection",
        4.0 * double(features) * double(dim));
}

linattn::FeatureMapPtr map_of(const char* function, const linattn_feature_map* map) {
  require(map, function, "map");
  return map->map;
}

// rows [rows, D] of x, as FeatureMap::forward and backward take them.
void check_rows(const char* function, int64_t rows, int64_t dim) {
  if (rows < 0) fail(LINATTN_ERROR_INVALID_ARGUMENT, function, "rows is " + std::to_string(rows) + ", expected >= 0");
  if (dim < 1) fail(LINATTN_ERROR_INVALID_ARGUMENT, function, "dim is " + std::to_string(dim) + ", expected >= 1");
}

// A C caller may pass any int as the enum: loading a value outside it as linattn_feature_role is
// undefined in C++ (UBSan: "load of value 7"), so its bytes are read as the integer they are, and
// range-checked, before any conversion.
linattn::FeatureRole to_role(const char* function, const linattn_feature_role* role) {
  std::underlying_type_t<linattn_feature_role> value;
  static_assert(sizeof value == sizeof *role);
  std::memcpy(&value, role, sizeof value);
  if (value == LINATTN_ROLE_QUERY) return linattn::FeatureRole::query;
  if (value == LINATTN_ROLE_KEY) return linattn::FeatureRole::key;
  fail(LINATTN_ERROR_INVALID_ARGUMENT, function,
       "role is " + std::to_string(value) + ", expected LINATTN_ROLE_QUERY (0) or LINATTN_ROLE_KEY (1)");
}

}  // namespace

extern "C" {

linattn_status linattn_feature_map_create(const char* name, linattn_feature_map** out) {
  const char* function = "linattn_feature_map_create";
  return make(function, out, [&] {
    require(name, function, "name");
    return linattn::feature_map_by_name(name);
  });
}

linattn_status linattn_favor_map_create(int64_t dim, int64_t n_features, uint64_t seed, int orthogonal,
                                        linattn_feature_map** out) {
  return make("linattn_favor_map_create", out, [&] {
    linattn::FavorOptions options;
    options.n_features = n_features;
    options.seed = seed;
    options.orthogonal = orthogonal != 0;
    check_projection("linattn_favor_map_create", dim,
                     n_features == 0 && dim >= 1 ? linattn::default_favor_features(dim) : n_features);
    return linattn::favor_feature_map(dim, options);
  });
}

linattn_status linattn_random_fourier_map_create(int64_t dim, int64_t n_features, uint64_t seed,
                                                 linattn_feature_map** out) {
  return make("linattn_random_fourier_map_create", out, [&] {
    // Its projection holds a row per cos and sin pair.
    check_projection("linattn_random_fourier_map_create", dim, n_features / 2);
    return linattn::random_fourier_feature_map(dim, n_features, seed);
  });
}

void linattn_feature_map_free(linattn_feature_map* map) { delete map; }

linattn_status linattn_feature_map_dim(const linattn_feature_map* map, int64_t dim, int64_t* features) {
  const char* function = "linattn_feature_map_dim";
  return guard([&] {
    require(features, function, "features");
    *features = map_of(function, map)->feature_dim(dim);
  });
}

const char* linattn_feature_map_name(const linattn_feature_map* map) {
  return map == nullptr ? nullptr : map->name.c_str();
}

linattn_status linattn_feature_map_forward(const linattn_feature_map* map, float* phi, const float* x, int64_t rows,
                                           int64_t dim, linattn_feature_role role) {
  const char* function = "linattn_feature_map_forward";
  return guard([&] {
    const auto m = map_of(function, map);
    check_rows(function, rows, dim);
    require(phi, function, "phi");
    require(x, function, "x");
    m->forward(phi, x, rows, dim, to_role(function, &role));
  });
}

linattn_status linattn_feature_map_backward(const linattn_feature_map* map, float* dx, const float* dphi,
                                            const float* x, int64_t rows, int64_t dim, linattn_feature_role role) {
  const char* function = "linattn_feature_map_backward";
  return guard([&] {
    const auto m = map_of(function, map);
    check_rows(function, rows, dim);
    require(dx, function, "dx");
    require(dphi, function, "dphi");
    require(x, function, "x");
    m->backward(dx, dphi, x, rows, dim, to_role(function, &role));
  });
}

}  // extern "C"
