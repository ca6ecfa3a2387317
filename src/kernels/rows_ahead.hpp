#pragma once
// The rows of [B, N, H, D] views that a GEMM prefetches while it runs (kernels::RowsAhead), for every
// operator that streams a head's tiles or chunks: the next item's rows arrive while this one's
// arithmetic runs. Views whose rows are not contiguous in the head dim are left out.
#include <cstdint>

#include "kernels/gemm.hpp"
#include "linattn/view.hpp"

namespace linattn::kernels {

// Rows [n0, n0 + n) of head (b, h) of x and y (y may be empty), clamped to x's sequence; for_write:
// y's rows are to be written.
RowsAhead head_rows_ahead(ConstTensorView x, ConstTensorView y, bool for_write, int64_t b, int64_t h, int64_t n0,
                          int64_t n);

// Whether rows [n0, n0 + n) of every head of x are one dense stretch of n·H·D floats ([B, N, H, D]).
bool tokens_dense(ConstTensorView x);

// Part `part` of H of the dense stretch of rows [n0, n0 + n) of batch b of x and y (both dense), as
// n rows of D floats: a pass that takes all heads of a tile in turn streams memory in order.
RowsAhead dense_part_ahead(ConstTensorView x, ConstTensorView y, bool for_write, int64_t b, int64_t n0, int64_t n,
                           int64_t part);

}  // namespace linattn::kernels
