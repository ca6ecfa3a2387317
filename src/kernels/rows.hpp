#pragma once
// Row-wise helpers shared by the operators: dot products and sums of rows, weighted sums of rows,
// transposes, the shifted exp of the random-feature maps, a row's max, and the recurrent steps'
// rank-1 updates (linear, decayed, delta rule). Single-threaded, SIMD (Highway, dispatched at runtime); every sum in a
// fixed order.
#include <cstdint>

#include "linattn/half.hpp"

namespace linattn::kernels {

// out[r] = a[r, :cols] · x (x null: Σ_k a[r, k]); lanes first, then the scalar tail.
void row_dots(float* out, const float* a, int64_t lda, const float* x, int64_t rows, int64_t cols);
inline void row_sums(float* out, const float* a, int64_t lda, int64_t rows, int64_t cols) {
  row_dots(out, a, lda, nullptr, rows, cols);
}
// y[:cols] += Σ_r w[r] · a[r, :cols] (w null: all ones), rows summed in order.
void add_weighted_rows(float* y, const float* a, int64_t lda, const float* w, int64_t rows, int64_t cols);
// The causal running dots: for each row r in order, z[:cols] += b[r, :cols], then out[r] = a[r, :cols] · z
// (a: [rows, cols] pitch lda, b: [rows, cols] pitch ldb); z ends as its start plus every row of b.
void running_dots(float* out, const float* a, int64_t lda, const float* b, int64_t ldb, float* z, int64_t rows,
                  int64_t cols);

// The linear normaliser's backward for one query row, given P = S·dout ([cols], overwritten with dφ(q)):
// out = num / den, so dden = −(φ·P) / den² and dφ = P / den + dden·z. Returns dden; φ·P sums as row_dots.
float normaliser_backward_row(float* P, const float* phi, const float* z, float den, int64_t cols);

// dst: [rows, cols] (pitch ldd) = diag(scale) src (pitch lds): each row times its own factor; in place when
// dst == src and ldd == lds.
void scale_rows(float* dst, int64_t ldd, const float* src, int64_t lds, const float* scale, int64_t rows, int64_t cols);

// dst: [cols, rows] (pitch ldd) = srcᵀ, src: [rows, cols] (pitch lds).
void transpose(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols);

// y: [n] = exp(min(x − offset, cap)) · scale; NaN propagates.
void exp_shifted(float* y, const float* x, int64_t n, float offset, float cap, float scale);
// max of x: [n], n ≥ 1.
float row_max(const float* x, int64_t n);

// One recurrent token for one head: S: [M, E] = diag(decay) S + φk vᵀ (in place; decay null: no
// decay), then num: [E] = φqᵀ S. from (not null): the state before the token is read there instead and left
// unchanged, S only written (the token out of place, in the same sweep and the same bits); it may be S.
void rank1_update_readout(float* num, float* S, const float* phi_k, const float* v, const float* phi_q, int64_t M,
                          int64_t E, const float* decay = nullptr, const float* from = nullptr);
// The same on a bf16 S: each row widened as loaded and rounded (nearest even) as stored; num reads
// the unrounded rows.
void rank1_update_readout(float* num, bf16* S, const float* phi_k, const float* v, const float* phi_q, int64_t M,
                          int64_t E, const float* decay = nullptr, const bf16* from = nullptr);

// One delta-rule token for one head: S: [M, E] ← P + β k (v − Pᵀ k)ᵀ with P = diag(decay) S (in place;
// decay null: P = S), then out: [E] = qᵀ S. from: as rank1_update_readout's (both sweeps read it).
void delta_update_readout(float* out, float* S, const float* k, const float* v, const float* q, float beta, int64_t M,
                          int64_t E, const float* decay = nullptr, const float* from = nullptr);
// The same on a bf16 S: rows widened as loaded and rounded (nearest even) as stored; out reads the
// unrounded rows.
void delta_update_readout(float* out, bf16* S, const float* k, const float* v, const float* q, float beta, int64_t M,
                          int64_t E, const float* decay = nullptr, const bf16* from = nullptr);

}  // namespace linattn::kernels
