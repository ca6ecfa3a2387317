// The one GEMM (see gemm.hpp), one Highway source for every target. Register block: kRows rows of C ×
// kVecs vectors, each accumulator one chain broadcast(a(r, k)) · b[k, :] over k ascending; the column
// groups run outermost so that a group's panel of B stays in L1 while every row block passes over it.
#include <algorithm>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/gemm.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must follow foreach_target.h.
#include "hwy/highway.h"
#include "kernels/counted-inl.h"
#include "kernels/gemm.hpp"

HWY_BEFORE_NAMESPACE();
namespace linattn::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// Accumulators: 6 × 4 (24 of 32 zmm) on AVX-512; 6 × 2 (12 of 16 ymm, with 2 for B and 1 for the
// broadcast) on AVX2 and narrower targets. On Zen 3 a 64³ product runs at ~75 GFLOP/s with 6 × 2 and
// ~50 with 4 × 3 (its 8 vector columns split 3 + 3 + 2, and 16 live registers leave none spare).
constexpr int kVecs = HWY_LANES(float) >= 16 ? 4 : 2;
constexpr int kRows = 6;

// One call's operands, and row r's depth range.
struct Job {
  Tile c;
  Strided a;
  ConstTile b;
  const GemmOptions& o;
  int64_t begin(int64_t r) const { return o.k_begin ? o.k_begin[r] : 0; }
  int64_t end(int64_t r) const { return std::max(begin(r), o.k_end ? int64_t(o.k_end[r]) : b.rows); }
  float scale(int64_t r) const { return o.row_scale ? o.row_scale[r] : 1.0f; }
};

// How a block's accumulators start: from 0, from c, or per row as load[i] says.
enum class Init { zero, load, per_row };

// Rows [r0, r0 + R) × columns [j, j + NV·L) of c, the chains over k ∈ [lo, hi): row i's accumulators
// start as kInit says and are stored times mul[i] (mul null: as they are). A segment that is not a
// row's last stores its partial chain unscaled, and the next segment picks it up bit for bit.
#if HWY_HAVE_SCALABLE
// SVE's vectors are sizeless types, which cannot be array elements: the same chains, one column vector at a time,
// its R rows' accumulators as named variables (those past R are never used and compile away).
#define LINATTN_GEMM_ROWS(X) X(0, acc0) X(1, acc1) X(2, acc2) X(3, acc3) X(4, acc4) X(5, acc5)
template <int R, int NV, Init kInit>
HWY_INLINE void Block(const Job& g, int64_t r0, int64_t j, int64_t lo, int64_t hi, const bool* load,
                      const float* HWY_RESTRICT mul, Prefetcher& prefetch) {
  static_assert(R <= kRows && kRows == 6, "LINATTN_GEMM_ROWS names six rows");
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  float* HWY_RESTRICT c = g.c.data + r0 * g.c.ld + j;
  const int64_t ldc = g.c.ld, ars = g.a.row, acs = g.a.col, ldb = g.b.ld;
  const float* HWY_RESTRICT a = g.a.data + r0 * ars;
  const float* HWY_RESTRICT b = g.b.data + j;
  for (int v = 0; v < NV; ++v) {
    V acc0 = hn::Zero(d), acc1 = acc0, acc2 = acc0, acc3 = acc0, acc4 = acc0, acc5 = acc0;
#define LINATTN_GEMM_INIT(r, acc) \
  if constexpr (r < R)            \
    if (kInit == Init::load || (kInit == Init::per_row && load[r])) acc = hn::LoadU(d, c + r * ldc + v * L);
    LINATTN_GEMM_ROWS(LINATTN_GEMM_INIT)
    for (int64_t k = lo; k < hi; ++k) {
      const V bv = hn::LoadU(d, b + k * ldb + v * L);
      const float* HWY_RESTRICT ak = a + k * acs;
#define LINATTN_GEMM_FMA(r, acc) \
  if constexpr (r < R) acc = hn::MulAdd(hn::Set(d, ak[r * ars]), bv, acc);
      LINATTN_GEMM_ROWS(LINATTN_GEMM_FMA)
      if (v == 0) prefetch.Tick();  // as many ticks as the blocked loop below
    }
#define LINATTN_GEMM_STORE(r, acc) \
  if constexpr (r < R) hn::StoreU(mul ? hn::Mul(acc, hn::Set(d, mul[r])) : acc, d, c + r * ldc + v * L);
    LINATTN_GEMM_ROWS(LINATTN_GEMM_STORE)
#undef LINATTN_GEMM_INIT
#undef LINATTN_GEMM_FMA
#undef LINATTN_GEMM_STORE
  }
}
#undef LINATTN_GEMM_ROWS
#else
template <int R, int NV, Init kInit>
HWY_INLINE void Block(const Job& g, int64_t r0, int64_t j, int64_t lo, int64_t hi, const bool* load,
                      const float* HWY_RESTRICT mul, Prefetcher& prefetch) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  float* HWY_RESTRICT c = g.c.data + r0 * g.c.ld + j;
  const int64_t ldc = g.c.ld, ars = g.a.row, acs = g.a.col, ldb = g.b.ld;
  const float* HWY_RESTRICT a = g.a.data + r0 * ars;
  const float* HWY_RESTRICT b = g.b.data + j;
  V acc[R][NV];
  for (int r = 0; r < R; ++r) {
    const bool from_c = kInit == Init::load || (kInit == Init::per_row && load[r]);
    for (int v = 0; v < NV; ++v) acc[r][v] = from_c ? hn::LoadU(d, c + r * ldc + v * L) : hn::Zero(d);
  }
  for (int64_t k = lo; k < hi; ++k) {
    const float* HWY_RESTRICT bk = b + k * ldb;
    const float* HWY_RESTRICT ak = a + k * acs;
    V bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = hn::LoadU(d, bk + v * L);
    for (int r = 0; r < R; ++r) {
      const V av = hn::Set(d, ak[r * ars]);
      for (int v = 0; v < NV; ++v) acc[r][v] = hn::MulAdd(av, bv[v], acc[r][v]);
    }
    prefetch.Tick();
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) {
      const V out = mul ? hn::Mul(acc[r][v], hn::Set(d, mul[r])) : acc[r][v];
      hn::StoreU(out, d, c + r * ldc + v * L);
    }
}
#endif  // HWY_HAVE_SCALABLE

