// The decayed family's block scan (see decay_scan.hpp), one Highway source for every target.
#include <algorithm>
#include <span>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/decay_scan.cpp"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include "kernels/counted-inl.h"
#include "kernels/decay_scan.hpp"
#include "kernels/tile.hpp"

HWY_BEFORE_NAMESPACE();
namespace linattn::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
// At most kPad lanes, so that a row's whole vectors never pass its padded pitch.
using D = hn::CappedTag<float, kPad>;
using V = hn::Vec<D>;

// One Prefetcher for each set of rows to fetch, ticked together.
class Prefetchers {
 public:
  explicit Prefetchers(std::span<const RowsAhead> rows)
      : a_(rows.size() > 0 ? &rows[0] : nullptr),
        b_(rows.size() > 1 ? &rows[1] : nullptr),
        c_(rows.size() > 2 ? &rows[2] : nullptr) {}
  HWY_INLINE void Tick() { a_.Tick(), b_.Tick(), c_.Tick(); }

 private:
  static_assert(kScanAhead == 3, "one Prefetcher per set");
  Prefetcher a_, b_, c_;
};

// A tile of R: 4 rows × 4 vectors (16 of 32 zmm, with 4 for v, 4 for o and 2 broadcasts) on AVX-512;
// 4 × 2 (8 of 16 ymm) on AVX2 and narrower targets.
constexpr int kVecs = HWY_LANES(float) >= 16 ? 4 : 2;
constexpr int kRows = 4;

// R's rows [i0, i0 + kR) × columns [j, j + kNV·L) over the block's tokens: loaded times start, each token's
// update and its share of o (rows added in order to o, which the tile at i0 = 0 starts from 0), stored times
// end. The tile's registers are named one by one, as SVE's sizeless vectors cannot be array elements.
#define LINATTN_SCAN_ROWS(X) \
  X(0, s00, s01, s02, s03) X(1, s10, s11, s12, s13) X(2, s20, s21, s22, s23) X(3, s30, s31, s32, s33)
