#pragma once
// Products over the lower triangle of a chunk's [n, n] matrices (the causal part of the chunked
// families: decayed and delta rule), every product through kernels::gemm in strips of kPad rows, each
// only as wide (or deep) as the triangle reaches. Single-threaded.
#include <cstdint>

#include "kernels/gemm.hpp"
#include "kernels/tile.hpp"

namespace linattn::kernels {

// The depth bounds of a strip's rows over a triangle (a GEMM's k_begin or k_end, at most kPad rows):
// row i's bound is first + i, so that a row's range ends just after its diagonal (or starts at it).
struct StripBounds {
  int32_t at[kPad];
  StripBounds(int64_t first, int64_t rows) {
    for (int64_t i = 0; i < rows; ++i) at[i] = int32_t(first + i);
  }
};

// True when x [n] holds no NaN and no Inf.
bool finite_row(const float* x, int64_t n);

// One strip of a product over a triangle, whose masked entries of a are 0: c (+)= a b with each row
// reading only the rows of b on its side of the diagonal (bounds: k_end when `ends`, else k_begin), so
// that a masked 0 never meets a row of b holding NaN or Inf (0 · NaN is NaN): NaN and Inf reach exactly
// the rows that depend on them. Overwriting, the strip first runs over its whole depth (per-row ranges
// cost a few percent) and is kept when its row `whole`, which reads every row of b the strip reads, came
// out finite: one NaN or Inf among them would have left it non-finite. Otherwise, and always when
// accumulating (c's old values would be lost), each row runs over its own range.
void triangle_strip(Tile c, Strided a, ConstTile b, const StripBounds& bounds, bool ends, int64_t whole,
                    const GemmOptions& options);

// x: [n, ≥ n] (pitch ld): the entries above the diagonal set to 0 (and the diagonal too where
// `strict`), the rest multiplied by W (null: 1) up to each strip's width.
void mask_lower(float* x, int64_t ld, const float* W, int64_t ldw, int64_t n, bool strict = false);

// c: [n, n] (pitch ldc) = left · right, on and below the diagonal by strips: left [n, depth]
// (pitch ldl), right_t [depth, ≥ n] (pitch ldr, the other side transposed). Entries above the
// diagonal inside a strip hold garbage until mask_lower.
void lower_scores(float* c, int64_t ldc, const float* left, int64_t ldl, const float* right_t, int64_t ldr, int64_t n,
                  int64_t depth);

// c: [n, cols] (+)= A B over the lower-triangular A: [n, n]: row t sums the rows s ≤ t of B, and reads
// no other (a NaN in a later row of B stays out of row t).
void lower_product(float* c, int64_t ldc, const float* A, int64_t lda, const float* B, int64_t ldb, int64_t n,
                   int64_t cols, bool accumulate);

// c: [n, cols] (+)= Aᵀ B over the lower-triangular A: [n, n] (pitch lda): row s of the result sums the
// rows t ≥ s of B, and reads no other.
void lower_transposed_product(float* c, int64_t ldc, const float* A, int64_t lda, const float* B, int64_t ldb,
                              int64_t n, int64_t cols, bool accumulate);

// T: [n, n] (pitch ldt) = (I − sign · diag(f) L)⁻¹ for L: [n, n] strictly lower (pitch ldl; its diagonal
// and what lies right of it are not read), f: [n] (null: all ones); the WY form's unit lower-triangular
// solve. Row by row, T[t, :t] = sign · f_t · L[t, :t] T[:t, :t] and T[t, t] = 1; each row holds 0 right of
// its diagonal up to padded(n), so that T can enter the lower products above.
void unit_lower_inverse(float* T, int64_t ldt, const float* L, int64_t ldl, int64_t n, float sign,
                        const float* f = nullptr);

}  // namespace linattn::kernels
