// The decay factors (see decay_factors.hpp), one Highway source for every target.
#include <algorithm>
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
  const V x = hn::Mul(sign, diff);
  return hn::IfThenElse(hn::IsNaN(x), x, hn::Exp(d, x));  // hn::Exp flushes NaN to 0: it must reach what depends on it
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

// A log decay floored at kLogDecayFloor (NaN stays NaN: it must reach what depends on it).
HWY_INLINE V Floored(D d, V x) {
  const V floor = hn::Set(d, kLogDecayFloor);
  return hn::IfThenElse(hn::Lt(x, floor), floor, x);
}
HWY_INLINE float Floored(float x) { return x < kLogDecayFloor ? kLogDecayFloor : x; }

// One row of running sums against the span: whether any column's range, with row + prev in it (and 0
// when from_zero), would span more than max_span. The row itself is not written.
HWY_INLINE bool SpanExceeded(D d, const float* HWY_RESTRICT row, const float* HWY_RESTRICT prev,
                             const float* HWY_RESTRICT lo, const float* HWY_RESTRICT hi, int64_t cols, float max_span,
                             bool from_zero) {
  const int64_t L = int64_t(hn::Lanes(d));
  const V zero = hn::Zero(d), span = hn::Set(d, max_span);
  auto over = hn::Lt(span, span);  // all false
  int64_t i = 0;
  for (; i + L <= cols; i += L) {
    const V r = hn::Add(Floored(d, hn::LoadU(d, row + i)), hn::LoadU(d, prev + i));
    V h = hn::Max(hn::LoadU(d, hi + i), r), l = hn::Min(hn::LoadU(d, lo + i), r);
    if (from_zero) h = hn::Max(h, zero), l = hn::Min(l, zero);
    over = hn::Or(over, hn::Gt(hn::Sub(h, l), span));
  }
  bool exceeds = !hn::AllFalse(d, over);
  for (; i < cols; ++i) {
    const float r = Floored(row[i]) + prev[i];
    float h = std::max(hi[i], r), l = std::min(lo[i], r);
    if (from_zero) h = std::max(h, 0.0f), l = std::min(l, 0.0f);
    exceeds |= h - l > max_span;
  }
  return exceeds;
}

// Floors row 0 in place; whether a column of it alone is below −max_span (a reset, or near one): such a
// token ends its chunk, so that the sums after it never sit far from 0, where fp32 would round the next
// tokens' decays away.
HWY_INLINE bool FirstRowFloored(D d, float* HWY_RESTRICT row, int64_t cols, float max_span) {
  const int64_t L = int64_t(hn::Lanes(d));
  const V low = hn::Set(d, -max_span);
  auto below = hn::Lt(low, low);  // all false
  int64_t i = 0;
  for (; i + L <= cols; i += L) {
    const V r = Floored(d, hn::LoadU(d, row + i));
    hn::StoreU(r, d, row + i), below = hn::Or(below, hn::Lt(r, low));
  }
  bool any = !hn::AllFalse(d, below);
  for (; i < cols; ++i) row[i] = Floored(row[i]), any |= row[i] < -max_span;
  return any;
}

int64_t RunningLogDecaysN(const ChunkDecays& c, int64_t rows, float max_span, bool from_zero, bool stop_early) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d)), cols = c.cols;
  const bool alone = FirstRowFloored(d, c.b, cols, max_span) && stop_early;
  std::copy_n(c.b, cols, c.lo), std::copy_n(c.b, cols, c.hi);
  int64_t t = 1;
  for (; t < rows && !alone; ++t) {
    float* row = c.b + t * c.ld;
    const float* prev = row - c.ld;
    if (stop_early && SpanExceeded(d, row, prev, c.lo, c.hi, cols, max_span, from_zero)) break;
    int64_t i = 0;
    for (; i + L <= cols; i += L) {
      const V r = hn::Add(Floored(d, hn::LoadU(d, row + i)), hn::LoadU(d, prev + i));
      hn::StoreU(r, d, row + i);
      // The range leaves a NaN out (a NaN midpoint would reach the chunk's earlier rows).
      const V lo = hn::LoadU(d, c.lo + i), hi = hn::LoadU(d, c.hi + i);
      hn::StoreU(hn::IfThenElse(hn::Lt(r, lo), r, lo), d, c.lo + i);
      hn::StoreU(hn::IfThenElse(hn::Gt(r, hi), r, hi), d, c.hi + i);
    }
    for (; i < cols; ++i) {
      row[i] = Floored(row[i]) + prev[i];
      c.lo[i] = std::min(c.lo[i], row[i]), c.hi[i] = std::max(c.hi[i], row[i]);  // NaN left out, as above
    }
  }
  const float* last = c.b + (t - 1) * c.ld;
  const V half = hn::Set(d, 0.5f);
  int64_t i = 0;
  for (; i + L <= cols; i += L) {
    const V mid = hn::Mul(half, hn::Add(hn::LoadU(d, c.lo + i), hn::LoadU(d, c.hi + i))), bn = hn::LoadU(d, last + i);
    hn::StoreU(mid, d, c.mid + i), hn::StoreU(bn, d, c.last + i);
    hn::StoreU(hn::Exp(d, mid), d, c.e_mid + i), hn::StoreU(hn::Exp(d, hn::Sub(bn, mid)), d, c.e_last_mid + i);
  }
  for (; i < cols; ++i) {
    c.mid[i] = 0.5f * (c.lo[i] + c.hi[i]), c.last[i] = last[i];
    c.e_mid[i] = std::exp(c.mid[i]), c.e_last_mid[i] = std::exp(last[i] - c.mid[i]);
  }
  return t;
}

