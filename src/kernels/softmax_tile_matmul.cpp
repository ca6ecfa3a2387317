// Tile products for exact softmax attention, SIMD over the columns of B and C with Highway runtime
// dispatch. Register block: kRows rows of C × up to 4 vectors, each a sum over k of
// broadcast(a(m, k)) · b[k, :]; the reduction order is fixed (k ascending), whatever the thread count.
#include "kernels/softmax_tile_matmul.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/softmax_tile_matmul.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/targets.h>

HWY_BEFORE_NAMESPACE();
namespace linattn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using Tag = hn::CappedTag<float, kTileLanes>;
using Vec = hn::Vec<Tag>;

constexpr int kRows = 4;  // rows of C per register block (4 × 4 vectors = 16 accumulators)

// c[r, 0:NV·lanes] (+)= Σ_{k ∈ [kb, ke)} a(r, k) · b[k, 0:NV·lanes] for r < R
template <int R, int NV>
HWY_INLINE void MatmulBlock(float* HWY_RESTRICT c, int64_t ldc, const float* HWY_RESTRICT a, int64_t ars, int64_t acs,
                            const float* HWY_RESTRICT b, int64_t ldb, int64_t kb, int64_t ke, bool accumulate) {
  const Tag d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  Vec acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = accumulate ? hn::LoadU(d, c + r * ldc + v * lanes) : hn::Zero(d);
  for (int64_t k = kb; k < ke; ++k) {
    const float* HWY_RESTRICT bk = b + k * ldb;
    Vec bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = hn::LoadU(d, bk + v * lanes);
    for (int r = 0; r < R; ++r) {
      const Vec av = hn::Set(d, a[r * ars + k * acs]);
      for (int v = 0; v < NV; ++v) acc[r][v] = hn::MulAdd(av, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) hn::StoreU(acc[r][v], d, c + r * ldc + v * lanes);
}

// All column chunks of R rows that share the range [kb, ke).
template <int R>
HWY_INLINE void MatmulRows(float* HWY_RESTRICT c, int64_t ldc, const float* HWY_RESTRICT a, int64_t ars, int64_t acs,
                           const float* HWY_RESTRICT b, int64_t ldb, int64_t kb, int64_t ke, int64_t cols,
                           bool accumulate) {
  const int64_t lanes = int64_t(hn::Lanes(Tag()));
  int64_t j = 0;
  for (; j + 4 * lanes <= cols; j += 4 * lanes)
    MatmulBlock<R, 4>(c + j, ldc, a, ars, acs, b + j, ldb, kb, ke, accumulate);
  switch ((cols - j) / lanes) {
    case 3:
      MatmulBlock<R, 3>(c + j, ldc, a, ars, acs, b + j, ldb, kb, ke, accumulate);
      break;
    case 2:
      MatmulBlock<R, 2>(c + j, ldc, a, ars, acs, b + j, ldb, kb, ke, accumulate);
      break;
    case 1:
      MatmulBlock<R, 1>(c + j, ldc, a, ars, acs, b + j, ldb, kb, ke, accumulate);
      break;
    default:
      break;
  }
}

void TileMatmul(float* HWY_RESTRICT c, int64_t ldc, const float* HWY_RESTRICT a, int64_t ars, int64_t acs,
                const float* HWY_RESTRICT b, int64_t ldb, const int32_t* k_begin, const int32_t* k_end, int64_t rows,
                int64_t cols, int64_t depth, bool accumulate) {
  auto begin = [&](int64_t m) -> int64_t { return k_begin ? k_begin[m] : 0; };
  auto end = [&](int64_t m) -> int64_t { return k_end ? k_end[m] : depth; };
  int64_t m = 0;
  while (m < rows) {
    const int64_t kb = begin(m), ke = end(m);
    bool uniform = m + kRows <= rows;
    for (int r = 1; uniform && r < kRows; ++r) uniform = begin(m + r) == kb && end(m + r) == ke;
    if (uniform) {
      MatmulRows<kRows>(c + m * ldc, ldc, a + m * ars, ars, acs, b, ldb, kb, ke, cols, accumulate);
      m += kRows;
    } else {  // a causal diagonal or the tail: one row at a time, each with its own range
      MatmulRows<1>(c + m * ldc, ldc, a + m * ars, ars, acs, b, ldb, kb, ke, cols, accumulate);
      m += 1;
    }
  }
}

}  // namespace linattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace linattn::kernels {

HWY_EXPORT(TileMatmul);

void softmax_tile_matmul(float* c, int64_t ldc, const float* a, int64_t a_row_stride, int64_t a_col_stride,
                         const float* b, int64_t ldb, const int32_t* k_begin, const int32_t* k_end, int64_t rows,
                         int64_t cols, int64_t depth, bool accumulate) {
  HWY_DYNAMIC_DISPATCH(TileMatmul)
  (c, ldc, a, a_row_stride, a_col_stride, b, ldb, k_begin, k_end, rows, cols, depth, accumulate);
}

const char* softmax_kernel_target() {
  // Dispatch takes the best attainable target, and better targets have lower bits.
  const int64_t targets = hwy::SupportedTargets() & HWY_TARGETS;
  return hwy::TargetName(targets & -targets);
}

}  // namespace linattn::kernels
#endif  // HWY_ONCE
