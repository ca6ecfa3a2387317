// Decoding scores, SIMD over the head dim with Highway runtime dispatch (see the header).
#include "kernels/softmax_decode.hpp"

#include "kernels/tile.hpp"
#include "linattn/half.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/softmax_decode.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/half_lanes-inl.h"

HWY_BEFORE_NAMESPACE();
namespace linattn::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using Tag = hn::CappedTag<float, kPad>;
using Vec = hn::Vec<Tag>;

// Scalar spec: s[r·lds + j] = Σ_{d < depth} q[r·ldq + d] · float(k[j·k_stride + d])
template <class T>
void DecodeScoresOf(float* HWY_RESTRICT s, int64_t lds, const float* HWY_RESTRICT q, int64_t ldq, int64_t rows,
                    const T* HWY_RESTRICT k, int64_t k_stride, int64_t count, int64_t depth) {
  const Tag d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  const int64_t full = depth / lanes * lanes;  // k's vectors before `full` are whole
  // The tail of a key row, copied into zeros: a masked load may read past the row on some targets.
  HWY_ALIGN float tail[kPad] = {};
  for (int64_t j = 0; j < count; ++j) {
    const T* HWY_RESTRICT kj = k + j * k_stride;
    for (int64_t c = full; c < depth; ++c) tail[c - full] = Widen(kj[c]);
    for (int64_t r = 0; r < rows; ++r) {
      const float* HWY_RESTRICT qr = q + r * ldq;
      Vec acc = hn::Zero(d);
      for (int64_t c = 0; c < full; c += lanes) acc = hn::MulAdd(hn::LoadU(d, qr + c), LoadWide(d, kj + c), acc);
      if (full < depth) acc = hn::MulAdd(hn::LoadU(d, qr + full), hn::Load(d, tail), acc);
      s[r * lds + j] = hn::GetLane(hn::SumOfLanes(d, acc));
    }
  }
}
void DecodeScores(float* s, int64_t lds, const float* q, int64_t ldq, int64_t rows, const float* k, int64_t k_stride,
                  int64_t count, int64_t depth) {
  DecodeScoresOf(s, lds, q, ldq, rows, k, k_stride, count, depth);
}
void DecodeScoresBf16(float* s, int64_t lds, const float* q, int64_t ldq, int64_t rows, const bf16* k, int64_t k_stride,
                      int64_t count, int64_t depth) {
  DecodeScoresOf(s, lds, q, ldq, rows, k, k_stride, count, depth);
}
void DecodeScoresF16(float* s, int64_t lds, const float* q, int64_t ldq, int64_t rows, const f16* k, int64_t k_stride,
                     int64_t count, int64_t depth) {
  DecodeScoresOf(s, lds, q, ldq, rows, k, k_stride, count, depth);
}

}  // namespace linattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace linattn::kernels {

HWY_EXPORT(DecodeScores);
HWY_EXPORT(DecodeScoresBf16);
HWY_EXPORT(DecodeScoresF16);

void softmax_decode_scores(float* s, int64_t lds, const float* q, int64_t ldq, int64_t rows, const float* k,
                           int64_t k_stride, int64_t count, int64_t depth) {
  HWY_DYNAMIC_DISPATCH(DecodeScores)(s, lds, q, ldq, rows, k, k_stride, count, depth);
}
void softmax_decode_scores(float* s, int64_t lds, const float* q, int64_t ldq, int64_t rows, const bf16* k,
                           int64_t k_stride, int64_t count, int64_t depth) {
  HWY_DYNAMIC_DISPATCH(DecodeScoresBf16)(s, lds, q, ldq, rows, k, k_stride, count, depth);
}
void softmax_decode_scores(float* s, int64_t lds, const float* q, int64_t ldq, int64_t rows, const f16* k,
                           int64_t k_stride, int64_t count, int64_t depth) {
  HWY_DYNAMIC_DISPATCH(DecodeScoresF16)(s, lds, q, ldq, rows, k, k_stride, count, depth);
}

}  // namespace linattn::kernels
#endif  // HWY_ONCE
