#pragma once
// Products over the lower triangle of a chunk's [n, n] matrices (the causal part of the chunked
// families: decayed and delta rule), every product through kernels::gemm in strips of kPad rows, each
// only as wide (or deep) as the triangle reaches. Single-threaded.
#include <cstdint>

namespace linattn::kernels {

// x: [n, ≥ n] (pitch ld): the entries above the diagonal set to 0 (and the diagonal too where
// `strict`), the rest multiplied by W (null: 1) up to each strip's width.
void mask_lower(float* x, int64_t ld, const float* W, int64_t ldw, int64_t n, bool strict = false);

// c: [n, n] (pitch ldc) = left · right, on and below the diagonal by strips: left [n, depth]
// (pitch ldl), right_t [depth, ≥ n] (pitch ldr, the other side transposed). Entries above the
// diagonal inside a strip hold garbage until mask_lower.
void lower_scores(float* c, int64_t ldc, const float* left, int64_t ldl, const float* right_t, int64_t ldr, int64_t n,
                  int64_t depth);

// c: [n, cols] (+)= A B over the lower-triangular A: [n, n]: row t sums the rows s ≤ t of B.
void lower_product(float* c, int64_t ldc, const float* A, int64_t lda, const float* B, int64_t ldb, int64_t n,
                   int64_t cols, bool accumulate);

// c: [n, cols] (+)= Aᵀ B over the lower-triangular A: [n, n] (pitch lda): row s of the result sums the
// rows t ≥ s of B (the strip's upper corner of A must be zero).
void lower_transposed_product(float* c, int64_t ldc, const float* A, int64_t lda, const float* B, int64_t ldb,
                              int64_t n, int64_t cols, bool accumulate);

}  // namespace linattn::kernels
