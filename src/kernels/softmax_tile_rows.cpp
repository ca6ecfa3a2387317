// Row-wise softmax steps, SIMD over the columns of a tile with Highway runtime dispatch. Every exp
// is ExpSoftmax (below), a vector exp for the softmax's non-positive arguments; the sums reduce lanes
// in a fixed order.
#include "kernels/softmax_tile_rows.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/tile.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/softmax_tile_rows.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace linattn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using Tag = hn::CappedTag<float, kPad>;
using Vec = hn::Vec<Tag>;

constexpr float kInf = std::numeric_limits<float>::infinity();

// Lanes of the vector at column j that are visible in a row whose visible columns are [0, end).
HWY_INLINE hn::Mask<Tag> Visible(Tag d, int64_t j, int64_t end) { return hn::FirstN(d, size_t(end > j ? end - j : 0)); }

// x[0:cols] *= factor
HWY_INLINE void ScaleRow(float* HWY_RESTRICT x, float factor, int64_t cols) {
  const Tag d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  const Vec f = hn::Set(d, factor);
  for (int64_t j = 0; j < cols; j += lanes) hn::StoreU(hn::Mul(hn::LoadU(d, x + j), f), d, x + j);
}

// e^x for the softmax's arguments: s − max ≤ 0 in the forward, s − lse in the backward (above 0 by
// rounding at most). Cody–Waite reduction x = n·ln2 + r with |r| ≤ ln2/2, e^r = 1 + r + r²·P(r) with
// the degree-5 P of hwy::Exp (its accuracy, about 1 ulp), and 2^n put straight into the exponent bits.
// Below −87, where 2^n would leave the normal range, the result is 0 (as e^−∞ is); NaN stays NaN, so
// bad input shows. 19 operations a vector, against hwy::Exp's 27 and the NaN blend its whole range
// needs: the exponentials are a third of the forward's work after the two tile products.
HWY_INLINE Vec ExpSoftmax(Tag d, Vec x) {
  const hn::Rebind<int32_t, Tag> di;
  const Vec n = hn::Min(hn::Round(hn::Mul(x, hn::Set(d, 1.44269504088896341f))), hn::Set(d, 127.0f));
  Vec r = hn::MulAdd(n, hn::Set(d, -0.693145751953125f), x);  // ln 2 in two parts: r exact to ~2⁻³⁵
  r = hn::MulAdd(n, hn::Set(d, -1.428606765330187045e-6f), r);
  Vec poly = hn::Set(d, 0.000198527617612853646278381f);
  poly = hn::MulAdd(poly, r, hn::Set(d, 0.00139304355252534151077271f));
  poly = hn::MulAdd(poly, r, hn::Set(d, 0.00833336077630519866943359f));
  poly = hn::MulAdd(poly, r, hn::Set(d, 0.0416664853692054748535156f));
  poly = hn::MulAdd(poly, r, hn::Set(d, 0.166666671633720397949219f));
  poly = hn::MulAdd(poly, r, hn::Set(d, 0.5f));
  const Vec er = hn::Add(hn::MulAdd(poly, hn::Mul(r, r), r), hn::Set(d, 1.0f));
  const Vec two_n = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127))));
  return hn::IfThenZeroElse(hn::Lt(x, hn::Set(d, -87.0f)), hn::Mul(er, two_n));
}

// The largest visible score of row si (visible columns [0, e), e ≥ 1).
HWY_INLINE float VisibleMax(Tag d, const float* HWY_RESTRICT si, int64_t e) {
  const int64_t lanes = int64_t(hn::Lanes(d));
  const int64_t full = e / lanes * lanes;
  Vec vmax = hn::Set(d, -kInf);
  for (int64_t j = 0; j < full; j += lanes) vmax = hn::Max(vmax, hn::LoadU(d, si + j));
  if (full < e) vmax = hn::Max(vmax, hn::IfThenElse(Visible(d, full, e), hn::LoadU(d, si + full), vmax));
  return hn::GetLane(hn::MaxOfLanes(d, vmax));
}

