// Row-wise helpers (see rows.hpp), one Highway source for every target.
#include <algorithm>
#include <cmath>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/rows.cpp"
// The math header must follow highway.h, once per target.
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
// clang-format on
#include "kernels/half_lanes-inl.h"
#include "kernels/rows.hpp"

HWY_BEFORE_NAMESPACE();
namespace linattn::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// Σ_k a[k]·x[k] (x null: Σ_k a[k]) in a fixed order: lanes, then the scalar tail.
HWY_INLINE float Dot(const float* HWY_RESTRICT a, const float* HWY_RESTRICT x, int64_t n) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  V acc = hn::Zero(d);
  int64_t k = 0;
  if (x) {
    for (; k + L <= n; k += L) acc = hn::MulAdd(hn::LoadU(d, a + k), hn::LoadU(d, x + k), acc);
  } else {
    for (; k + L <= n; k += L) acc = hn::Add(hn::LoadU(d, a + k), acc);
  }
  float sum = hn::GetLane(hn::SumOfLanes(d, acc));
  for (; k < n; ++k) sum += x ? a[k] * x[k] : a[k];
  return sum;
}

void RowDots(float* out, const float* a, int64_t lda, const float* x, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) out[r] = Dot(a + r * lda, x, cols);
}

// Scalar spec: dden = −(φ·P) / den²; P[m] ← P[m] / den + dden·z[m]; returns dden.
float NormaliserBackwardRow(float* HWY_RESTRICT P, const float* HWY_RESTRICT phi, const float* HWY_RESTRICT z,
                            float den, int64_t n) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  const float inv = 1.0f / den, dden = -Dot(phi, P, n) * inv * inv;
  const V vinv = hn::Set(d, inv), vdden = hn::Set(d, dden);
  int64_t m = 0;
  for (; m + L <= n; m += L)
    hn::StoreU(hn::MulAdd(vdden, hn::LoadU(d, z + m), hn::Mul(hn::LoadU(d, P + m), vinv)), d, P + m);
  for (; m < n; ++m) P[m] = std::fma(dden, z[m], P[m] * inv);
  return dden;
}

void AddWeightedRows(float* HWY_RESTRICT y, const float* HWY_RESTRICT a, int64_t lda, const float* HWY_RESTRICT w,
                     int64_t rows, int64_t cols) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  int64_t k = 0;
  for (; k + L <= cols; k += L) {
    V acc = hn::LoadU(d, y + k);
    for (int64_t r = 0; r < rows; ++r) {
      const V row = hn::LoadU(d, a + r * lda + k);
      acc = w ? hn::MulAdd(hn::Set(d, w[r]), row, acc) : hn::Add(acc, row);
    }
    hn::StoreU(acc, d, y + k);
  }
  for (; k < cols; ++k) {
    float sum = y[k];
    for (int64_t r = 0; r < rows; ++r) sum = w ? std::fma(w[r], a[r * lda + k], sum) : sum + a[r * lda + k];
    y[k] = sum;
  }
}

// T: S's element type (float, or bf16: widened as loaded, the updated row rounded as stored; the
// readout uses the unrounded row).
template <class T>
void RankOneUpdateReadoutOf(float* HWY_RESTRICT num, T* HWY_RESTRICT S, const float* HWY_RESTRICT phi_k,
                            const float* HWY_RESTRICT v, const float* HWY_RESTRICT phi_q, int64_t M, int64_t E,
                            const float* HWY_RESTRICT decay) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  int64_t e = 0;
  // One sweep over S per vector column: update the row, then read it out, while it is in registers.
  for (; e + L <= E; e += L) {
    const V ve = hn::LoadU(d, v + e);
    V acc = hn::Zero(d);
    for (int64_t m = 0; m < M; ++m) {
      T* s = S + m * E + e;
      const V old = decay ? hn::Mul(hn::Set(d, decay[m]), LoadWide(d, s)) : LoadWide(d, s);
      const V row = hn::MulAdd(hn::Set(d, phi_k[m]), ve, old);
      StoreRounded(d, row, s);
      acc = hn::MulAdd(hn::Set(d, phi_q[m]), row, acc);
    }
    hn::StoreU(acc, d, num + e);
  }
  for (; e < E; ++e) {
    float acc = 0;
    for (int64_t m = 0; m < M; ++m) {
      const float previous = decay ? decay[m] * Widen(S[m * E + e]) : Widen(S[m * E + e]);
      const float row = std::fma(phi_k[m], v[e], previous);
      Round(row, S + m * E + e);
      acc = std::fma(phi_q[m], row, acc);
    }
    num[e] = acc;
  }
}
void RankOneUpdateReadout(float* num, float* S, const float* phi_k, const float* v, const float* phi_q, int64_t M,
                          int64_t E, const float* decay) {
  RankOneUpdateReadoutOf(num, S, phi_k, v, phi_q, M, E, decay);
}
void RankOneUpdateReadoutBf16(float* num, bf16* S, const float* phi_k, const float* v, const float* phi_q, int64_t M,
                              int64_t E, const float* decay) {
  RankOneUpdateReadoutOf(num, S, phi_k, v, phi_q, M, E, decay);
}

