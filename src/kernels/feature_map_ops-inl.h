// The elementwise feature maps as Highway functors, shared by every kernel that applies one (the
// standalone maps and the feature tiles of feature_map_elementwise.cpp). Highway's per-target include
// guard: this file is compiled once per target.
#if defined(LINATTN_KERNELS_FEATURE_MAP_OPS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LINATTN_KERNELS_FEATURE_MAP_OPS_INL_H_
#undef LINATTN_KERNELS_FEATURE_MAP_OPS_INL_H_
#else
#define LINATTN_KERNELS_FEATURE_MAP_OPS_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace linattn::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// e^x for x ≤ 0 (elu only needs that half): x = n·ln2 + r with n an integer and |r| ≤ ln2/2
// (Cody–Waite: ln2 in two parts, so r is exact to fp32 rounding), e^r by a degree-5 polynomial fitted
// for relative error (≤ 1.7e-7 evaluated in fp32, 1.4 ulp), times 2^n built in the exponent bits.
// Below ln(FLT_MIN) the result is flushed to 0 (the true value is < 1.2e-38, below every feature
// that matters). Nine multiplies and adds: inside the linear passes, whose GEMMs keep the multiply
// units busy, those are what φ costs.
HWY_INLINE V ExpNonPositive(D d, V x) {
  const hn::RebindToSigned<D> di;
  const V lowest = hn::Set(d, -87.33654f);  // ln(FLT_MIN)
  const V xc = hn::Max(x, lowest);
  // t = x·log2(e) + 1.5·2^23 + 127: the addition rounds to the integer n, and t's low mantissa bits
  // hold n + 127 ∈ [1, 127], the biased exponent of 2^n.
  const V magic = hn::Set(d, 12583039.0f);
  const V t = hn::MulAdd(xc, hn::Set(d, 1.44269504088896341f), magic);
  const V n = hn::Sub(t, magic);
  V r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), xc);
  r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);
  V p = hn::Set(d, 8.29031e-3f);
  p = hn::MulAdd(p, r, hn::Set(d, 4.189793e-2f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.16667636f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.4999915f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.99999971f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  const V two_n = hn::BitCast(d, hn::ShiftLeft<23>(hn::BitCast(di, t)));
  return hn::IfThenZeroElse(hn::Lt(x, lowest), hn::Mul(p, two_n));
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

}  // namespace HWY_NAMESPACE
}  // namespace linattn::kernels
HWY_AFTER_NAMESPACE();

#endif  // LINATTN_KERNELS_FEATURE_MAP_OPS_INL_H_
