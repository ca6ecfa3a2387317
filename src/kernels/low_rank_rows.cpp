// The DPLR token (see low_rank_rows.hpp), one Highway source for every target.
#include <cmath>
#include <type_traits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/low_rank_rows.cpp"
// clang-format off
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on
#include "kernels/low_rank_rows.hpp"

HWY_BEFORE_NAMESPACE();
namespace linattn::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// A panel's vector columns are named variables, not an array (SVE's sizeless vectors cannot be array
// elements): Pick<J> names column J of four, Unroll<NV> calls f(J) for J < NV (NV 1 or 4).
template <int J>
HWY_INLINE V& Pick(V& x0, V& x1, V& x2, V& x3) {
  if constexpr (J == 0) return x0;
  if constexpr (J == 1) return x1;
  if constexpr (J == 2) return x2;
  if constexpr (J == 3) return x3;
}
template <int NV, class F>
HWY_INLINE void Unroll(const F& f) {
  static_assert(NV == 1 || NV == 4, "a panel is one or four vector columns");
  f(std::integral_constant<int, 0>());
  if constexpr (NV == 4)
    f(std::integral_constant<int, 1>()), f(std::integral_constant<int, 2>()), f(std::integral_constant<int, 3>());
}

// Columns [e, e + NV·L) of the token. Sweep 1: s = Sᵀa as two chains, even rows and odd rows, added at the
// end (one chain a column waited on the FMA's latency for most of the sweep). Sweep 2: each row updated,
// stored and read out in turn while the panel is in L1 (four readout chains a panel on the wide targets).
template <int NV, bool kReadout>
HWY_INLINE void Panel(float* HWY_RESTRICT out, float* HWY_RESTRICT S, const float* HWY_RESTRICT a,
                      const float* HWY_RESTRICT b, const float* HWY_RESTRICT k, const float* HWY_RESTRICT v,
                      const float* HWY_RESTRICT q, const float* HWY_RESTRICT w, int64_t M, int64_t E, int64_t e) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  V s0 = hn::Zero(d), s1 = s0, s2 = s0, s3 = s0, t0 = s0, t1 = s0, t2 = s0, t3 = s0;
  const auto project = [&](const V am, const float* row, V& x0, V& x1, V& x2, V& x3) {
    Unroll<NV>([&](auto j) {
      V& x = Pick<decltype(j)::value>(x0, x1, x2, x3);
      x = hn::MulAdd(am, hn::LoadU(d, row + j * L), x);
    });
  };
  int64_t m = 0;
  for (; m + 2 <= M; m += 2) {
    project(hn::Set(d, a[m]), S + m * E + e, s0, s1, s2, s3);
    project(hn::Set(d, a[m + 1]), S + (m + 1) * E + e, t0, t1, t2, t3);
  }
  if (m < M) project(hn::Set(d, a[m]), S + m * E + e, s0, s1, s2, s3);
  V u0 = hn::Zero(d), u1 = u0, u2 = u0, u3 = u0, o0 = u0, o1 = u0, o2 = u0, o3 = u0;  // u: v's columns
  Unroll<NV>([&](auto j) {
    V& s = Pick<decltype(j)::value>(s0, s1, s2, s3);
    s = hn::Add(s, Pick<decltype(j)::value>(t0, t1, t2, t3));
    Pick<decltype(j)::value>(u0, u1, u2, u3) = hn::LoadU(d, v + e + j * L);
  });
  for (m = 0; m < M; ++m) {
    const V wm = hn::Set(d, w[m]), bm = hn::Set(d, b[m]), km = hn::Set(d, k[m]);
    const V qm = kReadout ? hn::Set(d, q[m]) : wm;
    float* row = S + m * E + e;
    Unroll<NV>([&](auto j) {
      const V x =
          hn::MulAdd(km, Pick<decltype(j)::value>(u0, u1, u2, u3),
                     hn::MulAdd(bm, Pick<decltype(j)::value>(s0, s1, s2, s3), hn::Mul(wm, hn::LoadU(d, row + j * L))));
      hn::StoreU(x, d, row + j * L);
      if constexpr (kReadout) {
        V& o = Pick<decltype(j)::value>(o0, o1, o2, o3);
        o = hn::MulAdd(qm, x, o);
      }
    });
  }
  if constexpr (kReadout)
    Unroll<NV>([&](auto j) { hn::StoreU(Pick<decltype(j)::value>(o0, o1, o2, o3), d, out + e + j * L); });
}

// Panels of four vector columns, then single vectors, then the scalar columns (one chain each). The
// update's arithmetic is the same with or without the read-out, so states agree bit for bit either way.
template <bool kReadout>
void Columns(float* HWY_RESTRICT out, float* HWY_RESTRICT S, const float* HWY_RESTRICT a, const float* HWY_RESTRICT b,
             const float* HWY_RESTRICT k, const float* HWY_RESTRICT v, const float* HWY_RESTRICT q,
             const float* HWY_RESTRICT w, int64_t M, int64_t E) {
  const int64_t L = int64_t(hn::Lanes(D()));
  int64_t e = 0;
  for (; e + 4 * L <= E; e += 4 * L) Panel<4, kReadout>(out, S, a, b, k, v, q, w, M, E, e);
  for (; e + L <= E; e += L) Panel<1, kReadout>(out, S, a, b, k, v, q, w, M, E, e);
  for (; e < E; ++e) {
    float s = 0, o = 0;
    for (int64_t m = 0; m < M; ++m) s = std::fma(a[m], S[m * E + e], s);
    for (int64_t m = 0; m < M; ++m) {
      float& x = S[m * E + e];
      x = std::fma(k[m], v[e], std::fma(b[m], s, w[m] * x));
      if constexpr (kReadout) o = std::fma(q[m], x, o);
    }
    if constexpr (kReadout) out[e] = o;
  }
}
void Rank2UpdateReadout(float* out, float* S, const float* a, const float* b, const float* k, const float* v,
                        const float* q, const float* w, int64_t M, int64_t E) {
  if (out)
    Columns<true>(out, S, a, b, k, v, q, w, M, E);
  else
    Columns<false>(out, S, a, b, k, v, q, w, M, E);
}

}  // namespace HWY_NAMESPACE
}  // namespace linattn::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace linattn::kernels {

HWY_EXPORT(Rank2UpdateReadout);

void rank2_update_readout(float* out, float* S, const float* a, const float* b, const float* k, const float* v,
                          const float* q, const float* w, int64_t M, int64_t E) {
  HWY_DYNAMIC_DISPATCH(Rank2UpdateReadout)(out, S, a, b, k, v, q, w, M, E);
}

}  // namespace linattn::kernels
#endif  // HWY_ONCE