// The delta-rule token below on S of element type T (float, or bf16: rows widened as loaded, the
// updated rows rounded as stored, the readout from the unrounded rows, as RankOneUpdateReadoutOf).
#if HWY_HAVE_SCALABLE
// Columns [e, e + L) of one delta-rule token: the panel below for NV = 1, without its arrays of vectors (SVE's
// sizeless vectors cannot be array elements). Each column's chains are the same as in any panel width.
template <int NV, class T>
HWY_INLINE void DeltaPanel(float* HWY_RESTRICT out, T* HWY_RESTRICT S, const float* HWY_RESTRICT k,
                           const float* HWY_RESTRICT v, const float* HWY_RESTRICT q, float beta, int64_t M, int64_t E,
                           const float* HWY_RESTRICT decay, int64_t e) {
  static_assert(NV == 1, "SVE takes one vector column at a time (kDeltaVecs)");
  const D d;
  V acc = hn::Zero(d);
  for (int64_t m = 0; m < M; ++m)
    acc = hn::MulAdd(hn::Set(d, decay ? decay[m] * k[m] : k[m]), LoadWide(d, S + m * E + e), acc);
  const V u = hn::Mul(hn::Set(d, beta), hn::Sub(hn::LoadU(d, v + e), acc));
  acc = hn::Zero(d);
  for (int64_t m = 0; m < M; ++m) {
    T* s = S + m * E + e;
    const V previous = decay ? hn::Mul(hn::Set(d, decay[m]), LoadWide(d, s)) : LoadWide(d, s);
    const V row = hn::MulAdd(hn::Set(d, k[m]), u, previous);
    StoreRounded(d, row, s), acc = hn::MulAdd(hn::Set(d, q[m]), row, acc);
  }
  hn::StoreU(acc, d, out + e);
}
constexpr int kDeltaVecs = 1;
#else
// Columns [e, e + NV·L) of one delta-rule token: one sweep over the rows of S for Pᵀk
// (P = diag(decay) S), then one that writes P + k (β r)ᵀ with r = v − Pᵀk and reads it out, while the
// panel is in L1. NV vectors per row amortise each row's broadcasts of decay, k and q over the panel.
template <int NV, class T>
HWY_INLINE void DeltaPanel(float* HWY_RESTRICT out, T* HWY_RESTRICT S, const float* HWY_RESTRICT k,
                           const float* HWY_RESTRICT v, const float* HWY_RESTRICT q, float beta, int64_t M, int64_t E,
                           const float* HWY_RESTRICT decay, int64_t e) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  V acc[NV], u[NV];
  for (int j = 0; j < NV; ++j) acc[j] = hn::Zero(d);
  for (int64_t m = 0; m < M; ++m) {
    const V km = hn::Set(d, decay ? decay[m] * k[m] : k[m]);
    for (int j = 0; j < NV; ++j) acc[j] = hn::MulAdd(km, LoadWide(d, S + m * E + e + j * L), acc[j]);
  }
  const V b = hn::Set(d, beta);
  for (int j = 0; j < NV; ++j) u[j] = hn::Mul(b, hn::Sub(hn::LoadU(d, v + e + j * L), acc[j])), acc[j] = hn::Zero(d);
  for (int64_t m = 0; m < M; ++m) {
    const V km = hn::Set(d, k[m]), qm = hn::Set(d, q[m]);
    T* s = S + m * E + e;
    if (decay) {
      const V am = hn::Set(d, decay[m]);
      for (int j = 0; j < NV; ++j) {
        const V row = hn::MulAdd(km, u[j], hn::Mul(am, LoadWide(d, s + j * L)));
        StoreRounded(d, row, s + j * L), acc[j] = hn::MulAdd(qm, row, acc[j]);
      }
    } else {
      for (int j = 0; j < NV; ++j) {
        const V row = hn::MulAdd(km, u[j], LoadWide(d, s + j * L));
        StoreRounded(d, row, s + j * L), acc[j] = hn::MulAdd(qm, row, acc[j]);
      }
    }
  }
  for (int j = 0; j < NV; ++j) hn::StoreU(acc[j], d, out + e + j * L);
}
constexpr int kDeltaVecs = 4;
#endif  // HWY_HAVE_SCALABLE

