#pragma once
// The one matrix product of every operator: C (+)= diag(row_scale) · A · B on a tile, A strided (so
// that Aᵀ needs no copy), with an optional per-row range of the depth index (causal triangles never
// multiply their masked entries) and rows to prefetch while it runs. Single-threaded, SIMD (Highway,
// dispatched at runtime).
#include <cstdint>

#include "kernels/tile.hpp"

namespace linattn::kernels {

// Rows that a GEMM asks the memory system for while it runs, one cache line per step of its depth
// loop: the next tile's inputs arrive while this one's arithmetic runs. (A burst of prefetches before
// the GEMM overflows the core's miss queues and stalls; spread out, they overlap.)
struct RowsAhead {
  const float* rows[2] = {nullptr, nullptr};  // first row of each region (null: none)
  int64_t ld[2] = {0, 0};                     // row pitch, floats
  int64_t cols[2] = {0, 0};                   // floats per row
  bool write[2] = {false, false};             // prefetch for writing
  int64_t count = 0;                          // rows per region
};

struct GemmOptions {
  bool accumulate = false;           // each chain starts from c's old value (else from 0)
  const float* row_scale = nullptr;  // [c.rows]: row r's result is multiplied by row_scale[r]
  const int32_t* k_begin = nullptr;  // [c.rows]: row r's depth range starts here (null: 0)
  const int32_t* k_end = nullptr;    // [c.rows]: and ends here (null: b.rows)
  const RowsAhead* ahead = nullptr;  // rows to prefetch meanwhile (null: none)
};

// c: [rows, cols] = c.rows × c.cols, b: [depth, cols] = b.rows × (≥ c.cols), any cols (whole vectors
// SIMD, the last < 16 columns scalar);
//   c[r, j] = row_scale[r] · fma-chain over k ∈ [k_begin[r], k_end[r]) ascending of a(r, k) · b[k, j],
// starting from c[r, j] (accumulate) or 0. Each element is one fixed-order chain, whatever the blocking
// or the prefetching: results never depend on how callers split rows or columns over threads.
void gemm(Tile c, Strided a, ConstTile b, const GemmOptions& options = {});

}  // namespace linattn::kernels
