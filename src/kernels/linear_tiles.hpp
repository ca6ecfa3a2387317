#pragma once
// Tile kernels of linear attention: single-threaded, SIMD (Highway, dispatched at runtime), on packed
// row-major tiles whose rows are padded to a multiple of kPad floats.
#include <cstdint>

namespace linattn::kernels {

// Row pitch granule of packed tiles: 16 floats (one AVX-512 vector, two AVX2 vectors).
inline constexpr int64_t kPad = 16;
inline constexpr int64_t padded(int64_t n) { return (n + kPad - 1) / kPad * kPad; }

// The elementwise feature maps of feature_tile.
enum class TileMap { elu, relu, identity };

// φ of one tile of rows: phi[r, 0:ldp] = φ(x[r, 0:cols]), lanes cols..ldp set to 0 (ldp a multiple of
// kPad). Optionally sum[0:ldp] += Σ_r φ_r (rows in order) and dots[r] = φ_r · dot[0:ldp], in the same
// pass: the normaliser's sums cost no second trip through the tile.
struct FeatureTile {
  const float* x = nullptr;  // [rows, cols], pitch ldx, contiguous within a row
  int64_t ldx = 0;
  float* phi = nullptr;  // [rows, ldp]
  int64_t ldp = 0, rows = 0, cols = 0;
  TileMap map = TileMap::elu;
  float* sum = nullptr;        // [ldp], or null
  const float* dot = nullptr;  // [ldp], or null; needs dots
  float* dots = nullptr;       // [rows]
};
void feature_tile(const FeatureTile& tile);

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

// c: [rows, cols] (pitch ldc) += a · b, a(r, k) = a[r·a_rs + k·a_ks], b: [depth, cols] (pitch ldb).
// cols is a multiple of kPad (ldb and ldc need not be: rows of a caller's tensor serve directly).
// Strided a covers both a and aᵀ without a copy. ahead (optional): rows to prefetch meanwhile.
void gemm_acc(float* c, int64_t ldc, const float* a, int64_t a_rs, int64_t a_ks, const float* b, int64_t ldb,
              int64_t rows, int64_t depth, int64_t cols, const RowsAhead* ahead = nullptr);
// The same with c overwritten: c = diag(row_scale) · a · b (row_scale null: c = a · b).
void gemm_set(float* c, int64_t ldc, const float* a, int64_t a_rs, int64_t a_ks, const float* b, int64_t ldb,
              int64_t rows, int64_t depth, int64_t cols, const float* row_scale = nullptr,
              const RowsAhead* ahead = nullptr);

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
