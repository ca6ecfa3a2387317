#pragma once
// φ of a tile of one head's rows, with the linear normaliser's sums formed on the way, for every pass
// that maps rows (the single-process linear drivers and the distributed local passes): the built-in
// maps read the rows in place and form the sums in the same pass (kernels::feature_tile); any other map
// gathers the rows and goes through FeatureMap::forward, the sums after.
#include <cstdint>
#include <optional>

#include "kernels/feature_map_elementwise.hpp"
#include "kernels/pack.hpp"
#include "linattn/feature_map.hpp"

namespace linattn::detail {

// The kernels' form of a built-in map (elu + 1, relu, identity); nullopt for any other map.
std::optional<kernels::TileMap> builtin_tile_map(const FeatureMap* map);

// The normaliser's sums formed with a tile's φ (each optional): sum[0:M] += Σ_r φ_r, rows in order (the
// keys' z), and dots[r] = φ_r · dot[0:M] (the queries' φ(q)·z).
struct FeatureSums {
  float* sum = nullptr;
  const float* dot = nullptr;
  float* dots = nullptr;
};

// The arguments of map_rows: phi: [rows, ldp] (ldp ≥ M; lanes M..ldp set to 0) = φ(rows [n0, n0 + rows)
// of x, D wide). builtin: builtin_tile_map(map), decided once per pass; the rows are read in place when
// it is set, x's rows are contiguous and ldp is a multiple of kPad. Otherwise they are gathered into
// xs: [rows, D], and mapped into phi_m: [rows, M] first when ldp ≠ M.
struct FeatureRows {
  float* phi = nullptr;
  int64_t ldp = 0;
  const FeatureMap* map = nullptr;
  std::optional<kernels::TileMap> builtin;
  FeatureRole role = FeatureRole::query;
  kernels::HeadRows<const float> x{};
  int64_t n0 = 0, rows = 0, D = 0, M = 0;
  float* xs = nullptr;
  float* phi_m = nullptr;
};
void map_rows(const FeatureRows& t, const FeatureSums& sums = {});

}  // namespace linattn::detail
