#pragma once
// Row-wise steps of exact softmax attention on one tile of scores: the online-softmax update of the
// forward, its final normalisation, and the backward's recomputed probabilities and score
// gradients. Row i of a tile sees the columns [0, end[i]); every other column is masked (its
// probability is exactly 0 and its value is never read into a result).
#include <cstdint>

namespace linattn::kernels {

// Forward, one key tile. s: [rows, lds] scaled scores q·k, overwritten with p = exp(s − m_new)
// (0 where masked); o: [rows, ldo] running unnormalised output, rescaled by exp(m_old − m_new);
// row_max, row_sum: [rows] running max m and sum l, updated. Rows with end ≤ 0 are left unchanged
// (their p row is 0). s_cols, o_cols: columns of s and o (multiples of kPad).
void softmax_forward_tile(float* s, int64_t lds, float* o, int64_t ldo, float* row_max, float* row_sum,
                          const int32_t* end, int64_t rows, int64_t s_cols, int64_t o_cols);

// Forward, after the last key tile: o ← o / l and lse = m + log l; a row that saw no key
// (m = −∞) gets o = 0 and lse = −∞.
void softmax_forward_finish(float* o, int64_t ldo, float* lse, const float* row_max, const float* row_sum, int64_t rows,
                            int64_t o_cols);

// Backward, one (query tile, key tile) pair. s: [rows, ld] scaled scores, overwritten with
// p = exp(s − lse); dp: [rows, ld] dO·vᵀ, overwritten with ds = p ∘ (dp − delta). Both are exactly 0
// where masked, whatever s and dp hold there.
void softmax_backward_tile(float* s, float* dp, int64_t ld, const float* lse, const float* delta, const int32_t* end,
                           int64_t rows, int64_t cols);

// delta[i] = Σ_e a[i, e] · b[i, e] (the backward's rowsum(dO ∘ O)), summed in the order of
// the gemm's chains; a, b: [rows, ld].
void softmax_row_dot(float* delta, const float* a, const float* b, int64_t ld, int64_t rows, int64_t cols);

}  // namespace linattn::kernels
