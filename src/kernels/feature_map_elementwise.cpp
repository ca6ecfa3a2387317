// SIMD elementwise feature maps and feature tiles (see feature_map_elementwise.hpp).
#include <algorithm>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/feature_map_elementwise.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must follow foreach_target.h.
#include "hwy/highway.h"
#include "kernels/counted-inl.h"
#include "kernels/feature_map_elementwise.hpp"
#include "kernels/feature_map_ops-inl.h"

HWY_BEFORE_NAMESPACE();
namespace linattn::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// y[i] = f(x[i], g[i]) (g may be null); the tail goes through a padded buffer so that it gets the
// same vector arithmetic as the body.
template <class F>
HWY_INLINE void Apply(float* HWY_RESTRICT y, const float* HWY_RESTRICT x, const float* HWY_RESTRICT g, int64_t n) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  const F f;
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const V gi = g ? hn::LoadU(d, g + i) : hn::Zero(d);
    hn::StoreU(f(d, hn::LoadU(d, x + i), gi), d, y + i);
  }
  if (i == n) return;
  HWY_ALIGN float xt[HWY_LANES(float)], gt[HWY_LANES(float)], yt[HWY_LANES(float)];
  std::fill(xt, xt + L, 0.0f);
  std::fill(gt, gt + L, 0.0f);
  std::memcpy(xt, x + i, size_t(n - i) * sizeof(float));
  if (g) std::memcpy(gt, g + i, size_t(n - i) * sizeof(float));
  hn::Store(f(d, hn::Load(d, xt), hn::Load(d, gt)), d, yt);
  std::memcpy(y + i, yt, size_t(n - i) * sizeof(float));
}

struct Identity {
  HWY_INLINE V operator()(D, V x, V) const { return x; }
};

// Vector columns of a feature tile taken together (their column sums stay in registers). One on SVE, whose
// sizeless vectors cannot be array elements (FeatureColumns below).
constexpr int kVecs = HWY_HAVE_SCALABLE ? 1 : HWY_LANES(float) >= 16 ? 4 : 2;

// φ of vector v: column c of row x, through a buffer at the ragged end of a row (nothing past the row
// is read; the lanes past it are 0).
template <class F>
HWY_INLINE V FeatureVector(D d, const F& f, const float* x, int64_t c, int64_t cols) {
  const int64_t L = int64_t(hn::Lanes(d));
  if (c + L <= cols) return f(d, hn::LoadU(d, x + c), hn::Zero(d));
  HWY_ALIGN float buf[HWY_LANES(float)] = {};
  const int64_t n = std::max<int64_t>(0, cols - c);
  std::copy_n(x + c, n, buf);
  return hn::IfThenElseZero(hn::FirstN(d, size_t(n)), f(d, hn::Load(d, buf), hn::Zero(d)));
}

#if HWY_HAVE_SCALABLE
// FeatureTile columns [c0, c0 + L) with the map F: the loop below for NV = 1, without its arrays of vectors.
template <int NV, class F>
HWY_INLINE void FeatureColumns(const FeatureTile& t, int64_t c0) {
  static_assert(NV == 1, "SVE takes one vector column at a time (kVecs)");
  const D d;
  const F f;
  V sum = t.sum ? hn::LoadU(d, t.sum + c0) : hn::Zero(d);
  for (int64_t r = 0; r < t.rows; ++r) {
    const V y = FeatureVector(d, f, t.x + r * t.ldx, c0, t.cols);
    hn::StoreU(y, d, t.phi + r * t.ldp + c0);
    sum = hn::Add(sum, y);
    if (t.dots) {
      const float part = hn::GetLane(hn::SumOfLanes(d, hn::MulAdd(y, hn::LoadU(d, t.dot + c0), hn::Zero(d))));
      t.dots[r] = c0 == 0 ? part : t.dots[r] + part;
    }
  }
  if (t.sum) hn::StoreU(sum, d, t.sum + c0);
}
#else
// FeatureTile columns [c0, c0 + NV·L) with the map F: the group's column sums stay in registers across
// the rows, and its NV vectors are independent of each other.
template <int NV, class F>
HWY_INLINE void FeatureColumns(const FeatureTile& t, int64_t c0) {
  const D d;
  const F f;
  const int64_t L = int64_t(hn::Lanes(d));
  V sum[NV];
  for (int j = 0; j < NV; ++j) sum[j] = t.sum ? hn::LoadU(d, t.sum + c0 + j * L) : hn::Zero(d);
  for (int64_t r = 0; r < t.rows; ++r) {
    const float* x = t.x + r * t.ldx;
    float* phi = t.phi + r * t.ldp;
    V y[NV];
    for (int j = 0; j < NV; ++j) y[j] = FeatureVector(d, f, x, c0 + j * L, t.cols);
    for (int j = 0; j < NV; ++j) {
      hn::StoreU(y[j], d, phi + c0 + j * L);
      sum[j] = hn::Add(sum[j], y[j]);
    }
    if (t.dots) {
      V dot = hn::Zero(d);
      for (int j = 0; j < NV; ++j) dot = hn::MulAdd(y[j], hn::LoadU(d, t.dot + c0 + j * L), dot);
      const float part = hn::GetLane(hn::SumOfLanes(d, dot));
      t.dots[r] = c0 == 0 ? part : t.dots[r] + part;
    }
  }
  if (t.sum)
    for (int j = 0; j < NV; ++j) hn::StoreU(sum[j], d, t.sum + c0 + j * L);
}
#endif  // HWY_HAVE_SCALABLE

