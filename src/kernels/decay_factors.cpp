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

template <bool kAdd>
void MulExpDifference(float* y, const float* x, const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, float sign,
                      int64_t n) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  const V s = hn::Set(d, sign);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const V product = hn::Mul(hn::LoadU(d, x + i), Factor(d, a, b, s, i));
    hn::StoreU(kAdd ? hn::Add(hn::LoadU(d, y + i), product) : product, d, y + i);
  }
  for (; i < n; ++i) {
    const float product = x[i] * std::exp(sign * (b ? a[i] - b[i] : a[i]));
    y[i] = kAdd ? y[i] + product : product;
  }
}
void MulExpDifferenceN(float* y, const float* x, const float* a, const float* b, float sign, int64_t n) {
  MulExpDifference<false>(y, x, a, b, sign, n);
}
void AddMulExpDifferenceN(float* y, const float* x, const float* a, const float* b, float sign, int64_t n) {
  MulExpDifference<true>(y, x, a, b, sign, n);
}

void MulExpPairN(float* HWY_RESTRICT qh, float* HWY_RESTRICT kh, const float* HWY_RESTRICT q,
                 const float* HWY_RESTRICT k, const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, int64_t n) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  const V one = hn::Set(d, 1.0f);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const V e = Factor(d, a, b, one, i);
    hn::StoreU(hn::Mul(hn::LoadU(d, q + i), e), d, qh + i);
    hn::StoreU(hn::Div(hn::LoadU(d, k + i), e), d, kh + i);
  }
  for (; i < n; ++i) {
    const float e = std::exp(a[i] - b[i]);
    qh[i] = q[i] * e, kh[i] = k[i] / e;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace linattn::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace linattn::kernels {

HWY_EXPORT(MulExpDifferenceN);
HWY_EXPORT(AddMulExpDifferenceN);
HWY_EXPORT(MulExpPairN);

void mul_exp_difference(float* y, const float* x, const float* a, const float* b, float sign, int64_t n) {
  HWY_DYNAMIC_DISPATCH(MulExpDifferenceN)(y, x, a, b, sign, n);
}
void add_mul_exp_difference(float* y, const float* x, const float* a, const float* b, float sign, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AddMulExpDifferenceN)(y, x, a, b, sign, n);
}

void mul_exp_pair(float* qh, float* kh, const float* q, const float* k, const float* a, const float* b, int64_t n) {
  HWY_DYNAMIC_DISPATCH(MulExpPairN)(qh, kh, q, k, a, b, n);
}

}  // namespace linattn::kernels
#endif  // HWY_ONCE