template <int R, int NV>
HWY_NOINLINE void RangedRows(const Job& g, int64_t r0, int64_t j, Prefetcher& prefetch);

// Rows [r0, r0 + R) over their whole ranges: without per-row ranges, one block.
template <int R, int NV>
HWY_INLINE void Rows(const Job& g, int64_t r0, int64_t j, Prefetcher& prefetch) {
  if (g.o.k_begin || g.o.k_end) return RangedRows<R, NV>(g, r0, j, prefetch);
  const float* scale = g.o.row_scale ? g.o.row_scale + r0 : nullptr;
  if (g.o.accumulate)
    Block<R, NV, Init::load>(g, r0, j, 0, g.b.rows, nullptr, scale, prefetch);
  else
    Block<R, NV, Init::zero>(g, r0, j, 0, g.b.rows, nullptr, scale, prefetch);
}

// Rows [r0, r0 + R) over per-row ranges: the range that all rows share runs as one block, and a row's
// own part before and after it (a causal diagonal) runs alone, in k order, so that its chain is the
// same. Out of line: its many blocks per row group, all inlined, took this file 4.5 minutes to compile
// (1.2 now); a call per row group costs nothing beside the blocks' arithmetic (measured).
template <int R, int NV>
HWY_NOINLINE void RangedRows(const Job& g, int64_t r0, int64_t j, Prefetcher& prefetch) {
  const float* scale = g.o.row_scale ? g.o.row_scale + r0 : nullptr;
  int64_t lo = g.begin(r0), hi = g.end(r0);
  for (int i = 1; i < R; ++i) lo = std::max(lo, g.begin(r0 + i)), hi = std::min(hi, g.end(r0 + i));
  if (R > 1 && lo >= hi) {  // no common part: row by row
    for (int i = 0; i < R; ++i) RangedRows<1, NV>(g, r0 + i, j, prefetch);
    return;
  }
  bool load[R];
  for (int i = 0; i < R; ++i) {
    load[i] = g.o.accumulate;
    if (g.begin(r0 + i) >= lo) continue;
    Block<1, NV, Init::per_row>(g, r0 + i, j, g.begin(r0 + i), lo, &load[i], nullptr, prefetch);
    load[i] = true;
  }
  bool tail = false;
  for (int i = 0; i < R; ++i) tail |= g.end(r0 + i) > hi;
  if (!tail) return Block<R, NV, Init::per_row>(g, r0, j, lo, hi, load, scale, prefetch);
  Block<R, NV, Init::per_row>(g, r0, j, lo, hi, load, nullptr, prefetch);
  for (int i = 0; i < R; ++i) {
    const float* scale_i = scale ? scale + i : nullptr;
    if (g.end(r0 + i) > hi)
      Block<1, NV, Init::load>(g, r0 + i, j, hi, g.end(r0 + i), nullptr, scale_i, prefetch);
    else if (scale_i)  // the block left this row's finished chain unscaled
      Block<1, NV, Init::load>(g, r0 + i, j, hi, hi, nullptr, scale_i, prefetch);
  }
}

