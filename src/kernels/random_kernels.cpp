// SIMD kernels of the random-feature maps (see random_kernels.hpp).
#include <algorithm>
#include <cmath>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/random_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must follow foreach_target.h.
#include "kernels/random_kernels.hpp"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace linattn::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// Scalar spec: c[i][j] = fma(a[i][k-1], b[k-1][j], … fma(a[i][0], b[0][j], c0)), c0 = 0 or c[i][j].
// Four rows of a by two vectors of b (8 independent chains, each load of b used 4 times); then one
// vector; columns past the last whole vector take the scalar spec.
void OrderedGemmN(float* HWY_RESTRICT c, int64_t ldc, const float* HWY_RESTRICT a, int64_t lda,
                  const float* HWY_RESTRICT b, int64_t ldb, int64_t m, int64_t n, int64_t k, bool accumulate) {
  const D d;
  const int64_t L = int64_t(hn::Lanes(d));
  const int64_t whole = n / L * L;
  const auto start = [&](int64_t i, int64_t j) { return accumulate ? hn::LoadU(d, c + i * ldc + j) : hn::Zero(d); };
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) {
    const float* a0 = a + i * lda;
    int64_t j = 0;
    for (; j + 2 * L <= whole; j += 2 * L) {
      V c00 = start(i, j), c01 = start(i, j + L), c10 = start(i + 1, j), c11 = start(i + 1, j + L);
      V c20 = start(i + 2, j), c21 = start(i + 2, j + L), c30 = start(i + 3, j), c31 = start(i + 3, j + L);
      for (int64_t p = 0; p < k; ++p) {
        const V b0 = hn::LoadU(d, b + p * ldb + j), b1 = hn::LoadU(d, b + p * ldb + j + L);
        const V x0 = hn::Set(d, a0[p]), x1 = hn::Set(d, a0[lda + p]);
        const V x2 = hn::Set(d, a0[2 * lda + p]), x3 = hn::Set(d, a0[3 * lda + p]);
        c00 = hn::MulAdd(x0, b0, c00), c01 = hn::MulAdd(x0, b1, c01);
        c10 = hn::MulAdd(x1, b0, c10), c11 = hn::MulAdd(x1, b1, c11);
        c20 = hn::MulAdd(x2, b0, c20), c21 = hn::MulAdd(x2, b1, c21);
        c30 = hn::MulAdd(x3, b0, c30), c31 = hn::MulAdd(x3, b1, c31);
      }
      hn::StoreU(c00, d, c + i * ldc + j), hn::StoreU(c01, d, c + i * ldc + j + L);
      hn::StoreU(c10, d, c + (i + 1) * ldc + j), hn::StoreU(c11, d, c + (i + 1) * ldc + j + L);
      hn::StoreU(c20, d, c + (i + 2) * ldc + j), hn::StoreU(c21, d, c + (i + 2) * ldc + j + L);
      hn::StoreU(c30, d, c + (i + 3) * ldc + j), hn::StoreU(c31, d, c + (i + 3) * ldc + j + L);
    }
    for (; j < whole; j += L) {
      V c0 = start(i, j), c1 = start(i + 1, j), c2 = start(i + 2, j), c3 = start(i + 3, j);
      for (int64_t p = 0; p < k; ++p) {
        const V b0 = hn::LoadU(d, b + p * ldb + j);
        c0 = hn::MulAdd(hn::Set(d, a0[p]), b0, c0), c1 = hn::MulAdd(hn::Set(d, a0[lda + p]), b0, c1);
        c2 = hn::MulAdd(hn::Set(d, a0[2 * lda + p]), b0, c2), c3 = hn::MulAdd(hn::Set(d, a0[3 * lda + p]), b0, c3);
      }
      hn::StoreU(c0, d, c + i * ldc + j), hn::StoreU(c1, d, c + (i + 1) * ldc + j);
      hn::StoreU(c2, d, c + (i + 2) * ldc + j), hn::StoreU(c3, d, c + (i + 3) * ldc + j);
    }
  }
  for (; i < m; ++i)
    for (int64_t j = 0; j < whole; j += L) {
      V acc = start(i, j);
      for (int64_t p = 0; p < k; ++p) acc = hn::MulAdd(hn::Set(d, a[i * lda + p]), hn::LoadU(d, b + p * ldb + j), acc);
      hn::StoreU(acc, d, c + i * ldc + j);
    }
  for (i = 0; i < m; ++i)
    for (int64_t j = whole; j < n; ++j) {
      float acc = accumulate ? c[i * ldc + j] : 0.0f;
      for (int64_t p = 0; p < k; ++p) acc = std::fma(a[i * lda + p], b[p * ldb + j], acc);
      c[i * ldc + j] = acc;
    }
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

HWY_EXPORT(OrderedGemmN);
HWY_EXPORT(ExpShiftedN);
HWY_EXPORT(RowMaxN);

void ordered_gemm(float* c, int64_t ldc, const float* a, int64_t lda, const float* b, int64_t ldb, int64_t m, int64_t n,
                  int64_t k, bool accumulate) {
  HWY_DYNAMIC_DISPATCH(OrderedGemmN)(c, ldc, a, lda, b, ldb, m, n, k, accumulate);
}
void exp_shifted(float* y, const float* x, int64_t n, float offset, float cap, float scale) {
  HWY_DYNAMIC_DISPATCH(ExpShiftedN)(y, x, n, offset, cap, scale);
}
float row_max(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(RowMaxN)(x, n); }

}  // namespace linattn::kernels
#endif  // HWY_ONCE
