#pragma once
// The decayed family's token-by-token forward over a block of tokens, in the block's factored form:
// with b the block's cumulative log decays and m a midpoint of each key dimension's range,
//   S_t = e^{b_t − m} R_t,   R_t = e^{m} S_start + Σ_{s ≤ t} (k_s ⊙ e^{m − b_s}) v_sᵀ,
// so each token is one rank-1 update of R and one read-out, both FMAs, with no per-token decay of the
// state. A tile of R stays in registers while the block's tokens stream past it. Single-threaded, SIMD
// (Highway, dispatched at runtime).
#include <cstdint>
#include <span>

#include "kernels/gemm.hpp"

namespace linattn::kernels {

// One head's block of n tokens:
//   R ← diag(start) R;  for t < n: R ← R + Krₜᵀ vₜ, oₜ = Qlₜᵀ R;  R ← diag(end) R
// R: [K, ldr]; Ql: [n, ldq]; Kr: [n, ldk]; v: [n, ldv]; o: [n, ldo] (written, not accumulated); start, end:
// [K] (null: ones). Columns are taken in whole vectors: R's, v's and o's rows are read and written up to V
// rounded up to a multiple of kPad (the padding's results land in o's padding). Each o element is one
// fixed-order chain over the key rows, so results do not depend on how callers split heads over threads.
// ahead: up to kScanAhead sets of rows to prefetch meanwhile, a line of each per token and tile.
// queries > 1 (query groups): so many query heads read R out, query i's rows of Ql at Ql + i·ldqh and of o at
// o + i·ldoh, each token's after the update that the first's reads (R is updated once; each o chain as above,
// the same bits as a block of that query head alone).
struct ScanBlock {
  float* o;
  float* R;
  const float *Ql, *Kr, *v;
  const float *start, *end;
  int64_t ldq, ldk, ldv, ldo, ldr, n, K, V;
  int64_t queries = 1, ldqh = 0, ldoh = 0;
};
inline constexpr size_t kScanAhead = 3;
void decay_scan_block(const ScanBlock& s, std::span<const RowsAhead> ahead = {});

}  // namespace linattn::kernels