// Every row of the column group [j, j + NV·L).
template <int NV>
HWY_INLINE void Columns(const Job& g, int64_t j, Prefetcher& prefetch) {
  const int64_t rows = g.c.rows;
  int64_t r = 0;
  for (; r + kRows <= rows; r += kRows) Rows<kRows, NV>(g, r, j, prefetch);
  Counted<kRows>(rows - r, [&](auto n) { Rows<n(), NV>(g, r, j, prefetch); });
}

// Columns [j0, cols) (fewer than one vector): the same chains, one lane at a time.
void TailColumns(const Job& g, int64_t j0) {
  const hn::CappedTag<float, 1> d1;
  for (int64_t r = 0; r < g.c.rows; ++r) {
    const float* ar = g.a.data + r * g.a.row;
    for (int64_t j = j0; j < g.c.cols; ++j) {
      float* cj = g.c.data + r * g.c.ld + j;
      auto acc = g.o.accumulate ? hn::LoadU(d1, cj) : hn::Zero(d1);
      for (int64_t k = g.begin(r); k < g.end(r); ++k)
        acc = hn::MulAdd(hn::Set(d1, ar[k * g.a.col]), hn::LoadU(d1, g.b.data + k * g.b.ld + j), acc);
      hn::StoreU(hn::Mul(acc, hn::Set(d1, g.scale(r))), d1, cj);
    }
  }
}

void Gemm(Tile c, Strided a, ConstTile b, const GemmOptions& o) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  // A depth-0 product may come with null a and b (an empty vector's data()); the blocks offset them
  // before the (empty) depth loop, and an offset null pointer is undefined: point them at a dummy.
  static const float kNothing[1] = {0.0f};
  if (b.rows == 0) {
    if (a.data == nullptr) a.data = kNothing;
    if (b.data == nullptr) b.data = kNothing;
  }
  const Job g{c, a, b, o};
  Prefetcher prefetch(o.ahead);
  int64_t j = 0;
  // One or two rows (decoding: o += p v for a few queries): wider blocks, or the few chains of a
  // kVecs-wide block leave the FMA latency exposed (4 cycles on Zen 3, 2 pipes: 8 chains to fill).
  if (c.rows == 1)
    for (; j + 4 * kVecs * L <= c.cols; j += 4 * kVecs * L) Rows<1, 4 * kVecs>(g, 0, j, prefetch);
  if (c.rows == 2)
    for (; j + 2 * kVecs * L <= c.cols; j += 2 * kVecs * L) Rows<2, 2 * kVecs>(g, 0, j, prefetch);
  for (; j + kVecs * L <= c.cols; j += kVecs * L) Columns<kVecs>(g, j, prefetch);
  Counted<kVecs>((c.cols - j) / L, [&](auto nv) { Columns<nv()>(g, j, prefetch); });
  j += (c.cols - j) / L * L;
  if (j < c.cols) TailColumns(g, j);
}

}  // namespace HWY_NAMESPACE
}  // namespace linattn::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace linattn::kernels {

HWY_EXPORT(Gemm);

void gemm(Tile c, Strided a, ConstTile b, const GemmOptions& options) { HWY_DYNAMIC_DISPATCH(Gemm)(c, a, b, options); }

}  // namespace linattn::kernels
#endif  // HWY_ONCE