template <int kR, int kNV>
HWY_INLINE void Tile(const ScanBlock& s, int64_t i0, int64_t j, Prefetchers& ahead) {
  static_assert(kR <= kRows && kRows == 4 && kNV <= 4, "LINATTN_SCAN_ROWS names four rows of four vectors");
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  float* HWY_RESTRICT rows = s.R + i0 * s.ldr + j;
  V s00 = hn::Zero(d), s01 = s00, s02 = s00, s03 = s00, s10 = s00, s11 = s00, s12 = s00, s13 = s00, s20 = s00,
    s21 = s00, s22 = s00, s23 = s00, s30 = s00, s31 = s00, s32 = s00, s33 = s00;
#define LINATTN_SCAN_LOAD(r, x0, x1, x2, x3)                           \
  if constexpr (r < kR) {                                              \
    const V f = hn::Set(d, s.start ? s.start[i0 + r] : 1.0f);          \
    const float* HWY_RESTRICT row = rows + r * s.ldr;                  \
    x0 = hn::Mul(f, hn::LoadU(d, row));                                \
    if constexpr (kNV > 1) x1 = hn::Mul(f, hn::LoadU(d, row + L));     \
    if constexpr (kNV > 2) x2 = hn::Mul(f, hn::LoadU(d, row + 2 * L)); \
    if constexpr (kNV > 3) x3 = hn::Mul(f, hn::LoadU(d, row + 3 * L)); \
  }
  LINATTN_SCAN_ROWS(LINATTN_SCAN_LOAD)
  const bool from_zero = i0 == 0;
  for (int64_t t = 0; t < s.n; ++t) {
    const float* HWY_RESTRICT kt = s.Kr + t * s.ldk + i0;
    const float* HWY_RESTRICT qt = s.Ql + t * s.ldq + i0;
    const float* HWY_RESTRICT vt = s.v + t * s.ldv + j;
    float* HWY_RESTRICT ot = s.o + t * s.ldo + j;
    V v0 = hn::LoadU(d, vt), v1 = v0, v2 = v0, v3 = v0;
    if constexpr (kNV > 1) v1 = hn::LoadU(d, vt + L);
    if constexpr (kNV > 2) v2 = hn::LoadU(d, vt + 2 * L);
    if constexpr (kNV > 3) v3 = hn::LoadU(d, vt + 3 * L);
      // o's row at p into a0..a3 (zeros from the first tile of rows), and back.
#define LINATTN_SCAN_LOAD_O(p)                             \
  a0 = a1 = a2 = a3 = hn::Zero(d);                         \
  if (!from_zero) {                                        \
    a0 = hn::LoadU(d, p);                                  \
    if constexpr (kNV > 1) a1 = hn::LoadU(d, (p) + L);     \
    if constexpr (kNV > 2) a2 = hn::LoadU(d, (p) + 2 * L); \
    if constexpr (kNV > 3) a3 = hn::LoadU(d, (p) + 3 * L); \
  }
#define LINATTN_SCAN_STORE_O(p)                          \
  hn::StoreU(a0, d, p);                                  \
  if constexpr (kNV > 1) hn::StoreU(a1, d, (p) + L);     \
  if constexpr (kNV > 2) hn::StoreU(a2, d, (p) + 2 * L); \
  if constexpr (kNV > 3) hn::StoreU(a3, d, (p) + 3 * L);
    V a0, a1, a2, a3;
    LINATTN_SCAN_LOAD_O(ot)
#define LINATTN_SCAN_TOKEN(r, x0, x1, x2, x3)                                        \
  if constexpr (r < kR) {                                                            \
    const V kb = hn::Set(d, kt[r]), qb = hn::Set(d, qt[r]);                          \
    x0 = hn::MulAdd(kb, v0, x0), a0 = hn::MulAdd(qb, x0, a0);                        \
    if constexpr (kNV > 1) x1 = hn::MulAdd(kb, v1, x1), a1 = hn::MulAdd(qb, x1, a1); \
    if constexpr (kNV > 2) x2 = hn::MulAdd(kb, v2, x2), a2 = hn::MulAdd(qb, x2, a2); \
    if constexpr (kNV > 3) x3 = hn::MulAdd(kb, v3, x3), a3 = hn::MulAdd(qb, x3, a3); \
  }
    LINATTN_SCAN_ROWS(LINATTN_SCAN_TOKEN)
    LINATTN_SCAN_STORE_O(ot)
    // The other query heads read the updated rows (query groups), each chain in the same order.
    for (int64_t i = 1; i < s.queries; ++i) {
      const float* HWY_RESTRICT qi = qt + i * s.ldqh;
      float* HWY_RESTRICT oi = ot + i * s.ldoh;
      LINATTN_SCAN_LOAD_O(oi)
#define LINATTN_SCAN_READ(r, x0, x1, x2, x3)            \
  if constexpr (r < kR) {                               \
    const V qb = hn::Set(d, qi[r]);                     \
    a0 = hn::MulAdd(qb, x0, a0);                        \
    if constexpr (kNV > 1) a1 = hn::MulAdd(qb, x1, a1); \
    if constexpr (kNV > 2) a2 = hn::MulAdd(qb, x2, a2); \
    if constexpr (kNV > 3) a3 = hn::MulAdd(qb, x3, a3); \
  }
      LINATTN_SCAN_ROWS(LINATTN_SCAN_READ)
      LINATTN_SCAN_STORE_O(oi)
    }
    ahead.Tick();
  }
#define LINATTN_SCAN_STORE(r, x0, x1, x2, x3)                          \
  if constexpr (r < kR) {                                              \
    const V f = hn::Set(d, s.end ? s.end[i0 + r] : 1.0f);              \
    float* HWY_RESTRICT row = rows + r * s.ldr;                        \
    hn::StoreU(hn::Mul(f, x0), d, row);                                \
    if constexpr (kNV > 1) hn::StoreU(hn::Mul(f, x1), d, row + L);     \
    if constexpr (kNV > 2) hn::StoreU(hn::Mul(f, x2), d, row + 2 * L); \
    if constexpr (kNV > 3) hn::StoreU(hn::Mul(f, x3), d, row + 3 * L); \
  }
  LINATTN_SCAN_ROWS(LINATTN_SCAN_STORE)
#undef LINATTN_SCAN_LOAD
#undef LINATTN_SCAN_TOKEN
#undef LINATTN_SCAN_READ
#undef LINATTN_SCAN_LOAD_O
#undef LINATTN_SCAN_STORE_O
#undef LINATTN_SCAN_STORE
}
#undef LINATTN_SCAN_ROWS

// Every row of R over the column vectors [j, j + kNV·L), in blocks of kRows rows.
template <int kNV>
HWY_INLINE void Columns(const ScanBlock& s, int64_t j, Prefetchers& ahead) {
  int64_t i = 0;
  for (; i + kRows <= s.K; i += kRows) Tile<kRows, kNV>(s, i, j, ahead);
  Counted<kRows>(s.K - i, [&](auto rows) { Tile<rows(), kNV>(s, i, j, ahead); });
}

void DecayScanBlock(const ScanBlock& s, std::span<const RowsAhead> rows_ahead) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d)), vectors = (s.V + L - 1) / L;
  Prefetchers ahead(rows_ahead);
  int64_t j = 0;
  for (; j + kVecs <= vectors; j += kVecs) Columns<kVecs>(s, j * L, ahead);
  Counted<kVecs>(vectors - j, [&](auto nv) { Columns<nv()>(s, j * L, ahead); });
}

}  // namespace HWY_NAMESPACE
}  // namespace linattn::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace linattn::kernels {

HWY_EXPORT(DecayScanBlock);

void decay_scan_block(const ScanBlock& s, std::span<const RowsAhead> ahead) {
  HWY_DYNAMIC_DISPATCH(DecayScanBlock)(s, ahead.first(std::min(ahead.size(), kScanAhead)));
}

}  // namespace linattn::kernels
#endif  // HWY_ONCE
