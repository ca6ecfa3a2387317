// Row-wise helpers (see rows.hpp), one Highway source for every target.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

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

// Scalar spec: for r in order, z[:cols] += b[r, :cols], then out[r] = a[r, :cols] · z (as RowDots).
void RunningDots(float* HWY_RESTRICT out, const float* HWY_RESTRICT a, int64_t lda, const float* HWY_RESTRICT b,
                 int64_t ldb, float* HWY_RESTRICT z, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    AddWeightedRows(z, b + r * ldb, ldb, nullptr, 1, cols);
    out[r] = Dot(a + r * lda, z, cols);
  }
}

// The recurrent tokens below run on S of element type T: float, or bf16 (each row widened as loaded,
// the updated row rounded as stored, the readout from the unrounded row). Both sweep S in panels of
// vector columns while the panel is in L1; each column's chains (m ascending) are the same in any panel
// width, so the results do not depend on it.
#if HWY_HAVE_SCALABLE
// SVE's sizeless vectors cannot be array elements: one vector column at a time.
constexpr int kPanelVecs = 1;

// pk: [L] = Pᵀk over columns [e, e + L), P = diag(decay) S (decay null: P = S).
template <int NV, class T>
HWY_INLINE void ProjectPanel(float* HWY_RESTRICT pk, const T* HWY_RESTRICT S, const float* HWY_RESTRICT k, int64_t M,
                             int64_t E, const float* HWY_RESTRICT decay, int64_t e) {
  static_assert(NV == 1, "SVE takes one vector column at a time (kPanelVecs)");
  const D d;
  V acc = hn::Zero(d);
  for (int64_t m = 0; m < M; ++m)
    acc = hn::MulAdd(hn::Set(d, decay ? decay[m] * k[m] : k[m]), LoadWide(d, S + m * E + e), acc);
  hn::StoreU(acc, d, pk);
}

// Columns [e, e + L): S ← P + k uᵀ with u: [L] (this panel's columns), P from `from` (S itself, or the
// state before the token elsewhere), then out[e, e + L) = Sᵀq.
template <int NV, class T>
HWY_INLINE void UpdatePanel(float* HWY_RESTRICT out, const T* from, T* S, const float* HWY_RESTRICT k,
                            const float* HWY_RESTRICT u, const float* HWY_RESTRICT q, int64_t M, int64_t E,
                            const float* HWY_RESTRICT decay, int64_t e) {
  static_assert(NV == 1, "SVE takes one vector column at a time (kPanelVecs)");
  const D d;
  const V ue = hn::LoadU(d, u);
  V acc = hn::Zero(d);
  for (int64_t m = 0; m < M; ++m) {
    T* s = S + m * E + e;
    const T* f = from + m * E + e;
    const V previous = decay ? hn::Mul(hn::Set(d, decay[m]), LoadWide(d, f)) : LoadWide(d, f);
    const V row = hn::MulAdd(hn::Set(d, k[m]), ue, previous);
    StoreRounded(d, row, s), acc = hn::MulAdd(hn::Set(d, q[m]), row, acc);
  }
  hn::StoreU(acc, d, out + e);
}
#else
// Four vector columns per row amortise each row's broadcasts of decay, k and q over the panel and give
// four independent readout chains (8 + 4 registers live on AVX2).
constexpr int kPanelVecs = 4;