// kFactors: the factors for the backward (El, Er; Eb, Ed too with kDelta); kDelta: the delta rule's
// left keys (Kl, Kt); kApplied: Qe and Kd (without them, only the scan's Ql and Kr).
template <bool kFactors, bool kDelta, bool kApplied = true>
void SplitFactorRowOf(const SplitFactorRow& o, const float* HWY_RESTRICT q, const float* HWY_RESTRICT k,
                      const float* HWY_RESTRICT b, const float* HWY_RESTRICT m, const float* HWY_RESTRICT em,
                      const float* HWY_RESTRICT enm, int64_t n) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  const V one = hn::Set(d, 1.0f);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const V e = Factor(d, b, m, one, i), inv = hn::Div(one, e);
    const V qv = hn::LoadU(d, q + i), kv = hn::LoadU(d, k + i);
    hn::StoreU(hn::Mul(qv, e), d, o.Ql + i), hn::StoreU(hn::Mul(kv, inv), d, o.Kr + i);
    if constexpr (!kApplied) continue;
    const V eb = hn::Mul(e, hn::LoadU(d, em + i)), ed = hn::Mul(inv, hn::LoadU(d, enm + i));
    hn::StoreU(hn::Mul(qv, eb), d, o.Qe + i), hn::StoreU(hn::Mul(kv, ed), d, o.Kd + i);
    if constexpr (kFactors) hn::StoreU(e, d, o.El + i), hn::StoreU(inv, d, o.Er + i);
    if constexpr (kFactors && kDelta) hn::StoreU(eb, d, o.Eb + i), hn::StoreU(ed, d, o.Ed + i);
    if constexpr (kDelta) hn::StoreU(hn::Mul(kv, e), d, o.Kl + i), hn::StoreU(hn::Mul(kv, eb), d, o.Kt + i);
  }
  for (; i < n; ++i) {
    const float e = std::exp(b[i] - m[i]), inv = 1.0f / e;
    o.Ql[i] = q[i] * e, o.Kr[i] = k[i] * inv;
    if constexpr (!kApplied) continue;
    const float eb = e * em[i], ed = inv * enm[i];
    o.Qe[i] = q[i] * eb, o.Kd[i] = k[i] * ed;
    if constexpr (kFactors) o.El[i] = e, o.Er[i] = inv;
    if constexpr (kFactors && kDelta) o.Eb[i] = eb, o.Ed[i] = ed;
    if constexpr (kDelta) o.Kl[i] = k[i] * e, o.Kt[i] = k[i] * eb;
  }
}

void SplitFactorRowN(const SplitFactorRow& o, const float* q, const float* k, const float* b, const float* m,
                     const float* em, const float* enm, int64_t n) {
  if (!o.Qe)
    SplitFactorRowOf<false, false, false>(o, q, k, b, m, em, enm, n);
  else if (o.El && o.Kl)
    SplitFactorRowOf<true, true>(o, q, k, b, m, em, enm, n);
  else if (o.El)
    SplitFactorRowOf<true, false>(o, q, k, b, m, em, enm, n);
  else if (o.Kl)
    SplitFactorRowOf<false, true>(o, q, k, b, m, em, enm, n);
  else
    SplitFactorRowOf<false, false>(o, q, k, b, m, em, enm, n);
}

using D64 = hn::ScalableTag<double>;
using V64 = hn::Vec<D64>;
using DHalf = hn::Rebind<float, D64>;  // the floats that widen into one V64

