// fp32 GELU with Highway's vector tanh (runtime dispatch): glibc's scalar tanhf took half of a
// training step. The scalar spec is the double path of gelu_forward / gelu_backward in layers.cpp.
#include <cstdint>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/gelu.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must follow foreach_target.h.
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace linattn::model::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// Scalar spec: out = ½ x (1 + tanh(√(2/π)(x + 0.044715 x³))); with dout: its derivative times dout.
template <bool kBackward>
HWY_INLINE V Gelu(D d, V x, V dout) {
  const V half = hn::Set(d, 0.5f), one = hn::Set(d, 1.0f), scale = hn::Set(d, 0.7978845608028654f),
          cubic = hn::Set(d, 0.044715f);
  const V x2 = hn::Mul(x, x);
  const V th = hn::Tanh(d, hn::Mul(scale, hn::MulAdd(hn::Mul(cubic, x2), x, x)));
  if constexpr (!kBackward) {
    return hn::Mul(hn::Mul(half, x), hn::Add(one, th));
  } else {
    const V du = hn::Mul(scale, hn::MulAdd(hn::Set(d, 3.0f * 0.044715f), x2, one));
    const V sech2 = hn::NegMulAdd(th, th, one);
    return hn::Mul(dout, hn::MulAdd(hn::Mul(hn::Mul(half, x), sech2), du, hn::Mul(half, hn::Add(one, th))));
  }
}

template <bool kBackward>
void GeluRange(float* HWY_RESTRICT out, const float* HWY_RESTRICT x, const float* HWY_RESTRICT dout, int64_t n) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const V g = kBackward ? hn::LoadU(d, dout + i) : hn::Zero(d);
    hn::StoreU(Gelu<kBackward>(d, hn::LoadU(d, x + i), g), d, out + i);
  }
  if (i == n) return;
  // The tail through padded buffers, so that it gets the same arithmetic as the body.
  HWY_ALIGN float xt[HWY_LANES(float)] = {}, gt[HWY_LANES(float)] = {}, yt[HWY_LANES(float)];
  for (int64_t j = 0; j < n - i; ++j) {
    xt[j] = x[i + j];
    if (kBackward) gt[j] = dout[i + j];
  }
  hn::Store(Gelu<kBackward>(d, hn::Load(d, xt), hn::Load(d, gt)), d, yt);
  for (int64_t j = 0; j < n - i; ++j) out[i + j] = yt[j];
}

void GeluForward(float* out, const float* x, int64_t n) { GeluRange<false>(out, x, nullptr, n); }
void GeluBackward(float* dinp, const float* dout, const float* x, int64_t n) { GeluRange<true>(dinp, x, dout, n); }

}  // namespace HWY_NAMESPACE
}  // namespace linattn::model::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace linattn::model::simd {
HWY_EXPORT(GeluForward);
HWY_EXPORT(GeluBackward);
void gelu_forward(float* out, const float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(GeluForward)(out, x, n); }
void gelu_backward(float* dinp, const float* dout, const float* x, int64_t n) {
  HWY_DYNAMIC_DISPATCH(GeluBackward)(dinp, dout, x, n);
}
}  // namespace linattn::model::simd
#endif
