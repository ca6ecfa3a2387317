#include "feature_maps/feature_rows.hpp"

#include <algorithm>

#include "kernels/rows.hpp"
#include "kernels/tile.hpp"

namespace linattn::detail {

std::optional<kernels::TileMap> builtin_tile_map(const FeatureMap* map) {
  if (map == elu_feature_map().get()) return kernels::TileMap::elu;
  if (map == relu_feature_map().get()) return kernels::TileMap::relu;
  if (map == identity_feature_map().get()) return kernels::TileMap::identity;
  return std::nullopt;
}

void map_rows(const FeatureRows& t, const FeatureSums& sums) {
  if (t.rows <= 0) return;
  if (t.builtin && t.x.col == 1 && t.ldp % kernels::kPad == 0) {
    // Fused: φ straight from the strided rows into the padded tile, with its sums, one trip through the cache.
    kernels::feature_tile({.x = t.x.at(t.n0),
                           .ldx = t.x.row,
                           .phi = t.phi,
                           .ldp = t.ldp,
                           .rows = t.rows,
                           .cols = t.D,
                           .map = *t.builtin,
                           .sum = sums.sum,
                           .dot = sums.dot,
                           .dots = sums.dots});
    return;
  }
  kernels::pack_rows({t.xs, t.D, t.rows, t.D}, t.x, t.n0, t.rows);
  if (t.ldp == t.M) {
    t.map->forward(t.phi, t.xs, t.rows, t.D, t.role);
  } else {
    t.map->forward(t.phi_m, t.xs, t.rows, t.D, t.role);
    for (int64_t r = 0; r < t.rows; ++r) {
      std::copy_n(t.phi_m + r * t.M, t.M, t.phi + r * t.ldp);
      std::fill(t.phi + r * t.ldp + t.M, t.phi + (r + 1) * t.ldp, 0.0f);
    }
  }
  if (sums.sum) kernels::add_weighted_rows(sums.sum, t.phi, t.ldp, nullptr, t.rows, t.M);
  if (sums.dots) kernels::row_dots(sums.dots, t.phi, t.ldp, sums.dot, t.rows, t.M);
}

}  // namespace linattn::detail
