// Decoding scores, SIMD over the head dim with Highway runtime dispatch (see the header).
#include "kernels/softmax_decode.hpp"

#include <cmath>
#include <cstdint>

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
                    const T* HWY_RESTRICT k, int64_t k_stride, int64_t count, int64_t depth, const DecodeAhead& ahead) {
  const Tag d;
  const int64_t row_bytes = depth * int64_t(sizeof(T)), k_pitch = k_stride * int64_t(sizeof(T));
  const int64_t lanes = int64_t(hn::Lanes(d));
  const int64_t full = depth / lanes * lanes;  // k's vectors before `full` are whole
  // The tail of a key row, copied into zeros: a masked load may read past the row on some targets.
  HWY_ALIGN float tail[kPad] = {};
  for (int64_t j = 0; j < count; ++j) {
    const T* HWY_RESTRICT kj = k + j * k_stride;
    // Addresses as integers: the row kKeysAhead on may lie past the cache (a prefetch does not fault).
    const uintptr_t next = reinterpret_cast<uintptr_t>(kj) + uintptr_t(kKeysAhead * k_pitch);
    for (int64_t b = 0; b < row_bytes; b += 64)
      __builtin_prefetch(reinterpret_cast<const char*>(next + uintptr_t(b)), 0, 2);
    if (ahead.rows) {
      const char* v = static_cast<const char*>(ahead.rows) + j * ahead.stride;
      for (int64_t b = 0; b < ahead.bytes; b += 64) __builtin_prefetch(v + b, 0, 2);
    }
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
                  int64_t count, int64_t depth, const DecodeAhead& ahead) {
  DecodeScoresOf(s, lds, q, ldq, rows, k, k_stride, count, depth, ahead);
}
void DecodeScoresBf16(float* s, int64_t lds, const float* q, int64_t ldq, int64_t rows, const bf16* k, int64_t k_stride,
                      int64_t count, int64_t depth, const DecodeAhead& ahead) {
  DecodeScoresOf(s, lds, q, ldq, rows, k, k_stride, count, depth, ahead);
}
void DecodeScoresF16(float* s, int64_t lds, const float* q, int64_t ldq, int64_t rows, const f16* k, int64_t k_stride,
                     int64_t count, int64_t depth, const DecodeAhead& ahead) {
  DecodeScoresOf(s, lds, q, ldq, rows, k, k_stride, count, depth, ahead);
}

// Scalar spec: o[r·ldo + e] = fma-chain over j < key_end[r] of p[r·ldp + j] · float(v[j·v_stride + e])
template <class T>
void DecodeValuesOf(float* HWY_RESTRICT o, int64_t ldo, const float* HWY_RESTRICT p, int64_t ldp,
                    const int32_t* HWY_RESTRICT key_end, int64_t rows, const T* HWY_RESTRICT v, int64_t v_stride,
                    int64_t cols) {
  const Tag d;
  const int64_t lanes = int64_t(hn::Lanes(d)), full = cols / lanes * lanes;
  for (int64_t r = 0; r < rows; ++r) {
    float* HWY_RESTRICT orow = o + r * ldo;
    const float* HWY_RESTRICT pr = p + r * ldp;
    const int64_t n = key_end[r];
    int64_t c = 0;
    for (; c + 4 * lanes <= full; c += 4 * lanes) {  // four chains a row: the FMA latency is covered
      Vec a0 = hn::LoadU(d, orow + c), a1 = hn::LoadU(d, orow + c + lanes), a2 = hn::LoadU(d, orow + c + 2 * lanes),
          a3 = hn::LoadU(d, orow + c + 3 * lanes);
      for (int64_t j = 0; j < n; ++j) {
        const T* HWY_RESTRICT vj = v + j * v_stride + c;
        const Vec pj = hn::Set(d, pr[j]);
        a0 = hn::MulAdd(pj, LoadWide(d, vj), a0);
        a1 = hn::MulAdd(pj, LoadWide(d, vj + lanes), a1);
        a2 = hn::MulAdd(pj, LoadWide(d, vj + 2 * lanes), a2);
        a3 = hn::MulAdd(pj, LoadWide(d, vj + 3 * lanes), a3);
      }
      hn::StoreU(a0, d, orow + c);
      hn::StoreU(a1, d, orow + c + lanes);
      hn::StoreU(a2, d, orow + c + 2 * lanes);
      hn::StoreU(a3, d, orow + c + 3 * lanes);
    }
    for (; c < full; c += lanes) {
      Vec a = hn::LoadU(d, orow + c);
      for (int64_t j = 0; j < n; ++j) a = hn::MulAdd(hn::Set(d, pr[j]), LoadWide(d, v + j * v_stride + c), a);
      hn::StoreU(a, d, orow + c);
    }
    for (; c < cols; ++c) {  // the last < lanes columns
      float a = orow[c];
      for (int64_t j = 0; j < n; ++j) a = std::fma(pr[j], Widen(v[j * v_stride + c]), a);
      orow[c] = a;
    }
  }
}
void DecodeValuesBf16(float* o, int64_t ldo, const float* p, int64_t ldp, const int32_t* key_end, int64_t rows,
                      const bf16* v, int64_t v_stride, int64_t cols) {
  DecodeValuesOf(o, ldo, p, ldp, key_end, rows, v, v_stride, cols);
}
void DecodeValuesF16(float* o, int64_t ldo, const float* p, int64_t ldp, const int32_t* key_end, int64_t rows,
                     const f16* v, int64_t v_stride, int64_t cols) {
  DecodeValuesOf(o, ldo, p, ldp, key_end, rows, v, v_stride, cols);
}

}  // namespace linattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace linattn::kernels {

