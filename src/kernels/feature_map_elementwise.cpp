// SIMD elementwise feature maps (see feature_map_elementwise.hpp).
#include <algorithm>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/feature_map_elementwise.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must follow foreach_target.h.
#include "hwy/highway.h"
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

void EluForwardN(float* phi, const float* x, int64_t n) { Apply<EluForward>(phi, x, nullptr, n); }
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