// Scalar spec per row: m' = max(m, max_{j<end} s_j); p_j = exp(s_j − m'); l = l·exp(m − m') + Σ p_j; o *= exp(m − m')
// Rows go in groups of one vector's lanes: the group's maxima first, then its rescale factors
// exp(m − m') as one vector exp (not a scalar exp call per row), then each row's exponentials.
void ForwardTile(float* HWY_RESTRICT s, int64_t lds, float* HWY_RESTRICT o, int64_t ldo, float* HWY_RESTRICT row_max,
                 float* HWY_RESTRICT row_sum, const int32_t* HWY_RESTRICT end, int64_t rows, int64_t s_cols,
                 int64_t o_cols) {
  const Tag d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  HWY_ALIGN float m_old[kPad], m_new[kPad], rescale[kPad];
  for (int64_t i0 = 0; i0 < rows; i0 += lanes) {
    const int64_t group = std::min(lanes, rows - i0);
    for (int64_t r = 0; r < lanes; ++r) {
      const int64_t i = i0 + r;
      const bool seen = r < group && end[i] > 0;  // a row that sees none of this tile keeps its state
      m_old[r] = r < group ? row_max[i] : 0.0f;
      const float tile_max = seen ? VisibleMax(d, s + i * lds, end[i]) : m_old[r];
      m_new[r] = m_old[r] > tile_max ? m_old[r] : tile_max;
    }
    // m_old = −∞ (the row's first visible tile) gives 0.
    hn::Store(ExpSoftmax(d, hn::Sub(hn::Load(d, m_old), hn::Load(d, m_new))), d, rescale);
    for (int64_t r = 0; r < group; ++r) {
      const int64_t i = i0 + r;
      float* HWY_RESTRICT si = s + i * lds;
      const int64_t e = end[i];
      if (e <= 0) {
        for (int64_t j = 0; j < s_cols; j += lanes) hn::StoreU(hn::Zero(d), d, si + j);
        continue;
      }
      const int64_t full = e / lanes * lanes;  // vectors before `full` are wholly visible
      const Vec vm = hn::Set(d, m_new[r]);
      Vec vsum = hn::Zero(d);
      for (int64_t j = 0; j < full; j += lanes) {
        const Vec p = ExpSoftmax(d, hn::Sub(hn::LoadU(d, si + j), vm));
        vsum = hn::Add(vsum, p);
        hn::StoreU(p, d, si + j);
      }
      for (int64_t j = full; j < s_cols; j += lanes) {
        const Vec p = hn::IfThenElseZero(Visible(d, j, e), ExpSoftmax(d, hn::Sub(hn::LoadU(d, si + j), vm)));
        vsum = hn::Add(vsum, p);
        hn::StoreU(p, d, si + j);
      }
      row_sum[i] = row_sum[i] * rescale[r] + hn::GetLane(hn::SumOfLanes(d, vsum));
      row_max[i] = m_new[r];
      if (rescale[r] != 1.0f) ScaleRow(o + i * ldo, rescale[r], o_cols);
    }
  }
}

void ForwardFinish(float* HWY_RESTRICT o, int64_t ldo, float* HWY_RESTRICT lse, const float* HWY_RESTRICT row_max,
                   const float* HWY_RESTRICT row_sum, int64_t rows, int64_t o_cols) {
  const Tag d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  for (int64_t i = 0; i < rows; ++i) {
    float* HWY_RESTRICT oi = o + i * ldo;
    if (row_sum[i] == 0.0f) {  // saw no key (a visible one adds exp(0) = 1): out = 0, lse = −∞
      for (int64_t j = 0; j < o_cols; j += lanes) hn::StoreU(hn::Zero(d), d, oi + j);
      lse[i] = -kInf;
      continue;
    }
    const Vec l = hn::Set(d, row_sum[i]);
    for (int64_t j = 0; j < o_cols; j += lanes) hn::StoreU(hn::Div(hn::LoadU(d, oi + j), l), d, oi + j);
    lse[i] = row_max[i] + std::log(row_sum[i]);
  }
}

