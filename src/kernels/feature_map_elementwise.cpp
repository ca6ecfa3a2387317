// SIMD elementwise feature maps (see feature_map_elementwise.hpp).
#include <algorithm>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/feature_map_elementwise.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must follow foreach_target.h.
#include "hwy/highway.h"
#include "kernels/feature_map_elementwise.hpp"

HWY_BEFORE_NAMESPACE();
namespace linattn::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// e^x for x ≤ 0 (elu only needs that half): Cody–Waite reduction x = n·ln2 + r, |r| ≤ ln2/2, Cephes'
// degree-5 polynomial for e^r (≤ 2 ulp), and 2^n put into the exponent. Below ln(FLT_MIN) the result
// is flushed to 0 (the true value is < 1.2e-38, below every feature that matters). Fewer operations
// than the general hn::Exp, which handles the whole range and denormals.
HWY_INLINE V ExpNonPositive(D d, V x) {
  const hn::RebindToSigned<D> di;
  const V lowest = hn::Set(d, -87.33654f);  // ln(FLT_MIN)
  const V n = hn::Round(hn::Mul(hn::Max(x, lowest), hn::Set(d, 1.44269504088896341f)));
  V r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), x);
  r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);
  V p = hn::Set(d, 1.9875691500e-4f);
  p = hn::MulAdd(p, r, hn::Set(d, 1.3981999507e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 8.3334519073e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 4.1665795894e-2f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.6666665459e-1f));
  p = hn::MulAdd(p, r, hn::Set(d, 5.0000001201e-1f));
  const V er = hn::MulAdd(hn::Mul(p, r), r, hn::Add(r, hn::Set(d, 1.0f)));
  const V scale = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127))));
  return hn::IfThenZeroElse(hn::Lt(x, lowest), hn::Mul(er, scale));
}

// Scalar spec: x > 0 ? x + 1 : exp(x). exp sees min(x, 0) only, so large inputs never overflow;
// NaN is passed through explicitly.
struct EluForward {
  HWY_INLINE V operator()(D d, V x, V) const {
    const V zero = hn::Zero(d);
    const V e = ExpNonPositive(d, hn::Min(x, zero));
    const V y = hn::IfThenElse(hn::Gt(x, zero), hn::Add(x, hn::Set(d, 1.0f)), e);
    return hn::IfThenElse(hn::IsNaN(x), x, y);
  }
};
// Scalar spec: dφ · (x > 0 ? 1 : exp(x)).
struct EluBackward {
  HWY_INLINE V operator()(D d, V x, V dphi) const {
    const V zero = hn::Zero(d);
    const V slope = hn::IfThenElse(hn::Gt(x, zero), hn::Set(d, 1.0f), ExpNonPositive(d, hn::Min(x, zero)));
    return hn::Mul(dphi, hn::IfThenElse(hn::IsNaN(x), x, slope));
  }
};
// Scalar spec: x > 0 || isnan(x) ? x : 0.
struct ReluForward {
  HWY_INLINE V operator()(D d, V x, V) const { return hn::IfThenZeroElse(hn::Le(x, hn::Zero(d)), x); }
};
// Scalar spec: x > 0 ? dφ : 0.
struct ReluBackward {
  HWY_INLINE V operator()(D d, V x, V dphi) const { return hn::IfThenElseZero(hn::Gt(x, hn::Zero(d)), dphi); }
};

// Scalar spec (from φ = elu(x) + 1): dφ · (φ > 1 ? 1 : φ); a NaN φ passes through.
struct EluBackwardFromPhi {
  HWY_INLINE V operator()(D d, V phi, V dphi) const {
    return hn::Mul(dphi, hn::IfThenElse(hn::Gt(phi, hn::Set(d, 1.0f)), hn::Set(d, 1.0f), phi));
  }
};
// Scalar spec (from φ = max(x, 0)): φ > 0 ? dφ : 0.
struct ReluBackwardFromPhi {
  HWY_INLINE V operator()(D d, V phi, V dphi) const { return hn::IfThenElseZero(hn::Gt(phi, hn::Zero(d)), dphi); }
};

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

