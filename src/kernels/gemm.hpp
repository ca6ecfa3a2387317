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

// The cache lines of a RowsAhead, one per Tick: a kernel ticks once per step of its inner loop, so the
// prefetches spread over its arithmetic (the GEMM below, the decayed family's scan).
class Prefetcher {
 public:
  explicit Prefetcher(const RowsAhead* ahead) {
    if (!ahead || !ahead->rows[0] || ahead->count <= 0) return;
    ahead_ = ahead;
    Start(0);
  }
  [[gnu::always_inline]] void Tick() {
    if (rows_left_ == 0) return;
    if (write_)
      __builtin_prefetch(row_ + offset_, 1, 2);
    else
      __builtin_prefetch(row_ + offset_, 0, 2);
    offset_ += 64;
    if (offset_ < row_bytes_) return;
    offset_ = 0, row_ += pitch_;
    if (--rows_left_ == 0 && region_ == 0 && ahead_->rows[1]) Start(1);
  }

 private:
  void Start(int region) {
    region_ = region;
    row_ = reinterpret_cast<const char*>(ahead_->rows[region]);
    pitch_ = ahead_->ld[region] * int64_t(sizeof(float));
    write_ = ahead_->write[region];
    row_bytes_ = ahead_->cols[region] * int64_t(sizeof(float));
    rows_left_ = ahead_->count, offset_ = 0;
  }
  const RowsAhead* ahead_ = nullptr;
  const char* row_ = nullptr;
  int64_t row_bytes_ = 0, pitch_ = 0, rows_left_ = 0, offset_ = 0;
  int region_ = 0;
  bool write_ = false;
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
