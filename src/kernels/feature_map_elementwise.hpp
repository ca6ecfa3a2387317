#pragma once
// SIMD fp32 elementwise feature maps (Highway, dispatched at runtime): over n contiguous values, and
// over a tile of rows with the linear normaliser's sums formed in the same pass.
#include <cstdint>

namespace linattn::kernels {

// The elementwise feature maps: elu(x) + 1, max(x, 0), x.
enum class TileMap { elu, relu, identity };

// phi[0:n] = φ(x[0:n]); NaN propagates.
void map_forward(TileMap map, float* phi, const float* x, int64_t n);
// dx[0:n] = dφ · φ'(x) (elu or relu).
void map_backward(TileMap map, float* dx, const float* dphi, const float* x, int64_t n);
// dx: [rows, cols] (pitch ldx) = dphi ⊙ φ'(x) with φ'(x) read off φ itself, so that neither x nor an
// exp is needed: elu+1: φ' = min(φ, 1) (φ > 1 exactly when x > 0, and φ = e^x below); relu: [φ > 0].
void map_backward_from_phi(TileMap map, float* dx, int64_t ldx, const float* dphi, int64_t ldd, const float* phi,
                           int64_t ldp, int64_t rows, int64_t cols);

// φ = elu(x) + 1 = x + 1 (x > 0) or exp(x); dx = dφ · (1 (x > 0) or exp(x)).
inline void elu_forward(float* phi, const float* x, int64_t n) { map_forward(TileMap::elu, phi, x, n); }
inline void elu_backward(float* dx, const float* dphi, const float* x, int64_t n) {
  map_backward(TileMap::elu, dx, dphi, x, n);
}
// φ = max(x, 0); dx = dφ · [x > 0].
inline void relu_forward(float* phi, const float* x, int64_t n) { map_forward(TileMap::relu, phi, x, n); }
inline void relu_backward(float* dx, const float* dphi, const float* x, int64_t n) {
  map_backward(TileMap::relu, dx, dphi, x, n);
}

// φ of one tile of rows: phi[r, 0:ldp] = φ(x[r, 0:cols]), lanes cols..ldp set to 0 (ldp a multiple of
// kPad). Optionally sum[0:ldp] += Σ_r φ_r (rows in order) and dots[r] = φ_r · dot[0:ldp], in the same
// pass: the normaliser's sums cost no second trip through the tile.
struct FeatureTile {
  const float* x = nullptr;  // [rows, cols], pitch ldx, contiguous within a row
  int64_t ldx = 0;
  float* phi = nullptr;  // [rows, ldp]
  int64_t ldp = 0, rows = 0, cols = 0;
  TileMap map = TileMap::elu;
  float* sum = nullptr;        // [ldp], or null
  const float* dot = nullptr;  // [ldp], or null; needs dots
  float* dots = nullptr;       // [rows]
};
void feature_tile(const FeatureTile& tile);

}  // namespace linattn::kernels