// A bf16 panel of NP pairs of vectors (2·NP·L columns), each row's pair p split into its even and odd
// columns (LoadBf16Pair): u is split and the results joined once per panel instead of each row being widened
// and narrowed with shuffles. Column c = e + 2pL + j is lane j/2 of pair p's even (j even) or odd vector.
template <int NP>
HWY_INLINE void SplitPairs(const float* HWY_RESTRICT x, hn::Vec<D>* even, hn::Vec<D>* odd) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  HWY_ALIGN float lanes[2 * HWY_MAX_BYTES / sizeof(float)];
  for (int p = 0; p < NP; ++p) {
    for (int64_t i = 0; i < L; ++i) lanes[i] = x[2 * p * L + 2 * i], lanes[L + i] = x[2 * p * L + 2 * i + 1];
    even[p] = hn::Load(d, lanes), odd[p] = hn::Load(d, lanes + L);
  }
}
template <int NP>
HWY_INLINE void JoinPairs(const hn::Vec<D>* even, const hn::Vec<D>* odd, float* HWY_RESTRICT x) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  HWY_ALIGN float lanes[2 * HWY_MAX_BYTES / sizeof(float)];
  for (int p = 0; p < NP; ++p) {
    hn::Store(even[p], d, lanes), hn::Store(odd[p], d, lanes + L);
    for (int64_t i = 0; i < L; ++i) x[2 * p * L + 2 * i] = lanes[i], x[2 * p * L + 2 * i + 1] = lanes[L + i];
  }
}
template <int NP>
HWY_INLINE void ProjectPairs(float* HWY_RESTRICT pk, const bf16* HWY_RESTRICT S, const float* HWY_RESTRICT k, int64_t M,
                             int64_t E, const float* HWY_RESTRICT decay, int64_t e) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  V ae[NP], ao[NP];
  for (int p = 0; p < NP; ++p) ae[p] = hn::Zero(d), ao[p] = hn::Zero(d);
  for (int64_t m = 0; m < M; ++m) {
    const V km = hn::Set(d, decay ? decay[m] * k[m] : k[m]);
    for (int p = 0; p < NP; ++p) {
      V even, odd;
      LoadBf16Pair(d, S + m * E + e + 2 * p * L, even, odd);
      ae[p] = hn::MulAdd(km, even, ae[p]), ao[p] = hn::MulAdd(km, odd, ao[p]);
    }
  }
  JoinPairs<NP>(ae, ao, pk);
}
template <int NP>
HWY_INLINE void UpdatePairs(float* HWY_RESTRICT out, const bf16* from, bf16* S, const float* HWY_RESTRICT k,
                            const float* HWY_RESTRICT u, const float* HWY_RESTRICT q, int64_t M, int64_t E,
                            const float* HWY_RESTRICT decay, int64_t e) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  V ue[NP], uo[NP], ae[NP], ao[NP];
  SplitPairs<NP>(u, ue, uo);
  for (int p = 0; p < NP; ++p) ae[p] = hn::Zero(d), ao[p] = hn::Zero(d);
  for (int64_t m = 0; m < M; ++m) {
    const V km = hn::Set(d, k[m]), qm = hn::Set(d, q[m]);
    for (int p = 0; p < NP; ++p) {
      bf16* s = S + m * E + e + 2 * p * L;
      V even, odd;
      LoadBf16Pair(d, from + m * E + e + 2 * p * L, even, odd);
      if (decay) {
        const V am = hn::Set(d, decay[m]);
        even = hn::Mul(am, even), odd = hn::Mul(am, odd);
      }
      even = hn::MulAdd(km, ue[p], even), odd = hn::MulAdd(km, uo[p], odd);
      StoreBf16Pair(d, even, odd, s);
      ae[p] = hn::MulAdd(qm, even, ae[p]), ao[p] = hn::MulAdd(qm, odd, ao[p]);
    }
  }
  JoinPairs<NP>(ae, ao, out + e);
}
template <class T, int NV>
inline constexpr bool kPairedPanel = std::is_same_v<T, bf16>&& kBf16Pairs&& NV % 2 == 0;

// pk: [NV·L] = Pᵀk over columns [e, e + NV·L), P = diag(decay) S (decay null: P = S).
template <int NV, class T>
HWY_INLINE void ProjectPanel(float* HWY_RESTRICT pk, const T* HWY_RESTRICT S, const float* HWY_RESTRICT k, int64_t M,
                             int64_t E, const float* HWY_RESTRICT decay, int64_t e) {
  if constexpr (kPairedPanel<T, NV>) return ProjectPairs<NV / 2>(pk, S, k, M, E, decay, e);
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  V acc[NV];
  for (int j = 0; j < NV; ++j) acc[j] = hn::Zero(d);
  for (int64_t m = 0; m < M; ++m) {
    const V km = hn::Set(d, decay ? decay[m] * k[m] : k[m]);
    for (int j = 0; j < NV; ++j) acc[j] = hn::MulAdd(km, LoadWide(d, S + m * E + e + j * L), acc[j]);
  }
  for (int j = 0; j < NV; ++j) hn::StoreU(acc[j], d, pk + j * L);
}