// q[i..]·gq[i..] − k[i..]·gk[i..] in fp64 (products of floats are exact in fp64).
HWY_INLINE V64 GateTerms(D64 d, const float* HWY_RESTRICT q, const float* HWY_RESTRICT gq, const float* HWY_RESTRICT k,
                         const float* HWY_RESTRICT gk, int64_t i) {
  const DHalf dh;
  const V64 qq = hn::Mul(hn::PromoteTo(d, hn::LoadU(dh, q + i)), hn::PromoteTo(d, hn::LoadU(dh, gq + i)));
  if (!k) return qq;
  return hn::NegMulAdd(hn::PromoteTo(d, hn::LoadU(dh, k + i)), hn::PromoteTo(d, hn::LoadU(dh, gk + i)), qq);
}

void AddGateRowN(double* HWY_RESTRICT out, const float* HWY_RESTRICT q, const float* HWY_RESTRICT gq,
                 const float* HWY_RESTRICT k, const float* HWY_RESTRICT gk, int64_t n, bool sum_columns) {
  const D64 d;
  const int64_t L = int64_t(hn::Lanes(d));
  const auto term = [&](int64_t i) { return double(q[i]) * gq[i] - (k ? double(k[i]) * gk[i] : 0.0); };
  int64_t i = 0;
  if (sum_columns) {
    V64 acc = hn::Zero(d);
    for (; i + L <= n; i += L) acc = hn::Add(acc, GateTerms(d, q, gq, k, gk, i));
    double sum = hn::GetLane(hn::SumOfLanes(d, acc));
    for (; i < n; ++i) sum += term(i);
    out[0] += sum;
    return;
  }
  for (; i + L <= n; i += L) hn::StoreU(hn::Add(hn::LoadU(d, out + i), GateTerms(d, q, gq, k, gk, i)), d, out + i);
  for (; i < n; ++i) out[i] += term(i);
}

void ReverseRunningSumsN(float* dst, int64_t row, int64_t col, const double* HWY_RESTRICT g, int64_t rows, int64_t cols,
                         double* HWY_RESTRICT sum) {
  const D64 d;
  const DHalf dh;
  const int64_t L = int64_t(hn::Lanes(d));
  for (int64_t t = rows - 1; t >= 0; --t) {
    const double* in = g + t * cols;
    float* out = dst + t * row;
    int64_t c = 0;
    if (col == 1)
      for (; c + L <= cols; c += L) {
        const V64 s = hn::Add(hn::LoadU(d, sum + c), hn::LoadU(d, in + c));
        hn::StoreU(s, d, sum + c), hn::StoreU(hn::DemoteTo(dh, s), dh, out + c);
      }
    for (; c < cols; ++c) sum[c] += in[c], out[c * col] = float(sum[c]);
  }
}

template <bool kGated>
void SplitFactorRowBackwardOf(float* HWY_RESTRICT dq, float* HWY_RESTRICT dk, const SplitSides& g,
                              const float* HWY_RESTRICT El, const float* HWY_RESTRICT Er, const float* HWY_RESTRICT Eb,
                              const float* HWY_RESTRICT Ed, const float* HWY_RESTRICT q, const float* HWY_RESTRICT k,
                              float diag, int64_t n) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  const V dv = hn::Set(d, diag), one = hn::Set(d, 1.0f);
  const auto at = [&](const float* x, int64_t i) { return kGated ? hn::LoadU(d, x + i) : one; };
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const V eb = at(Eb, i), el = at(El, i);
    V gq = hn::MulAdd(hn::LoadU(d, g.Qe + i), eb, hn::Mul(hn::LoadU(d, g.Ql + i), el));
    V gk = hn::MulAdd(hn::LoadU(d, g.Kt + i), eb, hn::Mul(hn::LoadU(d, g.Kl + i), el));
    gk = hn::MulAdd(hn::LoadU(d, g.Kr + i), at(Er, i), gk);
    gk = hn::MulAdd(hn::LoadU(d, g.Kd + i), at(Ed, i), gk);
    hn::StoreU(hn::MulAdd(dv, hn::LoadU(d, k + i), gq), d, dq + i);
    hn::StoreU(hn::MulAdd(dv, hn::LoadU(d, q + i), gk), d, dk + i);
  }
  for (; i < n; ++i) {
    const float eb = kGated ? Eb[i] : 1.0f, el = kGated ? El[i] : 1.0f, er = kGated ? Er[i] : 1.0f,
                ed = kGated ? Ed[i] : 1.0f;
    dq[i] = g.Qe[i] * eb + g.Ql[i] * el + diag * k[i];
    dk[i] = g.Kt[i] * eb + g.Kl[i] * el + g.Kr[i] * er + g.Kd[i] * ed + diag * q[i];
  }
}