// One delta-rule token (see rows.hpp): panels of 4 vector columns (8 + 4 registers live on AVX2),
// then single vectors, then scalar columns.
template <class T>
void DeltaUpdateReadoutOf(float* HWY_RESTRICT out, T* HWY_RESTRICT S, const float* HWY_RESTRICT k,
                          const float* HWY_RESTRICT v, const float* HWY_RESTRICT q, float beta, int64_t M, int64_t E,
                          const float* HWY_RESTRICT decay) {
  const int64_t L = int64_t(hn::Lanes(D()));
  int64_t e = 0;
  for (; e + kDeltaVecs * L <= E; e += kDeltaVecs * L) DeltaPanel<kDeltaVecs>(out, S, k, v, q, beta, M, E, decay, e);
  if constexpr (kDeltaVecs > 1)
    for (; e + L <= E; e += L) DeltaPanel<1>(out, S, k, v, q, beta, M, E, decay, e);
  for (; e < E; ++e) {
    float pk = 0;
    for (int64_t m = 0; m < M; ++m) pk = std::fma(decay ? decay[m] * k[m] : k[m], Widen(S[m * E + e]), pk);
    const float u = beta * (v[e] - pk);
    float acc = 0;
    for (int64_t m = 0; m < M; ++m) {
      const float previous = decay ? decay[m] * Widen(S[m * E + e]) : Widen(S[m * E + e]);
      const float row = std::fma(k[m], u, previous);
      Round(row, S + m * E + e);
      acc = std::fma(q[m], row, acc);
    }
    out[e] = acc;
  }
}
void DeltaUpdateReadout(float* out, float* S, const float* k, const float* v, const float* q, float beta, int64_t M,
                        int64_t E, const float* decay) {
  DeltaUpdateReadoutOf(out, S, k, v, q, beta, M, E, decay);
}
void DeltaUpdateReadoutBf16(float* out, bf16* S, const float* k, const float* v, const float* q, float beta, int64_t M,
                            int64_t E, const float* decay) {
  DeltaUpdateReadoutOf(out, S, k, v, q, beta, M, E, decay);
}

// dst = srcᵀ in 4 × 4 blocks of 128-bit vectors (two rounds of interleaves), the ragged edges scalar.
void ScaleRowsN(float* HWY_RESTRICT dst, int64_t ldd, const float* HWY_RESTRICT src, int64_t lds,
                const float* HWY_RESTRICT scale, int64_t rows, int64_t cols) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  for (int64_t r = 0; r < rows; ++r) {
    const V f = hn::Set(d, scale[r]);
    const float* in = src + r * lds;
    float* out = dst + r * ldd;
    int64_t c = 0;
    for (; c + L <= cols; c += L) hn::StoreU(hn::Mul(f, hn::LoadU(d, in + c)), d, out + c);
    for (; c < cols; ++c) out[c] = scale[r] * in[c];
  }
}

void Transpose(float* HWY_RESTRICT dst, int64_t ldd, const float* HWY_RESTRICT src, int64_t lds, int64_t rows,
               int64_t cols) {
#if HWY_TARGET == HWY_SCALAR
  const int64_t r4 = 0, c4 = 0;  // no 128-bit vectors: all of it takes the scalar path
#else
  const hn::FixedTag<float, 4> d4;
  const int64_t r4 = rows / 4 * 4, c4 = cols / 4 * 4;
  for (int64_t r = 0; r < r4; r += 4)
    for (int64_t c = 0; c < c4; c += 4) {
      const float* s = src + r * lds + c;
      const auto a = hn::LoadU(d4, s), b = hn::LoadU(d4, s + lds), e = hn::LoadU(d4, s + 2 * lds),
                 f = hn::LoadU(d4, s + 3 * lds);
      const auto ab_lo = hn::InterleaveLower(d4, a, b), ef_lo = hn::InterleaveLower(d4, e, f);
      const auto ab_hi = hn::InterleaveUpper(d4, a, b), ef_hi = hn::InterleaveUpper(d4, e, f);
      float* t = dst + c * ldd + r;
      hn::StoreU(hn::ConcatLowerLower(d4, ef_lo, ab_lo), d4, t);
      hn::StoreU(hn::ConcatUpperUpper(d4, ef_lo, ab_lo), d4, t + ldd);
      hn::StoreU(hn::ConcatLowerLower(d4, ef_hi, ab_hi), d4, t + 2 * ldd);
      hn::StoreU(hn::ConcatUpperUpper(d4, ef_hi, ab_hi), d4, t + 3 * ldd);
    }
#endif
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = r < r4 ? c4 : 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
}

// Scalar spec: exp(min(x − offset, cap)) · scale, NaN passed through (hn::Exp flushes it to 0).
HWY_INLINE V ExpShifted(D d, V x, V offset, V cap, V scale) {
  const V y = hn::Mul(hn::Exp(d, hn::Min(hn::Sub(x, offset), cap)), scale);
  return hn::IfThenElse(hn::IsNaN(x), x, y);
}