// Columns [e, e + NV·L): S ← P + k uᵀ with u: [NV·L] (this panel's columns), P from `from` (S itself, or
// the state before the token elsewhere: each element is read before its own store and never after, so the
// two may be one), then out[e, …) = Sᵀq.
template <int NV, class T>
HWY_INLINE void UpdatePanel(float* HWY_RESTRICT out, const T* from, T* S, const float* HWY_RESTRICT k,
                            const float* HWY_RESTRICT u, const float* HWY_RESTRICT q, int64_t M, int64_t E,
                            const float* HWY_RESTRICT decay, int64_t e) {
  if constexpr (kPairedPanel<T, NV>) return UpdatePairs<NV / 2>(out, from, S, k, u, q, M, E, decay, e);
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  V acc[NV], ue[NV];
  for (int j = 0; j < NV; ++j) acc[j] = hn::Zero(d), ue[j] = hn::LoadU(d, u + j * L);
  for (int64_t m = 0; m < M; ++m) {
    const V km = hn::Set(d, k[m]), qm = hn::Set(d, q[m]);
    T* s = S + m * E + e;
    const T* f = from + m * E + e;
    if (decay) {
      const V am = hn::Set(d, decay[m]);
      for (int j = 0; j < NV; ++j) {
        const V row = hn::MulAdd(km, ue[j], hn::Mul(am, LoadWide(d, f + j * L)));
        StoreRounded(d, row, s + j * L), acc[j] = hn::MulAdd(qm, row, acc[j]);
      }
    } else {
      for (int j = 0; j < NV; ++j) {
        const V row = hn::MulAdd(km, ue[j], LoadWide(d, f + j * L));
        StoreRounded(d, row, s + j * L), acc[j] = hn::MulAdd(qm, row, acc[j]);
      }
    }
  }
  for (int j = 0; j < NV; ++j) hn::StoreU(acc[j], d, out + e + j * L);
}
#endif  // HWY_HAVE_SCALABLE

// Columns [e, e + NV·L) of one delta-rule token: one sweep for Pᵀk, then u = β (v − Pᵀk) and the
// update's sweep.
template <int NV, class T>
HWY_INLINE void DeltaPanel(float* HWY_RESTRICT out, const T* from, T* S, const float* HWY_RESTRICT k,
                           const float* HWY_RESTRICT v, const float* HWY_RESTRICT q, float beta, int64_t M, int64_t E,
                           const float* HWY_RESTRICT decay, int64_t e) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  HWY_ALIGN float u[NV * HWY_MAX_BYTES / sizeof(float)];
  ProjectPanel<NV>(u, from, k, M, E, decay, e);
  for (int j = 0; j < NV; ++j)
    hn::Store(hn::Mul(hn::Set(d, beta), hn::Sub(hn::LoadU(d, v + e + j * L), hn::Load(d, u + j * L))), d, u + j * L);
  UpdatePanel<NV>(out, from, S, k, u, q, M, E, decay, e);
}

// Panels of kPanelVecs vector columns, then single vectors, then Column(e) for the scalar columns.
template <class Panel, class Column>
HWY_INLINE void ForColumns(int64_t E, const Panel& panel, const Column& column) {
  const int64_t L = int64_t(hn::Lanes(D()));
  int64_t e = 0;
  for (; e + kPanelVecs * L <= E; e += kPanelVecs * L) panel(std::integral_constant<int, kPanelVecs>(), e);
  if constexpr (kPanelVecs > 1)
    for (; e + L <= E; e += L) panel(std::integral_constant<int, 1>(), e);
  for (; e < E; ++e) column(e);
}

// One recurrent token for one head (see rows.hpp): from null reads S.
template <class T>
void RankOneUpdateReadoutOf(float* HWY_RESTRICT num, T* S, const float* HWY_RESTRICT phi_k, const float* HWY_RESTRICT v,
                            const float* HWY_RESTRICT phi_q, int64_t M, int64_t E, const float* HWY_RESTRICT decay,
                            const T* from) {
  if (!from) from = S;
  ForColumns(
      E,
      [&](auto nv, int64_t e) { UpdatePanel<decltype(nv)::value>(num, from, S, phi_k, v + e, phi_q, M, E, decay, e); },
      [&](int64_t e) {
        float acc = 0;
        for (int64_t m = 0; m < M; ++m) {
          const float previous = decay ? decay[m] * Widen(from[m * E + e]) : Widen(from[m * E + e]);
          const float row = std::fma(phi_k[m], v[e], previous);
          Round(row, S + m * E + e);
          acc = std::fma(phi_q[m], row, acc);
        }
        num[e] = acc;
      });
}
void RankOneUpdateReadout(float* num, float* S, const float* phi_k, const float* v, const float* phi_q, int64_t M,
                          int64_t E, const float* decay, const float* from) {
  RankOneUpdateReadoutOf(num, S, phi_k, v, phi_q, M, E, decay, from);
}
void RankOneUpdateReadoutBf16(float* num, bf16* S, const float* phi_k, const float* v, const float* phi_q, int64_t M,
                              int64_t E, const float* decay, const bf16* from) {
  RankOneUpdateReadoutOf(num, S, phi_k, v, phi_q, M, E, decay, from);
}

