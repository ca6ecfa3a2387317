#pragma once
// The one tile product behind every matrix product of exact softmax attention (forward and
// backward): C (+)= A·B on a tile, A addressed through two strides so that Aᵀ needs no copy, and a
// per-row range of the reduction index so that masked (causal) entries are never multiplied.
#include <cstdint>

namespace linattn::kernels {

// Column counts of B and C are multiples of this (tiles are zero-padded to it).
inline constexpr int64_t kTileLanes = 16;

// c: [rows, ldc]; a(m, k) = a[m·a_row_stride + k·a_col_stride]; b: [depth, ldb]; cols % kTileLanes == 0.
// c[m, 0:cols] (+)= Σ_{k ∈ [k_begin[m], k_end[m])} a(m, k) · b[k, 0:cols]
// k_begin / k_end may be null: the range is then [0, depth). accumulate = false overwrites c.
void softmax_tile_matmul(float* c, int64_t ldc, const float* a, int64_t a_row_stride, int64_t a_col_stride,
                         const float* b, int64_t ldb, const int32_t* k_begin, const int32_t* k_end, int64_t rows,
                         int64_t cols, int64_t depth, bool accumulate);

// The Highway target the kernels dispatch to on this machine, e.g. "AVX3".
const char* softmax_kernel_target();

}  // namespace linattn::kernels