void SplitFactorRowBackwardN(float* dq, float* dk, const SplitSides& g, const float* El, const float* Er,
                             const float* Eb, const float* Ed, const float* q, const float* k, float diag, int64_t n) {
  if (El)
    SplitFactorRowBackwardOf<true>(dq, dk, g, El, Er, Eb, Ed, q, k, diag, n);
  else
    SplitFactorRowBackwardOf<false>(dq, dk, g, El, Er, Eb, Ed, q, k, diag, n);
}

// dX·X in fp64 over lanes [i, i + L64).
HWY_INLINE V64 SideProduct(D64 d, const float* HWY_RESTRICT x, const float* HWY_RESTRICT dx, int64_t i) {
  const DHalf dh;
  return hn::Mul(hn::PromoteTo(d, hn::LoadU(dh, x + i)), hn::PromoteTo(d, hn::LoadU(dh, dx + i)));
}

void SplitGateRowN(float* HWY_RESTRICT db, double* HWY_RESTRICT kd_sum, const SplitSides& x, const SplitSides& g,
                   bool with_kd, int64_t n) {
  const D64 d;
  const DHalf dh;
  const int64_t L = int64_t(hn::Lanes(d));
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    V64 v = hn::Add(SideProduct(d, x.Qe, g.Qe, i), SideProduct(d, x.Kt, g.Kt, i));
    v = hn::Add(v, SideProduct(d, x.Ql, g.Ql, i));
    v = hn::Add(v, SideProduct(d, x.Kl, g.Kl, i));
    v = hn::Sub(v, SideProduct(d, x.Kr, g.Kr, i));
    if (with_kd) {
      const V64 kd = SideProduct(d, x.Kd, g.Kd, i);
      v = hn::Sub(v, kd), hn::StoreU(hn::Add(hn::LoadU(d, kd_sum + i), kd), d, kd_sum + i);
    }
    hn::StoreU(hn::DemoteTo(dh, v), dh, db + i);
  }
  for (; i < n; ++i) {
    double v = double(g.Qe[i]) * x.Qe[i] + double(g.Kt[i]) * x.Kt[i] + double(g.Ql[i]) * x.Ql[i] +
               double(g.Kl[i]) * x.Kl[i] - double(g.Kr[i]) * x.Kr[i];
    if (with_kd) {
      const double kd = double(g.Kd[i]) * x.Kd[i];
      v -= kd, kd_sum[i] += kd;
    }
    db[i] = float(v);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace linattn::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace linattn::kernels {

HWY_EXPORT(MulExpDifferenceN);
HWY_EXPORT(RunningLogDecaysN);
HWY_EXPORT(SplitFactorRowN);
HWY_EXPORT(AddGateRowN);
HWY_EXPORT(SplitFactorRowBackwardN);
HWY_EXPORT(SplitGateRowN);
HWY_EXPORT(ReverseRunningSumsN);

void mul_exp_difference(float* y, const float* x, const float* a, const float* b, float sign, int64_t n) {
  HWY_DYNAMIC_DISPATCH(MulExpDifferenceN)(y, x, a, b, sign, n);
}
int64_t running_log_decays(const ChunkDecays& c, int64_t rows, float max_span, bool from_zero, bool stop_early) {
  return HWY_DYNAMIC_DISPATCH(RunningLogDecaysN)(c, rows, max_span, from_zero, stop_early);
}

void split_factor_row(const SplitFactorRow& out, const float* q, const float* k, const float* b, const float* m,
                      const float* em, const float* enm, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SplitFactorRowN)(out, q, k, b, m, em, enm, n);
}

void add_gate_row(double* out, const float* q, const float* gq, const float* k, const float* gk, int64_t n,
                  bool sum_columns) {
  HWY_DYNAMIC_DISPATCH(AddGateRowN)(out, q, gq, k, gk, n, sum_columns);
}

void reverse_running_sums(float* dst, int64_t row, int64_t col, const double* g, int64_t rows, int64_t cols,
                          double* sum) {
  HWY_DYNAMIC_DISPATCH(ReverseRunningSumsN)(dst, row, col, g, rows, cols, sum);
}

void split_factor_row_backward(float* dq, float* dk, const SplitSides& grads, const float* El, const float* Er,
                               const float* Eb, const float* Ed, const float* q, const float* k, float diag,
                               int64_t n) {
  HWY_DYNAMIC_DISPATCH(SplitFactorRowBackwardN)(dq, dk, grads, El, Er, Eb, Ed, q, k, diag, n);
}

void split_gate_row(float* db, double* kd_sum, const SplitSides& sides, const SplitSides& grads, bool with_kd,
                    int64_t n) {
  HWY_DYNAMIC_DISPATCH(SplitGateRowN)(db, kd_sum, sides, grads, with_kd, n);
}

}  // namespace linattn::kernels
#endif  // HWY_ONCE