// FeatureTile with the map F, in groups of up to kVecs vector columns.
template <class F>
void FeatureTileWith(const FeatureTile& t) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  int64_t c0 = 0;
  for (; c0 + kVecs * L <= t.ldp; c0 += kVecs * L) FeatureColumns<kVecs, F>(t, c0);
  // The vector columns left over (none when kVecs is 1).
  Counted<kVecs>((t.ldp - c0) / L, [&](auto nv) { FeatureColumns<nv(), F>(t, c0); });
}

void FeatureTileNow(const FeatureTile& t) {
  switch (t.map) {
    case TileMap::elu:
      return FeatureTileWith<EluForward>(t);
    case TileMap::relu:
      return FeatureTileWith<ReluForward>(t);
    default:
      return FeatureTileWith<Identity>(t);
  }
}

void ForwardN(TileMap map, float* phi, const float* x, int64_t n) {
  switch (map) {
    case TileMap::elu:
      return Apply<EluForward>(phi, x, nullptr, n);
    case TileMap::relu:
      return Apply<ReluForward>(phi, x, nullptr, n);
    default:
      return Apply<Identity>(phi, x, nullptr, n);
  }
}
void BackwardN(TileMap map, float* dx, const float* dphi, const float* x, int64_t n) {
  if (map == TileMap::elu) return Apply<EluBackward>(dx, x, dphi, n);
  return Apply<ReluBackward>(dx, x, dphi, n);
}
void BackwardFromPhiRows(TileMap map, float* dx, int64_t ldx, const float* dphi, int64_t ldd, const float* phi,
                         int64_t ldp, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    if (map == TileMap::elu)
      Apply<EluBackwardFromPhi>(dx + r * ldx, phi + r * ldp, dphi + r * ldd, cols);
    else
      Apply<ReluBackwardFromPhi>(dx + r * ldx, phi + r * ldp, dphi + r * ldd, cols);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace linattn::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace linattn::kernels {

HWY_EXPORT(FeatureTileNow);
HWY_EXPORT(ForwardN);
HWY_EXPORT(BackwardN);
HWY_EXPORT(BackwardFromPhiRows);

void feature_tile(const FeatureTile& tile) { HWY_DYNAMIC_DISPATCH(FeatureTileNow)(tile); }
void map_forward(TileMap map, float* phi, const float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(ForwardN)(map, phi, x, n); }
void map_backward(TileMap map, float* dx, const float* dphi, const float* x, int64_t n) {
  HWY_DYNAMIC_DISPATCH(BackwardN)(map, dx, dphi, x, n);
}
void map_backward_from_phi(TileMap map, float* dx, int64_t ldx, const float* dphi, int64_t ldd, const float* phi,
                           int64_t ldp, int64_t rows, int64_t cols) {
  HWY_DYNAMIC_DISPATCH(BackwardFromPhiRows)(map, dx, ldx, dphi, ldd, phi, ldp, rows, cols);
}

}  // namespace linattn::kernels
#endif  // HWY_ONCE
