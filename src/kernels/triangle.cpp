#include "kernels/triangle.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/gemm.hpp"
#include "kernels/tile.hpp"

namespace linattn::kernels {
namespace {
constexpr int64_t kStrip = kPad;
}  // namespace

bool finite_row(const float* x, int64_t n) {
  uint32_t non_finite = 0;  // an all-ones exponent: Inf or NaN (integer arithmetic, so that it vectorises)
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof bits);
    non_finite |= uint32_t((bits & 0x7f800000u) == 0x7f800000u);
  }
  return non_finite == 0;
}

void triangle_strip(Tile c, Strided a, ConstTile b, const StripBounds& bounds, bool ends, int64_t whole,
                    const GemmOptions& options) {
  if (!options.accumulate) {
    gemm(c, a, b, options);
    if (finite_row(c.data + whole * c.ld, c.cols)) return;
  }
  GemmOptions ranged = options;
  (ends ? ranged.k_end : ranged.k_begin) = bounds.at;
  gemm(c, a, b, ranged);
}

void mask_lower(float* x, int64_t ld, const float* W, int64_t ldw, int64_t n, bool strict) {
  for (int64_t t = 0; t < n; ++t) {
    float* row = x + t * ld;
    const int64_t width = std::min(n, (t / kStrip + 1) * kStrip), keep = strict ? t : t + 1;
    if (W)
      for (int64_t s = 0; s < keep; ++s) row[s] *= W[t * ldw + s];
    std::fill(row + keep, row + width, 0.0f);
  }
}

void lower_scores(float* c, int64_t ldc, const float* left, int64_t ldl, const float* right_t, int64_t ldr, int64_t n,
                  int64_t depth) {
  for (int64_t r = 0; r < n; r += kStrip) {
    const int64_t rows = std::min(kStrip, n - r), cols = std::min(n, r + rows);
    gemm({c + r * ldc, ldc, rows, cols}, plain(left + r * ldl, ldl), {right_t, ldr, depth, cols});
  }
}

void lower_product(float* c, int64_t ldc, const float* A, int64_t lda, const float* B, int64_t ldb, int64_t n,
                   int64_t cols, bool accumulate) {
  for (int64_t r = 0; r < n; r += kStrip) {
    const int64_t rows = std::min(kStrip, n - r);
    triangle_strip({c + r * ldc, ldc, rows, cols}, plain(A + r * lda, lda), {B, ldb, std::min(n, r + rows), cols},
                   StripBounds(r + 1, rows), true, rows - 1, {.accumulate = accumulate});
  }
}

void lower_transposed_product(float* c, int64_t ldc, const float* A, int64_t lda, const float* B, int64_t ldb,
                              int64_t n, int64_t cols, bool accumulate) {
  for (int64_t r = 0; r < n; r += kStrip) {
    const int64_t rows = std::min(kStrip, n - r);
    triangle_strip({c + r * ldc, ldc, rows, cols}, {A + r * lda + r, 1, lda}, {B + r * ldb, ldb, n - r, cols},
                   StripBounds(0, rows), false, 0, {.accumulate = accumulate});
  }
}

void unit_lower_inverse(float* T, int64_t ldt, const float* L, int64_t ldl, int64_t n, float sign, const float* f) {
  for (int64_t t = 0; t < n; ++t) {
    float* row = T + t * ldt;
    std::fill(row, row + padded(n), 0.0f);
    const float scale = sign * (f ? f[t] : 1.0f);
    // Whole vectors of columns: the rows above hold zeros right of their diagonals.
    const int64_t cols = std::min(padded(n), padded(t));
    if (t > 0) gemm({row, ldt, 1, cols}, plain(L + t * ldl, ldl), {T, ldt, t, cols}, {.row_scale = &scale});
    row[t] = 1.0f;
  }
}

}  // namespace linattn::kernels