// The tail goes through a padded buffer so that it gets the same vector arithmetic as the body.
void ExpShiftedN(float* HWY_RESTRICT y, const float* HWY_RESTRICT x, int64_t n, float offset, float cap, float scale) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  const V o = hn::Set(d, offset), c = hn::Set(d, cap), s = hn::Set(d, scale);
  int64_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(ExpShifted(d, hn::LoadU(d, x + i), o, c, s), d, y + i);
  if (i == n) return;
  HWY_ALIGN float xt[HWY_LANES(float)] = {}, yt[HWY_LANES(float)];
  std::memcpy(xt, x + i, size_t(n - i) * sizeof(float));
  hn::Store(ExpShifted(d, hn::Load(d, xt), o, c, s), d, yt);
  std::memcpy(y + i, yt, size_t(n - i) * sizeof(float));
}

float RowMaxN(const float* HWY_RESTRICT x, int64_t n) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  float best = x[0];
  int64_t i = 0;
  if (n >= L) {
    V m = hn::LoadU(d, x);
    for (i = L; i + L <= n; i += L) m = hn::Max(m, hn::LoadU(d, x + i));
    best = hn::GetLane(hn::MaxOfLanes(d, m));
  }
  for (; i < n; ++i) best = std::max(best, x[i]);
  return best;
}

}  // namespace HWY_NAMESPACE
}  // namespace linattn::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace linattn::kernels {

HWY_EXPORT(RowDots);
HWY_EXPORT(AddWeightedRows);
HWY_EXPORT(NormaliserBackwardRow);
HWY_EXPORT(ScaleRowsN);
HWY_EXPORT(Transpose);
HWY_EXPORT(ExpShiftedN);
HWY_EXPORT(RowMaxN);
HWY_EXPORT(RankOneUpdateReadout);
HWY_EXPORT(RankOneUpdateReadoutBf16);
HWY_EXPORT(DeltaUpdateReadout);
HWY_EXPORT(DeltaUpdateReadoutBf16);

void row_dots(float* out, const float* a, int64_t lda, const float* x, int64_t rows, int64_t cols) {
  HWY_DYNAMIC_DISPATCH(RowDots)(out, a, lda, x, rows, cols);
}
void add_weighted_rows(float* y, const float* a, int64_t lda, const float* w, int64_t rows, int64_t cols) {
  HWY_DYNAMIC_DISPATCH(AddWeightedRows)(y, a, lda, w, rows, cols);
}
float normaliser_backward_row(float* P, const float* phi, const float* z, float den, int64_t cols) {
  return HWY_DYNAMIC_DISPATCH(NormaliserBackwardRow)(P, phi, z, den, cols);
}
void scale_rows(float* dst, int64_t ldd, const float* src, int64_t lds, const float* scale, int64_t rows,
                int64_t cols) {
  HWY_DYNAMIC_DISPATCH(ScaleRowsN)(dst, ldd, src, lds, scale, rows, cols);
}
void transpose(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols) {
  HWY_DYNAMIC_DISPATCH(Transpose)(dst, ldd, src, lds, rows, cols);
}
void exp_shifted(float* y, const float* x, int64_t n, float offset, float cap, float scale) {
  HWY_DYNAMIC_DISPATCH(ExpShiftedN)(y, x, n, offset, cap, scale);
}
float row_max(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(RowMaxN)(x, n); }
void rank1_update_readout(float* num, float* S, const float* phi_k, const float* v, const float* phi_q, int64_t M,
                          int64_t E, const float* decay) {
  HWY_DYNAMIC_DISPATCH(RankOneUpdateReadout)(num, S, phi_k, v, phi_q, M, E, decay);
}
void rank1_update_readout(float* num, bf16* S, const float* phi_k, const float* v, const float* phi_q, int64_t M,
                          int64_t E, const float* decay) {
  HWY_DYNAMIC_DISPATCH(RankOneUpdateReadoutBf16)(num, S, phi_k, v, phi_q, M, E, decay);
}
void delta_update_readout(float* out, float* S, const float* k, const float* v, const float* q, float beta, int64_t M,
                          int64_t E, const float* decay) {
  HWY_DYNAMIC_DISPATCH(DeltaUpdateReadout)(out, S, k, v, q, beta, M, E, decay);
}
void delta_update_readout(float* out, bf16* S, const float* k, const float* v, const float* q, float beta, int64_t M,
                          int64_t E, const float* decay) {
  HWY_DYNAMIC_DISPATCH(DeltaUpdateReadoutBf16)(out, S, k, v, q, beta, M, E, decay);
}

}  // namespace linattn::kernels
#endif  // HWY_ONCE
