#pragma once
// SIMD fp32 kernels of the random-feature maps and Linformer's projections (Highway, dispatched at
// runtime).
#include <cstdint>

namespace linattn::kernels {

// Pad of the projection's leading dim: the widest x86 vector (AVX-512) holds 16 floats.
inline constexpr int64_t kRandomPad = 16;

// c: [m, n] (row stride ldc) = a: [m, k] (lda) · b: [k, n] (ldb), plus c's old values when accumulate.
// Each c[i][j] is one fused multiply-add chain over k in order, starting from 0 or the old value, so
// it never depends on how rows or columns are blocked. Used by the random-feature projections and
// Linformer's sequence projections (fixed order instead of OpenBLAS, whose bits change with its
// thread count).
void ordered_gemm(float* c, int64_t ldc, const float* a, int64_t lda, const float* b, int64_t ldb, int64_t m, int64_t n,
                  int64_t k, bool accumulate);
// y: [n] = exp(min(x − offset, cap)) · scale; NaN propagates.
void exp_shifted(float* y, const float* x, int64_t n, float offset, float cap, float scale);
// max of x: [n], n ≥ 1.
float row_max(const float* x, int64_t n);

}  // namespace linattn::kernels
