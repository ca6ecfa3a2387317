// Softmax attention of one query against a KV cache (generation with softmax attention), with
// Highway vectors and a vector exp. linattn's tiled softmax operator pads a single query to a whole
// tile, so decoding one token through it costs far more than the O(n·hd) this does.
// Scalar spec: s_i = scale·(k_i·q); p_i = exp(s_i − max s); out = Σ_i p_i v_i / Σ_i p_i.
#include <cstdint>
#include <limits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "model/decode_simd.cpp"
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

// out: [hd]; q: [hd]; K, V: n rows of hd at stride ld; scratch: [n].
void DecodeHead(float* HWY_RESTRICT out, const float* HWY_RESTRICT q, const float* HWY_RESTRICT K,
                const float* HWY_RESTRICT Vc, int64_t ld, int64_t n, int64_t hd, float scale,
                float* HWY_RESTRICT scratch) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d)), body = hd / L * L;
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    const float* k = K + i * ld;
    V acc = hn::Zero(d);
    for (int64_t j = 0; j < body; j += L) acc = hn::MulAdd(hn::LoadU(d, k + j), hn::LoadU(d, q + j), acc);
    float s = hn::GetLane(hn::SumOfLanes(d, acc));
    for (int64_t j = body; j < hd; ++j) s += k[j] * q[j];
    scratch[i] = s * scale;
    max = scratch[i] > max ? scratch[i] : max;
  }
  // p_i = exp(s_i − max), summed lane-wise in a fixed order.
  const V vmax = hn::Set(d, max);
  V vsum = hn::Zero(d);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const V p = hn::Exp(d, hn::Sub(hn::LoadU(d, scratch + i), vmax));
    hn::StoreU(p, d, scratch + i);
    vsum = hn::Add(vsum, p);
  }
  if (i < n) {
    HWY_ALIGN float tail[HWY_LANES(float)];
    for (int64_t j = 0; j < L; ++j) tail[j] = i + j < n ? scratch[i + j] : -std::numeric_limits<float>::infinity();
    const V p = hn::Exp(d, hn::Sub(hn::Load(d, tail), vmax));  // exp(−∞) = 0 pads
    hn::Store(p, d, tail);
    for (int64_t j = 0; i + j < n; ++j) scratch[i + j] = tail[j];
    vsum = hn::Add(vsum, p);
  }
  const float inv = 1.0f / hn::GetLane(hn::SumOfLanes(d, vsum));
  for (int64_t j = 0; j < hd; ++j) out[j] = 0.0f;
  for (int64_t k = 0; k < n; ++k) {
    const float* v = Vc + k * ld;
    const V p = hn::Set(d, scratch[k]);
    for (int64_t j = 0; j < body; j += L)
      hn::StoreU(hn::MulAdd(p, hn::LoadU(d, v + j), hn::LoadU(d, out + j)), d, out + j);
    for (int64_t j = body; j < hd; ++j) out[j] += scratch[k] * v[j];
  }
  for (int64_t j = 0; j < hd; ++j) out[j] *= inv;
}

}  // namespace HWY_NAMESPACE
}  // namespace linattn::model::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace linattn::model::simd {
HWY_EXPORT(DecodeHead);
void softmax_decode_head(float* out, const float* q, const float* K, const float* V, int64_t ld, int64_t n, int64_t hd,
                         float scale, float* scratch) {
  HWY_DYNAMIC_DISPATCH(DecodeHead)(out, q, K, V, ld, n, hd, scale, scratch);
}
}  // namespace linattn::model::simd
#endif
