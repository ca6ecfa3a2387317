#pragma once
// Tile kernels of linear attention: single-threaded, SIMD (Highway, dispatched at runtime), on packed
// row-major tiles whose rows are padded to a multiple of kPad floats.
#include <cstdint>

namespace linattn::kernels {

// Row pitch granule of packed tiles: 16 floats (one AVX-512 vector, two AVX2 vectors).
inline constexpr int64_t kPad = 16;
inline constexpr int64_t padded(int64_t n) { return (n + kPad - 1) / kPad * kPad; }

// c: [rows, cols] (pitch ldc) += a · b, a(r, k) = a[r·a_rs + k·a_ks], b: [depth, cols] (pitch ldb).
// cols is a multiple of kPad (ldb and ldc need not be: rows of a caller's tensor serve directly).
// Strided a covers both a and aᵀ without a copy.
void gemm_acc(float* c, int64_t ldc, const float* a, int64_t a_rs, int64_t a_ks, const float* b, int64_t ldb,
              int64_t rows, int64_t depth, int64_t cols);
// The same with c overwritten: c = a · b.
void gemm_set(float* c, int64_t ldc, const float* a, int64_t a_rs, int64_t a_ks, const float* b, int64_t ldb,
              int64_t rows, int64_t depth, int64_t cols);

// out[r] = a[r, :cols] · x (fixed summation order).
void row_dots(float* out, const float* a, int64_t lda, const float* x, int64_t rows, int64_t cols);
// out[r] = Σ_k a[r, k], k < cols.
void row_sums(float* out, const float* a, int64_t lda, int64_t rows, int64_t cols);
// y[:cols] += Σ_r w[r] · a[r, :cols] (w null: all ones), rows summed in order.
void add_weighted_rows(float* y, const float* a, int64_t lda, const float* w, int64_t rows, int64_t cols);

// dst: [cols, rows] (pitch ldd) = srcᵀ, src: [rows, cols] (pitch lds).
void transpose(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols);

// One recurrent token for one head: S: [M, E] += φk vᵀ (in place), then num: [E] = φqᵀ S.
void rank1_update_readout(float* num, float* S, const float* phi_k, const float* v, const float* phi_q, int64_t M,
                          int64_t E);

}  // namespace linattn::kernels