HWY_EXPORT(DecodeScores);
HWY_EXPORT(DecodeScoresBf16);
HWY_EXPORT(DecodeScoresF16);
HWY_EXPORT(DecodeValuesBf16);
HWY_EXPORT(DecodeValuesF16);

void softmax_decode_scores(float* s, int64_t lds, const float* q, int64_t ldq, int64_t rows, const float* k,
                           int64_t k_stride, int64_t count, int64_t depth, const DecodeAhead& ahead) {
  HWY_DYNAMIC_DISPATCH(DecodeScores)(s, lds, q, ldq, rows, k, k_stride, count, depth, ahead);
}
void softmax_decode_scores(float* s, int64_t lds, const float* q, int64_t ldq, int64_t rows, const bf16* k,
                           int64_t k_stride, int64_t count, int64_t depth, const DecodeAhead& ahead) {
  HWY_DYNAMIC_DISPATCH(DecodeScoresBf16)(s, lds, q, ldq, rows, k, k_stride, count, depth, ahead);
}
void softmax_decode_scores(float* s, int64_t lds, const float* q, int64_t ldq, int64_t rows, const f16* k,
                           int64_t k_stride, int64_t count, int64_t depth, const DecodeAhead& ahead) {
  HWY_DYNAMIC_DISPATCH(DecodeScoresF16)(s, lds, q, ldq, rows, k, k_stride, count, depth, ahead);
}

void softmax_decode_values(float* o, int64_t ldo, const float* p, int64_t ldp, const int32_t* key_end, int64_t rows,
                           const bf16* v, int64_t v_stride, int64_t cols) {
  HWY_DYNAMIC_DISPATCH(DecodeValuesBf16)(o, ldo, p, ldp, key_end, rows, v, v_stride, cols);
}
void softmax_decode_values(float* o, int64_t ldo, const float* p, int64_t ldp, const int32_t* key_end, int64_t rows,
                           const f16* v, int64_t v_stride, int64_t cols) {
  HWY_DYNAMIC_DISPATCH(DecodeValuesF16)(o, ldo, p, ldp, key_end, rows, v, v_stride, cols);
}

}  // namespace linattn::kernels
#endif  // HWY_ONCE
