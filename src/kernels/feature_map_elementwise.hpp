#pragma once
// SIMD fp32 elementwise feature maps (Highway, dispatched at runtime) over n contiguous values.
#include <cstdint>

namespace linattn::kernels {

// φ = elu(x) + 1 = x + 1 (x > 0) or exp(x); NaN propagates.
void elu_forward(float* phi, const float* x, int64_t n);
// dx = dφ · (1 (x > 0) or exp(x)).
void elu_backward(float* dx, const float* dphi, const float* x, int64_t n);
// φ = max(x, 0); NaN propagates.
void relu_forward(float* phi, const float* x, int64_t n);
// dx = dφ · [x > 0].
void relu_backward(float* dx, const float* dphi, const float* x, int64_t n);

// Tiles of rows: kernels::feature_tile (linear_tiles.hpp), which also forms the normaliser's sums.

// dx: [rows, cols] (pitch ldx) = dphi ⊙ φ'(x) with φ'(x) read off φ itself, so that neither x nor an
// exp is needed: elu+1: φ' = min(φ, 1) (φ > 1 exactly when x > 0, and φ = e^x below); relu: [φ > 0].
void elu_backward_from_phi(float* dx, int64_t ldx, const float* dphi, int64_t ldd, const float* phi, int64_t ldp,
                           int64_t rows, int64_t cols);
void relu_backward_from_phi(float* dx, int64_t ldx, const float* dphi, int64_t ldd, const float* phi, int64_t ldp,
                            int64_t rows, int64_t cols);

}  // namespace linattn::kernels
