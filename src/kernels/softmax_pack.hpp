#pragma once
// Copies between strided [B, N, H, D] views and the contiguous, zero-padded tiles the softmax
// kernels work on (any layout looks the same to them once packed). Single-threaded, one tile.
#include <cstdint>

#include "linattn/view.hpp"

namespace linattn::kernels {

// dst: [rows, ld]; dst[r, c] = factor · x(b, n0 + r, h, c) for r < count, c < D; zeros elsewhere.
void softmax_pack_rows(float* dst, int64_t ld, int64_t rows, ConstTensorView x, int64_t b, int64_t h, int64_t n0,
                       int64_t count, float factor);
// dst: [D, ld] (ld ≥ count); dst[c, r] = x(b, n0 + r, h, c) for r < count; zeros past count.
void softmax_pack_rows_transposed(float* dst, int64_t ld, ConstTensorView x, int64_t b, int64_t h, int64_t n0,
                                  int64_t count);
// x(b, n0 + r, h, c) = factor · src[r, c] for r < count, c < D; src: [count, ld].
void softmax_unpack_rows(TensorView x, const float* src, int64_t ld, int64_t b, int64_t h, int64_t n0, int64_t count,
                         float factor);

}  // namespace linattn::kernels