// Scalar spec per element: p = j < end ? exp(s − lse) : 0; ds = j < end ? p·(dp − delta) : 0
void BackwardTile(float* HWY_RESTRICT s, float* HWY_RESTRICT dp, int64_t ld, const float* HWY_RESTRICT lse,
                  const float* HWY_RESTRICT delta, const int32_t* HWY_RESTRICT end, int64_t rows, int64_t cols) {
  const Tag d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  for (int64_t i = 0; i < rows; ++i) {
    float* HWY_RESTRICT si = s + i * ld;
    float* HWY_RESTRICT dpi = dp + i * ld;
    const int64_t e = end[i];
    const Vec vlse = hn::Set(d, lse[i]);
    const Vec vdelta = hn::Set(d, delta[i]);
    const int64_t full = e > 0 ? e / lanes * lanes : 0;  // vectors before `full` are wholly visible
    for (int64_t j = 0; j < full; j += lanes) {
      const Vec p = ExpSoftmax(d, hn::Sub(hn::LoadU(d, si + j), vlse));
      hn::StoreU(p, d, si + j);
      hn::StoreU(hn::Mul(p, hn::Sub(hn::LoadU(d, dpi + j), vdelta)), d, dpi + j);
    }
    for (int64_t j = full; j < cols; j += lanes) {
      const auto visible = Visible(d, j, e);
      const Vec p = hn::IfThenElseZero(visible, ExpSoftmax(d, hn::Sub(hn::LoadU(d, si + j), vlse)));
      const Vec ds = hn::IfThenElseZero(visible, hn::Mul(p, hn::Sub(hn::LoadU(d, dpi + j), vdelta)));
      hn::StoreU(p, d, si + j);
      hn::StoreU(ds, d, dpi + j);
    }
  }
}

// Each row is one FMA chain over e ascending, the order in which the gemm forms
// dp = dO·vⱼ: where one key dominates a row (o = vⱼ), dp − delta then cancels to exactly 0.
void RowDot(float* HWY_RESTRICT delta, const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, int64_t ld,
            int64_t rows, int64_t cols) {
  const hn::CappedTag<float, 1> d1;
  for (int64_t i = 0; i < rows; ++i) {
    auto acc = hn::Zero(d1);
    for (int64_t e = 0; e < cols; ++e)
      acc = hn::MulAdd(hn::LoadU(d1, a + i * ld + e), hn::LoadU(d1, b + i * ld + e), acc);
    delta[i] = hn::GetLane(acc);
  }
}

}  // namespace linattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace linattn::kernels {

HWY_EXPORT(ForwardTile);
HWY_EXPORT(ForwardFinish);
HWY_EXPORT(BackwardTile);
HWY_EXPORT(RowDot);

void softmax_forward_tile(float* s, int64_t lds, float* o, int64_t ldo, float* row_max, float* row_sum,
                          const int32_t* end, int64_t rows, int64_t s_cols, int64_t o_cols) {
  HWY_DYNAMIC_DISPATCH(ForwardTile)(s, lds, o, ldo, row_max, row_sum, end, rows, s_cols, o_cols);
}
void softmax_forward_finish(float* o, int64_t ldo, float* lse, const float* row_max, const float* row_sum, int64_t rows,
                            int64_t o_cols) {
  HWY_DYNAMIC_DISPATCH(ForwardFinish)(o, ldo, lse, row_max, row_sum, rows, o_cols);
}
void softmax_backward_tile(float* s, float* dp, int64_t ld, const float* lse, const float* delta, const int32_t* end,
                           int64_t rows, int64_t cols) {
  HWY_DYNAMIC_DISPATCH(BackwardTile)(s, dp, ld, lse, delta, end, rows, cols);
}
void softmax_row_dot(float* delta, const float* a, const float* b, int64_t ld, int64_t rows, int64_t cols) {
  HWY_DYNAMIC_DISPATCH(RowDot)(delta, a, b, ld, rows, cols);
}

}  // namespace linattn::kernels
#endif  // HWY_ONCE