void EluForwardN(float* phi, const float* x, int64_t n) { Apply<EluForward>(phi, x, nullptr, n); }
void EluForwardRows(float* phi, int64_t ldp, const float* x, int64_t ldx, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) Apply<EluForward>(phi + r * ldp, x + r * ldx, nullptr, cols);
}
void ReluForwardRows(float* phi, int64_t ldp, const float* x, int64_t ldx, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) Apply<ReluForward>(phi + r * ldp, x + r * ldx, nullptr, cols);
}
void EluBackwardFromPhiRows(float* dx, int64_t ldx, const float* dphi, int64_t ldd, const float* phi, int64_t ldp,
                            int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) Apply<EluBackwardFromPhi>(dx + r * ldx, phi + r * ldp, dphi + r * ldd, cols);
}
void ReluBackwardFromPhiRows(float* dx, int64_t ldx, const float* dphi, int64_t ldd, const float* phi, int64_t ldp,
                             int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) Apply<ReluBackwardFromPhi>(dx + r * ldx, phi + r * ldp, dphi + r * ldd, cols);
}
void EluBackwardN(float* dx, const float* dphi, const float* x, int64_t n) { Apply<EluBackward>(dx, x, dphi, n); }
void ReluForwardN(float* phi, const float* x, int64_t n) { Apply<ReluForward>(phi, x, nullptr, n); }
void ReluBackwardN(float* dx, const float* dphi, const float* x, int64_t n) { Apply<ReluBackward>(dx, x, dphi, n); }

}  // namespace HWY_NAMESPACE
}  // namespace linattn::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace linattn::kernels {

HWY_EXPORT(EluForwardN);
HWY_EXPORT(EluBackwardN);
HWY_EXPORT(ReluForwardN);
HWY_EXPORT(ReluBackwardN);
HWY_EXPORT(EluForwardRows);
HWY_EXPORT(ReluForwardRows);
HWY_EXPORT(EluBackwardFromPhiRows);
HWY_EXPORT(ReluBackwardFromPhiRows);

void elu_forward(float* phi, const float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(EluForwardN)(phi, x, n); }
void elu_backward(float* dx, const float* dphi, const float* x, int64_t n) {
  HWY_DYNAMIC_DISPATCH(EluBackwardN)(dx, dphi, x, n);
}
void relu_forward(float* phi, const float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(ReluForwardN)(phi, x, n); }
void relu_backward(float* dx, const float* dphi, const float* x, int64_t n) {
  HWY_DYNAMIC_DISPATCH(ReluBackwardN)(dx, dphi, x, n);
}

void elu_forward_rows(float* phi, int64_t ldp, const float* x, int64_t ldx, int64_t rows, int64_t cols) {
  HWY_DYNAMIC_DISPATCH(EluForwardRows)(phi, ldp, x, ldx, rows, cols);
}
void relu_forward_rows(float* phi, int64_t ldp, const float* x, int64_t ldx, int64_t rows, int64_t cols) {
  HWY_DYNAMIC_DISPATCH(ReluForwardRows)(phi, ldp, x, ldx, rows, cols);
}

void elu_backward_from_phi(float* dx, int64_t ldx, const float* dphi, int64_t ldd, const float* phi, int64_t ldp,
                           int64_t rows, int64_t cols) {
  HWY_DYNAMIC_DISPATCH(EluBackwardFromPhiRows)(dx, ldx, dphi, ldd, phi, ldp, rows, cols);
}
void relu_backward_from_phi(float* dx, int64_t ldx, const float* dphi, int64_t ldd, const float* phi, int64_t ldp,
                            int64_t rows, int64_t cols) {
  HWY_DYNAMIC_DISPATCH(ReluBackwardFromPhiRows)(dx, ldx, dphi, ldd, phi, ldp, rows, cols);
}

}  // namespace linattn::kernels
#endif  // HWY_ONCE
