// The decay factors (see decay_factors.hpp), one Highway source for every target.
#include <cmath>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/decay_factors.cpp"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
// clang-format on
#include "kernels/decay_factors.hpp"

HWY_BEFORE_NAMESPACE();
namespace linattn::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// The factor exp(sign · (a − b)) of lanes [i, i + L).
HWY_INLINE V Factor(D d, const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, V sign, int64_t i) {
  const V diff = b ? hn::Sub(hn::LoadU(d, a + i), hn::LoadU(d, b + i)) : hn::LoadU(d, a + i);
  return hn::Exp(d, hn::Mul(sign, diff));
}

void MulExpDifferenceN(float* y, const float* x, const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, float sign,
                       int64_t n) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  const V s = hn::Set(d, sign);
  int64_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(hn::Mul(hn::LoadU(d, x + i), Factor(d, a, b, s, i)), d, y + i);
  for (; i < n; ++i) y[i] = x[i] * std::exp(sign * (b ? a[i] - b[i] : a[i]));
}

void MulExpPairN(float* HWY_RESTRICT qh, float* HWY_RESTRICT kh, float* HWY_RESTRICT e, float* HWY_RESTRICT inv_e,
                 const float* HWY_RESTRICT q, const float* HWY_RESTRICT k, const float* HWY_RESTRICT a,
                 const float* HWY_RESTRICT b, int64_t n) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  const V one = hn::Set(d, 1.0f);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const V f = Factor(d, a, b, one, i), inv = hn::Div(one, f);
    hn::StoreU(f, d, e + i), hn::StoreU(inv, d, inv_e + i);
    hn::StoreU(hn::Mul(hn::LoadU(d, q + i), f), d, qh + i);
    hn::StoreU(hn::Mul(hn::LoadU(d, k + i), inv), d, kh + i);
  }
  for (; i < n; ++i) {
    e[i] = std::exp(a[i] - b[i]), inv_e[i] = 1.0f / e[i];
    qh[i] = q[i] * e[i], kh[i] = k[i] * inv_e[i];
  }
}

void DeltaFactorRowN(const DeltaFactorRow& o, const float* HWY_RESTRICT q, const float* HWY_RESTRICT k,
                     const float* HWY_RESTRICT b, const float* HWY_RESTRICT m, const float* HWY_RESTRICT em,
                     const float* HWY_RESTRICT enm, int64_t n) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  const V one = hn::Set(d, 1.0f);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const V e = Factor(d, b, m, one, i), inv = hn::Div(one, e);
    const V eb = hn::Mul(e, hn::LoadU(d, em + i)), ed = hn::Mul(inv, hn::LoadU(d, enm + i));
    const V qv = hn::LoadU(d, q + i), kv = hn::LoadU(d, k + i);
    hn::StoreU(e, d, o.El + i), hn::StoreU(inv, d, o.Er + i), hn::StoreU(eb, d, o.Eb + i), hn::StoreU(ed, d, o.Ed + i);
    hn::StoreU(hn::Mul(qv, e), d, o.Ql + i), hn::StoreU(hn::Mul(kv, e), d, o.Kl + i);
    hn::StoreU(hn::Mul(kv, inv), d, o.Kr + i), hn::StoreU(hn::Mul(qv, eb), d, o.Qe + i);
    hn::StoreU(hn::Mul(kv, eb), d, o.Kt + i), hn::StoreU(hn::Mul(kv, ed), d, o.Kd + i);
  }
  for (; i < n; ++i) {
    const float e = std::exp(b[i] - m[i]), inv = 1.0f / e, eb = e * em[i], ed = inv * enm[i];
    o.El[i] = e, o.Er[i] = inv, o.Eb[i] = eb, o.Ed[i] = ed;
    o.Ql[i] = q[i] * e, o.Kl[i] = k[i] * e, o.Kr[i] = k[i] * inv, o.Qe[i] = q[i] * eb, o.Kt[i] = k[i] * eb,
    o.Kd[i] = k[i] * ed;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace linattn::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace linattn::kernels {

HWY_EXPORT(MulExpDifferenceN);
HWY_EXPORT(MulExpPairN);
HWY_EXPORT(DeltaFactorRowN);

void mul_exp_difference(float* y, const float* x, const float* a, const float* b, float sign, int64_t n) {
  HWY_DYNAMIC_DISPATCH(MulExpDifferenceN)(y, x, a, b, sign, n);
}
void mul_exp_pair(float* qh, float* kh, float* e, float* inv_e, const float* q, const float* k, const float* a,
                  const float* b, int64_t n) {
  HWY_DYNAMIC_DISPATCH(MulExpPairN)(qh, kh, e, inv_e, q, k, a, b, n);
}

void delta_factor_row(const DeltaFactorRow& out, const float* q, const float* k, const float* b, const float* m,
                      const float* em, const float* enm, int64_t n) {
  HWY_DYNAMIC_DISPATCH(DeltaFactorRowN)(out, q, k, b, m, em, enm, n);
}

}  // namespace linattn::kernels
#endif  // HWY_ONCE