// One delta-rule token for one head (see rows.hpp): from null reads S.
template <class T>
void DeltaUpdateReadoutOf(float* HWY_RESTRICT out, T* S, const float* HWY_RESTRICT k, const float* HWY_RESTRICT v,
                          const float* HWY_RESTRICT q, float beta, int64_t M, int64_t E,
                          const float* HWY_RESTRICT decay, const T* from) {
  if (!from) from = S;
  ForColumns(
      E, [&](auto nv, int64_t e) { DeltaPanel<decltype(nv)::value>(out, from, S, k, v, q, beta, M, E, decay, e); },
      [&](int64_t e) {
        float pk = 0;
        for (int64_t m = 0; m < M; ++m) pk = std::fma(decay ? decay[m] * k[m] : k[m], Widen(from[m * E + e]), pk);
        const float u = beta * (v[e] - pk);
        float acc = 0;
        for (int64_t m = 0; m < M; ++m) {
          const float previous = decay ? decay[m] * Widen(from[m * E + e]) : Widen(from[m * E + e]);
          const float row = std::fma(k[m], u, previous);
          Round(row, S + m * E + e);
          acc = std::fma(q[m], row, acc);
        }
        out[e] = acc;
      });
}
void DeltaUpdateReadout(float* out, float* S, const float* k, const float* v, const float* q, float beta, int64_t M,
                        int64_t E, const float* decay, const float* from) {
  DeltaUpdateReadoutOf(out, S, k, v, q, beta, M, E, decay, from);
}
void DeltaUpdateReadoutBf16(float* out, bf16* S, const float* k, const float* v, const float* q, float beta, int64_t M,
                            int64_t E, const float* decay, const bf16* from) {
  DeltaUpdateReadoutOf(out, S, k, v, q, beta, M, E, decay, from);
}

// Each row times its factor; dst may be src (every element is read before its own store, none after).
void ScaleRowsN(float* dst, int64_t ldd, const float* src, int64_t lds, const float* HWY_RESTRICT scale, int64_t rows,
                int64_t cols) {
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

// dst = srcᵀ in 4 × 4 blocks of 128-bit vectors (two rounds of interleaves), the ragged edges scalar.
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
HWY_EXPORT(RunningDots);
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
void running_dots(float* out, const float* a, int64_t lda, const float* b, int64_t ldb, float* z, int64_t rows,
                  int64_t cols) {
  HWY_DYNAMIC_DISPATCH(RunningDots)(out, a, lda, b, ldb, z, rows, cols);
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
                          int64_t E, const float* decay, const float* from) {
  HWY_DYNAMIC_DISPATCH(RankOneUpdateReadout)(num, S, phi_k, v, phi_q, M, E, decay, from);
}
void rank1_update_readout(float* num, bf16* S, const float* phi_k, const float* v, const float* phi_q, int64_t M,
                          int64_t E, const float* decay, const bf16* from) {
  HWY_DYNAMIC_DISPATCH(RankOneUpdateReadoutBf16)(num, S, phi_k, v, phi_q, M, E, decay, from);
}
void delta_update_readout(float* out, float* S, const float* k, const float* v, const float* q, float beta, int64_t M,
                          int64_t E, const float* decay, const float* from) {
  HWY_DYNAMIC_DISPATCH(DeltaUpdateReadout)(out, S, k, v, q, beta, M, E, decay, from);
}
void delta_update_readout(float* out, bf16* S, const float* k, const float* v, const float* q, float beta, int64_t M,
                          int64_t E, const float* decay, const bf16* from) {
  HWY_DYNAMIC_DISPATCH(DeltaUpdateReadoutBf16)(out, S, k, v, q, beta, M, E, decay, from);
}

}  // namespace linattn::kernels
#endif  // HWY_ONCE
